"""The heartbeat Lambda fed through a real SQS FIFO queue (moto) by the local event source
mapping: replayed ticks, malformed messages and partial batch failures."""

from __future__ import annotations

import json

import boto3
import pytest
from steward import heartbeat_handler, wiring
from steward.adapters.queue import HeartbeatQueue
from steward.local.event_sources import SqsSource
from steward.local.http_adapter import LambdaContext
from steward.queues import HEARTBEAT
from steward.tables import TASKS
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.loop import Loop, build_loop


@pytest.fixture
def loop(services: Services, monkeypatch: pytest.MonkeyPatch) -> Loop:
    loop = build_loop(services)
    loop.settings("alice", interval_seconds=1)
    loop.settings("bob", interval_seconds=1)
    monkeypatch.setattr(wiring, "heartbeat", lambda: loop.heartbeat)
    return loop


@pytest.fixture
def queue(loop: Loop) -> tuple[HeartbeatQueue, SqsSource]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(**HEARTBEAT.create_queue_kwargs("test-"))["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return HeartbeatQueue(url, client=sqs), SqsSource(
        "heartbeat", heartbeat_handler.lambda_handler, sqs, url, arn
    )


def drain(source: SqsSource, rounds: int = 3) -> None:
    for _ in range(rounds):
        source.once()


def task_count(loop: Loop) -> int:
    return len(loop.services.tables.table(TASKS).scan(ConsistentRead=True)["Items"])


def test_a_tick_delivered_twice_spawns_once(loop: Loop, queue: tuple[HeartbeatQueue, SqsSource]) -> None:
    sender, source = queue
    loop.services.plans.publish("alice", "demo", document(*numbered(3)))
    loop.services.plans.confirm("alice", "demo")
    loop.clock.advance(2)
    sender.send_ticks(["alice"], window="w1")
    drain(source)
    # the same tick again, past SQS deduplication (a redelivery after a lost delete)
    sender.send_ticks(["alice"], window="w1-redelivered")
    drain(source)
    assert task_count(loop) == 3
    assert len(loop.ecs.runs) == 3


def test_malformed_messages_are_dropped_and_do_not_block_the_batch(
    loop: Loop, queue: tuple[HeartbeatQueue, SqsSource]
) -> None:
    sender, source = queue
    loop.services.plans.publish("bob", "demo", document("B"))
    loop.services.plans.confirm("bob", "demo")
    loop.clock.advance(2)
    sender.client.send_message(
        QueueUrl=sender.url, MessageBody="not json", MessageGroupId="junk", MessageDeduplicationId="junk"
    )
    sender.send_ticks(["bob"], window="w1")
    drain(source)
    assert task_count(loop) == 1
    left = sender.client.receive_message(QueueUrl=sender.url, WaitTimeSeconds=0).get("Messages", [])
    assert left == []


def test_a_failing_tick_is_reported_and_redelivered_while_other_users_proceed(
    loop: Loop, queue: tuple[HeartbeatQueue, SqsSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    sender, source = queue
    for user in ("alice", "bob"):
        loop.services.plans.publish(user, "demo", document(f"{user}'s item"))
        loop.services.plans.confirm(user, "demo")
    loop.clock.advance(2)
    real = loop.heartbeat.plans.all_for_user
    failures = {"alice": 1}

    def flaky(user: str):  # type: ignore[no-untyped-def]
        if failures.get(user):
            failures[user] -= 1
            raise RuntimeError("throttled between two writes")
        return real(user)

    monkeypatch.setattr(loop.heartbeat.plans, "all_for_user", flaky)
    records = [
        {
            "messageId": f"m-{user}",
            "receiptHandle": "r",
            "body": json.dumps({"user": user}),
            "attributes": {"MessageGroupId": user},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:q.fifo",
            "awsRegion": "us-east-1",
        }
        for user in ("alice", "bob")
    ]
    result = heartbeat_handler.lambda_handler({"Records": records}, LambdaContext("heartbeat"))
    assert result["batchItemFailures"] == [{"itemIdentifier": "m-alice"}]
    assert task_count(loop) == 1  # bob's tick went through
    loop.clock.advance(2)
    sender.send_ticks(["alice"], window="retry")
    drain(source)
    assert task_count(loop) == 2  # alice converged on the next delivery
