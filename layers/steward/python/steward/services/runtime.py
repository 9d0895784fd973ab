"""The runtime's writes (docs/concepts/runner.md): claim, heartbeat, progress events, finish and
artifact uploads, each authorized by the runtime's capability.

The capability names the task and its owner; no request body does. A body carries the
runtime id (which the claim records on the task and every later call repeats, so a second
runtime of the same task, holding a capability of its own, reaches nothing the first one
claimed) and the call's own data. So a runtime reaches exactly its task, and a capability of
another task reaches that other task only.

Every call reads the task for its owner, status and runtime id, except the heartbeat, the
one call made every few seconds: its single conditional write checks all three (and reads
only when it fails, to say why). What each call admits:

| call | admitted while the task is | writes |
|---|---|---|
| claim | queued, or running under this runtime id | queued -> running, `started` |
| heartbeat | running under this runtime id (else answers `running: false`) | `last_seen`, `deadline` |
| events | this runtime's, running or in review/merged/closed | one progress event |
| finish | this runtime's and running (review also once a webhook moved it there) | running -> review or failed, `finished` |
| artifact upload | this runtime's, in any status | nothing: answers a presigned PUT |

Events are allowed after the pull request's webhook moved the task (the publication's last
stages are recorded then), never after a failure, a cancellation or a reaping. Uploads are
allowed in any status once the task is this runtime's: a cancelled or reaped run still
leaves its record (`harness.json`, `diff.patch`), as the task's own attempt; an upload
never writes the task. The runtime's finish is the runner's only terminal transition: to
`review` with its pull request, or `failed` with a classification; every other target is
refused at the boundary (`Ending`). A review ending's pull request is checked on GitHub
(it must exist in the task's repository with the task's branch as its head) and its link
is the server's own (`RuntimeService`): a capability holder cannot point it elsewhere. Event data, reasons and summaries are redacted here
too, whatever the runtime did.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StringConstraints

from steward.domain import order
from steward.domain.artifacts import MAX_ARTIFACT_BYTES, RUNTIME_ARTIFACTS, artifact_key
from steward.domain.capability import Capability
from steward.domain.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    LifecycleError,
    NotFound,
    TooLarge,
    Unauthorized,
)
from steward.domain.failures import FailureCode
from steward.domain.models import Classification, Fault, Task, TaskStatus, iso, utcnow

# githubkit is imported by the App only when a review ending is checked, and the stores by
# `steward.wiring` with the first call's service: the runtime routes' cold import holds
# neither (tests/unit/test_cold_imports.py).
if TYPE_CHECKING:
    from steward.adapters.artifact_store import ArtifactStore
    from steward.adapters.github import PullRef
    from steward.adapters.installation_store import InstallationStore
    from steward.adapters.plan_store import PlanStore
    from steward.adapters.task_store import TaskStore

# How long a runtime's task stays running without a heartbeat before the reaper fails it.
# The runner beats every STEWARD_RUNNER_HEARTBEAT_SECONDS (at most 60), so this covers three
# missed beats at the slowest rate.
RUNNING_GRACE = timedelta(seconds=180)
UPLOAD_SECONDS = 120  # a presigned PUT is used at once; it outlives no retry
# Progress events a runtime may append (lifecycle events are the claim's and the finish's).
PROGRESS_EVENTS = frozenset({"phase", "check", "publish", "tool"})
MAX_EVENT_DATA_BYTES = 4096  # as stored, after redaction; a check record is ~250 bytes
MAX_REASON_CHARS = 1000
MAX_SUMMARY_CHARS = 2000
AFTER_PULL_REQUEST = frozenset({TaskStatus.REVIEW, TaskStatus.MERGED, TaskStatus.CLOSED})
CLAIMABLE = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING})
RECORDS_A_PULL_REQUEST = AFTER_PULL_REQUEST | {TaskStatus.RUNNING}  # a review ending is written
MAX_PULL_NUMBER = 2**31 - 1  # GitHub's numbers are 32-bit; a larger one names no pull request

RuntimeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class RuntimeCall(BaseModel):
    """The body of claim and heartbeat: which runtime is calling."""

    model_config = ConfigDict(extra="forbid")
    runtime_id: RuntimeId


class EventCall(RuntimeCall):
    type: Annotated[str, StringConstraints(max_length=32)]
    data: dict[str, Any] = Field(default_factory=dict)


class ArtifactCall(RuntimeCall):
    size: int = Field(ge=0)


class Ending(RuntimeCall):
    """How the run ended: `review` with its pull request, or `failed` with a classification
    and a reason (the two endings `steward.runner.run` writes; nothing else is accepted)."""

    status: Literal["review", "failed"]
    classification: Classification | None = None
    reason: Annotated[str, StringConstraints(max_length=MAX_REASON_CHARS)] | None = None
    pr_url: Annotated[str, StringConstraints(max_length=2048)] | None = None
    # The link a task shows is built by the server (`RuntimeService.finish`); a `pr_url`
    # given must be that link.
    pr_number: StrictInt | None = Field(default=None, ge=1, le=MAX_PULL_NUMBER)
    summary: Annotated[str, StringConstraints(max_length=MAX_SUMMARY_CHARS)] = ""
    artifacts_not_written: list[str] = Field(default_factory=list, max_length=len(RUNTIME_ARTIFACTS))
    # A failure that is Steward's own fault (the runtime routes count it for an alarm).
    fault: Fault | None = None
    # Why a failed ending failed (`steward.domain.failures`); an older runner sends none, and
    # the task then stores none.
    code: FailureCode | None = None


class PullChecker(Protocol):
    """The part of the GitHub App a review ending is checked with
    (`steward.adapters.github.GitHubApp`)."""

    def pull_url(self, repo: str, number: int) -> str: ...

    def branch_pull(self, installation_id: int, repo: str, number: int, branch: str) -> PullRef | None: ...


class RuntimeService:
    """What the `/v1/runtime/*` routes after the ticket exchange do; each method takes the
    verified capability of the caller.

    A review ending names its pull request by number only as far as the server is
    concerned: the pull request must exist in the task's repository with the task's branch
    as its head (asked of GitHub through the owner's installation that holds the
    repository), and the link recorded is built from this deployment's GitHub, the task's
    repository and that number. Without `github` (no App configured) no review ending is
    accepted."""

    def __init__(
        self,
        tasks: TaskStore,
        artifacts: ArtifactStore,
        *,
        clock: Callable[[], datetime] = utcnow,
        grace: timedelta = RUNNING_GRACE,
        upload_seconds: int = UPLOAD_SECONDS,
        github: Callable[[], PullChecker] | None = None,  # built on first use: the App is heavy
        installations: InstallationStore | None = None,
        plans: PlanStore | None = None,
    ) -> None:
        self.tasks = tasks
        self.plans = plans
        self.artifacts = artifacts
        self.github = github
        self.installations = installations
        self.clock = clock
        self.grace = grace
        self.upload_seconds = upload_seconds
        # Imported with the service, not the routes' module: compiling its rules is a good part
        # of a cold import (tests/unit/test_cold_imports.py).
        from steward.domain.redaction import Redactor  # noqa: PLC0415

        self._redactor = Redactor()  # the shapes of every credential; the runtime redacted its own

    # ---- claim and liveness
    def claim(self, capability: Capability, call: RuntimeCall) -> dict[str, Any]:
        """{"task": the task as claimed}: queued -> running for this runtime id (a replay by
        the same runtime answers the task again); 409 once another runtime holds it."""
        task = self._task(capability)
        if task.status not in CLAIMABLE:
            raise LifecycleError(f"the task is {task.status.value}; it cannot be claimed", field="status")
        now = self.clock()
        claimed = self.tasks.claim(task, runtime_id=call.runtime_id, now=now, deadline=now + self.grace)
        return {"task": claimed.model_dump(mode="json"), "related": self._related(claimed)}

    def _related(self, task: Task) -> list[dict[str, Any]]:
        """The plan's pull requests around the task's item, for the body of the one it opens
        (`steward.domain.order.related`); none for a round, which opens none."""
        plan = None if self.plans is None or task.is_round else self.plans.get(task.user, task.plan_slug)
        item = plan.item(task.item_key) if plan is not None else None
        if plan is None or item is None:
            return []
        around = (*plan.predecessors(item), *order.dependents(plan, item))
        tasks = self.tasks.get_many([i.task_id for i in around if i.task_id])
        return order.related(plan, item, {t.id: t for t in tasks})

    def heartbeat(self, capability: Capability, call: RuntimeCall) -> dict[str, Any]:
        """{"running", "status", "cost_usd"}: `running` false once the task is no longer
        this runtime's running task (cancelled, reaped, finished): the runtime stops."""
        now = self.clock()
        renewed = self.tasks.renew(
            capability.task_id,
            runtime_id=call.runtime_id,
            user=capability.sub,
            now=now,
            deadline=now + self.grace,
        )
        task = renewed if renewed is not None else self._task(capability)
        return {"running": renewed is not None, "status": task.status.value, "cost_usd": str(task.cost_usd)}

    # ---- records
    def append_event(self, capability: Capability, call: EventCall) -> dict[str, Any]:
        """{"seq"}: one progress event of an allowed type, redacted and bounded."""
        if call.type not in PROGRESS_EVENTS:
            allowed = ", ".join(sorted(PROGRESS_EVENTS))
            raise BadRequest(f"type: a runtime appends only progress events ({allowed})", field="type")
        data = self._clean(call.data)
        if len(json.dumps(data, default=str)) > MAX_EVENT_DATA_BYTES:
            raise TooLarge(f"data: over {MAX_EVENT_DATA_BYTES} bytes as stored", field="data")
        task = self._task(capability)

        def admit(current: Task) -> None:
            self._recording(current, call.runtime_id)

        appended = self.tasks.append_event(task, call.type, data, now=self.clock(), admit=admit)
        return {"seq": appended.event_seq}

    def finish(self, capability: Capability, ending: Ending) -> dict[str, Any]:
        """{"status", "changed"}: the terminal transition of this runtime's running task, or,
        when the task is no longer that, nothing written and the status it has now. A review
        ending on a task a webhook already moved to review records the `finished` event."""
        target = TaskStatus(ending.status)
        task = self._task(capability)
        data = self._clean(self._finished_data(task, target, ending))
        now = self.clock()
        if task.runtime_id != ending.runtime_id or task.finished_by == ending.runtime_id:
            # Not this runtime's to write, or its ending is recorded already (a replay).
            return {"status": task.status.value, "changed": False}
        pull = None
        if target is TaskStatus.REVIEW and task.status in RECORDS_A_PULL_REQUEST:
            pull = self._check_pull(task, data["pr_number"])  # only for an ending that will be recorded
        finished: dict[str, Any] = {"finished_by": ending.runtime_id}
        if pull is not None and pull.head_sha:
            finished["head_sha"] = pull.head_sha  # GitHub's, when this runtime's push is the head
        if task.is_round and pull is not None:
            return self._answered(task, data, pull, finished=finished, now=now)
        if target is TaskStatus.REVIEW and task.status in AFTER_PULL_REQUEST:
            # Moved on meanwhile (a status with no more records): the ending stays unrecorded.
            with contextlib.suppress(LifecycleError):
                self.tasks.append_event(
                    task,
                    "finished",
                    data,
                    now=now,
                    admit=lambda current: self._recording(current, ending.runtime_id),
                    sets=finished,
                    wake=True,  # the head it records is what a waiting follow-up ask needs
                )
            return {"status": task.status.value, "changed": False}
        if task.status is not TaskStatus.RUNNING:
            return {"status": task.status.value, "changed": False}  # cancelled or reaped meanwhile
        extra: dict[str, Any] = dict(finished)
        if target is TaskStatus.REVIEW:
            extra |= {"pr_url": data["pr_url"], "pr_number": data["pr_number"]}
        elif ending.code is not None:
            extra["failure_code"] = ending.code.value
        try:
            done, changed = self.tasks.transition(
                task,
                target,
                now=now,
                event="finished",
                data=data,
                classification=None if ending.classification is None else ending.classification.value,
                reason=data.get("reason"),
                extra=extra,
            )
        except LifecycleError:  # moved meanwhile to where this ending cannot follow
            return {"status": self.tasks.require(task.id).status.value, "changed": False}
        self.tasks.project_item(done, now=now)
        return {"status": done.status.value, "changed": changed}

    def _answered(
        self,
        task: Task,
        data: dict[str, Any],
        pull: PullRef,
        *,
        finished: dict[str, Any],
        now: datetime,
    ) -> dict[str, Any]:
        """A follow-up round's commit is on its pull request: the task it answers for records the
        pull request's head as GitHub names it (the commit later asks are about), then the round
        ends `answered`. In that order: a round whose ending is lost is reaped, while its commit
        is already what its parent knows as Steward's head."""
        if task.status is not TaskStatus.RUNNING:
            return {"status": task.status.value, "changed": False}
        parent = self.tasks.get(task.parent or "")
        if parent is not None and pull.head_sha:
            head = pull.head_sha

            def admit(current: Task) -> None:  # a replayed ending writes nothing
                if current.status is not TaskStatus.REVIEW or current.head_sha == head:
                    raise LifecycleError("the task left review, or knows this head already", field="status")

            with contextlib.suppress(LifecycleError):
                self.tasks.append_event(
                    parent,
                    "follow_up_answered",
                    {"task_id": task.id, "round": task.round, "head_sha": head},
                    now=now,
                    admit=admit,
                    sets={"head_sha": head},
                    wake=True,
                )
        try:
            done, changed = self.tasks.transition(
                task,
                TaskStatus.ANSWERED,
                now=now,
                event="finished",
                data=data,
                extra=finished | {"pr_url": data["pr_url"], "pr_number": data["pr_number"]},
            )
        except LifecycleError:
            return {"status": self.tasks.require(task.id).status.value, "changed": False}
        return {"status": done.status.value, "changed": changed}

    def artifact_upload(self, capability: Capability, name: str, call: ArtifactCall) -> dict[str, Any]:
        """{"url", "method", "headers", "key", "expires_at"}: a presigned PUT of exactly
        `size` bytes to `artifacts/{the capability's task}/{name}`, for a fixed name only."""
        content_type = RUNTIME_ARTIFACTS.get(name)
        if content_type is None:
            names = ", ".join(RUNTIME_ARTIFACTS)
            raise NotFound(f"no artifact {name[:64]!r}; a runtime uploads {names}", field="name")
        if call.size > MAX_ARTIFACT_BYTES:
            raise TooLarge(f"size: an artifact holds at most {MAX_ARTIFACT_BYTES} bytes", field="size")
        task = self._task(capability)
        if task.runtime_id != call.runtime_id:
            raise LifecycleError("the task is not this runtime's", field="runtime_id")
        now = self.clock()
        url = self.artifacts.presigned_put(
            task.id,
            name,
            content_type=content_type,
            content_length=call.size,
            expires_seconds=self.upload_seconds,
        )
        return {
            "url": url,
            "method": "PUT",
            "headers": {"Content-Type": content_type, "Content-Length": str(call.size)},
            "key": artifact_key(task.id, name),
            "expires_at": iso(now + timedelta(seconds=self.upload_seconds)),
        }

    # ---- helpers
    def _github(self) -> PullChecker:
        if self.github is None:
            raise Conflict("no GitHub App is configured: a pull request cannot be checked", field="pr_number")
        return self.github()

    def _check_pull(self, task: Task, number: int) -> PullRef:
        """Pull request `number` exists in the task's repository with the task's branch as
        its head, as GitHub says through the owner's installation holding the repository;
        what GitHub says of it."""
        holders = sorted(
            i.installation_id
            for i in (self.installations.for_owner(task.user) if self.installations is not None else ())
            if i.holds(task.repo)
        )
        if not holders:
            raise Conflict(
                f"no live installation of the task's owner holds {task.repo}: its pull request cannot be checked",
                field="pr_number",
            )
        pull = self._github().branch_pull(holders[0], task.repo, number, task.branch)
        if pull is None:
            raise BadRequest(
                f"pr_number: {task.repo} has no pull request {number} from the task's branch {task.branch}",
                field="pr_number",
            )
        return pull

    def _task(self, capability: Capability) -> Task:
        task = self.tasks.get(capability.task_id)
        if task is None:
            raise Unauthorized("the capability's task no longer exists")
        if task.user != capability.sub:
            raise Forbidden("the capability's task belongs to another user")
        return task

    def admit_output(self, capability: Capability) -> None:
        """Refuse live command output (the local stack's stream hub, which knows no runtime
        id) as an event is refused: its task must be the capability's owner's and still
        recording, never after a failure, a cancellation or a reaping."""
        self._still_recording(self._task(capability))

    @staticmethod
    def _recording(task: Task, runtime_id: str) -> None:
        """Refuse a record (an event) once the task is not this runtime's to record on."""
        if task.runtime_id != runtime_id:
            raise LifecycleError("the task is not this runtime's", field="runtime_id")
        RuntimeService._still_recording(task)

    @staticmethod
    def _still_recording(task: Task) -> None:
        if task.status is not TaskStatus.RUNNING and task.status not in AFTER_PULL_REQUEST:
            raise LifecycleError(
                f"the task is {task.status.value}; its runtime records nothing more", field="status"
            )

    def _finished_data(self, task: Task, target: TaskStatus, ending: Ending) -> dict[str, Any]:
        unknown = sorted(set(ending.artifacts_not_written) - set(RUNTIME_ARTIFACTS))
        if unknown:
            raise BadRequest(
                f"artifacts_not_written: no artifact {unknown[0][:64]!r}", field="artifacts_not_written"
            )
        data: dict[str, Any] = {"runtime_id": ending.runtime_id}
        if target is TaskStatus.REVIEW:
            if ending.classification is not None or ending.reason is not None:
                raise BadRequest("classification: a review ending has none", field="classification")
            if ending.pr_number is None:
                raise BadRequest("pr_number: a review ending names its pull request", field="pr_number")
            named = next((key for key in ("fault", "code") if getattr(ending, key) is not None), None)
            if named is not None:
                raise BadRequest(f"{named}: a review ending has none", field=named)
            link = self._github().pull_url(task.repo, ending.pr_number)
            if ending.pr_url is not None and ending.pr_url.lower() != link.lower():
                raise BadRequest(
                    f"pr_url: not the link of pull request {ending.pr_number}: {link}", field="pr_url"
                )
            data |= {
                "outcome": "published",
                "pr_url": link,
                "pr_number": ending.pr_number,
                "summary": ending.summary,
            }
        else:
            if ending.classification is None:
                raise BadRequest(
                    "classification: a failed ending is final or retryable", field="classification"
                )
            if not ending.reason:
                raise BadRequest("reason: a failed ending says why", field="reason")
            if ending.pr_url is not None or ending.pr_number is not None:
                raise BadRequest("pr_url: a failed ending has no pull request", field="pr_url")
            data |= {
                "outcome": "failed",
                "classification": ending.classification.value,
                "reason": ending.reason,
            }
            why = {"fault": ending.fault, "code": ending.code}
            data |= {key: value.value for key, value in why.items() if value is not None}
        if ending.artifacts_not_written:
            data["artifacts_not_written"] = sorted(set(ending.artifacts_not_written))
        return data

    def _clean(self, data: dict[str, Any]) -> dict[str, Any]:
        cleaned: dict[str, Any] = self._redactor.clean(data)
        return cleaned
