"""Spawning a task for an approved item. `task_for` builds it: every field derives from the
plan and the item, so a replayed spawn builds the very same task (same id, same branch).
`SpawnCharge` is what the loop's spawn charges with it, and `SpawnRefused` what a spawn
that may not happen raises."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from steward.domain.errors import LifecycleError
from steward.domain.follow_ups import follow_ups_of
from steward.domain.ids import branch_name, round_task_id, task_id
from steward.domain.models import Plan, PlanItem, Task, TaskStatus

LAUNCH_GRACE = timedelta(minutes=5)


class SpawnRefused(LifecycleError):
    """The plan or the user's loop state does not allow this spawn; nothing was written.
    `reason` is "plan" (approval, revision, link) or "loop" (paused, disabled, daily cap
    reached, or the caller's heartbeat lease was taken over)."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, field="item" if reason == "plan" else "loop")
        self.reason = reason


@dataclass(frozen=True)
class SpawnCharge:
    """What the loop's spawn charges and checks on the user item, atomically with the task:
    one spawn of the local `day`'s cap, under the heartbeat lease `lease_epoch`."""

    day: str
    cap: int
    same_day: bool  # the user item's spawn_day was `day` when read
    lease_epoch: int


def task_for(
    plan: Plan, item: PlanItem, *, attempt: int, now: datetime, launch_grace: timedelta = LAUNCH_GRACE
) -> Task:
    tid = task_id(plan.id, item.key, item.revision, attempt)
    front = plan.front_matter
    return Task(
        id=tid,
        user=plan.user,
        plan_id=plan.id,
        plan_slug=plan.slug,
        item_key=item.key,
        ordinal=item.ordinal,
        revision=item.revision,
        attempt=attempt,
        branch=branch_name(tid),
        repo=plan.item_repo(item),
        base=front.get("base"),
        model=str(front["model"]),
        budget_usd=Decimal(str(front["budget_usd"])),
        title=item.title,
        details=item.details,
        checks=tuple(str(c) for c in front.get("checks", ())),
        setup=tuple(str(c) for c in front.get("setup", ())),
        created_at=now,
        updated_at=now,
        deadline=now + launch_grace,
        max_attempts=int(front.get("max_attempts", 3)),
        follow_ups=follow_ups_of(front),
        kind=plan.kind,
        baseline=front.get("baseline", True) is not False,
        content_hash=plan.approved_hash,
    )


def round_for(
    parent: Task,
    plan: Plan,
    ask: dict[str, Any],
    *,
    number: int,
    now: datetime,
    launch_grace: timedelta = LAUNCH_GRACE,
) -> Task:
    """Follow-up round `number` of `parent` (in review), answering `ask`: the parent's item,
    revision, branch and pull request, the approved plan's model, budget, checks and setup,
    and a budget of its own. Replayed, it builds the same task."""
    front = plan.front_matter
    attempt = int(ask.get("attempt", 1))
    spent = Decimal(str(ask.get("spent_usd", "0")))  # by its earlier attempts: one budget a round
    return parent.model_copy(
        update={
            "id": round_task_id(parent.id, number, attempt),
            "attempt": attempt,
            "status": TaskStatus.QUEUED,
            "classification": None,
            "reason": None,
            "model": str(front["model"]),
            "budget_usd": Decimal(str(front["budget_usd"])) - spent,
            "checks": tuple(str(c) for c in front.get("checks", ())),
            "setup": tuple(str(c) for c in front.get("setup", ())),
            "cost_usd": Decimal("0"),
            "over_reported_usd": Decimal("0"),
            "created_at": now,
            "updated_at": now,
            "last_seen": None,
            "deadline": now + launch_grace,
            "event_seq": 0,
            "runtime_id": None,
            "finished_by": None,
            "launched_at": None,
            "launch_ref": None,
            "max_attempts": int(front.get("max_attempts", 3)),
            "github_observed_at": None,
            "github_etag": None,
            "pr_close_pending": False,
            "withdrawn_by": None,
            "follow_up_keys": (),
            "pending_asks": (),
            "rounds_used": 0,
            "rounds_settled": 0,
            "follow_ups": 0,  # a round asks for no rounds of its own
            "parent": parent.id,
            "round": number,
            "trigger": dict(ask),
        }
    )
