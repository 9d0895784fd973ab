"""The HTTP server base of every loopback server of the local stack: the Lambda adapter, the
protocol servers (Converse, OpenAI), the stream hub and the GitHub twin.

What they share, and why it is shared rather than left to each:

* A listen backlog that holds a burst. socketserver's default of 5 makes the kernel reset
  the connections a burst of clients opens at once (120 callers of the local relay saw about
  half reset); with `BACKLOG` they wait in the accept queue until a thread takes them.
* A daemon thread per connection, HTTP/1.1 keep-alive, and an idle timeout, so that a
  client that keeps a connection open cannot hold its thread for ever.
* One way of reading a body. A Content-Length must be ASCII digits; anything else, or a
  malformed chunked body, is a 400 that closes the connection, since where the next request
  starts is then unknown. A body over the server's limit is read and dropped (up to
  `DRAIN_LIMIT`) before the 413, so that a client still sending reads the answer instead of
  a reset. A response to a request whose body was left unread closes the connection, so the
  body is never taken for the next request.
* A listening socket that never blocks the accepting thread. `serve_forever` accepts after
  its poll saw a connection waiting; a connection the client dropped in between leaves a
  blocking `accept` waiting for the next one, and `shutdown()` (which waits for that thread)
  waits with it, for ever in a test's teardown. Non-blocking, that accept fails at once and
  the loop polls again; each accepted connection is blocking as usual.
* Nothing about a request is logged: no access log, no header, body or exception message
  (requests carry bearer tokens, capabilities and App JWTs). A failed connection is logged
  at debug level by the exception's type only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import ssl
import sys
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, TypeVar

_LOG = logging.getLogger(__name__)

BACKLOG = 1024  # Linux caps it at net.core.somaxconn (4096 by default since 5.4)
IDLE_SECONDS = 60.0
DRAIN_LIMIT = 64 * 1024 * 1024
_LENGTH = re.compile(r"[0-9]{1,18}")  # int() would also take "+5", "1_0" and non-ASCII digits
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r?\n")
_LINE_LIMIT = 4096
_TRAILER_LIMIT = 64 * 1024
_BODILESS = (204, 304)

App = TypeVar("App")


def base_url(address: tuple[Any, ...], scheme: str = "http") -> str:
    """The URL of a bound address; a wildcard bind address is named by its loopback address."""
    host, port = address[:2]
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(str(host), str(host))  # noqa: S104
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


class Refused(Exception):
    """Answer the request with this error instead of serving it (see `LocalHandler.refuse`).

    `close`: end the connection after the answer, because the request's body is unreadable
    or was not read.
    """

    def __init__(self, status: int, code: str, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.close = status, code, message, close


class LocalHttpServer(ThreadingHTTPServer, Generic[App]):
    """A threaded HTTP/1.1 server whose handlers serve `app`; bound and listening once built."""

    daemon_threads = True  # an open keep-alive connection must not hold up the process's exit
    request_queue_size = BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[LocalHandler],
        app: App,
        *,
        name: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.tls = tls
        self._thread: threading.Thread | None = None
        super().__init__(address, handler)
        self.socket.setblocking(False)  # see the module docstring

    def get_request(self) -> tuple[Any, Any]:
        request, client_address = super().get_request()
        request.setblocking(True)
        return request, client_address

    @property
    def url(self) -> str:
        return base_url(self.server_address, "https" if self.tls is not None else "http")

    def finish_request(self, request: Any, client_address: Any) -> None:
        """With `tls`, the handshake runs here, on the connection's own thread (never on the
        accepting one, which a client that stalls mid-handshake would block for everyone)."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(IDLE_SECONDS)
        try:
            secured = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            _LOG.debug("TLS handshake from %s failed with %s", client_address[0], type(exc).__name__)
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            secured.close()

    def start(self) -> None:
        """Serve on a daemon thread; `stop()` waits at most one poll interval for it."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.serve_forever, kwargs={"poll_interval": 0.05}, name=self.name, daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            self.shutdown()  # waits for serve_forever, so only when it was started
        self.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A dropped connection is the client's business: no traceback on stderr."""
        _LOG.debug("connection from %s failed with %s", client_address[0], type(sys.exc_info()[1]).__name__)


class LocalHandler(BaseHTTPRequestHandler):
    """The request handler base: subclasses implement `serve` for the methods in `methods`."""

    protocol_version = "HTTP/1.1"
    server_version = "steward-local"
    timeout = IDLE_SECONDS
    # Headers and body go out in separate writes; with Nagle's algorithm the body waits
    # for the delayed ACK, ~40 ms per response on loopback.
    disable_nagle_algorithm = True
    methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST"})
    server: LocalHttpServer[Any]
    _body_taken = False

    def serve(self) -> None:
        """Answer the parsed request; a `Refused` raised here is answered by `refuse`."""
        raise NotImplementedError

    def refuse(self, refused: Refused) -> None:
        """Answer a refusal; servers that speak another error shape override this."""
        self.send_error_json(refused.status, refused.code, refused.message, close=refused.close)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a request line or header too long, a malformed
        request line, a method no route has) in this server's error shape, not its HTML page."""
        del explain
        kinds = {414: "too_large", 431: "too_large", 501: "method_not_allowed"}
        text = message or self.responses.get(code, ("refused",))[0]
        self.refuse(Refused(code, kinds.get(code, "bad_request"), text, close=True))

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: request lines carry query strings, and errors carry request lines."""

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_OPTIONS(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        self._body_taken = False
        if self.command not in self.methods:  # as BaseHTTPRequestHandler answers a method it lacks
            self.send_error(501, f"Unsupported method ({self.command!r})")
            return
        try:
            self.serve()
        except Refused as refused:
            self.refuse(refused)

    # -- request -----------------------------------------------------------------------------

    def header_map(self) -> dict[str, str]:
        """The headers by lower-case name; a repeated header's values joined by "," (as API
        Gateway's payload 2.0 does), a repeated Cookie's by "; " (as HTTP/2 joins them)."""
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            joint = "; " if key == "cookie" else ","
            headers[key] = f"{headers[key]}{joint}{value}" if key in headers else value
        return headers

    def read_body(self, limit: int, *, chunked: bool = True) -> bytes:
        """The request body (b"" without one), at most `limit` bytes; `Refused` otherwise.

        `chunked=False`: a body must come with a Content-Length.
        """
        self._body_taken = True
        codings = self.headers.get_all("Transfer-Encoding")
        if codings:
            if not chunked:
                raise Refused(400, "bad_request", "send the body with a Content-Length", close=True)
            if [c.strip().lower() for c in ",".join(codings).split(",")] != ["chunked"]:
                raise Refused(400, "bad_request", "unsupported Transfer-Encoding", close=True)
            return self._read_chunked(limit)
        values = self.headers.get_all("Content-Length")
        if not values:
            return b""
        lengths = {v.strip() for v in ",".join(values).split(",")}  # "5, 5" is one length
        raw = lengths.pop()
        if lengths or not _LENGTH.fullmatch(raw):
            raise Refused(400, "bad_request", "invalid Content-Length", close=True)
        length = int(raw)
        if length > limit:
            if length <= DRAIN_LIMIT:
                self._discard(length)
            raise _too_large(limit)
        body = self.rfile.read(length)
        if len(body) < length:
            raise Refused(400, "bad_request", "request body ended early", close=True)
        return body

    def _read_chunked(self, limit: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            match = _CHUNK_LINE.fullmatch(self.rfile.readline(_LINE_LIMIT))
            if match is None:
                raise _bad_chunks()
            size = int(match.group(1), 16)
            if size == 0:
                break
            total += size
            if total > DRAIN_LIMIT:
                raise _too_large(limit)
            data = self.rfile.read(size)
            if len(data) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _bad_chunks()
            if total <= limit:  # past it, the rest is read only to be dropped
                chunks.append(data)
        trailers = 0
        while (line := self.rfile.readline(_LINE_LIMIT)) not in (b"\r\n", b"\n"):
            trailers += len(line)
            if not line.endswith(b"\n") or trailers > _TRAILER_LIMIT:
                raise _bad_chunks()
        if total > limit:
            raise _too_large(limit)
        return b"".join(chunks)

    def _discard(self, length: int) -> None:
        with contextlib.suppress(OSError):
            while length > 0:
                chunk = self.rfile.read(min(length, 65536))
                if not chunk:
                    return
                length -= len(chunk)

    def _body_pending(self) -> bool:
        if self._body_taken:
            return False
        length = (self.headers.get("Content-Length") or "0").strip()
        return "Transfer-Encoding" in self.headers or length != "0"

    # -- response ----------------------------------------------------------------------------

    def send(
        self,
        status: int,
        payload: bytes = b"",
        headers: Iterable[tuple[str, str]] = (),
        *,
        close: bool = False,
    ) -> None:
        """One whole response: `headers`, then Content-Length and `payload` where the status
        has a body (not 1xx, 204 or 304); a HEAD request gets the length without the body."""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        bodiless = status < 200 or status in _BODILESS
        if not bodiless:
            self.send_header("Content-Length", str(len(payload)))
        if close or self._body_pending():
            self.send_header("Connection", "close")  # also sets close_connection
        self.end_headers()
        if not bodiless and self.command != "HEAD":
            self.wfile.write(payload)

    def send_json(
        self, status: int, body: Any, headers: Iterable[tuple[str, str]] = (), *, close: bool = False
    ) -> None:
        self.send(
            status, json.dumps(body).encode(), [("Content-Type", "application/json"), *headers], close=close
        )

    def send_error_json(
        self,
        status: int,
        code: str,
        message: str,
        headers: Iterable[tuple[str, str]] = (),
        *,
        close: bool = False,
    ) -> None:
        """The JSON error shape of docs/concepts/identity.md: `{"error": {"code": ..., "message": ...}}`."""
        self.send_json(status, {"error": {"code": code, "message": message}}, headers, close=close)


def _too_large(limit: int) -> Refused:
    return Refused(413, "too_large", f"request body exceeds {limit} bytes", close=True)


def _bad_chunks() -> Refused:
    return Refused(400, "bad_request", "invalid chunked body", close=True)
