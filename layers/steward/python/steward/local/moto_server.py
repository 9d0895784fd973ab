"""An in-process moto server on loopback: the AWS endpoint of the local stack and the tests.

It runs moto's own `ThreadedMotoServer` bound to 127.0.0.1 on a free port, with DynamoDB
serialized first (see `moto_serial`) and moto's short cuts installed (`moto_speed`). Backends
are process-global in moto, so two servers in one process share state, and `mock_aws`
starting or stopping in the same process resets it.
"""

from __future__ import annotations

import logging
import socket
import time
import urllib.error
import urllib.request

from moto.server import ThreadedMotoServer

from steward.local.moto_serial import install_dynamodb_lock, install_s3_lock
from steward.local.moto_speed import install_moto_shortcuts
from steward.local.running import Running

_HOST = "127.0.0.1"


def wait_until_ready(url: str, timeout: float = 10.0) -> None:
    """Poll moto's cheap `/moto-api/config` until it answers; TimeoutError after `timeout` s.

    `MotoServer.start()` already returns with the socket listening; this is for a moto server
    in another process (or any caller that only has the URL).
    """
    deadline = time.monotonic() + timeout
    probe = url.rstrip("/") + "/moto-api/config"
    last: Exception | None = None
    while True:
        try:
            with urllib.request.urlopen(probe, timeout=1.0) as response:  # noqa: S310 (loopback URL)
                response.read()
                return
        except (OSError, urllib.error.URLError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"moto server at {url} not ready after {timeout} s: {last!r}")
        time.sleep(0.05)


class MotoServer(Running):
    """Context manager around `ThreadedMotoServer`: loopback only, free port, quiet."""

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self._server: ThreadedMotoServer | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """Base URL such as `http://127.0.0.1:54321`; only valid while started."""
        if self._url is None:
            raise RuntimeError("MotoServer is not started")
        return self._url

    def start(self) -> None:
        if self._server is not None:
            return
        install_dynamodb_lock()
        install_s3_lock()
        install_moto_shortcuts()
        _quiet_werkzeug()
        if self._port:
            _check_bindable(self._port)
        server = ThreadedMotoServer(ip_address=_HOST, port=self._port, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        self._server = server
        self._url = f"http://{host}:{port}"

    def stop(self) -> None:
        """Stop serving and close the listening socket (the port is free afterwards)."""
        server, self._server, self._url = self._server, None, None
        if server is not None:
            server.stop()


def _check_bindable(port: int) -> None:
    """Raise OSError now if the port is taken.

    `ThreadedMotoServer` binds inside its thread and `start()` then waits forever for a
    ready signal that never comes; probing first turns that hang into an error.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as werkzeug binds
        probe.bind((_HOST, port))


def _quiet_werkzeug() -> None:
    """Werkzeug logs one INFO line per request to stderr unless its logger has a level.

    Only an unconfigured logger is touched, so an explicit choice by the caller wins.
    """
    log = logging.getLogger("werkzeug")
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)
