"""Building a task for an approved item: every field derives from the plan and the item,
so a replayed spawn builds the very same task (same id, same branch)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from steward.domain.ids import branch_name, task_id
from steward.domain.models import Plan, PlanItem, Task

LAUNCH_GRACE = timedelta(minutes=5)


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
    )
