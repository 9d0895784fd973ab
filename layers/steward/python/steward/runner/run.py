"""One runtime from claim to finish (docs/concepts/runner.md): the stages and their records.

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
from steward.domain.failures import FailureCode
from steward.domain.models import Classification, Fault, Task, TaskStatus, utcnow
from steward.domain.phases import EndReason
from steward.domain.redaction import RedactionError, Redactor
from steward.runner.config import RunnerConfig
from steward.runner.harness import Cancelled, Harness, Outcome, RelayRefused
from steward.runner.sandbox import (
    WEAK_MODES,
    CommandRefused,
    CommandResult,
    Sandbox,
    SandboxMode,
    kernel_confinement,
    probe_mode,
)
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
    "code",
)
# A publication refused by a rule (`PublishError.reason`) -> the failure code it ends with.
PUBLISH_CODES = {
    "no_changes": FailureCode.MODEL_MADE_NO_CHANGE,
    "nested_repository": FailureCode.NESTED_REPOSITORY,
    "git_dir": FailureCode.NESTED_REPOSITORY,
    "credential": FailureCode.CREDENTIAL_IN_CHANGE,
    "too_large": FailureCode.CHANGE_TOO_LARGE,
    "branch": FailureCode.BRANCH_TAKEN_OVER,
    "foreign_commits": FailureCode.BRANCH_TAKEN_OVER,
    "merge_state": FailureCode.CONFLICT_UNRESOLVED,
}


class StageFailed(Exception):
    """A stage ended the run: `classification`, a reason safe to show (redacted) and the
    failure code (`steward.domain.failures`)."""

    def __init__(self, reason: str, classification: str, code: FailureCode) -> None:
        super().__init__(reason)
        self.reason = reason
        self.classification = classification
        self.code = code


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
        self.phase = "bootstrap"  # the stage running, for a failure no stage names
        # The required checks that failed on the untouched clone (a round goes on with them).
        self.failing_at_start: list[str] = []

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
            self.phase = "tool_loop"
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
                failing_at_start=self.failing_at_start,
            )
            outcome = harness.run()
            if not outcome.completed:
                raise self._unfinished(clone, outcome)
            self._conflicts_resolved(clone)
            self.phase = "checks"
            self._final_checks(harness, clone)
            self.phase = "publish"
            pull = self._publish(clone, outcome)
        except Cancelled:
            self._write_artifacts(clone, preserve=True)
            return "cancelled"
        except BudgetExhausted as exc:
            if exc.code == CALL_EXCEEDS_BUDGET:  # what is left pays for no useful call: the figures
                return self._fail(
                    clone,
                    f"the task's budget cannot pay for its next model call: {exc.detail}",
                    FINAL,
                    FailureCode.BUDGET_SPENT,
                )
            return self._fail(
                clone, "the task's budget is spent (relay 402)", FINAL, FailureCode.BUDGET_SPENT
            )
        except RelayRefused as exc:
            reason = (
                "Steward's fault, not the model's or the plan's: the relay refused the runner's own "
                f"model request (the request is in harness.json): {exc.error}"
            )
            return self._fail(clone, reason, RETRYABLE, FailureCode.RELAY_REFUSED, fault=Fault.RELAY_REFUSED)
        except StageFailed as exc:
            return self._fail(clone, exc.reason, exc.classification, exc.code)
        except RuntimeApiError as exc:
            if exc.code == MODEL_CANNOT_ANSWER:  # says why and what to do; no attempt would differ
                return self._fail(
                    clone,
                    f"the model cannot do this task: {exc.detail}",
                    FINAL,
                    FailureCode.MODEL_CANNOT_ANSWER,
                )
            code = self._api_failure_code(exc)
            return self._fail(clone, str(exc), RETRYABLE if exc.retryable else FINAL, code)
        except (GitError, GitHubError) as exc:
            code = FailureCode.CLONE_FAILED if self.phase == "bootstrap" else FailureCode.PUBLISH_FAILED
            return self._fail(clone, f"{type(exc).__name__}: {exc}", RETRYABLE, code)
        except PublishError as exc:
            if exc.reason in ("cancelled", "ended"):  # the task ended elsewhere: nothing to record
                self._write_artifacts(clone, preserve=False)
                return "cancelled"
            code = PUBLISH_CODES.get(exc.reason, FailureCode.PUBLISH_FAILED)
            return self._fail(clone, f"publication refused: {exc.message}", FINAL, code, preserve=False)
        except Exception as exc:  # a runner bug: fail the task retryably rather than hang it
            _LOG.exception("runner error")
            return self._fail(
                clone, f"runner error ({type(exc).__name__})", RETRYABLE, FailureCode.RUNNER_ERROR
            )
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

    def _api_failure_code(self, exc: RuntimeApiError) -> FailureCode:
        """The code of a control-plane or relay call that failed outside every stage's own rule:
        in the tool loop a retryable one is the provider's (the relay's 5xx and 502)."""
        if not exc.retryable:
            return FailureCode.CANNOT_START
        if self.phase == "tool_loop":
            return FailureCode.PROVIDER_UNAVAILABLE
        return FailureCode.PUBLISH_FAILED if self.phase == "publish" else FailureCode.RUNNER_ERROR

    # ---- bootstrap
    def _bootstrap(self, clone: Path) -> None:
        self.emit("phase", {"phase": "bootstrap"})
        issued = self._stage("token", self._token, retryable=True, code=FailureCode.CLONE_FAILED)
        self._stage(
            "clone",
            lambda: self._clone(issued, clone),
            retryable=True,
            code=FailureCode.CLONE_FAILED,
        )
        if (self.task.trigger or {}).get("kind") == "conflict":
            self._stage(
                "merge_base", lambda: self._merge_base(clone), retryable=True, code=FailureCode.CLONE_FAILED
            )
        # Outside bwrap the uid reaches the clone through the host's directories, and mkdtemp made
        # the run's own 0700: searchable (not listable) by others, or no check (nor the probe) could start.
        clone.parent.chmod(0o711)
        mode, _ = self._stage(
            "sandbox",
            lambda: self._probe_sandbox(clone.parent),
            retryable=True,
            code=FailureCode.RUNNER_ERROR,
        )
        self.sandbox = Sandbox(
            clone, self.task.checks, mode=mode, uid=self.config.uid, limits=self.config.sandbox
        )
        self._setup(clone, mode)
        if self.task.baseline:
            self._baseline(clone)

    def _probe_sandbox(self, within: Path) -> tuple[SandboxMode, str]:
        """The mode checks run in (docs/concepts/runner.md), recorded in bootstrap.json's `sandbox`
        with what the kernel offers; a mode weaker than CONFINED, where a check could reach the
        network, ends the run `sandbox_too_weak` unless the deployment allows it. A forced mode
        (`STEWARD_RUNNER_SANDBOX_MODE`) that does not work here ends it the same way. `within`: the
        run's directory, where the probe makes its own clone."""
        forced = self.config.sandbox_mode
        record: dict[str, Any] = {
            "uid": self.config.uid,
            "forced": forced.value if forced is not None else None,
            "weak_allowed": self.config.allow_weak_sandbox,
            **kernel_confinement(),
        }
        self.records.bootstrap["sandbox"] = record
        try:
            mode, why = probe_mode(uid=self.config.uid, forced=forced, within=within)
        except ValueError as exc:
            record["reason"] = str(exc)
            raise StageFailed(str(exc), FINAL, FailureCode.SANDBOX_TOO_WEAK) from None
        record.update({"mode": mode.value, "reason": why})
        if mode in WEAK_MODES and not self.config.allow_weak_sandbox:
            raise StageFailed(
                f"checks would run in the weak sandbox mode {mode.value} ({why}); the runner refuses it "
                "unless STEWARD_RUNNER_ALLOW_WEAK_SANDBOX=1",
                FINAL,
                FailureCode.SANDBOX_TOO_WEAK,
            )
        return mode, why

    def _setup(self, clone: Path, mode: SandboxMode, *, label: str = "setup") -> None:
        """The plan's setup commands in `clone` (with the network, under their own timeout);
        a failure ends the run `setup_failed`."""
        if not self.task.setup:
            return
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
                f"{label} {number}",
                lambda c=command: setup.run(c, on_output=self.screen.write, cancel=self.cancel),  # type: ignore[misc]
                retryable=False,
                code=FailureCode.SETUP_FAILED,
            )
            self._last_stage()["exit_code"] = result.exit_code
            if self.cancel.is_set():
                raise Cancelled("cancelled during setup")
            if not result.passed:
                self._last_stage().update(self._setup_failure(result))
                raise StageFailed(
                    f"setup command `{command}` failed (exit {result.exit_code})",
                    FINAL,
                    FailureCode.SETUP_FAILED,
                )

    def _baseline(self, clone: Path) -> None:
        """The required checks on the untouched clone, before the first model call (docs/concepts/runner.md): each one's result in bootstrap.json's `baseline`. One that fails ends the
        task `checks_fail_on_base` (no model call is made); a follow-up round's clone is its
        pull request's head, where a failing check is often what the round is asked to fix, so
        the round goes on and the model is told which checks fail."""
        self.emit("phase", {"phase": "baseline"})
        before = _untracked(clone)
        try:
            results = self._run_checks(self._sandbox(), stage="baseline", records=self.records.bootstrap)
        finally:
            # What the checks left (caches, bytecode a same-second, same-size edit would not
            # invalidate) goes: the model starts from the clone as setup left it.
            for path in sorted(_untracked(clone) - before):
                target = clone / path
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)
        failed = [result for result in results if not result.passed]
        self.failing_at_start = [result.command for result in failed]
        if failed and not self.task.is_round:
            shown = "; ".join(f"`{r.command}` ({_ended(r)})" for r in failed[:3])
            raise StageFailed(
                f"required checks fail on the base, before any change: {shown}; the output is in "
                "bootstrap.json",
                FINAL,
                FailureCode.CHECKS_FAIL_ON_BASE,
            )

    def _run_checks(
        self, sandbox: Sandbox, *, stage: str, records: dict[str, Any], commands: Sequence[str] | None = None
    ) -> list[CommandResult]:
        """Run `commands` (the required checks) once each in `sandbox`, recording each under
        `records[stage]` (exit, passed, the redacted tail of its output) and as a `check` event."""
        entries: list[dict[str, Any]] = records.setdefault(stage, [])
        results = []
        for command in self.task.checks if commands is None else commands:
            self.screen.note(command)
            try:
                result = sandbox.run(command, on_output=self.screen.write, cancel=self.cancel)
            except (CommandRefused, OSError) as exc:
                raise StageFailed(
                    f"the {stage} check `{command}` could not run: {exc}", RETRYABLE, FailureCode.RUNNER_ERROR
                ) from None
            if self.cancel.is_set():
                raise Cancelled(f"cancelled during the {stage} checks")
            entry: dict[str, Any] = {
                "command": command,
                "exit_code": result.exit_code,
                "passed": result.passed,
                "duration_s": round(result.duration_s, 3),
            }
            entry |= self._how_it_ended(result)
            entries.append(entry)
            self.emit("check", {k: v for k, v in entry.items() if k != "output_tail"} | {"stage": stage})
            results.append(result)
        return results

    def _setup_failure(self, result: CommandResult) -> dict[str, Any]:
        """Why a setup command failed, for bootstrap.json: how it ended and the redacted tail
        of its output (stdout and stderr as the command interleaved them: the sandbox reads
        both from one pipe), at most SETUP_TAIL_CHARS characters."""
        return {"status": "failed", **self._how_it_ended(result)}

    def _how_it_ended(self, result: CommandResult) -> dict[str, Any]:
        """A command's `signal`, `timed_out`, `output_truncated` and `write_limit_exceeded`
        (each only when so) and its redacted `output_tail`."""
        ended = {
            "signal": result.signal,
            "timed_out": result.timed_out,
            "output_truncated": result.output_truncated,
            "write_limit_exceeded": result.write_limit_exceeded,
        }
        entry: dict[str, Any] = {key: value for key, value in ended.items() if value}
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
                FailureCode.BRANCH_TAKEN_OVER,
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
                f"conflict markers remain in {shown}: the merge with the base is not resolved",
                FINAL,
                FailureCode.CONFLICT_UNRESOLVED,
            )

    def _stage(self, name: str, action: Callable[[], Any], *, retryable: bool, code: FailureCode) -> Any:
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
                f"bootstrap stage {name} failed: {entry['error']}", RETRYABLE if transient else FINAL, code
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
    def _final_checks(self, harness: Harness, clone: Path) -> None:
        """Every required check once more on the final tree: publication needs all to pass.
        When the baseline did not run (`baseline: false`), a check that fails is run once
        more on the base commit: failing there too, the task ends `checks_fail_on_base`."""
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
            raise self._checks_failed(
                clone, failed, f"required checks failed on the final tree: {', '.join(failed)}"
            )

    def _unfinished(self, clone: Path, outcome: Outcome) -> StageFailed:
        """The ending of a tool loop that stopped short of done: checks that never passed in
        it, or a model that did not finish."""
        reason = f"the model did not finish: {outcome.end} ({outcome.detail})"
        if outcome.end == EndReason.CHECKS_FAILED:
            return self._checks_failed(clone, _still_failing(outcome.checks) or self.task.checks, reason)
        return StageFailed(reason, FINAL, FailureCode.MODEL_DID_NOT_FINISH)

    def _checks_failed(self, clone: Path, failed: Sequence[str], reason: str) -> StageFailed:
        """The ending of required checks that never passed: `checks_never_passed`, unless the
        baseline was off and they fail on the base commit too (`checks_fail_on_base`)."""
        on_base = [] if self.task.baseline else self._fail_on_base(clone, failed)
        if on_base:
            return StageFailed(
                f"required checks fail on the base too, not only after the change: "
                f"{', '.join(on_base)} (the base's output is in bootstrap.json)",
                FINAL,
                FailureCode.CHECKS_FAIL_ON_BASE,
            )
        return StageFailed(reason, FINAL, FailureCode.CHECKS_NEVER_PASSED)

    def _fail_on_base(self, clone: Path, commands: Sequence[str]) -> list[str]:
        """Which of `commands` fail on the commit the run started from, checked in a worktree
        of the clone at that commit (the plan's setup run there first), under the checks'
        sandbox; recorded in bootstrap.json's `base_checks`. Empty when it cannot be told."""
        head = (self.records.bootstrap.get("clone") or {}).get("head")
        if not head:
            return []
        self.emit("phase", {"phase": "base_checks"})
        base = clone.parent / "base"
        records: dict[str, Any] = {"stages": self.records.bootstrap["stages"]}
        try:
            run_git(["worktree", "add", "--quiet", "--detach", str(base), head], cwd=clone)
            try:
                mode = self._sandbox().mode
                self._setup(base, mode, label="base setup")
                box = Sandbox(
                    base, self.task.checks, mode=mode, uid=self.config.uid, limits=self.config.sandbox
                )
                results = self._run_checks(box, stage="base_checks", records=records, commands=commands)
            finally:
                run_git(["worktree", "remove", "--force", str(base)], cwd=clone, check=False)
                shutil.rmtree(base, ignore_errors=True)
        except (GitError, StageFailed, ValueError, OSError) as exc:
            _LOG.warning("the checks could not be run on the base: %s", exc)
            self.records.bootstrap["base_checks_error"] = self.redactor.bounded(str(exc), _REASON_CHARS)
            return []
        self.records.bootstrap["base_checks"] = records["base_checks"]
        return [result.command for result in results if not result.passed]

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
        code: FailureCode,
        *,
        preserve: bool = True,
        fault: Fault | None = None,
    ) -> str:
        reason = self.redactor.bounded(reason, _REASON_CHARS)
        self._write_artifacts(clone, preserve=preserve)
        extra: dict[str, Any] = {"code": code.value}
        if fault is not None:
            extra["fault"] = fault.value
        return self._finish(
            TaskStatus.FAILED,
            {"outcome": "failed", "classification": classification, "reason": reason},
            classification=classification,
            reason=reason,
            extra=extra,
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


def _still_failing(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The checks whose last run (of the harness's records) failed, in the order first run."""
    last: dict[str, bool] = {}
    for check in checks:
        last[str(check["command"])] = bool(check["passed"])
    return [command for command, passed in last.items() if not passed]


def _ended(result: CommandResult) -> str:
    """How a check ended, in a few words (a failure's reason)."""
    if result.timed_out:
        return "timed out"
    if result.write_limit_exceeded:
        return "wrote more than allowed"
    if result.output_truncated:
        return "output over the limit"
    if result.exit_code is None:
        return f"killed by signal {result.signal}"
    return f"exit {result.exit_code}"


def _untracked(clone: Path) -> set[str]:
    """The untracked paths of `clone`, ignored ones too, a new directory as one path."""
    listed = run_git(["ls-files", "--others", "--directory", "-z"], cwd=clone).stdout
    return {path.rstrip("/") for path in listed.split("\0") if path}


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
