"""The brake's pure rules: the breaker's window of five-minute buckets, and the cache the
relay and the heartbeat read the brake through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from steward.domain.brake import (
    Brake,
    breaker_trips,
    spend_attribute,
    spend_in_window,
    window_attributes,
    window_start,
)
from steward.services.brake import CachedBrake

NOW = datetime(2026, 12, 2, 15, 7, 30, tzinfo=UTC)


def test_a_settlement_lands_in_the_bucket_of_its_five_minutes() -> None:
    assert spend_attribute(NOW) == "spend_202612021505"
    assert spend_attribute(datetime(2026, 12, 2, 15, 4, 59, 999999, tzinfo=UTC)) == "spend_202612021500"
    assert spend_attribute(datetime(2026, 12, 2, 16, 0, tzinfo=UTC)) == "spend_202612021600"


def test_the_window_is_the_current_bucket_and_the_eleven_before_it() -> None:
    names = window_attributes(NOW)
    assert len(names) == 12
    assert spend_attribute(NOW) in names
    assert spend_attribute(NOW - timedelta(minutes=55)) in names  # 14:12:30 -> bucket 14:10
    assert spend_attribute(NOW - timedelta(minutes=60)) not in names  # 14:07:30 -> bucket 14:05
    assert window_start(NOW) == datetime(2026, 12, 2, 14, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("released", "first"),
    [
        (datetime(2026, 12, 2, 14, 50, tzinfo=UTC), "spend_202612021450"),  # on a boundary: counts
        (datetime(2026, 12, 2, 14, 51, tzinfo=UTC), "spend_202612021455"),  # mid-bucket: the next one
        (datetime(2026, 12, 2, 12, 0, tzinfo=UTC), "spend_202612021410"),  # long ago: the hour
    ],
)
def test_buckets_that_started_before_a_release_do_not_count(released: datetime, first: str) -> None:
    names = window_attributes(NOW, released_at=released)
    assert min(names) == first
    assert max(names) == spend_attribute(NOW)


def test_a_release_in_the_current_bucket_leaves_nothing_to_count_yet() -> None:
    assert window_attributes(NOW, released_at=NOW - timedelta(seconds=1)) == frozenset()
    assert window_start(NOW, released_at=NOW - timedelta(seconds=1)) == NOW


def test_spend_sums_only_the_windows_buckets_across_items() -> None:
    names = window_attributes(NOW)
    items = [
        {"task_id": "a", spend_attribute(NOW): Decimal("0.5"), "spend_202612021300": Decimal(9)},
        {"task_id": "b", spend_attribute(NOW - timedelta(minutes=30)): Decimal("0.25")},
        {"task_id": "c"},
    ]
    assert spend_in_window(items, names) == Decimal("0.75")
    assert breaker_trips(Decimal("0.75"), Decimal("0.5"))
    assert not breaker_trips(Decimal("0.5"), Decimal("0.5"))  # passing the limit, not reaching it
    assert not breaker_trips(Decimal(1000), None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_cache_reads_at_most_once_per_ttl() -> None:
    reads: list[Brake] = []
    state = {"brake": Brake()}

    def read() -> Brake:
        reads.append(state["brake"])
        return state["brake"]

    clock = Clock()
    cache = CachedBrake(read, ttl=5, clock=clock)
    assert not cache.engaged()
    state["brake"] = Brake(engaged=True)
    clock.now += 4.9
    assert not cache.engaged()  # at most 5 s stale
    clock.now += 0.1
    assert cache.engaged()
    assert len(reads) == 2


def test_a_failed_refresh_keeps_the_last_value_and_a_first_failure_propagates() -> None:
    calls = {"n": 0}

    def read() -> Brake:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("throttled")
        return Brake(engaged=True)

    clock = Clock()
    cache = CachedBrake(read, ttl=5, clock=clock)
    assert cache.engaged()
    clock.now += 10
    assert cache.engaged()  # the refresh failed: the last value read stands
    broken = CachedBrake(lambda: (_ for _ in ()).throw(RuntimeError("down")), clock=clock)
    with pytest.raises(RuntimeError, match="down"):
        broken.engaged()
