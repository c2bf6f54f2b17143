"""Jupyter's messages as the code interpreter SDK reads them: one JSON object a line.

`run_code` streams `/execute`'s answer line by line and keeps, by `type`: `stdout` and `stderr`
(`text`, `timestamp`), `result` (one field a format, `is_main_result` for the cell's value),
`error` (`name`, `value`, `traceback` as one string) and `number_of_executions`. Kernels speak
MIME types; this module is the one place that maps them.
"""

import json
from datetime import UTC, datetime
from typing import Any

FORMATS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
"""The MIME types a result carries, by the SDK's field names; others go under `extra`."""


def line(value: dict[str, Any]) -> bytes:
    """One line of `/execute`'s answer."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def timestamp() -> str:
    return datetime.now(UTC).isoformat()


def translate(message: dict[str, Any]) -> dict[str, Any] | None:
    """The SDK's line for one iopub message of an execution, or None: nothing to tell it."""
    kind = message["msg_type"]
    content = message["content"]
    if kind == "stream":
        name = "stderr" if content.get("name") == "stderr" else "stdout"
        return {"type": name, "text": content.get("text", ""), "timestamp": timestamp()}
    if kind in {"execute_result", "display_data"}:
        return result(content.get("data", {}), is_main_result=kind == "execute_result")
    if kind == "error":
        return {
            "type": "error",
            "name": content.get("ename", ""),
            "value": content.get("evalue", ""),
            "traceback": "\n".join(content.get("traceback", [])),
        }
    if kind == "execute_input":
        return {"type": "number_of_executions", "execution_count": content.get("execution_count")}
    return None


def result(data: dict[str, Any], *, is_main_result: bool) -> dict[str, Any]:
    """A `result` line from a MIME bundle: the known formats by name, the rest as `extra`."""
    out: dict[str, Any] = {"type": "result", "is_main_result": is_main_result}
    extra = {}
    for mime, value in data.items():
        field = FORMATS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            out[field] = value
    if extra:
        out["extra"] = extra
    return out
