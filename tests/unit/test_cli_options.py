"""The CLI's option parsing and the local stack's lock, in process (the e2e tests run the
same through the `steward` entry point against a running stack)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from steward.cli import build_parser, main
from steward.local.stack import StackAlreadyRunning, StackLock

TASK = "t" + "0" * 24  # a task id of the shape the API gives


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["plan", "show", "demo", "--json"], (True, None, None)),
        (["--json", "plan", "show", "demo"], (True, None, None)),
        (["plan", "--json", "show", "demo"], (True, None, None)),
        (["tasks", "--user", "bob"], (False, "bob", None)),
        (["--user", "bob", "plan", "show", "x"], (False, "bob", None)),
        (["--user", "bob", "plan", "show", "x", "--user", "carol"], (False, "carol", None)),
        (["local", "up", "--state-file", "x/s.json"], (False, None, Path("x/s.json"))),
        (["--state-file", "y.json", "local", "up"], (False, None, Path("y.json"))),
        (["plan", "list"], (False, None, None)),
    ],
)
def test_global_options_are_read_anywhere_and_a_later_position_never_resets_an_earlier_one(
    argv: list[str], expected: tuple[bool, str | None, Path | None]
) -> None:
    args = build_parser().parse_args(argv)
    assert (args.json, args.user, args.state_file) == expected


def test_renamed_owner_flags() -> None:
    parser = build_parser()
    capability = parser.parse_args(["local", "capability", "--owner", "bob", "--budget-usd", "1"])
    assert (capability.owner, capability.user) == ("bob", None)
    link = parser.parse_args(["admin", "link-installation", "3", "--owner", "sub-1", "--force"])
    assert (link.installation_id, link.owner, link.force) == (3, "sub-1", True)
    old = parser.parse_args(["admin", "link-installation", "3", "--user", "bob"])
    assert (old.owner, old.user) == (None, "bob")  # the global --user: refused by the command


def test_link_installation_never_takes_the_global_user_for_its_owner(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["admin", "link-installation", "3", "--user", "bob"]) == 2
    assert "say --owner bob" in capsys.readouterr().err
    assert main(["--json", "admin", "link-installation", "3"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "usage"


def test_usage_errors_are_json_under_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "show", "--json"]) == 2
    out = capsys.readouterr()
    assert json.loads(out.out) == {
        "error": {"code": "usage", "message": "the following arguments are required: slug"}
    }
    assert out.err == ""
    assert main(["plan", "show"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert "usage: steward plan show" in out.err
    assert "error: the following arguments are required: slug" in out.err


def test_local_commands_without_a_stack_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "local.json")
    assert main(["local", "github", "withhold", "on", "--state-file", missing]) == 1
    assert capsys.readouterr().err.strip() == f"error: {missing} not found: start `steward local up` first"
    assert main(["local", "capability", "--budget-usd", "1", "--state-file", missing, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "no_stack"


def test_the_stack_lock_refuses_a_second_holder_and_names_the_first(tmp_path: Path) -> None:
    first, second = StackLock(tmp_path), StackLock(tmp_path)
    first.acquire()
    assert (tmp_path / "stack.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(
        StackAlreadyRunning, match=rf"a stack is already running \(pid {os.getpid()}\)"
    ) as exc:
        second.acquire()
    assert exc.value.pid == os.getpid()
    first.release()
    assert (tmp_path / "stack.lock").read_text() == ""
    second.acquire()
    second.release()


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"{os.getpid()}\\n".encode())
print("locked", flush=True)
time.sleep(60)
"""


def test_a_lock_left_by_a_killed_stack_blocks_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state" / "stack.lock"
    path.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StackAlreadyRunning) as exc:
            StackLock(path.parent).acquire()
        assert exc.value.pid == holder.pid
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert path.read_text().strip() == str(holder.pid)  # the dead stack's pid is still there
    lock = StackLock(path.parent)
    lock.acquire()
    assert path.read_text() == f"{os.getpid()}\n"
    lock.release()


class FakeApi:
    """The two answers `task retry` reads: the retry's and the loop settings."""

    def __init__(self, loop: dict[str, object]) -> None:
        self.loop = loop
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, path: str, body: object = None) -> dict[str, object]:
        self.calls.append((method, path))
        if path == "/v1/loop":
            return self.loop
        task = {"id": TASK, "plan_slug": "demo", "ordinal": 2, "attempt": 3}
        return {"task": task, "retry": "requested"}


@pytest.mark.parametrize(
    ("loop", "when"),
    [
        (
            {"enabled": True, "paused": False, "interval_seconds": 30},
            "the loop starts it at its next tick, at once",
        ),
        ({"enabled": True, "paused": True, "interval_seconds": 30}, "the loop is paused"),
        ({"enabled": False, "paused": False, "interval_seconds": 30}, "the loop is disabled"),
    ],
)
def test_task_retry_names_the_queued_attempt_and_when_the_loop_takes_it(
    loop: dict[str, object], when: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeApi(loop)
    monkeypatch.setattr("steward.cli._client", lambda _args: api)
    assert main(["task", "retry", TASK]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"retry requested for item #2 of plan demo: attempt 4 is queued (after {TASK}, attempt 3); "
    )
    assert when in out
    assert api.calls == [("POST", f"/v1/tasks/{TASK}/retry"), ("GET", "/v1/loop")]
    assert main(["task", "retry", TASK, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["queued_attempt"] == 4


# A brake's reason is stored on the controls item and shown to operators: one bounded line.
HOSTILE_REASONS = ["", "   ", "x" * 501, "two\nlines", "carriage\rreturn", "nul\x00byte"]


@pytest.mark.parametrize("reason", HOSTILE_REASONS)
def test_a_brake_reason_that_is_not_one_bounded_line_is_a_usage_error(
    reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--json", "admin", "brake", "on", "--reason", reason]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert "one non-empty line of at most 500 characters" in error["message"]


def test_a_brake_reason_of_one_line_is_taken() -> None:
    args = build_parser().parse_args(["admin", "brake", "on", "--reason", "incident 42: runaway spend"])
    assert args.reason == "incident 42: runaway spend"
