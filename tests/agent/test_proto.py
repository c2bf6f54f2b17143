"""The committed Connect stubs are what the committed .proto files generate today."""

import subprocess
from pathlib import Path

from tests.support import ROOT

AGENT = ROOT / "agent"
STUBS = AGENT / "workspace_agent" / "_proto"


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def test_the_stubs_match_the_protos(tmp_path: Path) -> None:
    subprocess.run([AGENT / "scripts" / "generate-proto", tmp_path], check=True)
    fresh, committed = _files(tmp_path), _files(STUBS)
    assert sorted(fresh) == sorted(committed)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"run agent/scripts/generate-proto: {stale} differ from the protos"


def test_the_protos_carry_the_fields_the_sdk_reads() -> None:
    # The SDK 2.63.0 reads is_symlink (field 12); envd's own protos stop at 11.
    filesystem = (AGENT / "proto" / "filesystem" / "filesystem.proto").read_text()
    assert "bool is_symlink = 12;" in filesystem
    process = (AGENT / "proto" / "process" / "process.proto").read_text()
    assert "rpc StreamInput(stream StreamInputRequest) returns (StreamInputResponse);" in process
