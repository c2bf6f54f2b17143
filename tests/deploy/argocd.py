"""deploy/argocd and what the tests of it share: its files, and the function run with its requirements answered."""

from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import offline
from function.fn import FunctionRunner
from tests.support import (
    NOW,
    ROOT,
    load_stream,
)

ARGOCD = ROOT / "deploy" / "argocd"
HEALTH_LUA = ARGOCD / "health.lua"
HEALTH_KEY = "resource.customizations.health.sandbox.cozystack.io_WorkspaceSandbox"
GOLDEN = ROOT / "tests" / "golden"


async def run_answered(req: fnv1.RunFunctionRequest, case: Path | None) -> Any:
    """Run in requirement rounds, as Crossplane does, offering the example's required.yaml."""
    path = None if case is None else case / "required.yaml"
    pool = load_stream(path) if path is not None and path.exists() else []
    runner = FunctionRunner(clock=lambda: NOW)
    return await offline.run(runner, offline.Offline(req, "", pool))
