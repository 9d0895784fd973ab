"""Relay figures (issue "model-spend relay"), printed, not asserted:

1. DynamoDB requests per admitted call, per refused call and per call whose maxTokens was
   lowered (aim 2 and 1; lowering may take one more);
2. relay calls per second on one task against the moto server, as a ratio to pairs of raw
   conditional UpdateItem calls on the same server in the same run (aim >= 0.8), and to the
   relay's own two writes issued raw, as the relay issues them (aim >= 0.95);
3. the share of the cap spent before the first 402 under 100 concurrent callers that retry
   on 429 (aim >= 0.9);
4. the CPU time of importing the relay handler module in a fresh interpreter, as a ratio
   to `import boto3` alone (aim <= 1.0), each the median of 7 runs
   (`bench/bench_cold_imports.py` says why CPU time).

    .venv/bin/python bench/relay.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.price_file import load_price_table
from steward.config import Settings
from steward.domain.budget import input_bound_tokens, max_cost
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.errors import BudgetExhausted, RetryLater
from steward.domain.models import utcnow
from steward.local.moto_server import MotoServer
from steward.wiring import Services

from bench.bench_cold_imports import import_ratio
from tests.support.relay import RelayKit, ask, build_relay

ROUNDS = 300


def kit_on(moto: MotoServer, prefix: str) -> RelayKit:
    endpoint = {"endpoint_url": moto.url, "region_name": "us-east-1"}
    tables = Tables.connect(prefix, **endpoint)
    tables.create_all()
    s3 = boto3.client("s3", **endpoint)
    bucket = f"{prefix.rstrip('-').lower()}-artifacts"
    s3.create_bucket(Bucket=bucket)  # publish keeps each content's document there
    services = Services.build(Settings(table_prefix=prefix), tables, ArtifactStore(bucket, client=s3))
    return build_relay(services, **endpoint)


def requests_per_call(kit: RelayKit) -> None:
    task = kit.running_task(budget="1.00", slug="count")
    token = kit.capability(task)
    with count_requests(kit.services.tables) as admitted:
        kit.call(task, token=token)
    lowered_task = kit.running_task(budget="0.005", slug="lowered")
    with count_requests(kit.services.tables) as lowered:
        outcome = kit.call(lowered_task, ask(max_tokens=4000))
    spent = kit.running_task(budget="0.0001", slug="spent")
    with count_requests(kit.services.tables) as refused, contextlib.suppress(BudgetExhausted):
        kit.call(spent)
    print(f"DynamoDB requests per admitted call:        {sum(admitted.values())}  {dict(admitted)}")
    print(f"DynamoDB requests per refused call (402):   {sum(refused.values())}  {dict(refused)}")
    print(
        f"DynamoDB requests per lowered call:         {sum(lowered.values())}  (maxTokens 4000 -> {outcome.max_tokens})"
    )


def throughput(kit: RelayKit) -> None:
    task = kit.running_task(budget="9.00", slug="speed")
    token = kit.capability(task)
    table = kit.services.tables.table_by_name("tasks")
    body = json.dumps(ask())
    kit.relay.converse(f"Bearer {token}", body)  # warm: provider import, key, connections

    def relay_calls() -> float:
        start = time.perf_counter()
        for _ in range(ROUNDS):
            kit.relay.converse(f"Bearer {token}", body)
        return ROUNDS / (time.perf_counter() - start)

    def raw_pairs() -> float:
        start = time.perf_counter()
        for n in range(ROUNDS):
            for value in (Decimal(1), Decimal(-1)):
                table.update_item(
                    Key={"task_id": task.id},
                    UpdateExpression="ADD bench_counter :v",
                    ConditionExpression="#s = :running AND headroom_usd >= :zero",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":v": value, ":running": "running", ":zero": Decimal(0)},
                )
            del n
        return ROUNDS / (time.perf_counter() - start)

    def same_shape_pairs() -> float:
        """The relay's own two writes, issued raw: what the relay adds beyond its I/O. The
        settlement is given `now`, as the relay's is, so it also writes the spend bucket."""
        start = time.perf_counter()
        now = utcnow()
        for n in range(ROUNDS):
            rid = f"raw{n}"
            kit.budget.reserve(
                task_id=task.id,
                owner=task.user,
                model=task.model,
                token_cap=task.budget_usd,
                cost=Decimal("0.001"),
                reservation_id=rid,
                expires_at=now + timedelta(minutes=5),
                now=now,
            )
            kit.budget.settle(
                task_id=task.id,
                reservation_id=rid,
                reserved=Decimal("0.001"),
                actual=Decimal("0.0001"),
                now=now,
            )
        return ROUNDS / (time.perf_counter() - start)

    relay_rates, raw_rates, shaped_rates = [], [], []
    for _ in range(3):  # interleaved, so all see the same machine
        raw_rates.append(raw_pairs())
        shaped_rates.append(same_shape_pairs())
        relay_rates.append(relay_calls())
    relay_rate, raw_rate = statistics.median(relay_rates), statistics.median(raw_rates)
    shaped_rate = statistics.median(shaped_rates)
    print(f"relay calls/s on one task:                  {relay_rate:.1f}")
    print(f"raw conditional UpdateItem pairs/s:         {raw_rate:.1f}  (ADD with a 2-clause condition)")
    print(f"ratio (aim >= 0.8):                         {relay_rate / raw_rate:.2f}")
    print(f"raw reserve+settle pairs/s (same writes):   {shaped_rate:.1f}")
    print(f"ratio to the same writes issued raw:        {relay_rate / shaped_rate:.2f}  (aim >= 0.95)")


def share_before_first_402(kit: RelayKit) -> None:
    entry = load_price_table().entry("scripted")
    reserved = max_cost(entry, input_bound_tokens(payload_bytes(ConverseRequest.model_validate(ask()))), 64)
    cap = (reserved * 40).quantize(Decimal("0.000001"))
    task = kit.running_task(budget=str(cap), slug="share")
    token = kit.capability(task)
    body = json.dumps(ask())
    first_402: list[Decimal] = []
    lock = threading.Lock()

    def caller(_: int) -> None:
        while True:
            try:
                kit.relay.converse(f"Bearer {token}", body)
            except RetryLater as exc:
                time.sleep(min(exc.retry_after, 1) * 0.2)
            except BudgetExhausted:
                with lock:
                    if not first_402:
                        first_402.append(kit.spent(task)[0])
                return

    with ThreadPoolExecutor(100) as pool:
        list(pool.map(caller, range(100)))
    final, _ = kit.spent(task)
    print(
        f"share of the cap spent before the first 402 (100 callers, aim >= 0.9): {first_402[0] / cap:.3f}"
        f"  (final {final / cap:.3f}, cap {cap})"
    )


def main() -> None:
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    with MotoServer() as moto:
        print(f"relay on the moto server ({moto.url})")
        requests_per_call(kit_on(moto, "count-"))
        throughput(kit_on(moto, "speed-"))
        share_before_first_402(kit_on(moto, "share-"))
    print(import_ratio("steward.relay_handler"))


if __name__ == "__main__":
    main()
