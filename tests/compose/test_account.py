"""The guest account on a VM's disk: `user` on a new disk, and never a second one on an old one."""

import json
from typing import Any

import pytest

from function.compose.workloads.kubevirt.account import guest_account
from function.errors import FieldError
from function.render import Rendered, render
from tests.support import AGENT_PLATFORM, NAMESPACE, NOW, owned, owner_reference, workspace

ANNOTATION = "sandbox.cozystack.io/guest-user"


def _observed(key: str, kind: str, name: str, account: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if account is not None:
        meta["annotations"] = {ANNOTATION: account}
    api = "kubevirt.io/v1" if kind == "VirtualMachine" else "cdi.kubevirt.io/v1beta1"
    return {key: {"apiVersion": api, "kind": kind, "metadata": meta}}


def vm(account: str | None, name: str = "alice-api") -> dict[str, Any]:
    return _observed("vm", "VirtualMachine", name, account)


def disk(account: str | None, name: str = "alice-api-workspace") -> dict[str, Any]:
    return _observed("workspace-volume", "DataVolume", name, account)


@pytest.mark.parametrize(
    ("observed", "restored", "account"),
    [
        pytest.param({}, None, "user", id="a-new-disk-gets-user"),
        pytest.param(vm(None), None, "sandbox", id="a-vm-of-an-earlier-release-keeps-sandbox"),
        pytest.param(disk(None), None, "sandbox", id="a-disk-of-an-earlier-release-too"),
        pytest.param({**vm(None), **disk(None)}, None, "sandbox", id="both-of-an-earlier-release"),
        pytest.param(vm("user"), None, "user", id="a-vm-that-records-user"),
        pytest.param(vm("sandbox"), None, "sandbox", id="a-vm-that-records-sandbox"),
        pytest.param(disk("sandbox"), None, "sandbox", id="a-disk-whose-vm-is-gone"),
        pytest.param({}, "sandbox", "sandbox", id="restored-from-an-old-disk"),
        pytest.param({}, "user", "user", id="restored-from-a-new-disk"),
        pytest.param(vm("user"), "sandbox", "user", id="once-made-the-disk-decides"),
    ],
)
def test_the_account_is_the_one_on_the_disk(
    observed: dict[str, Any], restored: str | None, account: str
) -> None:
    assert guest_account(owned(observed), restored) == account


@pytest.mark.parametrize(
    ("observed", "what"),
    [
        pytest.param(vm("root"), "vm is VirtualMachine 'alice-api'", id="on-the-vm"),
        pytest.param(
            disk("root"), "workspace-volume is DataVolume 'alice-api-workspace'", id="on-the-disk"
        ),
    ],
)
def test_an_account_no_release_writes_is_refused(observed: dict[str, Any], what: str) -> None:
    with pytest.raises(FieldError) as err:
        guest_account(owned(observed))
    assert str(err.value) == (
        f"spec.crossplane.resourceRefs: {what}, whose annotation sandbox.cozystack.io/guest-user "
        "names the guest account 'root', which this function never writes (user or sandbox); "
        "set it back to the account the workspace disk holds"
    )


def run(observed: dict[str, Any] | None = None, **kw: Any) -> Rendered:
    spec = kw.pop("spec", {})
    return render(workspace(spec), AGENT_PLATFORM, owned(observed), NOW, kw.get("required"))


def _script_account(out: Rendered) -> str:
    volumes = out.resources["vm"]["spec"]["template"]["spec"]["volumes"]
    (data,) = [v["cloudInitNoCloud"]["userData"] for v in volumes if "cloudInitNoCloud" in v]
    argv0: str = json.loads(data.split("\n", 1)[1])["bootcmd"][0][3]
    return argv0


def _recorded(out: Rendered) -> dict[str, str]:
    return {
        key: m["metadata"]["annotations"][ANNOTATION]
        for key, m in out.resources.items()
        if ANNOTATION in m["metadata"].get("annotations", {})
    }


def test_a_new_sandbox_records_user_on_its_vm_disk_and_snapshots() -> None:
    out = run(spec={"snapshots": [{"name": "nightly"}]})
    assert _recorded(out) == {"vm": "user", "workspace-volume": "user"}
    assert _script_account(out) == "user"
    # The snapshot waits for the disk; once it is taken it records the disk's account too.
    ready = {**out.resources["workspace-volume"], "status": {"phase": "Succeeded"}}
    later = run(
        {"workspace-volume": ready, "vm": out.resources["vm"]},
        spec={"snapshots": [{"name": "nightly"}]},
    )
    assert _recorded(later) == {
        "vm": "user",
        "workspace-volume": "user",
        "snapshot-nightly": "user",
    }


def test_an_old_sandbox_keeps_its_names_and_records_sandbox_everywhere() -> None:
    # The names an earlier release gave them; a rename would delete and re-create them.
    observed = {
        **vm(None, "alice-api"),
        **disk(None, "alice-api-workspace"),
    }
    observed["workspace-volume"]["status"] = {"phase": "Succeeded"}
    out = run(observed, spec={"snapshots": [{"name": "nightly"}]})
    assert out.resources["vm"]["metadata"]["name"] == "alice-api"
    assert out.resources["workspace-volume"]["metadata"]["name"] == "alice-api-workspace"
    assert _recorded(out) == {
        "vm": "sandbox",
        "workspace-volume": "sandbox",
        "snapshot-nightly": "sandbox",
    }
    assert _script_account(out) == "sandbox"


def test_a_pod_sandboxs_snapshots_record_no_account() -> None:
    out = run(spec={"preset": "kata", "snapshots": [{"name": "nightly"}]})
    assert _recorded(out) == {}


def _snapshot(account: str | None) -> dict[str, Any]:
    """Another sandbox's ready snapshot, recording `account` (None: it records none)."""
    meta: dict[str, Any] = {
        "name": "bob-frontend-nightly",
        "namespace": NAMESPACE,
        "ownerReferences": [owner_reference("bob-frontend")],
    }
    if account is not None:
        meta["annotations"] = {ANNOTATION: account}
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": meta,
        "status": {"readyToUse": True, "restoreSize": "30Gi"},
    }


@pytest.mark.parametrize(
    ("recorded", "account"),
    [
        pytest.param("user", "user", id="a-new-sandboxs-snapshot"),
        pytest.param("sandbox", "sandbox", id="an-old-sandboxs-snapshot-this-release-took"),
        pytest.param(None, "sandbox", id="a-snapshot-an-earlier-release-took"),
    ],
)
def test_a_fork_keeps_the_account_of_the_disk_it_was_made_from(
    recorded: str | None, account: str
) -> None:
    out = run(
        spec={"restoreFrom": {"snapshot": "bob-frontend-nightly"}},
        required={"restore-snapshot": [_snapshot(recorded)]},
    )
    assert _recorded(out) == {"vm": account, "workspace-volume": account}
    assert _script_account(out) == account


def test_a_snapshot_recording_an_unknown_account_is_refused() -> None:
    with pytest.raises(FieldError) as err:
        run(
            spec={"restoreFrom": {"snapshot": "bob-frontend-nightly"}},
            required={"restore-snapshot": [_snapshot("root")]},
        )
    assert str(err.value) == (
        "spec.restoreFrom.snapshot: VolumeSnapshot 'bob-frontend-nightly' records the guest "
        "account 'root' (sandbox.cozystack.io/guest-user), which no sandbox has "
        "(user or sandbox)"
    )
