"""Heartbeat gates: order, quiet hours on the local wall clock, and the user's day, on
ordinary days and on DST days in several zones (transition instants checked against tzdata
in `test_transition_instants_used_below_are_tzdata_s`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from steward.domain.gates import (
    Gate,
    check,
    in_quiet_hours,
    local_day,
    next_local_midnight,
    quiet_hours_end,
)
from steward.domain.loop import LoopSettings, QuietHours

ZONES = (
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Kolkata",
    "Pacific/Auckland",
    "Pacific/Honolulu",
    "Pacific/Chatham",  # +12:45 / +13:45
    "Australia/Lord_Howe",  # half-hour DST
    "America/Santiago",  # skips and repeats midnight
    "America/Havana",  # DST at midnight
)


def loop(zone: str = "UTC", window: tuple[str, str] | None = None, **fields: object) -> LoopSettings:
    quiet = QuietHours(start=window[0], end=window[1]) if window else None
    return LoopSettings.model_validate({"timezone": zone, "quiet_hours": quiet, **fields})


def utc(year: int, month: int, day: int, *clock: int) -> datetime:
    """utc(2026, 3, 29, 1, 30) is 2026-03-29T01:30:00Z (hour, minute, second optional)."""
    hour, minute, second = (*clock, 0, 0, 0)[:3]
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def quiet_minutes(settings: LoopSettings, start: datetime, hours: int) -> list[datetime]:
    return [
        moment
        for moment in (start + timedelta(minutes=m) for m in range(hours * 60))
        if in_quiet_hours(settings, moment)
    ]


# ---------------------------------------------------------------- gate order


def test_open_when_nothing_holds() -> None:
    assert check(loop(), last_tick_at=None, now=utc(2026, 1, 1, 12)) is Gate.OPEN


def test_gate_order_disabled_then_paused_then_interval_then_quiet_hours() -> None:
    now = utc(2026, 1, 1, 23)
    recent = now - timedelta(seconds=10)
    everything = {"enabled": False, "paused": True, "interval_seconds": 60}
    quiet = ("22:00", "06:00")
    assert check(loop("UTC", quiet, **everything), last_tick_at=recent, now=now) is Gate.DISABLED
    everything["enabled"] = True
    assert check(loop("UTC", quiet, **everything), last_tick_at=recent, now=now) is Gate.PAUSED
    everything["paused"] = False
    assert check(loop("UTC", quiet, **everything), last_tick_at=recent, now=now) is Gate.INTERVAL
    assert check(loop("UTC", quiet, **everything), last_tick_at=None, now=now) is Gate.QUIET_HOURS
    assert check(loop("UTC", None, **everything), last_tick_at=None, now=now) is Gate.OPEN


def test_disabled_wins_even_when_paused_is_false() -> None:
    assert check(loop(enabled=False), last_tick_at=None, now=utc(2026, 1, 1)) is Gate.DISABLED


def test_interval_holds_until_exactly_interval_seconds_have_passed() -> None:
    settings = loop(interval_seconds=300)
    last = utc(2026, 1, 1, 12)
    assert check(settings, last_tick_at=last, now=last) is Gate.INTERVAL
    assert check(settings, last_tick_at=last, now=last + timedelta(seconds=299.999)) is Gate.INTERVAL
    assert check(settings, last_tick_at=last, now=last + timedelta(seconds=300)) is Gate.OPEN
    assert check(settings, last_tick_at=last, now=last + timedelta(hours=5)) is Gate.OPEN


def test_interval_compares_instants_not_wall_clocks() -> None:
    settings = loop("Europe/Berlin", interval_seconds=600)
    last = datetime(2026, 10, 25, 2, 55, tzinfo=ZoneInfo("Europe/Berlin"))  # CEST, first pass
    later = datetime(2026, 10, 25, 2, 1, fold=1, tzinfo=ZoneInfo("Europe/Berlin"))  # CET, 6 min on
    # Python compares datetimes sharing a tzinfo by wall clock (later "<" last here); the
    # gate must compare instants.
    assert later < last
    assert later.astimezone(UTC) - last.astimezone(UTC) == timedelta(minutes=6)
    assert check(settings, last_tick_at=last, now=later) is Gate.INTERVAL
    assert check(settings, last_tick_at=last, now=later.astimezone(UTC) + timedelta(minutes=4)) is Gate.OPEN


# A person's action since the last working tick (`nudged`) skips the interval gate, and only
# it: (settings, ticked 10 s ago?, nudged) -> the gate. 23:00 UTC, quiet 22:00-06:00 where set.
NUDGE_ROWS = [
    ({"interval_seconds": 60}, True, False, Gate.INTERVAL),
    ({"interval_seconds": 60}, True, True, Gate.OPEN),
    ({"interval_seconds": 86_400}, True, True, Gate.OPEN),
    ({"interval_seconds": 60}, False, True, Gate.OPEN),
    ({"interval_seconds": 60, "enabled": False}, True, True, Gate.DISABLED),
    ({"interval_seconds": 60, "paused": True}, True, True, Gate.PAUSED),
    (
        {"interval_seconds": 60, "quiet_hours": QuietHours(start="22:00", end="06:00")},
        True,
        True,
        Gate.QUIET_HOURS,
    ),
    (
        {"interval_seconds": 60, "quiet_hours": QuietHours(start="22:00", end="06:00")},
        False,
        True,
        Gate.QUIET_HOURS,
    ),
    (
        {"interval_seconds": 60, "quiet_hours": QuietHours(start="22:00", end="06:00")},
        True,
        False,
        Gate.INTERVAL,
    ),
]


@pytest.mark.parametrize(("fields", "ticked", "nudged", "gate"), NUDGE_ROWS)
def test_a_persons_action_skips_only_the_interval_gate(
    fields: dict[str, object], ticked: bool, nudged: bool, gate: Gate
) -> None:
    now = utc(2026, 1, 1, 23)
    last = now - timedelta(seconds=10) if ticked else None
    assert check(LoopSettings.model_validate(fields), last_tick_at=last, now=now, nudged=nudged) is gate


def test_not_nudged_is_the_default() -> None:
    now = utc(2026, 1, 1, 12)
    assert check(loop(), last_tick_at=now, now=now) is Gate.INTERVAL


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        check(loop(), last_tick_at=None, now=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        check(loop(), last_tick_at=datetime(2026, 1, 1), now=utc(2026, 1, 2))
    with pytest.raises(ValueError, match="aware"):
        local_day(loop(), datetime(2026, 1, 1))


def test_gate_values_are_stable_strings() -> None:
    assert [g.value for g in Gate] == ["disabled", "paused", "interval", "quiet_hours", "open"]


# ---------------------------------------------------------------- quiet hours, ordinary days


def test_no_window_is_never_quiet() -> None:
    assert not any(in_quiet_hours(loop(), utc(2026, 1, 1, h)) for h in range(24))
    assert quiet_hours_end(loop(), utc(2026, 1, 1, 3)) is None


@pytest.mark.parametrize("clock", ["00:00", "07:30", "23:59"])
def test_start_equal_to_end_is_no_window(clock: str) -> None:
    settings = loop("Europe/Berlin", (clock, clock))
    assert quiet_minutes(settings, utc(2026, 3, 28), 72) == []


def test_window_within_one_day_is_half_open() -> None:
    settings = loop("UTC", ("09:00", "17:00"))
    assert not in_quiet_hours(settings, utc(2026, 1, 1, 8, 59, 59))
    assert in_quiet_hours(settings, utc(2026, 1, 1, 9))
    assert in_quiet_hours(settings, utc(2026, 1, 1, 16, 59, 59))
    assert not in_quiet_hours(settings, utc(2026, 1, 1, 17))
    assert quiet_hours_end(settings, utc(2026, 1, 1, 9)) == utc(2026, 1, 1, 17)
    assert quiet_hours_end(settings, utc(2026, 1, 1, 17)) is None


def test_window_crossing_midnight() -> None:
    settings = loop("UTC", ("22:00", "07:00"))
    day = utc(2026, 1, 1)
    assert not in_quiet_hours(settings, day.replace(hour=21, minute=59))
    for moment in (day.replace(hour=22), day.replace(hour=23, minute=59), day + timedelta(days=1)):
        assert in_quiet_hours(settings, moment)
    assert in_quiet_hours(settings, utc(2026, 1, 2, 6, 59))
    assert not in_quiet_hours(settings, utc(2026, 1, 2, 7))
    assert not in_quiet_hours(settings, utc(2026, 1, 2, 12))
    # Before midnight the window ends tomorrow, after midnight today.
    assert quiet_hours_end(settings, utc(2026, 1, 1, 22)) == utc(2026, 1, 2, 7)
    assert quiet_hours_end(settings, utc(2026, 1, 2, 3)) == utc(2026, 1, 2, 7)
    assert len(quiet_minutes(settings, utc(2026, 1, 1), 24)) == 9 * 60


def test_window_that_is_all_day_but_one_minute() -> None:
    settings = loop("UTC", ("00:01", "00:00"))
    assert not in_quiet_hours(settings, utc(2026, 1, 1, 0, 0, 30))
    assert in_quiet_hours(settings, utc(2026, 1, 1, 0, 1))
    assert quiet_hours_end(settings, utc(2026, 1, 1, 0, 1)) == utc(2026, 1, 2)


def test_half_hour_offset_zone() -> None:
    settings = loop("Asia/Kolkata", ("22:00", "06:00"))  # IST = UTC+05:30
    assert not in_quiet_hours(settings, utc(2026, 6, 1, 16, 29))
    assert in_quiet_hours(settings, utc(2026, 6, 1, 16, 30))
    assert in_quiet_hours(settings, utc(2026, 6, 2, 0, 29))
    assert not in_quiet_hours(settings, utc(2026, 6, 2, 0, 30))
    assert quiet_hours_end(settings, utc(2026, 6, 1, 20)) == utc(2026, 6, 2, 0, 30)


def test_window_is_read_in_the_users_zone_not_utc() -> None:
    new_york = loop("America/New_York", ("22:00", "07:00"))
    assert in_quiet_hours(new_york, utc(2026, 1, 15, 4))  # 23:00 EST
    assert not in_quiet_hours(new_york, utc(2026, 1, 15, 22))  # 17:00 EST
    assert in_quiet_hours(new_york, utc(2026, 7, 15, 2))  # 22:00 EDT
    assert not in_quiet_hours(new_york, utc(2026, 7, 15, 11))  # 07:00 EDT


# ---------------------------------------------------------------- quiet hours, DST days


def test_transition_instants_used_below_are_tzdata_s() -> None:
    cases = [
        ("Europe/Berlin", utc(2026, 3, 29, 1), timedelta(hours=1)),
        ("Europe/Berlin", utc(2026, 10, 25, 1), timedelta(hours=-1)),
        ("America/New_York", utc(2026, 3, 8, 7), timedelta(hours=1)),
        ("America/New_York", utc(2026, 11, 1, 6), timedelta(hours=-1)),
        ("Pacific/Auckland", utc(2026, 4, 4, 14), timedelta(hours=-1)),
        ("Pacific/Auckland", utc(2026, 9, 26, 14), timedelta(hours=1)),
        ("America/Santiago", utc(2026, 9, 6, 4), timedelta(hours=1)),
    ]
    for zone, instant, change in cases:
        before = (instant - timedelta(seconds=1)).astimezone(ZoneInfo(zone)).utcoffset()
        after = instant.astimezone(ZoneInfo(zone)).utcoffset()
        assert before is not None
        assert after is not None
        assert after - before == change, zone


def test_berlin_spring_forward_window_around_the_skipped_hour() -> None:
    # 2026-03-29 01:00Z: 02:00 CET -> 03:00 CEST.
    settings = loop("Europe/Berlin", ("01:00", "05:00"))
    assert quiet_hours_end(settings, utc(2026, 3, 29, 0)) == utc(2026, 3, 29, 3)  # 3 real hours
    assert len(quiet_minutes(settings, utc(2026, 3, 28, 12), 24)) == 3 * 60
    assert len(quiet_minutes(settings, utc(2026, 3, 27, 12), 24)) == 4 * 60


def test_berlin_spring_forward_window_ending_in_the_skipped_hour_ends_at_the_jump() -> None:
    settings = loop("Europe/Berlin", ("22:00", "02:30"))
    assert in_quiet_hours(settings, utc(2026, 3, 29, 0, 59, 59))  # 01:59:59 CET
    assert not in_quiet_hours(settings, utc(2026, 3, 29, 1))  # 03:00 CEST
    assert quiet_hours_end(settings, utc(2026, 3, 28, 21)) == utc(2026, 3, 29, 1)
    assert quiet_hours_end(settings, utc(2026, 3, 29, 0, 59, 59)) == utc(2026, 3, 29, 1)


def test_berlin_spring_forward_window_starting_in_the_skipped_hour_starts_at_the_jump() -> None:
    settings = loop("Europe/Berlin", ("02:30", "06:00"))
    assert not in_quiet_hours(settings, utc(2026, 3, 29, 0, 59, 59))
    assert in_quiet_hours(settings, utc(2026, 3, 29, 1))
    assert quiet_hours_end(settings, utc(2026, 3, 29, 1)) == utc(2026, 3, 29, 4)  # 06:00 CEST


def test_berlin_window_inside_the_skipped_hour_does_not_happen_that_day() -> None:
    settings = loop("Europe/Berlin", ("02:00", "03:00"))
    assert quiet_minutes(settings, utc(2026, 3, 28, 12), 24) == []
    assert len(quiet_minutes(settings, utc(2026, 3, 27, 12), 24)) == 60
    assert len(quiet_minutes(settings, utc(2026, 3, 29, 12), 24)) == 60


def test_berlin_fall_back_repeated_hour_is_quiet_both_times() -> None:
    # 2026-10-25 01:00Z: 03:00 CEST -> 02:00 CET; 02:00-03:00 local happens twice.
    settings = loop("Europe/Berlin", ("01:00", "05:00"))
    assert quiet_hours_end(settings, utc(2026, 10, 24, 23)) == utc(2026, 10, 25, 4)  # 5 real hours
    assert len(quiet_minutes(settings, utc(2026, 10, 24, 12), 24)) == 5 * 60


def test_berlin_fall_back_window_ending_in_the_repeated_hour_resumes_for_its_second_pass() -> None:
    settings = loop("Europe/Berlin", ("22:00", "02:30"))
    assert in_quiet_hours(settings, utc(2026, 10, 25, 0, 29))  # 02:29 CEST
    assert not in_quiet_hours(settings, utc(2026, 10, 25, 0, 30))  # 02:30 CEST
    assert not in_quiet_hours(settings, utc(2026, 10, 25, 0, 59))  # 02:59 CEST
    assert in_quiet_hours(settings, utc(2026, 10, 25, 1))  # 02:00 CET
    assert not in_quiet_hours(settings, utc(2026, 10, 25, 1, 30))  # 02:30 CET
    assert quiet_hours_end(settings, utc(2026, 10, 24, 21)) == utc(2026, 10, 25, 0, 30)
    assert quiet_hours_end(settings, utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 25, 1, 30)


def test_berlin_fall_back_window_starting_in_the_repeated_hour_pauses_for_the_jump_back() -> None:
    settings = loop("Europe/Berlin", ("02:30", "06:00"))
    assert in_quiet_hours(settings, utc(2026, 10, 25, 0, 30))  # 02:30 CEST
    assert quiet_hours_end(settings, utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 25, 1)  # -> 02:00 CET
    assert not in_quiet_hours(settings, utc(2026, 10, 25, 1, 15))  # 02:15 CET
    assert in_quiet_hours(settings, utc(2026, 10, 25, 1, 30))  # 02:30 CET
    assert quiet_hours_end(settings, utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 25, 5)  # 06:00 CET


def test_new_york_spring_forward_and_fall_back() -> None:
    settings = loop("America/New_York", ("01:30", "02:30"))
    # 2026-03-08 07:00Z: 02:00 EST -> 03:00 EDT. Quiet from 01:30 EST until the jump.
    assert not in_quiet_hours(settings, utc(2026, 3, 8, 6, 29))
    assert in_quiet_hours(settings, utc(2026, 3, 8, 6, 30))
    assert quiet_hours_end(settings, utc(2026, 3, 8, 6, 45)) == utc(2026, 3, 8, 7)
    assert len(quiet_minutes(settings, utc(2026, 3, 8), 24)) == 30
    # 2026-11-01 06:00Z: 02:00 EDT -> 01:00 EST. 01:30-02:00 EDT, then 01:30-02:30 EST.
    assert quiet_hours_end(settings, utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 1, 6)
    assert not in_quiet_hours(settings, utc(2026, 11, 1, 6, 15))  # 01:15 EST
    assert quiet_hours_end(settings, utc(2026, 11, 1, 6, 30)) == utc(2026, 11, 1, 7, 30)
    assert len(quiet_minutes(settings, utc(2026, 11, 1), 24)) == 30 + 60


def test_new_york_overnight_window_on_both_dst_nights() -> None:
    settings = loop("America/New_York", ("22:00", "07:00"))
    # 22:00 EST -> 07:00 EDT is 8 real hours; 22:00 EDT -> 07:00 EST is 10.
    assert quiet_hours_end(settings, utc(2026, 3, 8, 3)) == utc(2026, 3, 8, 11)
    assert quiet_hours_end(settings, utc(2026, 11, 1, 2)) == utc(2026, 11, 1, 12)


def test_half_hour_dst_zone() -> None:
    settings = loop("Australia/Lord_Howe", ("01:00", "03:00"))
    # 2026-10-04 15:30Z: 02:00 +10:30 -> 02:30 +11:00: the window loses half an hour.
    assert len(quiet_minutes(settings, utc(2026, 10, 3, 12), 12)) == 90
    # 2026-04-04 15:00Z: 02:00 +11:00 -> 01:30 +10:30: it gains half an hour.
    assert len(quiet_minutes(settings, utc(2026, 4, 4, 12), 12)) == 150


# ---------------------------------------------------------------- the user's day


def test_local_day_around_midnight_far_from_utc() -> None:
    auckland = loop("Pacific/Auckland")  # +13 in January
    assert local_day(auckland, utc(2026, 1, 15, 10, 59, 59)) == "2026-01-15"
    assert local_day(auckland, utc(2026, 1, 15, 11)) == "2026-01-16"
    honolulu = loop("Pacific/Honolulu")  # -10, no DST
    assert local_day(honolulu, utc(2026, 1, 15, 9, 59, 59)) == "2026-01-14"
    assert local_day(honolulu, utc(2026, 1, 15, 10)) == "2026-01-15"
    # One instant, three calendar days: Pago Pago is UTC-11, Kiritimati UTC+14.
    instant = utc(2026, 1, 15, 10, 30)
    days = [local_day(loop(z), instant) for z in ("Pacific/Pago_Pago", "UTC", "Pacific/Kiritimati")]
    assert days == ["2026-01-14", "2026-01-15", "2026-01-16"]


def test_next_local_midnight_on_ordinary_days() -> None:
    assert next_local_midnight(loop(), utc(2026, 1, 1, 12)) == utc(2026, 1, 2)
    assert next_local_midnight(loop(), utc(2026, 1, 1)) == utc(2026, 1, 2)
    assert next_local_midnight(loop("Pacific/Auckland"), utc(2026, 1, 15, 10, 59)) == utc(2026, 1, 15, 11)
    assert next_local_midnight(loop("Pacific/Auckland"), utc(2026, 1, 15, 11)) == utc(2026, 1, 16, 11)
    assert next_local_midnight(loop("Pacific/Honolulu"), utc(2026, 1, 15, 9)) == utc(2026, 1, 15, 10)
    assert next_local_midnight(loop("Asia/Kolkata"), utc(2026, 6, 1, 12)) == utc(2026, 6, 1, 18, 30)


@pytest.mark.parametrize(
    ("zone", "midnight", "following", "hours"),
    [
        ("Europe/Berlin", utc(2026, 3, 28, 23), utc(2026, 3, 29, 22), 23),
        ("Europe/Berlin", utc(2026, 10, 24, 22), utc(2026, 10, 25, 23), 25),
        ("America/New_York", utc(2026, 3, 8, 5), utc(2026, 3, 9, 4), 23),
        ("America/New_York", utc(2026, 11, 1, 4), utc(2026, 11, 2, 5), 25),
        ("Pacific/Auckland", utc(2026, 4, 4, 11), utc(2026, 4, 5, 12), 25),
        ("Pacific/Auckland", utc(2026, 9, 26, 12), utc(2026, 9, 27, 11), 23),
    ],
)
def test_next_local_midnight_on_dst_days(
    zone: str, midnight: datetime, following: datetime, hours: int
) -> None:
    settings = loop(zone)
    assert midnight.astimezone(ZoneInfo(zone)).time().isoformat() == "00:00:00"
    assert following.astimezone(ZoneInfo(zone)).time().isoformat() == "00:00:00"
    for offset in (
        timedelta(0),
        timedelta(hours=1, minutes=30),
        timedelta(hours=hours) - timedelta(seconds=1),
    ):
        assert next_local_midnight(settings, midnight + offset) == following
    assert following - midnight == timedelta(hours=hours)
    assert local_day(settings, following - timedelta(microseconds=1)) == local_day(settings, midnight)


def test_next_local_midnight_where_the_clocks_skip_midnight() -> None:
    # America/Santiago 2026-09-06 04:00Z: 23:59:59 -04 -> 01:00 -03; 00:00 never happens.
    settings = loop("America/Santiago")
    start = next_local_midnight(settings, utc(2026, 9, 5, 16))
    assert start == utc(2026, 9, 6, 4)
    assert start.astimezone(ZoneInfo("America/Santiago")).time().isoformat() == "01:00:00"
    assert local_day(settings, start) == "2026-09-06"
    assert local_day(settings, start - timedelta(microseconds=1)) == "2026-09-05"


def test_next_local_midnight_where_the_clocks_go_back_over_midnight() -> None:
    # America/Santiago 2026-04-05 03:00Z: 23:59:59 -03 -> 23:00 -04 on April 4, a 25-hour day.
    settings = loop("America/Santiago")
    assert next_local_midnight(settings, utc(2026, 4, 4, 15)) == utc(2026, 4, 5, 4)
    assert local_day(settings, utc(2026, 4, 5, 3, 30)) == "2026-04-04"


def test_next_local_midnight_returns_utc() -> None:
    result = next_local_midnight(
        loop("Europe/Berlin"), datetime(2026, 5, 1, 9, tzinfo=ZoneInfo("Asia/Tokyo"))
    )
    assert result.utcoffset() == timedelta(0)
    assert result == utc(2026, 5, 1, 22)


# ---------------------------------------------------------------- properties

instants = st.datetimes(
    min_value=datetime(1990, 1, 1),
    max_value=datetime(2060, 1, 1),
    timezones=st.just(UTC),
)
clocks = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
zones = st.sampled_from(ZONES)


def _direct(zone: str, start: str, end: str, instant: datetime) -> bool:
    local = instant.astimezone(ZoneInfo(zone))
    minute = local.hour * 60 + local.minute
    first = int(start[:2]) * 60 + int(start[3:])
    last = int(end[:2]) * 60 + int(end[3:])
    if first < last:
        return first <= minute < last
    if first > last:
        return minute >= first or minute < last
    return False


@settings(max_examples=400, deadline=None)
@given(instant=instants, zone=zones, start=clocks, end=clocks)
def test_in_quiet_hours_agrees_with_the_local_wall_clock(
    instant: datetime, zone: str, start: str, end: str
) -> None:
    assert in_quiet_hours(loop(zone, (start, end)), instant) == _direct(zone, start, end, instant)


@settings(max_examples=300, deadline=None)
@given(instant=instants, zone=zones, start=clocks, end=clocks)
# The end's wall time does not exist on the next day (Chile's clocks jump from 00:00 to 01:00
# on 2041-09-08): quiet hours run on to that time the day after, 47 hours in all.
@example(instant=datetime(2041, 9, 7, 4, 1, tzinfo=UTC), zone="America/Santiago", start="00:01", end="00:00")
def test_quiet_hours_end_is_the_first_instant_not_quiet(
    instant: datetime, zone: str, start: str, end: str
) -> None:
    settings = loop(zone, (start, end))
    end_at = quiet_hours_end(settings, instant)
    if not in_quiet_hours(settings, instant):
        assert end_at is None
        return
    assert end_at is not None
    assert end_at.utcoffset() == timedelta(0)
    # A day and a DST shift, or two when the end's wall time falls in a gap on the next day.
    assert instant < end_at <= instant + timedelta(hours=49)
    assert not in_quiet_hours(settings, end_at)
    assert in_quiet_hours(settings, end_at - timedelta(microseconds=1))
    steps = int((end_at - instant) / timedelta(minutes=7))
    assert all(in_quiet_hours(settings, instant + timedelta(minutes=7) * k) for k in range(steps))


@settings(max_examples=300, deadline=None)
@given(instant=instants, zone=zones)
def test_next_local_midnight_starts_the_next_local_day(instant: datetime, zone: str) -> None:
    settings = loop(zone)
    start = next_local_midnight(settings, instant)
    assert start.utcoffset() == timedelta(0)
    assert instant < start <= instant + timedelta(hours=26)
    assert local_day(settings, start) > local_day(settings, instant)
    assert local_day(settings, start - timedelta(microseconds=1)) == local_day(settings, instant)
