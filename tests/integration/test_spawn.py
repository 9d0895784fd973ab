"""Task creation: deterministic, idempotent, linked to its item atomically; and the races
of the issue, run with real threads against moto (DynamoDB serialized, docs/testing.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from steward.domain.errors import Conflict, LifecycleError
from steward.domain.models import ItemStatus, PlanStatus, TaskStatus, utcnow
from steward.domain.tasks import task_for
from steward.tables import TASKS
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.plans import spawn_item

R = TypeVar("R")


def all_at_once(count: int, action: Callable[[], R]) -> list[R | BaseException]:
    """Run `action` on `count` threads released together; return results or exceptions."""
    barrier = threading.Barrier(count)

    def run() -> R | BaseException:
        barrier.wait()
        try:
            return action()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: run(), range(count)))


def stored_tasks(services: Services) -> list[dict[str, object]]:
    return services.tables.table(TASKS).scan(ConsistentRead=True)["Items"]


def test_spawn_creates_the_task_and_links_the_item(services: Services) -> None:
    services.plans.publish("alice", "demo", document(*numbered(2)))
    plan = services.plans.confirm("alice", "demo")
    task, created = spawn_item(services, plan, 2)
    assert created
    assert task.branch == "steward/" + task.id[1:]
    after = services.plans.get("alice", "demo")
    assert after.status is PlanStatus.IN_PROGRESS
    assert after.active_items[1].task_id == task.id
    assert after.active_items[1].status is ItemStatus.RUNNING
    assert services.tasks.get("alice", task.id) == task


def test_replayed_spawn_returns_the_same_task_and_creates_nothing(services: Services) -> None:
    services.plans.publish("alice", "demo", document(*numbered(1)))
    plan = services.plans.confirm("alice", "demo")
    first, created = spawn_item(services, plan, 1)
    # a lost response: the caller replays the spawn built from the plan it had read before
    replay, created_again = spawn_item(services, plan, 1)
    assert (created, created_again) == (True, False)
    assert replay == first
    assert len(stored_tasks(services)) == 1


@pytest.mark.parametrize("state", ["draft", "awaiting", "edited", "archived", "removed"])
def test_spawn_is_refused_unless_the_plan_approves_the_item(services: Services, state: str) -> None:
    services.plans.publish("alice", "demo", document("Alpha", "Beta"))
    plan = services.plans.get("alice", "demo")
    if state == "awaiting":
        plan = services.plans.submit("alice", "demo")
    elif state in ("edited", "archived", "removed"):
        plan = services.plans.confirm("alice", "demo")
        if state == "edited":
            services.plans.publish("alice", "demo", document("Alpha", "Beta", "Gamma"))
        elif state == "archived":
            services.plans.archive("alice", "demo")
        else:
            services.plans.publish("alice", "demo", document("Beta"))
            services.plans.confirm("alice", "demo")
    with pytest.raises(LifecycleError):
        spawn_item(services, plan, 1)  # built from the plan as it was read before the change
    assert stored_tasks(services) == []


def test_spawn_of_a_stale_revision_is_refused(services: Services) -> None:
    services.plans.publish("alice", "demo", document("Alpha"))
    plan = services.plans.confirm("alice", "demo")
    spawn_item(services, plan, 1)
    services.plans.publish("alice", "demo", document("Alpha v2"))
    current = services.plans.confirm("alice", "demo")
    # the second revision spawns; a spawn of revision 1, attempt 2 does not
    old_item = plan.active_items[0]
    stale = task_for(plan, old_item, attempt=2, now=utcnow())
    with pytest.raises(LifecycleError):
        services.tasks.tasks.spawn(stale, previous_task_id=old_item.task_id, now=utcnow())
    fresh, created = spawn_item(services, current, 1)
    assert created
    assert fresh.revision == 2


def test_twenty_concurrent_confirms_record_one_transition(services: Services) -> None:
    services.plans.publish("alice", "demo", document(*numbered(3)))
    results = all_at_once(20, lambda: services.plans.confirm("alice", "demo"))
    assert all(not isinstance(r, BaseException) and r.status is PlanStatus.CONFIRMED for r in results)
    assert services.plans.get("alice", "demo").confirmations == 1


def test_twenty_concurrent_identical_spawns_create_one_task(services: Services) -> None:
    services.plans.publish("alice", "demo", document(*numbered(3)))
    plan = services.plans.confirm("alice", "demo")
    results = all_at_once(20, lambda: spawn_item(services, plan, 2))
    outcomes = [r for r in results if not isinstance(r, BaseException)]
    assert len(outcomes) == 20, [r for r in results if isinstance(r, BaseException)]
    assert len({task.id for task, _ in outcomes}) == 1
    assert sum(created for _, created in outcomes) == 1
    assert len(stored_tasks(services)) == 1


def test_concurrent_publish_confirm_and_spawn_never_lose_a_task_link(services: Services) -> None:
    stable = numbered(4)
    variants = [document(*stable, "Tail v1"), document("Head", *stable, "Tail v2")]
    services.plans.publish("alice", "demo", variants[0])
    services.plans.confirm("alice", "demo")
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(body: Callable[[int], None]) -> Callable[[], None]:
        def run() -> None:
            n = 0
            while not stop.is_set():
                try:
                    body(n)
                except (LifecycleError, Conflict):
                    pass  # refused while awaiting confirmation, or outrun: both are fine
                except BaseException as exc:
                    errors.append(exc)
                    return
                n += 1

        return run

    def publisher(n: int) -> None:
        services.plans.publish("alice", "demo", variants[n % 2])

    def confirmer(_: int) -> None:
        services.plans.confirm("alice", "demo")

    def spawner(n: int) -> None:
        plan = services.plans.get("alice", "demo")
        item = next(i for i in plan.active_items if i.title == stable[n % 4])
        if item.task_id is None:
            services.tasks.tasks.spawn(
                task_for(plan, item, attempt=1, now=utcnow()), previous_task_id=None, now=utcnow()
            )

    threads = [
        threading.Thread(target=guarded(f)) for f in (publisher, publisher, confirmer, spawner, spawner)
    ]
    for t in threads:
        t.start()
    deadline = threading.Event()
    deadline.wait(3)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []

    tasks = {t["task_id"]: t for t in stored_tasks(services)}
    assert tasks, "the spawners should have created tasks"
    plan = services.plans.get("alice", "demo")
    by_key = {i.key: i for i in plan.items}
    for task_id, task in tasks.items():
        item = by_key[str(task["item_key"])]
        assert item.task_id == task_id, "a spawned task lost its link to its item"
        assert item.title == task["title"]
    # one task per item at most: the link condition refused every second spawn
    assert len({t["item_key"] for t in tasks.values()}) == len(tasks)


def test_inserting_a_checkbox_at_the_top_moves_no_task_to_other_text(services: Services) -> None:
    items = numbered(5)
    services.plans.publish("alice", "demo", document(*items))
    plan = services.plans.confirm("alice", "demo")
    for ordinal in range(1, 6):
        spawn_item(services, plan, ordinal)
        plan = services.plans.get("alice", "demo")

    after = services.plans.publish("alice", "demo", document("A brand new first item", *items))
    assert after.status is PlanStatus.AWAITING_CONFIRMATION
    first = after.active_items[0]
    assert (first.title, first.task_id, first.status) == ("A brand new first item", None, ItemStatus.PENDING)
    for item in after.active_items[1:]:
        assert item.task_id is not None
        task = services.tasks.get("alice", item.task_id)
        assert task.title == item.title
        assert item.status is ItemStatus.RUNNING


@pytest.mark.parametrize("projected", [True, False], ids=["item_in_review", "review_projection_lost"])
def test_a_retry_spawn_after_its_previous_task_was_revived_to_review_is_refused(
    services: Services, projected: bool
) -> None:
    """The loop read attempt 1 as a retryable failure and spawns attempt 2; meanwhile a
    pull request webhook revived attempt 1 to review (its runtime had pushed before its
    stream died). The spawn, built from the stale read, must not start a second attempt
    beside a task in review: two open pull requests for one item revision."""
    services.plans.publish("alice", "demo", document("Alpha"))
    plan = services.plans.confirm("alice", "demo")
    first, _ = spawn_item(services, plan, 1)
    store = services.tasks.tasks
    failed, _ = store.transition(
        first,
        TaskStatus.FAILED,
        now=utcnow(),
        event="failed",
        classification="retryable",
        reason="stream lost",
    )
    store.project_item(failed, now=utcnow())
    stale = services.plans.get("alice", "demo")  # what the loop read: item failed, retryable
    revived, _ = store.transition(failed, TaskStatus.REVIEW, now=utcnow(), event="github_event")
    if projected:
        store.project_item(revived, now=utcnow())
    retry = task_for(stale, stale.active_items[0], attempt=2, now=utcnow())
    with pytest.raises(LifecycleError):
        store.spawn(retry, previous_task_id=first.id, now=utcnow())
    assert [t["task_id"] for t in stored_tasks(services)] == [first.id]
    item = services.plans.get("alice", "demo").active_items[0]
    assert item.task_id == first.id
    assert item.status is (ItemStatus.REVIEW if projected else ItemStatus.FAILED)
