"""Per-user loop settings (DESIGN section 4, `GET/PUT /v1/loop`)."""

from __future__ import annotations

import re
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

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else _check_zone(value)
