"""The verification sandbox: `run_verification` runs only the commands the approved plan lists
(its `checks`), exactly, without a shell (DESIGN section 6).

The command text is matched against the list, never interpreted: the listed check's argv is
executed directly, so `;`, `&&`, `|`, `$(...)` and redirections mean nothing unless the plan
author wrote them into a check (and then the check's own program, e.g. `sh -c`, sees them).

Modes, strongest first (`probe_mode` picks one; its reason is recorded in bootstrap.json):

* `BWRAP`: bubblewrap run as root, with no network, pid, IPC or UTS namespace of the host, a
  read-only system (only /usr, /etc, the library and binary directories, the interpreter and
  any `extra_ro_paths`; never `/` wholesale, which holds credentials), a private /tmp, and the
  clone bound read-write with its `.git` read-only on top. Inside, `setpriv` drops to an
  unprivileged uid with no capabilities. bwrap runs as root and without a user namespace so
  that it can bind paths under /root (0700, where the interpreter lives) and so that the
  command's uid is a real one on the host: RLIMIT_NPROC counts processes per real uid, and
  root ignores it.
* `UNPRIVILEGED_USER`: where bwrap cannot run (AWS Fargate has no user namespaces), the
  command runs as the unprivileged uid with rlimits and a scrubbed environment, in the clone.
  It gets no network, mount or pid isolation: the task itself (its security group and role)
  is the boundary. The clone's ancestors must be searchable by the uid.
* `SAME_USER`: not root, so there is no other uid to become: rlimits and a scrubbed
  environment only. The weakest mode.

In the root modes the uid must be dedicated to the sandbox, and one command runs at a time
per uid: after every run all processes of that uid are killed (a check may not leave a
daemon behind, and a fork bomb must not outlive its run).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import pwd
import re
import resource
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CommandRefused",
    "CommandResult",
    "Sandbox",
    "SandboxLimits",
    "SandboxMode",
    "VerifyArgs",
    "parse_allowlist",
    "probe_mode",
]

_SYSTEM_DIRS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# setpriv must live where the sandbox can see it: look only in the system directories bound inside.
_SYSTEM_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"
_SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's own tmpfs, not the host's /tmp
_SHELL_SYNTAX = re.compile(r"[;&|<>`$*?\n]")
_READ_CHUNK = 65_536
_POLL_SECONDS = 0.1  # cancel and kill are noticed at least this often
_SWEEP_SECONDS = 5.0
_MAX_LISTED_IN_REFUSAL = 20
_PR_SET_PDEATHSIG = 1


class VerifyArgs(BaseModel):
    """The model's input to `run_verification`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(
        min_length=1,
        max_length=1000,
        description="One of the plan's checks, exactly as listed (no shell: no pipes, `;`, `&&` or redirections).",
    )


class SandboxLimits(BaseModel):
    """Bounds on one verification command. The process limits are rlimits, so they hold per process
    (memory, CPU, file size) or per uid (processes); wall time and output hold for the whole group."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    wall_seconds: float = Field(default=300.0, gt=0)
    cpu_seconds: int = Field(default=300, ge=1)
    memory_bytes: int = Field(default=4 * 1024**3, ge=1)  # RLIMIT_AS
    max_processes: int = Field(default=256, ge=1)  # RLIMIT_NPROC: per real uid, hence the unprivileged uid
    max_file_bytes: int = Field(default=256 * 1024**2, ge=0)  # RLIMIT_FSIZE
    max_output_bytes: int = Field(default=1_048_576, ge=1)  # beyond this the whole group is killed
    kill_grace_seconds: float = Field(default=2.0, ge=0)


class SandboxMode(StrEnum):
    BWRAP = "bwrap"
    UNPRIVILEGED_USER = "unprivileged-user"
    SAME_USER = "same-user"


class CommandRefused(Exception):
    """The command is not one the plan lists (message says why, for the model)."""


@dataclass(frozen=True)
class CommandResult:
    command: str
    argv: tuple[str, ...]
    exit_code: int | None  # None when killed (timeout, output limit, cancel, kill)
    timed_out: bool
    output_truncated: bool  # the output limit was hit, so the group was killed
    duration_s: float
    output: str  # stdout and stderr merged, utf-8 with replacement, at most max_output_bytes
    signal: int | None  # the signal that ended it, if any

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.output_truncated


def parse_allowlist(checks: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Command text -> argv (shlex.split); refuses (ValueError) a check that does not split, so that a
    broken plan fails at confirmation rather than when the model tries the check."""
    allowed: dict[str, tuple[str, ...]] = {}
    for check in checks:
        text = check.strip()
        try:
            argv = tuple(shlex.split(text))
        except ValueError as exc:
            raise ValueError(f"check {check!r} does not split into arguments: {exc}") from exc
        if not argv:
            raise ValueError(f"check {check!r} is empty")
        allowed[text] = argv
    return allowed


def probe_mode(*, uid: int) -> tuple[SandboxMode, str]:
    """Which mode works here, and a one-line reason (recorded in bootstrap.json): run a trivial command
    under bwrap with the real flags; if that fails and we are root, UNPRIVILEGED_USER; otherwise SAME_USER
    (weakest: say so)."""
    why = _probe_bwrap(uid)
    if why is None:
        return SandboxMode.BWRAP, (
            f"bubblewrap works: commands run as uid {uid} with no network, a read-only system, "
            "a private /tmp and their own pid namespace"
        )
    if os.geteuid() == 0:
        return SandboxMode.UNPRIVILEGED_USER, (
            f"bubblewrap unusable ({why}): commands run as uid {uid} with rlimits and a scrubbed "
            "environment, but with no network, filesystem or pid isolation; the task is the boundary"
        )
    return SandboxMode.SAME_USER, (
        f"bubblewrap unusable ({why}) and not root: commands run as this user with rlimits and a "
        "scrubbed environment only; the weakest mode, with no isolation at all"
    )


def _probe_bwrap(uid: int) -> str | None:
    """None when `id -u` runs under bwrap as `uid`; otherwise why not, on one line."""
    with tempfile.TemporaryDirectory(prefix="steward-probe-") as scratch:
        clone = Path(scratch) / "clone"
        clone.mkdir()
        limits = SandboxLimits(wall_seconds=30.0, kill_grace_seconds=0.5, max_output_bytes=4096)
        try:
            box = Sandbox(clone, ["id -u"], mode=SandboxMode.BWRAP, uid=uid, limits=limits)
            result = box.run("id -u")
        except (OSError, ValueError) as exc:
            return _one_line(str(exc))
    if result.passed and result.output.strip() == str(uid):
        return None
    detail = _one_line(result.output) or "no output"
    return f"exit {result.exit_code}, signal {result.signal}: {detail}"


def _one_line(text: str, limit: int = 200) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:limit]


class Sandbox:
    """Runs the commands `checks` lists in `clone` under one `mode`, one at a time. `network=True` is for
    the plan's `setup` commands only (they fetch dependencies): bwrap then shares the host's network,
    loopback included; everything else stays as for checks."""

    def __init__(
        self,
        clone: Path,
        checks: Sequence[str],
        *,
        mode: SandboxMode,
        uid: int = 65534,
        gid: int | None = None,
        limits: SandboxLimits | None = None,
        extra_ro_paths: Sequence[Path] = (),
        path_dirs: Sequence[str] | None = None,
        network: bool = False,
    ) -> None:
        self.clone = Path(os.path.realpath(clone))
        if not self.clone.is_dir():
            raise ValueError(f"clone {clone} is not a directory")
        self.mode = mode
        # Only for the plan's `setup` commands (dependencies must be fetched); checks never get it.
        self.network = network
        if mode is not SandboxMode.SAME_USER and uid == 0:
            raise ValueError("verification commands never run as root: give an unprivileged uid")
        self.uid = uid
        self.gid = _primary_gid(uid) if gid is None else gid
        self.limits = limits or SandboxLimits()
        self._by_text = parse_allowlist(checks)
        self._by_argv = {argv: argv for argv in self._by_text.values()}
        self._extra_ro = tuple(str(Path(p).absolute()) for p in extra_ro_paths)
        if path_dirs is None:
            path_dirs = (os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin")
        self._path = ":".join(path_dirs)
        self._as_root = os.geteuid() == 0
        self._bwrap = ""
        self._setpriv = ""
        if mode is SandboxMode.BWRAP:
            self._bwrap = shutil.which("bwrap") or ""
            self._setpriv = shutil.which("setpriv", path=_SYSTEM_PATH) or ""
            if not self._bwrap or not self._setpriv:
                raise ValueError("bwrap mode needs bwrap and setpriv (util-linux) installed")
        self._busy = threading.Lock()
        self._lock = threading.Lock()  # guards the fields below against kill() from another thread
        self._proc: subprocess.Popen[bytes] | None = None
        self._reaped = True
        self._running = False
        self._kill_requested = False
        self._last_signal: int | None = None
        self._wall_seconds = self.limits.wall_seconds  # of the command running now

    # -- matching -------------------------------------------------------------------------------

    def resolve(self, command: str) -> tuple[str, ...]:
        """The allowlisted argv for `command`, matched exactly: its stripped text is a listed check, or
        it splits into a listed check's argv. Anything else is refused with a reason the model can use."""
        text = command.strip()
        if text in self._by_text:
            return self._by_text[text]
        argv: tuple[str, ...] | None
        try:
            argv = tuple(shlex.split(text))
        except ValueError:
            argv = None
        if argv and argv in self._by_argv:
            return self._by_argv[argv]
        raise CommandRefused(self._refusal(text, argv))

    def _refusal(self, text: str, argv: tuple[str, ...] | None) -> str:
        listed = list(self._by_text)
        shown = ", ".join(f"`{c}`" for c in listed[:_MAX_LISTED_IN_REFUSAL])
        if len(listed) > _MAX_LISTED_IN_REFUSAL:
            shown += f" (and {len(listed) - _MAX_LISTED_IN_REFUSAL} more)"
        allowed = f"The plan lists: {shown}." if listed else "The plan lists no checks."
        if not text:
            return f"Empty command. {allowed}"
        if _SHELL_SYNTAX.search(text):
            return (
                f"`{text}` is not a listed check. Commands run without a shell, so `;`, `&&`, `|`, "
                f"`$(...)`, backticks and redirections are not available; run one listed check at a time, "
                f"exactly as written. {allowed}"
            )
        if argv:
            for check in self._by_argv:
                if len(argv) > len(check) and argv[: len(check)] == check:
                    return (
                        f"`{text}` adds arguments to the listed check `{shlex.join(check)}`; "
                        f"run checks exactly as listed. {allowed}"
                    )
        return f"`{text}` is not a check the plan lists. {allowed}"

    # -- running --------------------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        on_output: Callable[[bytes], None] | None = None,
        cancel: threading.Event | None = None,
        wall_seconds: float | None = None,
    ) -> CommandResult:
        """Resolve `command` (CommandRefused propagates) and run it within the limits. `on_output` gets
        raw output chunks as they arrive (for the ephemeral terminal stream). Setting `cancel` kills the
        group and the result has exit_code None. `wall_seconds` lowers the wall-time limit for this run
        (the run's remaining time); past it the command times out as past the limit's own."""
        argv = self.resolve(command)
        if not self._busy.acquire(blocking=False):
            raise RuntimeError("a verification command is already running in this sandbox")
        with self._lock:
            self._running = True
            self._kill_requested = False
            self._wall_seconds = (
                self.limits.wall_seconds
                if wall_seconds is None
                else min(self.limits.wall_seconds, max(0.0, wall_seconds))
            )
        try:
            return self._run(command, argv, on_output, cancel)
        finally:
            with self._lock:
                self._running = False
            self._busy.release()

    def kill(self) -> None:
        """Kill the running command's whole process group now (thread-safe; no-op when idle). A kill
        that arrives while the command is still being started takes effect as soon as it exists."""
        with self._lock:
            if not self._running:
                return
            self._kill_requested = True
            self._signal_locked(signal.SIGKILL)

    def _run(
        self,
        command: str,
        argv: tuple[str, ...],
        on_output: Callable[[bytes], None] | None,
        cancel: threading.Event | None,
    ) -> CommandResult:
        privileged = self._as_root and self.mode is not SandboxMode.SAME_USER
        if privileged:
            _hand_over(self.clone, self.uid, self.gid)
        scratch: str | None = None
        try:
            if self.mode is SandboxMode.BWRAP:
                home = _SANDBOX_TMP
                full = self.bwrap_argv(argv)
            else:
                # Nothing of the host's HOME or TMPDIR: a fresh directory the command owns, removed after.
                scratch = tempfile.mkdtemp(prefix="steward-verify-")
                if privileged:
                    os.chown(scratch, self.uid, self.gid)
                home = scratch
                full = list(argv)
            return self._spawn_and_supervise(command, argv, full, home, on_output=on_output, cancel=cancel)
        finally:
            if privileged:
                _sweep_uid(self.uid)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def environment(self, home: str) -> dict[str, str]:
        """The command's whole environment: nothing is inherited, so no token, capability or AWS
        variable can reach it."""
        return {
            "PATH": self._path,
            "HOME": home,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "TMPDIR": home,
        }

    def bwrap_argv(self, argv: Sequence[str]) -> list[str]:
        """The full command line for `argv` under bubblewrap (BWRAP mode)."""
        layout = _Layout()
        out = [
            self._bwrap,
            *([] if self.network else ["--unshare-net"]),
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--die-with-parent",
            "--new-session",
            # setpriv needs these three to drop to the uid and empty the bounding set; nothing else.
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--cap-add",
            "CAP_SETPCAP",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            # HOME and TMPDIR: writable by the uid, gone with the sandbox.
            "--perms",
            "1777",
            "--tmpfs",
            _SANDBOX_TMP,
        ]
        layout.mounted(_SANDBOX_TMP, host_backed=False)
        for path in _SYSTEM_DIRS:
            if os.path.islink(path):
                out += ["--symlink", os.readlink(path), path]
                layout.mounted(path, host_backed=False)
            elif os.path.isdir(path):
                out += ["--ro-bind", path, path]
                layout.mounted(path, host_backed=True)
        for path in self._interpreter_paths():
            if os.path.exists(path) and not layout.covers(path):
                out += [*layout.parents(path), "--ro-bind", path, path]
                layout.mounted(path, host_backed=True)
        if self.network:
            # DNS: resolv.conf may be a link into /run (systemd-resolved), which is not bound otherwise.
            resolv = os.path.realpath("/etc/resolv.conf")
            if os.path.exists(resolv) and not layout.covers(resolv):
                out += [*layout.parents(resolv), "--ro-bind", resolv, resolv]
                layout.mounted(resolv, host_backed=True)
        clone = str(self.clone)
        out += [*layout.parents(clone), "--bind", clone, clone]
        git_dir = self.clone / ".git"
        # Only a real directory: a symlink would be followed by bwrap to wherever it points.
        if stat.S_ISDIR(_lstat_mode(git_dir)):
            out += ["--ro-bind", str(git_dir), str(git_dir)]
        out += ["--chdir", clone, "--", *self._drop_privileges(), *argv]
        return out

    def _interpreter_paths(self) -> list[str]:
        """The interpreter, the venv and the extra paths, both as given and as resolved, so that
        symbolic links along the way (the venv's python -> /root/.pyenv/...) still resolve inside."""
        given = [sys.base_prefix, sys.prefix, *self._extra_ro]
        paths: list[str] = []
        for path in given:
            for candidate in (os.path.realpath(path), os.path.abspath(path)):
                if candidate not in paths:
                    paths.append(candidate)
        return sorted(paths, key=lambda p: p.count("/"))

    def _drop_privileges(self) -> list[str]:
        return [
            self._setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    def _spawn_and_supervise(
        self,
        command: str,
        argv: tuple[str, ...],
        full: list[str],
        home: str,
        *,
        on_output: Callable[[bytes], None] | None,
        cancel: threading.Event | None,
    ) -> CommandResult:
        extra: dict[str, Any] = {}
        if self.mode is SandboxMode.UNPRIVILEGED_USER and self._as_root:
            extra = {"user": self.uid, "group": self.gid, "extra_groups": []}
        started = time.monotonic()
        try:
            proc = subprocess.Popen(  # noqa: S603 - an allowlisted argv, no shell
                full,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.environment(home),
                cwd=self.clone,
                start_new_session=True,  # its own process group, so the whole group can be killed
                preexec_fn=_child_setup(self.limits, os.getpid()),  # noqa: PLW1509 - system calls only
                **extra,
            )
        except OSError as exc:
            # The program could not be executed (the weaker modes exec it directly): answer as a shell would.
            return CommandResult(
                command=command,
                argv=argv,
                exit_code=127 if exc.errno == errno.ENOENT else 126,
                timed_out=False,
                output_truncated=False,
                duration_s=time.monotonic() - started,
                output=f"{argv[0]}: {exc.strerror or exc}\n",
                signal=None,
            )
        with self._lock:
            self._proc = proc
            self._reaped = False
            self._last_signal = None
        progress = _Progress(deadline=started + self._wall_seconds)
        try:
            self._supervise(proc, progress, on_output, cancel)
        finally:
            self._finish(proc)
        killed = progress.timed_out or progress.truncated or progress.cancelled or self._kill_requested
        exit_code: int | None = proc.returncode
        ended_by: int | None = None
        if exit_code is not None and exit_code < 0:
            ended_by, exit_code = -exit_code, None
        elif killed:
            ended_by, exit_code = self._last_signal, None
        return CommandResult(
            command=command,
            argv=argv,
            exit_code=exit_code,
            timed_out=progress.timed_out,
            output_truncated=progress.truncated,
            duration_s=time.monotonic() - started,
            output=bytes(progress.output).decode("utf-8", errors="replace"),
            signal=ended_by,
        )

    def _supervise(
        self,
        proc: subprocess.Popen[bytes],
        progress: _Progress,
        on_output: Callable[[bytes], None] | None,
        cancel: threading.Event | None,
    ) -> None:
        """Read output and watch the clock until the command has exited and its output is drained."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            now = time.monotonic()
            self._enforce(progress, now, cancel)
            if progress.exited:
                if not progress.reading:
                    return
                if progress.drain_until is None:
                    # Something that outlived the command may hold the pipe open: read what it writes
                    # for a moment; then it dies with the group.
                    progress.drain_until = now + self.limits.kill_grace_seconds
                elif now >= progress.drain_until:
                    return
            if not progress.reading:
                time.sleep(_POLL_SECONDS / 2)
            elif poller.poll(_POLL_SECONDS * 1000):
                self._take(progress, os.read(fd, _READ_CHUNK), on_output)
            progress.exited = progress.exited or _has_exited(proc.pid)

    def _enforce(self, progress: _Progress, now: float, cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set() and not progress.cancelled:
            progress.cancelled = True
            self._signal(signal.SIGKILL)
        if self._kill_requested and not progress.killed:
            progress.killed = True  # kill() may have come before the process existed
            self._signal(signal.SIGKILL)
        if not progress.timed_out and not progress.exited and now >= progress.deadline:
            # SIGTERM first so a test runner can say what it was doing; SIGKILL after the grace.
            progress.timed_out = True
            self._signal(signal.SIGTERM)
            progress.hard_kill_at = now + self.limits.kill_grace_seconds
        if progress.hard_kill_at is not None and now >= progress.hard_kill_at:
            progress.hard_kill_at = None
            self._signal(signal.SIGKILL)

    def _take(self, progress: _Progress, chunk: bytes, on_output: Callable[[bytes], None] | None) -> None:
        if not chunk:
            progress.reading = False
            return
        room = self.limits.max_output_bytes - len(progress.output)
        kept = chunk[:room]
        if kept:
            progress.output += kept
            if on_output is not None:
                on_output(kept)
        if len(chunk) > room:
            # Endless output (`yes`) must not fill memory or outlast its welcome: stop reading, kill.
            progress.truncated = True
            progress.reading = False
            self._signal(signal.SIGKILL)

    def _finish(self, proc: subprocess.Popen[bytes]) -> None:
        """Nothing of the command may outlive `run`: kill what is left of its group while the (possibly
        zombie) leader still holds the group id, then reap it."""
        with self._lock:
            self._signal_locked(signal.SIGKILL, record=False)
            if proc.stdout is not None:
                proc.stdout.close()  # a writer that escaped the group gets EPIPE instead of blocking
            proc.wait()
            self._reaped = True

    def _signal(self, sig: int) -> None:
        with self._lock:
            self._signal_locked(sig)

    def _signal_locked(self, sig: int, *, record: bool = True) -> None:
        proc = self._proc
        if proc is None or self._reaped:
            return
        if record:
            self._last_signal = sig
        # Under bwrap the group is bwrap and the namespace's init: killing them ends the namespace
        # (--die-with-parent); in the weaker modes it is the command and its children.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)


def _child_setup(limits: SandboxLimits, parent: int) -> Callable[[], None]:
    """The preexec function: rlimits (inherited through bwrap and setpriv), and death with the runner.
    Values are computed here, before the fork, so the child only makes system calls."""
    wanted = (
        (resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),  # SIGXCPU first, then SIGKILL
        (resource.RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
        (resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes),
        (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
        (resource.RLIMIT_CORE, 0, 0),
    )
    pairs: list[tuple[int, tuple[int, int]]] = []
    for which, soft_wanted, hard_wanted in wanted:
        current = resource.getrlimit(which)[1]
        hard = hard_wanted if current == resource.RLIM_INFINITY else min(hard_wanted, current)
        # Never raise a limit: that would fail in the child (which may already have dropped root).
        pairs.append((which, (min(soft_wanted, hard), hard)))
    prctl = _prctl()

    def setup() -> None:
        for which, pair in pairs:
            resource.setrlimit(which, pair)
        if prctl is not None:
            # If the runner dies, so does the command (bwrap, with --die-with-parent, takes the rest).
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(125)

    return setup


def _prctl() -> Callable[..., int] | None:
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it: while it is a zombie its pid and group id
    cannot be reused, so signalling the group stays safe."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _primary_gid(uid: int) -> int:
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return 0


def _hand_over(clone: Path, uid: int, gid: int) -> None:
    """Make the work tree writable by the sandbox uid while `.git` stays root's: every entry except
    `.git` is owned by uid:gid, and the top directory stays root-owned with mode 1777 (sticky, so the
    uid can create files there but not rename or delete the root-owned `.git`). No command of the uid
    runs while this walks (the previous run's processes were swept), so nothing can race it."""
    top = str(clone)
    info = os.lstat(top)
    if (info.st_uid, info.st_gid) != (0, 0):
        os.lchown(top, 0, 0)
    if stat.S_IMODE(info.st_mode) != 0o1777:
        os.chmod(top, 0o1777)  # noqa: S103 - sticky: the uid may add files, not remove root's .git
    for dirpath, dirnames, filenames in os.walk(top):
        names: Iterable[str] = (*dirnames, *filenames)
        if dirpath == top:
            dirnames[:] = [name for name in dirnames if name != ".git"]
            names = [name for name in names if name != ".git"]
        for name in names:
            path = os.path.join(dirpath, name)
            try:
                entry = os.lstat(path)
            except FileNotFoundError:
                continue
            if entry.st_uid == uid and entry.st_gid == gid:
                continue
            if not stat.S_ISDIR(entry.st_mode) and entry.st_nlink > 1:
                continue  # a hard link's other name may lie outside the work tree (or inside .git)
            os.lchown(path, uid, gid)  # never follows a symbolic link


def _status(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
            return {key: value.strip() for key, _, value in (line.partition(":") for line in status)}
    except OSError:
        return {}


def _owned_by(fields: dict[str, str], uid: int) -> bool:
    real_and_effective = fields.get("Uid", "").split()[:2]
    return str(uid) in real_and_effective


def _uid_processes(uid: int) -> list[tuple[int, bool, int]]:
    """(pid, is_zombie, parent pid) of every process whose real or effective uid is `uid`."""
    found: list[tuple[int, bool, int]] = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _status(int(name))
            if _owned_by(fields, uid):
                zombie = fields.get("State", "").startswith("Z")
                found.append((int(name), zombie, int(fields.get("PPid") or 0)))
    return found


def _sweep_uid(uid: int) -> None:
    """Kill every live process of the sandbox uid, until none is left or a few seconds pass.

    A zombie is dead already, but it counts against RLIMIT_NPROC until its parent reaps it: orphans
    re-parented to this process (when it is the container's init) are reaped here; the others are
    their init's to reap, and waiting for that would only slow every run down."""
    me = os.getpid()
    deadline = time.monotonic() + _SWEEP_SECONDS
    while time.monotonic() < deadline:
        live = 0
        for pid, zombie, parent in _uid_processes(uid):
            if not zombie:
                live += 1
                _kill_pid(pid, uid)
            elif parent == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        if not live:
            return
        time.sleep(0.02)


def _kill_pid(pid: int, uid: int) -> None:
    """SIGKILL `pid` through a pidfd after checking that it is still the uid's: a recycled pid is never hit."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if _owned_by(_status(pid), uid):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)


@dataclass
class _Progress:
    """One run's state, as the supervising loop sees it."""

    deadline: float
    output: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    truncated: bool = False
    cancelled: bool = False
    killed: bool = False
    reading: bool = True
    exited: bool = False
    hard_kill_at: float | None = None
    drain_until: float | None = None


class _Layout:
    """What the sandbox's file system holds so far, so that every directory bwrap would create on its
    own (mode 0700 in bwrap 0.8, which the uid could not traverse) is created 0755 first."""

    def __init__(self) -> None:
        self._host_backed: set[str] = set()
        self._present: set[str] = {"/"}

    def mounted(self, path: str, *, host_backed: bool) -> None:
        self._present.add(path)
        if host_backed:
            self._host_backed.add(path)

    def covers(self, path: str) -> bool:
        """Whether `path` is already visible, read-only, through a bind of the host."""
        return any(path == base or path.startswith(base + "/") for base in self._host_backed)

    def parents(self, path: str) -> list[str]:
        out: list[str] = []
        parts = Path(path).parts[1:-1]
        current = ""
        for part in parts:
            current = f"{current}/{part}"
            if current in self._present or self.covers(current):
                continue
            out += ["--perms", "0755", "--dir", current]
            self._present.add(current)
        return out
