"""A sandbox never takes over an object it did not create, and restores only sandbox snapshots.

Run the way Crossplane runs the function: required resources are offered from a pool of what
exists in the namespace, call after call, until the requirements stop changing.
"""

from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.compose.names import new_identity, snapshot_name, workspace_volume_name
from function.fn import FunctionRunner
from function.offline import Offline, fatal, run
from function.render import render
from tests.support import (
    NAMESPACE,
    NOW,
    PLATFORM,
    owned,
    owner_reference,
    request,
    workspace,
    xr,
)

UID = "0d6c0b8e-6a43-4c5e-9b2a-3f1e2d7c9a10"
NEVER = "a sandbox never takes over an object it did not create"


def obj(api: str, kind: str, name: str, *owners: dict[str, Any], **extra: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": NAMESPACE, "ownerReferences": list(owners)}
    return {"apiVersion": api, "kind": kind, "metadata": meta, **extra}


def cnp(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return obj("cilium.io/v2", "CiliumNetworkPolicy", name, *owners)


def data_volume(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return obj("cdi.kubevirt.io/v1beta1", "DataVolume", name, *owners)


def claim(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return obj("v1", "PersistentVolumeClaim", name, *owners)


async def rendered(
    pool: list[dict[str, Any]],
    spec: dict[str, Any] | None = None,
    observed: dict[str, Any] | None = None,
    name: str = "alice-api",
) -> fnv1.RunFunctionResponse:
    """Alice's sandbox (uid UID) rendered as Crossplane would, with `pool` in its namespace."""
    req = request(xr(spec, name, uid=UID), observed)
    return await run(FunctionRunner(clock=lambda: NOW), Offline(req, "step", pool))


def refusal(kind: str, name: str, key: str, held: str) -> str:
    return (
        f"metadata.name: the {kind} {name!r} this sandbox would create ({key}) already exists "
        f"and is not this sandbox's ({held}); {NEVER}. Delete or rename that {kind}, or give "
        "the sandbox another name"
    )


def only_fatal(rsp: fnv1.RunFunctionResponse) -> tuple[str | None, int]:
    return fatal(rsp), len(rsp.desired.resources)


# --- names not observed yet are looked up first ---------------------------------------------


def test_every_name_a_new_sandbox_takes_is_looked_up_first() -> None:
    out = render(workspace(), PLATFORM, {}, NOW, {})
    asked = {k: v for k, v in out.requirements.items() if k.startswith("existing-")}
    want = {
        f"existing-{key}": {
            "apiVersion": m["apiVersion"],
            "kind": m["kind"],
            "name": m["metadata"]["name"],
            "namespace": NAMESPACE,
        }
        for key, m in out.resources.items()
    }
    disk = out.resources["workspace-volume"]["metadata"]["name"]
    # CDI can adopt a claim of the DataVolume's name: the VM would mount it.
    want["existing-workspace-volume-claim"] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "name": disk,
        "namespace": NAMESPACE,
    }
    assert asked == want


def test_a_sandbox_with_everything_observed_looks_nothing_up() -> None:
    first = render(workspace(), PLATFORM, {}, NOW, {})
    observed = owned({k: {**m, "status": {}} for k, m in first.resources.items()})
    assert render(workspace(), PLATFORM, observed, NOW, {}).requirements == {}


async def test_a_name_that_is_free_is_taken() -> None:
    rsp = await rendered([])
    assert fatal(rsp) is None
    assert "vm" in rsp.desired.resources


async def test_objects_this_sandbox_made_are_its_own() -> None:
    # Its references lost (spec.crossplane.resourceRefs edited), its objects still exist.
    ours = owner_reference("alice-api", UID)
    disk = workspace_volume_name(workspace())
    dv_owner = {**ours, "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume"}
    pool = [
        cnp(new_identity("alice-api"), ours),
        data_volume(disk, ours),
        claim(disk, {**dv_owner, "name": disk}),
    ]
    assert fatal(await rendered(pool)) is None


@pytest.mark.parametrize(
    ("owners", "held"),
    [
        pytest.param((), "it has no controller", id="no-controller"),
        pytest.param(
            ({**owner_reference("bob-frontend"), "uid": "b0b"},),
            "its controller is WorkspaceSandbox 'bob-frontend'",
            id="another-sandbox",
        ),
        pytest.param(
            (owner_reference("alice-api", "a-deleted-xr-of-the-same-name"),),
            "its controller is WorkspaceSandbox 'alice-api'",
            id="an-earlier-sandbox-of-the-same-name",
        ),
    ],
)
async def test_a_taken_name_is_a_fatal_result_and_nothing_is_applied(
    owners: tuple[dict[str, Any], ...], held: str
) -> None:
    name = new_identity("alice-api")
    rsp = await rendered([cnp(name, *owners)])
    assert only_fatal(rsp) == (refusal("CiliumNetworkPolicy", name, "cilium-policy", held), 0)


async def test_the_vm_never_mounts_a_disk_of_its_name_that_is_someone_elses() -> None:
    disk = workspace_volume_name(workspace())
    rsp = await rendered([data_volume(disk, owner_reference("bob-frontend", "b0b"))])
    held = "its controller is WorkspaceSandbox 'bob-frontend'"
    assert only_fatal(rsp) == (refusal("DataVolume", disk, "workspace-volume", held), 0)


@pytest.mark.parametrize(
    "owners",
    [
        pytest.param((), id="a-claim-of-nobody"),
        pytest.param(
            (
                {
                    "apiVersion": "cdi.kubevirt.io/v1beta1",
                    "kind": "DataVolume",
                    "name": "other",
                    "uid": "x",
                    "controller": True,
                },
            ),
            id="another-data-volumes-claim",
        ),
    ],
)
async def test_a_claim_of_the_disks_name_is_never_adopted(owners: tuple[Any, ...]) -> None:
    disk = workspace_volume_name(workspace())
    rsp = await rendered([claim(disk, *owners)])
    error, composed = only_fatal(rsp)
    assert composed == 0
    assert error is not None
    assert error.startswith(f"metadata.name: the PersistentVolumeClaim {disk!r} this sandbox ")


async def test_a_sandbox_named_after_a_baseline_policy_no_longer_takes_it_over() -> None:
    # Cozystack's tenant chart ships allow-to-dns; an XR of that name used to compose it.
    baseline = cnp("allow-to-dns")
    rsp = await rendered([baseline], name="allow-to-dns")
    assert fatal(rsp) is None
    names = {r.resource["metadata"]["name"] for r in rsp.desired.resources.values()}
    assert "allow-to-dns" not in names


# --- observed objects must be this sandbox's --------------------------------------------------


def resource_refs(key: str, what: str, held: str) -> str:
    return (
        f"spec.crossplane.resourceRefs: {key} is {what}, which this sandbox does not control "
        f"({held}); {NEVER}. Remove the reference, or, if this sandbox made the object, give it "
        "back its controller reference"
    )


@pytest.mark.parametrize(
    ("owners", "held"),
    [
        pytest.param([], "it has no controller", id="no-controller"),
        pytest.param(
            [{**owner_reference("alice-api"), "controller": False}],
            "it has no controller",
            id="owned-but-not-controlled",
        ),
        pytest.param(
            [owner_reference("bob-frontend", "b0b")],
            "its controller is WorkspaceSandbox 'bob-frontend'",
            id="another-sandbox",
        ),
        pytest.param(
            [{**owner_reference("alice-api", "h31m"), "kind": "HelmRelease", "apiVersion": "x/v2"}],
            "its controller is HelmRelease 'alice-api'",
            id="another-kind-of-the-same-name",
        ),
    ],
)
async def test_an_observed_object_this_sandbox_does_not_control_is_refused(
    owners: list[dict[str, Any]], held: str
) -> None:
    # A tenant pointed the XR's resource references at the namespace's DNS allow policy.
    baseline = cnp("allow-to-dns", *owners)
    rsp = await rendered([], observed={"cilium-policy": baseline})
    what = "CiliumNetworkPolicy 'allow-to-dns'"
    assert only_fatal(rsp) == (resource_refs("cilium-policy", what, held), 0)


async def test_a_computeplane_without_a_controller_names_cozystacks_api() -> None:
    """A plane composed directly (before planes came through an Object), as observed on
    Cozystack's API server, which keeps no owner references (tests/control_plane/
    test_compose.py shows it on the real server): one clear error saying why and naming the
    plane to delete, after which the sandbox makes its plane again through its Object."""
    plane = obj("apps.cozystack.io/v1alpha1", "ComputePlane", "alice-api-plane-x")
    rsp = await rendered([], {"preset": "dedicated-plane"}, observed={"compute-plane": plane})
    message = (
        "spec.preset: ComputePlane 'alice-api-plane-x' has no controller reference: Cozystack's "
        "API server keeps no owner references on its applications, so a plane composed "
        "directly would outlive the sandbox. This sandbox now creates its plane through a "
        "provider-kubernetes Object, which deletes it with the sandbox: delete the plane made "
        f"before (kubectl delete computeplane alice-api-plane-x -n {NAMESPACE}) and the "
        "sandbox creates it again"
    )
    assert only_fatal(rsp) == (message, 0)


async def test_a_computeplane_of_another_controller_is_refused_as_any_object() -> None:
    plane = obj(
        "apps.cozystack.io/v1alpha1", "ComputePlane", "alice-api-plane-x",
        owner_reference("bob-frontend", "b0b"),
    )  # fmt: skip
    rsp = await rendered([], {"preset": "dedicated-plane"}, observed={"compute-plane": plane})
    held = "its controller is WorkspaceSandbox 'bob-frontend'"
    what = "ComputePlane 'alice-api-plane-x'"
    assert only_fatal(rsp) == (resource_refs("compute-plane", what, held), 0)


async def test_a_fatal_ownership_result_is_invalid_spec() -> None:
    req = request(
        xr(uid=UID), {"vm": {"kind": "VirtualMachine", "metadata": {"ownerReferences": []}}}
    )
    rsp = await FunctionRunner(clock=lambda: NOW).RunFunction(req, None)
    assert [(r.severity, r.reason) for r in rsp.results] == [(fnv1.SEVERITY_FATAL, "InvalidSpec")]


# --- a restore reads only a sandbox's snapshot ---------------------------------------------------


def snapshot(*owners: dict[str, Any]) -> dict[str, Any]:
    return obj(
        "snapshot.storage.k8s.io/v1",
        "VolumeSnapshot",
        "nightly-copy",
        *owners,
        status={"readyToUse": True, "restoreSize": "20Gi"},
    )


@pytest.mark.parametrize(
    ("owners", "held"),
    [
        pytest.param((), "it has no controller", id="made-by-hand"),
        pytest.param(
            (
                {
                    "apiVersion": "velero.io/v1",
                    "kind": "Restore",
                    "name": "r",
                    "uid": "u",
                    "controller": True,
                },
            ),
            "its controller is Restore 'r'",
            id="made-by-other-software",
        ),
    ],
)
async def test_a_restore_from_a_snapshot_no_sandbox_took_is_refused(
    owners: tuple[dict[str, Any], ...], held: str
) -> None:
    spec = {"restoreFrom": {"snapshot": "nightly-copy"}}
    rsp = await rendered([snapshot(*owners)], spec)
    message = (
        "spec.restoreFrom.snapshot: VolumeSnapshot 'nightly-copy' was not taken by a "
        f"WorkspaceSandbox ({held}); only a sandbox's own snapshots can be restored, by the name "
        "its status.snapshots[].volumeSnapshot reports"
    )
    assert only_fatal(rsp) == (message, 0)


async def test_a_restore_from_another_sandboxs_snapshot_goes_ahead() -> None:
    taken = snapshot_name(workspace(name="bob-frontend"), "nightly")
    found = {**snapshot(owner_reference("bob-frontend", "b0b"))}
    found["metadata"] = {**found["metadata"], "name": taken}
    rsp = await rendered([found], {"restoreFrom": {"snapshot": taken}})
    assert fatal(rsp) is None
    source = rsp.desired.resources["workspace-volume"].resource["spec"]["source"]
    assert source["snapshot"]["name"] == taken
