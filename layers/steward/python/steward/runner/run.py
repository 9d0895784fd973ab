"""One runtime from claim to finish (README: "The runner"): the stages and their records.

    claim -> bootstrap (token, clone, sandbox probe, setup) -> tool loop -> required checks
          -> publish -> finish

The task was claimed (`POST /v1/runtime/claim`) before this starts; from then on a
heartbeat thread renews `last_seen` (`POST /v1/runtime/heartbeat`) and, once the task is no
longer this runtime's (cancelled, reaped), sets `cancel` and kills the running command, and
the run stops without writing its task again. Every other ending writes exactly one
terminal transition (`POST /v1/runtime/finish`): `review` with the pull request, or `failed`
with a classification — `retryable` for infrastructure (clone, network, the control plane,
GitHub, and a request of the runner's own that the relay refused: Steward's fault, so
harness.json keeps the request and the ending names the `fault`, which the control plane
counts for an alarm), `final` for what another attempt would repeat (the model, the checks,
the budget, the plan's setup, a model that cannot do the task at all such as the scripted
model with no play for it). Artifacts are written before the transition, each redacted
first, and uploaded by presigned PUTs (`POST /v1/runtime/artifacts/{name}`); one that cannot be
redacted is not written, and the `finished` event says so. Every write goes through those
routes with the capability: the runtime holds no AWS credential and reads no table.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from steward.adapters.git import GitError, run_git, snapshot_work
from steward.adapters.github import GitHubError, InstallationClient, InstallationToken
from steward.adapters.runtime_api import BudgetExhausted, IssuedToken, RuntimeApi, RuntimeApiError
from steward.domain.artifacts import SCREEN_NAME
from steward.domain.errors import CallExceedsBudget, ModelCannotAnswer
from steward.domain.models import Classification, Fault, Task, TaskStatus, utcnow
from steward.domain.redaction import RedactionError, Redactor
from steward.runner.config import RunnerConfig
from steward.runner.harness import Cancelled, Harness, Outcome, RelayRefused
from steward.runner.sandbox import CommandRefused, CommandResult, Sandbox, probe_mode
from steward.runner.screen import LiveSink, Screen
from steward.runner.workspace import Workspace
from steward.services.publication import ArtifactSink, Publisher, PublishError

_LOG = logging.getLogger(__name__)

RETRYABLE = Classification.RETRYABLE.value
FINAL = Classification.FINAL.value
_REASON_CHARS = 300
MAX_LISTED_CONFLICTS = 50  # conflicted files a round's prompt names
_MARKER = re.compile(rb"^(?:<{7}|>{7})(?: |$)|^={7}$", re.MULTILINE)
MODEL_CANNOT_ANSWER = ModelCannotAnswer.code
CALL_EXCEEDS_BUDGET = CallExceedsBudget.code
# What bootstrap.json keeps of a failed setup command's output: its last 4 KiB, redacted.
SETUP_TAIL_CHARS = 4096
_ENDING_KEYS = (
    "classification",
    "reason",
    "pr_url",
    "pr_number",
    "summary",
    "artifacts_not_written",
    "fault",
)


class StageFailed(Exception):
    """A stage ended the run: `classification` and a reason safe to show (redacted)."""

    def __init__(self, reason: str, classification: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.classification = classification


@dataclass
class Records:
    """What the artifacts hold, built up as the run goes."""

    bootstrap: dict[str, Any] = field(default_factory=lambda: {"stages": []})
    harness: list[dict[str, Any]] = field(default_factory=list)


class Run:
    def __init__(
        self,
        config: RunnerConfig,
        task: Task,
        runtime_id: str,
        capability: str,
        *,
        artifacts: ArtifactSink | None,
        api: RuntimeApi,
        redactor: Redactor,
        clock: Callable[[], datetime] = utcnow,
        related: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.config = config
        self.task = task
        self.related = related  # the plan's pull requests around the item, for the body
        self.runtime_id = runtime_id
        self.capability = capability
        self.artifacts = artifacts
        self.api = api
        self.redactor = redactor
        self.clock = clock
        self.cancel = threading.Event()
        self.records = Records()
        self.live = LiveSink(config.stream_url, capability) if config.stream_url else None
        self.screen = Screen(redactor, self.live)
        self.sandbox: Sandbox | None = None
        self._events_lock = threading.Lock()
        self._issued: IssuedToken | None = None
        # A conflict round's merge of its base (`_merge_base`): the commit merged, and the
        # files it left in conflict for the model to resolve.
        self.merge_parent: str | None = None
        self.conflicts: list[str] = []
        self._failed_artifacts: list[str] = []

    # ---- entry
    def execute(self) -> str:
        """Run every stage; the task's final status as this runtime left it."""
        work = Path(tempfile.mkdtemp(prefix="steward-run-", dir=self.config.work_dir))
        beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        beat.start()
        try:
            return self._stages(work / "repo")
        finally:
            self.cancel.set()  # stops the heartbeat
            beat.join(timeout=5.0)
            if self.live is not None:
                self.live.close()
            if not self.config.keep_work:
                shutil.rmtree(work, ignore_errors=True)

    def _stages(self, clone: Path) -> str:  # noqa: PLR0911 - one return per way a run ends
        outcome: Outcome | None = None
        try:
            self._bootstrap(clone)
            self.emit("phase", {"phase": "tool_loop"})
            harness = Harness(
                self.task,
                Workspace(clone),
                self._sandbox(),
                lambda request, *, timeout: self.api.converse(self.capability, request, timeout=timeout),
                self.redactor,
                limits=self.config.harness,
                record=self.records.harness.append,
                emit=self.emit,
                on_output=self.screen.write,
                cancel=self.cancel,
            )
            outcome = harness.run()
            if not outcome.completed:
                raise StageFailed(f"the model did not finish: {outcome.end} ({outcome.detail})", FINAL)
            self._conflicts_resolved(clone)
            self._final_checks(harness)
            pull = self._publish(clone, outcome)
        except Cancelled:
            self._write_artifacts(clone, preserve=True)
            return "cancelled"
        except BudgetExhausted as exc:
            if exc.code == CALL_EXCEEDS_BUDGET:  # what is left pays for no useful call: the figures
                return self._fail(
                    clone, f"the task's budget cannot pay for its next model call: {exc.detail}", FINAL
                )
            return self._fail(clone, "the task's budget is spent (relay 402)", FINAL)
        except RelayRefused as exc:
            reason = (
                "Steward's fault, not the model's or the plan's: the relay refused the runner's own "
                f"model request (the request is in harness.json): {exc.error}"
            )
            return self._fail(clone, reason, RETRYABLE, fault=Fault.RELAY_REFUSED)
        except StageFailed as exc:
            return self._fail(clone, exc.reason, exc.classification)
        except RuntimeApiError as exc:
            if exc.code == MODEL_CANNOT_ANSWER:  # says why and what to do; no attempt would differ
                return self._fail(clone, f"the model cannot do this task: {exc.detail}", FINAL)
            return self._fail(clone, str(exc), RETRYABLE if exc.retryable else FINAL)
        except (GitError, GitHubError) as exc:
            return self._fail(clone, f"{type(exc).__name__}: {exc}", RETRYABLE)
        except PublishError as exc:
            if exc.reason in ("cancelled", "ended"):  # the task ended elsewhere: nothing to record
                self._write_artifacts(clone, preserve=False)
                return "cancelled"
            return self._fail(clone, f"publication refused: {exc.message}", FINAL, preserve=False)
        except Exception as exc:  # a runner bug: fail the task retryably rather than hang it
            _LOG.exception("runner error")
            return self._fail(clone, f"runner error ({type(exc).__name__})", RETRYABLE)
        self._write_artifacts(clone, preserve=False)
        return self._finish(
            TaskStatus.REVIEW,
            {
                "outcome": "published",
                "pr_url": pull[0],
                "pr_number": pull[1],
                "summary": outcome.summary[:500],
            },
            extra={"pr_url": pull[0], "pr_number": pull[1]},
        )

    # ---- bootstrap
    def _bootstrap(self, clone: Path) -> None:
        self.emit("phase", {"phase": "bootstrap"})
        issued = self._stage("token", self._token, retryable=True)
        self._stage(
            "clone",
            lambda: self._clone(issued, clone),
            retryable=True,
        )
        if (self.task.trigger or {}).get("kind") == "conflict":
            self._stage("merge_base", lambda: self._merge_base(clone), retryable=True)
        mode, why = self._stage("sandbox", lambda: probe_mode(uid=self.config.uid), retryable=True)
        self.records.bootstrap["sandbox"] = {"mode": mode.value, "reason": why, "uid": self.config.uid}
        self.sandbox = Sandbox(
            clone, self.task.checks, mode=mode, uid=self.config.uid, limits=self.config.sandbox
        )
        if self.task.setup:
            setup = Sandbox(
                clone,
                self.task.setup,
                mode=mode,
                uid=self.config.uid,
                limits=self.config.sandbox.model_copy(update={"wall_seconds": self.config.setup_seconds}),
                network=True,
            )
            for number, command in enumerate(self.task.setup, start=1):
                self.screen.note(command)
                result = self._stage(
                    f"setup {number}",
                    lambda c=command: setup.run(c, on_output=self.screen.write, cancel=self.cancel),  # type: ignore[misc]
                    retryable=False,
                )
                self._last_stage()["exit_code"] = result.exit_code
                if self.cancel.is_set():
                    raise Cancelled("cancelled during setup")
                if not result.passed:
                    self._last_stage().update(self._setup_failure(result))
                    raise StageFailed(f"setup command `{command}` failed (exit {result.exit_code})", FINAL)

    def _setup_failure(self, result: CommandResult) -> dict[str, Any]:
        """Why a setup command failed, for bootstrap.json: how it ended and the redacted tail
        of its output (stdout and stderr as the command interleaved them: the sandbox reads
        both from one pipe), at most SETUP_TAIL_CHARS characters."""
        entry: dict[str, Any] = {"status": "failed"}
        ended = {
            "signal": result.signal,
            "timed_out": result.timed_out,
            "output_truncated": result.output_truncated,
            "write_limit_exceeded": result.write_limit_exceeded,
        }
        entry |= {key: value for key, value in ended.items() if value}
        entry["output_tail"] = self.redactor.bounded(result.output, SETUP_TAIL_CHARS, tail=True)
        return entry

    def _token(self) -> IssuedToken:
        issued = self.api.github_token(self.capability)
        self.redactor.add(issued.token.token)
        self._issued = issued
        return issued

    def _clone(self, issued: IssuedToken, clone: Path) -> dict[str, Any]:
        args = ["clone", "--quiet", "--no-tags"]
        # A follow-up round works on its pull request's branch, at the head it was asked on.
        start = self.task.branch if self.task.is_round else self.task.base
        if start:
            args += ["--branch", start]
        run_git(
            [*args, "--", issued.clone_url, str(clone)],
            cwd=clone.parent,
            token=issued.token.token,
            token_url=issued.clone_url,
            secrets=self.redactor_secrets(),
        )
        head = run_git(["rev-parse", "HEAD"], cwd=clone).stdout.strip()
        branch = run_git(["rev-parse", "--abbrev-ref", "HEAD"], cwd=clone).stdout.strip()
        self.records.bootstrap["clone"] = {"url": issued.clone_url, "base": branch, "head": head}
        if self.task.is_round and head != self.task.head_sha:
            raise StageFailed(
                f"the pull request's head moved to {head[:12]} since the round was asked for "
                f"on {str(self.task.head_sha)[:12]}: a person's push takes the branch over",
                FINAL,
            )
        return {"base": branch, "head": head}

    def _merge_base(self, clone: Path) -> dict[str, Any]:
        """A conflict round merges its pull request's base into the branch (a merge, never a
        rebase: the branch's history only grows) and leaves the conflicts in the files, both
        sides between markers, for the model; publication commits the merge with both parents."""
        trigger = dict(self.task.trigger or {})
        # The base the plan approved (its default branch when it names none), never the one a
        # delivery names: only the approved base is ever merged into Steward's branch.
        base = self.task.base or ""
        if not base:  # the repository's default branch, as the clone names it
            base = run_git(["rev-parse", "--abbrev-ref", "origin/HEAD"], cwd=clone).stdout.strip()
            base = base.removeprefix("origin/")
        sha = run_git(
            ["rev-parse", "--verify", f"refs/remotes/origin/{base}^{{commit}}"], cwd=clone
        ).stdout.strip()
        identity = {"GIT_AUTHOR_NAME": "steward", "GIT_AUTHOR_EMAIL": "steward@invalid"}
        identity |= {"GIT_COMMITTER_NAME": "steward", "GIT_COMMITTER_EMAIL": "steward@invalid"}
        merged = run_git(
            ["merge", "--no-ff", "--no-commit", "--no-edit", sha], cwd=clone, check=False, env=identity
        )
        listed = run_git(["diff", "--name-only", "--diff-filter=U", "-z"], cwd=clone).stdout
        self.conflicts = sorted(p for p in listed.split("\0") if p)
        if merged.returncode not in (0, 1) or (merged.returncode == 1 and not self.conflicts):
            raise GitError(f"merging {base} into the branch failed (exit {merged.returncode})")
        self.merge_parent = sha
        trigger |= {"base_ref": base, "conflicts": self.conflicts[:MAX_LISTED_CONFLICTS]}
        self.task = self.task.model_copy(update={"trigger": trigger})  # the round's prompt names them
        return {"base": base, "base_sha": sha, "conflicts": len(self.conflicts)}

    def _conflicts_resolved(self, clone: Path) -> None:
        """Steward, not the model, decides that the merge's conflicts are resolved: no file
        it left in conflict still holds a conflict marker line."""
        left = [path for path in self.conflicts if has_conflict_markers(clone / path, clone)]
        if left:
            shown = ", ".join(self.redactor.redact(p) for p in left[:5])
            raise StageFailed(
                f"conflict markers remain in {shown}: the merge with the base is not resolved", FINAL
            )

    def _stage(self, name: str, action: Callable[[], Any], *, retryable: bool) -> Any:
        started = time.monotonic()
        entry: dict[str, Any] = {"stage": name, "status": "running"}
        self.records.bootstrap["stages"].append(entry)
        try:
            result = action()
        except (Cancelled, BudgetExhausted):
            entry |= {"status": "cancelled", "duration_s": round(time.monotonic() - started, 3)}
            raise
        except StageFailed as exc:  # a rule of the stage refused (the round's head moved)
            entry |= {"status": "failed", "duration_s": round(time.monotonic() - started, 3)}
            entry["error"] = self.redactor.bounded(exc.reason, _REASON_CHARS)
            raise
        except (RuntimeApiError, GitError, CommandRefused, OSError) as exc:
            entry |= {"status": "failed", "duration_s": round(time.monotonic() - started, 3)}
            entry["error"] = self.redactor.bounded(str(exc), _REASON_CHARS)
            transient = retryable and not (isinstance(exc, RuntimeApiError) and not exc.retryable)
            raise StageFailed(
                f"bootstrap stage {name} failed: {entry['error']}", RETRYABLE if transient else FINAL
            ) from None
        entry |= {"status": "ok", "duration_s": round(time.monotonic() - started, 3)}
        return result

    def _last_stage(self) -> dict[str, Any]:
        stages: list[dict[str, Any]] = self.records.bootstrap["stages"]
        return stages[-1]

    def _sandbox(self) -> Sandbox:
        if self.sandbox is None:
            raise RuntimeError("the sandbox is made at bootstrap")
        return self.sandbox

    # ---- checks and publication
    def _final_checks(self, harness: Harness) -> None:
        """Every required check once more on the final tree: publication needs all to pass."""
        self.emit("phase", {"phase": "checks"})
        failed = []
        for command in self.task.checks:
            self.screen.note(command)
            result = self._sandbox().run(command, on_output=self.screen.write, cancel=self.cancel)
            if self.cancel.is_set():
                raise Cancelled("cancelled during the checks")
            harness.check_record(result, stage="final")
            if not result.passed:
                failed.append(command)
        if failed:
            raise StageFailed(f"required checks failed on the final tree: {', '.join(failed)}", FINAL)

    def _publish(self, clone: Path, outcome: Outcome) -> tuple[str, int]:
        self.emit("phase", {"phase": "publish"})
        issued = self._issued or self._token()

        def installation_token() -> InstallationToken:
            return self._token().token

        with InstallationClient(installation_token, base_url=issued.api_url) as github:
            publisher = Publisher(github, self._status_now, self.artifacts, clock=self.clock)
            finals = [c for c in outcome.checks if c["stage"] == "final"] or outcome.checks
            result = publisher.publish(
                self.task,
                clone,
                installation_id=issued.installation_id,
                summary=outcome.summary,
                checks=[
                    {"command": c["command"], "exit_code": c["exit_code"], "duration_s": c["duration_s"]}
                    for c in finals
                ],
                cost_usd=self._cost(),
                token_provider=lambda: self._token().token.token,
                on_stage=lambda name, entry: self.emit("publish", {"stage": name, "status": entry["status"]}),
                redactor=self.redactor,
                merge_parent=self.merge_parent,
                related=self.related,
            )
        return result.pr_url, result.pr_number

    def _cost(self) -> Decimal:
        return self.api.heartbeat(self.capability, self.runtime_id).cost_usd

    def _status_now(self, task_id: str) -> TaskStatus:
        """The task's status as the control plane answers a heartbeat (publication's re-checks)."""
        return self.api.heartbeat(self.capability, self.runtime_id).status

    # ---- endings
    def _fail(
        self,
        clone: Path,
        reason: str,
        classification: str,
        *,
        preserve: bool = True,
        fault: Fault | None = None,
    ) -> str:
        reason = self.redactor.bounded(reason, _REASON_CHARS)
        self._write_artifacts(clone, preserve=preserve)
        return self._finish(
            TaskStatus.FAILED,
            {"outcome": "failed", "classification": classification, "reason": reason},
            classification=classification,
            reason=reason,
            extra=None if fault is None else {"fault": fault.value},
        )

    def _finish(
        self,
        status: TaskStatus,
        data: dict[str, Any],
        *,
        classification: str | None = None,
        reason: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """Record the ending through the control plane, which writes it only while the task is
        this runtime's running task (a review also once the pull request's webhook moved it
        there); the task's status as it was left."""
        fields = {**data, "classification": classification, "reason": reason, **(extra or {})}
        ending = {k: v for k, v in fields.items() if k in _ENDING_KEYS and v is not None}
        ending |= self._artifact_failures()
        try:
            return self.api.finish(
                self.capability, self.runtime_id, {"status": status.value, **self._clean(ending)}
            )
        except RuntimeApiError as exc:  # the task stays running; the reaper fails it after the grace
            _LOG.warning("the ending was not recorded: %s", exc)
            return "unrecorded"

    # ---- artifacts
    def _write_artifacts(self, clone: Path, *, preserve: bool) -> None:
        """bootstrap.json, harness.json and the screen tail; with `preserve`, also the work
        as diff.patch and git-status.txt (a failed run's change stays reviewable)."""
        self._artifact(
            "bootstrap.json", json.dumps(self.records.bootstrap, indent=2) + "\n", "application/json"
        )
        self._artifact("harness.json", json.dumps(self.records.harness, indent=2) + "\n", "application/json")
        self._artifact(SCREEN_NAME, self.screen.tail(), "text/plain; charset=utf-8")
        if preserve and (clone / ".git").is_dir():
            try:
                work = snapshot_work(clone)  # the tree is untrusted: nothing in it runs
            except GitError as exc:
                self.records.bootstrap.setdefault("artifact_errors", []).append(str(exc)[:_REASON_CHARS])
                return
            self._artifact("diff.patch", work.diff, "text/plain; charset=utf-8")
            self._artifact("git-status.txt", work.status, "text/plain; charset=utf-8")

    def _artifact(self, name: str, text: str, content_type: str) -> None:
        try:
            body = self.redactor.redact(text).encode()
        except RedactionError:
            self._failed_artifacts.append(name)  # fail closed: nothing written
            return
        if self.artifacts is None:
            return
        try:
            self.artifacts.put(self.task.id, name, body, content_type)
        except Exception:  # the task's ending matters more than one upload
            _LOG.exception("artifact upload failed", extra={"artifact": name})
            self._failed_artifacts.append(name)

    def _artifact_failures(self) -> dict[str, Any]:
        failed = self._failed_artifacts
        return {"artifacts_not_written": sorted(set(failed))} if failed else {}

    # ---- events and liveness
    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """A durable progress event (redacted). Losing one is not worth ending the run for."""
        try:
            with self._events_lock:
                self.api.event(self.capability, self.runtime_id, kind, self._clean(data))
        except RuntimeApiError as exc:  # 409: the task is no longer this runtime's to record on
            _LOG.warning("event %s not recorded: %s", kind, exc)
        except Exception:
            _LOG.exception("event append failed", extra={"event": kind})

    def _clean(self, data: dict[str, Any]) -> dict[str, Any]:
        cleaned: dict[str, Any] = self.redactor.clean(data)
        return cleaned

    def redactor_secrets(self) -> list[str]:
        return [self.capability, self.config.ticket]

    def stop(self) -> None:
        """Stop now (a signal): the running command is killed and the stages unwind."""
        self.cancel.set()
        if self.sandbox is not None:
            self.sandbox.kill()

    def _heartbeat(self) -> None:
        while not self.cancel.wait(self.config.heartbeat_seconds):
            try:
                beat = self.api.heartbeat(self.capability, self.runtime_id)
            except Exception as exc:  # a missed beat is survivable; the grace covers several
                _LOG.warning("heartbeat failed: %s", exc)
                continue
            if not beat.running:
                self.stop()
                return


def has_conflict_markers(path: Path, root: Path | None = None) -> bool:
    """Whether a regular file of the tree `root` holds a line git writes around a conflict;
    a file deleted, or replaced by a link (never followed: the tree is untrusted, a link in
    its directories neither), or by anything but a regular file (never waited on) holds none."""
    if root is not None:
        top, folder = Path(os.path.realpath(root)), Path(os.path.realpath(path.parent))
        if folder != top and top not in folder.parents:
            return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return False
        return _MARKER.search(handle.read()) is not None
