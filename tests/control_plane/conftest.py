from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.install import Installed, install
from tests.control_plane.server import ControlPlane, control_plane


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane for the tier; tests keep to namespaces and names of their own."""
    root: Path = tmp_path_factory.mktemp("control-plane")
    with control_plane(root) as started:
        yield started


@pytest.fixture(scope="session")
def installed(plane: ControlPlane) -> Installed:
    """The plane with the upstream CRDs and the shipped install applied, as Argo CD applies it."""
    return install(plane)
