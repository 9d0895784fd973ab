"""The local stack's relay, in a process of its own.

Lambda runs one invocation at a time per execution environment, and the handlers rely on it:
Powertools' resolvers keep the current request in a slot shared by every resolver of a
process (`BaseRouter.current_event`), so two handlers in flight in one process read each
other's requests. The stack therefore serves one invocation at a time per process. Its own
process holds the API, the runtime routes, the webhook and the loop's functions under one
invocation lock; they are quick. The relay is not: a model call may take a minute, and under
that one lock the API, the console and the loop would freeze for its duration. So the relay
runs here, in a child process with its own lock (one warm environment behind its two front
doors, plain http for the runner and HTTPS for stock clients): isolated as on Lambda, and
never in the way of the rest.

The child inherits the stack's environment (endpoints, table prefix, capability key, the
scripted model's settings) and its stdout and stderr. It writes one JSON line with its URLs
to the pipe it was given once both front doors answer, then serves until its stdin closes:
the stack closes it to stop the relay, and the kernel closes it when the stack's process dies
however it dies, so no relay outlives its stack. SIGINT is ignored here: a Ctrl-C reaches the
whole foreground process group, and the stack stops its relay itself, in its own order.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from steward.local.running import Running

START_SECONDS = 60.0  # a cold start on a busy machine: imports, a CA, two servers
STOP_SECONDS = 10.0


class RelayProcess(Running):
    """`start()` spawns the child and returns at once (it imports while the stack starts its
    other parts); `urls()` waits for it to answer."""

    def __init__(self, state_dir: Path, host: str) -> None:
        self.state_dir = state_dir
        self.host = host
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready: IO[bytes] | None = None
        self._urls: dict[str, str] | None = None

    def start(self) -> None:
        if self._proc is not None:
            return
        read, write = os.pipe()
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - this interpreter, argv as a list
                [
                    sys.executable,
                    "-m",
                    "steward.local.relay_process",
                    str(self.state_dir),
                    self.host,
                    str(write),
                ],
                stdin=subprocess.PIPE,
                pass_fds=(write,),
            )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        self._ready = os.fdopen(read, "rb")

    def urls(self) -> dict[str, str]:
        """{"http_url", "https_url", "ca_bundle"}; RuntimeError if the child ended or did not
        answer within START_SECONDS."""
        if self._urls is not None:
            return self._urls
        if self._ready is None or self._proc is None:
            raise RuntimeError("the relay process is not started")
        ready, _, _ = select.select([self._ready], [], [], START_SECONDS)
        line = self._ready.readline() if ready else b""
        if not line:
            raise RuntimeError(f"the relay process did not start (exit status {self._proc.poll()})")
        self._urls = json.loads(line)
        return self._urls

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        ready, self._ready = self._ready, None
        if ready is not None:
            ready.close()
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the child's signal to stop
        try:
            proc.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _serve(state_dir: Path, host: str, ready_fd: int) -> None:
    from steward import relay_handler  # noqa: PLC0415 - configured by the inherited environment
    from steward.domain.routes import RELAY_BINARY_MEDIA_TYPES  # noqa: PLC0415
    from steward.local import tls as local_tls  # noqa: PLC0415
    from steward.local.http_adapter import LambdaHttpServer  # noqa: PLC0415

    tls = local_tls.create(state_dir)
    lock = threading.Lock()  # one relay function behind two front doors: one warm environment
    servers = [
        LambdaHttpServer(
            relay_handler.lambda_handler,
            kind="rest_api",
            host=host,
            function_name="steward-relay",
            invocation_lock=lock,
            tls=context,
            binary_media_types=RELAY_BINARY_MEDIA_TYPES,
        )
        for context in (None, tls.context)
    ]
    try:
        for server in servers:
            server.start()
        urls: dict[str, Any] = {
            "http_url": servers[0].url,
            "https_url": servers[1].url,
            "ca_bundle": str(tls.ca_bundle),
        }
        with os.fdopen(ready_fd, "w") as ready:
            ready.write(json.dumps(urls) + "\n")
        sys.stdin.buffer.read()  # until the stack closes it, or its process ends
    finally:
        for server in servers:
            server.stop()


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    state_dir, host, ready_fd = argv
    _serve(Path(state_dir), host, int(ready_fd))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
