"""Acting as a user: file work done with the kernel checking the caller's user, not the agent's.

Running as root in a VM, the agent must not read, write or follow a symbolic link with more
authority than the user a request names. Checking paths in user space can't be made right (every
component may be a link, and anything can change between the check and the use), so the agent
lets the kernel check instead: the work runs on a thread whose *filesystem* credentials are the
user's. Linux keeps credentials per thread; `setfsuid`/`setfsgid` change only the calling thread's
(glibc calls the system call directly), so the rest of the agent stays root. Supplementary groups
must change on that thread too, and glibc's `setgroups` would copy them to every thread of the
process, so the raw system call is used. With those three set the kernel enforces permissions on
every path component and every link, files and directories created belong to the user (no
`chown`, no window between creating and chowning), and an open file stays readable or writable
after the thread switches back: open as the user, stream the descriptor afterwards.

Changing the filesystem ids drops only the capabilities that override file permissions; the
thread would keep root's others, and some of them open files too: with `CAP_SYS_PTRACE`,
`/proc/<a root process>/cwd` leads behind a directory only root may enter. So the thread also
empties its effective capabilities (`capset(2)`, per thread like the rest, by the raw system
call), and keeps them permitted, so that it can take them back afterwards. It does that last on
the way in, and takes them back first on the way out, as setting ids needs them.

A dedicated pool of threads does this work. Each job verifies the thread is root on the way in,
switches, runs, switches back and verifies again. A thread that cannot be put back is never used
again: it reports the failure and ends, and a fresh one is started from the event loop's thread,
never from a worker, because a new thread inherits its creator's credentials. Work as root, or
when the agent isn't root (in a pod it can only be itself), runs on ordinary threads.
"""

import asyncio
import ctypes
import logging
import os
import platform
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from connectrpc.code import Code

from workspace_agent.errors import AgentError
from workspace_agent.users import User

T = TypeVar("T")

log = logging.getLogger(__name__)

# System call numbers by architecture; the generic table (arm64, riscv) shares one number.
SETGROUPS = {"x86_64": 116, "aarch64": 159, "riscv64": 159}
CAPGET = {"x86_64": 125, "aarch64": 90, "riscv64": 90}
CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91}
_CAPABILITY_VERSION_3 = 0x20080522  # 64 bits of each set, as two 32-bit halves
_UNCHANGED = 0xFFFFFFFF  # (uid_t)-1: changes nothing, and the call answers the current value
MAX_WORKERS = 16


@dataclass(frozen=True)
class Credentials:
    uid: int
    gid: int
    groups: tuple[int, ...]
    capabilities: int = 0
    """The effective set, as a bit mask: a user's is empty."""

    @classmethod
    def of(cls, user: User) -> "Credentials":
        return cls(user.uid, user.gid, tuple(sorted(set(user.groups))))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


class _Kernel:
    """The calling thread's filesystem credentials and capabilities: libc and raw system calls."""

    def __init__(self) -> None:
        machine = platform.machine()
        if machine not in SETGROUPS:
            raise AgentError(Code.INTERNAL, f"acting as users is not supported on {machine}")
        self._setgroups = SETGROUPS[machine]
        self._capget = CAPGET[machine]
        self._capset = CAPSET[machine]
        libc = ctypes.CDLL(None, use_errno=True)
        self._setfsuid = libc.setfsuid
        self._setfsgid = libc.setfsgid
        self._syscall = libc.syscall
        for f in (self._setfsuid, self._setfsgid):
            f.argtypes = [ctypes.c_uint]
            f.restype = ctypes.c_int
        self._syscall.restype = ctypes.c_long

    def current(self) -> Credentials:
        return Credentials(
            self._setfsuid(_UNCHANGED),
            self._setfsgid(_UNCHANGED),
            tuple(sorted(set(os.getgroups()))),  # getgroups(2) answers for this thread
            self._capabilities()[0],
        )

    def assume(self, want: Credentials) -> None:
        """Switch this thread to `want` and check that the kernel took each part.

        Capabilities `want` has and this thread lacks come back first, as the ids need them to
        change; the effective set becomes exactly `want`'s last.
        """
        effective, _ = self._capabilities()
        if want.capabilities & ~effective:
            self._set_effective(effective | want.capabilities)
        groups = (ctypes.c_uint * len(want.groups))(*want.groups)
        if self._syscall(ctypes.c_long(self._setgroups), ctypes.c_size_t(len(want.groups)), groups):
            err = ctypes.get_errno()
            raise OSError(err, f"setgroups: {os.strerror(err)}")
        self._setfsgid(want.gid)
        self._setfsuid(want.uid)
        self._set_effective(want.capabilities)
        got = self.current()
        if got != want:
            raise OSError(f"filesystem credentials are {got}, not {want}")

    def _capabilities(self) -> tuple[int, tuple[_CapData, _CapData]]:
        """This thread's effective set, and all three sets as capget(2) gave them."""
        header = _CapHeader(_CAPABILITY_VERSION_3, 0)  # pid 0: the calling thread
        data = (_CapData * 2)()
        if self._syscall(ctypes.c_long(self._capget), ctypes.byref(header), data):
            err = ctypes.get_errno()
            raise OSError(err, f"capget: {os.strerror(err)}")
        return data[0].effective | data[1].effective << 32, (data[0], data[1])

    def _set_effective(self, effective: int) -> None:
        """Make `effective` this thread's effective set; the other two sets stay as they are."""
        _, (low, high) = self._capabilities()
        low.effective, high.effective = effective & 0xFFFFFFFF, effective >> 32
        header = _CapHeader(_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)(low, high)
        if self._syscall(ctypes.c_long(self._capset), ctypes.byref(header), data):
            err = ctypes.get_errno()
            raise OSError(err, f"capset: {os.strerror(err)}")


Job = tuple["Future[Any]", Credentials, Callable[[], Any]]


class Identity:
    """Runs blocking file work with the filesystem authority of a request's user."""

    def __init__(self, *, privileged: bool) -> None:
        self.privileged = privileged
        self._kernel = _Kernel() if privileged else None
        self._root = self._kernel.current() if self._kernel else None
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = 0
        self._idle = 0

    async def run(self, user: User, work: Callable[[], T]) -> T:
        """`work()` on a thread acting as `user`; its exceptions are raised here."""
        if self._kernel is None or user.uid == 0:
            return await asyncio.to_thread(work)
        future: Future[T] = Future()
        self._jobs.put((future, Credentials.of(user), work))
        self._start_worker_if_needed()
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        with self._lock:
            alive = self._alive
        for _ in range(alive):
            self._jobs.put(None)

    def _start_worker_if_needed(self) -> None:
        assert self._kernel is not None  # noqa: S101  # run() only queues when privileged
        with self._lock:
            if self._idle > 0 or self._alive >= MAX_WORKERS:
                return
            self._alive += 1
            self._idle += 1
        # The new thread inherits this thread's credentials: it must be root.
        if self._kernel.current() != self._root:
            with self._lock:
                self._alive -= 1
                self._idle -= 1
            raise AgentError(Code.INTERNAL, "the agent's own thread is not root")
        threading.Thread(target=self._work, name="as-user", daemon=True).start()

    def _work(self) -> None:
        assert self._kernel is not None  # noqa: S101  # set before the thread starts
        assert self._root is not None  # noqa: S101  # set before the thread starts
        try:
            while (job := self._jobs.get()) is not None:
                with self._lock:
                    self._idle -= 1
                if not self._one(job, self._kernel, self._root):
                    return
                with self._lock:
                    self._idle += 1
            with self._lock:
                self._idle -= 1
        finally:
            with self._lock:
                self._alive -= 1

    @staticmethod
    def _one(job: Job, kernel: _Kernel, root: Credentials) -> bool:
        """Run one job; False when this thread must not be used again."""
        future, who, work = job
        if not future.set_running_or_notify_cancel():
            return True
        if kernel.current() != root:
            log.critical("a worker thread is not root before a job; retiring it")
            future.set_exception(AgentError(Code.INTERNAL, "cannot act as the user"))
            return False
        try:
            kernel.assume(who)
        except OSError as e:
            log.error("cannot act as uid %d: %s", who.uid, e)
            outcome: tuple[bool, Any] = (False, AgentError(Code.INTERNAL, "cannot act as the user"))
        else:
            try:
                outcome = (True, work())
            except BaseException as e:  # handed to the waiting request
                outcome = (False, e)
        try:
            kernel.assume(root)
        except OSError as e:
            log.critical("cannot switch a worker thread back to root (%s); retiring it", e)
            future.set_exception(AgentError(Code.INTERNAL, "cannot switch credentials back"))
            return False
        ok, value = outcome
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)
        return True
