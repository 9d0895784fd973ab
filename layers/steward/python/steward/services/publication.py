"""Governed publication: the runner's last step, never the model's (DESIGN sections 3, 6).

Stages, in order, each recorded in `publish.json` (stage -> {status, at, detail}) as soon as
it ends: `stage` (git add -A), `record` (staged files, `diff.patch`, `git-status.txt`),
`commit` (as the Steward bot, with a `Steward-Task: <task id>` trailer), `resolve` (the
SHA), `recheck_push` (the task is not cancelled), `push`, `recheck_pull_request`,
`pull_request`. A status is `ok`, `skipped` (already done by an earlier attempt), `refused`
(a rule stopped publication: `PublishError`) or `failed` (an error; the exception is raised
after it is recorded).

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
uploaded (in the runtime: presigned PUTs through the runtime routes). Everything written is
redacted (`steward.domain.redaction.redact`) of the token in use and of anything shaped like
a GitHub credential.

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

from steward.adapters.git import GitError, run_git
from steward.adapters.github import PullRef, RepositoryClient
from steward.domain.errors import StewardError
from steward.domain.ids import branch_name
from steward.domain.models import Task, TaskStatus, iso, utcnow
from steward.domain.redaction import redact

_LOG = logging.getLogger(__name__)

STAGES = (
    "stage",
    "record",
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
    "cancelled", "foreign_commits" or "branch" (not the task's canonical branch); `stage`
    is where it stopped."""

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
    """One publication attempt: its stage records, the secrets to redact, the cached token."""

    task: Task
    clone: Path
    out: Path
    token_provider: Callable[[], str]
    secrets: list[str] = field(default_factory=list)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    _token: str | None = None

    def token(self) -> str:
        """The installation token, asked for once per attempt (at push time, DESIGN 6)."""
        if self._token is None:
            token = self.token_provider()
            if not token:
                raise StewardError("the token provider returned no token")
            self.secrets.append(token)
            self._token = token
        return self._token

    def clean(self, value: Any) -> Any:
        """`value` with every string redacted, recursively."""
        if isinstance(value, str):
            return redact(value, self.secrets)
        if isinstance(value, Mapping):
            return {str(k): self.clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.clean(v) for v in value]
        return value

    def write(self, name: str, text: str) -> bytes:
        """Write artifact `name` (redacted) atomically; its bytes."""
        data = redact(text, self.secrets).encode("utf-8")
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
    ) -> PublishResult:
        """Run every stage (see the module docstring); the pull request's URL and number and
        the pushed SHA. `checks` items: {"command", "exit_status" (or "exit_code"),
        "duration_s" (or "duration_ms")}. `on_stage(name, record)` is called after each stage
        is recorded (for progress events); an exception from it stops publication there.
        Raises PublishError for a refusal, GitError / GitHubError for faults; either way
        publish.json says which stage and why."""
        run = _Run(task, Path(clone), Path(clone).parent / ARTIFACTS_DIR, token_provider)
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
        stage("commit", lambda: self._commit(run))
        sha = str(stage("resolve", lambda: self._resolve(run))["sha"])
        stage("recheck_push", lambda: self._recheck(run, "recheck_push"))
        sha = str(stage("push", lambda: self._push(run, sha))["sha"])
        stage("recheck_pull_request", lambda: self._recheck(run, "recheck_pull_request"))
        pull = stage(
            "pull_request", lambda: self._pull_request(run, installation_id, summary, checks, cost_usd)
        )
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

    def _git(self, run: _Run, *args: str, token: bool = False, check: bool = True, **kwargs: Any) -> str:
        url = self.github.git_url(run.task.repo) if token else None
        result = run_git(
            args,
            cwd=run.clone,
            token=run.token() if token else None,
            token_url=url,
            check=check,
            secrets=run.secrets,
            **kwargs,
        )
        return result.stdout

    def _stage(self, run: _Run) -> tuple[str, dict[str, Any]]:
        self._git(run, "add", "-A")
        return "ok", {}

    def _record_changes(self, run: _Run) -> tuple[str, dict[str, Any]]:
        files = _name_status(self._git(run, "diff", "--cached", "--name-status", "-z", "--no-renames"))
        source = "index"
        if files:
            diff = self._git(run, "diff", "--cached", "--no-ext-diff", "--no-textconv", "--no-color")
        elif self._head_is_ours(run):
            # A repeated publication: the changes are already in this task's commit.
            source = "commit"
            files = _name_status(
                self._git(run, "show", "--format=", "--name-status", "-z", "--no-renames", "HEAD")
            )
            show = ("show", "--format=", "--no-ext-diff", "--no-textconv", "--no-color", "HEAD")
            diff = self._git(run, *show)
        else:
            diff = ""
        truncated = len(diff.encode()) > MAX_DIFF_BYTES
        if truncated:
            diff = diff.encode()[:MAX_DIFF_BYTES].decode("utf-8", errors="ignore")
            diff += "\n[diff truncated by Steward]\n"
        status = self._git(run, "status", "--porcelain=v1", "--untracked-files=all")
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

    def _commit(self, run: _Run) -> tuple[str, dict[str, Any]]:
        staged = run_git(
            ("diff", "--cached", "--quiet", "--no-ext-diff"), cwd=run.clone, check=False
        ).returncode
        if staged == 0:
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
            input_text=self._message(run.task),
            env=self._identity(),
        )
        return "ok", {"sha": self._head(run), "author": f"{self.bot_name} <{self.bot_email}>"}

    def _resolve(self, run: _Run) -> tuple[str, dict[str, Any]]:
        return "ok", {"sha": self._head(run)}

    def _recheck(self, run: _Run, name: str) -> tuple[str, dict[str, Any]]:
        status = self.status_of(run.task.id)
        if status is None or status is TaskStatus.CANCELLED:
            raise PublishError(
                f"task {run.task.id} was cancelled; publication stops before "
                + ("the push" if name == "recheck_push" else "opening a pull request"),
                stage=name,
                reason="cancelled",
            )
        return "ok", {"task_status": status.value}

    def _push(self, run: _Run, sha: str) -> tuple[str, dict[str, Any]]:
        branch = run.task.branch
        if branch != branch_name(run.task.id):  # only ever a branch Steward owns
            raise PublishError(
                f"the task's branch {branch!r} is not its Steward branch {branch_name(run.task.id)!r}",
                stage="push",
                reason="branch",
            )
        url = self.github.git_url(run.task.repo)
        remote = self._remote_head(run, url, branch)
        detail: dict[str, Any] = {"branch": branch, "remote_before": remote}
        if remote == sha:
            return "skipped", {**detail, "sha": sha, "reason": "already pushed"}
        if remote is not None:
            self._git(run, "fetch", "--no-tags", "--quiet", url, f"refs/heads/{branch}", token=True)
            fetched = self._git(run, "rev-parse", "--verify", "FETCH_HEAD^{commit}").strip()
            if fetched != remote:
                raise GitError(f"the remote branch {branch} moved while it was read; publish again")
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
        self._git(run, "push", "--no-verify", "--quiet", url, f"{sha}:refs/heads/{branch}", token=True)
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
            title=_title(task.title),
            body=redact(pull_request_body(task, summary, checks, cost_usd), run.secrets),
        )
        return "ok", {**_pull_detail(pull), "action": "opened", "base": base}

    # ---- git helpers

    def _identity(self) -> dict[str, str]:
        return {
            "GIT_AUTHOR_NAME": self.bot_name,
            "GIT_AUTHOR_EMAIL": self.bot_email,
            "GIT_COMMITTER_NAME": self.bot_name,
            "GIT_COMMITTER_EMAIL": self.bot_email,
        }

    @staticmethod
    def _message(task: Task) -> str:
        return f"{_title(task.title)}\n\n{TASK_TRAILER}: {task.id}\n"

    def _head(self, run: _Run) -> str:
        return self._git(run, "rev-parse", "--verify", "HEAD^{commit}").strip()

    def _head_is_ours(self, run: _Run) -> bool:
        head = run_git(("rev-parse", "--verify", "--quiet", "HEAD^{commit}"), cwd=run.clone, check=False)
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
                input_text=self._message(run.task),
                env=self._identity(),
            ).strip()
        self._git(run, "reset", "--soft", rebuilt)
        return rebuilt

    def _remote_head(self, run: _Run, url: str, branch: str) -> str | None:
        out = self._git(run, "ls-remote", "--heads", url, f"refs/heads/{branch}", token=True)
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref == f"refs/heads/{branch}" and _SHA.match(sha):
                return sha
        return None

    def _default_branch(self, run: _Run) -> str:
        url = self.github.git_url(run.task.repo)
        out = self._git(run, "ls-remote", "--symref", url, "HEAD", token=True)
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


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_TITLE_CHARS else line[: MAX_TITLE_CHARS - 1] + "…"


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


def pull_request_body(
    task: Task, summary: str, checks: Sequence[Mapping[str, Any]], cost_usd: Decimal
) -> str:
    """The pull request's body: the run's summary, the checks table and the cost."""
    lines = ["### Checks", ""]
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
        f"**Model cost:** ${cost_usd:.4f}",
        "",
        "---",
        f"Opened by Steward for task `{task.id}` (plan `{task.plan_slug}`, item {task.ordinal}, "
        f"attempt {task.attempt}).",
    ]
    tail = "\n".join(lines)
    room = MAX_BODY_CHARS - len(tail) - 64
    text = summary.strip() or "_The run left no summary._"
    if len(text) > room:
        text = text[: max(room, 0)] + "\n\n[summary truncated]"
    return f"{text}\n\n{tail}\n"
