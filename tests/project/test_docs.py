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
    """The module map's code block."""
    text = (ROOT / "docs" / "development.md").read_text()
    start = text.index("## Module map")
    (block,) = re.findall(
        r"^```\n(.*?)^```", text[start : text.index("\n## ", start + 1)], re.M | re.S
    )
    return block


ENTRY = re.compile(r"[\w.-]+(/[\w.-]+)*(/|\.py)")
ENTRY_INDENT = 12  # deeper lines go on with the entry above


def entries(block: str) -> list[str]:
    """Every path the map names, relative to the repository: a line's leading paths, under the
    folder of the nearest line less indented (or at the root)."""
    found: list[str] = []
    folders: list[tuple[int, str]] = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= ENTRY_INDENT:
            continue
        while folders and folders[-1][0] >= indent:
            folders.pop()
        parent = folders[-1][1] if folders else ""
        named = []
        for word in line.split():
            if not ENTRY.fullmatch(token := word.rstrip(",")):
                break
            named.append(parent + token)
        if named and named[-1].endswith("/"):
            folders.append((indent, named[-1]))
        found += named
    return found


def listed_folders() -> dict[str, set[str]]:
    """Each folder the map opens (names something inside), with what it names there."""
    opened: dict[str, set[str]] = {}
    for path in entries(module_map()):
        folder, _, name = path.rstrip("/").rpartition("/")
        if folder:
            opened.setdefault(folder + "/", set()).add(name + ("/" if path.endswith("/") else ""))
    return opened


def test_the_module_map_names_only_what_is_there() -> None:
    named = entries(module_map())
    assert len(named) > 100, named
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"docs/development.md's module map names what is gone: {missing}"


def on_disk(folder: Path) -> set[str]:
    """A folder's modules and subfolders, as the map names them."""
    return {
        p.name + ("/" if p.is_dir() else "")
        for p in folder.iterdir()
        if (p.is_dir() and p.name != "__pycache__")
        or (p.suffix == ".py" and p.name != "__init__.py")
    }


@pytest.mark.parametrize("folder", sorted(listed_folders()))
def test_a_folder_the_module_map_opens_is_listed_whole(folder: str) -> None:
    """A folder the map lists anything of, it lists all of: a new module adds its line."""
    unlisted = sorted(on_disk(ROOT / folder) - listed_folders()[folder])
    assert not unlisted, f"docs/development.md's module map misses, in {folder}: {unlisted}"


@pytest.mark.parametrize(
    "folder",
    [
        "function/",
        "function/compose/",
        "gateway/workspace_gateway/",
        "gateway/workspace_gateway/kubernetes/",
        "tests/",
    ],
)
def test_the_module_map_opens_the_function_the_gateway_and_the_tests(folder: str) -> None:
    assert folder in listed_folders()
