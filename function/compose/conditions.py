"""The conditions a sandbox reports, and a workload's progress as a phase and two of them."""

from dataclasses import dataclass
from typing import Literal

from function.model.spec import WorkspaceSandbox


@dataclass(frozen=True)
class Condition:
    type: str
    status: Literal["True", "False"]
    reason: str
    message: str


def done(type_: str, reason: str, message: str) -> Condition:
    return Condition(type_, "True", reason, message)


def pending(type_: str, reason: str, message: str) -> Condition:
    return Condition(type_, "False", reason, message)


@dataclass(frozen=True)
class Progress:
    phase: str
    provisioned: Condition
    suspended: Condition


RUNNING = pending("Suspended", "PowerRunning", "spec.power is Running")


def not_created(ws: WorkspaceSandbox, what: str) -> Progress:
    waiting = pending("Provisioned", "Creating", f"waiting for {what} to be created")
    not_yet = pending("Suspended", "Creating", "not created yet")
    return Progress("Pending", waiting, not_yet if ws.spec.power == "Suspended" else RUNNING)
