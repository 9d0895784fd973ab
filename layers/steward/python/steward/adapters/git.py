"""Hardened `git` subprocesses: the only place Steward runs git (docs/concepts/runner.md, docs/testing.md, "Guarantees").

Everything git reads from a clone is untrusted once the sandbox has run in it (the model
edited its files, the plan's checks ran there), and each kind of input has its rule here.

Every call runs with a scrubbed environment (nothing inherited but PATH, no user or system
config or attributes, a throwaway HOME, no prompts, no replace refs) and `HARDENING` at
command-line precedence: no hooks, fsmonitor, credential helpers, pagers, signature checks,
submodule recursion or submodule summaries; only the http(s) transports.

**The work tree** (`untrusted_tree`, before any git command that reads it after the
sandbox ran). A check can create a nested repository (`git init evil`) whose own
`.git/config` names a `filter.<x>.clean` program: the outer `git status` runs it as root
the moment it recurses into `evil`, which it does for a gitlink `git add -A` staged. Filter
drivers are keyed by a name the tree chooses, so no config key can blank them all; instead:

* `$GIT_DIR/info/attributes` is rewritten to `* !filter !diff !merge`. That file outranks
  every `.gitattributes` (macros included), so no path selects a filter, diff or merge
  driver, whatever any config defines: git runs no clean/smudge/process filter at all.
  External diff programs are not attribute-driven: `-c diff.external=` does not switch them
  off (an empty value is run as a program), so diffs pass `DIFF_FLAGS` (`--no-ext-diff
  --no-textconv --ignore-submodules=all`) and status `STATUS_FLAGS`.
* Every `.git` entry below the top (directory, file or link, in any spelling git or a
  case-folding filesystem takes for `.git`) is hostile: the directory holding it is left out
  of every pathspec Steward stages with (`UntrustedTree.pathspec`), so it is never staged as
  a gitlink and never recursed into (`status`, `add` and `ls-files` do not enter an
  untracked nested repository); publication refuses a tree that has one.

**The clone's git directory** (`RemoteRepository`). It is root's and read-only to the
sandbox in the root modes, but a config planted there would beat the hardening:
URL-specific keys (`http.<url>.proxy`, `http.<url>.sslVerify`, `remote.<url>.proxy`,
`protocol.ext.allow`, `url.*.insteadOf`, `include.path`, ...) outrank the generic ones
whatever their scope, and a deny-list of them can never be complete. So no command that
carries a credential runs in a clone: `ls-remote`, `fetch` and `push` run in a throwaway
bare repository Steward makes for the one command (its config is the one `git init` writes),
borrowing the clone's objects read-only through `objects/info/alternates`; what a fetch
brings is copied into the clone's object store as files (`RemoteRepository.adopt_into`),
without running git in the clone. `run_git` refuses a token for anything but `clone`, which
creates its repository and reads no other's config. Local commands do read the clone's
config; they carry no credential, `HARDENING` and the neutral attributes switch off every
program such a config could name for them (hooks, fsmonitor, filters, diff drivers, pager,
gpg), and `pinned` names the git directory and work tree on the command line, so a
`core.worktree` cannot point `add -A` at other files.

**The token** reaches git only through the environment
(`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`) as an `http.extraHeader` Basic
header: never in a URL, a config file or argv. When the caller names the remote URL the
header is scoped to it (`http.<url>.extraHeader`). Everything git prints is redacted
(`steward.domain.redaction.redact`) before it is returned or put in an exception; only
`read_blobs` and `staged_changes` return raw bytes and names, for the pre-push credential
scan.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from steward.domain.errors import StewardError
from steward.domain.redaction import redact

GIT_TIMEOUT_SECONDS = 120.0
BASIC_USER = "x-access-token"

# Command-line scope beats the clone's `.git/config` for these generic keys. (It does not
# beat URL-specific keys or `protocol.<name>.allow`: hence RemoteRepository.)
HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("core.attributesFile", os.devnull),
    ("credential.helper", ""),  # an empty value resets the helper list
    ("protocol.allow", "never"),
    ("protocol.http.allow", "always"),
    ("protocol.https.allow", "always"),
    ("http.version", "HTTP/1.1"),
    ("http.followRedirects", "false"),  # extra headers must not follow a redirect
    ("http.proxy", ""),
    ("http.sslVerify", "true"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),  # would run gpg.program on a signed commit
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("advice.detachedHead", "false"),
    ("init.defaultBranch", "main"),
)
# Only in a RemoteRepository: a fetch there would otherwise list the borrowed clone's refs by
# running `git --git-dir=<clone>/.git for-each-ref`, which reads the clone's config. `true`
# lists none; the negotiation uses the repository's own `refs/steward/have-*` instead.
_REMOTE_HARDENING: tuple[tuple[str, str], ...] = (("core.alternateRefsCommand", "true"),)
DIFF_FLAGS: tuple[str, ...] = ("--no-ext-diff", "--no-textconv", "--ignore-submodules=all")
STATUS_FLAGS: tuple[str, ...] = ("--ignore-submodules=all",)
# `!attr` makes an attribute unspecified, and $GIT_DIR/info/attributes is read first: no
# `.gitattributes` line (nor macro) below it can select a driver again.
NEUTRAL_ATTRIBUTES = (
    "# Written by Steward: no path selects a filter, diff or merge driver.\n* !filter !diff !merge\n"
)
_TOKEN_COMMANDS = frozenset({"clone"})  # the only commands run_git lets carry a token
# Characters HFS+ ignores in names, so that `.g\u200cit` is `.git` there.
_HFS_IGNORED = dict.fromkeys(
    map(
        ord,
        "\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u206a\u206b\u206c\u206d\u206e\u206f\ufeff",
    )
)
# Only identity variables may be added by a caller; anything else could change git's config.
_ALLOWED_EXTRA_ENV = re.compile(r"^GIT_(AUTHOR|COMMITTER)_(NAME|EMAIL|DATE)$")


def basic_header(token: str) -> str:
    """The header value git sends: GitHub's documented Basic form for installation tokens."""
    raw = f"{BASIC_USER}:{token}".encode()
    return "Authorization: Basic " + base64.b64encode(raw).decode("ascii")


class GitError(StewardError):
    """A git command failed or timed out. The message and `stderr` are redacted."""

    status = 502
    code = "git_error"

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


class UntrustedGitDir(GitError):
    """The clone's `.git` is not a real directory (a link or a file put in its place)."""


@dataclass(frozen=True)
class GitResult:
    """A finished git command; `stdout` and `stderr` are already redacted."""

    returncode: int
    stdout: str
    stderr: str = field(repr=False)


def _config_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def git_environment(
    home: str,
    *,
    token: str | None = None,
    token_url: str | None = None,
    extra: Mapping[str, str] | None = None,
    config: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """The whole environment of one git process (nothing inherited but PATH)."""
    for name in extra or {}:
        if not _ALLOWED_EXTRA_ENV.match(name):
            raise ValueError(f"git_environment accepts only identity variables, not {name}")
    pairs = [*HARDENING, *config]
    if token is not None:
        if not token or any(c in token for c in "\r\n\0"):
            raise ValueError("the token is empty or has control characters")
        key = f"http.{token_url}.extraHeader" if token_url else "http.extraHeader"
        pairs.append((key, basic_header(token)))
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": home,
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1",  # the history Steward reads is the history it pushes
        "GIT_PAGER": "cat",
        **dict(extra or {}),
        **_config_env(pairs),
    }


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | str,
    token: str | None = None,
    token_url: str | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    secrets: Iterable[str] = (),
) -> GitResult:
    """Run `git *args` in `cwd` with the hardening above.

    `token` (an installation token) is sent as the Basic header, only to `token_url` when
    given, and only by `git clone` (a new repository, no other's config): every other command
    that talks to a remote with a token runs in a RemoteRepository (`remote_repository`,
    `remote_git`), never in a clone. `env` may add author/committer identity variables.
    `secrets` are redacted from the output besides the token. Raises GitError (redacted) on a
    non-zero exit when `check`, and always on a timeout (the whole process group is killed).
    """
    if token is not None and (not args or args[0] not in _TOKEN_COMMANDS):
        raise ValueError(
            "a token-carrying git command runs only in a RemoteRepository, never in a clone "
            "(whose config could send it elsewhere)"
        )
    return _run(
        args,
        cwd=cwd,
        token=token,
        token_url=token_url,
        timeout=timeout,
        check=check,
        env=env,
        input_text=input_text,
        secrets=secrets,
    )


def _run(
    args: Sequence[str],
    *,
    cwd: Path | str,
    token: str | None = None,
    token_url: str | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    secrets: Iterable[str] = (),
    config: Sequence[tuple[str, str]] = (),
) -> GitResult:
    hidden = [*secrets, *([token] if token else [])]
    if token and any(token in a for a in args):
        raise ValueError("a token must never be passed in argv")
    name = args[0] if args else "git"
    returncode, out, err = _spawn(
        args,
        cwd=cwd,
        token=token,
        token_url=token_url,
        timeout=timeout,
        env=env,
        stdin=input_text.encode() if input_text is not None else None,
        config=config,
    )
    stdout = redact(out.decode("utf-8", errors="replace"), hidden)
    stderr = redact(err.decode("utf-8", errors="replace"), hidden)
    if check and returncode != 0:
        tail = stderr.strip()[-800:]
        raise GitError(
            f"git {name} failed (exit {returncode})" + (f": {tail}" if tail else ""),
            returncode=returncode,
            stderr=stderr,
        )
    return GitResult(returncode, stdout, stderr)


def _spawn(
    args: Sequence[str],
    *,
    cwd: Path | str,
    token: str | None = None,
    token_url: str | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    config: Sequence[tuple[str, str]] = (),
) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of one git process, raw. Raises GitError on a timeout."""
    name = args[0] if args else "git"
    with tempfile.TemporaryDirectory(prefix="steward-git-home-") as home:
        environment = git_environment(home, token=token, token_url=token_url, extra=env, config=config)
        process = subprocess.Popen(  # noqa: S603 - fixed executable, no shell, argv as a list
            ["git", *args],  # noqa: S607 - git from the scrubbed PATH
            cwd=cwd,
            env=environment,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills helpers too
        )
        try:
            out, err = process.communicate(input=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            raise GitError(f"git {name} timed out after {timeout:g} s") from None
    return process.returncode, out, err


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
        os.killpg(process.pid, signal.SIGKILL)


# ---- the work tree


def is_dot_git(name: str) -> bool:
    """Whether git, or a case-folding (NTFS, HFS+) filesystem a clone may land on, could take
    the file name `name` for `.git`: `.GIT`, `.git.`, `.git ` (NTFS drops trailing dots and
    blanks), `.git::$INDEX_ALLOCATION` (a stream), `git~1` (a short name), `.g\u200cit`."""
    folded = name.translate(_HFS_IGNORED).casefold().rstrip(" .")
    return folded == ".git" or folded.startswith(".git:") or folded == "git~1"


def is_git_directory(path: Path) -> bool:
    """Whether `path` looks like a git directory to git (`HEAD`, `objects/`, `refs/`), as a
    nested bare repository does. Links are not followed."""
    return (
        stat.S_ISREG(_lstat_mode(path / "HEAD"))
        and stat.S_ISDIR(_lstat_mode(path / "objects"))
        and stat.S_ISDIR(_lstat_mode(path / "refs"))
    )


@dataclass(frozen=True)
class UntrustedTree:
    """A clone made ready for git after the sandbox ran in it (`untrusted_tree`).

    `nested`: the repository-relative paths ('/'-separated) left out of staging: each
    directory below the top that holds a `.git` entry (a nested repository; it is not
    entered further), and any top-level entry git or another filesystem could take for
    `.git` (`.GIT`, `git~1`)."""

    root: Path
    nested: tuple[str, ...]

    def pathspec(self) -> list[str]:
        """Pathspec arguments for `add`: the whole tree except `nested`, matched literally."""
        if not self.nested:
            return []
        return ["--", ".", *(f":(exclude,top,literal){path}" for path in self.nested)]


def untrusted_tree(clone: Path | str) -> UntrustedTree:
    """Prepare `clone` for git commands after the sandbox ran in it (see the module
    docstring): check that `.git` is a real directory (else UntrustedGitDir), write the
    neutral `info/attributes`, and find every nested `.git`. Walks the tree without following
    links; nothing runs in it."""
    root = Path(clone)
    git_dir = root / ".git"
    if not stat.S_ISDIR(_lstat_mode(git_dir)):
        raise UntrustedGitDir(f"the clone's .git is not a directory: {git_dir}")
    _write_attributes(git_dir)
    nested: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False: a link is never entered
        top = dirpath == str(root)
        if top:
            dirnames[:] = [name for name in dirnames if name != ".git"]
            names = [name for name in (*dirnames, *filenames) if name != ".git"]
        else:
            names = [*dirnames, *filenames]
        hostile = [name for name in names if is_dot_git(name)]
        if not hostile:
            continue
        if top:
            nested += sorted(hostile)
            dirnames[:] = [name for name in dirnames if name not in hostile]
        else:
            nested.append(Path(dirpath).relative_to(root).as_posix())
            dirnames[:] = []  # the whole directory is a nested repository
    return UntrustedTree(root, tuple(sorted(nested)))


def pinned(clone: Path | str) -> list[str]:
    """Arguments that pin git to the clone's own git directory and work tree: a
    `core.worktree` planted in its config would otherwise point `add -A` at other files."""
    return ["--git-dir", os.path.join(clone, ".git"), "--work-tree", str(clone)]


def _write_attributes(git_dir: Path) -> None:
    info = git_dir / "info"
    mode = _lstat_mode(info)
    if mode and not stat.S_ISDIR(mode):
        info.unlink()  # a link or a file in its place: never written through
    info.mkdir(exist_ok=True)
    target = info / "attributes"
    temporary = info / f".attributes.steward-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(NEUTRAL_ATTRIBUTES)
    os.replace(temporary, target)  # replaces a planted link itself, never its target


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class WorkSnapshot:
    """What a run left, for review: the staged binary diff, the status (both redacted of
    credential patterns, as run_git returns them) and the nested repositories left out."""

    diff: str
    status: str
    nested: tuple[str, ...]


def snapshot_work(clone: Path | str, *, secrets: Iterable[str] = ()) -> WorkSnapshot:
    """Stage everything the run left except nested repositories, and record the diff and
    the status: the failure path's artifacts. Runs nothing the tree could name."""
    tree = untrusted_tree(clone)
    hidden = list(secrets)
    here = pinned(clone)
    run_git([*here, "add", "-A", *tree.pathspec()], cwd=clone, secrets=hidden)
    diff = run_git([*here, "diff", "--cached", "--binary", *DIFF_FLAGS], cwd=clone, secrets=hidden).stdout
    status = run_git(
        [*here, "status", "--porcelain=v1", "--untracked-files=all", *STATUS_FLAGS], cwd=clone, secrets=hidden
    ).stdout
    return WorkSnapshot(diff, status, tree.nested)


@dataclass(frozen=True)
class Change:
    """One index entry that differs from a base tree (`diff-index --cached --raw`). `path`
    is exactly as git stores it (not redacted): use it for checks, never show it unredacted."""

    status: str  # A, M, T or D (renames are off)
    path: str
    old_mode: str
    new_mode: str
    old: str
    new: str


def staged_changes(clone: Path | str, base: str) -> list[Change]:
    """Every index entry of `clone` that differs from `base` (a commit or tree), gitlinks
    included; compares the index with a tree only, so no submodule is entered."""
    code, out, err = _spawn(
        [*pinned(clone), "diff-index", "--cached", "--raw", "-z", "--no-renames", "--no-abbrev", base, "--"],
        cwd=clone,
    )
    if code != 0:
        raise GitError(f"git diff-index failed (exit {code}): {redact(err.decode(errors='replace'))[-400:]}")
    fields = out.split(b"\0")
    changes: list[Change] = []
    for index in range(0, len(fields) - 1, 2):
        meta, path = fields[index].decode("ascii"), os.fsdecode(fields[index + 1])
        old_mode, new_mode, old, new, status = meta.lstrip(":").split(" ")
        changes.append(Change(status[:1], path, old_mode, new_mode, old, new))
    return changes


def blob_sizes(clone: Path | str, ids: Iterable[str]) -> dict[str, int]:
    """The size of each blob in `ids` (`cat-file --batch-check`); a missing one is absent."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    code, out, err = _spawn(
        [*pinned(clone), "cat-file", "--batch-check"],
        cwd=clone,
        stdin="".join(f"{i}\n" for i in wanted).encode(),
    )
    if code != 0:
        raise GitError(f"git cat-file failed (exit {code}): {redact(err.decode(errors='replace'))[-400:]}")
    sizes: dict[str, int] = {}
    for line in out.decode("ascii", errors="replace").splitlines():
        parts = line.split(" ")
        if len(parts) == 3 and parts[1] == "blob":
            sizes[parts[0]] = int(parts[2])
    return sizes


def read_blobs(clone: Path | str, ids: Iterable[str]) -> dict[str, bytes]:
    """The contents of the blobs `ids` as git stores them (`cat-file --batch`: no filter, no
    textconv). NOT redacted: for the pre-push credential scan only; never log, persist or
    raise them. Check `blob_sizes` first."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    code, out, err = _spawn(
        [*pinned(clone), "cat-file", "--batch"], cwd=clone, stdin="".join(f"{i}\n" for i in wanted).encode()
    )
    if code != 0:
        raise GitError(f"git cat-file failed (exit {code}): {redact(err.decode(errors='replace'))[-400:]}")
    blobs: dict[str, bytes] = {}
    position = 0
    while position < len(out):
        end = out.index(b"\n", position)
        header = out[position:end].decode("ascii", errors="replace").split(" ")
        position = end + 1
        if len(header) != 3:  # `<id> missing`
            continue
        size = int(header[2])
        if header[1] == "blob":
            blobs[header[0]] = out[position : position + size]
        position += size + 1
    return blobs


# ---- commands that carry a token


class RemoteRepository:
    """A bare repository Steward made for commands that talk to a remote with a token, in a
    fresh temporary directory: its config is the one `git init` wrote, so nothing planted in a
    clone can redirect, proxy or weaken a request, or add a command (a transport, an alias, a
    helper). `remote_repository` makes one, borrowing a clone's objects read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def git(
        self,
        args: Sequence[str],
        *,
        token: str | None = None,
        token_url: str | None = None,
        timeout: float = GIT_TIMEOUT_SECONDS,
        check: bool = True,
        secrets: Iterable[str] = (),
    ) -> GitResult:
        """`git --git-dir=<this repository> *args`, run in it, with the token as run_git sends it."""
        return _run(
            ["--git-dir", str(self.path), *args],
            cwd=self.path,
            token=token,
            token_url=token_url,
            timeout=timeout,
            check=check,
            secrets=secrets,
            config=_REMOTE_HARDENING,
        )

    def fetched(self) -> str:
        """The commit the last fetch left in FETCH_HEAD."""
        return self.git(["rev-parse", "--verify", "FETCH_HEAD^{commit}"]).stdout.strip()

    def adopt_into(self, clone: Path | str) -> int:
        """Copy the objects this repository holds itself (what a fetch brought) into the
        clone's object store, so the clone has them once this repository is gone: a file copy,
        no git runs in the clone. Loose objects first, then packs, each pack's index last (git
        sees a pack only through its index). The number of files copied."""
        source = self.path / "objects"
        target = Path(_objects_dir(Path(clone)))
        copied = 0
        for fan in sorted(source.iterdir()):
            if len(fan.name) == 2 and stat.S_ISDIR(_lstat_mode(fan)):
                for loose in sorted(fan.iterdir()):
                    copied += _copy_new(loose, target / fan.name / loose.name)
        packs = sorted((source / "pack").glob("pack-*.pack"))
        for pack in packs:
            for suffix in (".pack", ".rev", ".idx"):
                part = pack.with_suffix(suffix)
                if part.exists():
                    copied += _copy_new(part, target / "pack" / part.name)
        return copied


@contextlib.contextmanager
def remote_repository(
    borrow: Path | str | None = None, *, haves: Sequence[str] = ()
) -> Iterator[RemoteRepository]:
    """A fresh RemoteRepository, removed afterwards. With `borrow` (a clone), it reads that
    clone's objects through `objects/info/alternates` (a push sends them, a fetch needs only
    what they lack), and `haves` (commits there) become its refs, so that a fetch negotiates
    from them."""
    with tempfile.TemporaryDirectory(prefix="steward-remote-") as scratch:
        path = Path(scratch) / "remote.git"
        _run(["init", "--quiet", "--bare", "--template=", str(path)], cwd=scratch)
        repository = RemoteRepository(path)
        if borrow is not None:
            info = path / "objects" / "info"
            info.mkdir(parents=True, exist_ok=True)
            (info / "alternates").write_text(_objects_dir(Path(borrow)) + "\n", encoding="utf-8")
            for number, have in enumerate(haves):
                repository.git(["update-ref", f"refs/steward/have-{number}", have])
        yield repository


def remote_git(
    args: Sequence[str],
    *,
    token: str,
    token_url: str | None = None,
    borrow: Path | str | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    check: bool = True,
    secrets: Iterable[str] = (),
) -> GitResult:
    """One token-carrying command (`ls-remote`, `push`) in its own RemoteRepository."""
    with remote_repository(borrow) as repository:
        return repository.git(
            args, token=token, token_url=token_url, timeout=timeout, check=check, secrets=secrets
        )


def _objects_dir(clone: Path) -> str:
    """The real path of the clone's object store; its `.git` and `objects` must be real
    directories (a link could lend another repository's objects)."""
    git_dir = clone / ".git"
    objects = git_dir / "objects"
    if not (stat.S_ISDIR(_lstat_mode(git_dir)) and stat.S_ISDIR(_lstat_mode(objects))):
        raise UntrustedGitDir(f"the clone's object store is not a directory: {objects}")
    real = os.path.realpath(objects)
    if "\n" in real:
        raise UntrustedGitDir("the clone's path holds a line break")
    return real


def _copy_new(source: Path, target: Path) -> int:
    """Copy one object file unless the target has it: written beside it, then renamed."""
    if os.path.lexists(target):
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.steward-{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o444)
    with os.fdopen(fd, "wb") as out, source.open("rb") as data:
        while chunk := data.read(1 << 20):
            out.write(chunk)
    os.replace(temporary, target)
    return 1
