"""A base for the local stack's long-running parts: `with part:` starts and stops it."""

from __future__ import annotations

import socketserver
import threading
from types import TracebackType
from typing import Any, Self


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


def serve_in_thread(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Run `server` on a daemon thread; stop() waits at most one poll interval for it."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
    )
    thread.start()
    return thread


def shut_down(server: socketserver.BaseServer | None, thread: threading.Thread | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
    if thread is not None:
        thread.join(timeout=5)


def base_url(address: tuple[Any, ...]) -> str:
    """The URL of a bound address; a wildcard bind address is named by its loopback address."""
    host, port = address[:2]
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(str(host), str(host))  # noqa: S104
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
