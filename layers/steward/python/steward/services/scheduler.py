"""Scheduler use case (docs/architecture.md): tick every live user once per tick window.

The tick window is the floor of the run's time by the period, and it is part of each
message's deduplication id: a replayed or retried run in the same window sends nothing new,
a run in the next window ticks everyone again.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from steward.adapters.liveness import LivenessIndex
from steward.adapters.queue import HeartbeatQueue

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def tick_window(now: datetime, period_seconds: int) -> str:
    """The id of the window `now` falls in: epoch seconds floored to the period."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("tick_window needs an aware datetime")
    if period_seconds < 1:
        raise ValueError(f"period_seconds must be >= 1, got {period_seconds}")
    seconds = (now - _EPOCH) // timedelta(seconds=1)  # integer arithmetic, no float rounding
    return str(seconds // period_seconds * period_seconds)


def run_scheduler(
    index: LivenessIndex, queue: HeartbeatQueue, *, now: datetime, period_seconds: int
) -> dict[str, int]:
    """Stream the live users into the queue: batches go out while later shards are still
    being read. Returns how many users were read and how many ticks were sent."""
    window = tick_window(now, period_seconds)
    read = 0

    def counted() -> Iterator[str]:
        nonlocal read
        for user in index.all_live_users():
            read += 1
            yield user

    sent = queue.send_ticks(counted(), window=window)
    return {"users": read, "sent": sent}
