"""Per-user gates of the heartbeat (docs/concepts/loop.md): may the loop act for this user now?

Pure: every function takes `now` (an aware datetime) and the user's `LoopSettings`.

Time rule: quiet hours and the user's day are read from the *local wall clock* of `now` in
`settings.timezone` (zoneinfo, so DST follows the tz database). The window is
`[start, end)`; `start > end` crosses midnight; `start == end` is no window at all. On DST
days this has two consequences, both deliberate (a person thinks in wall-clock times):

* spring forward: wall-clock times in the skipped hour never occur. A window starting there
  begins at the jump (02:30 on a 02:00->03:00 day begins at 03:00), one ending there ends at
  the jump, and a window lying wholly inside the skipped hour does not happen that day;
* fall back: wall-clock times in the repeated hour occur twice, and are quiet (or not) both
  times. So a window ending at 02:30 on a 03:00->02:00 day is quiet again for half an hour
  after the clocks go back, and one starting at 02:30 pauses for that half hour.

`quiet_hours_end` and `next_local_midnight` return the first instant at which that reading
changes, so they agree with `in_quiet_hours` and `local_day` on these days too. They assume
at most one UTC offset change within any 24 hours, which holds for every zone in tzdata's
present rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from steward.domain.loop import LoopSettings, QuietHours

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
# Each step of `_next_change` passes one offset change; a few suffice for any real zone.
_MAX_STEPS = 8


class Gate(StrEnum):
    """Why the heartbeat may not act now (or OPEN). Values are stable: logs and metrics use them."""

    DISABLED = "disabled"
    PAUSED = "paused"
    INTERVAL = "interval"
    QUIET_HOURS = "quiet_hours"
    OPEN = "open"


def check(
    settings: LoopSettings, *, last_tick_at: datetime | None, now: datetime, nudged: bool = False
) -> Gate:
    """The first gate that holds, in a fixed order, so the reason reported is deterministic.

    `nudged`: a person acted since the last working tick (a confirm, a retry, a follow-up
    ask: `LoopState.nudged`). An approval starts work at once, so it skips the interval
    gate, and only that one: a disabled or paused loop and quiet hours still hold."""
    _require_aware(now)
    if not settings.enabled:
        return Gate.DISABLED
    if settings.paused:
        return Gate.PAUSED
    if last_tick_at is not None and not nudged:
        _require_aware(last_tick_at)
        # In UTC: Python compares datetimes that share a tzinfo by wall clock, ignoring fold.
        due = last_tick_at.astimezone(UTC) + timedelta(seconds=settings.interval_seconds)
        if due > now.astimezone(UTC):
            return Gate.INTERVAL
    if in_quiet_hours(settings, now):
        return Gate.QUIET_HOURS
    return Gate.OPEN


def in_quiet_hours(settings: LoopSettings, now: datetime) -> bool:
    """Whether the local wall-clock time of `now` lies in the quiet window (module docstring)."""
    window = settings.quiet_hours
    if window is None:
        return False
    return _in_window(_local(settings, now).time(), window)


def quiet_hours_end(settings: LoopSettings, now: datetime) -> datetime | None:
    """The UTC instant the current quiet hours end (the first instant not quiet), or None
    when `now` is not in quiet hours. Normally the next local `end`; on a DST day it may be
    the instant the clocks jump out of the window."""
    window = settings.quiet_hours
    if window is None or not in_quiet_hours(settings, now):
        return None
    end = _clock(window.end)

    def next_end(wall: datetime) -> datetime:
        day = wall.date() if wall.time() < end else wall.date() + _DAY
        return datetime.combine(day, end)

    return _next_change(
        ZoneInfo(settings.timezone),
        now,
        goal=next_end,
        reached=lambda wall: not _in_window(wall.time(), window),
    )


def local_day(settings: LoopSettings, now: datetime) -> str:
    """The user's calendar day ("YYYY-MM-DD"), the period of the daily spawn cap."""
    return _local(settings, now).date().isoformat()


def next_local_midnight(settings: LoopSettings, now: datetime) -> datetime:
    """The UTC instant the user's next day starts: local 00:00, or the jump past it in zones
    whose clocks skip midnight. A DST day is 23 or 25 hours long, not 24."""
    today = _local(settings, now).date()
    return _next_change(
        ZoneInfo(settings.timezone),
        now,
        goal=lambda wall: datetime.combine(wall.date() + _DAY, time()),
        reached=lambda wall: wall.date() > today,
    )


def _require_aware(moment: datetime) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("gates need an aware datetime (naive times have no zone to convert from)")


def _local(settings: LoopSettings, now: datetime) -> datetime:
    _require_aware(now)
    return now.astimezone(ZoneInfo(settings.timezone))


def _clock(value: str) -> time:
    hours, minutes = value.split(":")
    return time(int(hours), int(minutes))


def _in_window(wall: time, window: QuietHours) -> bool:
    start, end = _clock(window.start), _clock(window.end)
    if start < end:
        return start <= wall < end
    if start > end:
        return wall >= start or wall < end
    return False


def _next_change(
    zone: ZoneInfo,
    now: datetime,
    *,
    goal: Callable[[datetime], datetime],
    reached: Callable[[datetime], bool],
) -> datetime:
    """The first instant after `now` whose naive local wall-clock time satisfies `reached`.

    Between offset changes the wall clock runs with real time, so it reaches `goal(wall)`
    (a later wall-clock time) after exactly that difference. An offset change on the way
    makes the wall clock jump: if the jump lands where `reached` holds, that is the answer;
    otherwise walk on from there.
    """
    moment = now.astimezone(UTC)
    for _ in range(_MAX_STEPS):
        wall = moment.astimezone(zone).replace(tzinfo=None)
        candidate = moment + (goal(wall) - wall)
        jump = _first_offset_change(zone, moment, candidate)
        if jump is None:
            return candidate
        if reached(jump.astimezone(zone).replace(tzinfo=None)):
            return jump
        moment = jump
    raise ValueError(f"time zone {zone.key!r} changes offset too often to compute a boundary")


def _first_offset_change(zone: ZoneInfo, start: datetime, stop: datetime) -> datetime | None:
    """The first instant in (start, stop] at which the zone's UTC offset changes, or None.

    Offset changes happen on whole UTC seconds (tzif stores seconds), so a binary search
    over seconds is exact. Assumes at most one change in the span (spans here are <= 1 day).
    """
    before = start.astimezone(zone).utcoffset()
    if stop.astimezone(zone).utcoffset() == before:
        return None
    low = (start - _EPOCH) // _SECOND  # offset here is `before`
    high = -((_EPOCH - stop) // _SECOND)  # ceil; offset here differs
    while high - low > 1:
        middle = (low + high) // 2
        if (_EPOCH + middle * _SECOND).astimezone(zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return _EPOCH + high * _SECOND
