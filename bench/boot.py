"""The rendered VM's boot, reboot and cold restart in QEMU, through the gateway and the SDK.

    python -m bench.boot        # one boot, a reboot inside the guest, a cold restart

The same VM as the boot tier's (tests/boot/vm.py): the test guest (`scripts/test-images
guest`), the function's user data and the agent's disk. For each boot it reports, from the
host, QEMU's start (or the reboot's command) to the agent's first `/health`, and to the end of
a first SSH login; and from the guest's journal, the uptime at which each cloud-init stage
started and ended, and the agent's unit start to its "serving" line. It names the accelerator:
figures under TCG are several times KVM's.
"""

import contextlib
import re
import tempfile
import time
from pathlib import Path

import pytest
from e2b import Sandbox

from tests.boot.vm import (
    BOOT_SECONDS,
    SHUTDOWN_SECONDS,
    FirstAnswer,
    VMPlatform,
    agent_disk,
    guest_image,
    new_key,
)
from tests.gateway import kube_fake
from tests.gateway.stand_in import Platform, serving

SLOW = BOOT_SECONDS + SHUTDOWN_SECONDS + 60
STAGE = re.compile(r"running '(\S+)' at .* Up ([\d.]+) seconds")
FINISHED = re.compile(r"Cloud-init v\. \S+ finished at .* Up ([\d.]+) seconds")
MONOTONIC = re.compile(r"^\[\s*([\d.]+)\]")


def guest_figures(sandbox: Sandbox) -> dict[str, float]:
    """Uptimes, from this boot's journal: each cloud-init stage's start, its end, the agent's."""
    # Two reads: journalctl's -t and -u together match only lines that have both.
    journal = sandbox.commands.run(
        "for m in '-t cloud-init' '-u workspace-sandbox-agent.service'; do"
        " journalctl -b -o short-monotonic --no-pager $m; done",
        user="root",
        timeout=120,
        request_timeout=150,
    ).stdout
    out: dict[str, float] = {}
    for line in journal.splitlines():
        at = MONOTONIC.match(line)
        if at is None:
            continue
        if stage := STAGE.search(line):
            out.setdefault(f"cloud-init {stage[1]}", float(stage[2]))
        elif finished := FINISHED.search(line):
            out.setdefault("cloud-init finished", float(finished[1]))
        elif "Started workspace-sandbox-agent.service" in line:
            out.setdefault("agent unit started", float(at[1]))
        elif "serving envd" in line:
            out.setdefault("agent serving", float(at[1]))
    return out


def report(name: str, answer: FirstAnswer, guest: dict[str, float]) -> None:
    print(f"{name} ({answer.accelerator}):")
    print(f"  to the agent's first /health  {answer.seconds:6.1f} s")
    ok = "ok" if answer.ssh.returncode == 0 else f"refused: {answer.ssh.stderr.strip()}"
    print(f"  then a first SSH login         {answer.ssh_seconds:6.1f} s ({ok})")
    for what, uptime in sorted(guest.items(), key=lambda item: item[1]):
        print(f"  uptime at {what:<28} {uptime:6.1f} s")
    if {"agent unit started", "agent serving"} <= guest.keys():
        own = guest["agent serving"] - guest["agent unit started"]
        print(f"  the agent's own start (unit start to serving) {own:.1f} s")


def main() -> None:
    guest = guest_image()
    with tempfile.TemporaryDirectory(prefix="bench-boot-") as tmp:
        folder = Path(tmp)
        agent = agent_disk(folder / "agent")
        key = new_key(folder / "spec-key", "bench")
        made: list[VMPlatform] = []

        def platform_of(cluster: kube_fake.Cluster, where: Path) -> Platform:
            made.append(VMPlatform(cluster, where, guest=guest, agent=agent, key=key))
            return made[0]

        with (
            pytest.MonkeyPatch.context() as monkeypatch,
            serving(folder, monkeypatch, platform_of=platform_of),
        ):
            started = time.monotonic()
            sandbox = Sandbox.create(timeout=3600, request_timeout=SLOW)
            print(f"create, through the gateway: {time.monotonic() - started:.1f} s")
            platform = made[0]
            report("first boot", platform.answers[-1], guest_figures(sandbox))

            (machine,) = platform.machines.values()
            started = time.monotonic()
            with contextlib.suppress(Exception):
                sandbox.commands.run("systemctl reboot", user="root", background=True)
            machine.wait_for_agent_gone()
            machine.wait_for_agent()
            answered = time.monotonic()
            login = machine.ssh(key, "true")
            rebooted = FirstAnswer(
                answered - started, machine.accelerator, login, time.monotonic() - answered
            )
            report(
                "reboot inside the guest (from `systemctl reboot`)",
                rebooted,
                guest_figures(sandbox),
            )

            started = time.monotonic()
            sandbox.pause(request_timeout=SLOW)
            print(f"pause (power off): {time.monotonic() - started:.1f} s")
            started = time.monotonic()
            sandbox = Sandbox.connect(sandbox.sandbox_id, request_timeout=SLOW)
            print(
                f"connect (cold restart, through the gateway): {time.monotonic() - started:.1f} s"
            )
            report("cold restart on the same disk", platform.answers[-1], guest_figures(sandbox))
            sandbox.kill()


if __name__ == "__main__":
    main()
