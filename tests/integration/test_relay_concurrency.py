"""Spend above the ceiling is impossible, not unlikely: 200 concurrent calls on one task on
the moto server (real HTTP, DynamoDB serialized per docs/testing.md), with the committed
spend sampled throughout."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import boto3
import pytest
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.adapters.price_file import load_price_table
from steward.config import Settings
from steward.domain.budget import input_bound_tokens, max_cost
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.errors import BudgetExhausted, RetryLater
from steward.local.moto_server import MotoServer
from steward.wiring import Services

from tests.support.relay import RelayKit, ask, build_relay

CALLS = 200


@pytest.fixture(scope="module")
def server() -> Iterator[MotoServer]:
    with MotoServer() as moto:
        yield moto


@pytest.fixture
def kit(server: MotoServer) -> RelayKit:
    endpoint = {"endpoint_url": server.url, "region_name": "us-east-1"}
    prefix = f"c{time.monotonic_ns() % 10**9}-"
    tables = Tables.connect(prefix, **endpoint)
    tables.create_all()
    s3 = boto3.client("s3", **endpoint)
    s3.create_bucket(Bucket=f"{prefix}artifacts")  # publish keeps each content's document there
    services = Services.build(
        Settings(table_prefix=prefix), tables, ArtifactStore(f"{prefix}artifacts", client=s3)
    )
    return build_relay(services, **endpoint)


def calibrated_task(kit: RelayKit, calls_paid: int) -> tuple[object, Decimal]:
    """A task whose budget pays for about `calls_paid` calls at the relay's reservation for
    the test's request (its maximum cost: input bound plus maxTokens)."""
    entry = load_price_table().entry("scripted")
    reserved = max_cost(entry, input_bound_tokens(payload_bytes(ConverseRequest.model_validate(ask()))), 64)
    cap = (reserved * calls_paid).quantize(Decimal("0.000001"))
    return kit.running_task(budget=str(cap), slug="capped"), cap


def sampler(kit: RelayKit, task: object, cap: Decimal, stop: threading.Event, seen: list[Decimal]) -> None:
    while not stop.is_set():
        _, committed = kit.spent(task)  # type: ignore[arg-type]
        seen.append(committed)
        assert committed <= cap


def test_two_hundred_concurrent_calls_never_exceed_the_cap(kit: RelayKit) -> None:
    probe = kit.running_task(budget="1.00", slug="probe")
    one = kit.call(probe).cost_usd  # what one call of this request actually costs
    cap = (one * 40).quantize(Decimal("0.000001"))
    task = kit.running_task(budget=str(cap), slug="capped")
    token = kit.capability(task)  # type: ignore[arg-type]
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=sampler, args=(kit, task, cap, stop, seen))
    watcher.start()
    outcomes: Counter[str] = Counter()
    settled = []
    lock = threading.Lock()

    def call(_: int) -> None:
        try:
            outcome = kit.call(task, token=token)  # type: ignore[arg-type]
        except (BudgetExhausted, RetryLater) as exc:
            with lock:
                outcomes[str(exc.status)] += 1
            return
        with lock:
            outcomes["200"] += 1
            settled.append(outcome.cost_usd)

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(call, range(CALLS)))
    stop.set()
    watcher.join()
    cost, committed = kit.spent(task)  # type: ignore[arg-type]
    assert sum(outcomes.values()) == CALLS
    assert set(outcomes) <= {"200", "402", "429"}
    assert outcomes["200"] >= 1
    assert outcomes["402"] + outcomes["429"] > 0, outcomes  # the cap did bind
    assert sum(settled) == cost == committed <= cap
    assert seen
    assert max(seen) <= cap


def test_callers_that_honour_retry_after_spend_the_cap_to_within_ten_percent(kit: RelayKit) -> None:
    task, cap = calibrated_task(kit, 40)
    token = kit.capability(task)  # type: ignore[arg-type]
    refusals: Counter[int] = Counter()

    def caller(_: int) -> None:
        while True:
            try:
                kit.call(task, token=token)  # type: ignore[arg-type]
            except RetryLater as exc:
                refusals[429] += 1
                time.sleep(min(exc.retry_after, 1) * 0.5)  # honour it (shortened: scripted calls take ms)
            except BudgetExhausted:
                refusals[402] += 1
                return

    with ThreadPoolExecutor(20) as pool:
        list(pool.map(caller, range(20)))
    cost, committed = kit.spent(task)  # type: ignore[arg-type]
    assert cost == committed <= cap
    assert cost >= cap * Decimal("0.9"), (cost, cap)
    assert refusals[402] == 20
