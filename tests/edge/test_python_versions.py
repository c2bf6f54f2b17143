"""One output on every supported Python: renders, the guard, audits and messages, byte for byte.

The image runs its base image's Python (Dockerfile) and CI may run another, and the standard
library's text for some values changes between Pythons (`ipaddress` writes IPv4-mapped
addresses differently since 3.13). So the same commands run under each supported Python found
on this machine, in a fresh process, and must print exactly what this venv prints. The other
Pythons get a venv of their own with the runtime dependencies at this venv's versions, so that
only the interpreter differs, and import the function from this checkout.
"""

import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import distributions, requires
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tests.support import COMPOSITION, EXAMPLES, NOW_ARG, ROOT, render_args

pytestmark = pytest.mark.slow  # builds a venv per Python

SUPPORTED = ("3.11", "3.12", "3.13")
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
_IMAGE_ASSERTION = re.compile(r"sys\.version_info\[:2\] == \((\d+), (\d+)\)")


def image_python() -> str:
    """The Python minor version the Dockerfile's build stage asserts."""
    found = _IMAGE_ASSERTION.search((ROOT / "Dockerfile").read_text())
    assert found, "the Dockerfile no longer asserts its Python version"
    return f"{found[1]}.{found[2]}"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"true", "1", "yes"}


class Python(NamedTuple):
    executable: str | None
    why: str = ""
    """Why there is no executable."""
    broken: bool = False
    """The interpreter exists, but its venv could not be built."""


def _unavailable(version: str, python: Python) -> None:
    # Locally a missing Python is the developer's choice. CI must check the image's Python,
    # the one that serves every request, and must not lose a Python to a failed install.
    if _in_ci() and (python.broken or version == image_python()):
        pytest.fail(f"Python {version} must be tested in CI: {python.why}")
    pytest.skip(f"Python {version}: {python.why}")


def _find(version: str) -> tuple[str, str] | None:
    """A working interpreter for `version` (on PATH, or installed by pyenv) and its x.y.z."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = [shutil.which(f"python{version}"), *pyenv.glob(f"{version}.*/bin/python{version}")]
    probe = "import platform, sys; print(platform.python_version(), sys.executable)"
    for exe in filter(None, found):
        # pyenv puts a shim on PATH for every installed version; it runs only the active ones.
        run = subprocess.run([exe, "-c", probe], capture_output=True, text=True, check=False)
        full, _, real = run.stdout.strip().partition(" ")
        if run.returncode == 0 and full.startswith(f"{version}."):
            return real, full
    return None


def _requirements() -> tuple[list[str], str]:
    """The function's runtime requirements, and this venv's versions of everything it has."""
    wanted = [r for r in requires("function-workspace-sandbox") or [] if "extra ==" not in r]
    assert wanted, "no runtime requirements found: is the project installed in this venv?"
    installed = {d.metadata["Name"].lower(): d.version for d in distributions()}
    installed.pop("function-workspace-sandbox", None)
    return wanted, "".join(f"{n}=={v}\n" for n, v in sorted(installed.items()))


def _venvs(tmp: Path) -> Path:
    # Kept inside this venv, so that they go when it goes; outside a venv, kept for this session.
    return Path(sys.prefix) / "pythons" if sys.prefix != sys.base_prefix else tmp


@pytest.fixture(scope="session")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Python]:
    """Each supported version's interpreter with the runtime dependencies, or why there is none.

    The other versions' venvs are built side by side, once for each interpreter and set of
    versions: their directory's name is a digest of both.
    """
    tmp = tmp_path_factory.mktemp("pythons")
    wanted, pins = _requirements()
    constraints = tmp / "constraints.txt"
    constraints.write_text(pins)
    out = {HERE: Python(sys.executable)}
    building: dict[str, tuple[Path, Path, subprocess.Popen[bytes]]] = {}
    for version in (v for v in SUPPORTED if v != HERE):
        found = _find(version)
        if found is None:
            out[version] = Python(None, f"no python{version} on PATH or in pyenv")
            continue
        exe, full = found
        digest = hashlib.sha256("\n".join([exe, full, pins, *wanted]).encode()).hexdigest()
        venv = _venvs(tmp) / f"{full}-{digest[:12]}"
        if (venv / "bin" / "python").exists():
            out[version] = Python(str(venv / "bin" / "python"))
            continue
        # Built beside its final place and moved there whole, so no half-built venv is reused.
        partial = venv.with_name(f"{venv.name}.{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run([exe, "-m", "venv", "--without-pip", partial], check=True)
        pip = [sys.executable, "-m", "pip", "--python", partial / "bin" / "python", "install"]
        args = [*pip, "--quiet", "--no-compile", "--constraint", constraints, *wanted]
        building[version] = (partial, venv, subprocess.Popen(args, stderr=subprocess.PIPE))
    for version, (partial, venv, pip_run) in building.items():
        _, err = pip_run.communicate(timeout=600)
        if pip_run.returncode != 0:
            tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
            out[version] = Python(None, f"pip could not install: {tail}", broken=True)
            shutil.rmtree(partial, ignore_errors=True)
            continue
        try:
            partial.rename(venv)
        except OSError:  # another session built the same venv first
            shutil.rmtree(partial, ignore_errors=True)
        out[version] = Python(str(venv / "bin" / "python"))
    return out


def _write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _xr(tmp: Path, name: str, network: dict[str, object]) -> Path:
    return _write(
        tmp / f"{name}.yaml",
        {
            "apiVersion": "sandbox.cozystack.io/v1alpha1",
            "kind": "WorkspaceSandbox",
            "metadata": {"name": "alice-api", "namespace": "tenant-acme"},
            "spec": {"image": "ubuntu-24.04", "network": network},
        },
    )


def _composition(tmp: Path, name: str, network: dict[str, object]) -> Path:
    composition = yaml.safe_load(COMPOSITION.read_text())
    step = composition["spec"]["pipeline"][0]["input"]
    step["network"] = {**step["network"], **network}
    return _write(tmp / f"{name}.yaml", composition)


# Allow-list entries whose messages print IPv6 networks, most of them IPv4-embedding ones.
BAD_CIDRS = (
    "::ffff:a00:0/104",
    "::ffff:10.0.0.0/104",
    "::ffff:0:0/95",
    "::ffff:1.2.3.4/96",
    "::ffff:0:0/96",
    "::a00:0/104",
    "::0.0.0.1/128",
    "64:ff9b::a00:0/120",
    "64:ff9b::10.0.0.0/120",
    "2002:a00::/24",
    "2001:DB8::/32",
    "2001:db8:0:0:1::/80",
    "fe80::/64",
)


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    out = [(f"render {c.name}", render_args(c)) for c in EXAMPLES]
    minimal, kata = ROOT / "examples/minimal/xr.yaml", ROOT / "examples/kata"
    v6_allow = _xr(
        tmp,
        "allow-v6",
        {"egress": "Allowlist", "allow": [{"cidr": "2a04:4e42::/32", "ports": [443]}]},
    )
    site_v6 = _composition(tmp, "site-v6", {"siteDenyCidrs": ["2a01:4f8::/32", "185.12.64.0/22"]})
    out += [
        ("guard", ["policy", "guard"]),
        ("guard with an IPv6 site list", ["policy", "guard", "--composition", str(site_v6)]),
        ("render an IPv6 allow-list", ["render", str(v6_allow), "--now", NOW_ARG]),
        ("audit minimal", ["policy", "explain", str(minimal)]),
        ("audit kata", ["policy", "explain", str(kata / "xr.yaml")]),
        ("audit an IPv6 allow-list", ["policy", "explain", str(v6_allow)]),
    ]
    flows = {
        "to a mapped metadata address": ["--to", "::ffff:169.254.169.254", "--port", "80"],
        "to a mapped address, hex": ["--to", "::ffff:a9fe:a9fe", "--port", "80"],
        "to a compatible address": ["--to", "::a9fe:a9fe", "--port", "80"],
        "to NAT64": ["--to", "64:ff9b::10.0.0.5", "--port", "443"],
        "from a mapped address": ["--from", "::ffff:198.51.100.7", "--port", "49983"],
        "to an allowed IPv6 address": ["--to", "2a04:4e42::223", "--port", "443"],
    }
    for label, flow in flows.items():
        out.append((f"explain minimal {label}", ["policy", "explain", str(minimal), *flow]))
        out.append((f"explain allow-v6 {label}", ["policy", "explain", str(v6_allow), *flow]))
    mapped = ["--to", "::ffff:10.0.0.5", "--port", "443", "--enforcement", "kubernetes"]
    out.append(("explain kubernetes enforcement", ["policy", "explain", str(minimal), *mapped]))
    for i, cidr in enumerate(BAD_CIDRS):
        bad = _xr(tmp, f"bad-{i}", {"egress": "Allowlist", "allow": [{"cidr": cidr}]})
        out.append((f"allow {cidr}", ["render", str(bad), "--now", NOW_ARG]))
    overlap = [{"cidr": "2a01:4f8::/32"}, {"cidr": "2a01:4f8:1::/48", "ports": [22]}]
    bad = _xr(tmp, "bad-overlap", {"egress": "Allowlist", "allow": overlap})
    out.append(("allow overlapping IPv6", ["render", str(bad), "--now", NOW_ARG]))
    platforms = {
        "site ::ffff:0:0/95": {"siteDenyCidrs": ["::ffff:0:0/95"]},
        "site ::ffff:10.0.0.0/104": {"siteDenyCidrs": ["::ffff:10.0.0.0/104"]},
        "resolver ::ffff:9.9.9.9": {"resolvers": ["::ffff:9.9.9.9"]},
        "resolver 64:ff9b::9.9.9.9": {"resolvers": ["64:ff9b::9.9.9.9"]},
        "resolver in the site list": {
            "resolvers": ["2620:fe::fe"],
            "siteDenyCidrs": ["2620:fe::/48"],
        },
    }
    for i, (label, network) in enumerate(platforms.items()):
        composition = str(_composition(tmp, f"platform-{i}", network))
        render = ["render", str(minimal), "--composition", composition, "--now", NOW_ARG]
        out.append((f"render with {label}", render))
        out.append((f"guard with {label}", ["policy", "guard", "--composition", composition]))
    return out


@pytest.fixture(scope="session")
def case_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cases")
    path = tmp / "cases.json"
    path.write_text(json.dumps(cases(tmp)))
    return path


def transcript(python: str, case_file: Path) -> str:
    # The module comes from this checkout (cwd), not from an install; no PYTHONHASHSEED or
    # PYTHONPATH from the caller.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    run = subprocess.run(
        [python, "-m", "tests.transcript", str(case_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    return run.stdout.decode()


@pytest.fixture(scope="session")
def reference(case_file: Path) -> str:
    return transcript(sys.executable, case_file)


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_python_prints_the_same_bytes(
    version: str, pythons: dict[str, Python], case_file: Path, reference: str
) -> None:
    python = pythons[version]
    if python.executable is None:
        _unavailable(version, python)
        return
    # This venv's own version runs again in a fresh process: hash seeds differ between the two.
    got = transcript(python.executable, case_file)
    diff = difflib.unified_diff(
        reference.splitlines(keepends=True),
        got.splitlines(keepends=True),
        f"python{HERE} (this venv)",
        f"python{version}",
    )
    assert got == reference, "".join(diff)


def test_the_transcript_covers_what_the_test_promises(reference: str) -> None:
    assert reference.count("=== render ") > len(EXAMPLES)
    assert "::ffff:0:0/96" in reference  # the guard's and every policy's deny list
    assert "is not canonical; write it as ::ffff:a00:0/104" in reference
    assert "::ffff:0:0/95 has host bits set" in reference
    assert "matches ::ffff:a9fe:a9fe (toCIDRSet ::ffff:0:0/96)" in reference


def test_the_image_runs_a_python_this_test_covers() -> None:
    assert image_python() in SUPPORTED


def test_the_covered_pythons_are_the_supported_ones() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = SpecifierSet(project["requires-python"])
    assert [f"3.{m}" for m in range(20) if f"3.{m}" in allowed] == list(SUPPORTED)
