"""Per-user loop settings (docs/concepts/identity.md, `GET/PUT /v1/loop`)."""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

_CLOCK = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


class QuietHours(BaseModel):
    """A daily window, local to the user's time zone, in which no task is spawned. `start`
    after `end` means the window crosses midnight."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: str
    end: str

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        if not _CLOCK.fullmatch(value):
            raise ValueError("must be a 24-hour clock time HH:MM")
        return value


def _check_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown IANA time zone {value!r}") from exc
    return value


class LoopSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    paused: bool = False
    interval_seconds: int = Field(default=60, ge=1, le=86_400)
    quiet_hours: QuietHours | None = None
    timezone: str = "UTC"
    daily_spawn_cap: int = Field(default=20, ge=0, le=10_000)
    max_parallel: int = Field(default=3, ge=1, le=100)
    # Pull requests of the user's awaiting review (or being written) at most: a team reviews
    # so many at a time; no new task starts beyond it (follow-up rounds are not new).
    max_open_prs: int = Field(default=5, ge=1, le=100)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return _check_zone(value)


class LoopSettingsUpdate(BaseModel):
    """A partial update: only the fields given change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool | None = None
    paused: bool | None = None
    interval_seconds: int | None = Field(default=None, ge=1, le=86_400)
    quiet_hours: QuietHours | None = None
    timezone: str | None = None
    daily_spawn_cap: int | None = Field(default=None, ge=0, le=10_000)
    max_parallel: int | None = Field(default=None, ge=1, le=100)
    max_open_prs: int | None = Field(default=None, ge=1, le=100)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else _check_zone(value)


class LoopState(BaseModel):
    """What the heartbeat reads of a user in one GetItem: settings plus the loop's own
    bookkeeping (docs/concepts/loop.md watermark contract)."""

    model_config = ConfigDict(frozen=True)

    user: str
    settings: LoopSettings = LoopSettings()
    watermark: int = 0  # advanced by every lifecycle event and plan approval
    processed_watermark: int = -1  # the watermark the last complete tick acted on
    due_at: datetime | None = None  # a tick must run at/after this even without progress
    last_tick_at: datetime | None = None
    lease_until: datetime | None = None
    lease_epoch: int = 0
    spawn_day: str | None = None
    spawn_count: int = 0
    live: bool = False  # in the scheduler's liveness index
    live_mark: int = 0  # bumped by every write that puts the user in the index
    # A person's action (confirm, retry, follow-up ask) bumps `person_mark`; a working tick
    # records the mark it read as `person_seen`. While they differ the tick skips the
    # interval gate (`nudged`): an approval starts work at once.
    person_mark: int = 0
    person_seen: int = 0

    def progressed(self, now: datetime) -> bool:
        """False when nothing happened since the last complete tick and nothing is due: the
        no-progress shortcut (skip all work)."""
        return self.watermark != self.processed_watermark or (self.due_at is not None and self.due_at <= now)

    @property
    def nudged(self) -> bool:
        """A person acted since the last working tick read the user (the interval gate yields)."""
        return self.person_mark != self.person_seen

    def spawns_left(self, day: str) -> int:
        used = self.spawn_count if self.spawn_day == day else 0
        return max(0, self.settings.daily_spawn_cap - used)
