"""The local stack's live terminal view (docs/concepts/runner.md): ephemeral, never durable.

Two routes on one small HTTP server (`stream_url` in `.steward/local.json`):

* `POST /v1/runtime/stream` — a runtime sends its command output (already redacted),
  authorized by its capability and admitted by the runtime routes' rule for records (`admit`:
  none once its task failed, was cancelled or reaped); `?end=1` with no output says the run
  is over, and is admitted in any status (it shows nothing). The output goes to whoever
  watches now, plus a bounded replay buffer for a watcher who joins late. Nothing is written
  anywhere: the durable record is the events and the stored screen tail.
* `GET /v1/tasks/{id}/stream` — the task's owner (a dev bearer token) watches it as
  Server-Sent Events: `event: output` with the text as `data:` lines, a comment every few
  seconds to keep the connection open, and `event: end` when the run is over. With
  `?follow=0` it answers the replay only and closes (no `end`: the run goes on). Another
  user's task answers 404, as on the API.

It is a local convenience, not an AWS component: a Lambda behind API Gateway cannot hold a
stream open, and in AWS the runner only keeps the tail.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from steward.domain.capability import Capability, bearer_token
from steward.domain.errors import StewardError
from steward.local.http_base import LocalHandler, LocalHttpServer, Refused
from steward.local.running import Running

MAX_CHUNK_BYTES = 64 * 1024
REPLAY_BYTES = 64 * 1024
WATCHER_QUEUE = 256
KEEPALIVE_SECONDS = 5.0
_WATCH_PATH = re.compile(r"^/v1/tasks/(t[0-9a-f]{24})/stream$")
_POST_PATH = "/v1/runtime/stream"

VerifyCapability = Callable[[str], Capability]
VerifyUser = Callable[[str], Mapping[str, Any]]
TaskOwner = Callable[[str], str | None]  # task id -> its user, or None
AdmitOutput = Callable[[Capability], None]  # raises a StewardError to refuse the output


class _Channel:
    def __init__(self) -> None:
        self.replay: deque[str] = deque()
        self.size = 0
        self.watchers: list[queue.Queue[str | None]] = []
        self.ended = False


class StreamHub(Running):
    def __init__(
        self,
        verify_capability: VerifyCapability,
        verify_user: VerifyUser,
        task_owner: TaskOwner,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keepalive_seconds: float = KEEPALIVE_SECONDS,
        admit: AdmitOutput | None = None,
    ) -> None:
        self.verify_capability = verify_capability
        self.admit = admit
        self.verify_user = verify_user
        self.task_owner = task_owner
        self.host = host
        self.port = port
        self.keepalive_seconds = keepalive_seconds
        self._channels: dict[str, _Channel] = {}
        self._lock = threading.Lock()
        self._server: LocalHttpServer[StreamHub] | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the hub is not running")
        return self._server.url

    def start(self) -> None:
        if self._server is None:
            self._server = LocalHttpServer((self.host, self.port), _Handler, self, name="stream-hub")
            self._server.start()

    def stop(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                for watcher in channel.watchers:
                    with contextlib.suppress(queue.Full):
                        watcher.put_nowait(None)
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    # ---- the two sides
    def publish(self, task_id: str, text: str, *, end: bool = False) -> None:
        with self._lock:
            channel = self._channels.setdefault(task_id, _Channel())
            if text:
                channel.replay.append(text)
                channel.size += len(text)
                while channel.size > REPLAY_BYTES and len(channel.replay) > 1:
                    channel.size -= len(channel.replay.popleft())
            channel.ended = channel.ended or end
            for watcher in channel.watchers:
                with contextlib.suppress(queue.Full):  # a slow watcher misses output, never blocks
                    if text:
                        watcher.put_nowait(text)
                    if end:
                        watcher.put_nowait(None)

    def watch(self, task_id: str) -> tuple[list[str], queue.Queue[str | None], bool]:
        """The replay so far, a queue of what follows (None: the end), and whether it ended."""
        watcher: queue.Queue[str | None] = queue.Queue(maxsize=WATCHER_QUEUE)
        with self._lock:
            channel = self._channels.setdefault(task_id, _Channel())
            channel.watchers.append(watcher)
            return list(channel.replay), watcher, channel.ended

    def unwatch(self, task_id: str, watcher: queue.Queue[str | None]) -> None:
        with self._lock:
            channel = self._channels.get(task_id)
            if channel is not None and watcher in channel.watchers:
                channel.watchers.remove(watcher)


class _Handler(LocalHandler):
    server: LocalHttpServer[StreamHub]

    def serve(self) -> None:
        if self.command == "POST":
            self._post()
        else:
            self._watch()

    def _post(self) -> None:
        hub = self.server.app
        parts = urlsplit(self.path)
        if parts.path != _POST_PATH:
            raise Refused(404, "not_found", "no such route")
        try:
            capability = hub.verify_capability(bearer_token(self.headers.get("Authorization")))
        except Exception:
            raise Refused(401, "unauthorized", "send the capability as Authorization: Bearer") from None
        text = self.read_body(MAX_CHUNK_BYTES, chunked=False).decode("utf-8", errors="replace")
        end = parse_qs(parts.query).get("end") == ["1"]
        if hub.admit is not None and (text or not end):
            try:
                hub.admit(capability)
            except StewardError as refused:
                self.send_json(refused.status, refused.to_body())
                return
        hub.publish(capability.task_id, text, end=end)
        self.send(204)

    def _watch(self) -> None:
        if not serve_watch(self, self.server.app):
            raise Refused(404, "not_found", "no such route")


def serve_watch(handler: LocalHandler, hub: StreamHub) -> bool:
    """Answer `GET /v1/tasks/{id}/stream` on `handler` (this hub's server, or the API's
    origin for the console); False when the request is not that route."""
    parts = urlsplit(handler.path)
    match = _WATCH_PATH.match(parts.path)
    if match is None or handler.command != "GET":
        return False
    try:
        sub = str(hub.verify_user(bearer_token(handler.headers.get("Authorization"))).get("sub", ""))
    except Exception:
        raise Refused(401, "unauthorized", "send a bearer token") from None
    follow = parse_qs(parts.query).get("follow") != ["0"]
    task_id = match.group(1)
    if not sub or hub.task_owner(task_id) != sub:
        raise Refused(404, "not_found", f"no task {task_id}")
    replay, watcher, ended = hub.watch(task_id)

    def event(name: str, text: str) -> None:
        lines = "".join(f"data: {line}\n" for line in text.split("\n"))
        handler.wfile.write(f"event: {name}\n{lines}\n".encode())
        handler.wfile.flush()

    try:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-store")
        handler.send_header("Connection", "close")
        handler.end_headers()
        for text in replay:
            event("output", text)
        while follow and not ended:
            try:
                item = watcher.get(timeout=hub.keepalive_seconds)
            except queue.Empty:
                handler.wfile.write(b": keepalive\n\n")
                handler.wfile.flush()
                continue
            if item is None:
                break
            event("output", item)
        if follow or ended:
            event("end", "")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the watcher left
    finally:
        hub.unwatch(task_id, watcher)
    return True
