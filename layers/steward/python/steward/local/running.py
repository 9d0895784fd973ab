"""A base for the local stack's long-running parts: `with part:` starts and stops it."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Running:
    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
