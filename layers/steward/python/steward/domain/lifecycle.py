"""Plan, plan item and task lifecycles of docs/concepts/lifecycle.md: one transition table each, and
the pure transition functions the stores' conditions are tested against.

The tables list every status change any code path writes, grouped by the operation that
makes it, and nothing else: `PLAN_TRANSITIONS`, `ITEM_TRANSITIONS` (the stored `status` of
a plan item) and `TASK_TRANSITIONS`, each a set of (from, to) pairs; `plan_change_allowed`,
`item_change_allowed` and `task_change_allowed` answer for one observed change (keeping a
status is always allowed). The simulation in tests/sim checks every change it observes
after every DynamoDB write against them.

Each transition function returns the new status (the same one when the request is already
satisfied, so replays succeed) or raises LifecycleError.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TypeVar

from steward.domain.errors import LifecycleError
from steward.domain.models import (
    TERMINAL_PLAN_STATUSES,
    ItemStatus,
    PlanStatus,
    TaskStatus,
)

P = PlanStatus
I = ItemStatus  # noqa: E741 - like P and T, so the item table reads as one
T = TaskStatus

S = TypeVar("S", bound=StrEnum)


def _into(sources: Iterable[S], target: S) -> frozenset[tuple[S, S]]:
    return frozenset((source, target) for source in sources if source is not target)


def _union(groups: Mapping[str, frozenset[tuple[S, S]]]) -> frozenset[tuple[S, S]]:
    return frozenset(pair for group in groups.values() for pair in group)


def _sources(pairs: Iterable[tuple[S, S]]) -> frozenset[S]:
    return frozenset(source for source, _ in pairs)


# ---- plans

# Statuses from which confirm/archive perform a transition (as opposed to a no-op).
CONFIRMABLE = frozenset({P.DRAFT, P.AWAITING_CONFIRMATION})
ARCHIVABLE = frozenset(set(PlanStatus) - TERMINAL_PLAN_STATUSES)

# Every status change of a plan, by the operation that makes it. A plan is created `draft`
# (PLAN_INITIAL); an archived plan never changes again.
PLAN_CHANGES: dict[str, frozenset[tuple[PlanStatus, PlanStatus]]] = {
    # POST .../submit (PlanStore.submit)
    "submit": _into({P.DRAFT}, P.AWAITING_CONFIRMATION),
    # POST .../confirm (PlanStore.confirm): approves the current content
    "confirm": _into(CONFIRMABLE, P.CONFIRMED),
    # a publish that changes approved content (PlanStore.save, `after_publish`): approval
    # binds to content, and a completed plan reopens for review; a draft stays a draft
    "publish": _into({P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED}, P.AWAITING_CONFIRMATION),
    # the loop's spawn (`item_link_update`) and MarkInProgress (PlanStore.mark_in_progress)
    "start_work": _into({P.CONFIRMED}, P.IN_PROGRESS),
    # an explicit retry (`item_reopen_update`): the retried item is work again
    "reopen": _into({P.CONFIRMED, P.COMPLETED}, P.IN_PROGRESS),
    # the loop's CompletePlan (PlanStore.complete)
    "complete": _into({P.CONFIRMED, P.IN_PROGRESS}, P.COMPLETED),
    # POST .../archive (PlanStore.archive)
    "archive": _into(ARCHIVABLE, P.ARCHIVED),
}
PLAN_TRANSITIONS: frozenset[tuple[PlanStatus, PlanStatus]] = _union(PLAN_CHANGES)
PLAN_INITIAL = frozenset({P.DRAFT})


def plan_change_allowed(old: PlanStatus, new: PlanStatus) -> bool:
    return old is new or (old, new) in PLAN_TRANSITIONS


def _plan_move(operation: str, status: PlanStatus, target: PlanStatus, refusal: str) -> PlanStatus:
    """`target` when `operation` moves a plan from `status` there (or it is there already)."""
    if status is target or (status, target) in PLAN_CHANGES[operation]:
        return target
    raise LifecycleError(refusal, field="status")


def confirm(status: PlanStatus) -> PlanStatus:
    return _plan_move("confirm", status, P.CONFIRMED, f"a plan that is {status.value} cannot be confirmed")


def submit(status: PlanStatus) -> PlanStatus:
    return _plan_move(
        "submit", status, P.AWAITING_CONFIRMATION, f"a plan that is {status.value} cannot be submitted"
    )


def archive(status: PlanStatus) -> PlanStatus:
    return _plan_move("archive", status, P.ARCHIVED, f"a plan that is {status.value} cannot be archived")


def after_publish(status: PlanStatus | None, content_changed: bool) -> PlanStatus:
    """Status after a publish. Approval binds to content: a change to an approved plan needs a
    new confirmation. A completed plan reopens for review (new checkboxes are new work); an
    archived one is closed for good."""
    if status is None:
        return P.DRAFT
    if status is P.ARCHIVED:
        raise LifecycleError("the plan is archived; publish under a new slug", field="status")
    if content_changed and status in _sources(PLAN_CHANGES["publish"]):
        return P.AWAITING_CONFIRMATION
    return status  # unchanged content, or a draft or awaiting plan: it stays as it is


def start_work(status: PlanStatus) -> PlanStatus:
    return _plan_move("start_work", status, P.IN_PROGRESS, f"no work starts on a plan that is {status.value}")


def reopen(status: PlanStatus) -> PlanStatus:
    """An explicit retry of an item's task (the plan part is `item_reopen_update`)."""
    return _plan_move(
        "reopen", status, P.IN_PROGRESS, f"no item of a plan that is {status.value} can be retried"
    )


def complete(status: PlanStatus) -> PlanStatus:
    return _plan_move("complete", status, P.COMPLETED, f"a plan that is {status.value} cannot complete")


# ---- tasks

# Task transitions: target -> statuses it may come from; `task_transition` (the only way
# `TaskStore.transition` moves a task) enforces it. A task is created `queued` by the spawn
# (TASK_INITIAL).
TASK_SOURCES: dict[TaskStatus, frozenset[TaskStatus]] = {
    # the runtime's claim
    T.RUNNING: frozenset({T.QUEUED}),
    # the runtime's finish with its pull request (from running); a pull request event, by
    # webhook or resync, also on a failed task whose runtime opened one before it died, and
    # on a closed one whose pull request a person reopened (`reopened`, or resync seeing it
    # open; never a task Steward withdrew: `follows_reopen`)
    T.REVIEW: frozenset({T.RUNNING, T.FAILED, T.CLOSED}),
    # a pull request event (webhook or resync): merged, also after Steward saw it closed
    T.MERGED: frozenset({T.RUNNING, T.REVIEW, T.FAILED, T.CLOSED}),
    # a pull request event (webhook or resync): closed unmerged; from review also a
    # person's cancel, which withdraws the task (`cancel_target`; the loop then closes its
    # pull request)
    T.CLOSED: frozenset({T.RUNNING, T.REVIEW, T.FAILED}),
    # the runtime's failed finish (from running); the reaper (queued past its launch grace,
    # running without heartbeats)
    T.FAILED: frozenset({T.QUEUED, T.RUNNING}),
    # a person's cancel, the plan's archive (the loop), a superseded revision (the confirm
    # or the loop), the reaper ending a local fixture's task at the end of its lifetime
    T.CANCELLED: frozenset({T.QUEUED, T.RUNNING}),
    # a follow-up round's finish with its commit on its parent's pull request
    T.ANSWERED: frozenset({T.RUNNING}),
}
TASK_TRANSITIONS: frozenset[tuple[TaskStatus, TaskStatus]] = frozenset(
    (source, target) for target, sources in TASK_SOURCES.items() for source in sources
)
TASK_INITIAL = frozenset({T.QUEUED})
# The statuses of a task a person may retry (`TaskStore.request_retry`), and that a retry
# spawn requires of the previous task (`TaskStore.spawn`).
RETRYABLE_TASK_STATUSES = frozenset({T.FAILED, T.CLOSED, T.CANCELLED})


# The statuses a person's cancel moves (`TaskStore.cancel`): queued and running tasks are
# cancelled; a task in review is withdrawn (closed, reason `withdrawn`, final).
CANCELLABLE = frozenset({T.QUEUED, T.RUNNING})
WITHDRAWABLE = frozenset({T.REVIEW})
WITHDRAWN = "withdrawn"  # the reason of a task a person cancelled while it was in review


def cancel_target(status: TaskStatus, *, reason: str | None = None) -> TaskStatus:
    """The status a person's cancel moves a task in `status` (with `reason`) to: cancelled
    from queued or running, closed (withdrawn) from review. Replays are no-ops: a cancelled
    task stays cancelled, a withdrawn one closed. Anything else is a LifecycleError that
    says why: a merged pull request cannot be withdrawn."""
    if status in CANCELLABLE or status is T.CANCELLED:
        return T.CANCELLED
    if status in WITHDRAWABLE or (status is T.CLOSED and reason == WITHDRAWN):
        return T.CLOSED
    why = {
        T.MERGED: "its pull request was merged; a merged task cannot be cancelled or withdrawn",
        T.CLOSED: "its pull request was closed on GitHub; there is nothing left to withdraw",
        T.FAILED: "it has failed already; `steward task retry` asks for another attempt",
    }
    raise LifecycleError(f"a task that is {status.value} cannot be cancelled: {why[status]}", field="status")


def follows_reopen(status: TaskStatus, reason: str | None) -> bool:
    """Whether an open pull request (reopened by a person) brings a task in `status` with
    `reason` back to review: a closed task, unless Steward withdrew it (then the withdrawal
    stands and the loop closes the pull request again)."""
    return status is T.CLOSED and reason != WITHDRAWN


def task_change_allowed(old: TaskStatus, new: TaskStatus) -> bool:
    return old is new or (old, new) in TASK_TRANSITIONS


def task_transition(current: TaskStatus, target: TaskStatus) -> TaskStatus:
    """Move a task; assigning the status it already has is a no-op (webhooks repeat)."""
    if task_change_allowed(current, target):
        return target
    raise LifecycleError(f"a task that is {current.value} cannot become {target.value}", field="status")


# ---- plan items

# The status a task's status projects onto its plan item (the task is the truth; the item
# shows it). Items have no `cancelled` status: a cancelled task's item is failed, and a
# person may retry it.
ITEM_STATUS_OF: dict[TaskStatus, ItemStatus] = {
    T.QUEUED: I.RUNNING,
    T.RUNNING: I.RUNNING,
    T.REVIEW: I.REVIEW,
    T.MERGED: I.MERGED,
    T.CLOSED: I.CLOSED,
    T.FAILED: I.FAILED,
    T.CANCELLED: I.FAILED,
    T.ANSWERED: I.REVIEW,  # never projected: a round leaves its item to the task it answers for
}

# The statuses of an item with a task (a retried one, pending, aside).
_WITH_TASK = frozenset(ITEM_STATUS_OF.values())

# Every change of an item's stored `status`, by the operation that makes it. An item is
# created pending, or done when its box is checked (ITEM_INITIAL). `removed` is never a
# stored status: deleting a checkbox sets the item's `removed` flag and keeps its status
# (its task's projection still lands on it; `shown_status` is what the API shows), and a
# restored checkbox clears the flag; neither is a status change.
#
# The item shows its task's status through a projection written after the task's change,
# on its own: it may be lost (the loop repairs it), so an item may still show an earlier
# status of its task when the next change lands on it.
ITEM_CHANGES: dict[str, frozenset[tuple[ItemStatus, ItemStatus]]] = {
    # the loop's spawn (`item_link_update`): attempt 1 of a pending item without a task; the
    # next attempt of a retryable failure, or of an item a person retried
    "spawn": _into({I.PENDING, I.FAILED}, I.RUNNING),
    # a person's retry (`item_reopen_update`): back to pending, still linked to its failed,
    # closed or cancelled task; running or review when that task's last projection was lost
    "retry": _into({I.FAILED, I.CLOSED, I.RUNNING, I.REVIEW}, I.PENDING),
    # the projection of the item's task (`PlanStore.project_item`: the runtime's finish, a
    # webhook, resync, the reaper, a cancel, the loop's repair): ITEM_STATUS_OF of each task
    # change, or of several when projections were lost
    "project": _into({I.RUNNING, I.FAILED, I.CLOSED}, I.REVIEW)
    | _into({I.RUNNING, I.REVIEW, I.FAILED, I.CLOSED}, I.MERGED)
    | _into({I.RUNNING, I.REVIEW, I.FAILED}, I.CLOSED)
    | _into({I.RUNNING}, I.FAILED),
    # the same, on an item a person retried (pending, still linked to the task) whose task
    # then moves on: its pull request revives it
    "project_retried": frozenset({(I.PENDING, I.REVIEW), (I.PENDING, I.MERGED), (I.PENDING, I.CLOSED)}),
    # publish (`steward.domain.plans`): a box checked by hand on an item without a task, a
    # done box unchecked
    "checkbox": _into({I.PENDING}, I.DONE) | _into({I.DONE}, I.PENDING),
    # publish: the text of an item with a task changed, a new revision without a task:
    # pending, or done when its box is checked
    "revise": _into(_WITH_TASK, I.PENDING) | _into(_WITH_TASK | {I.PENDING}, I.DONE),
}
ITEM_TRANSITIONS: frozenset[tuple[ItemStatus, ItemStatus]] = _union(ITEM_CHANGES)
ITEM_INITIAL = frozenset({I.PENDING, I.DONE})


# The item statuses a task's projection may move to each target (the condition of
# `PlanStore.project_item`): a late projection of an older task status never lands on a
# newer item status, such as a cancel replayed after a person's retry reopened the item.
PROJECTION_SOURCES: dict[ItemStatus, frozenset[ItemStatus]] = {
    target: frozenset(
        old for old, new in ITEM_CHANGES["project"] | ITEM_CHANGES["project_retried"] if new is target
    )
    for target in ItemStatus
}


def item_change_allowed(old: ItemStatus, new: ItemStatus) -> bool:
    return old is new or (old, new) in ITEM_TRANSITIONS
