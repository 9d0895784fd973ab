"""The local launcher's process handling (one process per task, the ticket only in the
environment, which holds no AWS variable and exactly the runner's settings, stop kills the
group, no zombies) and the runner's refusal to start without its variables. What a runtime
does once started is tests/integration/test_runner.py."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from steward import wiring
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.config import Settings
from steward.domain.launch import RuntimeEndpoints
from steward.domain.models import Task
from steward.local.launcher import LocalLauncher
from steward.local.moto_server import MotoServer
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.plans import spawn_item

REGION = "us-east-1"
WAIT = 60.0


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with MotoServer() as server:
        yield server.url


@pytest.fixture
def prefix() -> str:
    return f"run{uuid.uuid4().hex[:8]}-"


@pytest.fixture
def backend(moto_url: str, prefix: str) -> Services:
    endpoint: dict[str, Any] = {
        "endpoint_url": moto_url,
        "region_name": REGION,
        "aws_access_key_id": "local",
        "aws_secret_access_key": "local",
    }
    tables = Tables.connect(prefix, **endpoint)
    tables.create_all()
    settings = Settings(table_prefix=prefix)
    s3 = boto3.client("s3", **endpoint)
    s3.create_bucket(Bucket=settings.artifacts_bucket)  # publish keeps each content's document there
    return Services.build(settings, tables, ArtifactStore(settings.artifacts_bucket, client=s3))


@pytest.fixture
def endpoints() -> RuntimeEndpoints:
    return RuntimeEndpoints(api_url="http://127.0.0.1:9/api", relay_url="http://127.0.0.1:9/relay")


@pytest.fixture
def task(backend: Services) -> Task:
    backend.plans.publish("alice", "demo", document(*numbered(2)))
    plan = backend.plans.confirm("alice", "demo")
    spawned, _ = spawn_item(backend, plan, 1)
    return spawned


def events_of(backend: Services, task: Task) -> list[dict[str, object]]:
    return backend.tasks.events.list(task.id, after=0, limit=100)


def watermark(backend: Services, user: str) -> int:
    return backend.users.loop_state(user).watermark


def is_zombie_or_gone(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return "zombie" if stat.rsplit(")", 1)[1].split()[0] == "Z" else "alive"


def live_members(pgid: int) -> list[int]:
    """Processes of group `pgid` that still run (zombies do not: an orphan's zombie waits for
    whatever init this machine has)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_the_runtime_gets_the_ticket_only_through_its_environment_and_no_aws_variable(
    endpoints: RuntimeEndpoints, task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever this process holds (the local stack sets all of these) stays out.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    bounds = {"STEWARD_RUNNER_HEARTBEAT_SECONDS": "1", "STEWARD_CHECK_WALL_SECONDS": "60"}
    with LocalLauncher(endpoints, extra_env=bounds, command=sleeper) as launcher:
        ticket = "tk-" + uuid.uuid4().hex
        pid = int(launcher.launch(task, ticket).removeprefix("local:"))
        # Until the child has exec'd, /proc shows the parent's forked image (or nothing).
        eventually(lambda: b"time.sleep(60)" in Path(f"/proc/{pid}/cmdline").read_bytes())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert ticket.encode() not in cmdline
        entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        env = dict(e.decode().split("=", 1) for e in entries if e)
    copied = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    assert env == copied | bounds | {
        "STEWARD_TASK_ID": task.id,
        "STEWARD_TICKET": ticket,
        "STEWARD_API_URL": endpoints.api_url,
        "STEWARD_RELAY_URL": endpoints.relay_url,
    }
    assert [k for k in env if k.startswith("AWS_")] == []


def test_the_stacks_launcher_passes_exactly_the_runner_settings(
    task: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `steward local up` builds it (`steward.wiring.launcher`), from the environment the
    stack's handlers run with: the runner bounds pass, nothing else of it does."""
    runner = {
        "STEWARD_WORK_DIR": str(tmp_path / "work"),
        "STEWARD_KEEP_WORK": "1",
        "STEWARD_SANDBOX_UID": "123456",
        "STEWARD_STREAM_URL": "http://127.0.0.1:9/v1/runtime/stream",
        "STEWARD_RUNNER_HEARTBEAT_SECONDS": "1",
        "STEWARD_RUNNER_MAX_TURNS": "12",
        "STEWARD_CHECK_WALL_SECONDS": "60",
    }
    control_plane = {
        "STEWARD_LAUNCHER": "local",
        "STEWARD_API_URL": "http://127.0.0.1:9/api",
        "STEWARD_RELAY_URL": "http://127.0.0.1:9/relay",
        "STEWARD_TABLE_PREFIX": "local-",
        "STEWARD_ARTIFACTS_BUCKET": "local-artifacts",
        "STEWARD_RUNNER_SUBNETS": "subnet-1",
        "STEWARD_RUNNER_TASK_DEFINITION": "steward-runner:1",
        "STEWARD_CAPABILITY_KEY_ID": "key",
        "STEWARD_GITHUB_PRIVATE_KEY": "PEM",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_REGION": "us-east-1",
    }
    for name, value in (runner | control_plane).items():
        monkeypatch.setenv(name, value)
    wiring.reset()
    try:
        launcher = wiring.launcher()
        assert isinstance(launcher, LocalLauncher)
        env = launcher.environment(task, "ticket-value")
    finally:
        wiring.reset()
    copied = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    assert env == copied | runner | {
        "STEWARD_TASK_ID": task.id,
        "STEWARD_TICKET": "ticket-value",
        "STEWARD_API_URL": "http://127.0.0.1:9/api",
        "STEWARD_RELAY_URL": "http://127.0.0.1:9/relay",
    }
    assert [k for k in env if k.startswith("AWS_")] == []
    assert "STEWARD_TABLE_PREFIX" not in env


@pytest.mark.parametrize(
    "name",
    ["AWS_ENDPOINT_URL", "AWS_SECRET_ACCESS_KEY", "STEWARD_TABLE_PREFIX", "STEWARD_RUNNER_SUBNETS", "HOME"],
)
def test_a_launcher_refuses_to_pass_anything_but_runner_settings(
    endpoints: RuntimeEndpoints, name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        LocalLauncher(endpoints, extra_env={name: "x"})


def test_launching_twice_while_the_first_runs_starts_one_process(
    endpoints: RuntimeEndpoints, task: Task, tmp_path: Path
) -> None:
    script = "import sys, time; print('started', flush=True); time.sleep(1)"
    with LocalLauncher(endpoints, command=[sys.executable, "-c", script], log_dir=tmp_path) as launcher:
        first = launcher.launch(task, "ticket-1")
        second = launcher.launch(task, "ticket-2")
        assert first == second
        assert launcher.wait(task.id, WAIT) == 0
        assert (tmp_path / f"{task.id}.log").read_text().count("started") == 1
        third = launcher.launch(task, "ticket-3")  # the first exited: a new process
        assert third != first
        assert launcher.wait(task.id, WAIT) == 0
        assert (tmp_path / f"{task.id}.log").read_text().count("started") == 2


@pytest.mark.parametrize(
    "missing", ["STEWARD_TASK_ID", "STEWARD_TICKET", "STEWARD_API_URL", "STEWARD_RELAY_URL"]
)
def test_a_missing_variable_exits_2_naming_it(missing: str) -> None:
    values = {
        "STEWARD_TASK_ID": "t-value-1",
        "STEWARD_TICKET": "ticket-value-2",
        "STEWARD_API_URL": "http://api-value-3",
        "STEWARD_RELAY_URL": "http://relay-value-4",
    }
    env = {"PATH": os.environ.get("PATH", "")}
    env |= {k: v for k, v in values.items() if k != missing}
    done = subprocess.run(
        [sys.executable, "-m", "steward.runner"],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 2
    assert missing in done.stderr
    assert done.stdout == ""
    for value in values.values():
        assert value not in done.stderr


def test_stop_kills_the_whole_process_group(endpoints: RuntimeEndpoints, task: Task, tmp_path: Path) -> None:
    # A runtime that ignores SIGTERM and has a child of its own, also ignoring SIGTERM.
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    launcher = LocalLauncher(
        endpoints, command=[sys.executable, "-c", script], log_dir=tmp_path, stop_grace=2.0
    )
    ref = launcher.launch(task, "ticket-1")
    pid = int(ref.removeprefix("local:"))
    log = tmp_path / f"{task.id}.log"
    eventually(lambda: log.exists() and log.read_text().strip() != "")
    child = int(log.read_text().split()[0])
    assert os.getpgid(child) == pid
    assert launcher.launch(task, "ticket-2") == ref  # still running: same runtime

    launcher.stop(task, ref)  # asks and returns, as ECS's StopTask does
    assert live_members(pid) != []  # SIGTERM ignored: the grace is still running
    # A stop asked for is final: a launch now (a retry) starts a new runtime, not this one.
    again = launcher.launch(task, "ticket-3")
    assert again != ref
    eventually(lambda: live_members(pid) == [])
    eventually(lambda: is_zombie_or_gone(pid) == "gone")
    eventually(lambda: is_zombie_or_gone(child) != "alive")
    launcher.stop(task, ref)  # the new one's stop, then again: nothing left, still fine
    launcher.stop(task, None)
    launcher.close()
    assert live_members(int(again.removeprefix("local:"))) == []


def test_a_stop_returns_while_the_runtime_unwinds_through_what_its_caller_holds(
    endpoints: RuntimeEndpoints, task: Task, tmp_path: Path
) -> None:
    """A heartbeat or a cancel stops a runtime from inside an invocation of the local stack,
    and a runtime that unwinds calls the stack's API, which waits for that invocation: a
    stop that waited for the runtime would hold the invocation until the grace ran out and
    then kill a runtime that was ending cleanly. Here the invocation is a file lock."""
    held = tmp_path / "invocation.lock"
    script = (
        "import fcntl, signal, sys, time\n"
        "def unwind(*_):\n"
        f"    with open({str(held)!r}, 'w') as f:\n"
        "        fcntl.flock(f, fcntl.LOCK_EX)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, unwind)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    launcher = LocalLauncher(
        endpoints, command=[sys.executable, "-c", script], log_dir=tmp_path, stop_grace=WAIT
    )
    launcher.launch(task, "ticket")
    log = tmp_path / f"{task.id}.log"
    eventually(lambda: log.exists() and "ready" in log.read_text())
    with held.open("w") as invocation:
        fcntl.flock(invocation, fcntl.LOCK_EX)
        launcher.stop(task, None)  # returns with the lock still held
    assert launcher.wait(task.id, WAIT) == 0  # it unwound once the invocation ended: not killed
    launcher.close()


def test_close_stops_every_runtime(endpoints: RuntimeEndpoints, backend: Services, task: Task) -> None:
    other, _ = spawn_item(backend, backend.plans.get("alice", "demo"), 2)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    launcher = LocalLauncher(endpoints, command=sleeper)
    refs = [launcher.launch(t, "ticket") for t in (task, other)]
    launcher.close()
    for ref in refs:
        assert live_members(int(ref.removeprefix("local:"))) == []
    assert launcher.wait(task.id, 1) == -15
    assert launcher.wait(other.id, 1) == -15
