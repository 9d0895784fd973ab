"""The verification sandbox: `run_verification` runs only the commands the approved plan lists
(its `checks`), exactly, without a shell (docs/concepts/runner.md).

The command text is matched against the list, never interpreted: the listed check's argv is
executed directly, so `;`, `&&`, `|`, `$(...)` and redirections mean nothing unless the plan
author wrote them into a check (and then the check's own program, e.g. `sh -c`, sees them).

Modes, strongest first (`probe_mode` picks one; its reason is recorded in bootstrap.json):

* `BWRAP`: bubblewrap run as root, with no network, pid, IPC or UTS namespace of the host, a
  read-only system (only /usr, /etc, the library and binary directories, the interpreter and
  any `extra_ro_paths`; never `/` wholesale, which holds credentials), a private /tmp, and the
  clone writable through a bounded overlay (below) with its `.git` read-only on top. Inside,
  `setpriv` drops to an unprivileged uid with no capabilities. bwrap runs as root and without
  a user namespace so that it can bind paths under /root (0700, where the interpreter lives)
  and so that the command's uid is a real one on the host: RLIMIT_NPROC counts processes per
  real uid, and root ignores it.
* `CONFINED`: where bwrap cannot run (AWS Fargate has no user namespaces; a runner that is
  not root) but seccomp can: the command runs as the unprivileged uid (not root: as the
  runner's own user, confined the same) with rlimits and a scrubbed environment, in the
  clone, with HOME and TMPDIR a private directory of its own, and before exec its child sets
  no_new_privs and installs (`steward.runner.confine`) a seccomp filter that refuses every
  socket family but AF_UNIX (no TCP or UDP, to loopback or anywhere; no raw, packet or netlink
  socket), io_uring, ptrace and the other process-, mount- and namespace-changing calls, and,
  where the kernel has Landlock, a ruleset that allows writing only beneath the clone and that
  private directory (and, from Landlock ABI 4, no TCP bind or connect either). It sees the
  host's file system read-only (DAC still applies) and shares its pid namespace: no mount or
  pid isolation, and writes are bounded per file only. The clone's ancestors must be
  searchable by the uid. `probe_mode` records the Landlock ABI it found (0: none).
* `UNPRIVILEGED_USER`: where neither bwrap nor seccomp works, the command runs as the
  unprivileged uid with rlimits and a scrubbed environment, in the clone. It gets no network,
  mount or pid isolation: the task itself (its security group and role) is the boundary. The
  runner refuses this mode, and SAME_USER, unless the deployment allows a weak sandbox
  (`STEWARD_RUNNER_ALLOW_WEAK_SANDBOX=1`).
* `SAME_USER`: not root, so there is no other uid to become: rlimits and a scrubbed
  environment only. The weakest mode.

In the root modes the uid must be dedicated to the sandbox, and one command runs at a time
per uid: after every run all processes of that uid are killed (a check may not leave a
daemon behind, and a fork bomb must not outlive its run).

The write bound (`max_write_bytes`, BWRAP mode): RLIMIT_FSIZE bounds one file, not how many a
command writes, so in BWRAP mode the command never writes the clone itself. In a mount
namespace of its own (one thread of the runner unshares it, so nothing is mounted on the
host and nothing outlives the run) the clone is covered by an overlay whose upper layer is a
tmpfs of `max_write_bytes` (plus 1 MiB for overlayfs' own use; and one file or directory per
KiB): everything the command creates or changes lands there, and the kernel refuses
(ENOSPC) what does not fit, so the host's disk never sees more. The supervisor watches the
tmpfs and stops the command as soon as it holds more than the bound; then the result says
`write_limit_exceeded`, its output ends with a note saying so, and nothing the command wrote
is kept (the clone is as it was before the run). Otherwise, after the run, the upper layer is
copied into the clone (new and changed files with their modes, owners, times and holes,
symbolic links, deletions), so a check's writes persist as if made in place. The bytes sit
in memory (tmpfs) while the command runs. The sandbox's own /tmp is a tmpfs of the same
size. In the weaker modes there is no mount to bound with: only RLIMIT_FSIZE holds, and the
task's own storage is the boundary.

`STEWARD_RUNNER_SANDBOX_MODE` (`steward.runner.config`) forces one mode instead of probing
(tests run the hostile checks in CONFINED mode on a machine where bwrap works); the forced mode
must still work here, or the probe fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import pwd
import re
import resource
import secrets
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
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from steward.runner.confine import Confinement, Landlock, landlock_abi, seccomp_available, seccomp_program

__all__ = [
    "WEAK_MODES",
    "CommandRefused",
    "CommandResult",
    "Sandbox",
    "SandboxLimits",
    "SandboxMode",
    "VerifyArgs",
    "kernel_confinement",
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
    # All a command may write into the clone (BWRAP mode; module docstring), and its /tmp.
    max_write_bytes: int = Field(default=1024**3, ge=4096)
    max_output_bytes: int = Field(default=1_048_576, ge=1)  # beyond this the whole group is killed
    kill_grace_seconds: float = Field(default=2.0, ge=0)


class SandboxMode(StrEnum):
    """Strongest first (the module docstring)."""

    BWRAP = "bwrap"
    CONFINED = "confined"
    UNPRIVILEGED_USER = "unprivileged-user"
    SAME_USER = "same-user"


# Weaker than CONFINED: a check there may reach the network. The runner refuses them unless the
# deployment allows a weak sandbox (`RunnerConfig.allow_weak_sandbox`).
WEAK_MODES = frozenset({SandboxMode.UNPRIVILEGED_USER, SandboxMode.SAME_USER})


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
    output: str  # stdout and stderr merged, utf-8 with replacement, at most max_output_bytes (+ a note)
    signal: int | None  # the signal that ended it, if any
    # It wrote more than max_write_bytes into the clone: stopped, and nothing it wrote was kept.
    write_limit_exceeded: bool = False

    @property
    def passed(self) -> bool:
        return (
            self.exit_code == 0
            and not self.timed_out
            and not self.output_truncated
            and not self.write_limit_exceeded
        )


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


def probe_mode(
    *, uid: int, forced: SandboxMode | None = None, within: Path | None = None
) -> tuple[SandboxMode, str]:
    """Which mode works here, and a one-line reason (recorded in bootstrap.json): run a trivial command
    under bwrap with the real flags; if that fails and we are root, CONFINED when a command confines
    itself (seccomp, and Landlock where the kernel has it); then UNPRIVILEGED_USER; otherwise SAME_USER
    (weakest: say so). With `forced`, only that mode is tried, and ValueError says why it does not work.
    `within`: where the CONFINED probe makes its clone, a directory the uid can traverse to (the run's
    own; default TMPDIR)."""
    if forced is not None:
        return forced, _probe_forced(uid, forced, within)
    why = _probe_bwrap(uid)
    if why is None:
        return SandboxMode.BWRAP, _BWRAP_WORKS.format(uid=uid)
    unconfined = _probe_confined(uid, within)
    if unconfined is None:
        return SandboxMode.CONFINED, f"bubblewrap unusable ({why}): " + _confined_works(uid)
    if os.geteuid() == 0:
        return SandboxMode.UNPRIVILEGED_USER, (
            f"bubblewrap unusable ({why}) and no confinement ({unconfined}): commands run as uid {uid} "
            "with rlimits and a scrubbed environment, but with no network, filesystem or pid isolation "
            "and writes bounded per file only; the task is the boundary"
        )
    return SandboxMode.SAME_USER, (
        f"bubblewrap unusable ({why}), no confinement ({unconfined}) and not root: commands run as this user with rlimits and a "
        "scrubbed environment only; the weakest mode, with no isolation at all"
    )


_BWRAP_WORKS = (
    "bubblewrap works: commands run as uid {uid} with no network, a read-only system, "
    "a private /tmp, their own pid namespace and a bound on what they write into the clone"
)


def _confined_works(uid: int) -> str:
    abi = landlock_abi()
    writes = (
        f"Landlock ABI {abi} lets them write only in the clone and a private temporary directory"
        + (" and refuses every TCP bind and connect" if abi >= 4 else "")
        if abi
        else "no Landlock here, so they may write wherever uid {uid} may"
    )
    who = f"uid {uid}" if os.geteuid() == 0 else "this user (not root: no other uid to become)"
    return (
        f"commands run as {who} under a seccomp filter that refuses every socket family but AF_UNIX; "
        f"{writes.format(uid=uid)}; no mount or pid isolation, and writes bounded per file only"
    )


def _probe_forced(uid: int, mode: SandboxMode, within: Path | None) -> str:
    """The reason for a forced mode that works; ValueError with why when it does not."""
    if mode is SandboxMode.BWRAP:
        why = _probe_bwrap(uid)
        reason = _BWRAP_WORKS.format(uid=uid)
    elif mode is SandboxMode.CONFINED:
        why = _probe_confined(uid, within)
        reason = _confined_works(uid)
    else:
        as_root = os.geteuid() == 0
        why = None
        if mode is SandboxMode.UNPRIVILEGED_USER and not as_root:
            why = "not root, so there is no other uid to become"
        elif mode is SandboxMode.SAME_USER and as_root:
            why = "root never runs a check as itself"
        who = f"uid {uid}" if as_root else "this user"
        reason = f"commands run as {who} with rlimits and a scrubbed environment only"
    if why is not None:
        raise ValueError(f"the forced sandbox mode {mode.value} does not work here: {why}")
    return f"forced to {mode.value}: {reason}"


def kernel_confinement() -> dict[str, Any]:
    """What the kernel offers the CONFINED mode, for bootstrap.json."""
    abi = landlock_abi()
    return {"seccomp": seccomp_available(), "landlock": "present" if abi else "absent", "landlock_abi": abi}


def _probe_confined(uid: int, within: Path | None) -> str | None:
    """None when a command confines itself as `uid` (the kernel shows it filtered, with no_new_privs);
    otherwise why not, on one line."""
    # Not root: the command stays this user, confined all the same (seccomp and Landlock need
    # no privilege, only no_new_privs), which a developer's machine without root gets.
    if os.geteuid() != 0:
        uid = os.getuid()
    if not seccomp_available():
        return "the kernel has no seccomp filters (or the platform is unknown)"
    with tempfile.TemporaryDirectory(prefix="steward-probe-", dir=within) as scratch:
        os.chmod(scratch, 0o711)  # noqa: S103 - search only: the uid must reach the clone beneath it
        clone = Path(scratch) / "clone"
        clone.mkdir()
        limits = SandboxLimits(wall_seconds=30.0, kill_grace_seconds=0.5, max_output_bytes=16384)
        try:
            box = Sandbox(clone, ["cat /proc/self/status"], mode=SandboxMode.CONFINED, uid=uid, limits=limits)
            result = box.run("cat /proc/self/status")
        except (OSError, ValueError) as exc:
            return _one_line(str(exc))
    fields = {
        key: value.split() for key, _, value in (line.partition(":") for line in result.output.splitlines())
    }
    confined = fields.get("Seccomp") == ["2"] and fields.get("NoNewPrivs") == ["1"]
    if result.passed and confined and fields.get("Uid", [""])[:2] == [str(uid)] * 2:
        return None
    detail = _one_line(result.output) or "no output"
    return f"exit {result.exit_code}, signal {result.signal}: {detail}"


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
        self._seccomp = b""
        self._landlock = Landlock(0)
        if mode is SandboxMode.CONFINED:
            if not seccomp_available():
                raise ValueError("confined mode needs seccomp filters, which this kernel or platform lacks")
            # Built once: the child only hands them to the kernel (steward.runner.confine).
            self._seccomp = seccomp_program(network=network)
            self._landlock = Landlock(landlock_abi())
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
        if privileged and self.mode is SandboxMode.BWRAP:
            return self._run_bounded(command, argv, on_output, cancel)
        scratch: str | None = None
        ruleset: int | None = None
        try:
            confinement: Confinement | None = None
            if self.mode is SandboxMode.BWRAP:
                home = _SANDBOX_TMP
                full = self.bwrap_argv(argv)
            else:
                # Nothing of the host's HOME or TMPDIR: a fresh directory the command owns, removed after;
                # as root, beside the clone, whose ancestors the uid can traverse (TMPDIR's may not be).
                scratch = tempfile.mkdtemp(
                    prefix="steward-verify-", dir=self.clone.parent if privileged else None
                )
                if privileged:
                    os.chown(scratch, self.uid, self.gid)
                home = scratch
                full = list(argv)
            if self.mode is SandboxMode.CONFINED:
                assert scratch is not None
                if self._landlock.abi:
                    try:
                        ruleset = self._landlock.ruleset([str(self.clone), scratch], network=self.network)
                    except OSError as exc:
                        # Recorded as present at the probe: a command is not run less confined than that.
                        return _not_started(
                            command, argv, 126, f"steward: cannot confine the command: {exc}\n"
                        )
                confinement = Confinement(self._seccomp, ruleset)
            return self._spawn_and_supervise(
                command, argv, full, home, on_output=on_output, cancel=cancel, confinement=confinement
            )
        finally:
            if ruleset is not None:
                os.close(ruleset)
            if privileged:
                _sweep_uid(self.uid)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def _run_bounded(
        self,
        command: str,
        argv: tuple[str, ...],
        on_output: Callable[[bytes], None] | None,
        cancel: threading.Event | None,
    ) -> CommandResult:
        """BWRAP as root: the command sees the clone through the bounded overlay, and its writes
        reach the clone only afterwards, if they fit (the module docstring)."""
        full = self.bwrap_argv(argv)
        writes = _WriteBound(self.clone, self.limits.max_write_bytes)
        try:
            try:
                result = writes.run_mounted(
                    lambda: self._spawn_and_supervise(
                        command, argv, full, _SANDBOX_TMP, on_output=on_output, cancel=cancel, writes=writes
                    )
                )
            except _BoundUnavailable as exc:
                return _not_started(
                    command, argv, 126, f"steward: cannot bound the command's writes: {exc.strerror or exc}\n"
                )
            finally:
                _sweep_uid(self.uid)
            # Nothing of the uid runs any more: keep what it wrote, or nothing if it wrote too much.
            return writes.settle(result, on_output)
        finally:
            writes.close()

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
            # HOME and TMPDIR: writable by the uid, gone with the sandbox, bounded like the clone.
            "--perms",
            "1777",
            "--size",
            str(self.limits.max_write_bytes),
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
        writes: _WriteBound | None = None,
        confinement: Confinement | None = None,
    ) -> CommandResult:
        extra: dict[str, Any] = {}
        if self.mode in (SandboxMode.CONFINED, SandboxMode.UNPRIVILEGED_USER) and self._as_root:
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
                preexec_fn=_child_setup(self.limits, os.getpid(), confinement),  # noqa: PLW1509 - system calls only
                **extra,
            )
        except OSError as exc:
            # The program could not be executed (the weaker modes exec it directly): answer as a shell would.
            code = 127 if exc.errno == errno.ENOENT else 126
            return _not_started(command, argv, code, f"{argv[0]}: {exc.strerror or exc}\n", started)
        with self._lock:
            self._proc = proc
            self._reaped = False
            self._last_signal = None
        progress = _Progress(deadline=started + self._wall_seconds, writes=writes)
        try:
            self._supervise(proc, progress, on_output, cancel)
        finally:
            self._finish(proc)
        killed = (
            progress.timed_out
            or progress.truncated
            or progress.cancelled
            or progress.wrote_too_much
            or self._kill_requested
        )
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
            write_limit_exceeded=progress.wrote_too_much,
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
        if progress.writes is not None and not progress.wrote_too_much and progress.writes.exceeded():
            # Stop it at once: a check that ignores ENOSPC would otherwise carry on to the wall limit.
            progress.wrote_too_much = True
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


def _not_started(
    command: str, argv: tuple[str, ...], code: int, output: str, started: float | None = None
) -> CommandResult:
    return CommandResult(
        command=command,
        argv=argv,
        exit_code=code,
        timed_out=False,
        output_truncated=False,
        duration_s=0.0 if started is None else time.monotonic() - started,
        output=output,
        signal=None,
    )


def _child_setup(
    limits: SandboxLimits, parent: int, confinement: Confinement | None = None
) -> Callable[[], None]:
    """The preexec function: rlimits (inherited through bwrap and setpriv), death with the runner and,
    in CONFINED mode, the seccomp filter and Landlock ruleset (subprocess has already dropped to the
    uid; no_new_privs is what lets an unprivileged process install them). Values are computed here,
    before the fork, so the child only makes system calls."""
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
        if confinement is not None:
            failed = confinement.install()
            if failed is not None:
                # Never exec unconfined. stdout is already the output pipe: the reason reaches the result.
                with contextlib.suppress(OSError):
                    os.write(1, f"steward: cannot confine the command: {failed}\n".encode())
                os._exit(126)

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
    writes: _WriteBound | None = None
    wrote_too_much: bool = False


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


# -- the write bound (module docstring) ------------------------------------------------------------

_T = TypeVar("_T")
_CLONE_NEWNS = 0x00020000
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_OVERLAY_ROOM = 1024**2  # for overlayfs' own directories and whiteouts, beyond the bound
_BYTES_PER_INODE = 1024  # one file or directory per KiB of the bound
_SAFE_MOUNT_PATH = re.compile(r"[A-Za-z0-9._/+-]+")  # nothing overlayfs' option parser splits on
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SET_ID = stat.S_ISUID | stat.S_ISGID
_OPAQUE = "trusted.overlay.opaque"
_UNSUPPORTED_XATTRS = ("trusted.overlay.redirect", "trusted.overlay.metacopy")


class _BoundUnavailable(OSError):
    """The overlay could not be set up: the command is not run rather than run unbounded."""


class _WriteBound:
    """One run's overlay: `run_mounted` runs a function in a thread whose mount namespace covers
    the clone with the bounded overlay (its children, bwrap, inherit it); `settle` then copies
    the writes into the clone, or keeps none if there were too many; `close` frees the tmpfs."""

    def __init__(self, clone: Path, max_bytes: int) -> None:
        self.clone = str(clone)
        self.max_bytes = max_bytes
        self.max_files = max(max_bytes // _BYTES_PER_INODE, 64)
        self._upper: int | None = None  # a descriptor of the upper layer: it keeps the tmpfs alive
        self._scratch: str | None = None

    def run_mounted(self, work: Callable[[], _T]) -> _T:
        """`work()` in a fresh thread that first unshares its mount namespace and mounts the
        overlay; the thread lives as long as `work` (it is the parent of the command, whose
        PDEATHSIG follows its parent thread). When it ends, so does the namespace and every
        mount in it: nothing to unmount, even if the runner is killed."""
        outcome: dict[str, Any] = {}

        def body() -> None:
            try:
                self._mount()
                outcome["value"] = work()
            except BaseException as exc:  # re-raised in the caller's thread
                outcome["error"] = exc

        thread = threading.Thread(target=body, name="steward-sandbox-mounts", daemon=True)
        thread.start()
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        value: _T = outcome["value"]
        return value

    def _mount(self) -> None:
        scratch = tempfile.mkdtemp(prefix="steward-writes-")
        self._scratch = scratch
        if not _SAFE_MOUNT_PATH.fullmatch(scratch):
            raise _BoundUnavailable(f"the temporary directory {scratch!r} cannot be named in mount options")
        try:
            _libc_call("unshare", _CLONE_NEWNS)
            # Private, so that nothing mounted here propagates back to the host's namespace.
            _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
            size = self.max_bytes + _OVERLAY_ROOM
            _mount(
                "steward-writes",
                scratch,
                "tmpfs",
                _MS_NOSUID | _MS_NODEV,
                f"size={size},nr_inodes={self.max_files},mode=0700",
            )
            lower, upper, work = (os.path.join(scratch, name) for name in ("lower", "upper", "work"))
            for path in (lower, upper, work):
                os.mkdir(path, 0o700)
            # The merged root takes its owner and mode from the upper root: make them the clone's.
            top = os.lstat(self.clone)
            os.chown(upper, top.st_uid, top.st_gid)
            os.chmod(upper, stat.S_IMODE(top.st_mode))
            self._upper = os.open(upper, _OPEN_DIR)
            _mount(self.clone, lower, None, _MS_BIND, None)  # a plain name for the lower layer
            # No redirects, metacopy or index: every change is plain data in the upper layer.
            options = ",".join(
                (
                    f"lowerdir={lower},upperdir={upper},workdir={work}",
                    "redirect_dir=off,metacopy=off,index=off,xino=off",
                )
            )
            _mount("steward-overlay", self.clone, "overlay", _MS_NOSUID | _MS_NODEV, options)
        except OSError as exc:
            raise _BoundUnavailable(exc.errno, exc.strerror or str(exc)) from None

    def exceeded(self) -> bool:
        """Whether the upper layer holds more than the bound (or every file it may): a cheap
        statfs, so the supervisor asks on every turn of its loop."""
        if self._upper is None:
            return False
        info = os.fstatvfs(self._upper)
        return (info.f_blocks - info.f_bfree) * info.f_frsize > self.max_bytes or info.f_ffree == 0

    def settle(self, result: CommandResult, on_output: Callable[[bytes], None] | None) -> CommandResult:
        """Copy the writes into the clone, or, when the bound was exceeded (also by a last burst
        after the supervisor's last look), keep none and say so at the end of the output."""
        if self._upper is None:
            return result
        if not (result.write_limit_exceeded or self.exceeded()):
            _merge_dir(self._upper, self.clone)
            return result
        note = (
            f"\n[steward: the command was stopped: it wrote more than {self.max_bytes} bytes "
            f"(or {self.max_files} files) into the repository, the bound on what one command may "
            "write; nothing it wrote was kept]\n"
        )
        if on_output is not None:
            on_output(note.encode())
        return dataclasses.replace(result, write_limit_exceeded=True, output=result.output + note)

    def close(self) -> None:
        if self._upper is not None:
            os.close(self._upper)
            self._upper = None
        if self._scratch is not None:
            # On the host it is an empty directory (the tmpfs was mounted on it in the namespace only).
            with contextlib.suppress(OSError):
                os.rmdir(self._scratch)
            self._scratch = None


def _libc_call(name: str, *args: Any) -> None:
    function = getattr(ctypes.CDLL(None, use_errno=True), name)
    if function(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{name}: {os.strerror(number)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)

    def encode(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    if libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount {fstype or 'change'} on {target}: {os.strerror(number)}")


def _merge_dir(upper: int, clone: str) -> None:
    """Apply an overlay upper layer to the clone as root, as the kernel would have shown it:
    whiteouts delete, opaque directories replace, files and links are placed by rename (never
    written through a link or a hard link), owners, modes (without set-id bits) and times are
    kept. Nothing of the uid runs any more, and no link in the clone is followed."""
    top = os.open(clone, _OPEN_DIR)
    try:
        _merge_into(upper, top, at_top=True)
    finally:
        os.close(top)


def _merge_into(src: int, dst: int, *, at_top: bool) -> None:
    with os.scandir(src) as listing:
        names = [entry.name for entry in listing]
    for name in names:
        if at_top and name == ".git":
            continue  # read-only in the sandbox; never taken from the upper layer
        info = os.stat(name, dir_fd=src, follow_symlinks=False)
        mode = info.st_mode
        if stat.S_ISCHR(mode) and info.st_rdev == 0:  # a whiteout: deleted by the command
            _remove(dst, name)
        elif stat.S_ISDIR(mode):
            _merge_subdir(src, dst, name, info)
        elif stat.S_ISREG(mode):
            _place_file(src, dst, name, info)
        elif stat.S_ISLNK(mode):
            temp = _temp_name(name)
            os.symlink(os.readlink(name, dir_fd=src), temp, dir_fd=dst)
            os.chown(temp, info.st_uid, info.st_gid, dir_fd=dst, follow_symlinks=False)
            _replace(dst, temp, name)
        # FIFOs and sockets the command left behind are not kept.


def _merge_subdir(src: int, dst: int, name: str, info: os.stat_result) -> None:
    child_src = os.open(name, _OPEN_DIR, dir_fd=src)
    try:
        for attribute in _UNSUPPORTED_XATTRS:
            if _xattr(child_src, attribute) is not None:
                raise OSError(errno.ENOTSUP, f"overlay attribute {attribute} is not supported")
        existing = _lstat_at(dst, name)
        if existing is not None and (
            _xattr(child_src, _OPAQUE) == b"y" or not stat.S_ISDIR(existing.st_mode)
        ):
            _remove(dst, name)  # replaced wholesale (it was deleted and made again, or was not a directory)
            existing = None
        if existing is None:
            os.mkdir(name, 0o700, dir_fd=dst)
        child_dst = os.open(name, _OPEN_DIR, dir_fd=dst)
        try:
            _merge_into(child_src, child_dst, at_top=False)
            os.fchown(child_dst, info.st_uid, info.st_gid)
            os.fchmod(child_dst, stat.S_IMODE(info.st_mode) & ~_SET_ID)
        finally:
            os.close(child_dst)
    finally:
        os.close(child_src)


def _place_file(src: int, dst: int, name: str, info: os.stat_result) -> None:
    temp = _temp_name(name)
    source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
    try:
        for attribute in _UNSUPPORTED_XATTRS:
            if _xattr(source, attribute) is not None:
                raise OSError(errno.ENOTSUP, f"overlay attribute {attribute} is not supported")
        target = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst
        )
        try:
            _copy_data(source, target, info.st_size)
            os.fchown(target, info.st_uid, info.st_gid)
            os.fchmod(target, stat.S_IMODE(info.st_mode) & ~_SET_ID)
            os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dst)
        raise
    finally:
        os.close(source)
    _replace(dst, temp, name)


def _copy_data(source: int, target: int, size: int) -> None:
    """Copy the data extents only: a sparse file stays sparse, so the clone's disk takes what
    the tmpfs held, never a file's apparent size."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(source, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            raise
        end = os.lseek(source, start, os.SEEK_HOLE)
        os.lseek(target, start, os.SEEK_SET)
        while start < end:
            sent = os.sendfile(target, source, start, min(end - start, 1 << 30))
            if sent == 0:
                break
            start += sent
        offset = end
    os.ftruncate(target, size)


def _replace(dst: int, temp: str, name: str) -> None:
    existing = _lstat_at(dst, name)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        _remove(dst, name)
    try:
        os.rename(temp, name, src_dir_fd=dst, dst_dir_fd=dst)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dst)
        raise


def _remove(dst: int, name: str) -> None:
    existing = _lstat_at(dst, name)
    if existing is None:
        return
    if stat.S_ISDIR(existing.st_mode):
        shutil.rmtree(name, dir_fd=dst)  # never follows a link
    else:
        os.unlink(name, dir_fd=dst)


def _lstat_at(dst: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dst, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _temp_name(name: str) -> str:
    return f".{name[:64]}.{secrets.token_hex(6)}.steward-merge"


def _xattr(fd: int, attribute: str) -> bytes | None:
    try:
        return os.getxattr(fd, attribute)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            return None
        raise
