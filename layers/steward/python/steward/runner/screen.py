"""Terminal output of a run: live and ephemeral, plus a bounded tail kept for the record.

Command output is redacted as it streams (a token split across chunks is still caught),
passed to an optional live sink and never to the durable event log; only the final screen
tail (the last 200 lines, at most 64 KiB) is stored when the task ends.
"""

from __future__ import annotations

import codecs
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable

import httpx

from steward.domain.redaction import Redactor

MAX_LINES = 200
MAX_BYTES = 64 * 1024


class Screen:
    def __init__(
        self,
        redactor: Redactor,
        live: Callable[[str], None] | None = None,
        *,
        max_lines: int = MAX_LINES,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._stream = redactor.stream()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._live = live
        self._lines: deque[str] = deque(maxlen=max_lines)
        self._partial = ""
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._flushed = False

    def write(self, chunk: bytes) -> None:
        with self._lock:
            if not self._flushed:
                self._emit(self._stream.feed(self._decoder.decode(chunk)))

    def note(self, text: str) -> None:
        """A line of the runner's own (a command starting, a stage ending)."""
        self.write(f"\n$ {text}\n".encode())

    def _emit(self, text: str) -> None:
        if not text:
            return
        if self._live is not None:
            self._live(text)
        pieces = (self._partial + text).split("\n")
        self._partial = pieces.pop()
        self._lines.extend(pieces)

    def tail(self) -> str:
        """The last lines (at most max_lines and max_bytes), everything flushed and redacted."""
        with self._lock:
            if not self._flushed:  # the stream ends here; later writes are not kept
                self._emit(self._stream.feed(self._decoder.decode(b"", final=True)) + self._stream.flush())
                self._flushed = True
            lines = [*self._lines, *([self._partial] if self._partial else [])]
        text = "\n".join(lines)
        data = text.encode()
        if len(data) > self._max_bytes:
            text = data[-self._max_bytes :].decode("utf-8", errors="ignore")
        return text


class LiveSink:
    """Posts output to the local stack's stream hub (`STEWARD_STREAM_URL`) from a background
    thread, dropping what it cannot deliver: the live view is best effort and must never slow
    a command down. The capability authorizes it; `close` tells watchers the run is over."""

    def __init__(self, url: str, capability: str, *, max_pending: int = 256) -> None:
        self._url = url
        self._headers = {"Authorization": f"Bearer {capability}", "Content-Type": "text/plain; charset=utf-8"}
        self._queue: queue.Queue[str | None] = queue.Queue(maxsize=max_pending)
        self._thread = threading.Thread(target=self._run, name="live-sink", daemon=True)
        self._thread.start()

    def __call__(self, text: str) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(text)

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=1.0)
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        with httpx.Client(timeout=5.0) as http:
            while True:
                text = self._queue.get()
                end = text is None
                with contextlib.suppress(httpx.HTTPError):
                    http.post(
                        self._url,
                        params={"end": "1"} if end else None,
                        content=(text or "").encode(),
                        headers=self._headers,
                    )
                if end:
                    return
