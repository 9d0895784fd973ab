"""Plan and task lifecycles of DESIGN section 3 as pure transition functions.

Each function returns the new status (the same one when the request is already satisfied,
so replays succeed) or raises LifecycleError. Stores turn the same rules into condition
expressions; these functions are the reference the conditions are tested against.
"""

from __future__ import annotations

from steward.domain.errors import LifecycleError
from steward.domain.models import (
    TERMINAL_PLAN_STATUSES,
    ItemStatus,
    PlanStatus,
    TaskStatus,
)

P = PlanStatus
T = TaskStatus

# Statuses from which confirm/submit/archive perform a transition (as opposed to a no-op).
CONFIRMABLE = frozenset({P.DRAFT, P.AWAITING_CONFIRMATION})
ARCHIVABLE = frozenset(set(PlanStatus) - TERMINAL_PLAN_STATUSES)


def confirm(status: PlanStatus) -> PlanStatus:
    if status in CONFIRMABLE or status is P.CONFIRMED:
        return P.CONFIRMED
    raise LifecycleError(f"a plan that is {status.value} cannot be confirmed", field="status")


def submit(status: PlanStatus) -> PlanStatus:
    if status in (P.DRAFT, P.AWAITING_CONFIRMATION):
        return P.AWAITING_CONFIRMATION
    raise LifecycleError(f"a plan that is {status.value} cannot be submitted", field="status")


def archive(status: PlanStatus) -> PlanStatus:
    if status in ARCHIVABLE or status is P.ARCHIVED:
        return P.ARCHIVED
    raise LifecycleError(f"a plan that is {status.value} cannot be archived", field="status")


def after_publish(status: PlanStatus | None, content_changed: bool) -> PlanStatus:
    """Status after a publish. Approval binds to content: a change to an approved plan needs a
    new confirmation. A completed plan reopens for review (new checkboxes are new work); an
    archived one is closed for good."""
    if status is None:
        return P.DRAFT
    if status is P.ARCHIVED:
        raise LifecycleError("the plan is archived; publish under a new slug", field="status")
    if not content_changed:
        return status
    if status is P.DRAFT:
        return P.DRAFT
    return P.AWAITING_CONFIRMATION


def start_work(status: PlanStatus) -> PlanStatus:
    if status in (P.CONFIRMED, P.IN_PROGRESS):
        return P.IN_PROGRESS
    raise LifecycleError(f"no work starts on a plan that is {status.value}", field="status")


def complete(status: PlanStatus) -> PlanStatus:
    if status in (P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED):
        return P.COMPLETED
    raise LifecycleError(f"a plan that is {status.value} cannot complete", field="status")


# Task transitions: target -> statuses it may come from. A failed task can still move to
# review or merged when a verified webhook says its pull request exists (section 3).
TASK_SOURCES: dict[TaskStatus, frozenset[TaskStatus]] = {
    T.RUNNING: frozenset({T.QUEUED}),
    T.REVIEW: frozenset({T.RUNNING, T.FAILED}),
    T.MERGED: frozenset({T.RUNNING, T.REVIEW, T.FAILED, T.CLOSED}),
    T.CLOSED: frozenset({T.RUNNING, T.REVIEW, T.FAILED}),
    T.FAILED: frozenset({T.QUEUED, T.RUNNING}),
    T.CANCELLED: frozenset({T.QUEUED, T.RUNNING}),
}


def task_transition(current: TaskStatus, target: TaskStatus) -> TaskStatus:
    """Move a task; assigning the status it already has is a no-op (webhooks repeat)."""
    if current is target:
        return current
    if current in TASK_SOURCES.get(target, frozenset()):
        return target
    raise LifecycleError(f"a task that is {current.value} cannot become {target.value}", field="status")


# The status a task's status projects onto its plan item (the task is the truth; the item
# shows it). Items have no `cancelled` status: a cancelled task's item is failed, and a
# person may retry it.
ITEM_STATUS_OF: dict[TaskStatus, ItemStatus] = {
    T.QUEUED: ItemStatus.RUNNING,
    T.RUNNING: ItemStatus.RUNNING,
    T.REVIEW: ItemStatus.REVIEW,
    T.MERGED: ItemStatus.MERGED,
    T.CLOSED: ItemStatus.CLOSED,
    T.FAILED: ItemStatus.FAILED,
    T.CANCELLED: ItemStatus.FAILED,
}
