"""The agent as sandboxes receive it: the bundle, and the disk a VM mounts.

`agent/scripts/build-bundle` is run for real (pip installs from the index, through its cache),
and the bundle is started by another Python than this venv's, outside the venv, as a guest's
or a pod image's python3 would start it. `build-disk` turns it into the ext4 image whose files
`debugfs` lists without mounting anything.
"""

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # starts agents or gateways

AGENT = Path(__file__).resolve().parents[2] / "agent"
BUILD_BUNDLE = AGENT / "scripts" / "build-bundle"
BUILD_DISK = AGENT / "scripts" / "build-disk"
PYENV = Path.home() / ".pyenv" / "versions"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


def _version(python: Path) -> tuple[int, int] | None:
    done = subprocess.run(
        [python, "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None
    major, minor = done.stdout.split()
    return int(major), int(minor)


def another_python() -> Path:
    """A CPython 3.11 or newer that is not this venv's: Ubuntu 24.04's 3.12 first."""
    own = sys.version_info[:2]
    candidates = [PYENV / "3.12.1" / "bin" / "python3"]
    candidates += sorted(PYENV.glob("3.1[1-9]*/bin/python3"), reverse=True)
    candidates += [Path(p) for n in ("python3.12", "python3.13") if (p := shutil.which(n))]
    for python in candidates:
        found = _version(python) if python.exists() else None
        if found is not None and found >= (3, 11) and found != own:
            return python
    if os.environ.get("CI", "").lower() in {"true", "1", "yes"}:
        pytest.fail("CI needs a second CPython 3.11+ (pyenv's 3.12.1) to start the bundle with")
    pytest.skip("no CPython 3.11+ other than this venv's")


def _build(out: Path) -> Path:
    done = subprocess.run(
        [BUILD_BUNDLE, out],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("bundle") / "agent")


def _contents(tree: Path) -> dict[str, tuple[int, bytes]]:
    """Each file and link of `tree` by its relative path: its mode, and its bytes' hash."""
    found: dict[str, tuple[int, bytes]] = {}
    for path in sorted(tree.rglob("*")):
        data = os.readlink(path).encode() if path.is_symlink() else b""
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
        found[str(path.relative_to(tree))] = (path.lstat().st_mode, hashlib.sha256(data).digest())
    return found


def test_two_builds_in_different_folders_are_the_same_bytes(bundle: Path, tmp_path: Path) -> None:
    # Bytecode once named the folder, and RECORD files listed the removed console scripts with
    # the hashes of their shebangs, which name the building Python.
    again = _build(tmp_path / "elsewhere" / "deeper" / "bundle")
    first, second = _contents(bundle), _contents(again)
    assert [p for p in first.keys() | second.keys() if first.get(p) != second.get(p)] == []
    for record in again.glob("lib/*.dist-info/RECORD"):
        for line in record.read_text().splitlines():
            assert (again / "lib" / line.split(",", 1)[0]).exists(), (record, line)
    _tool("mkfs.ext4")
    disks = [_disk(b, tmp_path / f"{n}.img") for n, b in enumerate((bundle, again))]
    assert len({hashlib.sha256(d.read_bytes()).digest() for d in disks}) == 1


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (AGENT / "bundle" / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_normal(name)] = version
    return pins


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(lib: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for metadata in lib.glob("*.dist-info/METADATA"):
        fields = dict(
            line.split(": ", 1) for line in metadata.read_text().splitlines() if ": " in line
        )
        found[_normal(fields["Name"])] = fields["Version"]
    return found


def test_the_bundle_holds_the_launcher_the_boot_script_and_exactly_the_pinned_packages(
    bundle: Path,
) -> None:
    assert sorted(p.name for p in bundle.iterdir()) == ["boot.sh", "lib", "workspace-sandbox-agent"]
    installed = _installed(bundle / "lib")
    agent = installed.pop("workspace-sandbox-agent")
    assert re.fullmatch(r"\d+\.\d+\.\d+", agent)
    assert installed == _constraints()
    # Nothing that names the machine it was built on: console scripts, the source folder.
    assert not (bundle / "lib" / "bin").exists()
    assert not list((bundle / "lib").glob("*.dist-info/direct_url.json"))
    # Compiled extensions are abi3 only, so any CPython 3.11+ of this architecture loads them.
    extensions = sorted(p.name for p in (bundle / "lib").rglob("*.so"))
    assert extensions
    assert all(name.endswith(".abi3.so") for name in extensions), extensions
    # Readable by a pod's user, whoever built it.
    for path in bundle.rglob("*"):
        wanted = 0o055 if path.is_dir() else 0o044
        assert path.stat().st_mode & wanted == wanted, path


@pytest.fixture
def started(bundle: Path, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    python = another_python()
    root = tmp_path / "workspace"
    root.mkdir()
    port = free_port()
    # Outside the venv and its variables, as a guest's systemd or a pod's kubelet starts it.
    process = subprocess.Popen(
        [
            python,
            "-I",
            bundle / "workspace-sandbox-agent",
            "--address",
            f"127.0.0.1:{port}",
            "--root",
            root,
            "--user",
            "nobody",
            "--log-level",
            "warning",
        ],
        env={"PATH": SYSTEM_PATH},
        cwd=tmp_path,
    )
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_another_python_serves_the_agent_from_the_bundle(
    started: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, process = started
    deadline = time.monotonic() + 15
    while True:
        assert process.poll() is None, f"the agent exited with {process.returncode}"
        try:
            answer = httpx.get(url + "/health", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the agent never answered"
            time.sleep(0.1)
    assert answer.status_code == 204
    assert answer.headers["x-envd-version"]


def test_an_old_python_is_told_in_one_line(bundle: Path) -> None:
    old = PYENV / "3.10.13" / "bin" / "python3"
    if not old.exists():
        pytest.skip("no pyenv Python 3.10 here")
    done = subprocess.run(
        [old, bundle / "workspace-sandbox-agent", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        1,
        "workspace-sandbox-agent: needs Python 3.11 or newer, not 3.10.13\n",
    )


def _tool(name: str) -> str:
    found = shutil.which(name, path=f"{os.environ.get('PATH', '')}:/sbin:/usr/sbin")
    if found is None:
        pytest.skip(f"no {name} here (e2fsprogs)")
    return found


def _disk(bundle: Path, out: Path) -> Path:
    done = subprocess.run([BUILD_DISK, bundle, out], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    return out


def test_the_disk_is_an_ext4_image_labelled_wsagent_holding_the_bundle(
    bundle: Path, tmp_path: Path
) -> None:
    _tool("mkfs.ext4")
    image = _disk(bundle, tmp_path / "agent.img")
    listing = subprocess.run(
        [_tool("debugfs"), "-R", "ls -l /", image], capture_output=True, text=True, check=True
    ).stdout
    files = {line.split()[-1]: line.split()[1] for line in listing.splitlines() if line.strip()}
    assert {"boot.sh", "workspace-sandbox-agent", "lib"} <= files.keys()
    assert files["boot.sh"] == "100755"
    assert files["workspace-sandbox-agent"] == "100755"
    header = subprocess.run(
        [_tool("dumpe2fs"), "-h", image], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"^Filesystem volume name:\s+wsagent$", header, re.MULTILINE)
    features = re.search(r"^Filesystem features:\s+(.*)$", header, re.MULTILINE)
    assert features is not None
    assert "extent" in features[1].split()
    # Read-only in the guest: no journal to replay.
    assert "has_journal" not in features[1].split()
    check = subprocess.run([_tool("e2fsck"), "-fn", image], capture_output=True, check=False)
    assert check.returncode == 0, check.stdout


def test_the_same_bundle_makes_the_same_disk(bundle: Path, tmp_path: Path) -> None:
    _tool("mkfs.ext4")
    first = _disk(bundle, tmp_path / "a.img")
    time.sleep(1.1)  # a different second on the clock, which no byte may show
    second = _disk(bundle, tmp_path / "b.img")
    assert (
        hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    )


def test_build_disk_refuses_a_folder_that_is_no_bundle(tmp_path: Path) -> None:
    done = subprocess.run(
        [BUILD_DISK, tmp_path, tmp_path / "agent.img"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"build-disk: {tmp_path} has no workspace-sandbox-agent; build it with build-bundle\n",
    )


def test_build_bundle_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("")
    done = subprocess.run([BUILD_BUNDLE, tmp_path], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (2, f"build-bundle: {tmp_path} is not empty\n")
