"""State of plans, items and tasks as the stores hold it and the API shows it.

Pure data: no storage or HTTP types here. Adapters convert to and from DynamoDB items.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from steward.domain.document_limits import DEFAULT_FOLLOW_UPS
from steward.domain.failures import failure_of


def utcnow() -> datetime:
    """Now, at the millisecond precision timestamps are stored with."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class PlanStatus(StrEnum):
    DRAFT = "draft"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    CONFIRMED = "confirmed"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    ARCHIVED = "archived"


class ItemStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    REVIEW = "review"
    MERGED = "merged"
    CLOSED = "closed"
    FAILED = "failed"
    DONE = "done"
    REMOVED = "removed"


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    REVIEW = "review"
    MERGED = "merged"
    CLOSED = "closed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # A follow-up round whose commit is on its pull request (docs/concepts/follow-ups.md); the
    # task it answered for stays in review.
    ANSWERED = "answered"


class PlanKind(StrEnum):
    """What a plan (and each task spawned from it) is for. `work` is everything a person
    publishes; `fixture` is a plan made by `steward local capability` to exercise the relay
    from outside (`steward.local.fixtures`). Only that code path sets it: no Task Document
    key, slug or request field can, and a stored plan or task without the attribute is work.
    The loop never spawns, launches, retries or counts a fixture's task, the plan list hides
    fixture plans, and the reaper ends a fixture task at its deadline (its lifetime)."""

    WORK = "work"
    FIXTURE = "fixture"


class Classification(StrEnum):
    RETRYABLE = "retryable"
    FINAL = "final"


class Fault(StrEnum):
    """A failed run that is Steward's own fault, not the model's or the person's: the runtime
    names it in its ending, and the runtime routes count it (an alarm's metric)."""

    RELAY_REFUSED = "relay_refused"  # the relay answered 400 to the runner's own request


TERMINAL_PLAN_STATUSES = frozenset({PlanStatus.COMPLETED, PlanStatus.ARCHIVED})
TERMINAL_TASK_STATUSES = frozenset(
    {TaskStatus.MERGED, TaskStatus.CLOSED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.ANSWERED}
)


class PlanItem(BaseModel):
    """One top-level checkbox. `key` is stable across moves; `revision` grows when its text
    changes after work started, so the new text is new work and the old task stays history.

    `supersedes` is the task of the revision this one replaced, kept until this revision's
    first task spawns: confirming the new revision cancels that task while it is queued or
    running, and the loop's spawn of the new revision stops its runtime first (docs/concepts/lifecycle.md). `removed_at` orders the removed items kept as history (the oldest go first
    when the history is full, `steward.domain.plans`)."""

    model_config = ConfigDict(frozen=True)

    key: str
    ordinal: int
    title: str
    details: str = ""
    text_hash: str
    checked: bool = False
    revision: int = 1
    status: ItemStatus = ItemStatus.PENDING
    task_id: str | None = None
    removed: bool = False
    attempt: int = 0  # attempt number of `task_id`
    last_classification: str | None = None  # of `task_id`, once it failed
    retry_requested: bool = False  # a person asked for another attempt (POST .../retry)
    supersedes: str | None = None  # task id of the replaced revision, until this one spawns
    removed_at: datetime | None = None  # when its checkbox was deleted (history order)
    # Order and place (docs/concepts/task-document.md): the keys of the items its `(after #n)`
    # names, resolved from the document at each publish, and the repository its details name
    # (None: the plan's).
    after: tuple[str, ...] = ()
    repo: str | None = None

    @property
    def shown_status(self) -> ItemStatus:
        # A deleted checkbox keeps its task link and status underneath, so restoring the same
        # text restores the item as it was.
        return ItemStatus.REMOVED if self.removed else self.status


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    user: str
    slug: str
    status: PlanStatus
    repo: str
    title: str | None
    front_matter: dict[str, Any]
    content_hash: str
    approved_hash: str | None = None
    items: tuple[PlanItem, ...]
    created_at: datetime
    updated_at: datetime
    version: int = 1
    confirmations: int = 0
    # The highest revision of an item that left the stored plan (history dropped): a new item
    # starts above it, so an item whose text comes back never reuses a task id.
    retired_revision: int = 0
    kind: PlanKind = PlanKind.WORK
    # Its last content hashes, the current one last (`steward.domain.plans:remember_hash`).
    content_hashes: tuple[str, ...] = ()

    def item(self, key: str) -> PlanItem | None:
        return next((i for i in self.items if i.key == key), None)

    @property
    def active_items(self) -> tuple[PlanItem, ...]:
        return tuple(sorted((i for i in self.items if not i.removed), key=lambda i: i.ordinal))

    @property
    def max_attempts(self) -> int:
        return int(self.front_matter.get("max_attempts", 3))

    @property
    def sequential(self) -> bool:
        return self.front_matter.get("order") == "sequential"

    def predecessors(self, item: PlanItem) -> tuple[PlanItem, ...]:
        """The items `item` waits for: those its `(after #n)` names and, with `order:
        sequential`, the one above it (a removed item waits for nothing)."""
        if item.removed:
            return ()
        active = self.active_items
        named = [i for i in active if i.key in item.after]
        above = [i for i in active if i.ordinal == item.ordinal - 1] if self.sequential else []
        return tuple(sorted({i.key: i for i in (*named, *above)}.values(), key=lambda i: i.ordinal))

    def item_repo(self, item: PlanItem) -> str:
        return item.repo or self.repo

    def to_api(self, *, details: bool = True) -> dict[str, Any]:
        """The plan as the API shows it: what confirming it approves (the front matter's keys,
        each item's details unless `details` is False) besides its state."""
        fm = self.front_matter
        return {
            "id": self.id,
            "slug": self.slug,
            "status": self.status.value,
            "repo": self.repo,
            "title": self.title,
            "content_hash": self.content_hash,
            "approved_hash": self.approved_hash,
            "kind": self.kind.value,
            "front_matter": fm,
            "base": fm.get("base"),
            "model": fm.get("model"),
            "budget_usd": fm.get("budget_usd"),
            "checks": list(fm.get("checks") or ()),
            "setup": list(fm.get("setup") or ()),
            "max_attempts": fm.get("max_attempts", 3),
            "follow_ups": fm.get("follow_ups", DEFAULT_FOLLOW_UPS),
            "items": [
                {
                    "ordinal": None if i.removed else i.ordinal,
                    "key": i.key,
                    "title": i.title,
                    "status": i.shown_status.value,
                    "task_id": i.task_id,
                    "revision": i.revision,
                    "checked": i.checked,
                    "repo": self.item_repo(i),
                    "after": [p.ordinal for p in self.predecessors(i)],
                    **({"details": i.details} if details else {}),
                }
                for i in (*self.active_items, *(i for i in self.items if i.removed))
            ],
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


class Task(BaseModel):
    """One attempt at one revision of one item. Created only by the spawn store operation."""

    model_config = ConfigDict(frozen=True)

    id: str
    user: str
    plan_id: str
    plan_slug: str
    item_key: str
    ordinal: int
    revision: int
    attempt: int
    status: TaskStatus = TaskStatus.QUEUED
    classification: Classification | None = None
    reason: str | None = None
    branch: str
    repo: str
    base: str | None = None
    model: str
    budget_usd: Decimal
    title: str
    # What the approved plan said when the task was spawned: the runner works from this
    # snapshot, so a later republish cannot change a running task's commands.
    details: str = ""
    checks: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    pr_url: str | None = None
    pr_number: int | None = None
    # The commit the pull request's head was when the task reached review, as GitHub said it
    # (never as the runner said it): a later head that is not this one is a person's push.
    head_sha: str | None = None
    cost_usd: Decimal = Decimal("0")
    # What providers reported beyond the reservations that admitted their calls: recorded by
    # the relay's settlement, never charged (see steward.domain.budget.charge_for).
    over_reported_usd: Decimal = Decimal("0")
    created_at: datetime
    updated_at: datetime
    last_seen: datetime | None = None
    # When the reaper may fail the task: launch grace while queued, last_seen + grace while
    # running; absent once terminal.
    deadline: datetime | None = None
    event_seq: int = 0  # seq of the task's last durable event (gapless)
    runtime_id: str | None = None
    finished_by: str | None = None  # the runtime id whose ending is recorded (a replay writes nothing)
    launched_at: datetime | None = None
    launch_ref: str | None = None
    max_attempts: int = 3
    # The loop's last look at the task's pull request on GitHub (resync) and the ETag of
    # that answer, sent back as If-None-Match so an unchanged pull request costs nothing.
    github_observed_at: datetime | None = None
    github_etag: str | None = None
    kind: PlanKind = PlanKind.WORK  # its plan's, copied at spawn (`steward.domain.tasks:task_for`)
    # A withdrawn task (a person's cancel in review) whose pull request the loop has yet to
    # comment on and close (`steward.services.withdrawal`), and who withdrew it. While set,
    # the task stays in the `live_by_user` index, so the loop keeps looking.
    pr_close_pending: bool = False
    withdrawn_by: str | None = None
    # The follow-up rounds asked for on its pull request (`steward.domain.follow_ups`: one
    # key per pull request, head commit and trigger kind), each recorded once with its event.
    follow_up_keys: tuple[str, ...] = ()
    # The GitHub objects (`review:<id>`, `comment:<id>`, `check_run:<id>`, ...) recorded as
    # asks or refusals, whichever path saw them first (a delivery, or resync after a lost one).
    ask_sources: tuple[str, ...] = ()
    # Resync's reading of the pull request's conversation: the newest review or comment time
    # read (`asks_read_at`, GitHub's ISO form) and the ETags of the head's checks and statuses.
    asks_read_at: str | None = None
    github_etags: dict[str, str] = Field(default_factory=dict)
    # Of those, the ones no round has answered or refused yet (their records, oldest first),
    # and how many rounds the task has started: what the loop's next round reads.
    pending_asks: tuple[dict[str, Any], ...] = ()
    rounds_used: int = 0
    # Of those, the rounds whose ending the task has taken account of (answered: its head;
    # failed: a retry or a reply): the loop settles the next once no round of it is live.
    rounds_settled: int = 0
    # The rounds its approval allows (the plan's `follow_ups` when the task spawned, like its
    # budget and checks; None on a task stored before rounds existed: the plan's is read).
    follow_ups: int | None = None
    # One-time replies on its pull request to asks that start no round
    # (`steward.domain.follow_ups.REPLY_KINDS`): decided and not yet written, and written.
    pending_replies: tuple[str, ...] = ()
    replied: tuple[str, ...] = ()
    # A follow-up round (docs/concepts/follow-ups.md): the task in review whose pull request it
    # answers on that task's branch, its number (1 to the plan's follow_ups), and the ask it
    # answers as recorded (redacted, bounded). 0 and None: the item's own attempt.
    parent: str | None = None
    round: int = 0
    trigger: dict[str, Any] | None = None
    # Why it failed or was cancelled, from `steward.domain.failures.FailureCode` (None: it did
    # not, or it ended before codes were kept); its remedy and who must act are looked up.
    failure_code: str | None = None
    # The plan's `baseline` when the task spawned: run the required checks on the untouched
    # clone before the first model call.
    baseline: bool = True
    # The approved plan's content hash when the task spawned (the pull request's footer).
    content_hash: str | None = None
    # The pull request's status comment (`steward.services.status_comment`): its id once
    # written, and the digest of what it last showed (the loop updates it when they differ).
    status_comment_id: int | None = None
    status_shown: str | None = None

    @property
    def is_round(self) -> bool:
        return self.parent is not None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_TASK_STATUSES

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "plan_slug": self.plan_slug,
            "ordinal": self.ordinal,
            "item_key": self.item_key,
            "revision": self.revision,
            "attempt": self.attempt,
            # a round is a task of its own kind for clients (DESIGN: "Follow-up rounds")
            "kind": "follow_up" if self.is_round else self.kind.value,
            "title": self.title,
            "status": self.status.value,
            "classification": self.classification.value if self.classification else None,
            "reason": self.reason,
            "failure": failure.to_api() if (failure := failure_of(self)) else None,
            "branch": self.branch,
            "repo": self.repo,
            "model": self.model,
            "budget_usd": str(self.budget_usd),
            "pr_url": self.pr_url,
            "head_sha": self.head_sha,
            "parent": self.parent,
            "round": self.round,
            "rounds_used": self.rounds_used,
            "follow_ups": self.follow_ups,
            "pr_close_pending": self.pr_close_pending,
            "cost_usd": str(self.cost_usd),
            "over_reported_usd": str(self.over_reported_usd),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }
