"""The global brake as its readers and its breaker use it (`steward.domain.brake` holds the rules).

`CachedBrake` is how hot paths read it: the relay before each reservation, the heartbeat
before it spawns. `SpendBreaker` is the reaper's check: it sums the relay's settled spend of
the last hour across all tasks and engages the brake when it passes the limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from steward.adapters.brake_store import BrakeStore
from steward.adapters.budget_store import BudgetStore
from steward.domain.brake import (
    BRAKE_CACHE_SECONDS,
    SPEND_VELOCITY,
    Brake,
    breaker_trips,
    spend_in_window,
    window_attributes,
    window_start,
)
from steward.domain.ids import LIVE_SHARDS

_SHARDS = tuple(f"s{n:02d}" for n in range(LIVE_SHARDS))


class CachedBrake:
    """`engaged()` reads the store at most once per `ttl` seconds per process. A failed
    refresh keeps the last value read (the per-task budgets hold either way); with no value
    read yet, the failure propagates, so nothing is admitted on a guess."""

    def __init__(
        self,
        read: Callable[[], Brake],
        *,
        ttl: float = BRAKE_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._value: Brake | None = None
        self._read_at = 0.0

    def current(self) -> Brake:
        with self._lock:
            now = self._clock()
            if self._value is None or now - self._read_at >= self._ttl:
                try:
                    self._value = self._read()
                except Exception:
                    if self._value is None:
                        raise
                self._read_at = now
            return self._value

    def engaged(self) -> bool:
        return self.current().engaged


@dataclass(frozen=True)
class BreakerCheck:
    spend_usd: Decimal  # settled spend in the window
    limit_usd: Decimal | None
    engaged: bool  # the brake is engaged after this check
    tripped: bool  # this check engaged it


@dataclass
class SpendBreaker:
    brakes: BrakeStore
    budget: BudgetStore
    limit_usd: Decimal | None

    def check(self, now: datetime) -> BreakerCheck:
        """Sum the window's spend; engage the brake when it passes the limit. Without a limit
        nothing is read."""
        if self.limit_usd is None:
            return BreakerCheck(Decimal(0), None, engaged=False, tripped=False)
        brake = self.brakes.read()
        attributes = window_attributes(now, released_at=brake.released_at)
        since = window_start(now, released_at=brake.released_at)
        spend = sum(
            (spend_in_window(self.budget.settled_since(shard, since), attributes) for shard in _SHARDS),
            Decimal(0),
        )
        if brake.engaged or not breaker_trips(spend, self.limit_usd):
            return BreakerCheck(spend, self.limit_usd, engaged=brake.engaged, tripped=False)
        reason = f"settled spend {spend} USD in the last hour passed the limit {self.limit_usd} USD"
        stored, changed = self.brakes.engage(
            reason=reason, by=SPEND_VELOCITY, now=now, spend_usd=spend, unless_released_since=brake
        )
        return BreakerCheck(spend, self.limit_usd, engaged=stored.engaged, tripped=changed)
