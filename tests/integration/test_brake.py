"""The global brake against moto: operators and the breaker racing on one item, the relay
refusing at its next admission once the cache has seen the brake (calls in flight settle),
the heartbeat holding spawns, and the spend-velocity breaker engaging on settled spend."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest
from steward.adapters.brake_store import BrakeStore
from steward.adapters.dynamo import count_requests
from steward.domain.brake import OPERATOR, SPEND_VELOCITY
from steward.domain.errors import BrakeEngaged
from steward.domain.models import TaskStatus, utcnow
from steward.services.brake import CachedBrake, SpendBreaker
from steward.services.heartbeat import Outcome
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.loop import build_loop
from tests.support.relay import RelayKit, build_relay

THREADS = 16


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(services: Services) -> BrakeStore:
    return BrakeStore(services.tables)


@pytest.fixture
def kit(services: Services, store: BrakeStore) -> tuple[RelayKit, Ticks]:
    kit = build_relay(services)
    ticks = Ticks()
    kit.relay.brake = CachedBrake(store.read, clock=ticks).engaged
    return kit, ticks


def test_operators_racing_to_engage_and_release_leave_one_consistent_brake(store: BrakeStore) -> None:
    together = threading.Barrier(THREADS)

    def engage(n: int) -> bool:
        together.wait()
        return store.engage(reason=f"reason {n}", by=f"{OPERATOR} {n}", now=utcnow())[1]

    with ThreadPoolExecutor(THREADS) as pool:
        won = list(pool.map(engage, range(THREADS)))
    assert won.count(True) == 1
    brake = store.read()
    winner = won.index(True)
    assert (brake.engaged, brake.reason, brake.by) == (True, f"reason {winner}", f"{OPERATOR} {winner}")

    def release(n: int) -> bool:
        together.wait()
        return store.release(by=f"{OPERATOR} {n}", now=utcnow())[1]

    with ThreadPoolExecutor(THREADS) as pool:
        released = list(pool.map(release, range(THREADS)))
    assert released.count(True) == 1
    brake = store.read()
    assert not brake.engaged
    assert brake.reason is None
    assert brake.released_at is not None


def test_the_relay_refuses_at_its_next_admission_once_the_cache_sees_the_brake(
    kit: tuple[RelayKit, Ticks], store: BrakeStore
) -> None:
    relay_kit, ticks = kit
    task = relay_kit.running_task()
    relay_kit.call(task)  # reads the brake (off) into the cache
    store.engage(reason="incident", by=OPERATOR, now=utcnow())
    relay_kit.call(task)  # within 5 s the cache may still say off: the documented staleness
    ticks.now += 5
    spent = relay_kit.spent(task)
    with count_requests(relay_kit.services.tables) as requests, pytest.raises(BrakeEngaged) as refused:
        relay_kit.call(task)
    assert (refused.value.status, refused.value.code) == (503, "brake_engaged")
    assert dict(requests) == {"GetItem": 1}  # the brake's read; nothing reserved
    assert relay_kit.spent(task) == spent
    store.release(by=OPERATOR, now=utcnow())
    ticks.now += 5
    relay_kit.call(task)


def test_calls_in_flight_when_the_brake_engages_settle_and_every_later_admission_is_refused(
    kit: tuple[RelayKit, Ticks], store: BrakeStore
) -> None:
    relay_kit, ticks = kit
    task = relay_kit.running_task(budget="5.00")
    engaged = threading.Event()
    outcomes: list[str] = []
    lock = threading.Lock()

    def caller() -> None:
        for _ in range(10):
            after = engaged.is_set()
            try:
                relay_kit.call(task)
                result = "admitted"
            except BrakeEngaged:
                result = "refused"
            with lock:
                outcomes.append(f"{result} after" if after else result)
                if len(outcomes) == 20 and not engaged.is_set():
                    store.engage(reason="incident", by=OPERATOR, now=utcnow())
                    ticks.now += 5  # the cache's next look sees it
                    engaged.set()

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert engaged.is_set()
    assert "admitted" in outcomes
    assert "refused after" in outcomes
    assert "admitted after" not in outcomes  # every call that began after the brake was refused
    cost, committed = relay_kit.spent(task)
    assert cost == committed > 0  # every admitted call settled: nothing left reserved


def test_the_heartbeat_holds_spawns_while_the_brake_is_engaged(services: Services, store: BrakeStore) -> None:
    loop = build_loop(services)
    ticks = Ticks()
    loop.heartbeat.brake = CachedBrake(store.read, clock=ticks).engaged
    loop.settings("alice", interval_seconds=1, max_parallel=5)
    store.engage(reason="incident", by=OPERATOR, now=utcnow())
    loop.services.plans.publish("alice", "demo", document(*numbered(2)))
    loop.services.plans.confirm("alice", "demo")
    for _ in range(3):  # held, and the loop keeps looking (nothing else will wake it)
        loop.clock.advance(2)
        report = loop.heartbeat.tick("alice")
        assert report.outcome is Outcome.WORKED
        assert report.spawned == ()
    assert loop.ecs.run_calls == []
    store.release(by=OPERATOR, now=utcnow())
    ticks.now += 5
    loop.clock.advance(2)
    report = loop.heartbeat.tick("alice")
    assert len(report.spawned) == 2
    plan = loop.services.plans.get("alice", "demo")
    assert all(
        (task := loop.tasks.get(i.task_id)) is not None and task.status is TaskStatus.QUEUED
        for i in plan.active_items
        if i.task_id
    )


def test_a_heartbeat_with_nothing_to_spawn_never_reads_the_brake(
    services: Services, store: BrakeStore
) -> None:
    loop = build_loop(services)
    reads: list[int] = []
    loop.heartbeat.brake = lambda: reads.append(1) or False  # type: ignore[func-returns-value]
    loop.settings("alice", interval_seconds=1)
    loop.clock.advance(2)
    loop.heartbeat.tick("alice")
    assert reads == []


def test_the_breaker_engages_once_when_the_last_hours_settled_spend_passes_the_limit(
    kit: tuple[RelayKit, Ticks], store: BrakeStore
) -> None:
    relay_kit, _ = kit
    tasks = [relay_kit.running_task(slug=f"spend{n}") for n in range(3)]
    for task in tasks:
        for _ in range(2):
            relay_kit.call(task)
    spent = sum((relay_kit.spent(task)[0] for task in tasks), Decimal(0))
    now = utcnow()
    budget = relay_kit.budget
    assert SpendBreaker(store, budget, spent).check(now).tripped is False  # reaching is not passing
    assert SpendBreaker(store, budget, None).check(now).engaged is False  # no limit: no breaker
    breaker = SpendBreaker(store, budget, spent - Decimal("0.000001"))
    first = breaker.check(now)
    assert (first.spend_usd, first.tripped, first.engaged) == (spent, True, True)
    brake = store.read()
    assert brake.by == SPEND_VELOCITY
    assert brake.spend_usd == spent
    assert str(spent) in (brake.reason or "")
    again = breaker.check(now)
    assert (again.tripped, again.engaged) == (False, True)
    # An hour later that spend is out of the window.
    store.release(by=OPERATOR, now=now - timedelta(hours=2))
    assert breaker.check(now + timedelta(hours=1, minutes=1)).spend_usd == 0


def test_a_release_starts_the_breakers_window_afresh(kit: tuple[RelayKit, Ticks], store: BrakeStore) -> None:
    relay_kit, _ = kit
    task = relay_kit.running_task()
    relay_kit.call(task)
    now = utcnow()
    breaker = SpendBreaker(store, relay_kit.budget, Decimal("0.000000001"))
    assert breaker.check(now).tripped
    store.release(by=OPERATOR, now=now)
    after = breaker.check(now + timedelta(seconds=1))
    assert (after.spend_usd, after.tripped, after.engaged) == (0, False, False)


def test_the_breaker_never_overrules_a_release_it_did_not_see(store: BrakeStore) -> None:
    """The breaker read the brake, an operator engaged and released it meanwhile: the
    breaker's engage, conditioned on what it read, changes nothing."""
    seen = store.read()
    store.engage(reason="incident", by=OPERATOR, now=utcnow())
    store.release(by=OPERATOR, now=utcnow())
    brake, changed = store.engage(
        reason="spend", by=SPEND_VELOCITY, now=utcnow(), spend_usd=Decimal(9), unless_released_since=seen
    )
    assert not changed
    assert not brake.engaged
    current = store.read()
    assert store.engage(reason="spend", by=SPEND_VELOCITY, now=utcnow(), unless_released_since=current)[1]
