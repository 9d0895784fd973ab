"""Order between a plan's items (docs/concepts/task-document.md), pure.

An item waits for the items its `(after #n)` names and, with `order: sequential`, the one
above it (`Plan.predecessors`). It may start once every one of them is merged or done: a
merge is observed state (a webhook or resync), so the loop's next look after it starts the
item, on a branch cut from the base as it then is (the runner clones the base when it
starts). A predecessor that ended without a merge (its pull request closed, its attempts
used up or failed for good, withdrawn, cancelled) blocks the item until a person retries it
or edits the plan: nothing the loop does by itself can end that wait. Blocking passes down a
chain: an item after a blocked one is blocked by the same predecessor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steward.domain.models import ItemStatus, Plan, PlanItem, Task

RETRYABLE = "retryable"
# The loop's one-time `Reply` kind that links a pull request from those of the items its
# item waits for (`steward.services.replies`), once it is in review.
RELATED = "related"
_SATISFIED = frozenset({ItemStatus.MERGED, ItemStatus.DONE})


@dataclass(frozen=True)
class OrderState:
    waiting_for: tuple[PlanItem, ...] = ()  # predecessors still on their way to a merge
    blocked_by: tuple[PlanItem, ...] = ()  # predecessors (of the chain) that ended unmerged

    @property
    def ready(self) -> bool:
        return not self.waiting_for and not self.blocked_by

    def detail(self) -> str:
        """What a person reads after the reason (`blocked` or `after`): `#1 closed without
        merge; retry it or edit the plan`, `#1 (review), #3 (running)`."""
        if self.blocked_by:
            ended = ", ".join(f"#{i.ordinal} {_ENDED[i.status]}" for i in self.blocked_by)
            them = "it" if len(self.blocked_by) == 1 else "them"
            return f"{ended}; retry {them} or edit the plan"
        return ", ".join(f"#{i.ordinal} ({_progress(i)})" for i in self.waiting_for)


_ENDED = {ItemStatus.CLOSED: "closed without merge", ItemStatus.FAILED: "failed"}


def _progress(item: PlanItem) -> str:
    return "failed, to be retried" if item.status is ItemStatus.FAILED else item.status.value


def ended_unmerged(item: PlanItem, max_attempts: int) -> bool:
    """The item's work ended without a merge and nothing retries it by itself."""
    if item.status is ItemStatus.CLOSED:
        return True
    return item.status is ItemStatus.FAILED and not (
        item.last_classification == RETRYABLE and item.attempt < max_attempts
    )


def order_state(plan: Plan, item: PlanItem) -> OrderState:
    """Whether `item` may start as far as order goes, and if not, what it waits for."""
    return _state(plan, item, set())


def _state(plan: Plan, item: PlanItem, seen: set[str]) -> OrderState:
    seen.add(item.key)  # publish refuses cycles; a stored plan is still never walked twice
    waiting: list[PlanItem] = []
    blocked: dict[str, PlanItem] = {}
    for before in plan.predecessors(item):
        if before.status in _SATISFIED:
            continue
        if ended_unmerged(before, plan.max_attempts):
            blocked[before.key] = before
            continue
        if before.status is ItemStatus.PENDING and before.key not in seen:
            upstream = _state(plan, before, seen)
            if upstream.blocked_by:
                blocked.update((i.key, i) for i in upstream.blocked_by)
                continue
        waiting.append(before)
    roots = tuple(sorted(blocked.values(), key=lambda i: i.ordinal))
    return OrderState(waiting_for=() if roots else tuple(waiting), blocked_by=roots)


def blocked(plan: Plan) -> bool:
    """Every item of the plan still to do waits on a predecessor that ended unmerged: only a
    person can move it (the plan is not completed, and says so)."""
    todo = [i for i in plan.active_items if i.status is ItemStatus.PENDING]
    return (
        bool(todo)
        and all(order_state(plan, i).blocked_by for i in todo)
        and not any(
            i.status in (ItemStatus.RUNNING, ItemStatus.REVIEW)
            or (i.status is ItemStatus.FAILED and not ended_unmerged(i, plan.max_attempts))
            for i in plan.active_items
        )
    )


def dependents(plan: Plan, item: PlanItem) -> tuple[PlanItem, ...]:
    """The items that wait for `item`."""
    return tuple(i for i in plan.active_items if item in plan.predecessors(i))


def related(plan: Plan, item: PlanItem, tasks: Mapping[str, Task]) -> list[dict[str, Any]]:
    """The plan's items around `item` (those it waits for, then those waiting for it), each
    with its repository and its pull request once one exists (`tasks`: the items' current
    tasks by id, those of `plan.predecessors(item)` and `dependents(plan, item)`): what a pull
    request's body links (`steward.services.publication.related_section`)."""
    return [
        {
            "relation": relation,
            "ordinal": other.ordinal,
            "title": other.title,
            "repo": plan.item_repo(other),
            "status": other.status.value,
            "pr_url": task.pr_url if (task := tasks.get(other.task_id or "")) is not None else None,
        }
        for relation, others in (("after", plan.predecessors(item)), ("before", dependents(plan, item)))
        for other in others
    ]
