"""Governed publication: the runner's last step, never the model's (docs/concepts/lifecycle.md, docs/concepts/runner.md).

Stages, in order, each recorded in `publish.json` (stage -> {status, at, detail}) as soon as
it ends: `stage` (git add -A, nested repositories left out), `record` (staged files,
`diff.patch`, `git-status.txt`), `scan` (what would be pushed, before anything is
committed), `commit` (as the Steward bot, with a `Steward-Task: <task id>` trailer),
`resolve` (the SHA), `recheck_push` (the task is running, or in review), `push`,
`recheck_pull_request`, `pull_request`, and for a follow-up round `reply` (its one comment on
the pull request; it pushes to its parent's branch, and the pull request stage finds that
branch's pull request). A status is `ok`, `skipped` (already done by an earlier attempt), `refused` (a rule stopped publication: `PublishError`) or `failed` (an
error; the exception is raised after it is recorded).

The tree is untrusted (the model wrote it, the checks ran in it; `steward.adapters.git`):

* a nested repository (any `.git` below the top), a gitlink the change would add or move,
  or a changed path inside a directory shaped like a git directory (a nested bare
  repository) refuses publication (`nested_repository`): it is never staged, entered or
  pushed. Refusing rather than dropping it: a tree something planted a repository in is not
  one to publish a part of.
* `scan` reads every blob the change adds (the whole of a new file, the lines a modified
  one gains) and every changed path name, raw from the object store (no filter, no
  textconv, whatever `.gitattributes` says), and looks for every secret the process holds
  and every credential pattern of `steward.domain.redaction`. A hit refuses publication
  (`credential`) naming the files, redacted, never the secret: nothing is committed or
  pushed, and `diff.patch` (redacted) keeps the work. A change too large to scan is refused
  too (`too_large`): the scan fails closed.
* the commands that carry the token (`ls-remote`, `fetch`, `push`) run in a throwaway
  repository of Steward's (`steward.adapters.git.remote_repository`), never reading the
  clone's config.

Every stage is safe to repeat, so a publication that died anywhere can simply run again,
in the same clone or in a fresh clone of the pushed branch, and never makes a second pull
request:

* commit: nothing staged but HEAD is this task's bot commit -> skipped (already committed);
  nothing staged otherwise -> refused, "no changes".
* push: never forced. The remote branch equal to our commit -> skipped. Commits on the
  remote branch that ours does not contain are allowed only if every one of them is this
  task's bot commit (an earlier attempt from another clone); then our tree is committed on
  top of them and pushed as a fast-forward. Any other commit there -> refused, untouched.
* pull_request: any pull request for the head, in any state, is reused; otherwise one is
  opened (and GitHub's 422 "already exists" is answered with the existing one).

Artifacts are written under `clone.parent / "artifacts"` and, when an artifact sink is given,
uploaded (in the runtime: presigned PUTs through the runtime routes). Everything written, the
commit message and the pull request's title and body are redacted (`steward.domain.redaction`)
of the tokens in use, of every secret the caller's redactor holds, and of anything shaped like
a credential; a text is redacted before it is cut to length, so a cut never leaves part of a
token.

The re-checks ask `status_of` for the task's status now; in the runtime that is the control
plane's answer to a heartbeat (`POST /v1/runtime/heartbeat`), so publication needs no table
access. A second guard needs nothing from here: the token route refuses a task that is not
running, and the push asks for a fresh token.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from steward.adapters.git import (
    DIFF_FLAGS,
    STATUS_FLAGS,
    Change,
    GitError,
    GitResult,
    RemoteRepository,
    UntrustedGitDir,
    blob_sizes,
    is_git_directory,
    pinned,
    read_blobs,
    remote_repository,
    run_git,
    staged_changes,
    untrusted_tree,
)
from steward.adapters.github import PullRef, RepositoryClient
from steward.domain.errors import StewardError
from steward.domain.follow_ups import ASKED_BY
from steward.domain.ids import branch_name
from steward.domain.models import Task, TaskStatus, iso, utcnow
from steward.domain.redaction import Redactor
from steward.domain.status_comment import tame

_LOG = logging.getLogger(__name__)

STAGES = (
    "stage",
    "record",
    "scan",
    "commit",
    "resolve",
    "recheck_push",
    "push",
    "recheck_pull_request",
    "pull_request",
)
TASK_TRAILER = "Steward-Task"
ARTIFACTS_DIR = "artifacts"
MAX_DIFF_BYTES = 2 * 1024 * 1024
MAX_LISTED_FILES = 500
MAX_TITLE_CHARS = 256
MAX_BODY_CHARS = 60_000  # GitHub refuses bodies over 65,536 characters
MAX_COMMAND_CHARS = 200
MAX_SCAN_BYTES = 64 * 1024 * 1024  # what the credential scan reads at most; more is refused
MAX_NAMED_FILES = 5  # files a refusal names
MAX_OWN_COMMITS = 50  # commits of this task HEAD may sit on
BLOB_MODES = frozenset({"100644", "100755", "120000"})
GITLINK_MODE = "160000"
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")

StageHook = Callable[[str, Mapping[str, Any]], None]
# The task's status now (None: it no longer exists): `TaskStore.get`'s, or a heartbeat's.
StatusOf = Callable[[str], TaskStatus | None]


class ArtifactSink(Protocol):
    """Where artifacts go: `steward.adapters.artifact_store:ArtifactStore` (S3, with AWS
    credentials) or, in the runtime, `steward.adapters.runtime_api:RuntimeArtifacts`."""

    def put(self, task_id: str, name: str, body: bytes, content_type: str) -> None: ...


class PublishError(StewardError):
    """Publication stopped by a rule, not by a fault. `reason`: "no_changes",
    "cancelled", "foreign_commits", "branch" (not the task's canonical branch),
    "nested_repository", "credential", "too_large" or "git_dir" (the clone's `.git` was
    replaced); `stage` is where it stopped."""

    status = 409
    code = "publish_refused"

    def __init__(self, message: str, *, stage: str, reason: str) -> None:
        super().__init__(message, field=stage)
        self.stage = stage
        self.reason = reason


@dataclass(frozen=True)
class PublishResult:
    pr_url: str
    pr_number: int
    sha: str
    stages: dict[str, dict[str, Any]]


@dataclass
class _Run:
    """One publication attempt: its stage records, the redactor (the caller's secrets and
    every token this attempt got), the cached token, what `stage` left out."""

    task: Task
    clone: Path
    out: Path
    token_provider: Callable[[], str]
    redactor: Redactor
    secrets: list[str] = field(default_factory=list)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    nested: tuple[str, ...] = ()
    merge_parent: str | None = None  # a conflict round's merged base commit (its second parent)
    related: tuple[Mapping[str, Any], ...] = ()  # the plan's pull requests around the item
    merging: bool = False  # that merge is in the clone, not committed yet
    files: tuple[Mapping[str, str], ...] = ()  # the change's files ({"status", "path"}), for the body
    _token: str | None = None

    def token(self) -> str:
        """The installation token, asked for once per attempt (at push time, docs/concepts/runner.md)."""
        if self._token is None:
            token = self.token_provider()
            if not token:
                raise StewardError("the token provider returned no token")
            self.secrets.append(token)
            self.redactor.add(token)
            self._token = token
        return self._token

    def clean(self, value: Any) -> Any:
        """`value` with every string redacted, recursively."""
        if isinstance(value, str):
            return self.redactor.redact(value)
        if isinstance(value, Mapping):
            return {str(k): self.clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.clean(v) for v in value]
        return value

    def write(self, name: str, text: str) -> bytes:
        """Write artifact `name` (redacted) atomically; its bytes."""
        data = self.redactor.redact(text).encode("utf-8")
        self.out.mkdir(parents=True, exist_ok=True)
        temporary = self.out / f".{name}.tmp"
        temporary.write_bytes(data)
        os.replace(temporary, self.out / name)
        return data

    def publish_json(self) -> bytes:
        return self.write("publish.json", json.dumps(self.stages, indent=2, sort_keys=False) + "\n")


class Publisher:
    """Publishes a run's clone as the task's branch and pull request."""

    def __init__(
        self,
        github: RepositoryClient,
        status_of: StatusOf,
        artifacts: ArtifactSink | None,
        *,
        bot_name: str = "steward[bot]",
        bot_email: str = "steward-bot@users.noreply.github.com",
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.github = github
        self.status_of = status_of
        self.artifacts = artifacts
        self.bot_name = bot_name
        self.bot_email = bot_email
        self.clock = clock

    def publish(
        self,
        task: Task,
        clone: Path,
        *,
        installation_id: int,
        summary: str,
        checks: list[dict[str, Any]],
        cost_usd: Decimal,
        token_provider: Callable[[], str],
        on_stage: StageHook | None = None,
        redactor: Redactor | None = None,
        merge_parent: str | None = None,
        related: Sequence[Mapping[str, Any]] = (),
    ) -> PublishResult:
        """Run every stage (see the module docstring); the pull request's URL and number and
        the pushed SHA. `checks` items: {"command", "exit_status" (or "exit_code"),
        "duration_s" (or "duration_ms")}. `on_stage(name, record)` is called after each stage
        is recorded (for progress events); an exception from it stops publication there.
        `redactor`: the caller's (it holds every secret the process holds): what is written
        or sent is redacted with it and the scan looks for its secrets; the tokens this
        publication gets are added to it. `merge_parent`: the base commit a conflict round
        merged into the clone (the commit is a merge of the branch's head and it). `related`:
        the plan's pull requests around the item (`steward.domain.order.related`), linked
        from the body. Raises
        PublishError for a refusal, GitError / GitHubError for faults; either way
        publish.json says which stage and why."""
        run = _Run(
            task,
            Path(clone),
            Path(clone).parent / ARTIFACTS_DIR,
            token_provider,
            redactor if redactor is not None else Redactor(),
            merge_parent=merge_parent,
            related=tuple(related),
        )
        succeeded = False
        try:
            result = self._publish(
                run,
                installation_id=installation_id,
                summary=summary,
                checks=checks,
                cost_usd=cost_usd,
                on_stage=on_stage,
            )
            succeeded = True
            return result
        finally:
            self._upload(run, succeeded)

    def _publish(
        self,
        run: _Run,
        *,
        installation_id: int,
        summary: str,
        checks: list[dict[str, Any]],
        cost_usd: Decimal,
        on_stage: StageHook | None,
    ) -> PublishResult:
        def stage(name: str, action: Callable[[], tuple[str, dict[str, Any]]]) -> dict[str, Any]:
            try:
                status, detail = action()
            except PublishError as exc:
                self._record(run, name, "refused", {"reason": exc.reason, "error": exc.message})
                raise
            except Exception as exc:
                self._record(run, name, "failed", {"error": _describe(exc)})
                raise
            entry = self._record(run, name, status, detail)
            if on_stage is not None:
                on_stage(name, entry)
            return detail

        stage("stage", lambda: self._stage(run))
        stage("record", lambda: self._record_changes(run))
        stage("scan", lambda: self._scan(run))
        stage("commit", lambda: self._commit(run))
        sha = str(stage("resolve", lambda: self._resolve(run))["sha"])
        stage("recheck_push", lambda: self._recheck(run, "recheck_push"))
        sha = str(stage("push", lambda: self._push(run, sha))["sha"])
        stage("recheck_pull_request", lambda: self._recheck(run, "recheck_pull_request"))
        pull = stage(
            "pull_request", lambda: self._pull_request(run, installation_id, summary, checks, cost_usd)
        )
        if run.task.is_round:
            number = int(pull["number"])
            body = round_reply(run.task, sha, run.redactor.redact(summary), checks, cost_usd)
            stage("reply", lambda: self._reply(run, installation_id, number, body))
        return PublishResult(str(pull["url"]), int(pull["number"]), sha, dict(run.stages))

    # ---- recording

    def _record(self, run: _Run, name: str, status: str, detail: Mapping[str, Any]) -> dict[str, Any]:
        entry: dict[str, Any] = {"status": status, "at": iso(self.clock()), "detail": run.clean(detail)}
        run.stages.pop(name, None)  # keep stage order even if a stage name repeats
        run.stages[name] = entry
        run.publish_json()
        return entry

    def _upload(self, run: _Run, succeeded: bool) -> None:
        if self.artifacts is None or not run.stages:
            return
        names = [("publish.json", "application/json")]
        names += [(n, "text/plain; charset=utf-8") for n in ("diff.patch", "git-status.txt")]
        try:
            for name, content_type in names:
                path = run.out / name
                if path.exists():
                    self.artifacts.put(run.task.id, name, path.read_bytes(), content_type)
        except Exception:
            if succeeded:
                raise
            # The publication's own error is the one to report; the files stay on disk.
            _LOG.exception("uploading publication artifacts failed", extra={"task_id": run.task.id})

    # ---- stages

    def _git(self, run: _Run, *args: str, check: bool = True, **kwargs: Any) -> str:
        return self._local(run, *args, check=check, **kwargs).stdout

    def _local(self, run: _Run, *args: str, check: bool = True, **kwargs: Any) -> GitResult:
        """A local command in the clone, pinned to its git directory and work tree (never one
        that carries the token: `_remote`)."""
        return run_git([*pinned(run.clone), *args], cwd=run.clone, check=check, secrets=run.secrets, **kwargs)

    def _remote(self, run: _Run, repository: RemoteRepository, *args: str) -> str:
        """A token-carrying command, in Steward's own repository, the token scoped to the URL."""
        url = self.github.git_url(run.task.repo)
        return repository.git(args, token=run.token(), token_url=url, secrets=run.secrets).stdout

    def _stage(self, run: _Run) -> tuple[str, dict[str, Any]]:
        try:
            tree = untrusted_tree(run.clone)
        except UntrustedGitDir as exc:
            raise PublishError(
                f"{exc.message}; nothing is published from it", stage="stage", reason="git_dir"
            ) from None
        run.nested = tree.nested
        run.merging = self._merge_pending(run)
        self._git(run, "add", "-A", *tree.pathspec())
        return "ok", ({"not_staged": list(tree.nested)} if tree.nested else {})

    def _record_changes(self, run: _Run) -> tuple[str, dict[str, Any]]:
        files = _name_status(
            self._git(run, "diff", "--cached", "--name-status", "-z", "--no-renames", *DIFF_FLAGS)
        )
        source = "index"
        if files:
            diff = self._git(run, "diff", "--cached", "--no-color", *DIFF_FLAGS)
        elif self._head_is_ours(run):
            # A repeated publication: the changes are already in this task's commit.
            source = "commit"
            files = _name_status(
                self._git(run, "show", "--format=", "--name-status", "-z", "--no-renames", "HEAD")
            )
            show = ("show", "--format=", "--no-color", *DIFF_FLAGS, "HEAD")
            diff = self._git(run, *show)
        else:
            diff = ""
        run.files = tuple(files)
        truncated = len(diff.encode()) > MAX_DIFF_BYTES
        if truncated:
            diff = diff.encode()[:MAX_DIFF_BYTES].decode("utf-8", errors="ignore")
            diff += "\n[diff truncated by Steward]\n"
        status = self._git(run, "status", "--porcelain=v1", "--untracked-files=all", *STATUS_FLAGS)
        written = run.write("diff.patch", diff)
        run.write("git-status.txt", status)
        detail = {
            "source": source,
            "file_count": len(files),
            "files": files[:MAX_LISTED_FILES],
            "diff_bytes": len(written),
            "diff_truncated": truncated,
        }
        return "ok", detail

    def _scan(self, run: _Run) -> tuple[str, dict[str, Any]]:
        """Refuse what must never be pushed (see the module docstring): nested repositories,
        gitlinks, nested bare repositories, credentials; one refusal names every problem,
        its reason the first. Reads the change between the task's base and the index, so a
        replay whose change is already committed is scanned too."""
        base = self._base(run)
        changes = staged_changes(run.clone, base)
        kept = [c for c in changes if c.status != "D"]
        if run.merge_parent is not None:  # what the merge brought as the base has it is on GitHub already
            theirs = self._blobs_at(run, run.merge_parent, [c.path for c in kept])
            kept = [c for c in kept if theirs.get(c.path) != (c.new_mode, c.new)]
        problems: list[tuple[str, str]] = []
        nested = [*run.nested, *(c.path for c in kept if c.new_mode == GITLINK_MODE)]
        nested += _in_git_directories(run.clone, [c.path for c in kept])
        if nested:
            where = self._names(run, nested)
            problems.append(
                ("nested_repository", f"a nested git repository at {where} (never staged or published)")
            )
        blobs = [c for c in kept if c.new_mode in BLOB_MODES]
        wanted = {c.new for c in blobs} | {c.old for c in blobs if c.status == "M"}
        size = sum(blob_sizes(run.clone, wanted).values())
        if size > MAX_SCAN_BYTES:
            problems.append(
                ("too_large", f"more than the {MAX_SCAN_BYTES} bytes a credential scan reads ({size})")
            )
        elif hits := _credential_files(run.redactor, kept, read_blobs(run.clone, wanted)):
            problems.append(("credential", f"a credential in {self._names(run, hits)}"))
        if problems:
            raise PublishError(
                "the change holds "
                + "; ".join(text for _, text in problems)
                + "; nothing was pushed, the work is in diff.patch (redacted)",
                stage="scan",
                reason=problems[0][0],
            )
        return "ok", {"base": base, "files": len(kept), "bytes": size}

    def _names(self, run: _Run, paths: Sequence[str]) -> str:
        """Up to MAX_NAMED_FILES paths, each redacted (a file's name may be the secret)."""
        unique = sorted(set(paths))
        shown = ", ".join(run.redactor.redact(path) for path in unique[:MAX_NAMED_FILES])
        more = len(unique) - MAX_NAMED_FILES
        return shown + (f" and {more} more" if more > 0 else "")

    def _base(self, run: _Run) -> str:
        """What the task's change starts from: HEAD below any commits of this task (a
        replay's own, or an earlier attempt's in a clone of the pushed branch); the empty tree
        in an empty repository."""
        commit = self._commit_of(run, "HEAD")
        for _ in range(MAX_OWN_COMMITS):
            if commit is None:
                return self._git(run, "hash-object", "-t", "tree", "--stdin", input_text="").strip()
            if not self._is_ours(run, commit):
                return commit
            commit = self._commit_of(run, f"{commit}^1")
        raise GitError(f"HEAD sits on more than {MAX_OWN_COMMITS} commits of this task")

    def _merge_pending(self, run: _Run) -> bool:
        """Whether the clone holds the conflict round's merge uncommitted. Only the merge the
        runner made: any other merge state refuses publication, and so does a round whose
        merge is neither pending nor this task's commit already (a replay finds it there)."""
        pending = self._commit_of(run, "MERGE_HEAD")
        if pending is not None and pending == run.merge_parent:
            return True
        committed = (
            run.merge_parent is not None
            and self._commit_of(run, "HEAD^2") == run.merge_parent
            and self._head_is_ours(run)
        )
        if pending is None and (run.merge_parent is None or committed):
            return False
        raise PublishError(
            "the clone's merge state is not the one Steward made; nothing is published",
            stage="stage",
            reason="merge_state",
        )

    def _blobs_at(self, run: _Run, commit: str, paths: Sequence[str]) -> dict[str, tuple[str, str]]:
        """path -> (mode, object) of `paths` in `commit`."""
        if not paths:
            return {}
        listing = self._git(run, "ls-tree", "-z", "--full-tree", commit, "--", *paths)
        found: dict[str, tuple[str, str]] = {}
        for entry in listing.split("\0"):
            meta, _, path = entry.partition("\t")
            parts = meta.split()
            if len(parts) == 3:
                found[path] = (parts[0], parts[2])
        return found

    def _commit_of(self, run: _Run, revision: str) -> str | None:
        found = self._local(run, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", check=False)
        return found.stdout.strip() if found.returncode == 0 else None

    def _commit(self, run: _Run) -> tuple[str, dict[str, Any]]:
        staged = self._local(run, "diff", "--cached", "--quiet", *DIFF_FLAGS, check=False).returncode
        if staged == 0 and not run.merging:
            if self._head_is_ours(run):
                return "skipped", {"reason": "already committed", "sha": self._head(run)}
            raise PublishError(
                "no changes to publish: the run left the repository as it was",
                stage="commit",
                reason="no_changes",
            )
        if staged != 1:
            raise GitError("git diff --cached could not compare the index with HEAD")
        self._git(
            run,
            "commit",
            "--quiet",
            "--no-verify",
            "--no-gpg-sign",
            "--file=-",
            input_text=self._message(run),
            env=self._identity(),
        )
        detail = {"sha": self._head(run), "author": f"{self.bot_name} <{self.bot_email}>"}
        return "ok", detail | ({"merged": run.merge_parent} if run.merging else {})

    def _resolve(self, run: _Run) -> tuple[str, dict[str, Any]]:
        return "ok", {"sha": self._head(run)}

    def _recheck(self, run: _Run, name: str) -> tuple[str, dict[str, Any]]:
        """Go on only while the task is running, or in review (its pull request was opened by
        this publication's earlier attempt, whose answer was lost): a task that ended (cancelled,
        withdrawn, merged, failed) is one nobody may publish for any more."""
        status = self.status_of(run.task.id)
        if status not in (TaskStatus.RUNNING, TaskStatus.REVIEW):
            ended = "was cancelled" if status in (None, TaskStatus.CANCELLED) else f"is {status}"
            raise PublishError(
                f"task {run.task.id} {ended}; publication stops before "
                + ("the push" if name == "recheck_push" else "opening a pull request"),
                stage=name,
                reason="cancelled" if status in (None, TaskStatus.CANCELLED) else "ended",
            )
        return "ok", {"task_status": status.value}

    def _push(self, run: _Run, sha: str) -> tuple[str, dict[str, Any]]:
        branch = run.task.branch
        owned = branch_name(run.task.parent or run.task.id)  # a round pushes to its parent's branch
        if branch != owned:  # only ever a branch Steward owns
            raise PublishError(
                f"the task's branch {branch!r} is not its Steward branch {owned!r}",
                stage="push",
                reason="branch",
            )
        url = self.github.git_url(run.task.repo)
        with remote_repository(run.clone, haves=(sha,)) as outbound:
            return self._push_from(run, outbound, url, branch, sha)

    def _push_from(
        self, run: _Run, outbound: RemoteRepository, url: str, branch: str, sha: str
    ) -> tuple[str, dict[str, Any]]:
        """The push stage in `outbound` (Steward's repository, borrowing the clone's objects)."""
        remote = self._remote_head(run, outbound, url, branch)
        detail: dict[str, Any] = {"branch": branch, "remote_before": remote}
        if remote == sha:
            return "skipped", {**detail, "sha": sha, "reason": "already pushed"}
        if remote is not None:
            self._remote(run, outbound, "fetch", "--no-tags", "--quiet", url, f"refs/heads/{branch}")
            if outbound.fetched() != remote:
                raise GitError(f"the remote branch {branch} moved while it was read; publish again")
            outbound.adopt_into(run.clone)  # the clone holds the remote's commits from now on
            theirs = self._git(run, "rev-list", remote, f"^{sha}").split()
            if theirs:
                foreign = [c for c in theirs if not self._is_ours(run, c)]
                if foreign:
                    raise PublishError(
                        f"the remote branch {branch} has {len(foreign)} commit(s) Steward did not make "
                        f"for this task (newest {foreign[0][:12]}); they are never overwritten",
                        stage="push",
                        reason="foreign_commits",
                    )
                sha = self._rebuild_on(run, sha, remote)
                detail["rebuilt_on"] = remote
                if sha == remote:
                    return "skipped", {**detail, "sha": sha, "reason": "already pushed"}
        self._remote(run, outbound, "push", "--no-verify", "--quiet", url, f"{sha}:refs/heads/{branch}")
        detail["action"] = "created" if remote is None else "fast-forward"
        return "ok", {**detail, "sha": sha}

    def _pull_request(
        self,
        run: _Run,
        installation_id: int,
        summary: str,
        checks: Sequence[Mapping[str, Any]],
        cost_usd: Decimal,
    ) -> tuple[str, dict[str, Any]]:
        task = run.task
        existing = self.github.find_pull(installation_id, task.repo, task.branch, state="all")
        if existing is not None:
            return "ok", {**_pull_detail(existing), "action": "reused"}
        base = task.base or self._default_branch(run)
        pull = self.github.open_pull(
            installation_id,
            task.repo,
            head=task.branch,
            base=base,
            title=_title(run.redactor, task.title),
            body=run.redactor.redact(
                pull_request_body(
                    task, run.redactor.redact(summary), checks, cost_usd, run.related, files=run.files
                )
            ),
        )
        return "ok", {**_pull_detail(pull), "action": "opened", "base": base}

    def _reply(self, run: _Run, installation_id: int, number: int, body: str) -> tuple[str, dict[str, Any]]:
        """A round's one comment on its pull request (a hidden marker names the round, so a
        publication run again finds it instead of commenting twice)."""
        task = run.task
        marker = round_marker(task.id)
        found = self.github.find_comment(installation_id, task.repo, number, marker)
        if found is not None:
            return "skipped", {"comment_id": found, "reason": "already replied"}
        comment = self.github.comment(installation_id, task.repo, number, run.redactor.redact(body))
        return "ok", {"comment_id": comment}

    # ---- git helpers

    def _identity(self) -> dict[str, str]:
        return {
            "GIT_AUTHOR_NAME": self.bot_name,
            "GIT_AUTHOR_EMAIL": self.bot_email,
            "GIT_COMMITTER_NAME": self.bot_name,
            "GIT_COMMITTER_EMAIL": self.bot_email,
        }

    @staticmethod
    def _message(run: _Run) -> str:
        """The commit message: the redacted title and the task trailer."""
        return f"{_title(run.redactor, run.task.title)}\n\n{TASK_TRAILER}: {run.task.id}\n"

    def _head(self, run: _Run) -> str:
        return self._git(run, "rev-parse", "--verify", "HEAD^{commit}").strip()

    def _head_is_ours(self, run: _Run) -> bool:
        head = self._local(run, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        return head.returncode == 0 and self._is_ours(run, head.stdout.strip())

    def _is_ours(self, run: _Run, commit: str) -> bool:
        """A commit the Steward bot made for this task (author and trailer)."""
        fields = self._git(
            run,
            "log",
            "-1",
            f"--format=%ae%x00%(trailers:key={TASK_TRAILER},valueonly,separator=%x2C)",
            commit,
        )
        email, _, trailer = fields.strip().partition("\0")
        return email == self.bot_email and run.task.id in trailer.split(",")

    def _rebuild_on(self, run: _Run, sha: str, remote: str) -> str:
        """Our tree as a bot commit on top of `remote` (earlier bot commits of this task),
        so the push is a fast-forward; HEAD follows. `remote` itself if the trees match."""
        tree = self._git(run, "rev-parse", f"{sha}^{{tree}}").strip()
        if tree == self._git(run, "rev-parse", f"{remote}^{{tree}}").strip():
            rebuilt = remote
        else:
            rebuilt = self._git(
                run,
                "commit-tree",
                tree,
                "-p",
                remote,
                input_text=self._message(run),
                env=self._identity(),
            ).strip()
        self._git(run, "reset", "--soft", rebuilt)
        return rebuilt

    def _remote_head(self, run: _Run, outbound: RemoteRepository, url: str, branch: str) -> str | None:
        out = self._remote(run, outbound, "ls-remote", "--heads", url, f"refs/heads/{branch}")
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref == f"refs/heads/{branch}" and _SHA.match(sha):
                return sha
        return None

    def _default_branch(self, run: _Run) -> str:
        url = self.github.git_url(run.task.repo)
        with remote_repository() as outbound:
            out = self._remote(run, outbound, "ls-remote", "--symref", url, "HEAD")
        for line in out.splitlines():
            if line.startswith("ref: refs/heads/") and line.endswith("\tHEAD"):
                return line[len("ref: refs/heads/") : -len("\tHEAD")]
        raise GitError(f"could not read the default branch of {run.task.repo}")


# ---- pure helpers


def _describe(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, StewardError) else str(exc)
    return f"{type(exc).__name__}: {message}"[:1000]


def _name_status(raw: str) -> list[dict[str, str]]:
    parts = raw.split("\0")
    return [
        {"status": parts[i], "path": parts[i + 1]}
        for i in range(0, len(parts) - 1, 2)
        if parts[i] and i + 1 < len(parts)
    ]


def _pull_detail(pull: PullRef) -> dict[str, Any]:
    return {"number": pull.number, "url": pull.url, "state": pull.state, "merged": pull.merged}


def _title(redactor: Redactor, text: str) -> str:
    """One line, redacted, then cut to MAX_TITLE_CHARS (a cut cannot expose part of a token)."""
    line = redactor.redact(" ".join(text.split()))
    return line if len(line) <= MAX_TITLE_CHARS else line[: MAX_TITLE_CHARS - 1] + "…"


def _in_git_directories(clone: Path, paths: Sequence[str]) -> list[str]:
    """The directories among the ancestors of `paths` that look like a git directory (a
    nested bare repository the change would add to)."""
    found: set[str] = set()
    seen: dict[str, bool] = {}
    for path in paths:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            ancestor = "/".join(parts[:depth])
            if ancestor not in seen:
                seen[ancestor] = is_git_directory(clone / ancestor)
            if seen[ancestor]:
                found.add(ancestor)
                break
    return sorted(found)


def _credential_files(redactor: Redactor, changes: Sequence[Change], blobs: Mapping[str, bytes]) -> list[str]:
    """The changed paths whose name, or whose added content, holds a credential. Content is
    the whole of a new blob and, for a modified file, the lines the old one lacked; bytes are
    read as latin-1, so every ASCII credential appears as it is stored."""
    hits = []
    for change in changes:
        if redactor.detect(change.path):
            hits.append(change.path)
            continue
        if change.new_mode not in BLOB_MODES:
            continue
        new = blobs.get(change.new, b"")
        old = blobs.get(change.old) if change.status == "M" else None
        if old is None:
            added = new.decode("latin-1")
        else:
            before = set(old.split(b"\n"))
            added = "\n".join(line.decode("latin-1") for line in new.split(b"\n") if line not in before)
        if redactor.detect(added):
            hits.append(change.path)
    return hits


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _command_cell(command: str) -> str:
    text = _cell(command)
    if len(text) > MAX_COMMAND_CHARS:
        text = text[: MAX_COMMAND_CHARS - 1] + "…"
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _exit_cell(check: Mapping[str, Any]) -> str:
    value = check.get("exit_status", check.get("exit_code"))
    return "—" if value is None else _cell(str(value))


def _duration_cell(check: Mapping[str, Any]) -> str:
    if isinstance(seconds := check.get("duration_s"), int | float):
        return f"{seconds:.1f} s"
    if isinstance(millis := check.get("duration_ms"), int | float):
        return f"{millis / 1000:.1f} s"
    return "—"


RELATED_START = "<!-- steward:related -->"
RELATED_END = "<!-- /steward:related -->"


def related_section(plan_slug: str, related: Sequence[Mapping[str, Any]]) -> str:
    """The body's list of the plan's pull requests around the item (`steward.domain.order.
    related`) between markers, so the loop can rewrite it as the others open; empty: none."""
    if not related:
        return ""
    lines = [RELATED_START, f"### Related pull requests (plan `{_cell(plan_slug)}`)", ""]
    for other in related:
        said = "waits for" if other.get("relation") == "after" else "is waited for by"
        url = other.get("pr_url")
        where = f"[{_cell(str(other.get('repo', '')))} pull request]({url})" if url else "no pull request yet"
        lines.append(
            f"- This {said} item {other.get('ordinal')} ({_cell(str(other.get('status', '')))}): "
            f"{_cell(str(other.get('title', '')))}, {where}"
        )
    return "\n".join([*lines, RELATED_END])


def with_related(body: str, section: str) -> str:
    """`body` with its related section replaced by `section` (added above the checks when it
    has none). The last markers are Steward's: the model's summary comes before them."""
    start, end = body.rfind(RELATED_START), body.rfind(RELATED_END)
    if start != -1 and end > start:
        return body[:start] + section + body[end + len(RELATED_END) :]
    if not section:
        return body
    at = body.rfind("### Checks")
    return f"{body[:at]}{section}\n\n{body[at:]}" if at != -1 else f"{body}\n\n{section}\n"


def pull_request_body(
    task: Task,
    summary: str,
    checks: Sequence[Mapping[str, Any]],
    cost_usd: Decimal,
    related: Sequence[Mapping[str, Any]] = (),
    *,
    files: Sequence[Mapping[str, str]] = (),
) -> str:
    """The pull request's body, explaining itself to a reviewer who never opens Steward: the
    model's summary, the item as approved, the files changed, the plan's related pull
    requests, the checks run in the sandbox and the cost, then a footer naming Steward, the
    task and the approved plan's content hash. What people or the model wrote is inert: the
    item's text in a code block, names in code spans."""
    section = related_section(task.plan_slug, related)
    lines = ["### What was asked", "", f"Item {task.ordinal} of plan `{_cell(task.plan_slug)}`:", ""]
    lines += _fenced(task.title + (f"\n\n{task.details}" if task.details.strip() else ""))
    if files:
        shown = list(files)[:MAX_FILES_IN_BODY]
        lines += ["", f"### Files changed ({len(files)})", ""]
        lines += [
            f"- `{_FILE_STATUS.get(f.get('status', '')[:1], 'changed')}` `{_code_text(f.get('path', ''))}`"
            for f in shown
        ]
        if len(files) > len(shown):
            lines.append(f"- and {len(files) - len(shown)} more (the full list is in `diff.patch`)")
    lines += ["", *([section, ""] if section else []), "### Checks run in the sandbox", ""]
    if checks:
        lines += ["| Command | Exit status | Duration |", "| --- | --- | --- |"]
        lines += [
            f"| {_command_cell(str(c.get('command', '')))} | {_exit_cell(c)} | {_duration_cell(c)} |"
            for c in checks
        ]
    else:
        lines.append("No checks ran.")
    lines += [
        "",
        f"**Model cost:** ${cost_usd:.4f} of a ${task.budget_usd:.2f} budget",
        "",
        "---",
        (
            f"Follow-up round {task.round} of task `{task.parent}` (plan `{task.plan_slug}`, "
            f"item {task.ordinal}), as task `{task.id}`."
            if task.is_round
            else f"Opened by Steward for task `{task.id}` (plan `{task.plan_slug}`, "
            f"item {task.ordinal}, attempt {task.attempt}); approved content "
            f"`{(task.content_hash or 'unknown')[:16]}`. Review it here: request changes or "
            "comment `/steward …` and Steward answers with a follow-up round."
        ),
    ]
    tail = "\n".join(lines)
    room = MAX_BODY_CHARS - len(tail) - 64
    text = tame(summary.strip()) or "_The run left no summary._"
    if len(text) > room:
        text = text[: max(room, 0)] + "\n\n[summary truncated]"
    return f"{text}\n\n{tail}\n"


_FILE_STATUS = {
    "A": "added",
    "M": "modified",
    "D": "deleted",
    "T": "type changed",
    "R": "renamed",
    "C": "copied",
}
MAX_FILES_IN_BODY = 50


def _fenced(text: str) -> list[str]:
    """`text` in a fenced code block its own backticks cannot end (inert, shown as written)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}text", *text.splitlines(), fence]


def _code_text(text: str) -> str:
    return " ".join(text.split()).replace("`", "'")


def round_marker(task_id: str) -> str:
    return f"<!-- steward-round: {task_id} -->"


def round_reply(
    task: Task, sha: str, summary: str, checks: Sequence[Mapping[str, Any]], cost_usd: Decimal
) -> str:
    """A follow-up round's comment on its pull request: what it answers, its commit, what it
    did (the run's summary), the checks table and the cost."""
    trigger = task.trigger or {}
    asked = ASKED_BY.get(str(trigger.get("kind")), "the request")
    if trigger.get("url"):
        asked = f"[{asked}]({trigger['url']})"
    if trigger.get("author"):
        asked += f" by @{trigger['author']}"
    if trigger.get("kind") == "check" and trigger.get("check_name"):
        asked += f" ({_cell(str(trigger['check_name']))})"
    body = pull_request_body(task, summary, checks, cost_usd)
    head = f"Follow-up round {task.round} answers {asked} with commit {sha[:12]}.\n\n"
    return f"{round_marker(task.id)}\n{head}{body}"
