"""`reconcile` is pure: each rule of the loop checked on hand-built desired/observed state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from steward.domain.documents import parse_document
from steward.domain.models import ItemStatus, Plan, PlanItem, PlanKind, PlanStatus, Task, TaskStatus
from steward.domain.plans import publish
from steward.domain.reconcile import (
    Cancel,
    ClosePull,
    CompletePlan,
    Launch,
    MarkInProgress,
    Policy,
    RepairItem,
    Spawn,
    reconcile,
)
from steward.domain.tasks import task_for

from tests.support.documents import document

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
OPEN = Policy(max_parallel=10, spawns_left=100)


def make_plan(
    *titles: str,
    status: PlanStatus = PlanStatus.CONFIRMED,
    slug: str = "p",
    max_attempts: int = 3,
    age: int = 0,
) -> Plan:
    markdown = document(*titles).replace("checks:", f"max_attempts: {max_attempts}\nchecks:")
    plan = publish(
        None,
        plan_id=f"id-{slug}",
        user="alice",
        slug=slug,
        document=parse_document(markdown),
        now=NOW - timedelta(minutes=age),
    ).plan
    approved = (
        plan.content_hash if status not in (PlanStatus.DRAFT, PlanStatus.AWAITING_CONFIRMATION) else None
    )
    return plan.model_copy(update={"status": status, "approved_hash": approved})


def with_item(plan: Plan, ordinal: int, **changes: object) -> Plan:
    items = tuple(
        i.model_copy(update=changes) if i.ordinal == ordinal and not i.removed else i for i in plan.items
    )
    return plan.model_copy(update={"items": items})


def item(plan: Plan, ordinal: int) -> PlanItem:
    return next(i for i in plan.active_items if i.ordinal == ordinal)


def task_of(
    plan: Plan,
    ordinal: int,
    *,
    status: TaskStatus = TaskStatus.RUNNING,
    attempt: int = 1,
    launched: bool = True,
) -> Task:
    task = task_for(plan, item(plan, ordinal), attempt=attempt, now=NOW)
    return task.model_copy(update={"status": status, "launched_at": NOW if launched else None})


def running(plan: Plan, ordinal: int, attempt: int = 1) -> tuple[Plan, Task]:
    task = task_of(plan, ordinal, attempt=attempt)
    return with_item(plan, ordinal, status=ItemStatus.RUNNING, task_id=task.id, attempt=attempt), task


def spawns(decision_actions: tuple[object, ...]) -> list[Spawn]:
    return [a for a in decision_actions if isinstance(a, Spawn)]


def test_confirmed_plan_spawns_every_pending_item_in_order() -> None:
    plan = make_plan("A", "B", "C")
    decision = reconcile([plan], [], NOW, OPEN)
    assert [(s.item_key, s.attempt, s.previous_task_id) for s in spawns(decision.actions)] == [
        (item(plan, n).key, 1, None) for n in (1, 2, 3)
    ]
    assert decision.live_work


@pytest.mark.parametrize("status", [PlanStatus.DRAFT, PlanStatus.AWAITING_CONFIRMATION, PlanStatus.COMPLETED])
def test_unapproved_or_finished_plans_get_no_action(status: PlanStatus) -> None:
    decision = reconcile([make_plan("A", status=status)], [], NOW, OPEN)
    assert decision.actions == ()
    assert not decision.live_work


def test_edited_but_not_reapproved_content_spawns_nothing() -> None:
    plan = make_plan("A").model_copy(update={"approved_hash": "0" * 64})
    assert spawns(reconcile([plan], [], NOW, OPEN).actions) == []


def test_done_and_removed_items_never_spawn() -> None:
    plan = make_plan("[x] A", "B")
    plan = with_item(plan, 2, removed=True)
    decision = reconcile([plan], [], NOW, OPEN)
    assert spawns(decision.actions) == []
    assert decision.actions == (CompletePlan(plan.slug, plan.version),)


def test_running_items_do_not_respawn_and_mark_in_progress() -> None:
    plan, task = running(make_plan("A", "B"), 1)
    decision = reconcile([plan], [task], NOW, Policy(max_parallel=10, spawns_left=10))
    assert [s.item_key for s in spawns(decision.actions)] == [item(plan, 2).key]
    assert MarkInProgress(plan.slug) in decision.actions


def test_max_parallel_counts_queued_and_running_tasks() -> None:
    plan, task = running(make_plan("A", "B", "C"), 1)
    decision = reconcile([plan], [task], NOW, Policy(max_parallel=2, spawns_left=10))
    assert len(spawns(decision.actions)) == 1
    assert len(decision.waiting) == 1
    assert not decision.blocked_by_cap  # a slot frees when the task finishes (an event)


def test_review_tasks_do_not_occupy_a_slot() -> None:
    plan, task = running(make_plan("A", "B"), 1)
    plan = with_item(plan, 1, status=ItemStatus.REVIEW)
    task = task.model_copy(update={"status": TaskStatus.REVIEW})
    decision = reconcile([plan], [task], NOW, Policy(max_parallel=1, spawns_left=10))
    assert len(spawns(decision.actions)) == 1


def test_daily_cap_limits_spawns_and_marks_the_tick_due_tomorrow() -> None:
    decision = reconcile([make_plan("A", "B", "C")], [], NOW, Policy(max_parallel=10, spawns_left=1))
    assert len(spawns(decision.actions)) == 1
    assert decision.blocked_by_cap
    exhausted = reconcile([make_plan("A")], [], NOW, Policy(max_parallel=10, spawns_left=0))
    assert spawns(exhausted.actions) == []
    assert exhausted.blocked_by_cap


def test_retryable_failure_retries_with_next_attempt_within_max_attempts() -> None:
    plan, task = running(make_plan("A", max_attempts=3), 1)
    failed = with_item(plan, 1, status=ItemStatus.FAILED, last_classification="retryable")
    [retry] = spawns(reconcile([failed], [], NOW, OPEN).actions)
    assert (retry.attempt, retry.previous_task_id) == (2, task.id)

    last = with_item(failed, 1, attempt=3)
    decision = reconcile([last], [], NOW, OPEN)
    assert spawns(decision.actions) == []
    assert decision.actions == (CompletePlan(last.slug, last.version),)


def test_final_failure_is_not_retried() -> None:
    plan, _ = running(make_plan("A"), 1)
    failed = with_item(plan, 1, status=ItemStatus.FAILED, last_classification="final")
    assert reconcile([failed], [], NOW, OPEN).actions == (CompletePlan(failed.slug, failed.version),)


def test_explicit_retry_request_spawns_beyond_max_attempts() -> None:
    plan, task = running(make_plan("A", max_attempts=1), 1)
    requested = with_item(plan, 1, status=ItemStatus.PENDING, retry_requested=True)
    [retry] = spawns(reconcile([requested], [], NOW, OPEN).actions)
    assert (retry.attempt, retry.previous_task_id) == (2, task.id)


def test_archived_plan_cancels_its_live_tasks_only() -> None:
    archived, t1 = running(make_plan("A", slug="old", status=PlanStatus.IN_PROGRESS), 1)
    archived = archived.model_copy(update={"status": PlanStatus.ARCHIVED})
    other, t2 = running(make_plan("B", slug="other", status=PlanStatus.IN_PROGRESS), 1)
    decision = reconcile([archived, other], [t1, t2], NOW, OPEN)
    assert [a for a in decision.actions if isinstance(a, Cancel)] == [Cancel(t1.id, "plan archived")]
    assert decision.live_work


def test_plan_completes_when_every_item_is_finished_and_no_task_lives() -> None:
    plan = make_plan("A", "B", "C", "D", status=PlanStatus.IN_PROGRESS)
    for n, status in ((1, ItemStatus.MERGED), (2, ItemStatus.CLOSED), (3, ItemStatus.DONE)):
        plan = with_item(plan, n, status=status, task_id=f"t{n}")
    plan = with_item(plan, 4, removed=True)
    assert reconcile([plan], [], NOW, OPEN).actions == (CompletePlan(plan.slug, plan.version),)


def test_plan_with_an_item_in_review_is_not_complete() -> None:
    plan, task = running(make_plan("A", status=PlanStatus.IN_PROGRESS), 1)
    plan = with_item(plan, 1, status=ItemStatus.REVIEW)
    review = task.model_copy(update={"status": TaskStatus.REVIEW})
    assert reconcile([plan], [review], NOW, OPEN).actions == ()


def test_the_brake_holds_every_spawn_but_not_launches_and_keeps_the_loop_looking() -> None:
    plan, _ = running(make_plan("A", "B", "C"), 1)
    queued = task_of(plan, 1, status=TaskStatus.QUEUED, launched=False)
    braked = Policy(max_parallel=10, spawns_left=100, spawning_stopped=True)
    decision = reconcile([plan], [queued], NOW, braked)
    assert spawns(decision.actions) == []
    assert Launch(queued.id) in decision.actions  # already spawned: its launch is not a new spawn
    assert [s.item_key for s in decision.waiting] == [item(plan, 2).key, item(plan, 3).key]
    assert not decision.blocked_by_cap  # it waits for an operator, not for tomorrow
    assert not decision.settles  # a release advances no watermark: the next tick looks again
    released = reconcile([plan], [queued], NOW, OPEN)
    assert len(spawns(released.actions)) == 2
    assert released.settles


def test_queued_task_not_yet_launched_is_launched() -> None:
    plan, _ = running(make_plan("A"), 1)
    task = task_of(plan, 1, status=TaskStatus.QUEUED, launched=False)
    assert Launch(task.id) in reconcile([plan], [task], NOW, OPEN).actions
    launched = task.model_copy(update={"launched_at": NOW})
    assert all(not isinstance(a, Launch) for a in reconcile([plan], [launched], NOW, OPEN).actions)


@pytest.mark.parametrize("shown", [ItemStatus.RUNNING, ItemStatus.REVIEW])
def test_item_whose_task_is_no_longer_live_is_repaired(shown: ItemStatus) -> None:
    """The item still shows its task running or in review, but the task finished (failed,
    merged, closed) and the projection of that change was lost: the loop copies it over,
    else the plan would wait forever for an item nobody will move."""
    plan, task = running(make_plan("A", status=PlanStatus.IN_PROGRESS), 1)
    plan = with_item(plan, 1, status=shown, task_id=task.id)
    decision = reconcile([plan], [], NOW, OPEN)
    assert decision.actions == (RepairItem(plan.slug, task.id),)
    assert not decision.settles  # the next tick must look again, though no event happened


def test_an_item_in_review_with_its_task_in_review_needs_no_repair() -> None:
    plan, task = running(make_plan("A", status=PlanStatus.IN_PROGRESS), 1)
    plan = with_item(plan, 1, status=ItemStatus.REVIEW, task_id=task.id)
    reviewed = task.model_copy(update={"status": TaskStatus.REVIEW})
    decision = reconcile([plan], [reviewed], NOW, OPEN)
    assert decision.actions == ()
    assert decision.settles


def test_completing_the_last_plan_ends_the_users_live_work() -> None:
    plan = with_item(make_plan("A", status=PlanStatus.IN_PROGRESS), 1, status=ItemStatus.MERGED, task_id="t1")
    decision = reconcile([plan], [], NOW, OPEN)
    assert decision.actions == (CompletePlan(plan.slug, plan.version),)
    assert not decision.live_work
    assert decision.settles


def test_older_plans_spawn_first_when_slots_are_scarce() -> None:
    young = make_plan("Young", slug="young", age=0)
    old = make_plan("Old", slug="old", age=60)
    [first] = spawns(reconcile([young, old], [], NOW, Policy(max_parallel=1, spawns_left=5)).actions)
    assert first.plan_slug == "old"


def test_same_inputs_same_actions() -> None:
    plan, task = running(make_plan("A", "B", "C"), 2)
    assert reconcile([plan], [task], NOW, OPEN) == reconcile([plan], [task], NOW, OPEN)


@given(
    statuses=st.lists(st.sampled_from(list(ItemStatus)), min_size=1, max_size=8),
    max_parallel=st.integers(1, 5),
    spawns_left=st.integers(0, 5),
    live=st.integers(0, 5),
)
def test_spawn_count_never_exceeds_slots_or_cap(
    statuses: list[ItemStatus], max_parallel: int, spawns_left: int, live: int
) -> None:
    plan = make_plan(*[f"Item {n}" for n in range(len(statuses))])
    for n, status in enumerate(statuses, start=1):
        if status not in (ItemStatus.PENDING, ItemStatus.REMOVED):
            plan = with_item(
                plan, n, status=status, task_id=f"t{n}", attempt=1, last_classification="retryable"
            )
    filler = make_plan("filler", slug="filler", status=PlanStatus.IN_PROGRESS)
    tasks = [task_of(filler, 1, attempt=a + 1) for a in range(live)]
    decision = reconcile([plan], tasks, NOW, Policy(max_parallel=max_parallel, spawns_left=spawns_left))
    made = spawns(decision.actions)
    assert len(made) <= max(0, min(max_parallel - live, spawns_left))
    assert len({(s.item_key, s.attempt) for s in made}) == len(made)


def reapproved(plan: Plan, *titles: str, status: PlanStatus = PlanStatus.IN_PROGRESS) -> Plan:
    """`plan` republished with `titles` (as the publish rules merge it) and confirmed again."""
    after = publish(
        plan,
        plan_id=plan.id,
        user=plan.user,
        slug=plan.slug,
        document=parse_document(document(*titles)),
        now=NOW,
    ).plan
    approved = after.content_hash if status in (PlanStatus.CONFIRMED, PlanStatus.IN_PROGRESS) else None
    return after.model_copy(update={"status": status, "approved_hash": approved})


# (case, status of the revision-1 task, the republished titles, status after the republish,
#  whether the old task is cancelled as superseded)
SUPERSEDE_CASES = [
    (
        "queued task, item edited and confirmed",
        TaskStatus.QUEUED,
        ("Edited", "Other"),
        PlanStatus.CONFIRMED,
        True,
    ),
    (
        "running task, item edited and confirmed",
        TaskStatus.RUNNING,
        ("Edited", "Other"),
        PlanStatus.CONFIRMED,
        True,
    ),
    (
        "running task, edit confirmed while in progress",
        TaskStatus.RUNNING,
        ("Edited", "Other"),
        PlanStatus.IN_PROGRESS,
        True,
    ),
    (
        "review task keeps its pull request",
        TaskStatus.REVIEW,
        ("Edited", "Other"),
        PlanStatus.CONFIRMED,
        False,
    ),
    (
        "edit not confirmed yet",
        TaskStatus.RUNNING,
        ("Edited", "Other"),
        PlanStatus.AWAITING_CONFIRMATION,
        False,
    ),
    ("item only moved", TaskStatus.RUNNING, ("Other", "Original"), PlanStatus.CONFIRMED, False),
    ("checkbox deleted: its task runs on", TaskStatus.RUNNING, ("Other",), PlanStatus.CONFIRMED, False),
]


@pytest.mark.parametrize(
    ("case", "old_status", "titles", "status", "cancelled"),
    SUPERSEDE_CASES,
    ids=[c[0] for c in SUPERSEDE_CASES],
)
def test_a_live_task_of_a_superseded_revision_is_cancelled_while_queued_or_running(
    case: str, old_status: TaskStatus, titles: tuple[str, ...], status: PlanStatus, cancelled: bool
) -> None:
    plan, task = running(make_plan("Original", "Other", status=PlanStatus.IN_PROGRESS), 1)
    old = task.model_copy(update={"status": old_status})
    if old_status is TaskStatus.REVIEW:
        plan = with_item(plan, 1, status=ItemStatus.REVIEW)
    after = reapproved(plan, *titles, status=status)
    decision = reconcile([after], [old], NOW, OPEN)
    cancels = [a for a in decision.actions if isinstance(a, Cancel)]
    assert cancels == ([Cancel(old.id, "superseded")] if cancelled else []), case
    edited = status in (PlanStatus.CONFIRMED, PlanStatus.IN_PROGRESS) and "Edited" in titles
    new_revision = [
        (s.revision, s.attempt, s.previous_task_id, s.supersedes)
        for s in spawns(decision.actions)
        if s.item_key == old.item_key
    ]
    # an approved new revision spawns whatever became of the old task, naming it to be fenced
    assert new_revision == ([(2, 1, None, old.id)] if edited else []), case


def fixture(plan: Plan) -> Plan:
    """`plan` as `steward local capability` makes it (`PlanKind.FIXTURE`)."""
    return plan.model_copy(update={"kind": PlanKind.FIXTURE})


def test_a_local_fixture_holds_no_slot_and_is_never_launched_retried_or_completed() -> None:
    fixture_plan, fixture_task = running(fixture(make_plan("Relay", slug="capability-1")), 1)
    assert fixture_task.kind is PlanKind.FIXTURE  # spawned from a fixture plan: a fixture task
    work = make_plan("Real work", slug="work", age=-1)
    decision = reconcile([fixture_plan, work], [fixture_task], NOW, Policy(max_parallel=1, spawns_left=1))
    assert [(s.plan_slug, s.item_key) for s in spawns(decision.actions)] == [("work", item(work, 1).key)]
    assert decision.waiting == ()
    queued = fixture_task.model_copy(update={"status": TaskStatus.QUEUED, "launched_at": None})
    assert reconcile([fixture_plan], [queued], NOW, OPEN).actions == ()  # no Launch
    failed = with_item(fixture_plan, 1, status=ItemStatus.FAILED, last_classification="retryable")
    retried = with_item(fixture_plan, 1, status=ItemStatus.PENDING, retry_requested=True)
    for shown in (failed, retried, with_item(fixture_plan, 1, status=ItemStatus.MERGED)):
        alone = reconcile([shown], [], NOW, OPEN)
        assert alone.actions == ()  # no retry, no repair, no completion
        assert not alone.live_work  # a fixture never keeps its owner in the liveness index
    assert not reconcile([fixture_plan], [fixture_task], NOW, OPEN).live_work
    # A pull request opened with its token is observed like any other: its owner stays live
    # (the heartbeat's resync looks at GitHub), though nothing else is done for it.
    in_review = fixture_task.model_copy(update={"status": TaskStatus.REVIEW})
    observed = reconcile([with_item(fixture_plan, 1, status=ItemStatus.REVIEW)], [in_review], NOW, OPEN)
    assert (observed.actions, observed.live_work) == ((), True)


def test_archiving_a_local_fixture_cancels_its_live_task() -> None:
    fixture_plan, fixture_task = running(fixture(make_plan("Relay", slug="capability-1")), 1)
    archived = fixture_plan.model_copy(update={"status": PlanStatus.ARCHIVED})
    in_review = fixture_task.model_copy(update={"status": TaskStatus.REVIEW})
    cancelling = reconcile([archived], [fixture_task], NOW, OPEN)
    assert cancelling.actions == (Cancel(fixture_task.id, "plan archived"),)
    assert cancelling.live_work  # until the cancel lands
    assert reconcile([archived], [in_review], NOW, OPEN).actions == ()  # its pull request stays


# ---- withdrawal: a task cancelled in review is closed; the loop closes its pull request


def withdrawn(plan: Plan, ordinal: int, *, pending: bool = True) -> tuple[Plan, Task]:
    task = task_of(plan, ordinal, status=TaskStatus.CLOSED).model_copy(
        update={"reason": "withdrawn", "pr_close_pending": pending}
    )
    return with_item(plan, ordinal, status=ItemStatus.CLOSED, task_id=task.id), task


def test_a_withdrawn_task_gets_its_pull_request_closed_and_its_plan_completes() -> None:
    plan, task = withdrawn(make_plan("A", "B", status=PlanStatus.IN_PROGRESS), 1)
    plan = with_item(plan, 2, status=ItemStatus.MERGED, task_id="t2")
    decision = reconcile([plan], [task], NOW, OPEN)
    assert set(decision.actions) == {ClosePull(task.id), CompletePlan(plan.slug, plan.version)}
    assert decision.live_work  # the loop keeps looking until the pull request is closed
    assert not decision.settles  # the close changes the next decision without an event


def test_a_withdrawn_task_holds_no_slot_is_not_cancelled_and_needs_no_repair() -> None:
    plan, task = withdrawn(make_plan("A", "B", status=PlanStatus.IN_PROGRESS), 1)
    decision = reconcile([plan], [task], NOW, Policy(max_parallel=1, spawns_left=10))
    assert [s.item_key for s in spawns(decision.actions)] == [item(plan, 2).key]
    archived = plan.model_copy(update={"status": PlanStatus.ARCHIVED})
    assert reconcile([archived], [task], NOW, OPEN).actions == (ClosePull(task.id),)
    # the item still shows review (its projection was lost): repaired from the closed task
    shown = with_item(plan, 1, status=ItemStatus.REVIEW)
    assert RepairItem(plan.slug, task.id) in reconcile([shown], [task], NOW, OPEN).actions


def test_a_closed_pull_request_ends_the_withdrawal_and_the_loop_settles() -> None:
    plan, task = withdrawn(make_plan("A", status=PlanStatus.COMPLETED), 1)
    assert reconcile([plan], [task], NOW, OPEN).actions == (ClosePull(task.id),)
    done = reconcile([plan], [], NOW, OPEN)
    assert (done.actions, done.live_work, done.settles) == ((), False, True)


def test_a_retry_of_a_withdrawn_task_waits_until_its_pull_request_is_closed() -> None:
    plan, task = withdrawn(make_plan("A", status=PlanStatus.IN_PROGRESS), 1)
    plan = with_item(plan, 1, status=ItemStatus.PENDING, retry_requested=True, attempt=1)
    assert reconcile([plan], [task], NOW, OPEN).actions == (ClosePull(task.id),)
    assert [(s.attempt, s.previous_task_id) for s in spawns(reconcile([plan], [], NOW, OPEN).actions)] == [
        (2, task.id)
    ]


# (tasks of items 1 and 2: status or None, max_open_prs) -> new tasks that start now
REVIEW_CAPACITY: list[tuple[tuple[TaskStatus | None, TaskStatus | None], int, int]] = [
    ((TaskStatus.REVIEW, None), 1, 0),  # one awaits review: the limit is reached
    ((TaskStatus.RUNNING, None), 1, 0),  # one is being written: it will open a pull request
    ((TaskStatus.REVIEW, None), 2, 1),
    ((TaskStatus.REVIEW, TaskStatus.QUEUED), 2, 0),
    ((TaskStatus.MERGED, None), 1, 1),  # merged: no longer open
    ((None, None), 1, 1),
    ((None, None), 2, 2),
]


@pytest.mark.parametrize(("statuses", "limit", "started"), REVIEW_CAPACITY)
def test_new_tasks_wait_while_max_open_prs_pull_requests_await_review(
    statuses: tuple[TaskStatus | None, TaskStatus | None], limit: int, started: int
) -> None:
    plan = make_plan("A", "B", "C")
    live = []
    for ordinal, status in enumerate(statuses, start=1):
        if status is not None:
            plan, task = running(plan, ordinal)
            shown = ItemStatus.MERGED if status is TaskStatus.MERGED else ItemStatus.RUNNING
            plan = with_item(plan, ordinal, status=shown)
            if status is not TaskStatus.MERGED:
                live.append(task.model_copy(update={"status": status}))
    decision = reconcile([plan], live, NOW, Policy(max_parallel=10, spawns_left=10, max_open_prs=limit))
    assert len(spawns(decision.actions)) == started
    pending = 3 - sum(s is not None for s in statuses)
    assert len(decision.waiting) == pending - started
    assert not decision.blocked_by_cap  # the capacity frees when a pull request merges (an event)
