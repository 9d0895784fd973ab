"""Smart-HTTP git through `git http-backend`, run as a CGI program per request.

Bodies stream both ways: the request body is copied to the backend's stdin by a helper
thread (a `Content-Length` body byte for byte, a chunked one de-chunked, gzip passed
through with `HTTP_CONTENT_ENCODING` for git's own inflater), while the handler streams
the backend's stdout back as a chunked HTTP/1.1 response, so the connection stays usable
for git's next request (keep-alive). The backend never sees a token: `REMOTE_USER` is
the fixed user name `x-access-token`, and the environment holds nothing else secret.
"""

from __future__ import annotations

import contextlib
import io
import logging
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import IO, cast

from steward.local.github_twin.gitrepo import git_env

_LOG = logging.getLogger(__name__)

_COPY = 64 * 1024
_MAX_HEADER_LINES = 100
_STDERR_LIMIT = 8 * 1024
_TIMEOUT_SECONDS = 600.0


SendHead = Callable[[int, list[tuple[str, str]]], None]
"""Sends the status line and the headers (the handler's part of the answer)."""


class BadRequest(Exception):
    """The request body could not be read (broken chunked framing, early EOF)."""


@dataclass(frozen=True)
class CgiRequest:
    method: str
    path_info: str  # e.g. /owner/repo.git/git-upload-pack
    query: str
    headers: Message
    remote_addr: str
    remote_user: str


def run(
    request: CgiRequest,
    rfile: io.BufferedIOBase,
    send_head: SendHead,
    wfile: io.BufferedIOBase,
    *,
    project_root: Path,
    home: Path,
) -> int:
    """Run the backend for one request and stream its answer; the HTTP status sent."""
    git = shutil.which("git")
    if git is None:
        raise RuntimeError("git is not on PATH")
    chunked = "chunked" in (request.headers.get("Transfer-Encoding") or "").lower()
    length = None if chunked else _content_length(request.headers)
    proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
        [git, "http-backend"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(request, length, project_root, home),
    )
    stdin, stdout = cast(IO[bytes], proc.stdin), cast(io.BufferedReader, proc.stdout)
    feed_error: list[BaseException] = []
    feeder = threading.Thread(
        target=_feed, args=(rfile, stdin, length, chunked, feed_error), name="twin-git-feed", daemon=True
    )
    stderr: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(proc.stderr, stderr), name="twin-git-stderr", daemon=True)
    feeder.start()
    reader.start()
    try:
        status, cgi_headers = _cgi_head(stdout)
        send_head(status, cgi_headers)
        _stream(stdout, wfile)
    except BaseException:
        proc.kill()
        raise
    finally:
        feeder.join(timeout=_TIMEOUT_SECONDS)
        try:
            code = proc.wait(timeout=_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        reader.join(timeout=5)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if code != 0:
            detail = b"".join(stderr).decode(errors="replace").strip()
            _LOG.info("git http-backend exited %s for %s: %s", code, request.path_info, detail[:500])
    if feed_error:
        raise BadRequest(str(feed_error[0]))
    return status


def _environment(request: CgiRequest, length: int | None, project_root: Path, home: Path) -> dict[str, str]:
    """The CGI variables `git http-backend` reads (RFC 3875 and git's own)."""
    headers = request.headers
    env = git_env(
        home,
        {
            "GIT_PROJECT_ROOT": str(project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "SERVER_SOFTWARE": "github-twin",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": request.path_info,
            "QUERY_STRING": request.query,
            "REMOTE_ADDR": request.remote_addr,
            "REMOTE_USER": request.remote_user,
        },
    )
    optional = {
        "CONTENT_TYPE": headers.get("Content-Type"),
        "CONTENT_LENGTH": None if length is None else str(length),
        "HTTP_CONTENT_ENCODING": headers.get("Content-Encoding"),  # git inflates gzip itself
        "HTTP_GIT_PROTOCOL": headers.get("Git-Protocol"),  # protocol v2
    }
    env.update({name: value for name, value in optional.items() if value})
    return env


def _stream(stdout: io.BufferedReader, wfile: io.BufferedIOBase) -> None:
    """Copy the backend's body out as HTTP/1.1 chunks, as soon as it arrives."""
    while True:
        chunk = stdout.read1(_COPY)
        if not chunk:
            break
        wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    wfile.write(b"0\r\n\r\n")
    wfile.flush()


def _content_length(headers: Message) -> int | None:
    raw = headers.get("Content-Length")
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest("invalid Content-Length") from None
    if value < 0:
        raise BadRequest("invalid Content-Length")
    return value


def _feed(
    rfile: io.BufferedIOBase, stdin: IO[bytes], length: int | None, chunked: bool, errors: list[BaseException]
) -> None:
    """Copy the request body to the backend; keep reading it if the backend stops early,
    so the connection is positioned at the next request."""
    sink: IO[bytes] | None = stdin
    try:
        for block in _chunks(rfile) if chunked else _exact(rfile, length or 0):
            if sink is None:
                continue
            try:
                sink.write(block)
            except (BrokenPipeError, ValueError):
                sink = None  # the backend answered without reading everything
    except BaseException as exc:
        errors.append(exc)
    finally:
        with contextlib.suppress(OSError, ValueError):
            stdin.close()


def _exact(rfile: io.BufferedIOBase, length: int) -> Iterator[bytes]:
    while length > 0:
        block = rfile.read(min(length, _COPY))
        if not block:
            raise BadRequest("request body ended early")
        length -= len(block)
        yield block


def _chunks(rfile: io.BufferedIOBase) -> Iterator[bytes]:
    while True:
        line = rfile.readline(1024)
        if not line:
            raise BadRequest("chunked body ended early")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest("invalid chunk size") from None
        if size == 0:
            while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return
        yield from _exact(rfile, size)
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise BadRequest("invalid chunk framing")


def _drain(stream: IO[bytes] | None, into: list[bytes]) -> None:
    if stream is None:
        return
    size = 0
    for block in iter(lambda: stream.read(4096), b""):
        if size < _STDERR_LIMIT:
            into.append(block)
            size += len(block)


def _cgi_head(stdout: io.BufferedReader) -> tuple[int, list[tuple[str, str]]]:
    """The CGI response header block: (`Status`, other headers)."""
    status = 200
    headers: list[tuple[str, str]] = []
    for _ in range(_MAX_HEADER_LINES):
        line = stdout.readline(8192)
        if line in (b"\r\n", b"\n", b""):
            return status, headers
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip(), value.strip()
        if name.lower() == "status":
            status = int(value.split(" ", 1)[0])
        elif name:
            headers.append((name, value))
    raise RuntimeError("git http-backend sent too many header lines")
