"""A sandbox's CPU, memory and disk: the tenant's request, defaulted and bounded by the preset."""

from dataclasses import dataclass
from decimal import Decimal

from function.errors import FieldError
from function.model.platform import Image, Preset
from function.model.quantity import format_bytes, format_cpu
from function.model.spec import WorkspaceSandbox


@dataclass(frozen=True)
class Size:
    cpu: Decimal
    memory: Decimal
    disk: Decimal


def _bounded(
    field: str, requested: Decimal | None, default: Decimal, limit: Decimal, name: str
) -> Decimal:
    if requested is None:
        return default
    if requested > limit:
        shown = format_cpu if field == "cpu" else format_bytes
        raise FieldError(
            f"spec.resources.{field}",
            f"{shown(requested)} is more than preset {name!r} allows ({shown(limit)})",
        )
    return requested


def size(
    ws: WorkspaceSandbox,
    preset_name: str,
    preset: Preset,
    image: Image,
    restore_size: Decimal | None = None,
    *,
    by_instancetype: bool,
) -> Size:
    """`by_instancetype`: whether an instance type sizes CPU and memory instead of the tenant.

    The workload's answer (`Workload.sized_by_instancetype`).
    """
    want, bounds = ws.spec.resources, preset.resources
    if by_instancetype:
        for field in ("cpu", "memory"):
            if getattr(want, field) is not None:
                raise FieldError(
                    f"spec.resources.{field}",
                    f"preset {preset_name!r} sizes sandboxes by instance type; remove this field",
                )
    disk = _bounded("disk", want.disk, bounds.default.disk, bounds.max.disk, preset_name)
    if want.disk is None and image.min_disk is not None:
        disk = max(disk, image.min_disk)
    if image.min_disk is not None and disk < image.min_disk:
        raise FieldError(
            "spec.resources.disk",
            f"{format_bytes(disk)} is smaller than image {ws.spec.image!r} needs "
            f"({format_bytes(image.min_disk)})",
        )
    if restore_size is not None and disk < restore_size:
        if want.disk is not None:
            snapshot = ws.spec.restore_from.snapshot if ws.spec.restore_from else ""
            raise FieldError(
                "spec.resources.disk",
                f"{format_bytes(disk)} is smaller than snapshot {snapshot!r} "
                f"({format_bytes(restore_size)})",
            )
        disk = restore_size
    return Size(
        cpu=_bounded("cpu", want.cpu, bounds.default.cpu, bounds.max.cpu, preset_name),
        memory=_bounded(
            "memory", want.memory, bounds.default.memory, bounds.max.memory, preset_name
        ),
        disk=disk,
    )
