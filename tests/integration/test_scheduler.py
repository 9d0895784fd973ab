"""The scheduler on moto in-process: the sparse liveness index, the heartbeat FIFO queue
(group = user, deduplication by user and tick window), batching, retried entry failures,
and the read cost with 10,000 users of whom 50 are live."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from steward import wiring
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.liveness import SHARDS, LivenessIndex
from steward.adapters.queue import HeartbeatQueue, TickSendError, count_sqs_requests, queue_url
from steward.config import Settings
from steward.domain.ids import LIVE_SHARDS, live_shard
from steward.local.http_adapter import LambdaContext
from steward.queues import HEARTBEAT
from steward.services.scheduler import run_scheduler, tick_window
from steward.tables import USERS

from functions.scheduler.handler import lambda_handler
from tests.conftest import REGION

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

NOW = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
PERIOD = 60


@pytest.fixture
def sqs(aws: None) -> SQSClient:
    return boto3.client("sqs", region_name=REGION)


@pytest.fixture
def queue(sqs: SQSClient) -> HeartbeatQueue:
    sqs.create_queue(**HEARTBEAT.create_queue_kwargs("test-"))
    return HeartbeatQueue(queue_url(sqs, "test-"), client=sqs, backoff_seconds=0)


@pytest.fixture
def index(tables: Tables) -> LivenessIndex:
    return LivenessIndex(tables)


def add_users(tables: Tables, live: Sequence[str], idle: Sequence[str] = ()) -> None:
    """Users as the loop leaves them: `live_shard` only on users with live work."""
    with tables.table(USERS).batch_writer() as batch:
        for user in live:
            batch.put_item(Item={"user": user, "live_shard": live_shard(user), "enabled": True})
        for user in idle:
            batch.put_item(Item={"user": user, "enabled": True})


def drain(sqs: SQSClient, url: str) -> list[dict[str, Any]]:
    """Every message in the queue, deleted as received (so a second message of one group
    would surface too)."""
    messages: list[dict[str, Any]] = []
    while True:
        page = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["MessageGroupId", "MessageDeduplicationId"],
        ).get("Messages", [])
        if not page:
            return messages
        for message in page:
            messages.append(
                {
                    "group": message["Attributes"]["MessageGroupId"],
                    "dedup": message["Attributes"]["MessageDeduplicationId"],
                    "body": json.loads(message["Body"]),
                }
            )
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def users(count: int, prefix: str = "user") -> list[str]:
    return [f"{prefix}-{n:05d}" for n in range(count)]


class InjectFailures:
    """Make SQS report each named user's entry as `Failed` (an internal error, not the
    sender's fault) for its first `failing[user]` attempts. The entries are taken out of the
    request before it is sent and added to the response's `Failed`, so they really are not
    enqueued; a request left with no entries is answered without being sent."""

    def __init__(self, queue: HeartbeatQueue, failing: dict[str, int]) -> None:
        self.left = dict(failing)
        self.dropped: list[str] = []
        self.answer_locally = False
        events = queue.client.meta.events
        events.register("before-parameter-build.sqs.SendMessageBatch", self._drop)
        # A before-call handler that returns (http response, parsed) replaces the request.
        short_circuit: Any = self._short_circuit
        events.register("before-call.sqs.SendMessageBatch", short_circuit)
        events.register("after-call.sqs.SendMessageBatch", self._report)

    def _drop(self, params: dict[str, Any], **_: Any) -> None:
        keep = []
        for entry in params["Entries"]:
            if self.left.get(entry["MessageGroupId"], 0) > 0:
                self.left[entry["MessageGroupId"]] -= 1
                self.dropped.append(entry["Id"])
            else:
                keep.append(entry)
        self.answer_locally = not keep
        if keep:
            params["Entries"] = keep

    def _short_circuit(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not self.answer_locally:
            return None
        return AWSResponse("https://sqs.invalid/", 200, HTTPHeaders(), None), {"Successful": [], "Failed": []}

    def _report(self, parsed: dict[str, Any], **_: Any) -> None:
        failed = parsed.setdefault("Failed", [])
        failed.extend(
            {"Id": i, "SenderFault": False, "Code": "InternalError", "Message": "injected"}
            for i in self.dropped
        )
        self.dropped = []


# ---------------------------------------------------------------- queue spec and window


def test_heartbeat_queue_is_created_from_its_spec(sqs: SQSClient, queue: HeartbeatQueue) -> None:
    assert HEARTBEAT.physical_name("test-") == "test-heartbeat.fifo"
    assert queue.url.endswith("/test-heartbeat.fifo")
    attributes = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["All"])["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "false"
    assert attributes["VisibilityTimeout"] == "120"


def test_tick_window_floors_epoch_seconds_to_the_period() -> None:
    start = datetime(2026, 1, 1, 12, tzinfo=UTC)
    epoch = int(start.timestamp())
    assert tick_window(start, 60) == str(epoch)
    assert tick_window(start + timedelta(seconds=59, microseconds=999_999), 60) == str(epoch)
    assert tick_window(start + timedelta(seconds=60), 60) == str(epoch + 60)
    assert tick_window(start + timedelta(seconds=299), 300) == str(epoch)
    # The same instant written in another zone is the same window.
    assert tick_window(start.astimezone(timezone(timedelta(hours=5, minutes=30))), 60) == str(epoch)
    with pytest.raises(ValueError, match="aware"):
        tick_window(datetime(2026, 1, 1), 60)
    with pytest.raises(ValueError, match="period_seconds"):
        tick_window(start, 0)


# ---------------------------------------------------------------- liveness index


def test_only_users_with_a_live_shard_are_in_the_index(tables: Tables, index: LivenessIndex) -> None:
    live, idle = users(12, "live"), users(30, "idle")
    add_users(tables, live, idle)
    assert sorted(index.all_live_users()) == live
    by_shard: dict[str, list[str]] = {}
    for user in live:
        by_shard.setdefault(live_shard(user), []).append(user)
    for shard in SHARDS:
        found, cursor = index.live_users(shard)
        assert found == sorted(by_shard.get(shard, []))
        assert cursor is None


def test_live_shard_names_are_the_shards_the_index_pages() -> None:
    assert len(SHARDS) == LIVE_SHARDS
    assert {live_shard(user) for user in users(2000)} == set(SHARDS)


def test_live_users_pages_with_a_cursor(tables: Tables, index: LivenessIndex) -> None:
    same_shard = [u for u in users(400) if live_shard(u) == "s03"][:7]
    add_users(tables, same_shard)
    pages: list[list[str]] = []
    cursor: dict[str, Any] | None = None
    while True:
        page, cursor = index.live_users("s03", cursor=cursor, limit=3)
        pages.append(page)
        if cursor is None:
            break
    assert [u for page in pages for u in page] == sorted(same_shard)
    assert [len(page) for page in pages][:3] == [3, 3, 1]


# ---------------------------------------------------------------- scheduler runs


def test_one_run_sends_one_tick_per_live_user_grouped_by_user(
    tables: Tables, index: LivenessIndex, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    live = users(12, "live")
    add_users(tables, live, users(5, "idle"))
    assert run_scheduler(index, queue, now=NOW, period_seconds=PERIOD) == {"users": 12, "sent": 12}
    messages = drain(sqs, queue.url)
    window = tick_window(NOW, PERIOD)
    assert sorted(m["group"] for m in messages) == live
    for message in messages:
        assert message["body"] == {"user": message["group"], "window": window}
        expected = hashlib.sha256(f"{message['group']}:{window}".encode()).hexdigest()
        assert message["dedup"] == expected


def test_a_replayed_run_in_the_same_window_is_deduplicated(
    tables: Tables, index: LivenessIndex, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    live = users(12, "live")
    add_users(tables, live)
    run_scheduler(index, queue, now=NOW, period_seconds=PERIOD)
    # A retried invocation, and a late one still in the same window.
    run_scheduler(index, queue, now=NOW, period_seconds=PERIOD)
    run_scheduler(index, queue, now=NOW + timedelta(seconds=50), period_seconds=PERIOD)
    messages = drain(sqs, queue.url)
    assert sorted(m["group"] for m in messages) == live


def test_a_new_window_ticks_every_live_user_again(
    tables: Tables, index: LivenessIndex, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    live = users(12, "live")
    add_users(tables, live)
    run_scheduler(index, queue, now=NOW, period_seconds=PERIOD)
    run_scheduler(index, queue, now=NOW + timedelta(seconds=PERIOD), period_seconds=PERIOD)
    messages = drain(sqs, queue.url)
    assert len(messages) == 24
    windows = {tick_window(NOW, PERIOD), tick_window(NOW + timedelta(seconds=PERIOD), PERIOD)}
    for user in live:
        assert {m["body"]["window"] for m in messages if m["group"] == user} == windows


def test_no_live_users_sends_nothing(tables: Tables, index: LivenessIndex, queue: HeartbeatQueue) -> None:
    add_users(tables, [], users(20, "idle"))
    with count_sqs_requests(queue) as sqs_requests:
        assert run_scheduler(index, queue, now=NOW, period_seconds=PERIOD) == {"users": 0, "sent": 0}
    assert sqs_requests == {}


def test_25_users_go_out_in_3_batches(
    tables: Tables, index: LivenessIndex, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    add_users(tables, users(25))
    with count_sqs_requests(queue) as sqs_requests, count_requests(tables) as dynamodb_requests:
        assert run_scheduler(index, queue, now=NOW, period_seconds=PERIOD) == {"users": 25, "sent": 25}
    assert dict(sqs_requests) == {"SendMessageBatch": 3}
    assert dict(dynamodb_requests) == {"Query": LIVE_SHARDS}
    assert len(drain(sqs, queue.url)) == 25


def test_a_user_listed_twice_is_ticked_once(queue: HeartbeatQueue, sqs: SQSClient) -> None:
    assert queue.send_ticks(["a", "b", "a", "c", "b"], window="100") == 3
    assert sorted(m["group"] for m in drain(sqs, queue.url)) == ["a", "b", "c"]


def test_a_failed_batch_entry_is_retried(
    tables: Tables, index: LivenessIndex, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    live = users(25)
    add_users(tables, live)
    InjectFailures(queue, {live[3]: 1, live[17]: 2})
    with count_sqs_requests(queue) as sqs_requests:
        assert run_scheduler(index, queue, now=NOW, period_seconds=PERIOD) == {"users": 25, "sent": 25}
    # 3 batches; a retry batch of both failures, where live[17] fails again; its own retry.
    assert dict(sqs_requests) == {"SendMessageBatch": 5}
    assert sorted(m["group"] for m in drain(sqs, queue.url)) == live


def test_entries_failing_every_attempt_raise_naming_how_many(
    tables: Tables, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    live = users(25)
    InjectFailures(queue, {live[0]: 99, live[24]: 99})
    with pytest.raises(
        TickSendError, match=r"^2 heartbeat tick\(s\) failed after 4 attempts \(23 sent\)"
    ) as err:
        queue.send_ticks(live, window="100")
    assert set(err.value.failed) == {live[0], live[24]}
    assert err.value.failed[live[0]] == "InternalError"
    # The others were not held up by the failures.
    assert sorted(m["group"] for m in drain(sqs, queue.url)) == live[1:24]


def test_scheduler_reads_only_the_live_users_among_10000(
    tables: Tables, index: LivenessIndex, queue: HeartbeatQueue, sqs: SQSClient
) -> None:
    everyone = users(10_000)
    live = everyone[::200]
    assert len(live) == 50
    add_users(tables, live, sorted(set(everyone) - set(live)))
    read = {"ScannedCount": 0, "Count": 0}

    def on_query(parsed: dict[str, Any], **_: Any) -> None:
        read["ScannedCount"] += parsed.get("ScannedCount", 0)
        read["Count"] += parsed.get("Count", 0)

    events = tables.client.meta.events
    events.register("after-call.dynamodb.Query", on_query)
    try:
        with count_sqs_requests(queue) as sqs_requests, count_requests(tables) as dynamodb_requests:
            result = run_scheduler(index, queue, now=NOW, period_seconds=PERIOD)
    finally:
        events.unregister("after-call.dynamodb.Query", on_query)
    assert result == {"users": 50, "sent": 50}
    assert read["ScannedCount"] <= 60
    assert read["Count"] == 50
    assert dict(dynamodb_requests) == {"Query": LIVE_SHARDS}
    assert dict(sqs_requests) == {"SendMessageBatch": 5}
    assert sorted(m["group"] for m in drain(sqs, queue.url)) == live


# ---------------------------------------------------------------- Lambda entry point


@pytest.fixture
def fresh_scheduler() -> Iterator[None]:
    wiring.reset()
    yield
    wiring.reset()


@pytest.mark.usefixtures("fresh_scheduler")
def test_lambda_handler_wires_env_ticks_the_scheduled_window_and_emits_the_metric(
    tables: Tables,
    queue: HeartbeatQueue,
    sqs: SQSClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", "test-")  # the queue prefix defaults to it
    monkeypatch.delenv("STEWARD_QUEUE_PREFIX", raising=False)
    monkeypatch.setenv("STEWARD_TICK_SECONDS", "300")
    live = users(3, "live")
    add_users(tables, live, users(4, "idle"))
    event = {"scheduled_time": "2026-01-01T12:04:59Z"}
    result = lambda_handler(event, LambdaContext("steward-scheduler"))
    assert result == {"users": 3, "sent": 3}
    window = tick_window(datetime(2026, 1, 1, 12, tzinfo=UTC), 300)
    assert {m["body"]["window"] for m in drain(sqs, queue.url)} == {window}
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    metrics = [m for m in emitted if "UsersScheduled" in m]
    assert len(metrics) == 1
    assert metrics[0]["UsersScheduled"] == [3.0]
    assert metrics[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Steward"


@pytest.mark.parametrize("period", ["0", "-5", "1.5", "soon"])
def test_a_bad_tick_period_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, aws: None, period: str
) -> None:
    monkeypatch.setenv("STEWARD_TICK_SECONDS", period)
    with pytest.raises(ValueError, match="STEWARD_TICK_SECONDS"):
        Settings.from_env()
