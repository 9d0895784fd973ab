"""The global brake: one operator switch that refuses every new model call and every new spawn,
and the spend-velocity breaker that pulls it.

Pure. The brake is durable state (`steward.adapters.brake_store`); readers on hot paths (the
relay's admission, the heartbeat's spawns) see it through `steward.services.brake.CachedBrake`,
at most `BRAKE_CACHE_SECONDS` stale, so admission stays at its two writes. The breaker sums the
relay's settled spend across all tasks in five-minute buckets: "the last hour" is the bucket
`now` falls in and the eleven before it, so it covers between 55 and 60 minutes and never
spend older than an hour; buckets that started before the brake was last released do not
count, so an operator who releases it is not overruled by the spend that pulled it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

BRAKE_CACHE_SECONDS = 5.0
SPEND_BUCKET = timedelta(minutes=5)
SPEND_WINDOW = timedelta(hours=1)
SPEND_PREFIX = "spend_"  # task item attributes: spend_<yyyymmddhhmm of the bucket's start>
_BUCKET_FORMAT = "%Y%m%d%H%M"

OPERATOR = "operator"
SPEND_VELOCITY = "spend_velocity"


@dataclass(frozen=True)
class Brake:
    """The brake as stored. `released_at` is when it was last released (the breaker's window
    starts there)."""

    engaged: bool = False
    reason: str | None = None
    by: str | None = None
    since: datetime | None = None
    released_at: datetime | None = None
    spend_usd: Decimal | None = None  # what the breaker saw when it engaged

    def describe(self) -> str:
        if not self.engaged:
            return "off"
        parts = [f"on since {self.since.isoformat() if self.since else '?'}"]
        if self.by:
            parts.append(f"by {self.by}")
        if self.reason:
            parts.append(f"({self.reason})")
        return " ".join(parts)


def bucket_start(at: datetime) -> datetime:
    at = at.astimezone(UTC)
    return at.replace(minute=at.minute - at.minute % 5, second=0, microsecond=0)


def spend_attribute(at: datetime) -> str:
    """The task item attribute a settlement at `at` adds its charge to."""
    return SPEND_PREFIX + bucket_start(at).strftime(_BUCKET_FORMAT)


def window_attributes(now: datetime, *, released_at: datetime | None = None) -> frozenset[str]:
    """The bucket attributes of the last hour (see the module docstring), none that started
    before `released_at`."""
    first = bucket_start(now - SPEND_WINDOW) + SPEND_BUCKET
    if released_at is not None:  # the first bucket that started at or after the release
        released = bucket_start(released_at)
        first = max(first, released if released == released_at else released + SPEND_BUCKET)
    names = set()
    at = first
    while at <= now:
        names.add(SPEND_PREFIX + at.strftime(_BUCKET_FORMAT))
        at += SPEND_BUCKET
    return frozenset(names)


def window_start(now: datetime, *, released_at: datetime | None = None) -> datetime:
    """The earliest settlement time whose bucket is in the window: tasks settled last before
    it hold nothing the breaker counts."""
    names = window_attributes(now, released_at=released_at)
    if not names:
        return now
    return datetime.strptime(min(names)[len(SPEND_PREFIX) :], _BUCKET_FORMAT).replace(tzinfo=UTC)


def spend_in_window(items: Iterable[Mapping[str, Any]], attributes: frozenset[str]) -> Decimal:
    """The sum of the window's buckets over task items (each a mapping of attribute values)."""
    total = Decimal(0)
    for item in items:
        for name in attributes:
            value = item.get(name)
            if value is not None:
                total += Decimal(str(value))
    return total


def breaker_trips(spend: Decimal, limit: Decimal | None) -> bool:
    """Whether spend in the window passes the limit (None: no breaker)."""
    return limit is not None and spend > limit
