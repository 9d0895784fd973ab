"""The heartbeat against moto and the ECS fake: gates, shortcut, lease, spawn, launch,
retry, cancel, completion, and the faults of the issue. Each ends converged: at most one
task per (plan, item, attempt), nothing lost."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest
from steward.adapters.dynamo import count_requests
from steward.adapters.liveness import LivenessIndex
from steward.domain.errors import LifecycleError
from steward.domain.models import ItemStatus, PlanStatus, Task, TaskStatus
from steward.domain.tasks import SpawnCharge, SpawnRefused, round_for, task_for
from steward.domain.waiting import for_item
from steward.services.heartbeat import LEASE_TTL, Outcome
from steward.tables import TASKS
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.loop import Loop, build_loop


@pytest.fixture
def loop(services: Services) -> Loop:
    loop = build_loop(services)
    loop.settings("alice", interval_seconds=1, max_parallel=5)
    return loop


def confirmed(loop: Loop, *items: str, slug: str = "demo", max_attempts: int = 3) -> None:
    markdown = document(*items).replace("checks:", f"max_attempts: {max_attempts}\nchecks:")
    loop.services.plans.publish("alice", slug, markdown)
    loop.services.plans.confirm("alice", slug)


def all_tasks(loop: Loop) -> list[dict[str, object]]:
    return loop.services.tables.table(TASKS).scan(ConsistentRead=True)["Items"]


def one_task_per_attempt(loop: Loop) -> None:
    keys = Counter((t["plan_id"], t["item_key"], t["revision"], t["attempt"]) for t in all_tasks(loop))
    assert all(n == 1 for n in keys.values()), keys


def tick(loop: Loop, seconds: float = 2) -> Outcome:
    loop.clock.advance(seconds)
    return loop.heartbeat.tick("alice").outcome


def test_tick_spawns_and_launches_each_approved_item_once(loop: Loop) -> None:
    confirmed(loop, *numbered(3))
    report = loop.heartbeat.tick("alice")
    assert report.outcome is Outcome.WORKED
    assert len(report.spawned) == 3
    plan = loop.services.plans.get("alice", "demo")
    assert plan.status is PlanStatus.IN_PROGRESS
    assert all(i.task_id for i in plan.active_items)
    assert len(loop.ecs.runs) == 3
    stored = [loop.tasks.get(i.task_id) for i in plan.active_items if i.task_id]
    assert all(t is not None and t.status is TaskStatus.QUEUED and t.launched_at for t in stored)
    # the ECS task knows only its task id, a ticket and endpoints
    env = loop.ecs.environment_of(next(iter(loop.ecs.tasks)), "runner")
    assert set(env) == {"STEWARD_TASK_ID", "STEWARD_TICKET", "STEWARD_API_URL", "STEWARD_RELAY_URL"}


def test_no_progress_tick_is_one_request_and_launches_nothing(loop: Loop) -> None:
    confirmed(loop, *numbered(2))
    assert tick(loop) is Outcome.WORKED
    launches = len(loop.ecs.run_calls)
    with count_requests(loop.services.tables) as requests:
        assert tick(loop) is Outcome.NO_PROGRESS
    assert sum(requests.values()) == 1
    assert len(loop.ecs.run_calls) == launches


def test_gates_pause_interval_and_quiet_hours(loop: Loop) -> None:
    confirmed(loop, "A")
    loop.settings("alice", paused=True)
    assert tick(loop) is Outcome.PAUSED
    loop.settings("alice", paused=False, interval_seconds=600)
    assert tick(loop) is Outcome.WORKED
    loop.settings("alice", max_parallel=4)  # a wake that is no person's approval
    assert tick(loop, 60) is Outcome.INTERVAL
    now = loop.clock()
    start, end = (now - timedelta(hours=1)).strftime("%H:%M"), (now + timedelta(hours=1)).strftime("%H:%M")
    loop.settings("alice", quiet_hours={"start": start, "end": end}, timezone="UTC")
    loop.services.plans.publish("alice", "second", document("B"))
    loop.services.plans.confirm("alice", "second")  # an approval skips the interval, not quiet hours
    assert tick(loop, 1) is Outcome.QUIET_HOURS
    assert len(all_tasks(loop)) == 1
    loop.settings("alice", enabled=False)
    assert tick(loop, 600) is Outcome.DISABLED


def test_replayed_tick_and_concurrent_heartbeats_create_one_task_per_item(loop: Loop) -> None:
    confirmed(loop, *numbered(4))
    loop.clock.advance(2)
    beats = [loop.new_heartbeat() for _ in range(6)]
    barrier = threading.Barrier(len(beats))

    def run(beat):  # type: ignore[no-untyped-def]
        barrier.wait()
        return beat.tick("alice").outcome

    with ThreadPoolExecutor(len(beats)) as pool:
        outcomes = list(pool.map(run, beats))
    assert outcomes.count(Outcome.WORKED) == 1
    assert set(outcomes) <= {Outcome.WORKED, Outcome.BUSY, Outcome.NO_PROGRESS}
    assert tick(loop) is Outcome.NO_PROGRESS  # the same tick, delivered again
    assert len(all_tasks(loop)) == 4
    assert len(loop.ecs.runs) == 4
    one_task_per_attempt(loop)


def test_a_heartbeat_that_dies_holding_the_lease_is_taken_over_after_expiry(loop: Loop) -> None:
    confirmed(loop, "A")
    loop.clock.advance(2)
    dead = loop.heartbeat.users.acquire_lease("alice", owner="dead", now=loop.clock(), ttl=LEASE_TTL)
    assert dead is not None
    assert tick(loop, 1) is Outcome.BUSY
    assert tick(loop, LEASE_TTL.total_seconds()) is Outcome.WORKED
    assert len(all_tasks(loop)) == 1


def test_a_late_spawn_from_an_expired_lease_holder_writes_nothing(loop: Loop) -> None:
    confirmed(loop, "A")
    users = loop.heartbeat.users
    old = users.acquire_lease("alice", owner="slow", now=loop.clock(), ttl=LEASE_TTL)
    loop.clock.advance(LEASE_TTL.total_seconds() + 1)
    new = users.acquire_lease("alice", owner="fresh", now=loop.clock(), ttl=LEASE_TTL)
    assert old is not None
    assert new is not None
    assert new.lease_epoch > old.lease_epoch
    plan = loop.services.plans.get("alice", "demo")
    task = task_for(plan, plan.active_items[0], attempt=1, now=loop.clock())
    charge = SpawnCharge(day="2026-01-01", cap=5, same_day=False, lease_epoch=old.lease_epoch)
    with pytest.raises(SpawnRefused) as refused:
        loop.tasks.spawn(task, previous_task_id=None, now=loop.clock(), charge=charge)
    assert refused.value.reason == "loop"
    assert all_tasks(loop) == []


def test_lost_response_after_spawn_is_replayed_without_a_second_task(loop: Loop) -> None:
    confirmed(loop, "A", "B")
    plan = loop.services.plans.get("alice", "demo")
    # the spawn's write succeeded but its caller never heard back (and never launched)
    loop.tasks.spawn(
        task_for(plan, plan.active_items[0], attempt=1, now=loop.clock()),
        previous_task_id=None,
        now=loop.clock(),
    )
    assert tick(loop) is Outcome.WORKED
    assert len(all_tasks(loop)) == 2
    assert len(loop.ecs.runs) == 2  # the orphan was launched, once
    one_task_per_attempt(loop)


def test_a_throttle_between_spawn_and_launch_converges_next_tick(loop: Loop) -> None:
    confirmed(loop, "A")
    loop.ecs.throttle_next(1)
    assert tick(loop) is Outcome.PARTIAL
    [task] = all_tasks(loop)
    assert "launched_at" not in task
    assert tick(loop) is Outcome.WORKED  # not the shortcut: the last tick was partial
    assert len(loop.ecs.runs) == 1
    assert loop.tasks.get(str(task["task_id"])).launched_at is not None  # type: ignore[union-attr]


def test_a_pause_stored_during_a_tick_stops_its_spawns(loop: Loop) -> None:
    confirmed(loop, *numbered(3))
    plans = loop.heartbeat.plans
    real = plans.all_for_user

    def pause_then_read(user: str):  # type: ignore[no-untyped-def]
        loop.settings(user, paused=True)  # the user pauses while the tick is in flight
        return real(user)

    plans.all_for_user = pause_then_read  # type: ignore[method-assign]
    try:
        assert tick(loop) is Outcome.PARTIAL
    finally:
        plans.all_for_user = real  # type: ignore[method-assign]
    assert all_tasks(loop) == []
    assert loop.ecs.runs == []


def test_daily_cap_is_charged_by_spawns_only_and_races_on_the_last_slot(loop: Loop) -> None:
    loop.settings("alice", daily_spawn_cap=2)
    confirmed(loop, *numbered(3))
    assert tick(loop) is Outcome.WORKED
    assert len(all_tasks(loop)) == 2
    state = loop.heartbeat.users.loop_state("alice")
    assert state.spawn_count == 2
    assert state.due_at is not None  # the third item waits for tomorrow, not for an event
    assert tick(loop) is Outcome.NO_PROGRESS
    assert loop.heartbeat.users.loop_state("alice").spawn_count == 2

    # two spawns racing on the last slot of a new cap (same lease epoch, same day)
    loop.settings("alice", daily_spawn_cap=3)
    plan = loop.services.plans.get("alice", "demo")
    leased = loop.heartbeat.users.acquire_lease("alice", owner="racer", now=loop.clock(), ttl=LEASE_TTL)
    assert leased is not None
    pending = next(i for i in plan.active_items if i.task_id is None)
    other = loop.services.plans.publish("alice", "other", document("X"))
    loop.services.plans.confirm("alice", "other")
    other = loop.services.plans.get("alice", "other")
    charge = SpawnCharge(day=str(leased.spawn_day), cap=3, same_day=True, lease_epoch=leased.lease_epoch)
    candidates = [
        task_for(plan, pending, attempt=1, now=loop.clock()),
        task_for(other, other.active_items[0], attempt=1, now=loop.clock()),
    ]
    barrier = threading.Barrier(2)

    def race(task):  # type: ignore[no-untyped-def]
        barrier.wait()
        try:
            return loop.tasks.spawn(task, previous_task_id=None, now=loop.clock(), charge=charge)[1]
        except SpawnRefused:
            return False

    with ThreadPoolExecutor(2) as pool:
        created = list(pool.map(race, candidates))
    assert sorted(created) == [False, True]
    assert loop.heartbeat.users.loop_state("alice").spawn_count == 3


def test_retryable_failure_is_retried_with_the_next_attempt(loop: Loop) -> None:
    confirmed(loop, "A", max_attempts=2)
    tick(loop)
    [first] = [loop.tasks.get(str(t["task_id"])) for t in all_tasks(loop)]
    assert first is not None
    failed, _ = loop.tasks.transition(
        first,
        TaskStatus.FAILED,
        now=loop.clock(),
        event="finished",
        classification="retryable",
        reason="runtime lost",
    )
    loop.tasks.project_item(failed, now=loop.clock())
    assert tick(loop) is Outcome.WORKED
    attempts = sorted(int(t["attempt"]) for t in all_tasks(loop))
    assert attempts == [1, 2]
    second = loop.tasks.get(loop.services.plans.get("alice", "demo").active_items[0].task_id or "")
    assert second is not None
    assert second.attempt == 2
    failed2, _ = loop.tasks.transition(
        second, TaskStatus.FAILED, now=loop.clock(), event="finished", classification="retryable"
    )
    loop.tasks.project_item(failed2, now=loop.clock())
    tick(loop)
    assert len(all_tasks(loop)) == 2  # max_attempts = 2: no third attempt
    assert loop.services.plans.get("alice", "demo").status is PlanStatus.COMPLETED


def one_failed_task(loop: Loop) -> Task:
    """A confirmed one-item plan whose only task failed for good."""
    confirmed(loop, "A", max_attempts=1)
    tick(loop)
    [first] = [loop.tasks.get(str(t["task_id"])) for t in all_tasks(loop)]
    assert first is not None
    failed, _ = loop.tasks.transition(
        first, TaskStatus.FAILED, now=loop.clock(), event="finished", classification="final"
    )
    loop.tasks.project_item(failed, now=loop.clock())
    return failed


def test_the_failed_task_of_a_deleted_checkbox_cannot_be_retried(loop: Loop) -> None:
    """Deleting the checkbox ended that work: a retry of its failed task is refused and
    changes nothing (it would otherwise reopen the plan for an item that is not there)."""
    confirmed(loop, "Alpha", "Beta", max_attempts=1)
    tick(loop)
    alpha = loop.services.plans.get("alice", "demo").active_items[0]
    first = loop.tasks.get(alpha.task_id or "")
    assert first is not None
    failed, _ = loop.tasks.transition(
        first, TaskStatus.FAILED, now=loop.clock(), event="finished", classification="final"
    )
    loop.tasks.project_item(failed, now=loop.clock())
    confirmed(loop, "Beta", max_attempts=1)  # Alpha's checkbox is deleted
    before = loop.services.plans.get("alice", "demo")
    assert [i.removed for i in before.items if i.task_id == failed.id] == [True]
    with pytest.raises(LifecycleError):
        loop.services.tasks.retry("alice", failed.id)
    after = loop.services.plans.get("alice", "demo")
    assert (after.status, after.version) == (before.status, before.version)
    assert loop.tasks.get(failed.id) == failed


def scheduled_ticks(loop: Loop) -> list[str]:
    """Tick every user the scheduler would send (the liveness index); return who spawned."""
    loop.clock.advance(2)
    live = list(LivenessIndex(loop.services.tables).all_live_users())
    return [spawned for user in live for spawned in loop.heartbeat.tick(user).spawned]


def test_a_retry_during_a_held_lease_keeps_the_user_live_and_spawns_next_tick(loop: Loop) -> None:
    failed = one_failed_task(loop)
    plans = loop.heartbeat.plans
    real = plans.all_for_user

    def read_then_retry(user: str):  # type: ignore[no-untyped-def]
        # The tick holds the lease and has read the failed item; the person retries now.
        seen = real(user)
        loop.services.tasks.retry(user, failed.id)
        return seen

    plans.all_for_user = read_then_retry  # type: ignore[method-assign]
    try:
        assert tick(loop) is Outcome.WORKED  # it found no live work
    finally:
        plans.all_for_user = real  # type: ignore[method-assign]
    assert "alice" in set(LivenessIndex(loop.services.tables).all_live_users()), (
        "the tick that found no live work dropped the user from the liveness index after the retry"
    )
    [retried] = scheduled_ticks(loop)
    task = loop.tasks.get(retried)
    assert task is not None
    assert (task.attempt, task.status) == (2, TaskStatus.QUEUED)


def test_a_pull_request_reviving_a_failed_task_during_a_held_lease_still_completes_its_plan(
    loop: Loop,
) -> None:
    failed = one_failed_task(loop)
    tasks = loop.heartbeat.tasks
    real = tasks.live_for_user
    revived: list[Task] = []

    def read_then_revive(user: str):  # type: ignore[no-untyped-def]
        # The tick has read the failed item and no live task; the runtime had pushed, and a
        # verified webhook reports the pull request now (section 3: failed -> review).
        seen = real(user)
        review, _ = tasks.transition(failed, TaskStatus.REVIEW, now=loop.clock(), event="pull_request")
        tasks.project_item(review, now=loop.clock())
        revived.append(review)
        return seen

    tasks.live_for_user = read_then_revive  # type: ignore[method-assign]
    try:
        assert tick(loop) is Outcome.WORKED  # it found no live work; its completion lost the race
    finally:
        tasks.live_for_user = real  # type: ignore[method-assign]
    merged, _ = tasks.transition(revived[0], TaskStatus.MERGED, now=loop.clock(), event="pull_request")
    tasks.project_item(merged, now=loop.clock())
    scheduled_ticks(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert (plan.status, plan.active_items[0].status.value) == (PlanStatus.COMPLETED, "merged")


def test_archiving_cancels_its_tasks_at_once(loop: Loop) -> None:
    """The archive cancels them itself; their runtimes stop at their next heartbeat (as for a
    person's cancel), and the loop has nothing left to cancel."""
    confirmed(loop, *numbered(2))
    tick(loop)
    loop.services.plans.archive("alice", "demo")
    assert {t["status"] for t in all_tasks(loop)} == {"cancelled"}
    tick(loop)
    assert {t["status"] for t in all_tasks(loop)} == {"cancelled"}
    assert len(loop.ecs.runs) == 2  # nothing spawned or launched for the archived plan


def test_the_loop_cancels_and_stops_what_an_interrupted_archive_left_running(loop: Loop) -> None:
    confirmed(loop, *numbered(2))
    tick(loop)
    loop.services.plans.store.archive("alice", "demo", now=loop.clock())  # died before its cancels
    assert tick(loop) is Outcome.WORKED
    statuses = {t["status"] for t in all_tasks(loop)}
    assert statuses == {"cancelled"}
    assert len(loop.ecs.stops) == 2
    tick(loop)
    assert len(loop.ecs.stops) == 2  # nothing applied twice


def test_an_item_edited_while_its_task_runs_becomes_new_work_after_reapproval(loop: Loop) -> None:
    confirmed(loop, "Original text")
    tick(loop)
    loop.services.plans.publish("alice", "demo", document("Edited text"))
    assert tick(loop) in (Outcome.WORKED, Outcome.NO_PROGRESS)
    assert len(all_tasks(loop)) == 1  # awaiting confirmation: nothing new, nothing cancelled
    assert all_tasks(loop)[0]["status"] == "queued"
    loop.services.plans.confirm("alice", "demo")
    assert tick(loop) is Outcome.WORKED
    revisions = sorted((int(t["revision"]), t["status"]) for t in all_tasks(loop))
    assert revisions == [(1, "cancelled"), (2, "queued")]  # the old revision is superseded


def edited_while(loop: Loop, status: TaskStatus) -> Task:
    """Alice's "Original text" task (revision 1) brought to `status`, a second item's task
    queued beside it; then she edits the first item (not yet confirmed)."""
    confirmed(loop, "Original text", "Untouched")
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    task = loop.tasks.get(plan.active_items[0].task_id or "")
    assert task is not None
    now = loop.clock()
    path = {
        TaskStatus.QUEUED: [],
        TaskStatus.RUNNING: [TaskStatus.RUNNING],
        TaskStatus.REVIEW: [TaskStatus.RUNNING, TaskStatus.REVIEW],
        TaskStatus.FAILED: [TaskStatus.RUNNING, TaskStatus.FAILED],
    }[status]
    for step in path:
        if step is TaskStatus.RUNNING:
            task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(hours=1))
        else:
            task, _ = loop.tasks.transition(
                task, step, now=now, event=step.value, classification="final", extra={"pr_number": 1}
            )
        loop.tasks.project_item(task, now=now)
    loop.services.plans.publish("alice", "demo", document("Edited text", "Untouched"))
    return task


# (status of the revision-1 task when the edit is confirmed, its status after the confirm)
SUPERSEDED = [
    (TaskStatus.QUEUED, TaskStatus.CANCELLED),
    (TaskStatus.RUNNING, TaskStatus.CANCELLED),
    (TaskStatus.REVIEW, TaskStatus.REVIEW),  # keeps its pull request
    (TaskStatus.FAILED, TaskStatus.FAILED),
]


@pytest.mark.parametrize(("before", "after"), SUPERSEDED, ids=[b.value for b, _ in SUPERSEDED])
def test_confirming_an_edited_item_cancels_its_live_task_and_the_new_revision_spawns_next_tick(
    loop: Loop, before: TaskStatus, after: TaskStatus
) -> None:
    old = edited_while(loop, before)
    untouched = loop.services.plans.get("alice", "demo").active_items[1].task_id
    with count_requests(loop.services.tables) as requests:
        loop.services.plans.confirm("alice", "demo")
    fenced = loop.tasks.get(old.id)
    assert fenced is not None
    assert fenced.status is after
    if after is TaskStatus.CANCELLED:
        assert (fenced.reason, fenced.classification, fenced.failure_code) == (
            "superseded",
            "final",
            "superseded",
        )
        # the approval (one transaction, read back), then the old task read and cancelled
        assert dict(requests) == {"TransactWriteItems": 2, "GetItem": 2}
    else:
        assert dict(requests) == {"TransactWriteItems": 1, "GetItem": 2}
    assert loop.tasks.get(untouched or "").status is TaskStatus.QUEUED  # type: ignore[union-attr]

    stops = len(loop.ecs.stops)
    assert tick(loop) is Outcome.WORKED
    plan = loop.services.plans.get("alice", "demo")
    new = loop.tasks.get(plan.active_items[0].task_id or "")
    assert new is not None
    assert (new.revision, new.attempt, new.status, new.title) == (2, 1, TaskStatus.QUEUED, "Edited text")
    assert loop.tasks.get(old.id).status is after  # type: ignore[union-attr]
    # a cancelled runtime is stopped before its successor starts; a review task has none
    stopped = {s["task"] for s in loop.ecs.stops[stops:]}
    assert stopped == ({fenced.launch_ref} if after is TaskStatus.CANCELLED else set())
    one_task_per_attempt(loop)
    assert tick(loop) is Outcome.NO_PROGRESS


def test_a_crash_between_the_confirm_and_its_cancel_is_converged_by_the_next_tick(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = edited_while(loop, TaskStatus.RUNNING)

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the API Lambda died after the confirm")

    monkeypatch.setattr(loop.services.plans.tasks, "transition", crash)
    plan = loop.services.plans.confirm("alice", "demo")
    monkeypatch.undo()
    assert plan.status is PlanStatus.CONFIRMED  # the approval is durable
    assert loop.tasks.get(old.id).status is TaskStatus.RUNNING  # type: ignore[union-attr]

    assert tick(loop) is Outcome.WORKED
    fenced = loop.tasks.get(old.id)
    assert fenced is not None
    assert (fenced.status, fenced.reason, fenced.failure_code) == (
        TaskStatus.CANCELLED,
        "superseded",
        "superseded",
    )
    assert fenced.launch_ref in {s["task"] for s in loop.ecs.stops}
    revisions = sorted(
        (int(t["revision"]), t["status"]) for t in all_tasks(loop) if t["item_key"] == old.item_key
    )
    assert revisions == [(1, "cancelled"), (2, "queued")]
    one_task_per_attempt(loop)


def test_plan_completes_and_the_user_leaves_the_liveness_index(loop: Loop) -> None:
    confirmed(loop, "A")
    tick(loop)
    [row] = all_tasks(loop)
    task = loop.tasks.get(str(row["task_id"]))
    assert task is not None
    for status in (TaskStatus.RUNNING, TaskStatus.REVIEW, TaskStatus.MERGED):
        task, _ = loop.tasks.transition(task, status, now=loop.clock(), event=status.value)
    loop.tasks.project_item(task, now=loop.clock())
    assert tick(loop) is Outcome.WORKED
    assert loop.services.plans.get("alice", "demo").status is PlanStatus.COMPLETED
    assert not loop.heartbeat.users.loop_state("alice").live  # the scheduler stops sending
    assert tick(loop) is Outcome.NO_PROGRESS


def test_lost_item_projection_is_repaired(loop: Loop) -> None:
    confirmed(loop, "A")
    tick(loop)
    [row] = all_tasks(loop)
    task = loop.tasks.get(str(row["task_id"]))
    assert task is not None
    loop.tasks.transition(task, TaskStatus.FAILED, now=loop.clock(), event="finished", classification="final")
    # the projection onto the plan item was never written (crash)
    assert loop.services.plans.get("alice", "demo").active_items[0].status.value == "running"
    tick(loop)
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan.active_items[0].status.value == "failed"
    assert plan.status is PlanStatus.COMPLETED


@pytest.mark.parametrize("final", [TaskStatus.MERGED, TaskStatus.CLOSED])
def test_a_lost_projection_of_a_merge_or_close_is_repaired_and_the_plan_completes(
    loop: Loop, final: TaskStatus
) -> None:
    """The webhook moved the task from review to merged (or closed) and its delivery was
    recorded, but the item's projection was lost: no redelivery will come, so the loop
    copies the task's status over, and the plan completes instead of waiting forever."""
    confirmed(loop, "A")
    tick(loop)
    [row] = all_tasks(loop)
    task = loop.tasks.get(str(row["task_id"]))
    assert task is not None
    for status in (TaskStatus.RUNNING, TaskStatus.REVIEW):
        task, _ = loop.tasks.transition(task, status, now=loop.clock(), event=status.value)
    loop.tasks.project_item(task, now=loop.clock())
    loop.tasks.transition(task, final, now=loop.clock(), event="github_event")
    assert loop.services.plans.get("alice", "demo").active_items[0].status is ItemStatus.REVIEW
    tick(loop)
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan.active_items[0].status.value == final.value
    assert plan.status is PlanStatus.COMPLETED


def test_every_action_of_a_decision_is_safe_to_apply_twice(loop: Loop) -> None:
    from steward.domain.reconcile import Policy, reconcile  # noqa: PLC0415
    from steward.services.heartbeat import _Apply  # noqa: PLC0415

    confirmed(loop, *numbered(3))
    confirmed(loop, "To archive", slug="old")
    tick(loop)
    loop.services.plans.store.archive("alice", "old", now=loop.clock())  # its tasks left to the loop
    done = loop.tasks.get(loop.services.plans.get("alice", "demo").active_items[0].task_id or "")
    assert done is not None
    for status in (TaskStatus.RUNNING, TaskStatus.FAILED):
        done, _ = loop.tasks.transition(
            done, status, now=loop.clock(), event=status.value, classification="retryable"
        )
    loop.tasks.project_item(done, now=loop.clock())

    state = loop.heartbeat.users.acquire_lease("alice", owner="twice", now=loop.clock(), ttl=LEASE_TTL)
    assert state is not None
    plans = loop.heartbeat.plans.all_for_user("alice")
    live = loop.tasks.live_for_user("alice")
    decision = reconcile(plans, live, loop.clock(), Policy(max_parallel=10, spawns_left=10))
    kinds = {type(a).__name__ for a in decision.actions}
    assert {"Spawn", "Cancel"} <= kinds
    for _ in range(2):
        _Apply(
            loop.heartbeat, state, {p.slug: p for p in plans}, {t.id: t for t in live}, loop.clock(), "day"
        ).run(decision.actions)
    one_task_per_attempt(loop)
    assert len(all_tasks(loop)) == 5  # 3 + 1 archived + the retry of the failed one
    assert len(loop.ecs.runs) == 5
    # stopping is repeated (a crash between cancel and stop must still stop) but ECS's
    # StopTask is idempotent: one runtime, stopped
    assert len({s["task"] for s in loop.ecs.stops}) == 1


# ---- follow-up rounds (docs/concepts/follow-ups.md)

HEAD = "f" * 40


def _events(loop: Loop, task_id: str) -> list[dict[str, object]]:
    return loop.services.tasks.events.list(task_id, after=0, limit=100)


def _in_review_with_an_ask(loop: Loop) -> Task:
    """One item's task in review on pull request 7 at HEAD, with a review's ask recorded as
    the webhook receiver records it (the ask waits, the loop is woken)."""
    confirmed(loop, "A")
    assert tick(loop) is Outcome.WORKED
    (task,) = loop.tasks.live_for_user("alice")
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r-1", now=now, deadline=now + timedelta(hours=1))
    task, _ = loop.tasks.transition(
        task, TaskStatus.REVIEW, now=now, event="finished", extra={"pr_number": 7, "head_sha": HEAD}
    )
    loop.tasks.project_item(task, now=now)
    key = f"7:{HEAD}:review"
    ask = {"kind": "review", "round_key": key, "head_sha": HEAD, "body": "Please rename it."}
    return loop.tasks.append_event(
        task,
        "follow_up_asked",
        ask,
        now=now,
        sets={"follow_up_keys": [key], "pending_asks": [ask]},
        wake=True,
    )


def test_an_ask_on_a_task_in_review_starts_one_round_that_the_loop_launches(loop: Loop) -> None:
    parent = _in_review_with_an_ask(loop)
    runs = len(loop.ecs.runs)
    assert tick(loop) is Outcome.WORKED  # the ask woke the loop: no shortcut
    now_parent = loop.tasks.require(parent.id)
    assert (now_parent.status, now_parent.rounds_used, now_parent.pending_asks) == (TaskStatus.REVIEW, 1, ())
    (one,) = [t for t in loop.tasks.live_for_user("alice") if t.is_round]
    assert (one.parent, one.round, one.branch, one.head_sha, one.status) == (
        parent.id,
        1,
        parent.branch,
        HEAD,
        TaskStatus.QUEUED,
    )
    assert one.launched_at is not None
    assert len(loop.ecs.runs) == runs + 1
    assert one.trigger is not None
    assert one.trigger["body"] == "Please rename it."
    started = [e for e in _events(loop, parent.id) if e["type"] == "follow_up_started"]
    assert [e["data"]["task_id"] for e in started] == [one.id]
    assert tick(loop) is not Outcome.PARTIAL  # nothing more to do: no second round
    assert [t.id for t in loop.tasks.live_for_user("alice") if t.is_round] == [one.id]
    # The item still shows the task in review: a round never projects onto it.
    plan = loop.services.plans.get("alice", "demo")
    assert (plan.items[0].status, plan.items[0].task_id) == (ItemStatus.REVIEW, parent.id)


def test_a_round_started_on_eight_threads_is_one_round_charged_once(loop: Loop) -> None:
    parent = _in_review_with_an_ask(loop)
    plan = loop.services.plans.get("alice", "demo")
    round_task = round_for(parent, plan, parent.pending_asks[0], number=1, now=loop.clock())
    users = loop.heartbeat.users
    leased = users.acquire_lease("alice", owner="test", now=loop.clock(), ttl=LEASE_TTL)
    assert leased is not None
    day = leased.spawn_day or "2026-01-01"
    charge = SpawnCharge(day, cap=100, same_day=leased.spawn_day == day, lease_epoch=leased.lease_epoch)
    count_before = leased.spawn_count if leased.spawn_day == day else 0
    barrier = threading.Barrier(8)

    def start(_: int) -> tuple[str, bool]:
        barrier.wait()
        try:
            created, new = loop.tasks.start_round(parent, round_task, now=loop.clock(), charge=charge)
        except SpawnRefused as exc:
            return exc.reason, False
        return created.id, new

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(start, range(8)))
    assert [new for _, new in outcomes].count(True) == 1, outcomes
    assert {ident for ident, _ in outcomes} == {round_task.id}, outcomes
    assert loop.tasks.require(parent.id).rounds_used == 1
    assert [e["type"] for e in _events(loop, parent.id)].count("follow_up_started") == 1
    after = users.loop_state("alice")
    assert after.spawn_count == count_before + 1


def test_a_round_beyond_the_tasks_approved_follow_ups_is_never_started(loop: Loop) -> None:
    parent = _in_review_with_an_ask(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert parent.follow_ups == 2  # the default, approved with the plan
    beyond = round_for(parent, plan, parent.pending_asks[0], number=3, now=loop.clock())
    loop.services.tables.table(TASKS).update_item(  # as if two rounds had run
        Key={"task_id": parent.id},
        UpdateExpression="SET rounds_used = :n",
        ExpressionAttributeValues={":n": 2},
    )
    leased = loop.heartbeat.users.acquire_lease("alice", owner="test", now=loop.clock(), ttl=LEASE_TTL)
    assert leased is not None
    charge = SpawnCharge("2026-01-01", cap=100, same_day=False, lease_epoch=leased.lease_epoch)
    with pytest.raises(SpawnRefused):
        loop.tasks.start_round(loop.tasks.require(parent.id), beyond, now=loop.clock(), charge=charge)
    assert loop.tasks.get(beyond.id) is None
    assert loop.tasks.require(parent.id).rounds_used == 2


def _fail(loop: Loop, task: Task, classification: str, *, cost: str = "0") -> None:
    """The round's runtime ends it failed (or the reaper does: `retryable`), having spent `cost`."""
    now = loop.clock()
    running = loop.tasks.claim(task, runtime_id=f"r-{task.id}", now=now, deadline=now + timedelta(hours=1))
    loop.services.tables.table(TASKS).update_item(
        Key={"task_id": task.id},
        UpdateExpression="SET cost_usd = :c",
        ExpressionAttributeValues={":c": Decimal(cost)},
    )
    running = loop.tasks.require(running.id)
    loop.tasks.transition(
        running, TaskStatus.FAILED, now=now, event="finished", classification=classification, reason="it died"
    )


def test_a_round_that_fails_retryably_is_tried_again_within_its_one_budget_then_its_failure_is_said_once(
    loop: Loop,
) -> None:
    parent = _in_review_with_an_ask(loop)
    tick(loop)
    (first,) = [t for t in loop.tasks.live_for_user("alice") if t.is_round]
    budget = first.budget_usd
    _fail(loop, first, "retryable", cost="0.25")  # the runtime died (the reaper's ending)
    tick(loop)  # settles round 1: its ask waits again, first, the round uncounted
    waiting = loop.tasks.require(parent.id)
    assert (waiting.rounds_used, waiting.rounds_settled) == (0, 0)
    assert [(a["round_key"], a["attempt"], a["spent_usd"]) for a in waiting.pending_asks] == [
        (f"7:{HEAD}:review", 2, "0.25")
    ]
    tick(loop)  # round 1 again, its second attempt, with what is left of the round's budget
    (second,) = [t for t in loop.tasks.live_for_user("alice") if t.is_round]
    assert (second.round, second.attempt, second.budget_usd) == (1, 2, budget - Decimal("0.25"))
    assert second.id != first.id
    assert loop.tasks.require(parent.id).rounds_used == 1
    _fail(loop, second, "final")  # the checks failed: no attempt would differ
    tick(loop)
    settled = loop.tasks.require(parent.id)
    assert (settled.rounds_used, settled.rounds_settled, settled.pending_asks) == (1, 1, ())
    assert settled.pending_replies == (f"round_failed:{second.id}",)
    types = [e["type"] for e in _events(loop, parent.id) if str(e["type"]).startswith("follow_up")]
    assert types == [
        "follow_up_asked",
        "follow_up_started",
        "follow_up_retried",
        "follow_up_started",
        "follow_up_settled",
    ]


def test_an_answered_round_is_settled_with_its_head_before_the_next_ask_gets_its_round(loop: Loop) -> None:
    parent = _in_review_with_an_ask(loop)
    tick(loop)
    (one,) = [t for t in loop.tasks.live_for_user("alice") if t.is_round]
    now = loop.clock()
    running = loop.tasks.claim(one, runtime_id="r-round", now=now, deadline=now + timedelta(hours=1))
    # its ending was recorded, but the runtime's word to its parent was lost
    loop.tasks.transition(
        running, TaskStatus.ANSWERED, now=now, event="finished", extra={"head_sha": "e" * 40}
    )
    tick(loop)
    settled = loop.tasks.require(parent.id)
    assert (settled.rounds_settled, settled.head_sha, settled.pending_replies) == (1, "e" * 40, ())


def test_max_open_prs_holds_a_new_task_until_a_pull_request_merges_and_says_why(loop: Loop) -> None:
    loop.settings("alice", max_open_prs=1)
    confirmed(loop, "A", "B")
    tick(loop)
    (first,) = loop.tasks.live_for_user("alice")  # B waits: A will open a pull request
    now = loop.clock()
    first = loop.tasks.claim(first, runtime_id="r-1", now=now, deadline=now + timedelta(hours=1))
    first, _ = loop.tasks.transition(
        first, TaskStatus.REVIEW, now=now, event="finished", extra={"pr_number": 7}
    )
    loop.tasks.project_item(first, now=now)
    tick(loop)
    assert [t.id for t in loop.tasks.live_for_user("alice")] == [first.id]
    state = loop.heartbeat.users.loop_state("alice")
    plan = loop.services.plans.get("alice", "demo")
    waits = for_item(plan, plan.items[1], state, loop.tasks.live_for_user("alice"), loop.clock())
    assert waits is not None
    assert (waits.reason, "#7" in waits.detail) == ("review_capacity", True)
    merged, _ = loop.tasks.transition(first, TaskStatus.MERGED, now=loop.clock(), event="github_event")
    loop.tasks.project_item(merged, now=loop.clock())
    tick(loop)  # the merge freed the capacity
    assert [t.item_key for t in loop.tasks.live_for_user("alice")] == [plan.items[1].key]
