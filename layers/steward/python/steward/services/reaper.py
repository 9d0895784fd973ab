"""The reaper: the one sweeper of stale tasks (docs/concepts/lifecycle.md).

A queued task that never started within the launch grace, or a running task whose runtime
stopped renewing `last_seen`, becomes `failed`, `retryable`, for every user, paused or not.
Each task's `deadline` carries its grace, so one indexed query per shard finds exactly the
overdue ones; the transition re-checks the deadline, so a runtime that renewed in between
keeps its task. Running it twice changes nothing the second time.

A local fixture's task (`PlanKind.FIXTURE`, `steward local capability`) has no runtime: its
deadline is the end of its lifetime (its capability's expiry), and past it the reaper
cancels it (`cancelled`, `final`, `FIXTURE_REASON`): it is no failure of anything, and
nothing would retry it (the loop leaves fixtures alone). No runtime is stopped for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from steward.adapters.budget_store import BudgetStore
from steward.adapters.task_store import TaskStore
from steward.domain.errors import Conflict, LifecycleError
from steward.domain.failures import FailureCode
from steward.domain.ids import LIVE_SHARDS
from steward.domain.launch import Launcher
from steward.domain.models import PlanKind, Task, TaskStatus

logger = logging.getLogger(__name__)

_SHARDS = tuple(f"s{n:02d}" for n in range(LIVE_SHARDS))

REASONS = {
    TaskStatus.QUEUED: "the runtime never started within the launch grace",
    TaskStatus.RUNNING: "the runtime stopped reporting (last_seen past the grace period)",
}
FIXTURE_REASON = "the local fixture's lifetime ended"


@dataclass(frozen=True)
class _Ending:
    target: TaskStatus
    event: str
    classification: str
    reason: str
    code: FailureCode = FailureCode.CANCELLED


def _ending(task: Task) -> _Ending | None:
    """How the reaper ends an overdue `task`, or None: review tasks wait for people."""
    if task.status not in REASONS:
        return None
    if task.kind is PlanKind.FIXTURE:
        return _Ending(TaskStatus.CANCELLED, "cancelled", "final", FIXTURE_REASON)
    return _Ending(TaskStatus.FAILED, "finished", "retryable", REASONS[task.status], FailureCode.DEADLINE)


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
        """Fail every overdue task (cancel an overdue fixture's); returns the ids it ended."""
        failed: list[str] = []
        for shard in _SHARDS:
            for candidate in self.tasks.overdue(shard, now):
                ending = _ending(candidate)
                if ending is None:
                    continue  # review tasks wait for people, not for a runtime
                try:
                    task, changed = self.tasks.transition(
                        candidate,
                        ending.target,
                        now=now,
                        event=ending.event,
                        data={"reaped": True},
                        classification=ending.classification,
                        reason=ending.reason,
                        extra={"failure_code": ending.code},
                        overdue_at=now,
                    )
                except (LifecycleError, Conflict) as exc:
                    logger.info("task %s not reaped: %s", candidate.id, exc.message)
                    continue
                if not changed:
                    continue
                failed.append(task.id)
                self.tasks.project_item(task, now=now)
                if self.launcher is not None and task.kind is PlanKind.WORK:  # a fixture has no runtime
                    try:
                        self.launcher.stop(task, task.launch_ref)
                    except Exception:  # the runtime is presumed gone; stopping is best effort
                        logger.exception("stopping the runtime of %s failed", task.id)
        return failed
