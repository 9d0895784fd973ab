"""GitHub as observed state: which tasks the loop asks GitHub about, and when (DESIGN 7).

Webhooks are a wake-up, not the only source of truth. A delivery can be lost (GitHub does
not retry), so every task waiting in `review` is observed on GitHub by its branch once its
last observation is older than the resync period, oldest first, within a per-tick bound of
GitHub calls; a retryable failure is checked for a pull request before it is retried (its
runtime may have opened one before it died). What an observation finds is assigned exactly
as a webhook would assign it (`steward.domain.webhooks.target_status`).

Pure: the caller supplies the tasks, the clock and the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from steward.domain.models import Task, TaskStatus

DEFAULT_PERIOD_SECONDS = 900
DEFAULT_MAX_CALLS = 20


@dataclass(frozen=True)
class ResyncPolicy:
    period: timedelta = timedelta(seconds=DEFAULT_PERIOD_SECONDS)
    max_calls: int = DEFAULT_MAX_CALLS  # GitHub calls per user per tick


def last_observed(task: Task) -> datetime:
    """When GitHub's view of the task was last known: its last resync, else when it last
    changed (a task enters review when its pull request is opened, or a webhook moves it)."""
    return task.github_observed_at or task.updated_at


def due(tasks: Iterable[Task], now: datetime, policy: ResyncPolicy, *, budget: int) -> list[Task]:
    """The review tasks to observe this tick: those last observed a period or more ago,
    oldest observation first, at most `budget` of them."""
    waiting = [t for t in tasks if t.status is TaskStatus.REVIEW and last_observed(t) + policy.period <= now]
    waiting.sort(key=lambda t: (last_observed(t), t.id))
    return waiting[: max(0, budget)]


def next_due(tasks: Sequence[Task], policy: ResyncPolicy) -> datetime | None:
    """When the next review task falls due (the tick sets the user's `due_at` to it, so the
    loop's no-progress shortcut never starves the resync), or None with none in review."""
    times = [last_observed(t) + policy.period for t in tasks if t.status is TaskStatus.REVIEW]
    return min(times) if times else None
