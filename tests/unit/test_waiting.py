"""Why an item or a task waits, for every gate the loop applies (issue "the person's view",
point 4): each case is one line of data, the reason and its `until` what a person is shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from steward.domain.installations import Installation
from steward.domain.loop import LoopSettings, LoopState, QuietHours
from steward.domain.models import ItemStatus, PlanKind, PlanStatus, TaskStatus
from steward.domain.waiting import WaitingView, for_item, for_task

from tests.unit.test_reconcile import NOW, item, make_plan, running, task_of, with_item

TICKED = NOW - timedelta(seconds=20)


def state(**settings: Any) -> LoopState:
    spawned = settings.pop("spawned", 0)
    return LoopState(
        user="alice",
        settings=LoopSettings(**settings),
        last_tick_at=TICKED,
        spawn_day=NOW.date().isoformat(),
        spawn_count=spawned,
    )


# (loop settings and counters, reason, until); the plan is confirmed with item 1 pending.
GATES: list[tuple[dict[str, Any], str, datetime | None]] = [
    ({"enabled": False}, "disabled", None),
    ({"paused": True}, "paused", None),
    (
        {"quiet_hours": QuietHours(start="11:00", end="13:30"), "timezone": "UTC"},
        "quiet_hours",
        datetime(2026, 6, 1, 13, 30, tzinfo=UTC),
    ),
    (
        {"quiet_hours": QuietHours(start="20:00", end="22:00"), "timezone": "Asia/Tokyo"},  # 21:00 there
        "quiet_hours",
        datetime(2026, 6, 1, 13, 0, tzinfo=UTC),
    ),
    ({"daily_spawn_cap": 2, "spawned": 2}, "daily_cap", datetime(2026, 6, 2, tzinfo=UTC)),
    (
        {"daily_spawn_cap": 2, "spawned": 2, "timezone": "America/New_York"},
        "daily_cap",
        datetime(2026, 6, 2, 4, tzinfo=UTC),
    ),
    ({"interval_seconds": 60}, "next_tick", TICKED + timedelta(seconds=60)),
    ({"interval_seconds": 5}, "next_tick", TICKED + timedelta(seconds=5)),  # past: due now
]


@pytest.mark.parametrize(("settings", "reason", "until"), GATES)
def test_a_pending_item_says_which_gate_holds_it(
    settings: dict[str, Any], reason: str, until: datetime | None
) -> None:
    plan = make_plan("A", "B")
    waits = for_item(plan, item(plan, 1), state(**settings), [], NOW)
    assert waits is not None
    assert (waits.reason, waits.until) == (reason, until)
    assert waits.detail
    shown = waits.to_api()
    assert shown["reason"] == reason
    assert shown["until"] == (None if until is None else until.isoformat().replace("+00:00", "Z"))


def test_a_paused_loop_names_the_command_that_resumes_it() -> None:
    plan = make_plan("A")
    waits = for_item(plan, item(plan, 1), state(paused=True), [], NOW)
    assert waits is not None
    assert waits.detail == "the loop is paused: `steward loop resume`"  # the README's command


def test_max_parallel_names_the_tasks_that_hold_the_slots() -> None:
    plan = make_plan("A", "B", "C")
    plan, first = running(plan, 1)
    plan, second = running(plan, 2)
    waits = for_item(plan, item(plan, 3), state(max_parallel=2), [first, second], NOW)
    assert waits is not None
    assert (waits.reason, waits.until) == ("max_parallel", None)
    assert first.id in waits.detail
    assert second.id in waits.detail
    review = second.model_copy(update={"status": TaskStatus.REVIEW})  # review holds no slot
    assert for_item(plan, item(plan, 3), state(max_parallel=2), [first, review], NOW).reason == "next_tick"  # type: ignore[union-attr]


def test_changed_content_waits_for_confirmation_before_any_loop_gate() -> None:
    plan = make_plan("A", status=PlanStatus.AWAITING_CONFIRMATION)
    waits = for_item(plan, item(plan, 1), state(paused=True), [], NOW)
    assert waits is not None
    assert (waits.reason, waits.until) == ("awaiting_confirmation", None)


def test_a_suspended_installation_holds_the_plans_items() -> None:
    plan = make_plan("A")
    suspended = Installation(installation_id=7, repositories=(plan.repo,), suspended=True)
    view = WaitingView(state(), [], [suspended], NOW)
    waits = for_item(
        plan, item(plan, 1), view.state, view.live, NOW, installation_suspended=view.suspended(plan.repo)
    )
    assert waits is not None
    assert waits.reason == "installation_suspended"
    live = suspended.model_copy(update={"suspended": False})
    assert not WaitingView(state(), [], [suspended, live], NOW).suspended(plan.repo)
    assert not WaitingView(state(), [], [], NOW).suspended(plan.repo)


@pytest.mark.parametrize(
    "status", [ItemStatus.RUNNING, ItemStatus.REVIEW, ItemStatus.MERGED, ItemStatus.FAILED, ItemStatus.DONE]
)
def test_items_at_work_or_finished_do_not_wait(status: ItemStatus) -> None:
    plan = with_item(make_plan("A"), 1, status=status)
    assert for_item(plan, item(plan, 1), state(paused=True), [], NOW) is None


@pytest.mark.parametrize("status", [PlanStatus.DRAFT, PlanStatus.ARCHIVED, PlanStatus.COMPLETED])
def test_plans_that_owe_no_work_have_no_waiting_items(status: PlanStatus) -> None:
    plan = make_plan("A", status=status)
    if status is PlanStatus.DRAFT:
        assert for_item(plan, item(plan, 1), state(), [], NOW).reason == "awaiting_confirmation"  # type: ignore[union-attr]
    else:
        assert for_item(plan, item(plan, 1), state(), [], NOW) is None


def test_only_a_queued_task_not_yet_launched_waits_on_the_loop() -> None:
    plan = make_plan("A")
    queued = task_of(plan, 1, status=TaskStatus.QUEUED, launched=False)
    waits = for_task(queued, state(paused=True), [queued], NOW)
    assert waits is not None
    assert waits.reason == "paused"
    assert for_task(queued, state(), [queued], NOW).reason == "next_tick"  # type: ignore[union-attr]
    for task in (
        task_of(plan, 1, status=TaskStatus.QUEUED),
        task_of(plan, 1),
        task_of(plan, 1, status=TaskStatus.REVIEW),
    ):
        assert for_task(task, state(paused=True), [task], NOW) is None


def test_a_local_fixtures_task_holds_no_slot_in_the_reason_shown() -> None:
    plan, work = running(make_plan("A", "B"), 1)
    relay, fixture = running(
        make_plan("Relay", slug="capability-1").model_copy(update={"kind": PlanKind.FIXTURE}), 1
    )
    assert fixture.kind is PlanKind.FIXTURE
    waits = for_item(plan, item(plan, 2), state(max_parallel=1), [fixture], NOW)
    assert waits is not None
    assert waits.reason == "next_tick"
    held = for_item(plan, item(plan, 2), state(max_parallel=1), [fixture, work], NOW)
    assert held is not None
    assert held.reason == "max_parallel"
    assert fixture.id not in held.detail
    assert for_item(relay, item(relay, 1), state(), [fixture], NOW) is None  # its own item runs


def test_an_item_whose_task_just_spawned_does_not_wait_on_the_slot_it_holds() -> None:
    """The API reads the plan, then the live tasks: a spawn between the two reads shows the
    item pending while its own new task is live. It is not waiting (least of all on itself)."""
    plan = make_plan("A", "B")
    own = task_of(plan, 1, status=TaskStatus.QUEUED, launched=False)
    assert for_item(plan, item(plan, 1), state(max_parallel=1), [own], NOW) is None
    waits = for_item(plan, item(plan, 2), state(max_parallel=1), [own], NOW)
    assert waits is not None
    assert waits.reason == "max_parallel"


def test_a_withdrawn_task_waits_for_the_loop_to_close_its_pull_request() -> None:
    plan = make_plan("A")
    closing = task_of(plan, 1, status=TaskStatus.CLOSED).model_copy(
        update={"reason": "withdrawn", "pr_close_pending": True}
    )
    waits = for_task(closing, state(interval_seconds=60), [closing], NOW)
    assert waits is not None
    assert (waits.reason, waits.until) == ("next_tick", TICKED + timedelta(seconds=60))
    assert "closes its pull request" in waits.detail
    paused = for_task(closing, state(paused=True), [closing], NOW)
    assert paused is not None
    assert paused.reason == "paused"
    closed = closing.model_copy(update={"pr_close_pending": False})
    assert for_task(closed, state(), [], NOW) is None


def test_review_capacity_names_the_pull_requests_awaiting_review() -> None:
    plan = make_plan("A", "B")
    plan, first = running(plan, 1)
    waiting_review = first.model_copy(update={"status": TaskStatus.REVIEW, "pr_number": 7})
    waits = for_item(plan, item(plan, 2), state(max_open_prs=1), [waiting_review], NOW)
    assert waits is not None
    assert (waits.reason, waits.until) == ("review_capacity", None)
    assert "#7" in waits.detail
    assert for_item(plan, item(plan, 2), state(max_open_prs=2), [waiting_review], NOW).reason == "next_tick"  # type: ignore[union-attr]
