"""Full runner runs through the local stack: the loop launches `python -m steward.runner` as a
subprocess, which exchanges its ticket, claims its task, clones the twin's repository with a
scoped token, lets the scripted model (a playbook written here) drive the six tools, runs the
plan's check under bubblewrap and publishes through the governed publisher.

Each test publishes its own plan; the playbook picks the play from the item's text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from steward import wiring
from steward.adapters.artifact_store import ARTIFACT_NAMES, SCREEN_NAME, ArtifactStore
from steward.adapters.providers.playbook import Playbook
from steward.domain.models import Task
from steward.local.github_twin import admin
from steward.local.launcher import LocalLauncher
from steward.local.openai_server import OpenAIServer, chat_response
from steward.local.sample_repo import SAMPLE_REPO
from steward.local.stack import LocalStack

from tests.support.stack import local_stack

CHECK = "python -m pytest -q"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT = 120.0
VERIFY = {"tool": "run_verification", "input": {"command": CHECK}}
SUBTRACT = {
    "tool": "replace_in_file",
    "input": {
        "path": "calculator.py",
        "old": "    return a + b\n",
        "new": "    return a + b\n\n\ndef subtract(a: float, b: float) -> float:\n    return a - b\n",
    },
}
BROKEN_TEST = {
    "tool": "write_file",
    "input": {
        "path": "test_subtract.py",
        "content": "from calculator import subtract\n\n\ndef test_subtract() -> None:\n    assert subtract(5, 3) == 3\n",
    },
}
FIXED_TEST = {
    "tool": "replace_in_file",
    "input": {"path": "test_subtract.py", "old": "== 3", "new": "== 2"},
}
DONE = {"text": "The change is complete."}
DOCSTRING = {
    "tool": "replace_in_file",
    "input": {
        "path": "calculator.py",
        "old": "    return a - b\n",
        "new": '    """`a` minus `b`."""\n    return a - b\n',
    },
}
DIVIDE = "def divide(a: float, b: float) -> float:\n    return a / b\n"


def _divide(body: str) -> dict[str, Any]:
    return {"tool": "replace_in_file", "input": {"path": "calculator.py", "old": DIVIDE, "new": body}}


FIRST_DIVIDE = 'def divide(a: float, b: float) -> float:\n    """`a` over `b`."""\n    return a / b\n'
SECOND_DIVIDE = "def divide(a: float, b: float) -> float:\n    return float(a) / b\n"
RESOLVED_DIVIDE = (
    'def divide(a: float, b: float) -> float:\n    """`a` over `b`."""\n    return float(a) / b\n'
)
RESOLVE = {
    "tool": "write_file",
    "input": {
        "path": "calculator.py",
        "content": '"""Arithmetic helpers."""\n\n\ndef add(a: float, b: float) -> float:\n    return a + b\n\n\n'
        + RESOLVED_DIVIDE,
    },
}
ANNOTATE = {
    "tool": "replace_in_file",
    "input": {"path": "calculator.py", "old": "    return a + b\n", "new": "    return a + b  # the sum\n"},
}
# A check that fails on the sample repository's base: the file it names is not there yet.
BASE_CHECK = "python -m pytest -q test_subtract.py"
VERIFY_BASE = {"tool": "run_verification", "input": {"command": BASE_CHECK}}
PLAYS = [
    # Follow-up rounds: a round's prompt holds its item's text too, so its plays come first.
    # A conflict round's prompt says the base was merged in and conflicts (Steward's words).
    {
        "match": "it conflicts with your earlier change",
        "summary": "Keeps both.",
        "steps": [RESOLVE, DONE, VERIFY],
    },
    {"match": "ROUND-docstring", "summary": "Documents subtract.", "steps": [DOCSTRING, DONE, VERIFY]},
    {"match": "ROUND-lint", "summary": "Comments add.", "steps": [ANNOTATE, DONE, VERIFY]},
    {"match": "ROUND-breaks", "steps": [BROKEN_TEST, DONE, VERIFY, DONE], "loop_from": 2},
    {"match": "PLAY-success", "summary": "Adds subtract.", "steps": [SUBTRACT, DONE, VERIFY]},
    {"match": "PLAY-divide-documented", "steps": [_divide(FIRST_DIVIDE), DONE, VERIFY]},
    {"match": "PLAY-divide-as-float", "steps": [_divide(SECOND_DIVIDE), DONE, VERIFY]},
    {
        "match": "PLAY-repaired",
        "summary": "Adds subtract, test repaired.",
        "steps": [SUBTRACT, BROKEN_TEST, DONE, VERIFY, FIXED_TEST, DONE, VERIFY],
    },
    {"match": "PLAY-never", "steps": [SUBTRACT, BROKEN_TEST, DONE, VERIFY, DONE], "loop_from": 3},
    {
        "match": "PLAY-base-broken",
        "steps": [SUBTRACT, BROKEN_TEST, DONE, VERIFY_BASE, DONE],
        "loop_from": 3,
    },
    {
        "match": "PLAY-hallucinated-once",
        "summary": "Adds subtract despite a wrong turn.",
        "steps": [
            {"tool": "delete_repository", "input": {}},
            VERIFY,  # not offered while editing
            SUBTRACT,
            DONE,
            {"tool": "write_file", "input": {"path": "x.py", "content": ""}},  # not offered in verify
            VERIFY,
        ],
    },
    {"match": "PLAY-token-in-title", "summary": "Adds subtract.", "steps": [SUBTRACT, DONE, VERIFY]},
    {"match": "PLAY-hallucinating", "steps": [{"tool": "delete_repository", "input": {}}], "loop_from": 0},
    {
        "match": "PLAY-spender",
        "steps": [SUBTRACT, {"tool": "read_file", "input": {"path": "calculator.py"}}],
        "loop_from": 1,
    },
    {
        "match": "PLAY-slow-check",
        "steps": [
            {
                "tool": "write_file",
                "input": {
                    "path": "test_slow.py",
                    "content": "import time\n\n\ndef test_slow() -> None:\n    time.sleep(120)\n",
                },
            },
            DONE,
            VERIFY,
        ],
    },
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, openai_server: OpenAIServer) -> Iterator[LocalStack]:
    root = tmp_path_factory.mktemp("runner-stack")
    runner = {
        "STEWARD_RUNNER_MAX_REPAIR_ROUNDS": "1",
        "STEWARD_RUNNER_MAX_INVALID_CALLS": "4",
    }
    # The plays of the example of a plan of one's own too (its items match none of these),
    # and the packaged playbook's smoke test (examples/smoke-plan.md).
    example = json.loads((EXAMPLES / "own-playbook.json").read_text())["plays"]
    packaged = Playbook.load({}).plays
    example += [
        p.model_dump(mode="json", exclude_none=True) for p in packaged if p.match == "Steward smoke test"
    ]
    # A model of one's own: an OpenAI-compatible endpoint on loopback (as a local Ollama
    # would be), priced by a price table of one's own, as docs/guides/deploying.md shows.
    prices = root / "my-prices.json"
    prices.write_text(json.dumps(own_price_table(openai_server.base_url)))
    with local_stack(root, [*PLAYS, *example], runner | {"STEWARD_PRICE_TABLE": str(prices)}) as stack:
        RUNTIME_LOGS.append(stack.state_dir / "runs")
        yield stack


OWN_MODEL = "my-ollama/coder"
OWN_USAGE = {"prompt_tokens": 500, "completion_tokens": 100}  # what the endpoint reports per call


def own_price_table(base_url: str) -> dict[str, Any]:
    """The documentation's example of STEWARD_PRICE_TABLE: one OpenAI-compatible entry, its prices
    per million tokens (USD) of one's own."""
    return {
        "version": "mine-1",
        "models": {
            OWN_MODEL: {
                "provider": "openai",
                "provider_model": "coder-7b",
                "base_url": base_url,
                "api_key_env": None,
                "input_per_mtok": "3.00",
                "output_per_mtok": "15.00",
                "max_output_tokens": 4096,  # at least what the runner asks for per call
            }
        },
    }


@pytest.fixture(scope="module")
def openai_server() -> Iterator[OpenAIServer]:
    """Stands in for Ollama: a model that looks at the task and changes nothing."""
    with OpenAIServer(lambda call: chat_response(content="I would change nothing.", **OWN_USAGE)) as server:
        yield server


@pytest.fixture(autouse=True)
def _stack_env(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stack's handlers read their endpoint from the environment when they first run (a
    # cold start), which may be during any test: keep it pointing at the stack's moto server.
    monkeypatch.setenv("AWS_ENDPOINT_URL", stack.state["aws_endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


class Alice:
    def __init__(self, stack: LocalStack) -> None:
        self.http = httpx.Client(
            base_url=stack.state["api_url"],
            headers={"Authorization": f"Bearer {stack.state['users']['alice']}"},
            timeout=30,
        )

    def __call__(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body)
        assert response.status_code < 400, response.text
        return response.json()


@pytest.fixture(scope="module")
def alice(stack: LocalStack) -> Alice:
    client = Alice(stack)
    # A tick a second, as the demo does; the module starts more tasks (rounds among them) than
    # the default daily cap of 20 allows, and leaves more pull requests open than the default
    # max_open_prs of 5 (a test of that limit lowers it itself).
    client("PUT", "/v1/loop", {"interval_seconds": 1, "daily_spawn_cap": 1000, "max_open_prs": 100})
    return client


@pytest.fixture(scope="module")
def artifacts(stack: LocalStack) -> ArtifactStore:
    client = boto3.client(
        "s3", endpoint_url=stack.state["aws_endpoint_url"], region_name=stack.state["region"]
    )
    return ArtifactStore("steward-artifacts", client=client)


def plan(
    slug: str,
    *items: str,
    budget: str = "0.50",
    model: str = "scripted-coder",
    follow_ups: int = 2,
    check: str = CHECK,
    baseline: bool | None = None,
) -> str:
    boxes = "\n".join(f"- [ ] {item}" for item in items)
    said = "" if baseline is None else f"baseline: {str(baseline).lower()}\n"
    return (
        f"---\nrepo: {SAMPLE_REPO}\nbase: main\nmodel: {model}\nbudget_usd: {budget}\n"
        f"checks:\n  - {check}\nmax_attempts: 1\nfollow_ups: {follow_ups}\n{said}---\n# {slug}\n\n{boxes}\n"
    )


def start(alice: Alice, slug: str, *items: str, **kwargs: Any) -> list[str]:
    published = alice("PUT", f"/v1/plans/{slug}", {"markdown": plan(slug, *items, **kwargs)})
    alice("POST", f"/v1/plans/{slug}/confirm", {"content_hash": published["content_hash"]})
    eventually(lambda: all(i["task_id"] for i in alice("GET", f"/v1/plans/{slug}")["items"]))
    return [str(i["task_id"]) for i in alice("GET", f"/v1/plans/{slug}")["items"]]


RUNTIME_LOGS: list[Path] = []  # the stack's runtime log directory, for failure messages


def eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"condition not reached in time; runtime logs:\n{_logs()}"
        time.sleep(0.25)


def _logs() -> str:
    logs = sorted((p for d in RUNTIME_LOGS for p in d.glob("*.log")), key=lambda p: p.stat().st_mtime)
    return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in logs[-3:])


def settled(alice: Alice, task_id: str) -> dict[str, Any]:
    """The task once its runtime recorded how it ended (the pull request's webhook may move
    the task to review a moment before)."""
    eventually(lambda: "finished" in [e["type"] for e in events(alice, task_id)])
    task: dict[str, Any] = alice("GET", f"/v1/tasks/{task_id}")
    return task


def events(alice: Alice, task_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = alice("GET", f"/v1/tasks/{task_id}/events")["events"]
    return found


def harness(artifacts: ArtifactStore, task_id: str) -> list[dict[str, Any]]:
    text = artifacts.read_text(task_id, "harness.json")
    assert text is not None
    entries: list[dict[str, Any]] = json.loads(text)
    return entries


def calls(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for entry in entries if entry["kind"] == "turn" for call in entry.get("calls", [])]


CREDENTIAL = re.compile(r"gh[pousr]_[A-Za-z0-9._-]{20,}|eyJ[A-Za-z0-9_-]{8,}\.|eC1hY2Nlc3MtdG9rZW46")


def assert_no_credentials(artifacts: ArtifactStore, task_id: str) -> None:
    for name in (*ARTIFACT_NAMES, SCREEN_NAME):
        text = artifacts.read_text(task_id, name) or ""
        assert not CREDENTIAL.search(text), f"{name} holds a credential"


def test_a_run_publishes_a_pull_request_with_every_artifact(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime's environment as the stack's launcher builds it for this very launch.
    launcher = wiring.launcher()
    assert isinstance(launcher, LocalLauncher)
    launched: list[dict[str, str]] = []

    def environment(task: Task, ticket: str) -> dict[str, str]:
        env = LocalLauncher.environment(launcher, task, ticket)
        launched.append(env)
        return env

    monkeypatch.setattr(launcher, "environment", environment)
    (task_id,) = start(alice, "run-success", "PLAY-success: add subtract")
    task = settled(alice, task_id)
    assert task["status"] == "review", task["reason"]
    # It ran to review with no AWS variable at all: every write went through the runtime routes.
    (env,) = [e for e in launched if e["STEWARD_TASK_ID"] == task_id]
    assert [k for k in env if k.startswith("AWS_")] == []
    assert "STEWARD_TABLE_PREFIX" not in env
    assert "STEWARD_ARTIFACTS_BUCKET" not in env
    assert env["STEWARD_RUNNER_HEARTBEAT_SECONDS"] == "1"
    assert task["pr_url"]
    number = int(task["pr_url"].rsplit("/", 1)[1])
    pull = stack.twin.pull(SAMPLE_REPO, number)
    assert pull["head"]["ref"] == task["branch"] == "steward/" + task_id[1:]
    assert task["head_sha"] == pull["head"]["sha"]  # the head GitHub names, recorded by the server
    assert "Adds subtract." in pull["body"]
    kinds = [e["type"] for e in events(alice, task_id)]
    assert kinds[0] == "started"
    assert kinds.count("finished") == 1
    assert "check" in kinds
    phases = [e["data"]["phase"] for e in events(alice, task_id) if e["type"] == "phase"]
    assert phases[:4] == ["bootstrap", "baseline", "tool_loop", "edit"]
    assert {"verify", "summary", "checks", "publish"} <= set(phases)
    for name in (*ARTIFACT_NAMES, SCREEN_NAME):
        assert artifacts.exists(task_id, name), name
    bootstrap = json.loads(artifacts.read_text(task_id, "bootstrap.json") or "{}")
    assert bootstrap["sandbox"]["mode"] == "bwrap"
    assert [s["stage"] for s in bootstrap["stages"]] == ["token", "clone", "sandbox"]
    assert all(s["status"] == "ok" and "duration_s" in s for s in bootstrap["stages"])
    # The required checks ran on the untouched clone before the first model call, and passed.
    (base,) = bootstrap["baseline"]
    assert (base["command"], base["exit_code"], base["passed"]) == (CHECK, 0, True)
    assert "passed" in base["output_tail"]
    assert "def subtract" in (artifacts.read_text(task_id, "diff.patch") or "")
    assert "passed" in (artifacts.read_text(task_id, SCREEN_NAME) or "")
    assert_no_credentials(artifacts, task_id)
    # The artifacts went up by presigned PUTs, whose URLs (credentials) the runtime never logs.
    log = (stack.state_dir / "runs" / f"{task_id}.log").read_text()
    assert "/v1/runtime/artifacts/harness.json" in log
    assert "X-Amz-Signature" not in log
    assert not CREDENTIAL.search(log)


def test_a_run_whose_title_carries_a_github_token_completes_through_the_relay(
    alice: Alice, artifacts: ArtifactStore
) -> None:
    """The relay refuses a body carrying a GitHub token (a refused call ends the run); the
    runner redacts the task's own text (and every tool result) before the model sees it, so
    none of its calls is refused and the provider never sees the token. (The stack's relay
    runs in a process of its own: its screen, which every body passes before the provider,
    is the witness.)"""
    token = "ghs_" + "T0k3nInT1tle" * 3
    (task_id,) = start(alice, "run-token-title", f"PLAY-token-in-title: add subtract, rotating {token}")
    task = settled(alice, task_id)
    assert task["status"] == "review", task["reason"]
    turns = [entry for entry in harness(artifacts, task_id) if entry["kind"] == "turn"]
    assert len(turns) >= 4  # edit, end of edit, verify, summary: every call admitted
    assert_no_credentials(artifacts, task_id)


def test_command_output_is_live_for_the_owner_and_never_durable(stack: LocalStack, alice: Alice) -> None:
    (task_id,) = start(alice, "run-stream", "PLAY-success: add subtract")
    settled(alice, task_id)
    url = f"{stack.state['stream_url']}/v1/tasks/{task_id}/stream"
    owner = {"Authorization": f"Bearer {stack.state['users']['alice']}"}
    with httpx.stream("GET", url, headers=owner, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        body = "".join(response.iter_text())
    assert "event: output" in body
    assert "passed in" in body  # pytest's own summary line, as the check printed it
    assert body.rstrip().endswith("event: end\ndata:")
    assert not CREDENTIAL.search(body)
    assert "passed in" not in json.dumps(events(alice, task_id))
    bob = {"Authorization": f"Bearer {stack.state['users']['bob']}"}
    assert httpx.get(url, headers=bob, timeout=30).status_code == 404
    assert httpx.get(url, timeout=30).status_code == 401


def test_a_failing_check_is_repaired_in_a_repair_round(alice: Alice, artifacts: ArtifactStore) -> None:
    (task_id,) = start(alice, "run-repaired", "PLAY-repaired: add subtract")
    task = settled(alice, task_id)
    assert task["status"] == "review", task["reason"]
    checks = [e["data"] for e in events(alice, task_id) if e["type"] == "check"]
    assert [(c["stage"], c["passed"]) for c in checks] == [
        ("baseline", True),
        ("loop", False),
        ("loop", True),
        ("final", True),
    ]
    diff = artifacts.read_text(task_id, "diff.patch") or ""
    assert "== 2" in diff
    assert "== 3" not in diff


def test_a_check_that_never_passes_fails_the_task_final_and_keeps_the_work(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore
) -> None:
    (task_id,) = start(alice, "run-never", "PLAY-never: add subtract")
    task = settled(alice, task_id)
    assert (task["status"], task["classification"]) == ("failed", "final")
    assert "checks_failed" in task["reason"]
    assert task["failure"]["code"] == "checks_never_passed"
    assert task["pr_url"] is None
    assert all(p["head"]["ref"] != task["branch"] for p in stack.twin.pulls(SAMPLE_REPO))
    assert "def subtract" in (artifacts.read_text(task_id, "diff.patch") or "")
    assert "test_subtract.py" in (artifacts.read_text(task_id, "git-status.txt") or "")
    (finished,) = [e for e in events(alice, task_id) if e["type"] == "finished"]
    assert finished["data"]["classification"] == "final"
    assert_no_credentials(artifacts, task_id)


def test_calls_to_tools_not_offered_are_refused_never_run_and_the_run_recovers(
    alice: Alice, artifacts: ArtifactStore
) -> None:
    (task_id,) = start(alice, "run-hallucinated", "PLAY-hallucinated-once: add subtract")
    task = settled(alice, task_id)
    assert task["status"] == "review", task["reason"]
    refused = [c for c in calls(harness(artifacts, task_id)) if not c["allowed"]]
    assert [c["tool"] for c in refused] == ["delete_repository", "run_verification", "write_file"]
    assert "no tool named" in refused[0]["result"]
    assert "not offered in the edit phase" in refused[1]["result"]
    assert "not offered in the verify phase" in refused[2]["result"]
    assert "x.py" not in (artifacts.read_text(task_id, "git-status.txt") or "")
    # and the runtime's own log says so, the model's names quoted
    (log,) = [p for d in RUNTIME_LOGS for p in d.glob(f"{task_id}.log")]
    lines = [line for line in log.read_text().splitlines() if "refused" in line]
    assert [line.split("refused ", 1)[1].split(" ", 1)[0] for line in lines] == [
        "'delete_repository'",
        "'run_verification'",
        "'write_file'",
    ], lines


def test_repeated_invalid_calls_end_the_run_with_the_reason(alice: Alice, artifacts: ArtifactStore) -> None:
    (task_id,) = start(alice, "run-hallucinating", "PLAY-hallucinating: do anything")
    task = settled(alice, task_id)
    assert (task["status"], task["classification"]) == ("failed", "final")
    assert "invalid_calls" in task["reason"]
    assert (task["failure"]["code"], task["failure"]["who"]) == ("model_did_not_finish", "you")
    end = harness(artifacts, task_id)[-1]
    assert (end["kind"], end["end"]) == ("end", "invalid_calls")


def test_a_spent_budget_ends_the_run_as_a_budget_failure_with_the_work_kept(
    alice: Alice, artifacts: ArtifactStore
) -> None:
    (task_id,) = start(alice, "run-spender", "PLAY-spender: add subtract", budget="0.02")
    task = settled(alice, task_id)
    assert (task["status"], task["classification"]) == ("failed", "final")
    # Spent, or what is left pays for no call the runner can make: then the relay's figures.
    assert task["reason"] == "the task's budget is spent (relay 402)" or task["reason"].startswith(
        "the task's budget cannot pay for its next model call: this call may cost up to $"
    ), task["reason"]
    assert "def subtract" in (artifacts.read_text(task_id, "diff.patch") or "")
    assert float(task["cost_usd"]) <= 0.02
    assert (task["failure"]["code"], task["failure"]["who"]) == ("budget_spent", "you")


def test_cancelling_stops_the_runtime_and_its_check_promptly(stack: LocalStack, alice: Alice) -> None:
    (task_id,) = start(alice, "run-cancel", "PLAY-slow-check: wait")
    eventually(
        lambda: any(e["type"] == "phase" and e["data"]["phase"] == "verify" for e in events(alice, task_id))
    )
    time.sleep(1.0)  # the slow test is running under the sandbox now
    alice("POST", f"/v1/tasks/{task_id}/cancel")
    log = stack.state_dir / "runs" / f"{task_id}.log"
    eventually(lambda: "ended: cancelled" in log.read_text(), timeout=30)
    assert alice("GET", f"/v1/tasks/{task_id}")["status"] == "cancelled"
    done = subprocess.run(["pgrep", "-f", "test_slow"], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == ""


def test_a_runtime_with_an_unknown_or_used_ticket_exits_without_side_effects(
    stack: LocalStack, alice: Alice
) -> None:
    (task_id,) = start(alice, "run-duplicate", "PLAY-success: add subtract")
    settled(alice, task_id)

    def quiet() -> bool:  # the pull request's webhook may still be on its way
        first = events(alice, task_id)
        time.sleep(1.5)
        return events(alice, task_id) == first

    eventually(quiet)
    before = alice("GET", f"/v1/tasks/{task_id}")
    seen = events(alice, task_id)
    env = {
        "PATH": os.environ["PATH"],
        "STEWARD_TASK_ID": task_id,
        "STEWARD_TICKET": "used-or-unknown-ticket-value",
        "STEWARD_API_URL": stack.state["api_url"],
        "STEWARD_RELAY_URL": stack.state["relay_url"],
    }
    done = subprocess.run(
        [sys.executable, "-m", "steward.runner"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "used-or-unknown-ticket-value" not in done.stderr
    assert alice("GET", f"/v1/tasks/{task_id}") == before
    assert events(alice, task_id) == seen


def test_an_item_no_play_matches_fails_final_at_its_first_model_call_saying_what_to_do(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore
) -> None:
    # A person's own item on the local stack: the scripted model has no play for it.
    (task_id,) = start(alice, "run-no-play", "Rename `add` to `plus` everywhere")
    task = settled(alice, task_id)
    assert (task["status"], task["classification"]) == ("failed", "final"), task["reason"]
    reason = task["reason"]
    assert reason.startswith("the model cannot do this task: the scripted model has no play for this task")
    assert "playbook.json" in reason  # the playbook the stack plays, by its file name
    assert "STEWARD_SCRIPTED_PLAYBOOK" in reason
    assert "or use a real model (docs/getting-started/your-own-plan.md)" in reason
    assert float(task["cost_usd"]) == 0  # the refused call was released, not charged
    assert task["failure"]["code"] == "model_cannot_answer"
    entries = harness(artifacts, task_id)
    assert [e for e in entries if e["kind"] == "turn"] == []  # it ended at the first call
    item = alice("GET", "/v1/plans/run-no-play")["items"][0]
    assert item["status"] == "failed"


class RefusingRelay:
    """The path between the runner and the stack's relay losing the request's `messages`
    on the way (as the shared-event race did): the real relay answers 400 for it. Counts the
    calls it passed on. With `refuse=False` it passes every call on as it is (a counter)."""

    def __init__(self, upstream: str, *, refuse: bool = True) -> None:
        self.upstream = upstream.rstrip("/")
        self.calls = 0
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if refuse:
                    body.pop("messages", None)
                relay.calls += 1
                answer = httpx.post(
                    relay.upstream + self.path,
                    json=body,
                    headers={"Authorization": self.headers["Authorization"]},
                    timeout=30,
                )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *_: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RefusingRelay:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_request_the_relay_refuses_is_stewards_fault_recorded_and_retried(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = wiring.launcher()
    assert isinstance(launcher, LocalLauncher)
    with RefusingRelay(stack.state["relay_http_url"]) as relay:

        def environment(task: Task, ticket: str) -> dict[str, str]:
            return LocalLauncher.environment(launcher, task, ticket) | {"STEWARD_RELAY_URL": relay.url}

        monkeypatch.setattr(launcher, "environment", environment)
        markdown = plan("run-refused", "PLAY-success: add subtract").replace(
            "max_attempts: 1", "max_attempts: 2"
        )
        published = alice("PUT", "/v1/plans/run-refused", {"markdown": markdown})
        alice("POST", "/v1/plans/run-refused/confirm", {"content_hash": published["content_hash"]})

        def attempts() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = alice("GET", "/v1/tasks?plan=run-refused")["tasks"]
            return sorted(found, key=lambda t: t["attempt"])

        # The loop retries it (max_attempts applies): both attempts run and end.
        eventually(lambda: len(attempts()) == 2 and all(t["status"] == "failed" for t in attempts()))
        assert relay.calls == 2  # one call per attempt: a 400 is not sent again
    for task in attempts():
        settled(alice, task["id"])
        assert task["classification"] == "retryable", task["reason"]
        assert task["failure"]["code"] == "relay_refused"
        assert task["reason"].startswith("Steward's fault, not the model's or the plan's"), task["reason"]
        assert "HTTP 400 bad_request: messages: Field required" in task["reason"]
        (finished,) = [e for e in events(alice, task["id"]) if e["type"] == "finished"]
        assert finished["data"]["fault"] == "relay_refused"  # what the runtime routes count (alarm)
        (refused,) = [e for e in harness(artifacts, task["id"]) if e["kind"] == "refused"]
        assert (refused["status"], refused["code"]) == (400, "bad_request")
        assert "messages: Field required" in refused["error"]
        sent = json.loads(refused["request"])  # the request as the runner sent it, bounded
        assert sent["messages"][0]["content"][0]["text"].startswith("Task: PLAY-success: add subtract")
        assert refused["request_chars"] == len(refused["request"])
        assert_no_credentials(artifacts, task["id"])
    assert alice("GET", "/v1/plans/run-refused")["items"][0]["status"] == "failed"  # attempts spent


@pytest.fixture
def counted(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[RefusingRelay]:
    """The runtimes this test launches reach the relay through a counter of their calls."""
    launcher = wiring.launcher()
    assert isinstance(launcher, LocalLauncher)
    with RefusingRelay(stack.state["relay_http_url"], refuse=False) as relay:

        def environment(task: Task, ticket: str) -> dict[str, str]:
            return LocalLauncher.environment(launcher, task, ticket) | {"STEWARD_RELAY_URL": relay.url}

        monkeypatch.setattr(launcher, "environment", environment)
        yield relay


def test_a_check_that_fails_on_the_base_ends_the_task_before_any_model_call(
    alice: Alice, artifacts: ArtifactStore, counted: RefusingRelay
) -> None:
    (task_id,) = start(alice, "base-broken", "PLAY-base-broken: add subtract", check=BASE_CHECK)
    task = settled(alice, task_id)
    assert (task["status"], task["classification"]) == ("failed", "final"), task["reason"]
    assert task["failure"]["code"] == "checks_fail_on_base"
    assert task["failure"]["who"] == "the repository"
    assert "baseline: false" in task["failure"]["remedy"]
    assert f"`{BASE_CHECK}` (exit 4)" in task["reason"]
    assert counted.calls == 0  # no model call at all: nothing was spent on a broken base
    assert float(task["cost_usd"]) == 0
    assert [e for e in harness(artifacts, task_id) if e["kind"] == "turn"] == []
    bootstrap = json.loads(artifacts.read_text(task_id, "bootstrap.json") or "{}")
    (base,) = bootstrap["baseline"]
    assert (base["command"], base["exit_code"], base["passed"]) == (BASE_CHECK, 4, False)
    assert "test_subtract.py" in base["output_tail"]  # pytest's "file or directory not found"
    assert len(base["output_tail"]) <= 4096
    phases = [e["data"]["phase"] for e in events(alice, task_id) if e["type"] == "phase"]
    assert phases == ["bootstrap", "baseline"]


def test_without_a_baseline_the_model_runs_and_a_check_failing_on_the_base_too_says_so(
    alice: Alice, artifacts: ArtifactStore, counted: RefusingRelay
) -> None:
    (task_id,) = start(
        alice, "base-broken-off", "PLAY-base-broken: add subtract", check=BASE_CHECK, baseline=False
    )
    task = settled(alice, task_id)
    assert (task["status"], task["classification"]) == ("failed", "final"), task["reason"]
    assert counted.calls > 0  # the model ran
    assert task["failure"]["code"] == "checks_fail_on_base", task["reason"]
    assert "fail on the base too" in task["reason"]
    bootstrap = json.loads(artifacts.read_text(task_id, "bootstrap.json") or "{}")
    assert "baseline" not in bootstrap  # nothing ran before the model
    (base,) = bootstrap["base_checks"]  # the failing check, once more on the base commit
    assert (base["command"], base["exit_code"], base["passed"]) == (BASE_CHECK, 4, False)
    assert "def subtract" in (artifacts.read_text(task_id, "diff.patch") or "")  # the work is kept


def test_the_example_plan_of_ones_own_runs_to_pull_requests_on_its_playbook(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore
) -> None:
    # examples/own-plan.md as a person publishes it, played by examples/own-playbook.json;
    # and at the same time the deployment's smoke test, examples/smoke-plan.md, on its repo.
    markdown = (EXAMPLES / "own-plan.md").read_text()
    published = alice("PUT", "/v1/plans/own-plan", {"markdown": markdown})
    alice("POST", "/v1/plans/own-plan/confirm", {"content_hash": published["content_hash"]})
    smoke = (EXAMPLES / "smoke-plan.md").read_text().replace("repo: OWNER/REPO", f"repo: {SAMPLE_REPO}")
    published = alice("PUT", "/v1/plans/smoke", {"markdown": smoke})
    alice("POST", "/v1/plans/smoke/confirm", {"content_hash": published["content_hash"]})
    eventually(lambda: all(i["task_id"] for i in alice("GET", "/v1/plans/own-plan")["items"]))
    items = alice("GET", "/v1/plans/own-plan")["items"]
    assert len(items) == 2
    changed = {}
    for item in items:
        task = settled(alice, item["task_id"])
        assert task["status"] == "review", task["reason"]
        pull = stack.twin.pull(SAMPLE_REPO, int(task["pr_url"].rsplit("/", 1)[1]))
        changed[item["ordinal"]] = (pull["body"], artifacts.read_text(item["task_id"], "diff.patch") or "")
    assert "Adds `multiply(a, b)`" in changed[1][0]
    assert "def multiply" in changed[1][1]
    assert "test_multiply.py" in changed[1][1]
    assert "Adds `CONTRIBUTING.md`" in changed[2][0]
    assert "python -m pytest -q" in changed[2][1]
    (item,) = alice("GET", "/v1/plans/smoke")["items"]
    task = settled(alice, item["task_id"])
    assert task["status"] == "review", task["reason"]
    assert "+Written by Steward's smoke test" in (artifacts.read_text(item["task_id"], "diff.patch") or "")


def test_a_model_of_ones_own_is_charged_at_the_price_table_of_ones_own(
    alice: Alice, artifacts: ArtifactStore, openai_server: OpenAIServer
) -> None:
    (task_id,) = start(alice, "run-own-model", "Say what you would change", model=OWN_MODEL)
    task = settled(alice, task_id)
    assert task["status"] == "failed", task["reason"]  # it changed nothing: the run ends
    assert task["failure"]["code"] == "model_did_not_finish"
    calls = [r.body for r in openai_server.requests]  # only this test uses the model
    assert calls, task["reason"]
    assert all(body["model"] == "coder-7b" for body in calls)
    # 500 input tokens at $3.00 and 100 output tokens at $15.00 per million, per call.
    per_call = Decimal(500) * Decimal("3.00") / 10**6 + Decimal(100) * Decimal("15.00") / 10**6
    assert per_call == Decimal("0.003")
    assert Decimal(str(task["cost_usd"])) == per_call * len(calls)
    turns = [e for e in harness(artifacts, task_id) if e["kind"] == "turn" and "cost_usd" in e]
    assert len(turns) == len(calls)
    assert {Decimal(str(turn["cost_usd"])) for turn in turns} == {per_call}


# ---- follow-up rounds (docs/concepts/follow-ups.md)


def _round_of(alice: Alice, parent: str, number: int) -> str:
    """The task of round `number` of `parent`, once the loop started it."""
    started: list[str] = []

    def found() -> bool:
        started[:] = [
            e["data"]["task_id"]
            for e in events(alice, parent)
            if e["type"] == "follow_up_started" and e["data"]["round"] == number
        ]
        return bool(started)

    eventually(found)
    return started[0]


def _branch_head(stack: LocalStack, number: int) -> str:
    pull = next(p for p in admin.pulls(stack.state["github_url"], SAMPLE_REPO) if p["number"] == number)
    return str(pull["head"]["sha"])


def test_a_review_requesting_changes_is_answered_by_a_round_on_the_same_pull_request(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore
) -> None:
    (parent,) = start(alice, "round-review", "PLAY-success for a round")
    first = settled(alice, parent)
    number, head = first["pr_url"].rsplit("/", 1)[-1], first["head_sha"]
    github = stack.state["github_url"]
    admin.review(
        github,
        SAMPLE_REPO,
        int(number),
        state="changes_requested",
        body="ROUND-docstring: please document `subtract`.",
        comments=[{"path": "calculator.py", "line": 5, "body": "Say what it returns"}],
    )
    round_id = _round_of(alice, parent, 1)
    # GitHub's review delivery does not carry its inline comments: they were read for the ask.
    [asked] = [e["data"] for e in events(alice, parent) if e["type"] == "follow_up_asked"]
    assert [(c["path"], c["line"], c["body"]) for c in asked["comments"]] == [
        ("calculator.py", 5, "Say what it returns")
    ]
    answered = settled(alice, round_id)
    assert answered["status"] == "answered", answered
    assert (answered["kind"], answered["parent"], answered["round"], answered["pr_url"]) == (
        "follow_up",
        parent,
        1,
        first["pr_url"],
    )
    # One new commit on the same branch, a fast-forward of the head the review was on.
    new_head = _branch_head(stack, int(number))
    assert new_head != head
    assert alice("GET", f"/v1/tasks/{parent}")["head_sha"] == new_head
    mine = [p for p in admin.pulls(github, SAMPLE_REPO) if p["head"]["ref"] == first["branch"]]
    assert [p["state"] for p in mine] == ["open"]
    parent_now = alice("GET", f"/v1/tasks/{parent}")
    assert (parent_now["status"], parent_now["rounds_used"]) == ("review", 1)
    assert alice("GET", "/v1/plans/round-review")["items"][0]["rounds"] == {"used": 1, "allowed": 2}
    # The round's model was given the review (the play it ran matches the review's text
    # only), and the round replied once.
    edits = [
        json.loads(c["input"]) for c in calls(harness(artifacts, round_id)) if c["tool"] == "replace_in_file"
    ]
    assert edits == [DOCSTRING["input"]]
    replies = [c for c in admin.comments(github, SAMPLE_REPO, int(number)) if round_id in c["body"]]
    assert len(replies) == 1
    assert "Follow-up round 1 answers" in replies[0]["body"]
    assert new_head[:12] in replies[0]["body"]
    assert_no_credentials(artifacts, round_id)
    # CI fails on the new head: round 2 reads its output as data (its play matches it).
    admin.check(
        github, SAMPLE_REPO, int(number), name="lint", conclusion="failure", output="ROUND-lint: E501"
    )
    second = _round_of(alice, parent, 2)
    assert settled(alice, second)["status"] == "answered"
    checked = [e["data"] for e in events(alice, parent) if e["type"] == "follow_up_asked"][-1]
    assert (checked["kind"], checked["check_name"], checked["head_sha"]) == ("check", "lint", new_head)
    assert checked["output"].endswith("ROUND-lint: E501")  # the check run's title, then its text


def test_a_round_whose_checks_fail_leaves_the_branch_and_the_pull_request_as_they_were(
    stack: LocalStack, alice: Alice
) -> None:
    (parent,) = start(alice, "round-breaks", "PLAY-success for a failing round")
    first = settled(alice, parent)
    number = int(first["pr_url"].rsplit("/", 1)[-1])
    admin.comment(stack.state["github_url"], SAMPLE_REPO, number, "@steward ROUND-breaks: rename the test")
    round_id = _round_of(alice, parent, 1)
    ended = settled(alice, round_id)
    assert (ended["status"], ended["classification"]) == ("failed", "final"), ended
    assert ended["failure"]["code"] == "checks_never_passed"
    assert _branch_head(stack, number) == first["head_sha"]
    parent_now = alice("GET", f"/v1/tasks/{parent}")
    assert (parent_now["status"], parent_now["head_sha"], parent_now["pr_url"]) == (
        "review",
        first["head_sha"],
        first["pr_url"],
    )
    # ... and says so once on the pull request, with the round's reason.
    github = stack.state["github_url"]

    def replies() -> list[str]:
        return [
            c["body"] for c in admin.comments(github, SAMPLE_REPO, number) if "steward-reply" in c["body"]
        ]

    eventually(lambda: len(replies()) == 1)
    assert replies()[0].startswith(f"Follow-up round 1 could not answer: {ended['reason']}")
    assert "The branch and this pull request are as they were." in replies()[0]


def test_an_ask_that_starts_no_round_is_answered_once_per_reason(stack: LocalStack, alice: Alice) -> None:
    (parent,) = start(alice, "round-off", "PLAY-success with rounds off", follow_ups=0)
    first = settled(alice, parent)
    number = int(first["pr_url"].rsplit("/", 1)[-1])
    github = stack.state["github_url"]

    def replies() -> list[str]:
        return [
            c["body"] for c in admin.comments(github, SAMPLE_REPO, number) if "steward-reply" in c["body"]
        ]

    for _ in range(2):  # a stranger asks twice: answered once
        admin.comment(github, SAMPLE_REPO, number, "@steward please rename it", login="drive-by")
    eventually(lambda: len(replies()) == 1)
    assert replies()[0].startswith("Only collaborators of this repository can ask Steward")
    # A collaborator asks twice (a review, then a mention: two round keys): the plan allows no
    # round, which is said once.
    admin.review(
        github, SAMPLE_REPO, number, state="changes_requested", body="ROUND-docstring please", comments=[]
    )
    admin.comment(github, SAMPLE_REPO, number, "@steward ROUND-docstring please")
    eventually(lambda: len(replies()) == 2)
    eventually(lambda: len([e for e in events(alice, parent) if e["type"] == "follow_up_refused"]) == 4)
    time.sleep(2)  # two more ticks: nothing more is written
    assert len(replies()) == 2
    assert "`follow_ups: 0`" in replies()[1]
    task = alice("GET", f"/v1/tasks/{parent}")
    assert (task["status"], task["rounds_used"], task["head_sha"]) == ("review", 0, first["head_sha"])
    # A person pushes onto the branch: it is theirs now, which an ask on it is told once.
    admin.push(github, SAMPLE_REPO, number, login="octo-reviewer")
    admin.comment(github, SAMPLE_REPO, number, "@steward ROUND-docstring after all")
    eventually(lambda: len(replies()) == 3)
    assert replies()[2].startswith("A commit Steward did not make is on this branch")
    refused = [e["data"] for e in events(alice, parent) if e["type"] == "follow_up_refused"]
    assert refused[-1]["reason"] == "head_not_stewards"


def test_an_item_whose_pull_request_conflicts_after_another_merged_is_merged_with_its_base_by_a_round(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore
) -> None:
    """Two items change one line; the first is merged; the second's pull request no longer
    merges (GitHub says `mergeable: false`, and refuses the merge with 405). A round merges the
    base into the branch (a merge commit, never a rebase) and resolves the conflict; the pull
    request merges. This test moves the sample repository's `main`: it stays the module's last."""
    first, second = start(alice, "round-conflict", "PLAY-divide-documented", "PLAY-divide-as-float")
    one, two = settled(alice, first), settled(alice, second)
    github = stack.state["github_url"]
    number_one, number_two = (int(t["pr_url"].rsplit("/", 1)[-1]) for t in (one, two))
    admin.merge(github, SAMPLE_REPO, number_one)
    # At once (the round takes seconds to come): the second no longer merges, as on GitHub.
    assert _mergeable(stack, number_two) is False
    with pytest.raises(admin.AdminError, match="405"):
        admin.merge(github, SAMPLE_REPO, number_two)
    round_id = _round_of(alice, second, 1)
    answered = settled(alice, round_id)
    assert answered["status"] == "answered", answered
    # The round's baseline (its branch with the base merged in, conflicts and all) fails: a
    # round goes on, since that is what it is there to fix.
    bootstrap = json.loads(artifacts.read_text(round_id, "bootstrap.json") or "{}")
    assert [(b["command"], b["passed"]) for b in bootstrap["baseline"]] == [(CHECK, False)]
    [asked] = [e["data"] for e in events(alice, second) if e["type"] == "follow_up_asked"]
    assert (asked["kind"], asked["base_ref"]) == ("conflict", "main")
    # The new head is a merge of the old head and the base (the branch's history only grew).
    head = _branch_head(stack, number_two)
    pull = next(p for p in admin.pulls(github, SAMPLE_REPO) if p["number"] == number_two)
    base_head = next(p for p in admin.pulls(github, SAMPLE_REPO) if p["number"] == number_one)[
        "merge_commit_sha"
    ]
    assert _parents(stack, head) == [two["head_sha"], base_head]
    assert pull["mergeable"] is True
    admin.merge(github, SAMPLE_REPO, number_two)
    eventually(lambda: alice("GET", f"/v1/tasks/{second}")["status"] == "merged")


def _mergeable(stack: LocalStack, number: int) -> bool | None:
    pull = next(p for p in admin.pulls(stack.state["github_url"], SAMPLE_REPO) if p["number"] == number)
    return pull.get("mergeable")


def _parents(stack: LocalStack, sha: str) -> list[str]:
    owner, name = SAMPLE_REPO.split("/")
    bare = stack.twin.git_root / owner / f"{name}.git"
    listed = subprocess.run(
        ["git", "-C", str(bare), "rev-list", "--parents", "-n", "1", sha],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()[1:]
