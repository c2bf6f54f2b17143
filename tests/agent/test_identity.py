"""Acting as a user, in process: which thread holds which credentials, and when.

The kernel reports each thread's credentials in /proc/self/task/<tid>/status: the fourth `Uid`
and `Gid` fields are the filesystem ids, `Groups` the supplementary groups, `CapEff` the
effective capabilities.
"""

import asyncio
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from connectrpc.code import Code
from workspace_agent.errors import AgentError
from workspace_agent.identity import Credentials, Identity
from workspace_agent.users import User

from tests.agent.sdk.agents import NOBODY, ROOT, Running

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ROOT, reason="switching credentials needs root"),
]

AS_NOBODY = User(
    name="nobody",
    uid=NOBODY.pw_uid,
    gid=NOBODY.pw_gid,
    groups=tuple(os.getgrouplist("nobody", NOBODY.pw_gid)),
    home=Path("/nonexistent"),
)
AS_ROOT = User(name="root", uid=0, gid=0, groups=(0,), home=Path("/root"))
ADM = 4  # a group root joins here as a supplementary group, to see it dropped and restored


def credentials(tid: int | None = None) -> Credentials:
    path = f"/proc/self/task/{tid}/status" if tid else "/proc/thread-self/status"
    fields = {
        line.split(":")[0]: line.split(":", 1)[1].split()
        for line in Path(path).read_text().splitlines()
    }
    groups = tuple(sorted(int(g) for g in fields["Groups"]))
    effective = int(fields["CapEff"][0], 16)
    return Credentials(int(fields["Uid"][3]), int(fields["Gid"][3]), groups, effective)


@pytest.fixture
def root_in_adm() -> Iterator[Credentials]:
    """This process's root with `adm` as a supplementary group, as a root with groups would be."""
    before = os.getgroups()
    os.setgroups([ADM])
    try:
        yield credentials()
    finally:
        os.setgroups(before)


async def test_a_job_runs_with_the_users_credentials_and_its_thread_returns_to_root(
    root_in_adm: Credentials,
) -> None:
    identity = Identity(privileged=True)

    def inside() -> tuple[int, Credentials]:
        return threading.get_native_id(), credentials()

    tid, seen = await identity.run(AS_NOBODY, inside)
    assert seen == Credentials.of(AS_NOBODY)
    assert credentials(tid) == root_in_adm  # the worker, now idle, is root again
    assert credentials() == root_in_adm  # and this thread never changed
    identity.close()


async def test_a_job_has_no_capabilities_and_its_thread_gets_roots_back(
    root_in_adm: Credentials,
) -> None:
    assert root_in_adm.capabilities != 0
    identity = Identity(privileged=True)
    tid, seen = await identity.run(AS_NOBODY, lambda: (threading.get_native_id(), credentials()))
    assert seen.capabilities == 0
    assert credentials(tid).capabilities == root_in_adm.capabilities
    identity.close()


async def test_other_threads_keep_root_while_a_job_runs(root_in_adm: Credentials) -> None:
    identity = Identity(privileged=True)
    inside, release = threading.Event(), threading.Event()

    def held() -> None:
        inside.set()
        release.wait(10)

    job = asyncio.ensure_future(identity.run(AS_NOBODY, held))
    await asyncio.to_thread(inside.wait, 10)
    others = [int(t) for t in os.listdir("/proc/self/task")]
    as_nobody = [t for t in others if credentials(t) != root_in_adm]
    release.set()
    await job
    assert len(as_nobody) == 1  # the one worker; every other thread kept root's groups too
    identity.close()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory anyone may enter, owned by nobody, with one file only group adm may read."""
    path = Path(tempfile.mkdtemp(prefix="identity-"))
    path.chmod(0o755)
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    adm_only = path / "adm-only.txt"
    adm_only.write_text("for adm")
    os.chown(adm_only, 0, ADM)
    adm_only.chmod(0o040)
    yield path
    shutil.rmtree(path)


def read(path: Path) -> str:
    return path.read_text()


async def test_supplementary_groups_are_the_users_not_roots(
    root_in_adm: Credentials, open_dir: Path
) -> None:
    del root_in_adm
    identity = Identity(privileged=True)
    with pytest.raises(PermissionError):  # with root's groups left on, adm would let it in
        await identity.run(AS_NOBODY, lambda: read(open_dir / "adm-only.txt"))
    as_adm = User("adm-member", NOBODY.pw_uid, NOBODY.pw_gid, (NOBODY.pw_gid, ADM), Path("/"))
    assert await identity.run(as_adm, lambda: read(open_dir / "adm-only.txt")) == "for adm"
    identity.close()


async def test_files_created_belong_to_the_user(open_dir: Path) -> None:
    identity = Identity(privileged=True)
    made = await identity.run(AS_NOBODY, lambda: os.stat(_create(open_dir / "made.txt")))
    assert (made.st_uid, made.st_gid) == (NOBODY.pw_uid, NOBODY.pw_gid)
    identity.close()


def _create(path: Path) -> Path:
    path.write_text("x")
    return path


async def test_errors_reach_the_caller_and_the_worker_carries_on() -> None:
    identity = Identity(privileged=True)

    def fail() -> int:
        raise ValueError("from the job")

    with pytest.raises(ValueError, match="from the job"):
        await identity.run(AS_NOBODY, fail)
    tid = await identity.run(AS_NOBODY, threading.get_native_id)
    assert credentials(tid).uid == 0
    identity.close()


async def test_a_thread_that_cannot_switch_back_is_retired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    identity = Identity(privileged=True)
    kernel = identity._kernel  # the one seam to make the kernel refuse
    assert kernel is not None
    real = kernel.assume
    failed: list[int] = []

    def refuse_root_once(want: Credentials) -> None:
        real(want)
        if want.uid == 0 and not failed:
            failed.append(threading.get_native_id())
            real(Credentials.of(AS_NOBODY))  # as if the switch back had not happened
            raise OSError("refused")

    monkeypatch.setattr(kernel, "assume", refuse_root_once)
    with pytest.raises(AgentError) as raised:
        await identity.run(AS_NOBODY, threading.get_native_id)
    assert raised.value.code == Code.INTERNAL
    await asyncio.sleep(0.1)
    assert str(failed[0]) not in os.listdir("/proc/self/task")  # that thread has ended
    tid = await identity.run(AS_NOBODY, threading.get_native_id)
    assert tid != failed[0]
    assert credentials(tid).uid == 0
    identity.close()


@pytest.fixture
def root_only_cwd() -> Iterator[tuple[int, Path]]:
    """A root process (`sleep`) whose cwd is inside a directory only root may enter.

    The cwd itself and its file are open to all: only the way there is closed, so the only way
    in is the process's own link to it.
    """
    hidden = Path(tempfile.mkdtemp(prefix="root-only-"))
    hidden.chmod(0o700)
    inside = hidden / "inside"
    inside.mkdir(mode=0o755)
    (inside / "secret.txt").write_text("root's")
    (inside / "secret.txt").chmod(0o644)
    sleeper = subprocess.Popen(["sleep", "60"], cwd=inside)
    yield sleeper.pid, inside
    sleeper.kill()
    sleeper.wait()
    shutil.rmtree(hidden)


async def test_a_user_cannot_reach_behind_a_root_process_cwd(
    root_only_cwd: tuple[int, Path],
) -> None:
    """Following /proc/<pid>/cwd needs CAP_SYS_PTRACE against a process of another user."""
    pid, inside = root_only_cwd
    identity = Identity(privileged=True)
    with pytest.raises(PermissionError):  # the way there is closed
        await identity.run(AS_NOBODY, lambda: read(inside / "secret.txt"))
    with pytest.raises(PermissionError):
        await identity.run(AS_NOBODY, lambda: read(Path(f"/proc/{pid}/cwd/secret.txt")))
    assert await identity.run(AS_ROOT, lambda: read(Path(f"/proc/{pid}/cwd/secret.txt")))
    identity.close()


def test_through_the_agent_a_user_cannot_read_behind_a_root_process_cwd(
    agent: Running, root_only_cwd: tuple[int, Path]
) -> None:
    pid, _ = root_only_cwd
    path = f"/proc/{pid}/cwd/secret.txt"
    r = agent.get("/files", params={"path": path, "username": "nobody"})
    assert (r.status_code, r.json()["code"]) == (403, 403), r.text
    r = agent.post(
        "/filesystem.Filesystem/Stat",
        json={"path": path},
        headers={"connect-protocol-version": "1", "authorization": "Basic bm9ib2R5Og=="},
    )
    assert (r.status_code, r.json()["code"]) == (403, "permission_denied"), r.text
    r = agent.get("/files", params={"path": path, "username": "root"})
    assert (r.status_code, r.text) == (200, "root's")


async def test_root_and_unprivileged_agents_do_not_switch() -> None:
    for identity, user in (
        (Identity(privileged=True), AS_ROOT),
        (Identity(privileged=False), AS_NOBODY),
    ):
        assert await identity.run(user, credentials) == credentials()
