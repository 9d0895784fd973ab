"""Plans with structure against moto and the ECS fake (docs/concepts/task-document.md): the
loop starts an item only once every item it waits for merged, the spawn's own write refuses
otherwise, a predecessor that ended unmerged blocks its dependents until a person retries it,
an edit of the order needs a new confirmation, and `max_open_prs` holds new work."""

from __future__ import annotations

import pytest
from steward.adapters.dynamo import count_requests
from steward.domain import order
from steward.domain.models import ItemStatus, Plan, PlanStatus, Task, TaskStatus
from steward.domain.plan_diff import content_of, diff
from steward.domain.tasks import SpawnRefused, task_for
from steward.domain.waiting import for_item
from steward.wiring import Services

from tests.support.documents import document
from tests.support.loop import Loop, build_loop


@pytest.fixture
def loop(services: Services) -> Loop:
    loop = build_loop(services)
    loop.settings("alice", interval_seconds=1, max_parallel=5, max_open_prs=100)
    return loop


def publish(loop: Loop, *items: str, sequential: bool = False) -> Plan:
    markdown = document(*items)
    if sequential:
        markdown = markdown.replace("checks:", "order: sequential\nchecks:")
    return loop.services.plans.publish("alice", "demo", markdown)


def confirmed(loop: Loop, *items: str, sequential: bool = False) -> Plan:
    publish(loop, *items, sequential=sequential)
    return loop.services.plans.confirm("alice", "demo")


def tick(loop: Loop) -> list[str]:
    loop.clock.advance(2)
    return list(loop.heartbeat.tick("alice").spawned)


def plan(loop: Loop) -> Plan:
    return loop.services.plans.get("alice", "demo")


def task_of(loop: Loop, ordinal: int) -> Task:
    found = loop.tasks.get(plan(loop).active_items[ordinal - 1].task_id or "")
    assert found is not None
    return found


def move(loop: Loop, ordinal: int, *statuses: TaskStatus, **fields: object) -> Task:
    """Take item `ordinal`'s task through `statuses`, each projected onto its item as the
    runtime, a webhook or resync would."""
    task = task_of(loop, ordinal)
    for status in statuses:
        task, _ = loop.tasks.transition(task, status, now=loop.clock(), event=status.value, **fields)
        loop.tasks.project_item(task, now=loop.clock())
    return task


def waits(loop: Loop, ordinal: int) -> tuple[str, str] | None:
    current = plan(loop)
    state = loop.heartbeat.users.loop_state("alice")
    shown = for_item(
        current, current.active_items[ordinal - 1], state, loop.tasks.live_for_user("alice"), loop.clock()
    )
    return None if shown is None else (shown.reason, shown.detail)


def test_a_chain_starts_each_item_only_after_the_one_before_merged(loop: Loop) -> None:
    confirmed(loop, "First", "Second", "Third", sequential=True)
    assert len(tick(loop)) == 1
    assert [i.status for i in plan(loop).active_items] == [
        ItemStatus.RUNNING,
        ItemStatus.PENDING,
        ItemStatus.PENDING,
    ]
    assert waits(loop, 2) == ("after", "#1 (running)")
    move(loop, 1, TaskStatus.RUNNING, TaskStatus.REVIEW)
    assert tick(loop) == []
    assert waits(loop, 2) == ("after", "#1 (review)")
    assert waits(loop, 3) == ("after", "#2 (pending)")
    move(loop, 1, TaskStatus.MERGED)
    [second] = tick(loop)
    assert second == plan(loop).active_items[1].task_id
    assert plan(loop).active_items[2].task_id is None


def test_the_spawns_own_write_refuses_an_item_whose_predecessor_is_not_merged(loop: Loop) -> None:
    """A stale decision (the loop read #1 merged; a person's edit and confirm made it pending
    again) cannot start #2: the transaction re-checks each predecessor and the plan's content."""
    approved = confirmed(loop, "First", "Second (after #1)")
    first, second = approved.active_items
    task = task_for(approved, second, attempt=1, now=loop.clock())
    with pytest.raises(SpawnRefused, match="waits for is no longer merged"):
        loop.tasks.spawn(task, previous_task_id=None, now=loop.clock(), after=(first.key,))
    with pytest.raises(SpawnRefused):
        loop.tasks.spawn(task, previous_task_id=None, now=loop.clock(), content_hash="0" * 64)
    assert loop.tasks.get(task.id) is None
    assert plan(loop).active_items[1].task_id is None


def test_a_predecessor_closed_unmerged_blocks_its_dependents_until_it_is_retried(loop: Loop) -> None:
    confirmed(loop, "First", "Second", "Third", sequential=True)
    tick(loop)
    closed = move(loop, 1, TaskStatus.RUNNING, TaskStatus.REVIEW, TaskStatus.CLOSED)
    assert tick(loop) == []
    reason = ("blocked", "#1 closed without merge; retry it or edit the plan")
    assert waits(loop, 2) == reason
    assert waits(loop, 3) == reason  # blocking passes down the chain
    current = plan(loop)
    assert current.status is PlanStatus.IN_PROGRESS  # not completed: work is left, held by a person
    assert order.blocked(current)
    loop.services.tasks.retry("alice", closed.id)
    assert waits(loop, 2) == ("after", "#1 (pending)")
    [again] = tick(loop)
    assert loop.tasks.get(again) is not None
    assert task_of(loop, 1).attempt == 2


def test_editing_an_items_order_after_confirmation_needs_a_new_confirmation(loop: Loop) -> None:
    approved = confirmed(loop, "First", "Second", "Third (after #1)")
    tick(loop)
    edited = publish(loop, "First", "Second", "Third (after #2)")
    assert edited.status is PlanStatus.AWAITING_CONFIRMATION
    changes = diff(content_of(approved), content_of(edited)).items
    assert [(c.ordinal, c.change, c.fields) for c in changes] == [(3, "edited", ("after",))]
    third = edited.active_items[2]
    assert (third.revision, third.task_id) == (1, None)  # the same work, not a new revision
    assert tick(loop) == []  # nothing new starts before a person approves the new order
    assert waits(loop, 3) is not None
    assert waits(loop, 3)[0] == "awaiting_confirmation"  # type: ignore[index]
    loop.services.plans.confirm("alice", "demo")
    assert [p.title for p in plan(loop).predecessors(plan(loop).active_items[2])] == ["Second"]


def test_max_open_prs_holds_new_tasks_while_that_many_pull_requests_await_review(loop: Loop) -> None:
    loop.settings("alice", max_open_prs=1)
    confirmed(loop, "First", "Second")
    assert len(tick(loop)) == 1
    assert waits(loop, 2) is not None
    assert waits(loop, 2)[0] == "review_capacity"  # type: ignore[index]
    move(loop, 1, TaskStatus.RUNNING, TaskStatus.REVIEW)
    assert tick(loop) == []
    move(loop, 1, TaskStatus.MERGED)
    assert len(tick(loop)) == 1


def test_a_tick_of_a_chain_reads_what_a_flat_plan_does(loop: Loop) -> None:
    """Order lives in the plan's item: deciding it reads nothing more than a flat plan."""
    items = [f"Item {n}" for n in range(1, 21)]
    confirmed(loop, *items, sequential=True)
    tick(loop)
    move(loop, 1, TaskStatus.RUNNING, TaskStatus.REVIEW)
    loop.clock.advance(2)
    with count_requests(loop.services.tables) as chained:
        loop.heartbeat.tick("alice")
    flat = build_loop(loop.services)
    flat.settings("bob", interval_seconds=1, max_parallel=1, max_open_prs=100)
    flat.services.plans.publish("bob", "flat", document(*items))
    flat.services.plans.confirm("bob", "flat")
    flat.clock.advance(2)
    flat.heartbeat.tick("bob")
    flat_task = loop.tasks.get(flat.services.plans.get("bob", "flat").active_items[0].task_id or "")
    assert flat_task is not None
    for status in (TaskStatus.RUNNING, TaskStatus.REVIEW):
        flat_task, _ = loop.tasks.transition(flat_task, status, now=flat.clock(), event=status.value)
        loop.tasks.project_item(flat_task, now=flat.clock())
    flat.clock.advance(2)
    with count_requests(loop.services.tables) as plain:
        flat.heartbeat.tick("bob")
    assert sum(chained.values()) <= sum(plain.values())
