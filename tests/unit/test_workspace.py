"""The runner's file tools (`steward.runner.workspace`): what the model observes for each call,
and, for every confinement case, that nothing outside the clone was touched.

Each test builds a real git clone in tmp_path at `tmp/clone`, with an `outside` directory and
a sibling `clone-evil` (a prefix-string check would take it for part of the clone) holding
sentinel files whose bytes, modes and links are compared before and after.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from steward.adapters.git import GitError
from steward.runner import workspace as workspace_module
from steward.runner.workspace import (
    TOOL_ARGS,
    TOOL_DESCRIPTIONS,
    ListFilesArgs,
    ReadFileArgs,
    ReplaceInFileArgs,
    SearchTextArgs,
    ToolError,
    Workspace,
    WorkspaceLimits,
    WriteFileArgs,
)

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=GIT_ENV,
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Everything under `root` without following links: kind, content or target, mode."""
    state: dict[str, tuple[str, bytes | str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            info = path.lstat()
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                state[key] = ("link", os.readlink(path), info.st_mode)
            elif stat.S_ISDIR(info.st_mode):
                state[key] = ("dir", "", info.st_mode)
            else:
                state[key] = ("file", path.read_bytes(), info.st_mode)
    return state


@dataclass
class Layout:
    tmp: Path
    clone: Path
    outside: Path
    evil: Path
    ws: Workspace
    before: dict[str, tuple[str, bytes | str, int]]

    def call(self, name: str, **raw: Any) -> str:
        return self.ws.call(name, raw)

    def refused(self, name: str, **raw: Any) -> str:
        with pytest.raises(ToolError) as info:
            self.ws.call(name, raw)
        return str(info.value)

    def outside_state(self) -> dict[str, tuple[str, bytes | str, int]]:
        """The temp dir minus the clone: `outside`, `clone-evil` and anything created beside them."""
        return {k: v for k, v in snapshot(self.tmp).items() if k != "clone" and not k.startswith("clone/")}

    def assert_outside_untouched(self) -> None:
        assert self.outside_state() == self.before


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    clone = tmp_path / "clone"
    outside = tmp_path / "outside"
    evil = tmp_path / "clone-evil"
    for directory in (clone, outside, evil):
        directory.mkdir()
    (outside / "secret.txt").write_text("outside secret\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "deep.txt").write_text("deep outside\n")
    (evil / "secret.txt").write_text("evil secret\n")
    git(clone, "init", "-q")
    (clone / "README.md").write_text("# Project\n\nhello world\n")
    (clone / "src").mkdir()
    (clone / "src" / "app.py").write_text("def main():\n    return 'needle'\n")
    (clone / "src" / "util.py").write_text("X = 1\n")
    (clone / ".gitignore").write_text("*.log\nbuild/\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "initial")
    ws = Workspace(clone)
    return Layout(tmp_path, clone, outside, evil, ws, {})


@pytest.fixture
def lay(layout: Layout) -> Layout:
    """The layout with its outside state recorded (after any per-test setup, call `record`)."""
    layout.before = layout.outside_state()
    return layout


def record(layout: Layout) -> None:
    layout.before = layout.outside_state()


# -- API shape ---------------------------------------------------------------------------------


def test_tool_tables_cover_the_five_tools() -> None:
    names = ["list_files", "search_text", "read_file", "write_file", "replace_in_file"]
    assert list(TOOL_ARGS) == names
    assert set(TOOL_DESCRIPTIONS) == set(names)
    for model in TOOL_ARGS.values():
        schema = model.model_json_schema()
        assert schema["additionalProperties"] is False
    assert SearchTextArgs.model_json_schema()["required"] == ["pattern"]


def test_root_is_the_real_path(layout: Layout) -> None:
    link = layout.tmp / "clone-link"
    link.symlink_to(layout.clone)
    assert Workspace(link).root == layout.clone.resolve()


def test_methods_can_be_called_with_models(lay: Layout) -> None:
    assert "hello world" in lay.ws.read_file(ReadFileArgs(path="README.md"))
    assert lay.ws.write_file(WriteFileArgs(path="n.txt", content="x")) == "wrote 1 bytes to n.txt"
    assert "replaced 1 occurrence" in lay.ws.replace_in_file(
        ReplaceInFileArgs(path="n.txt", old="x", new="y")
    )
    assert "n.txt" in lay.ws.list_files(ListFilesArgs())
    assert "src/app.py:2:" in lay.ws.search_text(SearchTextArgs(pattern="needle"))


# -- call: dispatch and argument validation ------------------------------------------------------


def test_unknown_tool(lay: Layout) -> None:
    message = lay.refused("delete_everything", path="README.md")
    assert message.startswith("unknown tool 'delete_everything'")
    assert "read_file" in message


def test_unknown_tool_name_is_not_echoed_at_length(lay: Layout) -> None:
    message = lay.refused("x" * 5000)
    assert len(message) < 400


@pytest.mark.parametrize(
    ("tool", "raw", "field"),
    [
        ("read_file", {"path": 5}, "path"),
        ("read_file", {}, "path"),
        ("read_file", {"path": "README.md", "start_line": 0}, "start_line"),
        ("read_file", {"path": "README.md", "start_line": "first"}, "start_line"),
        ("read_file", {"path": "README.md", "max_lines": 0}, "max_lines"),
        ("read_file", {"path": "README.md", "max_lines": 100000}, "max_lines"),
        ("write_file", {"path": "a.txt", "content": ["x"]}, "content"),
        ("write_file", {"path": "a.txt"}, "content"),
        ("search_text", {"pattern": ""}, "pattern"),
        ("search_text", {"pattern": "x", "regex": "maybe"}, "regex"),
        ("replace_in_file", {"path": "README.md", "old": "", "new": "x"}, "old"),
        ("list_files", {"path": ".", "recursive": True}, "recursive"),
        ("list_files", {"pattern": 3}, "pattern"),
    ],
)
def test_bad_argument_types_name_the_field(lay: Layout, tool: str, raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ToolError) as info:
        lay.ws.call(tool, raw)
    assert str(info.value).startswith(f"{tool}: {field}: ")
    lay.assert_outside_untouched()


def test_validation_errors_do_not_echo_the_input(lay: Layout) -> None:
    message = lay.refused("read_file", path="README.md", start_line="s" * 5000)
    assert "sss" not in message


def test_arguments_must_be_an_object(lay: Layout) -> None:
    with pytest.raises(ToolError, match="JSON object"):
        lay.ws.call("read_file", ["README.md"])  # type: ignore[arg-type]


# -- confinement: refused paths ------------------------------------------------------------------

REFUSED_PATHS = [
    pytest.param("../x", "'..' components are not allowed", id="dotdot"),
    pytest.param("src/../../outside/secret.txt", "'..' components are not allowed", id="dotdot-deep"),
    pytest.param("src/..", "'..' components are not allowed", id="dotdot-trailing"),
    pytest.param("/etc/passwd", "absolute paths are not allowed", id="absolute"),
    pytest.param("//server/share/x", "absolute paths are not allowed", id="unc-slashes"),
    pytest.param("~", "'~' is not allowed", id="tilde"),
    pytest.param("~/x", "'~' is not allowed", id="tilde-home"),
    pytest.param("~root/x", "'~' is not allowed", id="tilde-user"),
    pytest.param("", "must not be empty", id="empty"),
    pytest.param("a\0b", "control characters", id="nul"),
    pytest.param("README.md\0", "control characters", id="nul-suffix"),
    pytest.param("a\nb", "control characters", id="newline"),
    pytest.param("a\x7fb", "control characters", id="del"),
    pytest.param("a\x1bb", "control characters", id="escape"),
    pytest.param("C:\\Windows\\x", "backslashes are not allowed", id="drive-backslash"),
    pytest.param("C:/Windows/x", "drive letters are not allowed", id="drive-slash"),
    pytest.param("c:x", "drive letters are not allowed", id="drive-relative"),
    pytest.param("\\\\server\\share\\x", "backslashes are not allowed", id="unc"),
    pytest.param("..\\x", "backslashes are not allowed", id="dotdot-backslash"),
    pytest.param("a" * 5000, "5000 characters, more than the limit of 1024", id="5000-chars"),
    pytest.param("a/" * 2500, "5000 characters, more than the limit of 1024", id="5000-chars-dirs"),
    pytest.param("\udcff", "not valid Unicode", id="lone-surrogate"),
]


# Each tool with the arguments it needs besides `path`.
TOOL_PATH_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {}),
    ("write_file", {"content": "pwned\n"}),
    ("replace_in_file", {"old": "needle", "new": "pwned"}),
    ("list_files", {}),
    ("search_text", {"pattern": "needle"}),
]


@pytest.mark.parametrize(("path", "problem"), REFUSED_PATHS)
@pytest.mark.parametrize("tool", ["read_file", "write_file", "replace_in_file", "list_files", "search_text"])
def test_refused_paths(lay: Layout, tool: str, path: str, problem: str) -> None:
    raw: dict[str, Any] = {"path": path}
    if tool == "write_file":
        raw["content"] = "pwned\n"
    elif tool == "replace_in_file":
        raw |= {"old": "secret", "new": "pwned"}
    elif tool == "search_text":
        raw["pattern"] = "secret"
    message = lay.refused(tool, **raw)
    assert message.startswith("path: ")
    assert problem in message
    assert len(message) < 400  # never echoes more than ~200 characters of the input
    lay.assert_outside_untouched()
    assert lay.ws.changed_paths() == []


def test_dotdot_write_creates_nothing_beside_the_clone(lay: Layout) -> None:
    lay.refused("write_file", path="../x", content="x")
    assert not (lay.tmp / "x").exists()
    lay.assert_outside_untouched()


def test_absolute_path_into_the_outside_is_refused(lay: Layout) -> None:
    for path in (str(lay.outside / "secret.txt"), str(lay.clone / "README.md")):
        assert "absolute paths" in lay.refused("read_file", path=path)
        assert "absolute paths" in lay.refused("write_file", path=path, content="pwned")
    lay.assert_outside_untouched()


@pytest.mark.parametrize("path", ["./README.md", ".//README.md", "././README.md"])
def test_dot_and_double_slash_forms_are_normalized(lay: Layout, path: str) -> None:
    assert lay.call("read_file", path=path).startswith("README.md: lines 1-3 of 3")


def test_normalized_path_is_what_gets_written_and_recorded(lay: Layout) -> None:
    assert lay.call("write_file", path=".//src/./new.py/", content="x = 2\n") == "wrote 6 bytes to src/new.py"
    assert (lay.clone / "src" / "new.py").read_text() == "x = 2\n"
    assert lay.ws.changed_paths() == ["src/new.py"]


# -- paths: characters a reviewer cannot see, and Unicode normalization ---------------------------

# One line per character: each is refused wherever it stands in a path, by every tool.
INVISIBLE_IN_PATHS = [
    *(pytest.param(chr(c), id=f"bidi-{c:04X}") for c in range(0x202A, 0x202F)),  # LRE RLE PDF LRO RLO
    *(pytest.param(chr(c), id=f"isolate-{c:04X}") for c in range(0x2066, 0x206A)),  # LRI RLI FSI PDI
    pytest.param("\u2028", id="line-separator"),
    pytest.param("\u2029", id="paragraph-separator"),
    *(pytest.param(chr(c), id=f"zero-width-{c:04X}") for c in range(0x200B, 0x2010)),  # ZWSP ZWNJ ZWJ LRM RLM
    pytest.param("\u061c", id="arabic-letter-mark"),
    pytest.param("\ufeff", id="bom"),
    pytest.param("\u2060", id="word-joiner"),
    pytest.param("\u2063", id="invisible-separator"),
    pytest.param("\u206e", id="national-digit-shapes"),
    pytest.param("\u00ad", id="soft-hyphen"),
    pytest.param("\u034f", id="combining-grapheme-joiner"),
    pytest.param("\u3164", id="hangul-filler"),
    pytest.param("\u180e", id="mongolian-vowel-separator"),
    pytest.param("\ufe0f", id="variation-selector-16"),
    pytest.param("\U000e0041", id="tag-latin-a"),
    pytest.param("\U000e0001", id="language-tag"),
    pytest.param("\u00a0", id="no-break-space"),
    pytest.param("\u2009", id="thin-space"),
    pytest.param("\u3000", id="ideographic-space"),
    pytest.param("\u0600", id="unlisted-format-character"),  # caught by the category backstop
]


@pytest.mark.parametrize("char", INVISIBLE_IN_PATHS)
def test_invisible_and_reordering_characters_in_paths_are_refused(lay: Layout, char: str) -> None:
    clone_before = snapshot(lay.clone)
    point = f"U+{ord(char):04X}"
    for path in (f"src/app{char}.py", f"{char}README.md", f"new{char}dir/file.txt", f"evil{char}txt.exe"):
        for tool, extra in TOOL_PATH_ARGS:
            message = lay.refused(tool, path=path, **extra)
            assert message.startswith("path: "), (tool, message)
            assert point in message, (tool, message)
            assert "not allowed in paths" in message
            assert char not in message  # shown escaped, never raw
    assert snapshot(lay.clone) == clone_before
    assert lay.ws.changed_paths() == []
    lay.assert_outside_untouched()


def test_other_non_ascii_names_are_fine(lay: Layout) -> None:
    for path in (
        "caf\u00e9.txt",
        "\u65e5\u672c/\u8a9e.md",
        "\u0645\u0644\u0641.txt",
        "na\u00efve/\U0001f600.txt",
    ):
        assert lay.call("write_file", path=path, content="ok\n").startswith("wrote 3 bytes")
        assert "1\tok" in lay.call("read_file", path=path)


NFC = "caf\u00e9/\u00f1o\u00f1o.txt"  # precomposed
NFD = "cafe\u0301/n\u0303on\u0303o.txt"  # the same name, decomposed


@pytest.mark.parametrize(
    ("written", "read"),
    [("e\u0301.txt", "\u00e9.txt"), ("\u00e9.txt", "e\u0301.txt"), (NFD, NFC), (NFC, NFD)],
)
def test_names_that_differ_only_in_normalization_are_one_file(lay: Layout, written: str, read: str) -> None:
    nfc = unicodedata.normalize("NFC", written)
    names_before = set(snapshot(lay.clone))
    assert lay.call("write_file", path=written, content="first\n") == f"wrote 6 bytes to {nfc}"
    assert lay.call("read_file", path=read).startswith(f"{nfc}: lines 1-1 of 1")
    assert "1\tfirst" in lay.call("read_file", path=read)
    lay.call("write_file", path=read, content="second\n")
    lay.call("replace_in_file", path=written, old="second", new="third")
    assert "1\tthird" in lay.call("read_file", path=written)
    # One file on disk, under the NFC name; one entry in the listing; one changed path.
    parts = nfc.split("/")
    assert set(snapshot(lay.clone)) - names_before == {"/".join(parts[: i + 1]) for i in range(len(parts))}
    assert (lay.clone / nfc).read_bytes() == b"third\n"
    listed = lay.call("list_files").splitlines()
    assert listed.count(nfc) == 1
    assert [line for line in listed if unicodedata.normalize("NFC", line) == nfc] == [nfc]
    assert lay.ws.changed_paths() == [nfc]
    lay.assert_outside_untouched()


def test_a_committed_nfd_name_is_addressed_where_it_is(lay: Layout) -> None:
    (lay.clone / "cafe\u0301").mkdir()
    (lay.clone / NFD).write_text("decomposed\n")
    git(lay.clone, "add", "-A")
    git(lay.clone, "commit", "-q", "-m", "nfd")
    for path in (NFC, NFD):
        assert "1\tdecomposed" in lay.call("read_file", path=path)
    lay.call("write_file", path=NFC, content="rewritten\n")
    lay.call("replace_in_file", path=NFC, old="rewritten", new="replaced")
    # Written in place: no NFC twin beside the stored NFD name.
    assert sorted(os.listdir(lay.clone / "cafe\u0301")) == ["n\u0303on\u0303o.txt"]
    assert not (lay.clone / "caf\u00e9").exists()
    assert (lay.clone / NFD).read_text() == "replaced\n"
    assert lay.ws.changed_paths() == [NFD]  # the stored name, as git knows it
    assert NFC in lay.call("list_files").splitlines()
    assert lay.call("list_files", path=NFD.partition("/")[0]) == NFC
    assert lay.call("search_text", pattern="replaced").startswith(f"{NFC}:1:")


@pytest.mark.parametrize(
    ("first", "second"),
    [("e\u0301.txt", "\u00e9.txt"), ("\u212a.txt", "K.txt"), ("\u212b", "\u00c5")],  # Kelvin K, Angstrom
)
def test_two_stored_names_with_one_normal_form_are_ambiguous(lay: Layout, first: str, second: str) -> None:
    (lay.clone / first).write_text("one\n")
    (lay.clone / second).write_text("two\n")
    clone_before = snapshot(lay.clone)
    for path in (first, second):
        for tool, extra in TOOL_PATH_ARGS:
            if tool in ("list_files", "search_text"):
                continue
            message = lay.refused(tool, path=path, **extra)
            assert "ambiguous" in message, message
            assert "differ only in Unicode normalization" in message
    assert snapshot(lay.clone) == clone_before
    assert lay.ws.changed_paths() == []


# -- confinement: symbolic links -----------------------------------------------------------------


def test_sibling_prefix_directory_through_a_symlink(lay: Layout) -> None:
    # A prefix-string check would accept /tmp/clone-evil as inside /tmp/clone.
    (lay.clone / "evil").symlink_to(lay.evil)
    (lay.clone / "evil-file").symlink_to(lay.evil / "secret.txt")
    record(lay)
    assert "leads outside the repository" in lay.refused("read_file", path="evil/secret.txt")
    assert "leads outside the repository" in lay.refused("read_file", path="evil-file")
    assert "leads outside the repository" in lay.refused("write_file", path="evil/secret.txt", content="x")
    assert "leads outside the repository" in lay.refused("write_file", path="evil/new.txt", content="x")
    assert "leads outside the repository" in lay.refused("list_files", path="evil")
    assert "leads outside the repository" in lay.refused("search_text", pattern="secret", path="evil")
    assert "evil secret" not in lay.call("search_text", pattern="secret")
    lay.assert_outside_untouched()


def test_committed_symlink_to_outside_is_refused_for_read_and_write(lay: Layout) -> None:
    link = lay.clone / "link.txt"
    link.symlink_to("../outside/secret.txt")
    git(lay.clone, "add", "link.txt")
    git(lay.clone, "commit", "-q", "-m", "link")
    record(lay)
    message = lay.refused("read_file", path="link.txt")
    assert "leads outside the repository" in message
    assert "outside secret" not in message
    assert "symbolic link" in lay.refused("write_file", path="link.txt", content="pwned\n")
    assert "symbolic link" in lay.refused("replace_in_file", path="link.txt", old="outside", new="pwned")
    assert "leads outside the repository" in lay.refused("search_text", pattern="secret", path="link.txt")
    assert os.readlink(link) == "../outside/secret.txt"
    lay.assert_outside_untouched()
    assert lay.ws.changed_paths() == []


def test_new_file_under_a_symlinked_directory_outside_is_refused(lay: Layout) -> None:
    (lay.clone / "out").symlink_to(lay.outside)
    record(lay)
    for path in ("out/new.txt", "out/sub/new.txt", "out/made/up/new.txt", "out/secret.txt"):
        assert "leads outside the repository" in lay.refused("write_file", path=path, content="pwned\n")
    assert "leads outside the repository" in lay.refused("read_file", path="out/sub/deep.txt")
    assert not (lay.outside / "new.txt").exists()
    assert not (lay.outside / "made").exists()
    lay.assert_outside_untouched()


def test_dangling_symlink_to_outside_is_refused(lay: Layout) -> None:
    (lay.clone / "dangling").symlink_to(lay.outside / "not-yet.txt")
    record(lay)
    assert "leads outside the repository" in lay.refused("read_file", path="dangling")
    assert "symbolic link" in lay.refused("write_file", path="dangling", content="pwned")
    assert not (lay.outside / "not-yet.txt").exists()
    lay.assert_outside_untouched()


def test_symlink_inside_the_clone_is_readable_but_not_writable(lay: Layout) -> None:
    (lay.clone / "docs").mkdir()
    (lay.clone / "docs" / "readme-link").symlink_to("../README.md")
    assert "hello world" in lay.call("read_file", path="docs/readme-link")
    assert "symbolic link" in lay.refused("write_file", path="docs/readme-link", content="x")
    assert "symbolic link" in lay.refused("replace_in_file", path="docs/readme-link", old="hello", new="x")
    assert (lay.clone / "README.md").read_text() == "# Project\n\nhello world\n"


def test_write_through_a_symlinked_directory_inside_records_the_real_path(lay: Layout) -> None:
    (lay.clone / "source").symlink_to("src")
    assert lay.call("write_file", path="source/b.py", content="B = 1\n") == "wrote 6 bytes to source/b.py"
    assert (lay.clone / "src" / "b.py").read_text() == "B = 1\n"
    assert lay.ws.changed_paths() == ["src/b.py"]


def test_symlink_swapped_in_after_the_check_is_not_followed_on_read(lay: Layout) -> None:
    target = lay.ws._resolve("src/util.py", "path")
    (lay.clone / "src" / "util.py").unlink()
    (lay.clone / "src" / "util.py").symlink_to(lay.outside / "secret.txt")
    with pytest.raises(ToolError, match="symbolic link"):
        lay.ws._open_file(target)
    lay.assert_outside_untouched()


def test_directory_swapped_for_a_symlink_after_the_check_is_not_followed(lay: Layout) -> None:
    (lay.outside / "util.py").write_text("outside util\n")
    record(lay)
    read_target = lay.ws._resolve("src/util.py", "path")
    write_target = lay.ws._resolve("src/new.py", "path", follow_final=False)
    os.rename(lay.clone / "src", lay.clone / "src-moved")
    (lay.clone / "src").symlink_to(lay.outside)
    with pytest.raises(ToolError, match="not a directory"):
        lay.ws._open_file(read_target)
    with pytest.raises(ToolError, match="not a directory"):
        lay.ws._write(write_target, b"pwned\n")
    assert not (lay.outside / "new.py").exists()
    lay.assert_outside_untouched()


def test_hard_link_to_outside_is_replaced_not_written_through(lay: Layout) -> None:
    os.link(lay.outside / "secret.txt", lay.clone / "hard.txt")
    record(lay)
    lay.call("replace_in_file", path="hard.txt", old="outside", new="inside")
    lay.call("write_file", path="hard.txt", content="rewritten\n")
    assert (lay.clone / "hard.txt").read_text() == "rewritten\n"
    lay.assert_outside_untouched()


def test_fifo_is_refused_without_blocking(lay: Layout) -> None:
    os.mkfifo(lay.clone / "pipe")
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(lay.refused("read_file", path="pipe")), daemon=True
    )
    thread.start()
    thread.join(10)
    assert result, "read_file blocked on a FIFO"
    assert "not a regular file" in result[0]
    assert "not a regular file" in lay.refused("write_file", path="pipe", content="x")


# -- confinement: the git directory --------------------------------------------------------------

GIT_PATHS = [
    ".git",
    ".git/config",
    ".GIT/hooks/x",
    ".Git/HEAD",
    "./.git/config",
    ".git./config",
    ".git /config",
    ".git . ./config",
    "git~1/config",
    ".g\u200cit/config",
    "src/.git/config",
]


@pytest.mark.parametrize("path", GIT_PATHS)
@pytest.mark.parametrize("tool", ["read_file", "write_file", "replace_in_file", "list_files", "search_text"])
def test_git_directory_is_neither_readable_nor_writable(lay: Layout, tool: str, path: str) -> None:
    git_before = snapshot(lay.clone / ".git")
    raw: dict[str, Any] = {"path": path}
    if tool == "write_file":
        raw["content"] = "[core]\n\tfsmonitor = evil\n"
    elif tool == "replace_in_file":
        raw |= {"old": "[core]", "new": "[evil]"}
    elif tool == "search_text":
        raw["pattern"] = "core"
    message = lay.refused(tool, **raw)
    assert ".git directory is not accessible" in message
    assert snapshot(lay.clone / ".git") == git_before
    assert not (lay.clone / ".GIT").exists() or (lay.clone / ".GIT").samefile(lay.clone / ".git")
    lay.assert_outside_untouched()


def test_dotdot_back_into_git_is_refused(lay: Layout) -> None:
    git_before = snapshot(lay.clone / ".git")
    assert "'..' components" in lay.refused("read_file", path="./.git/../.git/config")
    assert "'..' components" in lay.refused("write_file", path="./.git/../.git/config", content="x")
    assert snapshot(lay.clone / ".git") == git_before


def test_symlink_into_the_git_directory_is_refused(lay: Layout) -> None:
    (lay.clone / "gitlink").symlink_to(".git")
    (lay.clone / "configlink").symlink_to(".git/config")
    git_before = snapshot(lay.clone / ".git")
    assert "not accessible" in lay.refused("read_file", path="gitlink/config")
    assert "not accessible" in lay.refused("read_file", path="configlink")
    assert "not accessible" in lay.refused(
        "write_file", path="gitlink/hooks/pre-commit", content="#!/bin/sh\n"
    )
    assert "not accessible" in lay.refused("list_files", path="gitlink")
    assert snapshot(lay.clone / ".git") == git_before


def test_git_file_pointing_outside(tmp_path: Path) -> None:
    clone, gitdir = tmp_path / "clone", tmp_path / "gitdir"
    git(tmp_path, "init", "-q", f"--separate-git-dir={gitdir}", str(clone))
    (clone / "a.txt").write_text("alpha\n")
    (clone / "meta").symlink_to(gitdir)
    git(clone, "add", "a.txt")
    git(clone, "commit", "-q", "-m", "a")
    before = snapshot(gitdir)
    ws = Workspace(clone)
    for path in (".git", "meta/config", "meta/HEAD"):
        with pytest.raises(ToolError):
            ws.call("read_file", {"path": path})
        with pytest.raises(ToolError):
            ws.call("write_file", {"path": path, "content": "x"})
    assert (clone / ".git").read_text().startswith("gitdir: ")
    assert ws.call("list_files", {}) == "a.txt\nmeta"
    assert ws.call("search_text", {"pattern": "alpha"}) == "a.txt:1:alpha"
    assert snapshot(gitdir) == before


def test_git_file_pointing_inside_the_clone(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "init", "-q", f"--separate-git-dir={clone / 'meta'}", str(clone))
    (clone / "a.txt").write_text("alpha core\n")
    git(clone, "add", "a.txt")
    git(clone, "commit", "-q", "-m", "a")
    before = snapshot(clone / "meta")
    ws = Workspace(clone)
    for path in ("meta/config", "meta", "meta/hooks/pre-commit"):
        with pytest.raises(ToolError, match=r"\.git directory is not accessible"):
            ws.call("read_file", {"path": path})
        with pytest.raises(ToolError, match=r"\.git directory is not accessible"):
            ws.call("write_file", {"path": path, "content": "#!/bin/sh\n"})
    assert ws.call("list_files", {}) == "a.txt"
    assert ws.call("search_text", {"pattern": "core"}) == "a.txt:1:alpha core"
    assert snapshot(clone / "meta") == before


def test_planted_core_worktree_does_not_reach_outside(lay: Layout) -> None:
    # A setup command could have written this; the tools name the work tree themselves.
    git(lay.clone, "config", "core.worktree", str(lay.outside))
    record(lay)
    listing = lay.call("list_files")
    assert "secret.txt" not in listing
    assert "README.md" in listing
    assert "outside secret" not in lay.call("search_text", pattern="secret")
    lay.assert_outside_untouched()


# -- list_files --------------------------------------------------------------------------------


def test_list_respects_gitignore_and_shows_untracked(lay: Layout) -> None:
    (lay.clone / "debug.log").write_text("ignored\n")
    (lay.clone / "build").mkdir()
    (lay.clone / "build" / "out.txt").write_text("ignored\n")
    (lay.clone / "notes.txt").write_text("untracked\n")
    assert lay.call("list_files") == ".gitignore\nREADME.md\nnotes.txt\nsrc/app.py\nsrc/util.py"


def test_list_excludes_deleted_files(lay: Layout) -> None:
    (lay.clone / "src" / "util.py").unlink()
    assert lay.call("list_files", path="src") == "src/app.py"


def test_list_subdirectory_and_pattern(lay: Layout) -> None:
    (lay.clone / "src" / "sub").mkdir()
    (lay.clone / "src" / "sub" / "deep.py").write_text("")
    (lay.clone / "src" / "data.json").write_text("{}")
    assert lay.call("list_files", path="src") == "src/app.py\nsrc/data.json\nsrc/sub/deep.py\nsrc/util.py"
    assert lay.call("list_files", pattern="*.py") == "src/app.py\nsrc/sub/deep.py\nsrc/util.py"
    assert lay.call("list_files", pattern="app.py") == "src/app.py"
    assert lay.call("list_files", path="src/sub/", pattern="*.py") == "src/sub/deep.py"
    assert lay.call("list_files", pattern="*.rs") == "no files matching '*.rs' under '.'"


def test_list_pathspec_characters_are_literal(lay: Layout) -> None:
    (lay.clone / "[ab]").mkdir()
    (lay.clone / "[ab]" / "f.txt").write_text("")
    (lay.clone / "a").mkdir()
    (lay.clone / "a" / "g.txt").write_text("")
    (lay.clone / ":(exclude)a").mkdir()
    (lay.clone / ":(exclude)a" / "h.txt").write_text("")
    assert lay.call("list_files", path="[ab]") == "[ab]/f.txt"
    assert lay.call("list_files", path=":(exclude)a") == ":(exclude)a/h.txt"
    assert lay.refused("list_files", path=":(top)") == "path: ':(top)' does not exist"


def test_list_caps_entries(layout: Layout) -> None:
    for i in range(30):
        (layout.clone / f"f{i:02}.txt").write_text("")
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_list_entries=10))
    lines = ws.call("list_files", {"pattern": "f*.txt"}).splitlines()
    assert lines[:10] == [f"f{i:02}.txt" for i in range(10)]
    assert lines[10] == "[... and 20 more; narrow the path or the pattern]"
    assert len(lines) == 11


def test_list_refuses_files_and_missing_directories(lay: Layout) -> None:
    assert "is a file, not a directory" in lay.refused("list_files", path="README.md")
    assert "does not exist" in lay.refused("list_files", path="nope")


def test_list_never_shows_a_nested_git_directory(lay: Layout) -> None:
    nested = lay.clone / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "x.py").write_text("")
    # git shows the nested repository as one directory entry, never what is inside it.
    assert lay.call("list_files").splitlines()[-1] == "vendor/lib/"
    assert ".git/" not in lay.call("list_files")


# -- search_text ---------------------------------------------------------------------------------


def test_search_finds_tracked_and_untracked_not_ignored(lay: Layout) -> None:
    (lay.clone / "notes.txt").write_text("an untracked needle\n")
    (lay.clone / "debug.log").write_text("an ignored needle\n")
    assert lay.call("search_text", pattern="needle") == (
        "notes.txt:1:an untracked needle\nsrc/app.py:2:    return 'needle'"
    )


def test_search_path_regex_and_case(lay: Layout) -> None:
    assert lay.call("search_text", pattern="NEEDLE", ignore_case=True) == "src/app.py:2:    return 'needle'"
    assert lay.call("search_text", pattern="NEEDLE") == "no matches for 'NEEDLE'"
    assert (
        lay.call("search_text", pattern=r"^(X|def) ", regex=True)
        == "src/app.py:1:def main():\nsrc/util.py:1:X = 1"
    )
    assert lay.call("search_text", pattern="(X", path="src") == "no matches for '(X' under 'src'"
    assert lay.call("search_text", pattern="X", path="src/util.py") == "src/util.py:1:X = 1"
    assert "does not exist" in lay.refused("search_text", pattern="X", path="nope")


def test_search_pattern_that_looks_like_an_option(lay: Layout) -> None:
    (lay.clone / "opts.txt").write_text("run with --help or -e\n")
    assert lay.call("search_text", pattern="--help") == "opts.txt:1:run with --help or -e"
    assert lay.call("search_text", pattern="-e") == "opts.txt:1:run with --help or -e"


def test_search_bad_regex(lay: Layout) -> None:
    message = lay.refused("search_text", pattern="(unclosed", regex=True)
    assert message.startswith("pattern: not a valid extended regular expression")


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("a\0b", "NUL bytes are not allowed"),
        ("a\nb", "line breaks are not allowed"),
        ("x" * 1001, "1001 characters, more than the limit of 1000"),
    ],
)
def test_search_pattern_limits(lay: Layout, pattern: str, problem: str) -> None:
    message = lay.refused("search_text", pattern=pattern)
    assert message.startswith("pattern: ")
    assert problem in message


def test_search_caps_matches(layout: Layout) -> None:
    (layout.clone / "many.txt").write_text("".join(f"hit {i}\n" for i in range(50)))
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_search_matches=5))
    lines = ws.call("search_text", {"pattern": "hit"}).splitlines()
    assert lines[:5] == [f"many.txt:{i + 1}:hit {i}" for i in range(5)]
    assert lines[5] == "[showing 5 of 50 matching lines; narrow the pattern or the path]"


def test_search_caps_bytes_and_long_lines(layout: Layout) -> None:
    (layout.clone / "wide.txt").write_text(("hit " + "w" * 2000 + "\n") * 20)
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_search_bytes=2000))
    out = ws.call("search_text", {"pattern": "hit"})
    assert len(out.encode()) < 2200
    assert "[...line cut]" in out
    assert out.endswith("matching lines; narrow the pattern or the path]")
    assert "of 20 matching lines" in out


def test_search_skips_binary_files(lay: Layout) -> None:
    (lay.clone / "blob.bin").write_bytes(b"needle\0\x01\x02")
    assert "blob.bin" not in lay.call("search_text", pattern="needle")


def test_search_timeout_is_a_tool_error(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*args: Any, **kwargs: Any) -> Any:
        raise GitError("git --git-dir timed out after 20 s")

    monkeypatch.setattr(workspace_module, "run_git", slow)
    assert lay.refused("search_text", pattern="x") == "search_text: timed out; narrow the path or the pattern"


# -- read_file -----------------------------------------------------------------------------------


def test_read_window_and_line_numbers(lay: Layout) -> None:
    (lay.clone / "nums.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    out = lay.call("read_file", path="nums.txt", start_line=10, max_lines=3)
    assert out == (
        "nums.txt: lines 10-12 of 1000\n"
        "    10\tline 10\n    11\tline 11\n    12\tline 12\n"
        "[lines 13-1000 follow; read_file with start_line=13 to continue]"
    )
    default = lay.call("read_file", path="nums.txt").splitlines()
    assert default[0] == "nums.txt: lines 1-400 of 1000"
    assert default[400] == "   400\tline 400"
    assert default[-1] == "[lines 401-1000 follow; read_file with start_line=401 to continue]"
    tail = lay.call("read_file", path="nums.txt", start_line=999)
    assert tail == "nums.txt: lines 999-1000 of 1000\n   999\tline 999\n  1000\tline 1000\n[end of file]"


def test_read_counts_a_last_line_without_newline(lay: Layout) -> None:
    (lay.clone / "n.txt").write_text("a\nb\nc")
    assert lay.call("read_file", path="n.txt", max_lines=1).splitlines()[0] == "n.txt: lines 1-1 of 3"
    assert lay.call("read_file", path="n.txt").endswith("     3\tc\n[end of file]")


def test_read_past_the_end_and_empty_file(lay: Layout) -> None:
    assert lay.refused("read_file", path="README.md", start_line=9) == (
        "start_line: 9 is past the end of 'README.md' (3 lines)"
    )
    (lay.clone / "empty.txt").write_text("")
    assert lay.call("read_file", path="empty.txt") == "empty.txt: empty file (0 lines)"


def test_read_caps_bytes(layout: Layout) -> None:
    (layout.clone / "wide.txt").write_text(("y" * 99 + "\n") * 100)
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_read_bytes=1000))
    out = ws.call("read_file", {"path": "wide.txt"})
    assert len(out.encode()) < 1200
    assert out.splitlines()[0] == "wide.txt: lines 1-9 of 100"
    assert out.endswith(
        "[output capped at 1000 bytes; lines 10-100 follow; read_file with start_line=10 to continue]"
    )


def test_read_cuts_a_single_huge_line(layout: Layout) -> None:
    (layout.clone / "min.js").write_text("z" * 100_000 + "\nnext\n")
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_read_bytes=1000))
    out = ws.call("read_file", {"path": "min.js"})
    assert len(out.encode()) < 1200
    assert "[...line cut]" in out
    assert out.endswith("lines 2-2 follow; read_file with start_line=2 to continue]")


def test_read_clamps_max_lines_to_the_instance_limit(layout: Layout) -> None:
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_read_lines=2))
    assert (
        ws.call("read_file", {"path": "README.md", "max_lines": 50}).splitlines()[0]
        == "README.md: lines 1-2 of 3"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x7fELF\x02\x01\x01\0\0\0", "is a binary file"),
        (b"text first\n" * 10 + b"\0 then a NUL", "is a binary file"),
        (b"caf\xe9 latin-1\n", "is not UTF-8 text"),
    ],
)
def test_binary_file_is_refused(lay: Layout, content: bytes, problem: str) -> None:
    (lay.clone / "blob").write_bytes(content)
    assert problem in lay.refused("read_file", path="blob")
    assert problem in lay.refused("replace_in_file", path="blob", old="t", new="x")
    assert (lay.clone / "blob").read_bytes() == content


def test_read_refuses_directories_and_missing_files(lay: Layout) -> None:
    assert "is a directory; use list_files" in lay.refused("read_file", path="src")
    assert "is a directory; use list_files" in lay.refused("read_file", path=".")
    assert lay.refused("read_file", path="nope.txt") == "path: 'nope.txt' does not exist"
    assert "not a directory" in lay.refused("read_file", path="README.md/x")


def test_read_shows_crlf_without_carriage_returns(lay: Layout) -> None:
    (lay.clone / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    assert lay.call("read_file", path="w.txt") == (
        "w.txt: lines 1-2 of 2 (CRLF line endings)\n     1\tone\n     2\ttwo\n[end of file]"
    )


# -- write_file ----------------------------------------------------------------------------------


def test_write_creates_parents(lay: Layout) -> None:
    assert lay.call("write_file", path="new/deep/dir/f.py", content="print('hi')\n") == (
        "wrote 12 bytes to new/deep/dir/f.py"
    )
    assert (lay.clone / "new" / "deep" / "dir" / "f.py").read_text() == "print('hi')\n"
    lay.assert_outside_untouched()


def test_write_overwrites_and_keeps_mode(lay: Layout) -> None:
    script = lay.clone / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o750)
    lay.call("write_file", path="run.sh", content="#!/bin/sh\necho hi\n")
    assert script.read_text() == "#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    lay.call("replace_in_file", path="run.sh", old="hi", new="there")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750


def test_write_size_cap_counts_utf8_bytes(layout: Layout) -> None:
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_write_bytes=10))
    assert ws.call("write_file", {"path": "ok.txt", "content": "0123456789"}) == "wrote 10 bytes to ok.txt"
    with pytest.raises(ToolError) as info:
        ws.call("write_file", {"path": "big.txt", "content": "é" * 6})
    assert str(info.value) == "content: 12 bytes, more than the limit of 10"
    assert not (layout.clone / "big.txt").exists()
    assert ws.changed_paths() == ["ok.txt"]


def test_write_refuses_directories(lay: Layout) -> None:
    assert "is a directory" in lay.refused("write_file", path="src", content="x")
    assert "is a directory" in lay.refused("write_file", path=".", content="x")
    assert "not a directory" in lay.refused("write_file", path="README.md/x", content="x")


def test_write_refuses_lone_surrogates(lay: Layout) -> None:
    assert (
        lay.refused("write_file", path="s.txt", content="\ud800")
        == "content: not valid Unicode (a lone surrogate)"
    )
    assert not (lay.clone / "s.txt").exists()


def test_write_leaves_no_temporary_files(lay: Layout) -> None:
    lay.call("write_file", path="src/a.txt", content="a")
    lay.call("write_file", path="src/a.txt", content="b")
    assert sorted(p.name for p in (lay.clone / "src").iterdir()) == ["a.txt", "app.py", "util.py"]


def test_failed_write_leaves_the_file_and_no_temporary(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", str(lay.outside / "secret.txt"))

    monkeypatch.setattr(os, "write", full)
    message = lay.refused("write_file", path="README.md", content="new")
    assert message == "write_file: No space left on device"  # no path in an OSError's message
    assert (lay.clone / "README.md").read_text() == "# Project\n\nhello world\n"
    assert sorted(p.name for p in lay.clone.iterdir()) == [".git", ".gitignore", "README.md", "src"]
    assert lay.ws.changed_paths() == []


def test_changed_paths_in_order_and_unique(lay: Layout) -> None:
    lay.call("write_file", path="b.txt", content="1")
    lay.call("write_file", path="a.txt", content="1")
    lay.call("replace_in_file", path="b.txt", old="1", new="2")
    lay.call("replace_in_file", path="src/app.py", old="needle", new="pin")
    assert lay.ws.changed_paths() == ["b.txt", "a.txt", "src/app.py"]


# -- replace_in_file -----------------------------------------------------------------------------


def test_replace_exactly_once(lay: Layout) -> None:
    out = lay.call("replace_in_file", path="src/app.py", old="'needle'", new="'pin'")
    assert out == "replaced 1 occurrence in src/app.py at line 2; the file is now 29 bytes"
    assert (lay.clone / "src" / "app.py").read_text() == "def main():\n    return 'pin'\n"


def test_replace_with_no_match_leaves_the_file_and_shows_it(lay: Layout) -> None:
    path = lay.clone / "src" / "app.py"
    before = path.read_bytes()
    message = lay.refused("replace_in_file", path="src/app.py", old="return 'haystack'", new="x")
    assert message.startswith("old: no match in src/app.py")
    # The latest read of the file, in read_file's format, so the model can copy the exact text.
    assert message.endswith(
        "The file as it is now:\nsrc/app.py: lines 1-2 of 2\n     1\tdef main():\n     2\t    return 'needle'\n[end of file]"
    )
    assert path.read_bytes() == before
    assert lay.ws.changed_paths() == []


def test_replace_with_two_matches_leaves_the_file(lay: Layout) -> None:
    path = lay.clone / "dup.py"
    path.write_text("x = 1\ny = 2\nx = 1\n")
    before = path.read_bytes()
    message = lay.refused("replace_in_file", path="dup.py", old="x = 1", new="x = 3")
    assert message.startswith("old: 2 matches in dup.py (lines 1, 3); it must match exactly once")
    assert "     3\tx = 1\n[end of file]" in message
    assert path.read_bytes() == before


def test_replace_overlapping_matches_are_ambiguous(lay: Layout) -> None:
    (lay.clone / "a.txt").write_text("aaa\n")
    assert "matches in a.txt" in lay.refused("replace_in_file", path="a.txt", old="aa", new="b")
    assert (lay.clone / "a.txt").read_text() == "aaa\n"


def test_failed_replacement_message_shows_the_current_content(lay: Layout) -> None:
    lay.call("write_file", path="cfg.ini", content="[a]\nkey = old\n")
    lay.call("write_file", path="cfg.ini", content="[a]\nkey = newer\n")
    message = lay.refused("replace_in_file", path="cfg.ini", old="key = old\n", new="key = 2\n")
    assert "     2\tkey = newer" in message


def test_failed_replacement_message_is_bounded(layout: Layout) -> None:
    (layout.clone / "big.txt").write_text(("q" * 80 + "\n") * 5000)
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_read_bytes=4096, max_read_lines=400))
    with pytest.raises(ToolError) as info:
        ws.call("replace_in_file", {"path": "big.txt", "old": "zzz", "new": "y"})
    assert len(str(info.value).encode()) < 4096 + 400
    assert "of 5000" in str(info.value)


def test_replace_preserves_crlf(lay: Layout) -> None:
    path = lay.clone / "win.txt"
    path.write_bytes(b"first\r\nsecond\r\nthird\r\n")
    lay.call("replace_in_file", path="win.txt", old="second\r\n", new="2nd\r\n")
    assert path.read_bytes() == b"first\r\n2nd\r\nthird\r\n"
    # "\n" in old and new, as a model writes them, still matches and keeps CRLF.
    lay.call("replace_in_file", path="win.txt", old="first\n2nd\n", new="one\ntwo\nthree\n")
    assert path.read_bytes() == b"one\r\ntwo\r\nthree\r\nthird\r\n"


def test_replace_crlf_retry_must_also_match_once(lay: Layout) -> None:
    path = lay.clone / "win.txt"
    path.write_bytes(b"a\r\nb\r\na\r\nb\r\n")
    assert "2 matches" in lay.refused("replace_in_file", path="win.txt", old="a\nb", new="c")
    assert path.read_bytes() == b"a\r\nb\r\na\r\nb\r\n"


def test_replace_keeps_a_lone_cr_and_bom(lay: Layout) -> None:
    path = lay.clone / "odd.txt"
    path.write_bytes(b"\xef\xbb\xbfone\rtwo\nthree\n")
    lay.call("replace_in_file", path="odd.txt", old="three", new="3")
    assert path.read_bytes() == b"\xef\xbb\xbfone\rtwo\n3\n"


def test_replace_refuses_growing_past_the_cap(layout: Layout) -> None:
    ws = Workspace(layout.clone, limits=WorkspaceLimits(max_write_bytes=40))
    before = (layout.clone / "src" / "app.py").read_bytes()
    with pytest.raises(ToolError, match="more than the limit of 40"):
        ws.call("replace_in_file", {"path": "src/app.py", "old": "needle", "new": "n" * 50})
    assert (layout.clone / "src" / "app.py").read_bytes() == before


def test_replace_missing_file(lay: Layout) -> None:
    assert (
        lay.refused("replace_in_file", path="nope.py", old="a", new="b") == "path: 'nope.py' does not exist"
    )
    assert not (lay.clone / "nope.py").exists()


@pytest.mark.parametrize(
    ("content", "old", "new"),
    [
        (b"def main():\n    return 'needle'\n", "'needle'", "'needle'"),
        (b"x\n", "x", "x"),
        (b"a\r\nb\r\n", "a\nb", "a\r\nb"),  # different only in line endings, which the CRLF retry evens out
    ],
)
def test_replace_with_new_equal_to_old_is_an_error_and_leaves_the_file(
    lay: Layout, content: bytes, old: str, new: str
) -> None:
    path = lay.clone / "same.txt"
    path.write_bytes(content)
    before = path.stat()
    message = lay.refused("replace_in_file", path="same.txt", old=old, new=new)
    assert message.startswith("new: the same text as old, so the replacement would change nothing")
    assert "'same.txt' is left as it was" in message
    assert path.read_bytes() == content
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not even rewritten
    assert lay.ws.changed_paths() == []
    assert sorted(os.listdir(lay.clone)) == sorted([".git", ".gitignore", "README.md", "same.txt", "src"])
