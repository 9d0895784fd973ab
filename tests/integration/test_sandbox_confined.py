"""Hostile checks in both strong sandbox modes (docs/concepts/runner.md): BWRAP, and CONFINED (where
bubblewrap cannot run: a seccomp filter and Landlock, forced here on a machine where bwrap
works). What each test observes is what the runner sees of a check: its exit code and output,
and the host around it (a listening socket that is never reached, a file that never appears).
The hostile inputs are data (`UNREACHABLE`, `NO_SOCKET`, `NO_ESCAPE`, `WRITE_TARGETS`); the
ordinary work that must still succeed is too (`ORDINARY`). Then the runner's side: a weak mode
is refused with `sandbox_too_weak`, and bootstrap.json records what the kernel offers."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from steward.domain.failures import TABLE, FailureCode
from steward.domain.models import Task, TaskStatus
from steward.domain.redaction import Redactor
from steward.runner.config import ConfigError, RunnerConfig
from steward.runner.run import Run
from steward.runner.sandbox import Sandbox, SandboxLimits, SandboxMode, kernel_confinement, probe_mode
from steward.wiring import Services

from tests.integration.test_failure_codes import _issued, _local_clone
from tests.integration.test_runner_endings import Control, control, make_run, running  # noqa: F401

# This module's own uid: the sandbox kills every process of its uid after each run, so two
# test modules sharing one (test_sandbox.py has nobody) would kill each other's checks.
NOBODY = 64999
# The system's interpreter and tools: the runner's own interpreter lives under /root (0700) here,
# which the uid cannot reach outside bwrap (in the runner's image it is where the uid can).
PATH_DIRS = ("/usr/bin", "/bin")
STRONG = [SandboxMode.BWRAP, SandboxMode.CONFINED]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("bwrap") is None or not os.path.exists("/usr/bin/python3"),
        reason="needs root, bubblewrap and /usr/bin/python3",
    ),
]


def py(code: str) -> str:
    return f'python3 -c "{code}"'


# Connections to a listener the test holds ({port}; {udp} for UDP, {port6} on ::1) or outside.
# A TCP check prints REACHED only if it connected; a datagram is sent blind (into bwrap's own
# empty loopback it "succeeds"), so for UDP the proof is the listener that receives nothing.
UNREACHABLE = {
    "tcp to loopback": py(
        "import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('REACHED')"
    ),
    "udp to loopback": py(
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        "s.sendto(b'x', ('127.0.0.1', {udp})); print('SENT')"
    ),
    "tcp to ::1": py(
        "import socket; socket.create_connection(('::1', {port6}), timeout=2); print('REACHED')"
    ),
    "tcp outside": py(
        "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2); print('REACHED')"
    ),
}
# CONFINED refuses the socket itself, whatever it would be used for (bwrap's empty network
# namespace lets most of these be made, with nothing to reach).
NO_SOCKET = {
    "AF_INET stream": "socket.AF_INET, socket.SOCK_STREAM",
    "AF_INET dgram": "socket.AF_INET, socket.SOCK_DGRAM",
    "AF_INET6": "socket.AF_INET6, socket.SOCK_STREAM",
    "AF_PACKET": "socket.AF_PACKET, socket.SOCK_RAW",
    "AF_NETLINK": "socket.AF_NETLINK, socket.SOCK_RAW, 0",
    "AF_VSOCK": "socket.AF_VSOCK, socket.SOCK_STREAM",
    "socketpair AF_INET": None,  # socketpair of a network family
}
# Ways out of the confinement itself (CONFINED has no namespace of its own to stay in).
NO_ESCAPE = {
    "a new user namespace": "unshare -U true",
    "a new network namespace": "unshare -n true",
    "a mount": "unshare -m true",
}
# Outside the clone and the command's own TMPDIR, each writable by the uid were it not confined
# (world-writable), so that only the sandbox can be what stops the write.
WRITE_TARGETS = ("sibling", "host-tmp", "dev-shm", "runner-home")
# Ordinary work that must still pass: (check, what its output must hold).
ORDINARY = [
    (py("import socket; a, b = socket.socketpair(); a.send(b'pong'); print(b.recv(4).decode())"), "pong"),
    (
        py(
            "import os, socket; p = os.environ['TMPDIR'] + '/s'; srv = socket.socket(socket.AF_UNIX); "
            "srv.bind(p); srv.listen(); c = socket.socket(socket.AF_UNIX); c.connect(p); "
            "c.send(b'unix'); print(srv.accept()[0].recv(4).decode())"
        ),
        "unix",
    ),
    ("sh -c 'echo built > out.txt && mkdir -p build && mv out.txt build/ && cat build/out.txt'", "built"),
    ("sh -c 'echo scratch > $TMPDIR/t && cat $TMPDIR/t >/dev/null && cat $TMPDIR/t'", "scratch"),
    (
        "sh -c 'git init -q sub && cd sub && echo a > a && git add a && "
        "git -c user.name=c -c user.email=c@c commit -qm m && git log --oneline | wc -l'",
        "1",
    ),
    (
        py("import subprocess, threading; t = threading.Thread(target=print, args=('thread',)); t.start()"),
        "thread",
    ),
]


@pytest.fixture
def root() -> Iterator[Path]:
    """A directory whose ancestors the uid can traverse (CONFINED sees the host's file system):
    the clone in it, and a world-writable sibling directory beside the clone."""
    top = Path(tempfile.mkdtemp(prefix="steward-confined-test-", dir="/tmp"))
    top.chmod(0o755)
    try:
        clone = top / "clone"
        subprocess.run(["git", "init", "-q", str(clone)], check=True)
        (top / "sibling").mkdir(mode=0o777)
        (top / "sibling").chmod(0o777)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def box(root: Path, mode: SandboxMode, *checks: str, network: bool = False) -> Sandbox:
    limits = SandboxLimits(wall_seconds=15.0, max_output_bytes=64 * 1024, kill_grace_seconds=0.5)
    return Sandbox(
        root / "clone", checks, mode=mode, uid=NOBODY, limits=limits, path_dirs=PATH_DIRS, network=network
    )


@pytest.mark.parametrize("mode", STRONG)
def test_no_connection_to_loopback_or_outside(root: Path, mode: SandboxMode) -> None:
    with (
        socket.create_server(("127.0.0.1", 0)) as tcp,
        socket.create_server(("::1", 0), family=socket.AF_INET6) as tcp6,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        udp.bind(("127.0.0.1", 0))
        ports = {"port": tcp.getsockname()[1], "port6": tcp6.getsockname()[1], "udp": udp.getsockname()[1]}
        checks = {name: check.format(**ports) for name, check in UNREACHABLE.items()}
        sandbox = box(root, mode, *checks.values())
        results = {name: sandbox.run(check) for name, check in checks.items()}
        for server in (tcp, tcp6, udp):
            server.setblocking(False)
        with pytest.raises(BlockingIOError):
            tcp.accept()
        with pytest.raises(BlockingIOError):
            tcp6.accept()
        with pytest.raises(BlockingIOError):
            udp.recv(16)
    for name, result in results.items():
        assert "REACHED" not in result.output, name
        if name.startswith("tcp"):
            assert result.exit_code not in (0, None), (name, result.output)
        if mode is SandboxMode.CONFINED:  # refused at the socket itself: nothing was even sent
            assert result.exit_code == 1, (name, result.output)
            assert "PermissionError" in result.output, (name, result.output)
            assert "SENT" not in result.output, name


def test_confined_refuses_every_socket_family_but_unix(root: Path) -> None:
    checks = {
        name: py(f"import socket; socket.socket({spec}); print('MADE')")
        if spec
        else py("import socket; socket.socketpair(socket.AF_INET); print('MADE')")
        for name, spec in NO_SOCKET.items()
    }
    sandbox = box(root, SandboxMode.CONFINED, *checks.values())
    for name, check in checks.items():
        result = sandbox.run(check)
        assert result.exit_code == 1, (name, result.output)
        assert "PermissionError: [Errno 1] Operation not permitted" in result.output, (name, result.output)
        assert "MADE" not in result.output, name


def test_confined_makes_no_namespace_and_no_mount(root: Path) -> None:
    # CONFINED only: under bwrap a check is already in namespaces of its own, and a nested one
    # (which bwrap allows) reaches nothing new.
    sandbox = box(root, SandboxMode.CONFINED, *NO_ESCAPE.values())
    for name, check in NO_ESCAPE.items():
        result = sandbox.run(check)
        assert result.exit_code not in (0, None), (name, result.output)
        assert "Operation not permitted" in result.output, (name, result.output)


@pytest.mark.parametrize("mode", STRONG)
def test_no_write_outside_the_clone_and_its_tmp(root: Path, mode: SandboxMode, tmp_path: Path) -> None:
    name = "steward-escape-" + os.urandom(4).hex()
    home = tmp_path / "home"  # stands in for the runner's HOME, made world-writable
    home.mkdir()
    home.chmod(0o777)
    targets = {
        "sibling": root / "sibling" / name,
        "host-tmp": Path("/tmp") / name,
        "dev-shm": Path("/dev/shm") / name,
        "runner-home": Path(os.environ.get("HOME", "/root")) / name,
    }
    assert set(targets) == set(WRITE_TARGETS)
    checks = [f"touch {path}" for path in targets.values()]
    checks += [
        f"mkdir {root / 'sibling' / (name + '-dir')}",
        f"ln -s /etc/passwd {root / 'sibling' / name}-ln",
    ]
    sandbox = box(root, mode, *checks)
    try:
        for check in checks:
            result = sandbox.run(check)
            if mode is SandboxMode.CONFINED:  # bwrap may let it write its own private copy instead
                assert result.exit_code not in (0, None), (check, result.output)
                assert "Permission denied" in result.output, (check, result.output)
        assert list(root.joinpath("sibling").iterdir()) == []
        for path in targets.values():
            assert not path.exists(), path
    finally:
        for path in targets.values():
            path.unlink(missing_ok=True)


@pytest.mark.parametrize("mode", STRONG)
def test_ordinary_work_still_passes(root: Path, mode: SandboxMode) -> None:
    sandbox = box(root, mode, *(check for check, _ in ORDINARY))
    for check, expected in ORDINARY:
        result = sandbox.run(check)
        assert result.passed, (check, result.output)
        assert expected in result.output.split(), (check, result.output)
    assert (root / "clone" / "build" / "out.txt").read_text() == "built\n"
    assert (root / "clone" / "sub" / ".git").is_dir()


def test_confined_setup_commands_may_have_the_network(root: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        check = UNREACHABLE["tcp to loopback"].format(port=server.getsockname()[1])
        result = box(root, SandboxMode.CONFINED, check, network=True).run(check)
        server.settimeout(5)
        connection, _ = server.accept()
        connection.close()
    assert result.passed, result.output
    assert "REACHED" in result.output


# -- the runner's side -----------------------------------------------------------------------------


def test_the_probe_prefers_bwrap_and_reports_confined_when_forced(root: Path) -> None:
    assert probe_mode(uid=NOBODY)[0] is SandboxMode.BWRAP
    mode, reason = probe_mode(uid=NOBODY, forced=SandboxMode.CONFINED, within=root)
    assert mode is SandboxMode.CONFINED
    assert "seccomp" in reason
    kernel = kernel_confinement()
    assert kernel["seccomp"] is True
    assert kernel["landlock"] == ("present" if kernel["landlock_abi"] else "absent")
    with pytest.raises(ValueError, match="root never runs a check as itself"):
        probe_mode(uid=NOBODY, forced=SandboxMode.SAME_USER)


BASE_ENV = {"STEWARD_TASK_ID": "t1", "STEWARD_TICKET": "x", "STEWARD_API_URL": "u", "STEWARD_RELAY_URL": "r"}


@pytest.mark.parametrize(
    ("env", "mode", "allowed"),
    [
        ({}, None, False),
        ({"STEWARD_RUNNER_SANDBOX_MODE": "confined"}, SandboxMode.CONFINED, False),
        ({"STEWARD_RUNNER_SANDBOX_MODE": "auto", "STEWARD_RUNNER_ALLOW_WEAK_SANDBOX": "1"}, None, True),
    ],
)
def test_the_sandbox_settings_come_from_the_environment(
    env: dict[str, str], mode: SandboxMode | None, allowed: bool
) -> None:
    config = RunnerConfig.from_env(BASE_ENV | env)
    assert (config.sandbox_mode, config.allow_weak_sandbox) == (mode, allowed)


@pytest.mark.parametrize(
    "env", [{"STEWARD_RUNNER_SANDBOX_MODE": "chroot"}, {"STEWARD_RUNNER_ALLOW_WEAK_SANDBOX": "yes"}]
)
def test_a_malformed_sandbox_setting_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        RunnerConfig.from_env(BASE_ENV | env)


# A check that fails on the base, so the run ends at its baseline, before any model call, with
# what the check saw in bootstrap.json: proof of the mode it ran in.
REPORTER = py(
    "import os, socket; print('uid', os.getuid()); "
    "print('connect', socket.socket().connect_ex(('127.0.0.1', {port}))); raise SystemExit(5)"
)


@pytest.mark.parametrize(
    ("forced", "allow_weak", "code", "mode"),
    [
        (SandboxMode.UNPRIVILEGED_USER, False, FailureCode.SANDBOX_TOO_WEAK, "unprivileged-user"),
        (SandboxMode.UNPRIVILEGED_USER, True, FailureCode.CHECKS_FAIL_ON_BASE, "unprivileged-user"),
        (SandboxMode.CONFINED, False, FailureCode.CHECKS_FAIL_ON_BASE, "confined"),
    ],
)
def test_the_runner_refuses_a_weak_sandbox_unless_allowed_and_records_the_mode(
    *,
    services: Services,
    control: Control,  # noqa: F811
    running: Task,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    forced: SandboxMode,
    allow_weak: bool,
    code: FailureCode,
    mode: str,
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        check = REPORTER.format(port=server.getsockname()[1])
        run = make_run(services, control, running, Redactor())
        run.config = dataclasses.replace(
            run.config, work_dir=root, sandbox_mode=forced, allow_weak_sandbox=allow_weak, sandbox_uid=NOBODY
        )
        run.task = run.task.model_copy(update={"checks": (check,)})
        monkeypatch.setattr(Run, "_token", lambda self: _issued("local"))
        monkeypatch.setattr(Run, "_clone", _local_clone({"a.txt": "a\n"}))
        monkeypatch.setattr(run.api, "converse", lambda *a, **k: pytest.fail("no model call"))
        assert run.execute() == "failed"
        server.setblocking(False)
        if mode == "unprivileged-user" and allow_weak:
            # What the weak mode means: the check reached the host's loopback.
            server.accept()[0].close()
        else:
            with pytest.raises(BlockingIOError):
                server.accept()
    task = services.tasks.tasks.require(running.id)
    assert (task.status, task.classification, task.failure_code) == (TaskStatus.FAILED, "final", code.value)
    failure = task.to_api()["failure"]
    assert failure["remedy"] == TABLE[code].remedy
    bootstrap = json.loads(services.tasks.artifacts.read_text(task.id, "bootstrap.json") or "{}")
    sandbox = bootstrap["sandbox"]
    assert (sandbox["mode"], sandbox["forced"], sandbox["weak_allowed"]) == (mode, forced.value, allow_weak)
    assert set(sandbox) >= {"uid", "reason", "seccomp", "landlock", "landlock_abi"}
    if code is FailureCode.SANDBOX_TOO_WEAK:
        assert failure["who"] == "the operator"
        assert "STEWARD_RUNNER_ALLOW_WEAK_SANDBOX" in (task.reason or "")
        assert "baseline" not in bootstrap  # no check ran
        return
    (base,) = bootstrap["baseline"]
    assert base["passed"] is False
    if mode == "confined":  # refused at the socket itself
        assert "PermissionError" in base["output_tail"], base
    else:
        assert (base["exit_code"], f"uid {NOBODY}\nconnect 0") == (5, base["output_tail"].strip())


def _as_nobody(root: Path, port: int) -> dict[str, object]:
    """In a child process that became uid nobody (a runner not started as root: a developer's
    machine), what the probe picks and what two hostile checks achieve under it. Forked, not
    exec'd: the interpreter and this package stay the ones loaded here."""
    own = root / "runner"  # where the probe, run as nobody, makes its scratch clone
    own.mkdir()
    os.chown(own, NOBODY, NOBODY)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        outcome: dict[str, object] = {}
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            tempfile.tempdir = str(own)  # the test run's TMPDIR is root's
            mode, reason = probe_mode(uid=NOBODY, within=own)
            outcome = {"mode": mode.value, "reason": reason}
            connect = py(
                f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('REACHED')"
            )
            write = "touch ../sibling/escaped"
            sandbox = box(root, mode, connect, write)
            for name, check in (("connect", connect), ("write", write)):
                result = sandbox.run(check)
                outcome[name] = {"exit": result.exit_code, "output": result.output}
        except BaseException:  # reported to the parent, which fails the test with it
            outcome["error"] = traceback.format_exc()
        finally:
            os.write(writer, json.dumps(outcome).encode())
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    return dict(json.loads(answer or b"{}"))


def test_a_runner_that_is_not_root_confines_its_checks_as_itself(root: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        outcome = _as_nobody(root, listener.getsockname()[1])
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected
    assert "error" not in outcome, outcome
    assert outcome["mode"] == SandboxMode.CONFINED.value, outcome
    assert "this user (not root" in str(outcome["reason"])
    connect, write = outcome["connect"], outcome["write"]
    assert isinstance(connect, dict)
    assert isinstance(write, dict)
    assert (connect["exit"], "PermissionError" in connect["output"]) == (1, True), connect
    assert "REACHED" not in connect["output"]
    assert write["exit"] != 0, write
    assert not (
        root / "sibling" / "escaped"
    ).exists()  # a directory nobody may write to, but Landlock refuses
