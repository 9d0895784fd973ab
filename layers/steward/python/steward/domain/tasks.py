"""Spawning a task for an approved item. `task_for` builds it: every field derives from the
plan and the item, so a replayed spawn builds the very same task (same id, same branch).
`SpawnCharge` is what the loop's spawn charges with it, and `SpawnRefused` what a spawn
that may not happen raises."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from steward.domain.errors import LifecycleError
from steward.domain.ids import branch_name, task_id
from steward.domain.models import Plan, PlanItem, Task

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
        repo=plan.repo,
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
        kind=plan.kind,
    )
