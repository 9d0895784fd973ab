"""The reaper fails stale tasks for every user and nothing else; durable events are
gapless, and only lifecycle events advance the owner's watermark."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from steward.domain.models import Task, TaskStatus
from steward.domain.tasks import LAUNCH_GRACE
from steward.wiring import Services

from tests.support.documents import document
from tests.support.loop import Loop, build_loop


@pytest.fixture
def loop(services: Services) -> Loop:
    loop = build_loop(services)
    loop.settings("alice", interval_seconds=1)
    return loop


def spawned(loop: Loop, *items: str) -> list[Task]:
    loop.services.plans.publish("alice", "demo", document(*items))
    loop.services.plans.confirm("alice", "demo")
    loop.clock.advance(2)
    loop.heartbeat.tick("alice")
    plan = loop.services.plans.get("alice", "demo")
    return [t for i in plan.active_items if i.task_id and (t := loop.tasks.get(i.task_id))]


def test_queued_task_that_never_started_is_failed_retryable_after_the_launch_grace(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    assert loop.reaper.sweep(loop.clock() + LAUNCH_GRACE - timedelta(seconds=1)) == []
    reaped = loop.reaper.sweep(loop.clock() + LAUNCH_GRACE + timedelta(seconds=1))
    assert reaped == [task.id]
    failed = loop.tasks.get(task.id)
    assert failed is not None
    assert (failed.status, failed.classification) == (TaskStatus.FAILED, "retryable")
    assert loop.reaper.sweep(loop.clock() + LAUNCH_GRACE * 2) == []  # idempotent
    assert loop.services.plans.get("alice", "demo").active_items[0].status.value == "failed"
    assert len(loop.ecs.stops) == 1


def test_running_task_is_reaped_only_when_its_runtime_goes_silent(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(seconds=180))
    later = now + timedelta(seconds=150)
    assert loop.tasks.touch(task.id, runtime_id="r1", now=later, deadline=later + timedelta(seconds=180))
    assert loop.reaper.sweep(now + timedelta(seconds=200)) == []  # renewed in time
    assert loop.reaper.sweep(later + timedelta(seconds=181)) == [task.id]
    reaped = loop.tasks.require(task.id)
    assert (reaped.failure_code, reaped.to_api()["failure"]["who"]) == ("deadline", "nobody: Steward retries")
    assert not loop.tasks.touch(
        task.id, runtime_id="r1", now=later, deadline=later
    )  # the runtime learns it lost


def test_paused_users_tasks_are_reaped_too(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    loop.settings("alice", paused=True)
    assert loop.reaper.sweep(loop.clock() + LAUNCH_GRACE * 2) == [task.id]


def test_review_tasks_are_never_reaped(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(seconds=60))
    loop.tasks.transition(task, TaskStatus.REVIEW, now=now, event="pull_request")
    assert loop.reaper.sweep(now + timedelta(days=30)) == []


def test_lifecycle_events_advance_the_watermark_and_progress_events_do_not(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    users = loop.heartbeat.users
    before = users.loop_state("alice").watermark
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(seconds=60))
    assert users.loop_state("alice").watermark == before + 1
    task = loop.tasks.append_event(task, "phase", {"phase": "edit"}, now=now)
    task = loop.tasks.append_event(task, "check", {"command": "pytest -q", "ok": True}, now=now)
    assert users.loop_state("alice").watermark == before + 1
    loop.tasks.transition(task, TaskStatus.FAILED, now=now, event="finished", classification="final")
    assert users.loop_state("alice").watermark == before + 2
    events = loop.services.tasks.events_after("alice", task.id, after=0, limit=100)["events"]
    assert [(e["seq"], e["type"]) for e in events] == [
        (1, "started"),
        (2, "phase"),
        (3, "check"),
        (4, "finished"),
    ]
    tail = loop.services.tasks.events_after("alice", task.id, after=2, limit=100)
    assert [e["seq"] for e in tail["events"]] == [3, 4]
    assert tail["next"] == 4


def test_concurrent_appends_are_gapless(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    barrier = threading.Barrier(20)

    def append(n: int) -> None:
        barrier.wait()
        loop.tasks.append_event(task, "tool", {"n": n}, now=loop.clock())

    with ThreadPoolExecutor(20) as pool:
        list(pool.map(append, range(20)))
    events = loop.services.tasks.events_after("alice", task.id, after=0, limit=100)["events"]
    assert [e["seq"] for e in events] == list(range(1, 21))
    assert sorted(e["data"]["n"] for e in events) == list(range(20))


def test_a_second_runtime_cannot_claim_a_claimed_task(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    now = loop.clock()
    loop.tasks.claim(task, runtime_id="first", now=now, deadline=now + timedelta(seconds=60))
    with pytest.raises(Exception, match="another runtime"):
        loop.tasks.claim(task, runtime_id="second", now=now, deadline=now + timedelta(seconds=60))
    stored = loop.tasks.get(task.id)
    assert stored is not None
    assert stored.runtime_id == "first"


def test_a_failed_task_revived_by_a_webhook_is_live_again(loop: Loop) -> None:
    [task] = spawned(loop, "A")
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(seconds=60))
    failed, _ = loop.tasks.transition(
        task, TaskStatus.FAILED, now=now, event="finished", classification="retryable"
    )
    assert task.id not in {t.id for t in loop.tasks.live_for_user("alice")}
    loop.tasks.transition(failed, TaskStatus.REVIEW, now=now, event="github_event")
    assert task.id in {t.id for t in loop.tasks.live_for_user("alice")}
