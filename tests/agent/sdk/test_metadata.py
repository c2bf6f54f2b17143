"""File metadata through the real SDK: `files.write(..., metadata=...)` and where it comes back.

The SDK sends the metadata as `X-Metadata-<key>` headers on the upload; the agent keeps it as
`user.e2b.<key>` extended attributes of the new file, and reads them back into every
`EntryInfo` (`get_info`, `list`, `rename`) and the upload's answer. The SDK refuses keys that
aren't HTTP tokens and values that aren't printable ASCII itself; what it lets through and the
agent refuses comes back as `InvalidArgumentException` with the agent's message.
"""

import os
import stat
from pathlib import Path

import pytest
from e2b import FileType, Sandbox
from e2b.exceptions import InvalidArgumentException

from tests.agent.sdk.agents import NOBODY, Running

pytestmark = pytest.mark.e2e  # starts agents or gateways

LABELS = {"Owner": "agent-7", "purpose": "notes for later"}
STORED = {"owner": "agent-7", "purpose": "notes for later"}
"""`LABELS` as the agent keeps them: keys lowercased."""


def attributes(path: Path) -> dict[str, bytes]:
    return {name: os.getxattr(path, name) for name in os.listxattr(path)}


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.rglob("*") if p.name.endswith(".upload")]


def test_metadata_comes_back_wherever_the_sdk_reads_it(sandbox: Sandbox, agent: Running) -> None:
    written = sandbox.files.write("labelled.txt", "content", metadata=LABELS)
    assert written.metadata == STORED
    assert attributes(agent.root / "labelled.txt") == {
        "user.e2b.owner": b"agent-7",
        "user.e2b.purpose": b"notes for later",
    }
    assert sandbox.files.get_info("labelled.txt").metadata == STORED
    listed = {e.name: e.metadata for e in sandbox.files.list(".")}
    assert listed == {"labelled.txt": STORED}
    moved = sandbox.files.rename("labelled.txt", "moved/renamed.txt")
    assert (moved.name, moved.type, moved.metadata) == ("renamed.txt", FileType.FILE, STORED)
    assert sandbox.files.get_info("moved/renamed.txt").metadata == STORED
    assert sandbox.files.read("moved/renamed.txt") == "content"


def test_every_file_of_an_upload_gets_it_octet_stream_too(sandbox: Sandbox, agent: Running) -> None:
    infos = sandbox.files.write_files(
        [{"path": "one.txt", "data": "1"}, {"path": "sub/two.txt", "data": "2"}],
        metadata={"batch": "b1"},
    )
    assert [i.metadata for i in infos] == [{"batch": "b1"}, {"batch": "b1"}]
    streamed = sandbox.files.write("three.txt", b"3", use_octet_stream=True, metadata={"n": "3"})
    zipped = sandbox.files.write("four.txt", b"4", gzip=True, metadata={"n": "4"})
    assert (streamed.metadata, zipped.metadata) == ({"n": "3"}, {"n": "4"})
    for name, value in (("sub/two.txt", b"b1"), ("three.txt", b"3"), ("four.txt", b"4")):
        assert list(attributes(agent.root / name).values()) == [value]


def test_writing_again_replaces_the_metadata_whole(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("f.txt", "a", metadata={"first": "1", "both": "a"})
    sandbox.files.write("f.txt", "b", metadata={"both": "b", "second": "2"})
    assert sandbox.files.get_info("f.txt").metadata == {"both": "b", "second": "2"}
    plain = sandbox.files.write("f.txt", "c")
    assert plain.metadata is None
    assert sandbox.files.get_info("f.txt").metadata is None
    assert attributes(agent.root / "f.txt") == {}


def test_a_read_only_file_is_replaced_with_its_metadata(sandbox: Sandbox, agent: Running) -> None:
    sandbox.files.write("ro.txt", "old")
    (agent.root / "ro.txt").chmod(0o444)
    sandbox.files.write("ro.txt", "new", metadata={"k": "v"})
    assert stat.S_IMODE((agent.root / "ro.txt").stat().st_mode) == 0o444
    assert sandbox.files.get_info("ro.txt").metadata == {"k": "v"}


def test_metadata_is_read_as_the_caller_and_shows_what_others_set(
    sandbox: Sandbox, agent: Running
) -> None:
    sandbox.files.write("root.txt", "r", user="root", metadata={"by": "root"})
    path = agent.root / "root.txt"
    assert path.stat().st_uid == 0
    assert sandbox.files.get_info("root.txt").metadata == {"by": "root"}
    path.chmod(0o600)  # nobody may still see it listed, but no longer read its attributes
    assert sandbox.files.get_info("root.txt").metadata is None
    assert sandbox.files.get_info("root.txt", user="root").metadata == {"by": "root"}
    mine = sandbox.files.write("mine.txt", "m", metadata={"by": "nobody"})
    assert mine.metadata == {"by": "nobody"}
    assert (agent.root / "mine.txt").stat().st_uid == NOBODY.pw_uid
    # Set in the sandbox by other means: envd's namespace is shown, other tools' isn't.
    os.setxattr(agent.root / "mine.txt", "user.e2b.extra", b"by hand")
    os.setxattr(agent.root / "mine.txt", "user.other-tool", b"hidden")
    assert sandbox.files.get_info("mine.txt").metadata == {"by": "nobody", "extra": "by hand"}


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        pytest.param(
            {"k" * 247: "v"},
            "invalid metadata: key 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk'... is longer than 246 bytes",
            id="a-key-too-long-for-the-kernel",
        ),
        pytest.param(
            {"big": "v" * 4096},
            "invalid metadata: key 'big' brings the metadata to 4108 bytes, more than 4096",
            id="a-value-too-large",
        ),
        pytest.param(
            {f"k{n}": "v" for n in range(65)},
            "invalid metadata: key 'k64' is one more than the 64 keys a file may carry",
            id="too-many-keys",
        ),
        pytest.param(
            {"Same": "1", "same": "2"},
            "invalid metadata: key 'same' is given more than once (keys are lowercased)",
            id="two-keys-that-lowercase-alike",
        ),
    ],
)
def test_metadata_the_agent_cannot_keep_is_refused_naming_the_key(
    sandbox: Sandbox, agent: Running, labels: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidArgumentException) as refused:
        sandbox.files.write("refused.txt", "x", metadata=labels)
    assert message in str(refused.value)
    assert not (agent.root / "refused.txt").exists()
    assert leftovers(agent.root) == []


def test_the_sdk_refuses_what_no_header_can_carry(sandbox: Sandbox, agent: Running) -> None:
    with pytest.raises(InvalidArgumentException, match="Invalid metadata key"):
        sandbox.files.write("x.txt", "x", metadata={"has space": "v"})
    with pytest.raises(InvalidArgumentException, match="Invalid metadata value"):
        sandbox.files.write("x.txt", "x", metadata={"k": "line\nbreak"})
    assert not (agent.root / "x.txt").exists()


def test_in_a_pod_the_metadata_is_the_pods_user(pod_sandbox: Sandbox, pod_agent: Running) -> None:
    written = pod_sandbox.files.write("pod.txt", "p", metadata={"where": "pod"})
    assert written.metadata == {"where": "pod"}
    assert pod_sandbox.files.get_info("pod.txt").metadata == {"where": "pod"}
    assert (pod_agent.root / "pod.txt").stat().st_uid == NOBODY.pw_uid
