"""The five file tools the model edits a clone with, confined to that clone (docs/concepts/runner.md).

Every argument comes from the model and is untrusted. A path is accepted only when it is
relative, free of `..` and control characters, and names nothing that is (or that a
case-folding filesystem could take for) `.git`; then its real path must lie inside the
clone's real path and outside the clone's git directory. Files are opened by walking from a
descriptor of the clone root one component at a time with `O_NOFOLLOW`, so a symbolic link
swapped in after the check is not followed either. Writes go to a temporary file in the
same directory and are renamed into place, so a failed write leaves the file as it was and
a hard link to a file elsewhere is replaced, never written through.

Characters that a reviewer cannot see or that reorder the text around them (bidirectional
controls, line and paragraph separators, zero-width and other invisible characters,
look-alike spaces: the one table `_REFUSED_IN_PATHS`) are refused in paths, naming the code
point.

Paths are Unicode-normalized to NFC, so two names that differ only in normalization are one
file: `e\\u0301.txt` and `\\u00e9.txt` address the same file, and a new file gets the NFC name.
A repository may already hold a name in another normalization (git stores bytes, and a
commit made elsewhere can carry NFD): each component is matched against the names its
directory holds by their NFC form, so the path addresses the stored file, read and written
in place and never duplicated beside it under the NFC name; where two stored names have the
same NFC form the path is ambiguous and refused. Listings and search results show NFC names.

Listing and searching use git (through `steward.adapters.git.run_git`, with `--git-dir` and
`--work-tree` given explicitly so that a `core.worktree` planted in the clone's config cannot
point them elsewhere). Errors the model can correct are `ToolError`; their text is the tool
result and never carries content from outside the clone.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import io
import os
import re
import secrets
import stat
import time
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, BinaryIO, Concatenate, ParamSpec

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from steward.adapters.git import GitError, GitResult, run_git

__all__ = [
    "TOOL_ARGS",
    "TOOL_DESCRIPTIONS",
    "ListFilesArgs",
    "ReadFileArgs",
    "ReplaceInFileArgs",
    "SearchTextArgs",
    "ToolError",
    "Workspace",
    "WorkspaceLimits",
    "WriteFileArgs",
]


class ToolError(Exception):
    """A recoverable tool error: `str(exc)` is shown to the model as the tool result (status error).
    Never include content from outside the clone."""


class WorkspaceLimits(BaseModel):
    """Bounds on what one tool call may read, write or return."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_list_entries: int = Field(default=500, ge=1)
    max_search_matches: int = Field(default=200, ge=1)
    max_search_bytes: int = Field(default=32_768, ge=256)  # of output returned
    max_read_bytes: int = Field(default=65_536, ge=256)  # per read
    max_read_lines: int = Field(default=400, ge=1)  # default window
    max_write_bytes: int = Field(default=1_048_576, ge=0)
    max_path_chars: int = Field(default=1024, ge=1)
    max_pattern_chars: int = Field(default=1000, ge=1)
    search_timeout_s: float = Field(default=20.0, gt=0)


_DEFAULT_LIMITS = WorkspaceLimits()
_ARGS_CONFIG = ConfigDict(extra="forbid", frozen=True)


class ListFilesArgs(BaseModel):
    model_config = _ARGS_CONFIG

    path: str = Field(default=".", description="Directory to list, relative to the repository root.")
    pattern: str | None = Field(
        default=None,
        description="Optional glob (fnmatch) matched against each file's relative path or its name, e.g. '*.py'.",
    )


class SearchTextArgs(BaseModel):
    model_config = _ARGS_CONFIG

    pattern: str = Field(min_length=1, description="Text to look for, on a single line.")
    path: str = Field(
        default=".", description="File or directory to search, relative to the repository root."
    )
    regex: bool = Field(
        default=False, description="Treat pattern as a POSIX extended regular expression (as grep -E)."
    )
    ignore_case: bool = Field(default=False, description="Match regardless of case.")


class ReadFileArgs(BaseModel):
    model_config = _ARGS_CONFIG

    path: str = Field(description="File to read, relative to the repository root.")
    start_line: int = Field(default=1, ge=1, description="First line to show (1-based).")
    max_lines: int | None = Field(
        default=None,
        ge=1,
        le=_DEFAULT_LIMITS.max_read_lines,
        description=f"How many lines to show (default and at most {_DEFAULT_LIMITS.max_read_lines}).",
    )


class WriteFileArgs(BaseModel):
    model_config = _ARGS_CONFIG

    path: str = Field(description="File to create or overwrite, relative to the repository root.")
    content: str = Field(description="The complete new content of the file.")


class ReplaceInFileArgs(BaseModel):
    model_config = _ARGS_CONFIG

    path: str = Field(description="File to edit, relative to the repository root.")
    old: str = Field(
        min_length=1, description="Exact text to replace; it must occur exactly once in the file."
    )
    new: str = Field(description="Replacement text.")


TOOL_ARGS: dict[str, type[BaseModel]] = {
    "list_files": ListFilesArgs,
    "search_text": SearchTextArgs,
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "replace_in_file": ReplaceInFileArgs,
}

TOOL_DESCRIPTIONS: dict[str, str] = {
    "list_files": (
        "List the files under a directory of the repository, recursively, as paths relative to the "
        "repository root, sorted; files ignored by .gitignore are left out."
    ),
    "search_text": (
        "Search the repository's text files (tracked and untracked, not ignored) for a string, or for a "
        "POSIX extended regular expression when regex is true; returns path:line:text for each matching line."
    ),
    "read_file": (
        "Read a text file with line numbers, a window of lines from start_line; the result says how many "
        "lines the file has and where to continue."
    ),
    "write_file": (
        "Create a file or overwrite it with the complete content given, creating missing directories. "
        "Prefer replace_in_file for changing part of an existing file."
    ),
    "replace_in_file": (
        "Replace the exact text old with new in a file. old must occur exactly once (include surrounding "
        "lines to make it unique) and match the file's whitespace exactly."
    ),
}

_SAME_TEXT = (
    "new: the same text as old, so the replacement would change nothing; {path} is left as it "
    "was. Give the changed text as new"
)
_ECHO_CHARS = 200  # of untrusted input quoted back in an error
_LINE_CHARS = 500  # of one matching line in search results
_LISTED_MATCHES = 20  # line numbers named when a replacement is ambiguous
_BINARY_SNIFF = 8192  # as git and grep: a NUL byte in the first 8 KiB means binary
_CHUNK = 1 << 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DRIVE = re.compile(r"^[A-Za-z]:")
# Characters HFS+ ignores in names: `.g\u200cit` is `.git` there (git's own core.protectHFS list).
_HFS_IGNORABLE = dict.fromkeys(
    map(
        ord,
        "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e\u206f\ufeff",
    )
)
# Characters refused anywhere in a path, as (first, last, what): invisible in a review, or
# reordering what is shown around them (Trojan Source), or looking like a plain space. One
# line per attack; any other format character or separator (Unicode categories Cf, Zl, Zp)
# is refused too, so a character added in a later Unicode version is not let through.
_REFUSED_IN_PATHS: tuple[tuple[int, int, str], ...] = (
    (0x202A, 0x202E, "a bidirectional embedding or override"),
    (0x2066, 0x2069, "a bidirectional isolate"),
    (0x061C, 0x061C, "the Arabic letter mark (bidirectional)"),
    (0x200E, 0x200F, "a left-to-right or right-to-left mark"),
    (0x2028, 0x2028, "the line separator"),
    (0x2029, 0x2029, "the paragraph separator"),
    (0x200B, 0x200D, "a zero-width space or joiner"),
    (0x2060, 0x2064, "a word joiner or invisible operator"),
    (0x206A, 0x206F, "a deprecated format control"),
    (0xFEFF, 0xFEFF, "the zero-width no-break space (byte order mark)"),
    (0x00AD, 0x00AD, "the soft hyphen (invisible)"),
    (0x034F, 0x034F, "the combining grapheme joiner (invisible)"),
    (0x115F, 0x1160, "a Hangul filler (blank)"),
    (0x3164, 0x3164, "the Hangul filler (blank)"),
    (0xFFA0, 0xFFA0, "the halfwidth Hangul filler (blank)"),
    (0x17B4, 0x17B5, "a Khmer inherent vowel (invisible)"),
    (0x180B, 0x180F, "a Mongolian variation selector or vowel separator (invisible)"),
    (0xFE00, 0xFE0F, "a variation selector (invisible)"),
    (0xE0100, 0xE01EF, "a variation selector (invisible)"),
    (0xFFF9, 0xFFFB, "an interlinear annotation control"),
    (0x1D173, 0x1D17A, "a musical format control (invisible)"),
    (0xE0000, 0xE007F, "a tag character (invisible)"),
    (0x00A0, 0x00A0, "the no-break space (looks like a space)"),
    (0x1680, 0x1680, "the Ogham space mark (looks like a space)"),
    (0x2000, 0x200A, "a typographic space (looks like a space)"),
    (0x202F, 0x202F, "the narrow no-break space (looks like a space)"),
    (0x205F, 0x205F, "the medium mathematical space (looks like a space)"),
    (0x3000, 0x3000, "the ideographic space (looks like a space)"),
)
_REFUSED_CATEGORIES = {"Cf": "a format character", "Zl": "a line separator", "Zp": "a paragraph separator"}
_GIT_NAMES = frozenset({".git", "git~1"})  # git~1: the NTFS short name of .git
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _show(text: str) -> str:
    """Untrusted input quoted for an error message: repr'd (with every character paths refuse
    escaped too, as repr leaves some printable ones raw) and cut to about 200 characters."""
    shown = "".join(_escaped(char) for char in repr(text[:_ECHO_CHARS]))
    if len(shown) > _ECHO_CHARS + 10:  # escapes (\x00) can quadruple the length
        shown = shown[:_ECHO_CHARS] + "…"
    if len(text) > _ECHO_CHARS:
        shown += f"… ({len(text)} characters)"
    return shown


def _is_git_name(component: str) -> bool:
    """Whether a filesystem could take this name for `.git` (case folding, trailing dots and
    spaces on Windows, HFS+ ignorable characters): conservative, like git's own checks."""
    return component.translate(_HFS_IGNORABLE).rstrip(". ").casefold() in _GIT_NAMES


def _refused_character(text: str) -> tuple[int, str] | None:
    """The first character of `text` that `_REFUSED_IN_PATHS` (or its category backstop)
    refuses, as (code point, what it is), or None."""
    for char in text:
        point = ord(char)
        if point < 0x80:
            continue
        for first, last, what in _REFUSED_IN_PATHS:
            if first <= point <= last:
                return point, what
        category = _REFUSED_CATEGORIES.get(unicodedata.category(char))
        if category is not None:
            return point, category
    return None


def _escaped(char: str) -> str:
    if _refused_character(char) is None:
        return char
    point = ord(char)
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _within(parent: str, child: str) -> bool:
    """Real-path containment by components: `/clone-evil` is not inside `/clone`."""
    return os.path.commonpath([parent, child]) == parent


def _utf8_size(text: str, field: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ToolError(f"{field}: not valid Unicode (a lone surrogate)") from None


@dataclass(frozen=True)
class _Target:
    """A checked path: `shown` as the model wrote it (normalized), `real` the absolute real
    path, `parts` its components relative to the clone root (empty for the root)."""

    shown: str
    real: str
    parts: tuple[str, ...]

    @property
    def rel(self) -> str:
        return "/".join(self.parts) or "."


@dataclass(frozen=True)
class _Window:
    lines: list[str]  # display text, line endings removed
    first: int
    total: int
    next_line: int | None  # where to continue, or None at the end of the file
    crlf: bool
    byte_capped: bool


_P = ParamSpec("_P")


def _tool(
    method: Callable[Concatenate[Workspace, _P], str],
) -> Callable[Concatenate[Workspace, _P], str]:
    """Turn filesystem and git failures into ToolErrors with safe messages: an OSError's str
    carries the path it failed on, and git's stderr may name paths outside the clone."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Workspace, /, *args: _P.args, **kwargs: _P.kwargs) -> str:
        try:
            return method(self, *args, **kwargs)
        except ToolError:
            raise
        except GitError as exc:
            if exc.returncode is None:
                raise ToolError(f"{name}: timed out; narrow the path or the pattern") from None
            raise ToolError(f"{name}: git failed (exit {exc.returncode})") from None
        except OSError as exc:
            raise ToolError(f"{name}: {exc.strerror or 'filesystem error'}") from None
        except UnicodeError:
            raise ToolError(f"{name}: not valid UTF-8 text") from None

    return wrapper


class Workspace:
    """The clone at `root`, as the model's tools see it."""

    def __init__(self, root: Path, *, limits: WorkspaceLimits | None = None) -> None:
        real = os.path.realpath(root)
        if not os.path.isdir(real):
            raise ValueError(f"the workspace root {root} is not a directory")
        self.root = Path(real)
        self.limits = limits or _DEFAULT_LIMITS
        self._root = real
        self._changed: dict[str, None] = {}  # an ordered set
        self._until: float | None = None  # the current call's own deadline (monotonic), if any

    # -- dispatch -------------------------------------------------------------------------

    def call(self, name: str, raw_input: Mapping[str, Any], *, seconds: float | None = None) -> str:
        """Validate raw_input with the tool's model (pydantic ValidationError -> ToolError naming the field),
        dispatch, return the text result. Unknown name -> ToolError. Never raises anything but ToolError
        for bad input; OSError from the filesystem becomes ToolError with a safe message. `seconds`
        bounds the call's git commands further (the run's remaining time): past it they time out."""
        self._until = None if seconds is None else time.monotonic() + seconds
        model = TOOL_ARGS.get(name) if isinstance(name, str) else None
        if model is None:
            raise ToolError(f"unknown tool {_show(str(name))}; the tools are {', '.join(TOOL_ARGS)}")
        if not isinstance(raw_input, Mapping):
            raise ToolError(f"{name}: the arguments must be a JSON object")
        try:
            args = model.model_validate(dict(raw_input))
        except ValidationError as exc:
            raise ToolError(f"{name}: {_describe(exc)}") from None
        method: Callable[[Any], str] = getattr(self, name)
        return method(args)

    def changed_paths(self) -> list[str]:
        """Relative paths written by write_file/replace_in_file so far, in order, unique."""
        return list(self._changed)

    # -- tools ----------------------------------------------------------------------------

    @_tool
    def list_files(self, args: ListFilesArgs) -> str:
        target = self._resolve(args.path, "path")
        pattern = args.pattern
        if pattern is not None:
            self._check_pattern(pattern)
            pattern = _nfc(pattern)  # names are shown in NFC, so they are matched in NFC
        kind = self._kind(target)
        if kind is None:
            raise ToolError(f"path: {_show(target.shown)} does not exist")
        if kind != "dir":
            raise ToolError(f"path: {_show(target.shown)} is a file, not a directory; use read_file")
        result = self._git(
            ["ls-files", "--cached", "--others", "--deleted", "--exclude-standard", "-t", "-z"],
            target,
            timeout=self.limits.search_timeout_s,
        )
        present: set[str] = set()
        deleted: set[str] = set()
        for entry in result.stdout.split("\0"):
            tag, _, path = entry.partition(" ")
            if not path:
                continue
            (deleted if tag == "R" else present).add(path)
        hidden = self._hidden_prefixes()
        files = sorted(
            {
                path
                for path in map(_nfc, (p for p in present - deleted if not self._is_hidden(p, hidden)))
                if pattern is None
                or fnmatchcase(path, pattern)
                or fnmatchcase(path.rpartition("/")[2], pattern)
            }
        )
        if not files:
            what = f" matching {_show(pattern)}" if pattern is not None else ""
            return f"no files{what} under {_show(target.shown)}"
        cap = self.limits.max_list_entries
        lines = files[:cap]
        if len(files) > cap:
            lines.append(f"[... and {len(files) - cap} more; narrow the path or the pattern]")
        return "\n".join(lines)

    @_tool
    def search_text(self, args: SearchTextArgs) -> str:
        limits = self.limits
        self._check_pattern(args.pattern)
        target = self._resolve(args.path, "path")
        if self._kind(target) is None:
            raise ToolError(f"path: {_show(target.shown)} does not exist")
        argv = ["grep", "--untracked", "-I", "-n", "-z", "--no-color", "--full-name"]
        argv.append("-E" if args.regex else "-F")
        if args.ignore_case:
            argv.append("-i")
        argv += ["-e", args.pattern]  # after -e, a pattern starting with '-' is not an option
        result = self._git(argv, target, timeout=limits.search_timeout_s, check=False)
        if result.returncode not in (0, 1):
            first = (result.stderr.strip().splitlines() or [""])[0]
            if args.regex and ("-e option" in first or "command line" in first):
                reason = first.rsplit(": ", 1)[-1][:_ECHO_CHARS]
                raise ToolError(f"pattern: not a valid extended regular expression: {reason}")
            raise ToolError(f"search_text: git grep failed (exit {result.returncode})")

        hidden = self._hidden_prefixes()
        shown: list[str] = []
        size = 0
        total = 0
        full = False
        for record in result.stdout.split("\n"):
            fields = record.split("\0", 2)
            if len(fields) != 3 or self._is_hidden(fields[0], hidden):
                continue
            total += 1
            if full:
                continue
            text = fields[2].removesuffix("\r")
            if len(text) > _LINE_CHARS:
                text = text[:_LINE_CHARS] + " [...line cut]"
            line = f"{_nfc(fields[0])}:{fields[1]}:{text}"
            line_size = len(line.encode("utf-8", "replace")) + 1
            if len(shown) >= limits.max_search_matches or size + line_size > limits.max_search_bytes:
                full = True
                continue
            shown.append(line)
            size += line_size
        where = "" if target.rel == "." else f" under {_show(target.shown)}"
        if total == 0:
            return f"no matches for {_show(args.pattern)}{where}"
        if len(shown) < total:
            shown.append(f"[showing {len(shown)} of {total} matching lines; narrow the pattern or the path]")
        return "\n".join(shown)

    @_tool
    def read_file(self, args: ReadFileArgs) -> str:
        target = self._resolve(args.path, "path")
        wanted = min(args.max_lines or self.limits.max_read_lines, self.limits.max_read_lines)
        fd = self._open_file(target)
        with os.fdopen(fd, "rb") as stream:
            window = self._window(target, stream, args.start_line, wanted)
        if window.total and args.start_line > window.total:
            raise ToolError(
                f"start_line: {args.start_line} is past the end of {_show(target.shown)} "
                f"({window.total} lines)"
            )
        return self._format(target, window)

    @_tool
    def write_file(self, args: WriteFileArgs) -> str:
        size = _utf8_size(args.content, "content")
        if size > self.limits.max_write_bytes:
            raise ToolError(f"content: {size} bytes, more than the limit of {self.limits.max_write_bytes}")
        target = self._resolve(args.path, "path", follow_final=False)
        self._write(target, args.content.encode("utf-8"))
        return f"wrote {size} bytes to {target.shown}"

    @_tool
    def replace_in_file(self, args: ReplaceInFileArgs) -> str:
        _utf8_size(args.old, "old")
        _utf8_size(args.new, "new")
        target = self._resolve(args.path, "path", follow_final=False)
        if args.old == args.new:
            raise ToolError(_SAME_TEXT.format(path=_show(target.shown)))
        fd = self._open_file(target)
        with os.fdopen(fd, "rb") as stream:
            data = stream.read(self.limits.max_write_bytes + 1)
        if len(data) > self.limits.max_write_bytes:
            raise ToolError(
                f"path: {_show(target.shown)} is larger than {self.limits.max_write_bytes} bytes; "
                "too large to edit"
            )
        if b"\0" in data[:_BINARY_SNIFF]:
            raise ToolError(f"path: {_show(target.shown)} is a binary file")
        try:
            # Exact text, no newline translation: CRLF files keep their line endings.
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"path: {_show(target.shown)} is not UTF-8 text") from None

        old, new = args.old, args.new
        at, count = _find_once(text, old)
        if count == 0 and "\n" in old and "\r\n" in text:
            # The model often writes "\n" where the file has "\r\n"; retry only for an exact match.
            crlf_old = old.replace("\r\n", "\n").replace("\n", "\r\n")
            at, count = _find_once(text, crlf_old)
            if count:
                old, new = crlf_old, new.replace("\r\n", "\n").replace("\n", "\r\n")
                if old == new:  # they differed only in line endings, which the file's CRLF evens out
                    raise ToolError(_SAME_TEXT.format(path=_show(target.shown)))
        if count != 1:
            raise ToolError(self._mismatch(target, text, data, old, count))

        updated = text[:at] + new + text[at + len(old) :]
        payload = updated.encode("utf-8")
        if len(payload) > self.limits.max_write_bytes:
            raise ToolError(
                f"new: the file would be {len(payload)} bytes, more than the limit of "
                f"{self.limits.max_write_bytes}"
            )
        self._write(target, payload)
        line = text.count("\n", 0, at) + 1
        return f"replaced 1 occurrence in {target.shown} at line {line}; the file is now {len(payload)} bytes"

    # -- paths ----------------------------------------------------------------------------

    def _normalize(self, raw: str, field: str) -> tuple[str, ...]:
        """The components of a relative path, or a ToolError saying what is wrong with it."""
        if not isinstance(raw, str) or not raw:
            raise ToolError(f"{field}: must not be empty")
        if len(raw) > self.limits.max_path_chars:
            raise ToolError(
                f"{field}: {len(raw)} characters, more than the limit of {self.limits.max_path_chars}"
            )
        if _CONTROL.search(raw):
            raise ToolError(f"{field}: control characters (including NUL) are not allowed: {_show(raw)}")
        _utf8_size(raw, field)
        raw = _nfc(raw)
        if "\\" in raw:
            raise ToolError(
                f"{field}: backslashes are not allowed; separate directories with '/': {_show(raw)}"
            )
        if raw.startswith("/"):
            raise ToolError(
                f"{field}: absolute paths are not allowed; give a path relative to the repository root"
            )
        if raw.startswith("~"):
            raise ToolError(f"{field}: '~' is not allowed; give a path relative to the repository root")
        if _DRIVE.match(raw):
            raise ToolError(
                f"{field}: drive letters are not allowed; give a path relative to the repository root"
            )
        parts = tuple(part for part in raw.split("/") if part not in ("", "."))
        if ".." in parts:
            raise ToolError(f"{field}: '..' components are not allowed: {_show(raw)}")
        if any(_is_git_name(part) for part in parts):
            raise ToolError(f"{field}: the .git directory is not accessible: {_show(raw)}")
        refused = _refused_character(raw)
        if refused is not None:
            point, what = refused
            raise ToolError(
                f"{field}: U+{point:04X}, {what}, is not allowed in paths (a reviewer could not see it "
                f"or it reorders the text around it): {_show(raw)}"
            )
        return parts

    def _stored(self, parts: tuple[str, ...], field: str) -> tuple[str, ...]:
        """`parts` (NFC) as the names the directories hold: a component matches a stored name
        whose NFC form equals it, so a name committed in NFD is addressed where it is; no match
        keeps the component (a new name, NFC); two or more matches are ambiguous. The walk stops
        listing at anything that is not a directory inside the clone (outside its git
        directories): there `_resolve` decides, and nothing outside the clone is listed."""
        current: str | None = self._root
        git_dirs = self._git_dirs()
        stored: list[str] = []
        for index, part in enumerate(parts):
            if current is None:
                stored.append(part)
                continue
            try:
                names = os.listdir(current)
            except OSError:
                names = []
            matches = [name for name in names if name == part or _nfc(name) == part]
            if len(matches) > 1:
                where = "/".join(parts[: index + 1])
                raise ToolError(
                    f"{field}: {_show(where)} is ambiguous: {len(matches)} names there differ only in "
                    "Unicode normalization, and the tools cannot tell them apart"
                )
            name = matches[0] if matches else part
            stored.append(name)
            following = os.path.realpath(os.path.join(current, name))
            inside = _within(self._root, following) and not any(_within(g, following) for g in git_dirs)
            current = following if inside and os.path.isdir(following) else None
        return tuple(stored)

    def _resolve(self, raw: str, field: str, *, follow_final: bool = True) -> _Target:
        """Check `raw` and find its real path inside the clone.

        The parent is resolved first so that nothing outside the clone is even stat'ed. With
        `follow_final` false (writes) the last component must not be a symbolic link at all;
        for a name that does not exist yet realpath resolves its existing ancestors."""
        given = self._normalize(raw, field)
        shown = "/".join(given) or "."
        parts = self._stored(given, field)
        root = self._root
        parent = os.path.realpath(os.path.join(root, *parts[:-1])) if len(parts) > 1 else root
        if not _within(root, parent):
            raise ToolError(f"{field}: {_show(shown)} leads outside the repository (through a symbolic link)")
        if not parts:
            real = root
        elif follow_final:
            real = os.path.realpath(os.path.join(parent, parts[-1]))
        else:
            real = os.path.join(parent, parts[-1])
            if os.path.islink(real):
                raise ToolError(
                    f"{field}: {_show(shown)} is a symbolic link; write to the file it points to instead"
                )
        if not _within(root, real):
            raise ToolError(f"{field}: {_show(shown)} leads outside the repository (through a symbolic link)")
        rel = os.path.relpath(real, root)
        real_parts = () if rel == "." else tuple(rel.split(os.sep))
        if any(_is_git_name(part) for part in real_parts) or any(
            _within(git_dir, real) for git_dir in self._git_dirs()
        ):
            raise ToolError(
                f"{field}: {_show(shown)} is in the git directory; the .git directory is not accessible"
            )
        return _Target(shown, real, real_parts)

    def _git_dirs(self) -> list[str]:
        """Real paths of the clone's git directory: `.git` itself, and when `.git` is a file
        (a `gitdir:` pointer, as in worktrees and submodules) the directory it names."""
        dot_git = os.path.realpath(os.path.join(self._root, ".git"))
        dirs = [dot_git]
        if os.path.isfile(dot_git):
            try:
                with open(dot_git, "rb") as pointer:
                    head = pointer.read(4096).decode("utf-8", "replace")
            except OSError:
                return dirs
            for line in head.splitlines():
                if line.startswith("gitdir:"):
                    # git resolves a relative gitdir against the directory holding the .git file.
                    dirs.append(os.path.realpath(os.path.join(self._root, line[7:].strip())))
        return dirs

    def _hidden_prefixes(self) -> list[str]:
        """Git directories inside the clone, relative: git could list a pointed-to one as untracked."""
        prefixes = []
        for git_dir in self._git_dirs():
            if _within(self._root, git_dir) and git_dir != self._root:
                prefixes.append(os.path.relpath(git_dir, self._root).replace(os.sep, "/") + "/")
        return prefixes

    @staticmethod
    def _is_hidden(path: str, prefixes: list[str]) -> bool:
        return any(_is_git_name(part) for part in path.split("/")) or any(
            (path + "/").startswith(prefix) for prefix in prefixes
        )

    def _kind(self, target: _Target) -> str | None:
        try:
            mode = os.lstat(target.real).st_mode
        except FileNotFoundError:
            return None
        return "dir" if stat.S_ISDIR(mode) else "file"

    def _check_pattern(self, pattern: str) -> None:
        if len(pattern) > self.limits.max_pattern_chars:
            raise ToolError(
                f"pattern: {len(pattern)} characters, more than the limit of {self.limits.max_pattern_chars}"
            )
        if "\0" in pattern:
            raise ToolError("pattern: NUL bytes are not allowed")
        if "\n" in pattern or "\r" in pattern:
            raise ToolError("pattern: line breaks are not allowed (matching is line by line)")
        _utf8_size(pattern, "pattern")

    # -- descriptors ----------------------------------------------------------------------

    def _open_dir(self, parts: tuple[str, ...], target: _Target, *, create: bool = False) -> int:
        """A descriptor of the directory `parts`, walked from the root without following any
        link: the components are already resolved, so a link here was swapped in since."""
        fd = os.open(self._root, _OPEN_DIR)
        try:
            for index, part in enumerate(parts):
                try:
                    child = os.open(part, _OPEN_DIR, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise ToolError(f"path: {_show(target.shown)} does not exist") from None
                    # Created under a descriptor inside the clone, so it is inside the clone.
                    os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _OPEN_DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                        where = "/".join(parts[: index + 1])
                        raise ToolError(
                            f"path: {_show(where)} is not a directory (or changed while being opened)"
                        ) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_file(self, target: _Target) -> int:
        """A read descriptor of the regular file `target` (O_NOFOLLOW, O_NONBLOCK so that a
        FIFO cannot hang the call; fstat decides, not the earlier check)."""
        if not target.parts:
            raise ToolError(f"path: {_show(target.shown)} is a directory; use list_files")
        parent = self._open_dir(target.parts[:-1], target)
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            fd = os.open(target.parts[-1], flags, dir_fd=parent)
        except FileNotFoundError:
            raise ToolError(f"path: {_show(target.shown)} does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolError(
                    f"path: {_show(target.shown)} is a symbolic link (changed while being opened)"
                ) from None
            raise
        finally:
            os.close(parent)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "a directory; use list_files" if stat.S_ISDIR(mode) else "not a regular file"
            raise ToolError(f"path: {_show(target.shown)} is {what}")
        return fd

    def _write(self, target: _Target, payload: bytes) -> None:
        """Write atomically: a temporary file beside the target, renamed over it. An existing
        target keeps its mode; a link or a non-regular file there is refused."""
        if not target.parts:
            raise ToolError(f"path: {_show(target.shown)} is a directory")
        name = target.parts[-1]
        parent = self._open_dir(target.parts[:-1], target, create=True)
        try:
            mode = 0o666  # before the umask, as open(2) creates files
            try:
                existing = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None:
                if stat.S_ISLNK(existing.st_mode):
                    raise ToolError(f"path: {_show(target.shown)} is a symbolic link")
                if stat.S_ISDIR(existing.st_mode):
                    raise ToolError(f"path: {_show(target.shown)} is a directory")
                if not stat.S_ISREG(existing.st_mode):
                    raise ToolError(f"path: {_show(target.shown)} is not a regular file")
                mode = stat.S_IMODE(existing.st_mode)
            temp = f".{name[:64]}.{secrets.token_hex(6)}.steward-tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, mode, dir_fd=parent)
            try:
                try:
                    if existing is not None:
                        os.fchmod(fd, mode)  # the umask must not strip the file's own bits
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
                os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp, dir_fd=parent)
                raise
        finally:
            os.close(parent)
        self._changed[target.rel] = None

    # -- git ------------------------------------------------------------------------------

    def _git(self, argv: list[str], target: _Target, *, timeout: float, check: bool = True) -> GitResult:
        """`git <argv> -- <target>` on the clone with the git directory and work tree named on
        the command line (a `core.worktree` in the clone's config would otherwise win)."""
        pathspec = [] if not target.parts else ["--", ":(literal)" + target.rel]
        if self._until is not None:
            timeout = max(0.01, min(timeout, self._until - time.monotonic()))
        return run_git(
            ["--git-dir", os.path.join(self._root, ".git"), "--work-tree", self._root, *argv, *pathspec],
            cwd=self._root,
            timeout=timeout,
            check=check,
        )

    # -- text -----------------------------------------------------------------------------

    def _window(self, target: _Target, stream: BinaryIO, start: int, count: int) -> _Window:
        """Lines start..start+count-1 of `stream` (fewer if they exceed max_read_bytes) and the
        total number of lines, counted to the end without keeping the rest."""
        head = stream.read(_BINARY_SNIFF)
        try:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < _BINARY_SNIFF)
        except UnicodeDecodeError:
            raise ToolError(f"path: {_show(target.shown)} is not UTF-8 text (binary?)") from None
        if b"\0" in head:
            raise ToolError(f"path: {_show(target.shown)} is a binary file")
        stream.seek(0)
        budget = self.limits.max_read_bytes
        lines: list[str] = []
        crlf = capped = stop = False
        next_line: int | None = None
        number = 0  # lines consumed so far
        for raw in stream:
            number += 1
            if number < start:
                continue
            if stop or len(lines) >= count:
                next_line = number
                break
            crlf = crlf or raw.endswith(b"\r\n")
            try:
                text = raw.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8")
            except UnicodeDecodeError:
                raise ToolError(f"path: {_show(target.shown)} is not UTF-8 text (line {number})") from None
            size = len(_numbered(number, text).encode("utf-8")) + 1
            if size > budget:
                capped = True
                if lines:
                    next_line = number
                    break
                # One line larger than the whole budget: show its start rather than nothing.
                lines.append(_cut_to_bytes(text, budget - 64) + " [...line cut]")
                stop = True
                continue
            budget -= size
            lines.append(text)
        if next_line is None:
            return _Window(lines, start, number, None, crlf, capped)
        # Count the lines left without holding them: each newline ends one, and a final
        # unterminated piece is one more.
        rest = 0
        tail = b""
        while chunk := stream.read(_CHUNK):
            rest += chunk.count(b"\n")
            tail = chunk
        total = number + rest + (1 if tail and not tail.endswith(b"\n") else 0)
        return _Window(lines, start, total, next_line, crlf, capped)

    def _format(self, target: _Target, window: _Window) -> str:
        """read_file's text: a header, `{n:>6}\\t{line}` lines and where to continue."""
        if window.total == 0:
            return f"{target.shown}: empty file (0 lines)"
        last = window.first + len(window.lines) - 1
        endings = " (CRLF line endings)" if window.crlf else ""
        out = [f"{target.shown}: lines {window.first}-{last} of {window.total}{endings}"]
        out += [_numbered(window.first + i, line) for i, line in enumerate(window.lines)]
        if window.next_line is None:
            out.append("[end of file]")
        else:
            capped = f"output capped at {self.limits.max_read_bytes} bytes; " if window.byte_capped else ""
            out.append(
                f"[{capped}lines {window.next_line}-{window.total} follow; "
                f"read_file with start_line={window.next_line} to continue]"
            )
        return "\n".join(out)

    def _mismatch(self, target: _Target, text: str, data: bytes, tried: str, count: int) -> str:
        """The error for a failed replacement, with the file as it is now so the model can
        copy the exact text."""
        if count == 0:
            problem = f"old: no match in {target.shown}; the text must match exactly, whitespace included"
        else:
            positions = list(_positions(text, tried, limit=_LISTED_MATCHES + 1))
            lines = sorted({text.count("\n", 0, at) + 1 for at in positions[:_LISTED_MATCHES]})
            where = ", ".join(map(str, lines)) + (", ..." if len(positions) > _LISTED_MATCHES else "")
            problem = (
                f"old: {count} matches in {target.shown} (lines {where}); it must match exactly once: "
                "include more of the surrounding lines"
            )
        window = self._window(target, io.BytesIO(data), 1, self.limits.max_read_lines)
        return f"{problem}. The file as it is now:\n{self._format(target, window)}"


def _numbered(number: int, text: str) -> str:
    return f"{number:>6}\t{text}"


def _cut_to_bytes(text: str, limit: int) -> str:
    return text.encode("utf-8")[: max(limit, 0)].decode("utf-8", "ignore")


def _positions(text: str, needle: str, *, limit: int) -> Iterator[int]:
    at = text.find(needle)
    while at != -1 and limit > 0:
        yield at
        limit -= 1
        at = text.find(needle, at + 1)


def _find_once(text: str, needle: str) -> tuple[int, int]:
    """(position, count): count is 0, 1, or the number of matches when there are several.
    Overlapping occurrences count: 'aa' in 'aaa' is ambiguous."""
    first = text.find(needle)
    if first == -1:
        return -1, 0
    if text.find(needle, first + 1) == -1:
        return first, 1
    return first, max(text.count(needle), 2)


def _describe(exc: ValidationError) -> str:
    """A ValidationError as `field: problem` lines, without echoing the input values."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        field = ".".join(str(part) for part in error["loc"])[:100] or "arguments"
        problems.append(f"{field}: {error['msg']}")
    return "; ".join(problems[:10])
