"""A preset's sandbox once its placement is ready, whichever placement the preset names."""

from dataclasses import replace

from function.model.platform import SandboxPlatform
from function.render import Rendered, render
from tests.plane import provider
from tests.sandbox_namespace import world
from tests.support import NOW, owned, workspace


def settled(preset: str, platform: SandboxPlatform) -> Rendered:
    """The preset's sandbox once its placement is ready: the pod it finally runs."""
    placement = platform.presets[preset].placement
    if placement == "Namespace":
        return render(workspace({"preset": preset}), platform, owned(None), NOW)
    if placement == "SandboxNamespace":
        return world.settled_in_namespace(preset, platform=platform)[0]
    plane = provider.SHARED if placement == "SharedComputePlane" else provider.DEDICATED
    return provider.settled_in_plane(replace(plane, preset=preset, platform=platform))[0]
