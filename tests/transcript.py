"""Run `workspace-sandbox` commands in-process and print one transcript of everything they wrote.

tests/edge/test_python_versions.py runs this under every supported Python and compares the bytes:
`python -m tests.transcript CASES.json` from the repository root, where CASES.json is a list of
[label, [argument, ...]]. It needs the function's runtime dependencies only, not the test ones.
"""

import json
import sys
from pathlib import Path

from click.testing import CliRunner

from function.main import cli


def transcript(cases: list[tuple[str, list[str]]]) -> str:
    parts = []
    for label, args in cases:
        result = CliRunner().invoke(cli, args)
        # A crash is output too: one Python raising where another prints must show as a diff.
        crash = result.exception if not isinstance(result.exception, SystemExit | None) else None
        head = f"=== {label}: exit {result.exit_code}" + (f" ({crash!r})" if crash else "")
        parts.append(f"{head}\n{result.stdout}--- stderr\n{result.stderr}")
    return "".join(parts)


if __name__ == "__main__":
    cases = json.loads(Path(sys.argv[1]).read_text())
    sys.stdout.buffer.write(transcript(cases).encode())
