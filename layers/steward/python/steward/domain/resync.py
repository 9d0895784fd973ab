"""GitHub as observed state: which tasks the loop asks GitHub about, and when (docs/concepts/github.md).

Webhooks are a wake-up, not the only source of truth. A delivery can be lost (GitHub does
not retry), so every task waiting in `review` is observed on GitHub by its branch once its
last observation is older than the resync period, oldest first, within a per-tick bound of
GitHub calls; so is every task whose pull request a person closed within the last
`closed_window` (a reopen, or a merge after it, may have lost its delivery too), after the
review tasks, in what is left of the bound; a retryable failure is checked for a pull request before it is retried (its
runtime may have opened one before it died). What an observation finds is assigned exactly
as a webhook would assign it (`steward.domain.webhooks.target_status`). A task in review is
looked at early when another of Steward's pull requests merged into its repository since
its last observation (its own may conflict now).

Pure: the caller supplies the tasks, the clock and the policy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from steward.domain.lifecycle import WITHDRAWN
from steward.domain.models import Task, TaskStatus

DEFAULT_PERIOD_SECONDS = 900
DEFAULT_MAX_CALLS = 45  # 15 pull requests in review with nothing new (3 conditional calls each)
DEFAULT_CLOSED_DAYS = 7


@dataclass(frozen=True)
class ResyncPolicy:
    period: timedelta = timedelta(seconds=DEFAULT_PERIOD_SECONDS)
    max_calls: int = DEFAULT_MAX_CALLS  # GitHub calls per user per tick
    # how long a pull request a person closed is still looked at (reopened, merged after all)
    closed_window: timedelta = timedelta(days=DEFAULT_CLOSED_DAYS)


def last_observed(task: Task) -> datetime:
    """When GitHub's view of the task was last known: its last resync, else when it last
    changed (a task enters review when its pull request is opened, or a webhook moves it)."""
    return task.github_observed_at or task.updated_at


def watched_closed(task: Task, now: datetime, policy: ResyncPolicy) -> bool:
    """A task whose pull request a person closed within the window: still looked at. Not one
    Steward withdrew (its pull request is Steward's to keep closed: a reopen's delivery has
    it closed again), and not once the window has passed (the cost stays bounded)."""
    return (
        task.status is TaskStatus.CLOSED
        and task.reason != WITHDRAWN
        and task.pr_number is not None
        and task.updated_at + policy.closed_window > now
    )


def _observed(task: Task, now: datetime, policy: ResyncPolicy) -> bool:
    return task.status is TaskStatus.REVIEW or watched_closed(task, now, policy)


def base_moved(task: Task, moved: Mapping[str, datetime]) -> bool:
    """A task in review whose repository took a merge of another of Steward's pull requests
    since the task was last observed: its own may conflict now (GitHub sends no event when a
    pull request stops merging), so it is looked at without waiting for its period."""
    when = moved.get(task.repo)
    return task.status is TaskStatus.REVIEW and when is not None and when > last_observed(task)


def due(
    tasks: Iterable[Task],
    now: datetime,
    policy: ResyncPolicy,
    *,
    budget: int,
    moved: Mapping[str, datetime] | None = None,
) -> list[Task]:
    """The tasks to observe this tick: those in review whose base moved (`base_moved`), then
    those in review, then the closed ones still watched, each last observed a period or more
    ago, oldest observation first, at most `budget`."""
    moved = moved or {}
    waiting = [
        t
        for t in tasks
        if _observed(t, now, policy) and (last_observed(t) + policy.period <= now or base_moved(t, moved))
    ]
    waiting.sort(
        key=lambda t: (not base_moved(t, moved), t.status is not TaskStatus.REVIEW, last_observed(t), t.id)
    )
    return waiting[: max(0, budget)]


def next_due(tasks: Sequence[Task], policy: ResyncPolicy, now: datetime) -> datetime | None:
    """When the next observed task falls due (the tick sets the user's `due_at` to it, so the
    loop's no-progress shortcut never starves the resync), or None with none to observe."""
    times = [last_observed(t) + policy.period for t in tasks if _observed(t, now, policy)]
    return min(times) if times else None
