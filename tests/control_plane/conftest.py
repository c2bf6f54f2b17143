from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.control_plane.composing import Composing, start_composing
from tests.control_plane.crossplane import XR_RULE, grant, start_crossplane, wait_xrd
from tests.control_plane.install import Installed, install, install_crds
from tests.control_plane.server import CONTROLLERS, ControlPlane, control_plane


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


@pytest.fixture(scope="session")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A plane with the upstream CRDs and nothing of the install: no admission policy but what a
    test binds, and no garbage collector, which would delete an object whose owner is absent."""
    root: Path = tmp_path_factory.mktemp("bare")
    controllers = [c for c in CONTROLLERS if c != "garbage-collector-controller"]
    with control_plane(root, controllers) as started:
        install_crds(started)
        yield started


@pytest.fixture(scope="session")
def crossplane(installed: Installed) -> Installed:
    """The install with Crossplane core running: the XRD served as a CRD."""
    start_crossplane(installed.plane)
    grant(installed.plane, XR_RULE)
    wait_xrd(installed.plane)
    return installed


@pytest.fixture(scope="module")
def composing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Composing]:
    """A plane of its own where Crossplane composes with the real function: the function and
    provider-kubernetes installed by Crossplane's package manager and running beside it. Torn
    down after its module: provider-kubernetes holds :8080 while it runs (`crossplane.grant`)."""
    root: Path = tmp_path_factory.mktemp("composing")
    with control_plane(root) as started:
        yield start_composing(started)
