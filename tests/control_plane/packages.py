"""The function's and provider-kubernetes' packages, served to Crossplane's package manager from
a local OCI registry, as a cluster pulls them from ghcr.io and xpkg.crossplane.io.

A Crossplane package (an xpkg) is an OCI image whose file system holds one `package.yaml`: the
package's `meta.pkg.crossplane.io` document, then the CRDs it ships. `crossplane xpkg build`
writes the same file into an annotated layer; the package manager reads the annotated layer if
there is one and the image's flattened file system otherwise (crossplane-runtime's
`xpkg.ExtractPackageYAML`), so one plain layer is a package it parses as it parses a release.

The registry is crane's (`crane registry serve`, go-containerregistry's reference registry, in
memory), on loopback over plain HTTP: Crossplane, like every go-containerregistry client, speaks
HTTP to 127.0.0.1 without being told. ImageConfigs (`pkg.crossplane.io/v1beta1`, Crossplane's
own way to mirror a registry) rewrite the shipped packages' registries to it, so `deploy/` is
applied unchanged.
"""

import io
import re
import subprocess
import tarfile
import time
from pathlib import Path

import yaml

from tests.control_plane.server import ControlPlane, built, source
from tests.support import ROOT

SERVE_SECONDS = 20.0
MIRRORED = {
    "ghcr.io/cozystack/": "cozystack/",
    "xpkg.crossplane.io/crossplane-contrib/": "crossplane-contrib/",
}
"""The registries `deploy/` names, and where each lives in the local registry."""
PROVIDER_MODULE = "github.com/crossplane-contrib/provider-kubernetes"


def start_registry(plane: ControlPlane) -> str:
    """crane's registry on a loopback port it picks itself (no race): its `host:port`."""
    plane.run(
        "registry", [built("crane") / "crane", "registry", "serve", "--address", "127.0.0.1:0"]
    )
    log = plane.root / "registry.log"
    deadline = time.monotonic() + SERVE_SECONDS
    while time.monotonic() < deadline:
        found = re.search(r"serving on port (\d+)", log.read_text(errors="replace"))
        if found:
            return f"127.0.0.1:{found.group(1)}"
        time.sleep(0.1)
    raise AssertionError(f"the registry did not start:\n{plane.logs()}")


def package_yaml(meta: Path, crds: list[Path]) -> bytes:
    """What `crossplane xpkg build` puts in `package.yaml`: the meta document, then each CRD."""
    documents = [meta.read_text().strip()]
    documents += [path.read_text().strip() for path in crds]
    return ("\n---\n".join(documents) + "\n").encode()


def layer(contents: bytes) -> bytes:
    """A tar holding `package.yaml` alone, reproducible to the byte."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("package.yaml")
        info.size, info.mode, info.mtime = len(contents), 0o644, 0
        tar.addfile(info, io.BytesIO(contents))
    return out.getvalue()


def push(plane: ControlPlane, reference: str, contents: bytes) -> None:
    """An image of one `package.yaml` layer, pushed as `reference`."""
    tar = plane.root / f"{re.sub(r'[^a-z0-9]+', '-', reference)}.tar"
    tar.write_bytes(layer(contents))
    argv = [built("crane") / "crane", "append", "--new_layer", tar, "--new_tag", reference]
    run = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"crane append {reference}: {run.stderr}"


def shipped(kind: str) -> str:
    """The package `deploy/` installs for a Function or Provider."""
    for path in (ROOT / "deploy").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("apiVersion") == "pkg.crossplane.io/v1" and doc["kind"] == kind:
                return str(doc["spec"]["package"])
    raise AssertionError(f"deploy/ installs no {kind}")


def mirrored(registry: str, package: str) -> str:
    for prefix, path in MIRRORED.items():
        if package.startswith(prefix):
            return f"{registry}/{path}{package.removeprefix(prefix)}"
    raise AssertionError(f"{package} is from no registry the tier mirrors")


def publish(plane: ControlPlane, registry: str) -> None:
    """Push the function's package (this repository's `package/`) and provider-kubernetes'
    (its pinned module's `package/`) under the names `deploy/` installs, mirrored."""
    ours = ROOT / "package"
    push(
        plane,
        mirrored(registry, shipped("Function")),
        package_yaml(ours / "crossplane.yaml", sorted((ours / "input").glob("*.yaml"))),
    )
    provider = source(PROVIDER_MODULE) / "package"
    push(
        plane,
        mirrored(registry, shipped("Provider")),
        package_yaml(provider / "crossplane.yaml", sorted((provider / "crds").glob("*.yaml"))),
    )


def image_configs(registry: str) -> list[dict[str, object]]:
    """One ImageConfig per mirrored registry, rewriting its prefix to the local registry."""
    return [
        {
            "apiVersion": "pkg.crossplane.io/v1beta1",
            "kind": "ImageConfig",
            "metadata": {"name": f"mirror-{path.strip('/')}"},
            "spec": {
                "matchImages": [{"type": "Prefix", "prefix": prefix}],
                "rewriteImage": {"prefix": f"{registry}/{path}"},
            },
        }
        for prefix, path in MIRRORED.items()
    ]
