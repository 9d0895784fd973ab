"""Why an item or a task is not progressing, from durable state alone (issue "the person's
view"): the answer `plan show`, `task show` and the API give as
`"waiting": {"reason", "until", "detail"}`, or None when it is progressing or finished.

Pure. It reads what the heartbeat reads (the user's loop state and settings, the plan, the
user's live tasks) and applies the same gates in the same order (`steward.domain.gates`),
so the reason shown is the one the loop acts on: order first (`after`: a predecessor is on
its way; `blocked`: one ended without a merge, `steward.domain.order`), then disabled,
paused, quiet hours, then, for work that needs a spawn, the daily cap, `max_parallel` and
`max_open_prs`; what is left waits for the next tick. `until` is when the reason ends by itself (quiet hours' end, the user's next
midnight, the next tick), None when only a person (or another task ending) can end it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from steward.domain import gates
from steward.domain.installations import Installation
from steward.domain.loop import LoopState
from steward.domain.models import ItemStatus, Plan, PlanItem, PlanKind, PlanStatus, Task, TaskStatus
from steward.domain.order import order_state
from steward.domain.reconcile import pull_request_load

Reason = Literal[
    "after",
    "blocked",
    "next_tick",
    "max_parallel",
    "review_capacity",
    "daily_cap",
    "quiet_hours",
    "paused",
    "disabled",
    "awaiting_confirmation",
    "installation_suspended",
]

_SLOTS = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING})


@dataclass(frozen=True)
class WaitingView:
    """What the reasons are read from: the user's loop state, live tasks and installations."""

    state: LoopState
    live: Sequence[Task]
    installations: Sequence[Installation]
    now: datetime

    def suspended(self, repo: str) -> bool:
        """The repository is held only by suspended installations of the user."""
        holding = [i for i in self.installations if i.lists(repo)]
        return bool(holding) and all(i.suspended for i in holding)


@dataclass(frozen=True)
class Waiting:
    reason: Reason
    until: datetime | None
    detail: str

    def to_api(self) -> dict[str, Any]:
        until = None if self.until is None else self.until.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return {"reason": self.reason, "until": until, "detail": self.detail}


def for_item(
    plan: Plan,
    item: PlanItem,
    state: LoopState,
    live: Sequence[Task],
    now: datetime,
    *,
    installation_suspended: bool = False,
) -> Waiting | None:
    """Why `item` waits, or None when it does not (its task is at work, or it finished)."""
    if item.removed or item.status is not ItemStatus.PENDING:
        return None  # running, in review or finished: progressing or done, not waiting
    if plan.status is PlanStatus.AWAITING_CONFIRMATION or plan.approved_hash != plan.content_hash:
        detail = (
            "the plan is not confirmed yet: `steward plan confirm` approves it"
            if plan.approved_hash is None
            else "the plan changed since it was confirmed: `steward plan confirm` approves what it holds now"
        )
        return Waiting("awaiting_confirmation", None, detail)
    if plan.status not in (PlanStatus.CONFIRMED, PlanStatus.IN_PROGRESS):
        return None  # a draft, or an archived or completed plan: no work is due
    if any(t.plan_id == plan.id and t.item_key == item.key and t.revision == item.revision for t in live):
        return None  # just spawned: the plan was read before the spawn linked its task
    return (
        _order_gate(plan, item)
        or _loop_gates(state, now, installation_suspended)
        or _spawn_gates(state, live, now)
    )


def for_task(
    task: Task, state: LoopState, live: Sequence[Task], now: datetime, *, installation_suspended: bool = False
) -> Waiting | None:
    """Why `task` waits, or None: a queued task that no runtime was started for yet waits on
    the loop (a launched one is starting; running and review are progressing), and so does a
    withdrawn one whose pull request the loop has yet to close."""
    if task.pr_close_pending:
        found = _loop_gates(state, now, installation_suspended) or _next_tick(state)
        return Waiting(found.reason, found.until, f"the loop closes its pull request ({found.detail})")
    if task.status is not TaskStatus.QUEUED or task.launched_at is not None:
        return None
    return _loop_gates(state, now, installation_suspended) or _next_tick(state)


def _order_gate(plan: Plan, item: PlanItem) -> Waiting | None:
    order = order_state(plan, item)
    if order.ready:
        return None
    return Waiting("blocked" if order.blocked_by else "after", None, order.detail())


def _loop_gates(state: LoopState, now: datetime, installation_suspended: bool) -> Waiting | None:
    settings = state.settings
    if not settings.enabled:
        return Waiting("disabled", None, "the loop is disabled: `steward loop set --enabled true`")
    if settings.paused:
        return Waiting("paused", None, "the loop is paused: `steward loop resume`")
    if gates.in_quiet_hours(settings, now):
        end = gates.quiet_hours_end(settings, now)
        window = settings.quiet_hours
        shown = f"{window.start}-{window.end} {settings.timezone}" if window else settings.timezone
        return Waiting("quiet_hours", end, f"quiet hours ({shown})")
    if installation_suspended:
        return Waiting(
            "installation_suspended",
            None,
            "the GitHub App installation that holds the repository is suspended: unsuspend it on GitHub",
        )
    return None


def _spawn_gates(state: LoopState, live: Sequence[Task], now: datetime) -> Waiting:
    settings = state.settings
    day = gates.local_day(settings, now)
    if state.spawns_left(day) <= 0:
        return Waiting(
            "daily_cap",
            gates.next_local_midnight(settings, now),
            f"today's {settings.daily_spawn_cap} spawns are used ({settings.timezone} day {day})",
        )
    # A local fixture's task holds no slot (`steward.domain.reconcile`), so it is never named here.
    holding = sorted(t.id for t in live if t.status in _SLOTS and t.kind is PlanKind.WORK)
    if len(holding) >= settings.max_parallel:
        return Waiting(
            "max_parallel",
            None,
            f"{len(holding)} of {settings.max_parallel} parallel slots held by {', '.join(holding)}",
        )
    load = pull_request_load(live)
    if len(load) >= settings.max_open_prs:
        named = ", ".join(f"#{t.pr_number}" if t.pr_number else f"{t.id} ({t.status.value})" for t in load)
        return Waiting(
            "review_capacity",
            None,
            f"{len(load)} of {settings.max_open_prs} pull requests await review or are being written: {named}",
        )
    return _next_tick(state)


def _next_tick(state: LoopState) -> Waiting:
    # When the next tick is due: a time already past means due now (the scheduler's rate
    # decides the instant); unknown before the loop's first tick for the user.
    interval = timedelta(seconds=state.settings.interval_seconds)
    # a person's action lets the next tick through the interval: it is due now
    until = (
        None
        if state.last_tick_at is None
        else state.last_tick_at + (timedelta(0) if state.nudged else interval)
    )
    return Waiting("next_tick", until, f"the loop looks every {state.settings.interval_seconds} s")
