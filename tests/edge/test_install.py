"""The wheel, installed into a fresh venv and run outside the checkout, answers as the checkout does.

The CLI's defaults (the shipped Composition above all) must be package data: a path into the
checkout works in development and fails after `pip install .`, from a wheel and in the image.
"""

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from function.main import cli
from tests.support import COMPOSITION, ROOT

pytestmark = pytest.mark.slow  # builds and installs the wheel

NOW = "2026-11-29T12:00:00Z"
FULL = str(ROOT / "examples" / "full" / "xr.yaml")
RUNNING = ROOT / "examples" / "running"
# Each installs in a minute at most on a warm pip cache; a cold one downloads the dependencies.
TIMEOUT = 600


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path
    elsewhere: Path


def _env() -> dict[str, str]:
    # Nothing may lead the installed interpreter back to the checkout or the development venv.
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def _run(args: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("install")
    dist, venv, elsewhere = root / "dist", root / "venv", root / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    built = _run([*pip, "wheel", ROOT, "--no-deps", "--wheel-dir", dist], root)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("*.whl")
    # A venv without pip of its own is quicker to make; this pip installs into it.
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], root)
    assert made.returncode == 0, made.stderr
    added = _run([*pip, "--python", venv / "bin" / "python", "install", wheel], root)
    assert added.returncode == 0, added.stderr
    return Installed(wheel, venv / "bin", elsewhere)


def test_the_wheel_ships_the_composition(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        shipped = wheel.read("function/compositions/workspacesandbox.yaml")
    assert shipped == COMPOSITION.read_bytes()


def test_the_installed_package_is_imported_from_the_venv(installed: Installed) -> None:
    found = _run(
        [installed.bin / "python", "-c", "import function; print(function.__file__)"],
        installed.elsewhere,
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(installed.bin.parent)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["render", FULL, "--now", NOW], id="render"),
        pytest.param(
            [
                "render",
                str(RUNNING / "xr.yaml"),
                "-o",
                str(RUNNING / "observed.yaml"),
                "--include-function-results",
                "--now",
                NOW,
            ],
            id="render-observed",
        ),
        pytest.param(["policy", "guard"], id="policy-guard"),
        pytest.param(["policy", "explain", FULL], id="policy-explain"),
    ],
)
def test_installed_cli_answers_as_the_checkout(installed: Installed, args: list[str]) -> None:
    got = _run([installed.bin / "workspace-sandbox", *args], installed.elsewhere)
    assert got.returncode == 0, got.stderr
    want = CliRunner().invoke(cli, args)
    assert want.exit_code == 0, want.output
    assert got.stdout == want.stdout
