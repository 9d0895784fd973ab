"""An approval starts work at once (DESIGN 12, docs/concepts/loop.md): a confirm, an explicit
retry or a recorded follow-up ask lets the loop's next tick through the interval gate (the
other gates still hold), and the API enqueues a tick for its user on the heartbeat queue.
Against moto: the heartbeat with a 60 s interval on a fixed clock one second on, and the
queue read back from moto's SQS."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import count_requests
from steward.adapters.queue import PERSON_WINDOW, HeartbeatQueue, TickNow, queue_url
from steward.config import Settings
from steward.domain.models import PlanStatus, Task, TaskStatus
from steward.queues import HEARTBEAT
from steward.services.heartbeat import Outcome, TickReport
from steward.tables import TASKS
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.documents import document
from tests.support.loop import Loop, build_loop

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

HEAD = "e" * 40


@pytest.fixture
def loop(services: Services) -> Loop:
    loop = build_loop(services)
    loop.settings("alice", interval_seconds=60, max_parallel=5)
    return loop


def confirm(loop: Loop, slug: str, *items: str) -> None:
    loop.services.plans.publish(
        "alice", slug, document(*items).replace("checks:", "max_attempts: 1\nchecks:")
    )
    loop.services.plans.confirm("alice", slug)


def tick(loop: Loop, seconds: float = 1) -> TickReport:
    """A tick `seconds` after the last (1 s: well within the 60 s interval)."""
    loop.clock.advance(seconds)
    return loop.heartbeat.tick("alice")


def task_count(loop: Loop) -> int:
    return len(loop.services.tables.table(TASKS).scan(ConsistentRead=True)["Items"])


def only_task(loop: Loop, slug: str) -> Task:
    task_id = loop.services.plans.get("alice", slug).active_items[0].task_id
    found = loop.tasks.get(task_id or "")
    assert found is not None
    return found


# ---- the loop: the interval gate yields to a person's action, and only to one


def test_a_confirm_is_acted_on_by_the_next_tick_despite_the_interval(loop: Loop) -> None:
    confirm(loop, "first", "A")
    assert tick(loop).outcome is Outcome.WORKED
    # Nothing a person did: the interval holds, at one GetItem as before.
    with count_requests(loop.services.tables) as requests:
        assert tick(loop).outcome is Outcome.INTERVAL
    assert dict(requests) == {"GetItem": 1}
    confirm(loop, "second", "B")
    report = tick(loop)
    assert (report.outcome, len(report.spawned)) == (Outcome.WORKED, 1)
    assert only_task(loop, "second").id == report.spawned[0]
    # Acted on: the interval bounds the ticks again.
    assert tick(loop).outcome is Outcome.INTERVAL
    assert task_count(loop) == 2
    # The other gates still hold a person's action; its nudge outlives them.
    loop.settings("alice", paused=True)
    confirm(loop, "third", "C")
    assert tick(loop).outcome is Outcome.PAUSED
    loop.settings("alice", paused=False)
    report = tick(loop)  # resumed, the confirm is acted on at once
    assert (report.outcome, len(report.spawned)) == (Outcome.WORKED, 1)
    assert loop.services.plans.get("alice", "third").status is PlanStatus.IN_PROGRESS


def test_a_confirm_during_a_tick_is_acted_on_by_the_following_tick(loop: Loop) -> None:
    confirm(loop, "first", "A")
    plans = loop.heartbeat.plans
    real = plans.all_for_user

    def read_then_confirm(user: str):  # type: ignore[no-untyped-def]
        seen = real(user)  # the tick holds the lease and has read the plans
        confirm(loop, "second", "B")
        return seen

    plans.all_for_user = read_then_confirm  # type: ignore[method-assign]
    try:
        report = tick(loop)
    finally:
        plans.all_for_user = real  # type: ignore[method-assign]
    assert (report.outcome, len(report.spawned)) == (Outcome.WORKED, 1)
    assert loop.heartbeat.users.loop_state("alice").nudged
    report = tick(loop)
    assert (report.outcome, report.spawned) == (Outcome.WORKED, (only_task(loop, "second").id,))
    assert tick(loop).outcome is Outcome.INTERVAL


def test_a_retry_is_acted_on_by_the_next_tick_despite_the_interval(loop: Loop) -> None:
    confirm(loop, "demo", "A")
    assert tick(loop).outcome is Outcome.WORKED
    failed, _ = loop.tasks.transition(
        only_task(loop, "demo"), TaskStatus.FAILED, now=loop.clock(), event="finished", classification="final"
    )
    loop.tasks.project_item(failed, now=loop.clock())
    # A task's own lifecycle event wakes the loop but is no person's: the interval holds.
    assert not loop.heartbeat.users.loop_state("alice").nudged
    assert tick(loop).outcome is Outcome.INTERVAL
    loop.services.tasks.retry("alice", failed.id)
    report = tick(loop)
    assert report.outcome is Outcome.WORKED
    retried = only_task(loop, "demo")
    assert (report.spawned, retried.attempt, retried.status) == ((retried.id,), 2, TaskStatus.QUEUED)


def in_review(loop: Loop) -> Task:
    confirm(loop, "demo", "A")
    assert tick(loop).outcome is Outcome.WORKED
    task = only_task(loop, "demo")
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r-1", now=now, deadline=now + timedelta(hours=1))
    task, _ = loop.tasks.transition(
        task, TaskStatus.REVIEW, now=now, event="finished", extra={"pr_number": 7, "head_sha": HEAD}
    )
    loop.tasks.project_item(task, now=now)
    return task


def test_a_follow_up_ask_is_acted_on_by_the_next_tick_despite_the_interval(loop: Loop) -> None:
    task = in_review(loop)
    assert tick(loop).outcome is Outcome.INTERVAL  # the runtime's `finished` is no person's
    # A stranger's refused ask wakes the loop to reply; it starts no work: the interval holds.
    loop.tasks.append_event(
        task,
        "follow_up_refused",
        {"kind": "mention", "reason": "collaborators only"},
        now=loop.clock(),
        wake=True,
    )
    assert tick(loop).outcome is Outcome.INTERVAL
    key = f"7:{HEAD}:review"
    ask = {"kind": "review", "round_key": key, "head_sha": HEAD, "body": "Please rename it."}
    task = loop.tasks.append_event(
        loop.tasks.require(task.id),
        "follow_up_asked",
        ask,
        now=loop.clock(),
        sets={"follow_up_keys": [key], "pending_asks": [ask]},
        wake=True,
    )
    report = tick(loop)
    assert report.outcome is Outcome.WORKED
    [round_task] = [t for t in loop.tasks.live_for_user("alice") if t.is_round]
    assert (report.spawned, round_task.parent) == ((round_task.id,), task.id)


# ---- the API: a tick enqueued right after the person's action


@pytest.fixture
def sqs(aws: None) -> SQSClient:
    return boto3.client("sqs", region_name=REGION)


@pytest.fixture
def queue(sqs: SQSClient) -> HeartbeatQueue:
    sqs.create_queue(**HEARTBEAT.create_queue_kwargs("test-"))
    return HeartbeatQueue(queue_url(sqs, "test-"), client=sqs, backoff_seconds=0)


def api_with(services: Services, settings: Settings, tick_now: TickNow) -> Services:
    s3 = ArtifactStore(settings.artifacts_bucket, client=boto3.client("s3", region_name=REGION))
    return Services.build(settings, services.tables, s3, tick_now=tick_now)


def take_ticks(queue: HeartbeatQueue) -> list[dict[str, Any]]:
    """The ticks waiting on the queue (one group per user: each read, then deleted)."""
    bodies = []
    while messages := queue.client.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10).get(
        "Messages", []
    ):
        for message in messages:
            bodies.append(json.loads(message["Body"]))
            queue.client.delete_message(QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"])
    return bodies


def test_a_confirm_and_a_retry_enqueue_a_tick_and_a_queue_failure_fails_no_confirm(
    services: Services,
    settings: Settings,
    sqs: SQSClient,
    queue: HeartbeatQueue,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = api_with(services, settings, TickNow(lambda: queue))
    api.plans.publish("alice", "demo", document("A").replace("checks:", "max_attempts: 1\nchecks:"))
    assert take_ticks(queue) == []  # a publish approves nothing
    with count_requests(api.tables) as requests:
        api.plans.confirm("alice", "demo")
    assert dict(requests) == {"TransactWriteItems": 1, "GetItem": 1}  # the tick costs no table request
    [confirmed] = take_ticks(queue)
    assert confirmed["user"] == "alice"
    assert confirmed["window"].startswith(PERSON_WINDOW)
    loop = build_loop(api)
    loop.heartbeat.tick("alice")
    failed, _ = loop.tasks.transition(
        only_task(loop, "demo"), TaskStatus.FAILED, now=loop.clock(), event="finished", classification="final"
    )
    loop.tasks.project_item(failed, now=loop.clock())
    assert take_ticks(queue) == []  # the task's own failure enqueues nothing
    api.tasks.retry("alice", failed.id)
    [retried] = take_ticks(queue)
    # each action its own window: SQS's deduplication never swallows a second one
    assert retried["user"] == "alice"
    assert retried["window"].startswith(PERSON_WINDOW)
    assert retried["window"] != confirmed["window"]

    # A queue that cannot be reached fails no person's request: logged, and the approval is
    # durable all the same (the scheduler's next tick is let through the interval gate).
    missing = HeartbeatQueue(f"{sqs.meta.endpoint_url}/123456789012/no-such-queue.fifo", client=sqs)
    api = api_with(services, settings, TickNow(lambda: missing))
    api.plans.publish("alice", "later", document("B"))
    with caplog.at_level(logging.ERROR, logger="steward.adapters.queue"):
        assert api.plans.confirm("alice", "later").status is PlanStatus.CONFIRMED
    assert "a tick for a person's action could not be enqueued" in caplog.text
    assert api.users.loop_state("alice").nudged
