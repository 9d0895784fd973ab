"""How a CLI run of the local stack ends, as a person sees it: Ctrl-C on `steward local up` or
`steward demo` while runtimes work stops quietly and leaves nothing behind; a demo that fails
says which items failed, why, and when."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from steward.local.demo import DEMO_SLUG, sample_document

from tests.support.local_cli import STEWARD, clean_env

# (command, its exit status after Ctrl-C): the stack stops as asked; the demo was cut short.
INTERRUPTED = [(("local", "up"), 0), (("demo",), 130)]


def api(state: dict[str, Any], method: str, path: str, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {state['users']['alice']}"}
    response = httpx.request(method, f"{state['api_url']}{path}", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(condition: Any, what: str, seconds: float = 90) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {seconds} s")


@pytest.mark.parametrize(("command", "status"), INTERRUPTED, ids=[" ".join(c) for c, _ in INTERRUPTED])
def test_ctrl_c_while_runtimes_work_stops_quietly_and_leaves_no_temporary_directory(
    tmp_path: Path, command: tuple[str, ...], status: int
) -> None:
    state_file = tmp_path / "state" / "local.json"
    temporary = tmp_path / "tmp"  # where the stack's own temporary directories go
    work = tmp_path / "work"  # and its runtimes' (STEWARD_WORK_DIR reaches them)
    temporary.mkdir()
    work.mkdir()
    settings = {"TMPDIR": str(temporary), "STEWARD_WORK_DIR": str(work)}
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [*STEWARD, "--state-file", str(state_file), *command],
            env={**clean_env(), **settings},
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,  # a group of its own, as a terminal's foreground job
        )
    try:
        state = wait_for(
            lambda: state_file.exists() and json.loads(state_file.read_text()), "the stack's start"
        )
        if command == ("local", "up"):
            api(state, "PUT", "/v1/loop", {"interval_seconds": 1, "max_open_prs": 100})
            plan = api(state, "PUT", f"/v1/plans/{DEMO_SLUG}", {"markdown": sample_document()})
            api(state, "POST", f"/v1/plans/{DEMO_SLUG}/confirm", {"content_hash": plan["content_hash"]})

        def running() -> bool:
            tasks = api(state, "GET", f"/v1/tasks?plan={DEMO_SLUG}")["tasks"]
            return any(task["status"] == "running" for task in tasks)

        wait_for(running, "a running task")
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        assert process.wait(timeout=60) == status
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    printed = out.read_text() + err.read_text()
    assert "Traceback" not in printed, printed
    assert "ERROR" not in printed, printed
    assert not state_file.exists()
    assert sorted(temporary.iterdir()) == []
    assert sorted(work.iterdir()) == []


def test_a_failed_demo_says_which_items_failed_why_and_when(tmp_path: Path) -> None:
    # A model that knows no item of the demo: every item fails for good on its first call.
    unknown = {"match": "PLAY-no-item-of-the-demo", "summary": "-", "steps": [{"text": "-"}]}
    playbook = tmp_path / "playbook.json"
    playbook.write_text(json.dumps({"plays": [unknown]}))
    result = subprocess.run(
        [*STEWARD, "--state-file", str(tmp_path / "local.json"), "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**clean_env(), "STEWARD_SCRIPTED_PLAYBOOK": str(playbook)},
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    summary = result.stdout[result.stdout.index("demo: FAILED") :].splitlines()
    # When: the time the demo took, not the time it would have waited (it did not give up).
    assert summary[0].startswith("demo: FAILED after ")
    assert "gave up" not in summary[0]
    # The third item waits for the first two, which failed: the plan is blocked, not completed.
    assert "3 of 3 items not merged, the plan is in_progress and blocked" in summary[0]
    # What: each item, its status, its task's status and the reason.
    for ordinal, line in zip((1, 2), summary[1:3], strict=True):
        assert line.startswith(f"  #{ordinal} failed: task t"), line
        assert " failed (final): " in line, line  # and the reason after it
        assert line.split(" failed (final): ", 1)[1].strip(), line
    assert summary[3] == "  #3 pending: blocked: #1 failed, #2 failed; retry them or edit the plan"
