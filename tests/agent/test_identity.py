"""Acting as a user, in process: which thread holds which credentials, and when.

The kernel reports each thread's credentials in /proc/self/task/<tid>/status: the fourth `Uid`
and `Gid` fields are the filesystem ids, `Groups` the supplementary groups.
"""

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from connectrpc.code import Code
from workspace_agent.errors import AgentError
from workspace_agent.identity import Credentials, Identity
from workspace_agent.users import User

from tests.agent.sdk.conftest import NOBODY, ROOT

pytestmark = pytest.mark.skipif(not ROOT, reason="switching credentials needs root")

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
    return Credentials(int(fields["Uid"][3]), int(fields["Gid"][3]), groups)


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


async def test_root_and_unprivileged_agents_do_not_switch() -> None:
    for identity, user in (
        (Identity(privileged=True), AS_ROOT),
        (Identity(privileged=False), AS_NOBODY),
    ):
        assert await identity.run(user, credentials) == credentials()
