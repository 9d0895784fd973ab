"""The plan, item and task lifecycles of docs/concepts/lifecycle.md: the transition functions, the
tables (`steward.domain.lifecycle`) and the code that writes statuses, against each other."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from steward.adapters.dynamo import Tables
from steward.adapters.plan_store import PlanStore, item_link_update, item_reopen_update
from steward.domain import lifecycle
from steward.domain.documents import ParsedItem
from steward.domain.errors import LifecycleError
from steward.domain.ids import item_key
from steward.domain.models import ItemStatus as I
from steward.domain.models import Plan, PlanItem, Task
from steward.domain.models import PlanStatus as P
from steward.domain.models import TaskStatus as T
from steward.domain.plans import merge_items


@pytest.mark.parametrize(
    ("status", "expected"),
    [(P.DRAFT, P.CONFIRMED), (P.AWAITING_CONFIRMATION, P.CONFIRMED), (P.CONFIRMED, P.CONFIRMED)],
)
def test_confirm_allowed(status: P, expected: P) -> None:
    assert lifecycle.confirm(status) is expected


@pytest.mark.parametrize("status", [P.IN_PROGRESS, P.COMPLETED, P.ARCHIVED])
def test_confirm_refused(status: P) -> None:
    with pytest.raises(LifecycleError) as caught:
        lifecycle.confirm(status)
    assert caught.value.status == 409


def test_submit() -> None:
    assert lifecycle.submit(P.DRAFT) is P.AWAITING_CONFIRMATION
    assert lifecycle.submit(P.AWAITING_CONFIRMATION) is P.AWAITING_CONFIRMATION
    for status in (P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED, P.ARCHIVED):
        with pytest.raises(LifecycleError):
            lifecycle.submit(status)


def test_archive_from_any_non_terminal_state() -> None:
    for status in (P.DRAFT, P.AWAITING_CONFIRMATION, P.CONFIRMED, P.IN_PROGRESS, P.ARCHIVED):
        assert lifecycle.archive(status) is P.ARCHIVED
    with pytest.raises(LifecycleError):
        lifecycle.archive(P.COMPLETED)


def test_publish_status() -> None:
    assert lifecycle.after_publish(None, content_changed=True) is P.DRAFT
    for status in P:
        if status is P.ARCHIVED:
            with pytest.raises(LifecycleError):
                lifecycle.after_publish(status, content_changed=False)
            continue
        assert lifecycle.after_publish(status, content_changed=False) is status
    assert lifecycle.after_publish(P.DRAFT, content_changed=True) is P.DRAFT
    for status in (P.AWAITING_CONFIRMATION, P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED):
        assert lifecycle.after_publish(status, content_changed=True) is P.AWAITING_CONFIRMATION


def test_loop_transitions() -> None:
    assert lifecycle.start_work(P.CONFIRMED) is P.IN_PROGRESS
    assert lifecycle.complete(P.IN_PROGRESS) is P.COMPLETED
    for status in (P.DRAFT, P.AWAITING_CONFIRMATION, P.ARCHIVED):
        with pytest.raises(LifecycleError):
            lifecycle.start_work(status)
        with pytest.raises(LifecycleError):
            lifecycle.complete(status)


ALLOWED = {
    (T.QUEUED, T.RUNNING),
    (T.QUEUED, T.FAILED),
    (T.QUEUED, T.CANCELLED),
    (T.RUNNING, T.REVIEW),
    (T.RUNNING, T.MERGED),
    (T.RUNNING, T.CLOSED),
    (T.RUNNING, T.FAILED),
    (T.RUNNING, T.CANCELLED),
    (T.REVIEW, T.MERGED),
    (T.REVIEW, T.CLOSED),
    (T.FAILED, T.REVIEW),
    (T.FAILED, T.MERGED),
    (T.FAILED, T.CLOSED),
    (T.CLOSED, T.REVIEW),  # a person reopened its pull request (never a withdrawn task's)
    (T.CLOSED, T.MERGED),
    (T.RUNNING, T.ANSWERED),  # a follow-up round's commit is on its pull request
}


@pytest.mark.parametrize("current", list(T))
@pytest.mark.parametrize("target", list(T))
def test_task_transitions(current: T, target: T) -> None:
    if current is target or (current, target) in ALLOWED:
        assert lifecycle.task_transition(current, target) is target
    else:
        with pytest.raises(LifecycleError):
            lifecycle.task_transition(current, target)


def test_merged_and_cancelled_are_final() -> None:
    for target in T:
        if target is not T.MERGED:
            with pytest.raises(LifecycleError):
                lifecycle.task_transition(T.MERGED, target)
        if target is not T.CANCELLED:
            with pytest.raises(LifecycleError):
                lifecycle.task_transition(T.CANCELLED, target)


# ---- the transition tables (`PLAN_TRANSITIONS`, `ITEM_TRANSITIONS`, `TASK_TRANSITIONS`)

EXPECTED_PLAN = {
    (P.DRAFT, P.AWAITING_CONFIRMATION),  # submit
    (P.DRAFT, P.CONFIRMED),  # confirm
    (P.AWAITING_CONFIRMATION, P.CONFIRMED),  # confirm
    (P.CONFIRMED, P.AWAITING_CONFIRMATION),  # publish of changed content
    (P.IN_PROGRESS, P.AWAITING_CONFIRMATION),  # publish of changed content
    (P.COMPLETED, P.AWAITING_CONFIRMATION),  # publish of changed content
    (P.CONFIRMED, P.IN_PROGRESS),  # spawn, mark in progress, retry
    (P.COMPLETED, P.IN_PROGRESS),  # retry
    (P.CONFIRMED, P.COMPLETED),  # complete
    (P.IN_PROGRESS, P.COMPLETED),  # complete
    (P.DRAFT, P.ARCHIVED),  # archive
    (P.AWAITING_CONFIRMATION, P.ARCHIVED),
    (P.CONFIRMED, P.ARCHIVED),
    (P.IN_PROGRESS, P.ARCHIVED),
}

EXPECTED_ITEM = {
    (I.PENDING, I.RUNNING),  # spawn, attempt 1 or an explicit retry
    (I.FAILED, I.RUNNING),  # spawn, automatic retry
    (I.FAILED, I.PENDING),  # retry (also: publish, revised)
    (I.CLOSED, I.PENDING),  # retry (also: publish, revised)
    (I.RUNNING, I.PENDING),  # retry with a lost projection (also: publish, revised)
    (I.REVIEW, I.PENDING),  # retry with a lost projection (also: publish, revised)
    (I.MERGED, I.PENDING),  # publish, revised
    (I.RUNNING, I.REVIEW),  # projection
    (I.RUNNING, I.MERGED),
    (I.RUNNING, I.CLOSED),
    (I.RUNNING, I.FAILED),
    (I.FAILED, I.REVIEW),
    (I.FAILED, I.MERGED),
    (I.FAILED, I.CLOSED),
    (I.REVIEW, I.MERGED),
    (I.REVIEW, I.CLOSED),
    (I.CLOSED, I.MERGED),
    (I.CLOSED, I.REVIEW),  # its task's pull request reopened
    (I.PENDING, I.REVIEW),  # projection onto a retried item
    (I.PENDING, I.MERGED),
    (I.PENDING, I.CLOSED),
    (I.PENDING, I.DONE),  # publish: checked (also: revised and checked)
    (I.DONE, I.PENDING),  # publish: unchecked
    (I.RUNNING, I.DONE),  # publish: revised and checked
    (I.REVIEW, I.DONE),
    (I.MERGED, I.DONE),
    (I.CLOSED, I.DONE),
    (I.FAILED, I.DONE),
}


def test_the_plan_table() -> None:
    assert set(lifecycle.PLAN_TRANSITIONS) == EXPECTED_PLAN
    assert {P.DRAFT} == lifecycle.PLAN_INITIAL


def test_the_item_table() -> None:
    assert set(lifecycle.ITEM_TRANSITIONS) == EXPECTED_ITEM
    assert {I.PENDING, I.DONE} == lifecycle.ITEM_INITIAL


def test_the_task_table_is_task_sources() -> None:
    assert set(lifecycle.TASK_TRANSITIONS) == ALLOWED
    assert {(s, t) for t, sources in lifecycle.TASK_SOURCES.items() for s in sources} == ALLOWED
    assert {T.QUEUED} == lifecycle.TASK_INITIAL


def test_no_table_holds_a_same_status_change_and_keeping_a_status_is_allowed() -> None:
    for table in (lifecycle.PLAN_TRANSITIONS, lifecycle.ITEM_TRANSITIONS, lifecycle.TASK_TRANSITIONS):
        assert all(old is not new for old, new in table)
    assert all(lifecycle.plan_change_allowed(s, s) for s in P)
    assert all(lifecycle.item_change_allowed(s, s) for s in I)
    assert all(lifecycle.task_change_allowed(s, s) for s in T)


# Plan operation (a group of PLAN_CHANGES) -> its function in `lifecycle`.
PLAN_FUNCTIONS: dict[str, Callable[[P], P]] = {
    "submit": lifecycle.submit,
    "confirm": lifecycle.confirm,
    "publish": lambda status: lifecycle.after_publish(status, content_changed=True),
    "start_work": lifecycle.start_work,
    "reopen": lifecycle.reopen,
    "complete": lifecycle.complete,
    "archive": lifecycle.archive,
}


@pytest.mark.parametrize("operation", list(PLAN_FUNCTIONS))
def test_every_plan_function_moves_exactly_as_its_table_group_says(operation: str) -> None:
    made: set[tuple[P, P]] = set()
    for status in P:
        try:
            new = PLAN_FUNCTIONS[operation](status)
        except LifecycleError:
            continue
        assert lifecycle.plan_change_allowed(status, new), (operation, status, new)
        if new is not status:
            made.add((status, new))
    assert made == lifecycle.PLAN_CHANGES[operation]


def test_a_publish_without_changes_keeps_the_status() -> None:
    assert lifecycle.after_publish(None, content_changed=True) in lifecycle.PLAN_INITIAL
    for status in set(P) - {P.ARCHIVED}:
        assert lifecycle.after_publish(status, content_changed=False) is status


def test_reopen() -> None:
    for status in (P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED):
        assert lifecycle.reopen(status) is P.IN_PROGRESS
    for status in (P.DRAFT, P.AWAITING_CONFIRMATION, P.ARCHIVED):
        with pytest.raises(LifecycleError):
            lifecycle.reopen(status)


def test_an_archived_plan_never_changes_and_a_completed_one_is_not_archived() -> None:
    for status in P:
        if status is not P.ARCHIVED:
            assert not lifecycle.plan_change_allowed(P.ARCHIVED, status)
    assert not lifecycle.plan_change_allowed(P.COMPLETED, P.ARCHIVED)
    assert not lifecycle.plan_change_allowed(P.AWAITING_CONFIRMATION, P.DRAFT)  # nothing goes back to draft
    assert not lifecycle.plan_change_allowed(P.DRAFT, P.IN_PROGRESS)  # work needs an approval


def _later(status: T) -> set[T]:
    """Every status a task in `status` reaches by one or more transitions."""
    seen: set[T] = set()
    frontier = {status}
    while frontier:
        frontier = {b for a, b in lifecycle.TASK_TRANSITIONS if a in frontier} - seen
        seen |= frontier
    return seen


def test_the_projection_of_every_task_change_is_an_item_change() -> None:
    for old, new in lifecycle.TASK_TRANSITIONS:
        assert lifecycle.item_change_allowed(lifecycle.ITEM_STATUS_OF[old], lifecycle.ITEM_STATUS_OF[new])


def test_the_projection_group_is_exactly_the_task_changes_with_lost_projections() -> None:
    """An item shows its task's status, or an earlier one when projections were lost (each
    is its own write after the task's change); a retried item (pending) shows none. The
    projection then writes the task's status now: nothing more is in the groups."""
    of = lifecycle.ITEM_STATUS_OF
    skipped = {(of[a], of[b]) for a in T for b in _later(a) if of[a] is not of[b]}
    assert skipped == lifecycle.ITEM_CHANGES["project"]
    retried = {(I.PENDING, of[b]) for r in lifecycle.RETRYABLE_TASK_STATUSES for b in _later(r)}
    assert retried == lifecycle.ITEM_CHANGES["project_retried"]
    shown_by_a_retryable_task = {
        of[a] for r in lifecycle.RETRYABLE_TASK_STATUSES for a in T if a is r or r in _later(a)
    }
    assert {(s, I.PENDING) for s in shown_by_a_retryable_task} == lifecycle.ITEM_CHANGES["retry"]


def test_item_changes_outside_the_table() -> None:
    never = [
        (I.MERGED, I.RUNNING),  # a merged item's task is final; only a new revision works again
        (I.MERGED, I.REVIEW),  # its task never goes back
        (I.MERGED, I.CLOSED),
        (I.REVIEW, I.FAILED),
        (I.REVIEW, I.RUNNING),  # no new attempt while a pull request waits
        (I.PENDING, I.FAILED),  # a pending item's task (if any) is retried, never re-failed
        (I.DONE, I.RUNNING),  # done by hand never spawns
        (I.DONE, I.MERGED),  # a done item has no task
    ]
    for old, new in never:
        assert not lifecycle.item_change_allowed(old, new), (old, new)


def test_removed_is_never_a_stored_status() -> None:
    """Deleting a checkbox sets the item's `removed` flag; its status stays what it was."""
    for status in I:
        if status is not I.REMOVED:
            assert not lifecycle.item_change_allowed(status, I.REMOVED)
            assert not lifecycle.item_change_allowed(I.REMOVED, status)
    assert I.REMOVED not in lifecycle.ITEM_INITIAL


def test_task_changes_outside_the_table() -> None:
    for old, new in [
        (T.MERGED, T.RUNNING),
        (T.MERGED, T.REVIEW),
        (T.REVIEW, T.FAILED),
        (T.REVIEW, T.RUNNING),
        (T.CANCELLED, T.REVIEW),  # a cancelled task keeps nothing it published
        (T.FAILED, T.RUNNING),  # a retry is a new task
        (T.QUEUED, T.REVIEW),
    ]:
        assert not lifecycle.task_change_allowed(old, new), (old, new)


# ---- what the code that writes statuses does, against the tables

PLAN_ID = "p1"


def _parsed(title: str, *, checked: bool = False, ordinal: int = 1) -> ParsedItem:
    return ParsedItem(ordinal=ordinal, line=ordinal, checked=checked, title=title, details="")


def _stored(title: str, status: I, *, task: bool, removed: bool = False) -> PlanItem:
    parsed = _parsed(title)
    return PlanItem(
        key=item_key(PLAN_ID, parsed.text_hash, 0),
        ordinal=1,
        title=title,
        text_hash=parsed.text_hash,
        checked=status is I.DONE,
        status=status,
        task_id="t-old" if task else None,
        attempt=1 if task else 0,
        removed=removed,
        removed_at=datetime(2024, 1, 1, tzinfo=UTC) if removed else None,
    )


# Every stored item a publish may meet: statuses with a task, and pending (a retried item)
# with one; pending and done without one; any of them removed.
OLD_ITEMS = [
    (status, task, removed)
    for status, task in [
        (I.PENDING, False),
        (I.DONE, False),
        (I.PENDING, True),  # retried
        *((status, True) for status in (I.RUNNING, I.REVIEW, I.MERGED, I.CLOSED, I.FAILED)),
    ]
    for removed in (False, True)
    if task or not removed  # a removed item is kept only while it has a task
]


def _after_publish(status: I, task: bool, removed: bool, edited: bool, checked: bool) -> I:
    old = _stored("write the parser", status, task=task, removed=removed)
    new: tuple[ParsedItem, ...]
    if removed:
        # A removed item comes back by its exact text; it is never edited in place.
        new = (
            _parsed("an unrelated item", ordinal=1),
            _parsed("write the parser", checked=checked, ordinal=2),
        )
    else:
        title = "write the parser, then its tests" if edited else "write the parser"
        new = (_parsed(title, checked=checked, ordinal=1),)
    merged = merge_items(PLAN_ID, [old], new).items
    for fresh in (i for i in merged if i.key != old.key):
        assert fresh.status in lifecycle.ITEM_INITIAL
    return next(i for i in merged if i.key == old.key).status


def test_the_item_changes_of_a_publish_are_exactly_its_table_groups() -> None:
    made: set[tuple[I, I]] = set()
    for status, task, removed in OLD_ITEMS:
        for edited in (False, True):
            for checked in (False, True):
                after = _after_publish(status, task, removed, edited, checked)
                assert lifecycle.item_change_allowed(status, after), (status, task, removed, edited, checked)
                if after is not status:
                    made.add((status, after))
    assert made == lifecycle.ITEM_CHANGES["checkbox"] | lifecycle.ITEM_CHANGES["revise"]


def test_deleting_a_checkbox_keeps_its_status() -> None:
    old = _stored("write the parser", I.RUNNING, task=True)
    kept = _stored("write the docs", I.PENDING, task=False)
    merged = merge_items(PLAN_ID, [old, kept], (_parsed("write the docs"),)).items
    gone = next(i for i in merged if i.key == old.key)
    assert (gone.removed, gone.status, gone.shown_status) == (True, I.RUNNING, I.REMOVED)


class _NoClient:
    class meta:
        client = None


def _task(status: T = T.FAILED) -> Task:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    return Task(
        id="t1",
        user="u1",
        plan_id=PLAN_ID,
        plan_slug="plan",
        item_key="k1",
        ordinal=1,
        revision=1,
        attempt=1,
        status=status,
        branch="steward/1",
        repo="o/r",
        model="m",
        budget_usd=Decimal("1"),
        title="t",
        created_at=now,
        updated_at=now,
    )


def _condition_statuses(update: dict[str, Any], names: tuple[str, ...]) -> set[str]:
    """The statuses among `names` that the update's condition mentions."""
    return {update["ExpressionAttributeValues"][n] for n in names if n in update["ConditionExpression"]}


def test_the_spawn_and_retry_conditions_match_the_tables() -> None:
    tables = Tables(_NoClient(), "x-")  # type: ignore[arg-type]
    now = datetime(2024, 1, 1, tzinfo=UTC)
    plan_names = (":confirmed", ":in_progress", ":completed")
    for previous in (None, "t0"):
        spawn = item_link_update(tables, _task(), previous_task_id=previous, now=now)
        assert spawn["ExpressionAttributeValues"][":in_progress"] == P.IN_PROGRESS
        started = {s for s, _ in lifecycle.PLAN_CHANGES["start_work"]}
        assert _condition_statuses(spawn, plan_names) == started | {P.IN_PROGRESS}
    first = item_link_update(tables, _task(), previous_task_id=None, now=now)
    assert _condition_statuses(first, (":pending",)) == {I.PENDING}
    assert (I.PENDING, I.RUNNING) in lifecycle.ITEM_CHANGES["spawn"]

    reopen = item_reopen_update(tables, _task(), now=now)
    assert reopen["ExpressionAttributeValues"][":pending"] == I.PENDING
    reopened = {s for s, _ in lifecycle.PLAN_CHANGES["reopen"]}
    assert _condition_statuses(reopen, plan_names) == reopened | {P.IN_PROGRESS}


def _plan(status: P) -> Plan:
    now = datetime(2024, 1, 1, tzinfo=UTC)
    approved = status in (P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED)
    return Plan(
        id=PLAN_ID,
        user="u1",
        slug="plan",
        status=status,
        repo="o/r",
        title=None,
        front_matter={},
        content_hash="c1",
        approved_hash="c1" if approved else None,
        items=(),
        created_at=now,
        updated_at=now,
    )


STORE_OPERATIONS: dict[str, Callable[[PlanStore, Plan, datetime], object]] = {
    "submit": lambda store, plan, now: store.submit(plan.user, plan.slug, now=now),
    "confirm": lambda store, plan, now: store.confirm(plan.user, plan.slug, content_hash=None, now=now),
    "archive": lambda store, plan, now: store.archive(plan.user, plan.slug, now=now),
    "start_work": lambda store, plan, now: store.mark_in_progress(plan.user, plan.slug, now=now),
    "complete": lambda store, plan, now: store.complete(plan.user, plan.slug, version=plan.version, now=now),
}


@pytest.mark.parametrize("operation", list(STORE_OPERATIONS))
def test_the_plan_store_moves_exactly_as_the_plan_table_says(tables: Tables, operation: str) -> None:
    store = PlanStore(tables)
    now = datetime(2024, 1, 2, tzinfo=UTC)
    made: set[tuple[P, P]] = set()
    for status in P:
        stored = store.save(
            _plan(status).model_copy(update={"slug": f"plan-{status.value}"}), expected_version=None
        )
        with contextlib.suppress(LifecycleError):
            STORE_OPERATIONS[operation](store, stored, now)
        after = store.require(stored.user, stored.slug).status
        if after is not status:
            made.add((status, after))
    assert made == lifecycle.PLAN_CHANGES[operation]


# ---- a person's cancel: cancelled while queued or running, withdrawn in review


@pytest.mark.parametrize(
    ("status", "reason", "target"),
    [
        (T.QUEUED, None, T.CANCELLED),
        (T.RUNNING, None, T.CANCELLED),
        (T.CANCELLED, "cancelled by user", T.CANCELLED),  # a replay
        (T.REVIEW, None, T.CLOSED),  # withdrawn
        (T.CLOSED, lifecycle.WITHDRAWN, T.CLOSED),  # a replay of the withdrawal
    ],
)
def test_cancel_targets(status: T, reason: str | None, target: T) -> None:
    assert lifecycle.cancel_target(status, reason=reason) is target
    assert lifecycle.task_change_allowed(status, target)  # every one is a pair of the task table


@pytest.mark.parametrize(
    ("status", "reason", "says"),
    [
        (T.MERGED, None, "merged"),
        (T.CLOSED, None, "closed on GitHub"),  # a person closed the pull request: nothing to withdraw
        (T.FAILED, "retryable", "retry"),
    ],
)
def test_cancel_refusals_say_why(status: T, reason: str | None, says: str) -> None:
    with pytest.raises(LifecycleError, match=says) as refused:
        lifecycle.cancel_target(status, reason=reason)
    assert refused.value.status == 409


def test_a_withdrawn_task_may_still_be_merged_and_is_never_reopened() -> None:
    assert lifecycle.task_change_allowed(T.CLOSED, T.MERGED)  # a person merged it anyway
    # a person's reopen brings a closed task back to review, never one Steward withdrew
    assert lifecycle.follows_reopen(T.CLOSED, None)
    assert not lifecycle.follows_reopen(T.CLOSED, lifecycle.WITHDRAWN)
    assert not any(lifecycle.follows_reopen(s, None) for s in T if s is not T.CLOSED)
    assert T.CLOSED in lifecycle.RETRYABLE_TASK_STATUSES  # the item may be retried afresh
