"""The README and docs/: every relative link resolves, every anchor exists, the README stays short."""

import re
import shlex
from pathlib import Path

import pytest

from tests.support import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text without its fenced code blocks, where `](` means nothing."""
    return FENCE.sub("", text)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lowercase, punctuation gone, spaces to dashes."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(prose(page.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links() -> list[tuple[Path, str]]:
    return [
        (page, target)
        for page in PAGES
        for target in LINK.findall(prose(page.read_text()))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # https:, mailto: and the like
    ]


def test_there_are_pages_and_links() -> None:
    assert {p.name for p in PAGES} >= {
        "README.md",
        "tenant-guide.md",
        "platform-guide.md",
        "security.md",
        "agent.md",
        "gateway.md",
        "development.md",
    }
    assert len(links()) > 30


@pytest.mark.parametrize(("page", "target"), links(), ids=[f"{p.name}:{t}" for p, t in links()])
def test_a_relative_link_resolves(page: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    assert dest.exists(), f"{page.name}: {target} names no file"
    assert dest.is_relative_to(ROOT), f"{page.name}: {target} leaves the repository"
    if anchor:
        assert dest.suffix == ".md", f"{page.name}: {target}: an anchor into a file that is no page"
        assert anchor in anchors(dest), f"{page.name}: {target}: no such heading in {dest.name}"


def test_the_readme_is_short() -> None:
    assert len(README.read_bytes()) < 12 * 1024


def test_the_first_commands_are_the_ones_ci_runs() -> None:
    """`.ci/run` installs as the README says and runs the README's test command."""
    (block,) = re.findall(
        r"^## First commands\n\n```sh\n(.*?)^```", README.read_text(), re.M | re.S
    )
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert ci[-1] == "scripts/check"
    assert ci[-1] in commands
    setup = shlex.split(commands[0])
    install = setup[setup.index("install") + 1 :]
    (pip,) = (shlex.split(line) for line in ci if " install " in line and " -e " in line)
    assert [a for a in pip if a != "--quiet"][-len(install) :] == install


def module_map() -> str:
    text = (ROOT / "docs" / "development.md").read_text()
    start = text.index("## Module map")
    return text[start : text.index("\n## ", start + 1)]


@pytest.mark.parametrize(
    "module",
    sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "function").rglob("*.py")
        if p.name not in {"__init__.py", "__version__.py"}
    ),
)
def test_the_module_map_names_every_module_of_the_function(module: str) -> None:
    """Each module's file name stands in the map, under its folder's heading or in full."""
    path = Path(module)
    entry = re.compile(rf"(^|[\s,/]){re.escape(path.name)}(\s|,|$)", re.M)
    assert entry.search(module_map()), f"docs/development.md's module map misses {module}"
