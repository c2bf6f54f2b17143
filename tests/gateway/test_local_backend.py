"""The local backend's own bookkeeping, with real agent processes."""

import asyncio
import getpass
import os

import pytest
from workspace_gateway import local_backend
from workspace_gateway.backend import NewSandbox
from workspace_gateway.local_backend import LocalBackend
from workspace_gateway.main import find_agent

# As root the agents act as nobody, so that no command reads root's login profile.
USER = "nobody" if os.geteuid() == 0 else getpass.getuser()


async def test_two_creates_at_once_never_share_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may name one free port twice before either agent binds it."""
    first, second = local_backend.free_port(), local_backend.free_port()
    answers = iter([first, first, second])
    monkeypatch.setattr(local_backend, "free_port", lambda: next(answers))
    agent = find_agent()
    assert agent is not None
    backend = LocalBackend(agent, USER)
    try:
        made = await asyncio.gather(
            backend.create("local", NewSandbox("base", 60)),
            backend.create("local", NewSandbox("base", 60)),
        )
        endpoints = {m.endpoint for m in made}
        assert endpoints == {f"http://127.0.0.1:{first}", f"http://127.0.0.1:{second}"}
        assert backend.ports == {first, second}
        await backend.delete("local", made[0].sandbox_id)
        assert len(backend.ports) == 1
    finally:
        await backend.close()
    assert backend.ports == set()
    assert backend.processes == {}
