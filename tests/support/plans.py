"""Driving plans through their lifecycle the way the loop will."""

from __future__ import annotations

from steward.domain.models import Plan, Task, utcnow
from steward.domain.tasks import task_for
from steward.wiring import Services


def spawn_item(services: Services, plan: Plan, ordinal: int, attempt: int = 1) -> tuple[Task, bool]:
    """Spawn the task of the active item at `ordinal` (first attempt: no previous task)."""
    item = next(i for i in plan.active_items if i.ordinal == ordinal)
    task = task_for(plan, item, attempt=attempt, now=utcnow())
    return services.tasks.tasks.spawn(task, previous_task_id=None, now=utcnow())
