"""The launcher of the local stack: one runtime process per task id (docs/getting-started/local-stack.md).

Each runtime is `python -m steward.runner` in its own session and process group, so `stop`
reaches everything it started (SIGTERM to the group, SIGKILL after a grace). The child
gets a minimal environment built here, never this process's (docs/concepts/runner.md), exactly:

* PATH, HOME and LANG, copied from this process where set;
* STEWARD_TASK_ID, STEWARD_TICKET (only here, never in argv, which any local user can
  read), STEWARD_API_URL and STEWARD_RELAY_URL;
* `extra_env`: the deployment's runner bounds as a Fargate task definition would carry
  them — STEWARD_RUNNER_* (the tool-loop bounds, STEWARD_RUNNER_HEARTBEAT_SECONDS),
  STEWARD_CHECK_*, STEWARD_SANDBOX_UID, STEWARD_WORK_DIR, STEWARD_KEEP_WORK and the stack's
  STEWARD_STREAM_URL — which cannot override the per-task variables. Any other name
  (an AWS_* variable, STEWARD_TABLE_PREFIX, a control-plane setting) is refused when the
  launcher is built (`steward.config:is_runtime_setting`).

No AWS_* variable at all — no key, no region, no endpoint: the runtime writes only through
the `/v1/runtime/*` routes, and uploads its artifacts to the presigned URLs they answer.

A launch while the task's process still runs returns its reference ("local:<pid>") and
starts nothing; once it exited, a launch starts a new one (whose claim decides whether it
does anything). A waiter thread per process notices the exit without reaping, kills what the
runtime left in its group, then reaps it: no zombie stays behind, and a group is only ever
signalled while its leader's pid is still held (alive or a zombie), so a signal can never
reach an unrelated process that got the pid later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import IO

from steward.config import is_runtime_setting
from steward.domain.launch import LaunchError, RuntimeEndpoints
from steward.domain.models import Task

RUNNER_COMMAND: tuple[str, ...] = (sys.executable, "-m", "steward.runner")
COPIED = ("PATH", "HOME", "LANG")
_NO_ENV: Mapping[str, str] = MappingProxyType({})
_REF_PREFIX = "local:"


class _Runtime:
    """One runtime process and the lock that orders signals against reaping."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.ref = f"{_REF_PREFIX}{proc.pid}"
        self._lock = threading.Lock()
        self._reaped = threading.Event()
        self.stopping = False  # a stop was asked: a later launch starts a new runtime
        threading.Thread(target=self._reap, name=f"reap-{proc.pid}", daemon=True).start()

    @property
    def running(self) -> bool:
        return not self._reaped.is_set()

    def signal_group(self, sig: signal.Signals) -> None:
        with self._lock:
            if self._reaped.is_set():
                return  # the group died with its leader, and the pid may be another's now
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)  # setsid made the child's pid its group id

    def wait(self, timeout: float | None) -> int:
        if not self._reaped.wait(timeout):
            raise subprocess.TimeoutExpired(self.proc.args, timeout or 0.0)
        return self.proc.returncode

    def _reap(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        with self._lock:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # whatever the runtime left behind
            self.proc.wait()
            self._reaped.set()


class LocalLauncher:
    def __init__(
        self,
        endpoints: RuntimeEndpoints,
        *,
        extra_env: Mapping[str, str] = _NO_ENV,
        log_dir: Path | None = None,
        command: Sequence[str] | None = None,
        stop_grace: float = 5.0,
    ) -> None:
        """`command` replaces the runner (tests use it for a runtime that keeps running);
        `stop_grace` is how long `stop` waits after SIGTERM before SIGKILL. ValueError for an
        `extra_env` name that is not a runner bound."""
        refused = sorted(name for name in extra_env if not is_runtime_setting(name))
        if refused:
            raise ValueError(f"not a runtime setting, never passed to a runtime: {', '.join(refused)}")
        self._endpoints = endpoints
        self._extra_env = dict(extra_env)
        self._log_dir = log_dir
        self._command = tuple(command) if command is not None else RUNNER_COMMAND
        self._stop_grace = stop_grace
        self._runtimes: dict[str, _Runtime] = {}  # latest runtime per task id
        self._lock = threading.Lock()

    # ---- Launcher
    def launch(self, task: Task, ticket: str) -> str:
        with self._lock:
            current = self._runtimes.get(task.id)
            if current is not None and current.running and not current.stopping:
                return current.ref
            runtime = _Runtime(self._start(task, ticket))
            self._runtimes[task.id] = runtime
            return runtime.ref

    def stop(self, task: Task, launch_ref: str | None) -> None:
        """Ask the process group of `task`'s runtime to stop, if this launcher started one, and
        return, as ECS's StopTask does: SIGTERM now, SIGKILL after the grace, from a thread of
        its own. Waiting here would hold the invocation that stops it (a heartbeat, a cancel)
        while the runtime, unwinding, calls the stack's API, which waits on that invocation.
        A reference alone never leads to a signal: a pid not started here may be anyone's."""
        with self._lock:
            runtime = self._runtimes.get(task.id)
            if runtime is None or runtime.stopping:
                return
            runtime.stopping = True
        runtime.signal_group(signal.SIGTERM)
        threading.Thread(
            target=_kill_after, args=([runtime], self._stop_grace), name=f"stop-{runtime.ref}", daemon=True
        ).start()

    # ---- local extras
    def wait(self, task_id: str, timeout: float | None = 60.0) -> int | None:
        """Exit code of the latest runtime of `task_id` once it exited (None: none started
        here). Raises subprocess.TimeoutExpired."""
        with self._lock:
            runtime = self._runtimes.get(task_id)
        return None if runtime is None else runtime.wait(timeout)

    def close(self) -> None:
        """Stop every runtime this launcher started."""
        with self._lock:
            runtimes = list(self._runtimes.values())
            asked = [runtime for runtime in runtimes if not runtime.stopping]
            for runtime in asked:
                runtime.stopping = True
        for runtime in asked:
            runtime.signal_group(signal.SIGTERM)
        _kill_after(runtimes, self._stop_grace)  # those stopping already included: all are gone after

    def __enter__(self) -> LocalLauncher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- internals
    def environment(self, task: Task, ticket: str) -> dict[str, str]:
        """The runtime's whole environment (see the module docstring)."""
        env = {name: os.environ[name] for name in COPIED if name in os.environ}
        env |= self._extra_env
        env |= {
            "STEWARD_TASK_ID": task.id,
            "STEWARD_TICKET": ticket,
            "STEWARD_API_URL": self._endpoints.api_url,
            "STEWARD_RELAY_URL": self._endpoints.relay_url,
        }
        return env

    def _start(self, task: Task, ticket: str) -> subprocess.Popen[bytes]:
        log: IO[bytes] | int = subprocess.DEVNULL
        try:
            if self._log_dir is not None:
                self._log_dir.mkdir(parents=True, exist_ok=True)
                log = (self._log_dir / f"{task.id}.log").open("ab")
            try:
                return subprocess.Popen(  # noqa: S603 - fixed argv, no shell, no ticket in it
                    self._command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.environment(task, ticket),
                    start_new_session=True,
                    close_fds=True,
                )
            finally:
                if not isinstance(log, int):
                    log.close()  # the child holds its own copy
        except OSError as exc:
            reason = type(exc).__name__
            detail = exc.strerror or reason
        # Raised outside the except block: the OSError (which names the argv) is not chained.
        raise LaunchError(f"could not start the runtime of task {task.id}: {detail}", reason=reason)


_GROUP_EXIT_SECONDS = 5.0


def _kill_after(runtimes: Sequence[_Runtime], grace: float) -> None:
    """After a SIGTERM: wait up to `grace` for the leaders, then SIGKILL what is left and wait
    until each is reaped. One SIGTERM only: a second would reach a runtime already unwinding."""
    deadline = time.monotonic() + grace
    for runtime in runtimes:
        try:
            runtime.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            runtime.signal_group(signal.SIGKILL)
    for runtime in runtimes:
        runtime.wait(None)
    # SIGKILL reaches every member of a group at once, but the leader can be reaped before
    # its children have died: a stop returns only once none of them runs any more.
    deadline = time.monotonic() + _GROUP_EXIT_SECONDS
    for runtime in runtimes:
        while _group_runs(runtime.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)


def _group_runs(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (a zombie does not: it waits for init)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
