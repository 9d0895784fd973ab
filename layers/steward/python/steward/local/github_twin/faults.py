"""Fault switches of the GitHub twin: each is a count of the next events it spoils.

A switch set to N acts on the next N occasions and then turns itself off, so a test says
exactly how much trouble it wants and the twin is healthy again afterwards. Every read and
write of a switch takes one lock: a test may flip switches while requests are in flight.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields
from typing import Any

SWITCHES = (
    "duplicate_deliveries",
    "reorder_deliveries",
    "drop_response_after_pr_create",
    "drop_response_after_comment_create",
    "server_errors",
    "secondary_rate_limit",
)


@dataclass
class Faults:
    """Counts of the next occasions to spoil (0 = off).

    * `duplicate_deliveries`: each of the next N webhook deliveries is sent twice, same id.
    * `reorder_deliveries`: the next N deliveries are held back; `GitHubTwin.flush()` sends
      them in reverse order.
    * `drop_response_after_pr_create`: the next N pull request creations take effect, then
      the connection is closed without an answer.
    * `drop_response_after_comment_create`: the same for the next N comments.
    * `server_errors`: the next N REST calls are answered 502, 503, 502, ... in turn.
    * `secondary_rate_limit`: the next N REST calls are answered 403 with `retry-after: 1`
      and GitHub's secondary rate limit message.
    """

    duplicate_deliveries: int = 0
    reorder_deliveries: int = 0
    drop_response_after_pr_create: int = 0
    drop_response_after_comment_create: int = 0
    server_errors: int = 0
    secondary_rate_limit: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SWITCHES:
            value = _count(name, value)
        lock: threading.Lock | None = self.__dict__.get("_lock")
        if lock is None:  # during __init__, before the lock exists
            object.__setattr__(self, name, value)
            return
        with lock:
            object.__setattr__(self, name, value)

    def take(self, name: str) -> bool:
        """Use up one occasion of switch `name`; True if the switch was on."""
        if name not in SWITCHES:
            raise ValueError(f"unknown fault switch {name!r}")
        with self._lock:
            left: int = self.__dict__[name]
            if left <= 0:
                return False
            object.__setattr__(self, name, left - 1)
            return True

    def set(self, **values: Any) -> None:
        """Set several switches at once (all or none: every value is checked first)."""
        unknown = sorted(set(values) - set(SWITCHES))
        if unknown:
            raise ValueError(f"unknown fault switch {unknown[0]!r}")
        checked = {name: _count(name, value) for name, value in values.items()}
        with self._lock:
            for name, value in checked.items():
                object.__setattr__(self, name, value)

    def reset(self) -> None:
        self.set(**dict.fromkeys(SWITCHES, 0))

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: self.__dict__[f.name] for f in fields(self) if f.name in SWITCHES}


def _count(name: str, value: Any) -> int:
    """A switch value: a count >= 0; `true` means once and `false` off, for JSON callers."""
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"fault switch {name} must be a count >= 0")
    return value
