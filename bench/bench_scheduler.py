"""Cost of one scheduler run, counted on the wire with botocore hooks.

10,000 users, of whom only 50 carry `live_shard` (enabled loop, live work). The scheduler
should read the live users and nothing else: items read grow with active users, not all
users; requests are one Query per shard (more only past a page of 500 per shard) plus one
SendMessageBatch per 10 live users. Runs against moto in-process (whose SQS is quadratic in
the queue's length, so larger active counts are slow here, not in AWS).

    .venv/bin/python bench/bench_scheduler.py
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import boto3
from moto import mock_aws
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.liveness import LivenessIndex
from steward.adapters.queue import HeartbeatQueue, count_sqs_requests, queue_url
from steward.domain.ids import LIVE_SHARDS, live_shard
from steward.local.moto_serial import install_dynamodb_lock
from steward.queues import HEARTBEAT
from steward.services.scheduler import run_scheduler
from steward.tables import USERS

USERS_TOTAL = 10_000
ACTIVE = 50
REGION = "us-east-1"


def measure(prefix: str, active: int) -> dict[str, int]:
    tables = Tables.connect(prefix, region_name=REGION)
    tables.create_all((USERS,))
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.create_queue(**HEARTBEAT.create_queue_kwargs(prefix))
    queue = HeartbeatQueue(queue_url(sqs, prefix), client=sqs)
    step = USERS_TOTAL // active
    with tables.table(USERS).batch_writer() as batch:
        for n in range(USERS_TOTAL):
            user = f"user-{n:05d}"
            item: dict[str, Any] = {"user": user, "enabled": True}
            if n % step == 0:
                item["live_shard"] = live_shard(user)
            batch.put_item(Item=item)

    read = {"ScannedCount": 0, "Count": 0}

    def on_query(parsed: dict[str, Any], **_: Any) -> None:
        read["ScannedCount"] += parsed.get("ScannedCount", 0)
        read["Count"] += parsed.get("Count", 0)

    tables.client.meta.events.register("after-call.dynamodb.Query", on_query)
    with count_requests(tables) as dynamodb, count_sqs_requests(queue) as sqs_requests:
        result = run_scheduler(
            LivenessIndex(tables), queue, now=datetime(2026, 1, 1, 12, tzinfo=UTC), period_seconds=60
        )
    tables.client.meta.events.unregister("after-call.dynamodb.Query", on_query)
    return {
        "users in the table": USERS_TOTAL,
        "live users (live_shard set)": active,
        "users scheduled": result["users"],
        "ticks sent": result["sent"],
        "DynamoDB items read (ScannedCount)": read["ScannedCount"],
        "DynamoDB items returned (Count)": read["Count"],
        "DynamoDB requests (Query)": dynamodb["Query"],
        "DynamoDB requests (all)": sum(dynamodb.values()),
        "SQS SendMessageBatch requests": sqs_requests["SendMessageBatch"],
        "SQS requests (all)": sum(sqs_requests.values()),
    }


def main() -> None:
    # moto in-process: fake credentials, and never an endpoint from the caller's shell
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    os.environ["AWS_DEFAULT_REGION"] = REGION
    os.environ.pop("AWS_ENDPOINT_URL", None)
    install_dynamodb_lock()
    with mock_aws():
        results = measure("bench-", ACTIVE)
    print(f"One scheduler run ({LIVE_SHARDS} shards of the sparse `live` index, batches of 10)")
    for name, value in results.items():
        print(f"{name:38} {value:>7}")


if __name__ == "__main__":
    main()
