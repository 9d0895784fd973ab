"""The twin's bare repositories, driven with real git plumbing (no working trees).

Every command runs with a fixed argv, no shell, and an environment that ignores the
user's and the system's git configuration, so the twin behaves the same on every machine.
Merging uses `git merge-tree --write-tree` (git >= 2.38): a merge in a bare repository
without a checkout, as GitHub's own merge does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from steward.local.github_twin.shapes import CommitInfo, PullStats

_SAFE_PATH = re.compile(r"^[^\x00-\x1f\"\\][^\x00-\x1f]*$")
_HEX_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_PERSON = re.compile(rb"^(.*?) <([^<>]*)> ([0-9]+) [+-][0-9]{4}$")
_GIT_TIMEOUT = 120.0


class MergeConflict(Exception):
    """The head does not merge cleanly into the base."""


class RefMoved(Exception):
    """A ref changed between reading it and updating it (compare-and-swap failed)."""


def git_binary() -> str:
    found = shutil.which("git")
    if found is None:
        raise RuntimeError("the GitHub twin needs git on PATH")
    return found


def git_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean environment: no user or system config, no prompts, C locale."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
    }
    if extra:
        env.update(extra)
    return env


class GitRepos:
    """Bare repositories under `root/{owner}/{name}.git`."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.home = home
        self._git = git_binary()
        # Facts about two commits never change (commits are immutable): each is asked once.
        self._stats: dict[tuple[Path, str, str], PullStats] = {}
        self._ancestry: dict[tuple[Path, str, str], bool] = {}
        self._commits: dict[tuple[Path, str], CommitInfo] = {}
        root.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)

    def path(self, owner: str, name: str) -> Path:
        return self.root / owner / f"{name}.git"

    def _run(
        self,
        repo: Path,
        *args: str,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (0,),
    ) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [self._git, f"--git-dir={repo}", *args],
            input=stdin,
            capture_output=True,
            env=git_env(self.home, env),
            timeout=_GIT_TIMEOUT,
            check=False,
        )
        if proc.returncode not in ok:
            detail = proc.stderr.decode(errors="replace").strip()[:500]
            raise RuntimeError(f"git {args[0]} failed ({proc.returncode}): {detail}")
        return proc

    def init(
        self,
        owner: str,
        name: str,
        default_branch: str,
        files: Mapping[str, str | bytes],
        *,
        author: str,
        message: str = "Initial commit",
    ) -> str:
        """Create the bare repository with one commit holding `files`; its SHA.

        A directory left at that place by an earlier twin on the same root is replaced: the
        twin's state lives in memory, so such a repository belongs to nobody.
        """
        for path in files:
            check_path(path)
        repo = self.path(owner, name)
        if repo.exists():
            shutil.rmtree(repo)
        repo.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [self._git, "init", "--quiet", "--bare", f"--initial-branch={default_branch}", str(repo)],
            capture_output=True,
            env=git_env(self.home),
            timeout=_GIT_TIMEOUT,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"git init failed: {proc.stderr.decode(errors='replace').strip()[:500]}")
        self._run(
            repo,
            "fast-import",
            "--quiet",
            "--done",
            stdin=_commit_stream(default_branch, files, author, message),
        )
        sha = self.ref_sha(owner, name, default_branch)
        if sha is None:
            raise RuntimeError("the initial commit was not written")
        return sha

    def commit(
        self,
        owner: str,
        name: str,
        branch: str,
        *,
        parent: str,
        files: Mapping[str, str | bytes],
        author: str,
        message: str,
    ) -> str:
        """Write one commit on top of `parent` holding `files` as changes, and point `branch`
        at it (created, or moved even if that is not a fast-forward, as a forced push would);
        its SHA. What a push of a fresh commit does, without a clone."""
        for path in files:
            check_path(path)
        stream = _commit_stream(branch, files, author, message, parent=parent)
        self._run(self.path(owner, name), "fast-import", "--quiet", "--force", "--done", stdin=stream)
        sha = self.ref_sha(owner, name, branch)
        if sha is None:
            raise RuntimeError("the commit was not written")
        return sha

    def ref_sha(self, owner: str, name: str, branch: str) -> str | None:
        repo = self.path(owner, name)
        proc = self._run(
            repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", ok=(0, 1, 128)
        )
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().strip() or None

    def branches(self, owner: str, name: str) -> dict[str, str]:
        """Every branch and its commit, in one process (for listings)."""
        repo = self.path(owner, name)
        out = self._run(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/").stdout
        heads: dict[str, str] = {}
        for line in out.decode(errors="replace").splitlines():
            sha, _, ref = line.partition(" ")
            heads[ref.removeprefix("refs/heads/")] = sha
        return heads

    def resolve(self, owner: str, name: str, ref: str) -> str | None:
        """The commit `ref` names, as GitHub's `commits/{ref}` routes read it: a branch
        (`heads/` optional), else a full or abbreviated commit SHA; None for anything else."""
        repo = self.path(owner, name)
        branch = ref.removeprefix("heads/")
        if branch and not branch.startswith("-"):
            sha = self.ref_sha(owner, name, branch)
            if sha is not None:
                return sha
        if not _HEX_SHA.match(ref):
            return None
        proc = self._run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok=(0, 1, 128))
        return (proc.stdout.decode().strip() or None) if proc.returncode == 0 else None

    def commit_info(self, owner: str, name: str, sha: str) -> CommitInfo:
        """A commit's tree, parents, people and message (asked once: commits never change)."""
        repo = self.path(owner, name)
        key = (repo, sha)
        if key not in self._commits:
            raw = self._run(repo, "cat-file", "commit", sha).stdout
            head, _, message = raw.partition(b"\n\n")
            tree, parents = "", []
            people: dict[bytes, tuple[str, str, float]] = {}
            for line in head.split(b"\n"):
                field, _, value = line.partition(b" ")
                if field == b"tree":
                    tree = value.decode()
                elif field == b"parent":
                    parents.append(value.decode())
                elif field in (b"author", b"committer"):
                    match = _PERSON.match(value)
                    if match is not None:
                        people[field] = (
                            match.group(1).decode(errors="replace"),
                            match.group(2).decode(errors="replace"),
                            float(match.group(3)),
                        )
            nobody = ("", "", 0.0)
            self._commits[key] = CommitInfo(
                sha=sha,
                tree=tree,
                parents=tuple(parents),
                author=people.get(b"author", nobody),
                committer=people.get(b"committer", nobody),
                message=message.decode(errors="replace").rstrip("\n"),
            )
        return self._commits[key]

    def branches_containing(self, owner: str, name: str, sha: str) -> dict[str, str]:
        """Every branch whose history holds commit `sha`, and the branch's own commit."""
        repo = self.path(owner, name)
        out = self._run(
            repo, "for-each-ref", f"--contains={sha}", "--format=%(objectname) %(refname)", "refs/heads/"
        ).stdout
        heads: dict[str, str] = {}
        for line in out.decode(errors="replace").splitlines():
            branch_sha, _, ref = line.partition(" ")
            heads[ref.removeprefix("refs/heads/")] = branch_sha
        return heads

    def is_ancestor(self, owner: str, name: str, ancestor: str, descendant: str) -> bool:
        repo = self.path(owner, name)
        key = (repo, ancestor, descendant)
        if key not in self._ancestry:
            proc = self._run(repo, "merge-base", "--is-ancestor", ancestor, descendant, ok=(0, 1))
            self._ancestry[key] = proc.returncode == 0
        return self._ancestry[key]

    def stats(self, owner: str, name: str, base_sha: str, head_sha: str) -> PullStats:
        """Commits of head not in base, the three-dot diff's size, and a clean-merge check."""
        repo = self.path(owner, name)
        key = (repo, base_sha, head_sha)
        if key not in self._stats:
            self._stats[key] = self._stats_of(repo, base_sha, head_sha)
        return self._stats[key]

    def _stats_of(self, repo: Path, base_sha: str, head_sha: str) -> PullStats:
        count = self._run(repo, "rev-list", "--count", f"{base_sha}..{head_sha}").stdout
        numstat = self._run(repo, "diff", "--numstat", f"{base_sha}...{head_sha}").stdout
        additions = deletions = files = 0
        for line in numstat.decode(errors="replace").splitlines():
            added, removed = [*line.split("\t", 2), "", ""][:2]
            files += 1
            additions += int(added) if added.isdigit() else 0
            deletions += int(removed) if removed.isdigit() else 0
        mergeable = self._merge_tree(repo, base_sha, head_sha) is not None
        return PullStats(int(count.strip() or 0), additions, deletions, files, mergeable)

    def _merge_tree(self, repo: Path, base_sha: str, head_sha: str) -> str | None:
        proc = self._run(repo, "merge-tree", "--write-tree", "--no-messages", base_sha, head_sha, ok=(0, 1))
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().split("\n", 1)[0].strip()

    def merge(
        self,
        owner: str,
        name: str,
        *,
        base_ref: str,
        head_sha: str,
        message: str,
        author: str,
        committer: str,
        squash: bool = False,
    ) -> tuple[str, str]:
        """Merge `head_sha` into `base_ref` as a new commit; (new base SHA, old base SHA).

        A merge commit has the base and the head as parents; a squash has the base only.
        The ref moves with a compare-and-swap, so a concurrent push to the base is never lost.
        """
        repo = self.path(owner, name)
        base_sha = self.ref_sha(owner, name, base_ref)
        if base_sha is None:
            raise RefMoved(base_ref)
        tree = self._merge_tree(repo, base_sha, head_sha)
        if tree is None:
            raise MergeConflict(f"{head_sha} does not merge into {base_ref}")
        parents = ["-p", base_sha] if squash else ["-p", base_sha, "-p", head_sha]
        name_author, email_author = _split_ident(author)
        name_committer, email_committer = _split_ident(committer)
        env = {
            "GIT_AUTHOR_NAME": name_author,
            "GIT_AUTHOR_EMAIL": email_author,
            "GIT_COMMITTER_NAME": name_committer,
            "GIT_COMMITTER_EMAIL": email_committer,
        }
        commit = self._run(repo, "commit-tree", tree, *parents, stdin=message.encode(), env=env)
        new_sha = commit.stdout.decode().strip()
        moved = self._run(repo, "update-ref", f"refs/heads/{base_ref}", new_sha, base_sha, ok=(0, 1, 128))
        if moved.returncode != 0:
            raise RefMoved(base_ref)
        return new_sha, base_sha


def _commit_stream(
    branch: str, files: Mapping[str, str | bytes], author: str, message: str, *, parent: str | None = None
) -> bytes:
    """A `git fast-import` stream of one commit on `branch` (on top of `parent`, if given)."""
    stamp = f"{author} {int(time.time())} +0000"
    text = message.encode()
    stream = [
        f"commit refs/heads/{branch}\n".encode(),
        f"author {stamp}\ncommitter {stamp}\n".encode(),
        f"data {len(text)}\n".encode() + text + b"\n",
    ]
    if parent is not None:
        stream.append(f"from {parent}\n".encode())
    for path, content in sorted(files.items()):
        data = content.encode() if isinstance(content, str) else content
        stream.append(f"M 100644 inline {path}\n".encode())
        stream.append(f"data {len(data)}\n".encode() + data + b"\n")
    stream.append(b"done\n")
    return b"".join(stream)


def check_path(path: str) -> None:
    """A file path for an initial commit: relative, normalized, outside `.git`."""
    parts = path.split("/")
    if (
        not path
        or not _SAFE_PATH.match(path)
        or path.startswith("/")
        or any(p in ("", ".", "..") for p in parts)
        or parts[0].lower() == ".git"
    ):
        raise ValueError(f"invalid file path {path!r}")


def _split_ident(ident: str) -> tuple[str, str]:
    """`Name <email>` into its parts."""
    match = re.fullmatch(r"\s*(.*?)\s*<([^<>]*)>\s*", ident)
    if match is None:
        raise ValueError(f"not a git identity: {ident!r}")
    return match.group(1), match.group(2)
