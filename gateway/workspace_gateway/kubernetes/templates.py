"""The template mapping: which WorkspaceSandbox spec each E2B template name stands for.

The platform team writes it once, as YAML:

    templates:
      base:
        preset: standard          # optional: the platform's default preset otherwise
        image: ubuntu-24.04       # a name in the platform's image catalog
        resources: {cpu: "2", memory: 4Gi, disk: 20Gi}   # optional, each within the preset
        pool: {size: 2, temperature: suspended}           # optional: no pool otherwise
        ports: [3000, 5173, 8000]  # optional: the TCP ports previews reach (get_host)
        interpreter: false         # optional: run E2B's code interpreter on 49999

A template not listed is answered as E2B answers an unknown one (404). `pool` is the warm pool
each tenant namespace gets of it (see `pools`): `size` members made ahead (0, the default, is
none), `running` or `suspended` (the default: a member then costs only its disk). `ports` are
the sandbox's ports the gateway serves as previews (`<port>-<id>.<domain>`), each a
`spec.ports` entry `port-<n>` of the WorkspaceSandbox: only a port named there is reachable at
all (docs/security.md, "Previews"). `interpreter: true` is E2B's `code-interpreter-v1`: the
image's agent runs its code interpreter (the agent's `interpreter` extra) on 49999, which
`spec.ports` then opens too, and which is never a public preview (`app._interpreter`).
"""

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from workspace_gateway.backend import INTERPRETER_PORT

NAME = re.compile(r"[a-zA-Z0-9][-a-zA-Z0-9_.]{0,62}")
PRESET = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
RESOURCES = ("cpu", "memory", "disk")
TEMPERATURES = ("running", "suspended")
MAX_POOL = 100  # per template and namespace: more is a typo, and a bill
MAX_PORTS = 16  # spec.ports' maxItems
AGENT_PORT = 49983  # envd's, never a preview
MAX_PORT = 65535
SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
QUANTITY = re.compile(r"(?P<number>[0-9]+(\.[0-9]+)?)(?P<suffix>m|[kMGTPE]i?|Ki)?")


class TemplateError(ValueError):
    """The mapping file is unusable; the message names the file and the field."""


@dataclass(frozen=True)
class Pool:
    """How many members of a template each tenant namespace keeps ready, and how warm."""

    size: int = 0
    temperature: str = "suspended"


@dataclass(frozen=True)
class Template:
    image: str
    preset: str | None = None
    resources: dict[str, str] = field(default_factory=dict)
    pool: Pool = Pool()
    ports: tuple[int, ...] = ()
    interpreter: bool = False
    """Whether its sandboxes run E2B's code interpreter, on 49999, which `spec.ports` opens."""

    def spec(self) -> dict[str, Any]:
        """The WorkspaceSandbox spec it stands for (power and lifetime are the gateway's)."""
        out: dict[str, Any] = {"image": self.image}
        if self.preset:
            out["preset"] = self.preset
        if self.resources:
            out["resources"] = dict(self.resources)
        ports = sorted({*self.ports, *((INTERPRETER_PORT,) if self.interpreter else ())})
        if ports:
            out["ports"] = [{"name": f"port-{p}", "port": p} for p in ports]
        return out

    def figures(self) -> tuple[int, int, int]:
        """cpuCount, memoryMB, diskSizeMB as E2B reports them; 0 where the preset decides."""
        cpu = self.resources.get("cpu")
        memory = self.resources.get("memory")
        disk = self.resources.get("disk")
        return (
            math.ceil(quantity(cpu)) if cpu else 0,
            int(quantity(memory) // 2**20) if memory else 0,
            int(quantity(disk) // 2**20) if disk else 0,
        )


def quantity(text: str) -> Decimal:
    """A Kubernetes quantity without sign or exponent, as a number of units."""
    found = QUANTITY.fullmatch(text)
    if not found:
        raise TemplateError(f"{text!r} is not a quantity such as 2, 1500m or 4Gi")
    try:
        number = Decimal(found["number"])
    except InvalidOperation:
        raise TemplateError(f"{text!r} is not a quantity") from None
    suffix = found["suffix"] or ""
    if suffix == "m":
        return number / 1000
    return number * SUFFIXES[suffix]


def _template(name: str, value: object, where: str) -> Template:
    if not isinstance(value, dict):
        raise TemplateError(f"{where}: templates.{name} must be a mapping")
    unknown = set(value) - {"image", "preset", "resources", "pool", "ports", "interpreter"}
    if unknown:
        raise TemplateError(f"{where}: templates.{name} has unknown fields {sorted(unknown)}")
    image, preset = value.get("image"), value.get("preset")
    if not isinstance(image, str) or not 0 < len(image) <= 63:  # noqa: PLR2004  # spec.image's maxLength
        raise TemplateError(f"{where}: templates.{name}.image must be an image name")
    if preset is not None and (not isinstance(preset, str) or not PRESET.fullmatch(preset)):
        raise TemplateError(f"{where}: templates.{name}.preset must be a preset name")
    resources = value.get("resources") or {}
    if not isinstance(resources, dict) or set(resources) - set(RESOURCES):
        raise TemplateError(f"{where}: templates.{name}.resources takes only {RESOURCES}")
    sizes: dict[str, str] = {}
    for k, v in resources.items():
        if isinstance(v, bool) or not isinstance(v, int | str):
            raise TemplateError(f"{where}: templates.{name}.resources.{k} must be a quantity")
        try:
            if quantity(str(v)) <= 0:
                raise TemplateError("not more than zero")
        except TemplateError:
            raise TemplateError(
                f"{where}: templates.{name}.resources.{k}: {v!r} is not a quantity more than "
                "zero such as 2, 1500m or 4Gi"
            ) from None
        sizes[k] = str(v)
    pool = _pool(value.get("pool"), f"{where}: templates.{name}.pool")
    ports = _ports(value.get("ports"), f"{where}: templates.{name}.ports")
    interpreter = _interpreter(value.get("interpreter", False), ports, f"{where}: templates.{name}")
    return Template(
        image=image,
        preset=preset,
        resources=sizes,
        pool=pool,
        ports=ports,
        interpreter=interpreter,
    )


def _interpreter(value: object, ports: tuple[int, ...], where: str) -> bool:
    if not isinstance(value, bool):
        raise TemplateError(f"{where}.interpreter must be true or false")
    if value and len(ports) >= MAX_PORTS:
        raise TemplateError(
            f"{where}.ports: at most {MAX_PORTS - 1} beside the interpreter's {INTERPRETER_PORT}"
        )
    return value


def _ports(value: object, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_PORTS:
        raise TemplateError(f"{where} must be a list of at most {MAX_PORTS} TCP ports")
    for port in value:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port <= MAX_PORT:
            raise TemplateError(f"{where}: {port!r} is not a port from 1 to {MAX_PORT}")
        if port == AGENT_PORT:
            raise TemplateError(f"{where}: {AGENT_PORT} is the agent's, reached as envd already")
        if port == INTERPRETER_PORT:
            raise TemplateError(
                f"{where}: {INTERPRETER_PORT} is the code interpreter's: set `interpreter: true`"
            )
    if len(set(value)) != len(value):
        raise TemplateError(f"{where} names a port twice")
    return tuple(sorted(value))


def _pool(value: object, where: str) -> Pool:
    if value is None:
        return Pool()
    if not isinstance(value, dict):
        raise TemplateError(f"{where} must be a mapping such as {{size: 2}}")
    unknown = set(value) - {"size", "temperature"}
    if unknown:
        raise TemplateError(f"{where} has unknown fields {sorted(unknown)}")
    size = value.get("size", 0)
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_POOL:
        raise TemplateError(f"{where}.size must be a whole number from 0 to {MAX_POOL}")
    temperature = value.get("temperature", "suspended")
    if temperature not in TEMPERATURES:
        raise TemplateError(f"{where}.temperature must be one of {list(TEMPERATURES)}")
    return Pool(size=size, temperature=temperature)


def parse(text: str, where: str) -> dict[str, Template]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TemplateError(f"{where}: not YAML: {e}") from None
    templates = document.get("templates") if isinstance(document, dict) else None
    if not isinstance(templates, dict) or not templates:
        raise TemplateError(f"{where}: expected a non-empty 'templates' mapping")
    out = {}
    for name, value in templates.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise TemplateError(f"{where}: {name!r} is not a template name")
        out[name] = _template(name, value, where)
    return out


def load(path: Path) -> dict[str, Template]:
    try:
        text = path.read_text()
    except OSError as e:
        raise TemplateError(f"{path}: {e.strerror}") from None
    return parse(text, str(path))
