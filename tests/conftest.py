"""Shared fixtures.

Unit speed: moto in-process (`mock_aws`). Tables come from `steward.tables`, the same specs
the local stack and the CDK app use. moto's DynamoDB is serialized with one lock
(`install_dynamodb_lock`, docs/testing.md) so that races exercise Steward's conditions,
not moto's lack of linearizability. Three short cuts through moto
(`steward.local.moto_speed`) change what it answers in nothing but time.

`make test` runs the modules in parallel worker processes (pytest-xdist, `--dist loadfile`):
each module's tests in one process, every process with its own temporary directory (so its
stacks' state directories, moto servers' files and sandboxes' scratch never meet another's),
the slowest modules handed out first, and the infra modules together (they share one synth).
"""

from __future__ import annotations

import faulthandler
import os
import sys
import tempfile
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import settings as hypothesis_settings
from moto import mock_aws
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.config import Settings
from steward.local.moto_serial import install_dynamodb_lock, install_number_arithmetic, install_s3_lock
from steward.local.moto_speed import install_moto_shortcuts
from steward.wiring import Services
from xdist.scheduler import LoadFileScheduling

REGION = "us-east-1"

# Every moto in this process, whoever starts it: the same answers, a third less time each.
install_moto_shortcuts()
install_number_arithmetic()

# No per-example time limit: a wall-clock limit fails a correct example whenever the
# machine is busy (as it is with parallel workers), and tests assert behaviour, not time.
hypothesis_settings.register_profile("steward", deadline=None)
hypothesis_settings.load_profile("steward")

# The modules that take longest, started first so that none of them is left running alone at
# the end (the rest keep their collection order). Only the order depends on this list.
SLOWEST_FIRST = (
    "tests/sim/test_control_plane.py",
    "tests/e2e/test_cli.py",
    "tests/integration/test_runner.py",
    "tests/integration/test_webhooks.py",
    "tests/integration/test_publication.py",
    "tests/infra/",
    "tests/e2e/test_console.py",
    "tests/integration/test_capability.py",
    "tests/integration/test_runtime_routes.py",
)
# Modules under one of these folders run in one worker: they share a session fixture too
# costly to build once per worker (the CDK synth), and its caches in build/.
ONE_WORKER = ("tests/infra/",)
# Modules whose tests are spread over the workers one by one: the simulation's CI shards, each
# a process of its own for a minute or more and no module-scoped fixture between them.
SPREAD = ("tests/sim/test_control_plane.py",)


def _rank(nodeid: str) -> int:
    return next((n for n, start in enumerate(SLOWEST_FIRST) if nodeid.startswith(start)), len(SLOWEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Stable: each module's tests stay together and in their order.
    items.sort(key=lambda item: _rank(item.nodeid))


class ModuleScheduling(LoadFileScheduling):
    """xdist's `loadfile` (a module's tests in one worker, for its module-scoped stacks), with
    the folders of ONE_WORKER as one unit each and each test of SPREAD a unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(SPREAD):
            return nodeid
        return next(
            (folder for folder in ONE_WORKER if nodeid.startswith(folder)), super()._split_scope(nodeid)
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadFileScheduling | None:
    return ModuleScheduling(config, log) if config.getoption("dist") == "loadfile" else None  # type: ignore[arg-type]


# pytest-timeout's signal fails a hung test with its traceback, but a test whose teardown then
# hangs too (a thread at a barrier, a process never reaped) would hold the whole run. A minute
# past the limit, the process writes every thread's stack to a file of its own and ends; xdist
# reports the test as crashed, goes on in a new worker, and the report carries the stacks.
GRACE_AFTER_TIMEOUT = 60
HANGS = "STEWARD_TEST_HANGS"


def pytest_configure(config: pytest.Config) -> None:
    if HANGS not in os.environ:  # the controller, or a run without xdist; workers inherit it
        os.environ[HANGS] = tempfile.mkdtemp(prefix="steward-hangs-")


def _hang_file(worker: str) -> Path:
    return Path(os.environ[HANGS]) / f"{worker}.txt"


_ARMED: dict[str, Any] = {}  # the running test's deadline and hang file, to re-arm after a cancel


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None]:
    mark = item.get_closest_marker("timeout")
    limit = float(mark.args[0] if mark else item.config.getini("timeout")) + GRACE_AFTER_TIMEOUT
    with _hang_file(os.environ.get("PYTEST_XDIST_WORKER", "main")).open("w") as dump:
        dump.write(f"{item.nodeid} was still running {limit:.0f} s after it started:\n")
        dump.flush()
        _ARMED.update(deadline=time.monotonic() + limit, dump=dump)
        faulthandler.dump_traceback_later(limit, exit=True, file=dump)
        try:
            yield
        finally:
            _ARMED.clear()
            faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(trylast=True)
def pytest_exception_interact() -> None:
    """pytest's own faulthandler plugin cancels every pending dump when a test phase fails
    (for a debugger): armed again, so a teardown that hangs after a failure still ends."""
    if _ARMED:
        left = max(1.0, _ARMED["deadline"] - time.monotonic())
        faulthandler.dump_traceback_later(left, exit=True, file=_ARMED["dump"])


# The whole run's bound, in the process that hands out the work: a run still going after it
# (a hang no test's own limit covers: a worker that never reports, a scheduler stuck after a
# crash) names the tests that started and never finished, prints every worker's hang file,
# and ends the run with a failure, well inside CI's own limit, instead of running into it.
RUN_LIMIT_SECONDS = float(os.environ.get("STEWARD_TEST_RUN_LIMIT", "2400"))
_STARTED: dict[str, float] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None and session.config.getoption("dist", "no") != "no":
        threading.Thread(target=_run_watchdog, name="run-watchdog", daemon=True).start()


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _STARTED[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _STARTED.pop(nodeid, None)


def _run_watchdog() -> None:
    time.sleep(RUN_LIMIT_SECONDS)
    now = time.monotonic()
    lines = [f"\nthe test run is still going after {RUN_LIMIT_SECONDS:.0f} s; unfinished tests:"]
    lines += [
        f"  {nodeid} (for {now - at:.0f} s)" for nodeid, at in sorted(_STARTED.items(), key=lambda i: i[1])
    ]
    for dump in sorted(Path(os.environ.get(HANGS, "/nonexistent")).glob("*.txt")):
        lines += [f"--- {dump.name}:", dump.read_text(errors="replace")[-4000:]]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr)
    os._exit(3)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: object) -> None:
    dump = _hang_file(report.node.gateway.id)  # type: ignore[attr-defined]
    if dump.is_file() and dump.read_text().startswith(crashitem):
        report.longrepr = f"{report.longrepr}\n\n{dump.read_text()}"


@pytest.fixture(scope="session", autouse=True)
def _own_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This process's temporary files, and its subprocesses' (TMPDIR), in a directory of its
    own under its pytest base directory: no other worker lists, fills or removes them."""
    own = tmp_path_factory.mktemp("tmp", numbered=False)
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = str(own)
    tempfile.tempdir = str(own)
    try:
        yield own
    finally:
        if saved[0] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[0]
        tempfile.tempdir = saved[1]


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Never reach a real account from a test, whatever the developer's shell holds.
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)


@pytest.fixture
def aws() -> Iterator[None]:
    install_dynamodb_lock()
    install_s3_lock()
    with mock_aws():
        yield


@pytest.fixture
def settings() -> Settings:
    return Settings(table_prefix="test-", artifacts_bucket="test-artifacts")


@pytest.fixture
def tables(aws: None, settings: Settings) -> Tables:
    tables = Tables.connect(settings.table_prefix, region_name=REGION)
    tables.create_all()
    return tables


@pytest.fixture
def services(tables: Tables, settings: Settings) -> Services:
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=settings.artifacts_bucket)
    return Services.build(settings, tables, ArtifactStore(settings.artifacts_bucket, client=s3))
