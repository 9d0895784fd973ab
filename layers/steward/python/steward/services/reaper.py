"""The reaper: the one sweeper of stale tasks (DESIGN section 3).

A queued task that never started within the launch grace, or a running task whose runtime
stopped renewing `last_seen`, becomes `failed`, `retryable`, for every user, paused or not.
Each task's `deadline` carries its grace, so one indexed query per shard finds exactly the
overdue ones; the transition re-checks the deadline, so a runtime that renewed in between
keeps its task. Running it twice changes nothing the second time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from steward.adapters.budget_store import BudgetStore
from steward.adapters.task_store import TaskStore
from steward.domain.errors import Conflict, LifecycleError
from steward.domain.ids import LIVE_SHARDS
from steward.domain.launch import Launcher
from steward.domain.models import TaskStatus

logger = logging.getLogger(__name__)

_SHARDS = tuple(f"s{n:02d}" for n in range(LIVE_SHARDS))

REASONS = {
    TaskStatus.QUEUED: "the runtime never started within the launch grace",
    TaskStatus.RUNNING: "the runtime stopped reporting (last_seen past the grace period)",
}


@dataclass
class Reaper:
    tasks: TaskStore
    launcher: Launcher | None = None
    budget: BudgetStore | None = None

    def sweep_reservations(self, now: datetime) -> int:
        """Settle relay reservations past their expiry, charging them in full (no usage ever
        arrived, so the whole reservation may have been spent). Conditional on the
        reservation still existing and being expired: a late settlement by the relay and
        this sweep never both apply. TTL is no substitute: it can lag for days."""
        if self.budget is None:
            return 0
        charged = 0
        for shard in _SHARDS:
            touched: set[str] = set()
            for task_id, reservation_id, amount in self.budget.expired(shard, now):
                settled = self.budget.settle(
                    task_id=task_id,
                    reservation_id=reservation_id,
                    reserved=amount,
                    actual=amount,
                    now=now,
                    expired_before=now,
                )
                charged += settled.applied
                touched.add(task_id)
            for task_id in touched:
                self.budget.leave_index_if_empty(task_id)
        return charged

    def sweep(self, now: datetime) -> list[str]:
        """Fail every overdue task; returns the ids failed by this sweep."""
        failed: list[str] = []
        for shard in _SHARDS:
            for candidate in self.tasks.overdue(shard, now):
                if candidate.status not in REASONS:
                    continue  # review tasks wait for people, not for a runtime
                try:
                    task, changed = self.tasks.transition(
                        candidate,
                        TaskStatus.FAILED,
                        now=now,
                        event="finished",
                        data={"reaped": True},
                        classification="retryable",
                        reason=REASONS[candidate.status],
                        overdue_at=now,
                    )
                except (LifecycleError, Conflict) as exc:
                    logger.info("task %s not reaped: %s", candidate.id, exc.message)
                    continue
                if not changed:
                    continue
                failed.append(task.id)
                self.tasks.project_item(task, now=now)
                if self.launcher is not None:
                    try:
                        self.launcher.stop(task, task.launch_ref)
                    except Exception:  # the runtime is presumed gone; stopping is best effort
                        logger.exception("stopping the runtime of %s failed", task.id)
        return failed
