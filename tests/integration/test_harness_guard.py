"""The runner's tool loop against the real relay Lambda (moto, the local REST adapter, the
runtime's own HTTP client) with a scripted provider: no model output breaks the run, what
the runner sends never carries a credential the relay would refuse, and `max_seconds` holds
inside a turn. Checks run in the sandbox's same-user mode (the tool loop is under test here,
not the sandbox)."""

from __future__ import annotations

import functools
import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from steward import relay_handler, wiring
from steward.adapters.providers import provider_for
from steward.adapters.providers.base import ProviderResult, converse_usage
from steward.adapters.providers.scripted import SLOW_ENV
from steward.adapters.runtime_api import RuntimeApi
from steward.domain.budget import Usage
from steward.domain.converse import ConverseRequest, wire
from steward.domain.credentials import new_ticket
from steward.domain.models import Task, utcnow
from steward.domain.phases import HarnessLimits
from steward.domain.redaction import Redactor
from steward.local.http_adapter import LambdaHttpServer
from steward.runner.harness import Harness, Outcome
from steward.runner.sandbox import Sandbox, SandboxLimits, SandboxMode
from steward.runner.workspace import Workspace
from steward.wiring import Services

from tests.support.relay import RelayKit, build_relay

GHS = "ghs_" + "16C7e42F292c6912E7710c838347Ae178B4a"
GHO = "gho_" + "9ZqLm2Xv" * 5
GHP = "ghp_" + "Tr4nsf0rmEr" * 4
AKIA = "AKIAIOSFODNN7EXAMPLE"
FIXTURE_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
USERINFO = "https://user:pass@host.example/repo.git"


@pytest.fixture
def kit(services: Services) -> RelayKit:
    return build_relay(services)


@pytest.fixture
def relay_url(kit: RelayKit, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(wiring, "relay", lambda: kit.relay)
    with LambdaHttpServer(relay_handler.lambda_handler, kind="rest_api") as server:
        yield server.url


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "README.md").write_text("# demo\n")
    (clone / "fixtures.py").write_text(f"JWT = {FIXTURE_JWT!r}\nKEY = {AKIA!r}\nURL = {USERINFO!r}\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main", *args],
            cwd=clone,
            check=True,
            capture_output=True,
        )
    return clone


class Script:
    """A provider that answers a fixed sequence of assistant contents, whatever it is asked,
    and keeps every request it received (as Bedrock's JSON)."""

    def __init__(self, *turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)
        self.requests: list[str] = []

    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        self.requests.append(json.dumps(wire(request), ensure_ascii=False))
        content = self.turns.pop(0) if self.turns else [{"text": "nothing more to say"}]
        usage = Usage(100, 20)
        response = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "tool_use" if any("toolUse" in b for b in content) else "end_turn",
            "usage": converse_usage(usage),
        }
        return ProviderResult(response=response, usage=usage)


_IDS = itertools.count(1)


def use(name: str, tool_input: dict[str, Any], tool_id: str = "") -> list[dict[str, Any]]:
    return [{"toolUse": {"toolUseId": tool_id or f"t{next(_IDS)}", "name": name, "input": tool_input}}]


def run_harness(
    kit: RelayKit,
    relay_url: str,
    task: Task,
    repo: Path,
    *,
    checks: tuple[str, ...] = ("true",),
    limits: HarnessLimits | None = None,
    held: tuple[str, ...] = (),
    capability: str | None = None,
    **changes: Any,
) -> tuple[Outcome, list[dict[str, Any]]]:
    """Run the tool loop on `task` (with `changes`) as the runtime does: its capability and
    `held` secrets in its redactor, model calls through the relay with the runtime's client."""
    capability = capability or kit.capability(task)
    api = RuntimeApi("http://127.0.0.1:9", relay_url, attempts=1)

    def model(request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        return api.converse(capability, request, **({} if timeout is None else {"timeout": timeout}))

    records: list[dict[str, Any]] = []
    subject = task.model_copy(update={"checks": checks, **changes})
    harness = Harness(
        subject,
        Workspace(repo),
        Sandbox(repo, checks, mode=SandboxMode.SAME_USER, limits=SandboxLimits(wall_seconds=60)),
        model,
        Redactor([capability, *held]),
        limits=limits or HarnessLimits(max_seconds=60),
        record=records.append,
    )
    try:
        return harness.run(), records
    finally:
        api.close()


def calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for entry in records if entry["kind"] == "turn" for call in entry.get("calls", [])]


DONE = [{"text": "The change is complete."}]
VERIFY = use("run_verification", {"command": "true"})

# Model output no tool can use: (the assistant content, what the refusal says)
HOSTILE: list[tuple[list[dict[str, Any]], str]] = [
    (use("write_file", {"path": "bad\ud800.py", "content": "x"}), "path is not valid UTF-8"),
    (use("write_file", {"path": "ok.py", "content": "a \udc00 b"}), "content is not valid UTF-8"),
    (use("read_file", {"pa\udbffth": "README.md"}), "input is not valid UTF-8"),
    (
        use("replace_in_file", {"path": "README.md", "old": "# demo", "new": "\ud83d"}),
        "new is not valid UTF-8",
    ),
    (use("write file", {}, tool_id="id with spaces \ud800"), "no tool named 'invalid_tool_name'"),
    (
        use("write_file", functools.reduce(lambda inner, _: {"a": inner}, range(70), {"path": "deep.py"})),
        "nested deeper",
    ),
]


def test_model_output_that_is_not_valid_unicode_is_an_invalid_call_and_the_run_recovers(
    kit: RelayKit, relay_url: str, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Script(
        *(content for content, _ in HOSTILE),
        use("write_file", {"path": "good.py", "content": "print('ok')\n"}),
        [{"text": "Done \ud800 editing."}],
        VERIFY,
        [{"text": "Adds good.py \udfff."}],
    )
    monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e: script)
    outcome, records = run_harness(
        kit, relay_url, kit.running_task(), repo, limits=HarnessLimits(max_invalid_calls=len(HOSTILE) + 1)
    )
    assert outcome.completed, (outcome.end, outcome.detail)
    assert outcome.summary == "Adds good.py \ufffd."
    made = calls(records)
    for (_content, refusal), call in zip(HOSTILE, made, strict=False):
        assert call["allowed"] is False, call
        assert refusal in call["result"], call
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md", "fixtures.py", "good.py"]
    assert (repo / "README.md").read_text() == "# demo\n"
    assert len(script.requests) == len(HOSTILE) + 4  # every turn answered, none refused by the relay


def test_what_the_runner_sends_never_carries_a_credential_so_the_relay_takes_every_call(
    kit: RelayKit, relay_url: str, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticket = new_ticket()
    task = kit.running_task()
    capability = kit.capability(task)
    other_capability = kit.capability(kit.running_task(slug="another"))
    (repo / "leaked.txt").write_text(
        f"ticket={ticket}\nGITHUB_TOKEN={GHO}\nMINE={capability}\nOTHER={other_capability}\n"
    )
    printer = "python -c \"print('token: ' + 'gho_' + 'Ab1' * 12)\""
    script = Script(
        use("read_file", {"path": "leaked.txt"}),
        use("read_file", {"path": "fixtures.py"}),
        use("write_file", {"path": "config.py", "content": f"TOKEN = {GHP!r}  # the model wrote one\n"}),
        use("search_text", {"pattern": "gho_"}),
        DONE,
        use("run_verification", {"command": printer}),
        [{"text": f"Rotates the token {GHS}."}],
    )
    monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e: script)
    outcome, records = run_harness(
        kit,
        relay_url,
        task,
        repo,
        checks=(printer,),
        held=(ticket,),
        capability=capability,
        title=f"Rotate the leaked token {GHS}",
        details=f"It was {GHO}, see ticket {ticket}.",
    )
    assert outcome.completed, (outcome.end, outcome.detail)
    assert len(script.requests) == 7  # every call admitted: the relay refused none
    sent = "\n".join(script.requests)
    for secret in (GHS, GHO, GHP, ticket, capability, other_capability, "gho_Ab1Ab1"):
        assert secret not in sent, secret
    assert "Rotate the leaked token [REDACTED]" in script.requests[0]
    for fixture in (FIXTURE_JWT, AKIA, USERINFO):  # fixtures reach the model as the file has them
        assert fixture in script.requests[2], fixture
    assert GHP in (repo / "config.py").read_text()  # what the model wrote is written as it wrote it
    assert all(call["allowed"] for call in calls(records))


def _settled(kit: RelayKit, task: Task) -> bool:
    stored = kit.services.tables.table_by_name("tasks").get_item(
        Key={"task_id": task.id}, ConsistentRead=True
    )["Item"]
    return stored["reservations"] == {} and Decimal(stored["committed_usd"]) > 0


SLOW_CHECK = 'python -c "import time; time.sleep(30)"'
# (case, model, task budget, max_seconds, checks, the provider's turns (None: the real
# scripted-slow provider), whether the budget is held by a call in flight, the ending's note)
SLOW: list[tuple[str, str, str, float, tuple[str, ...], Script | None, bool, str]] = [
    (
        "a model call slower than the run's time",
        "scripted-slow",
        "1.00",
        1.0,
        ("true",),
        None,
        False,
        "model call",
    ),
    (
        "a check slower than the run's time",
        "scripted",
        "1.00",
        2.0,
        (SLOW_CHECK,),
        Script(DONE, use("run_verification", {"command": SLOW_CHECK})),
        False,
        "during python",
    ),
    ("429s that outlast the run's time", "scripted", "0.01", 1.0, ("true",), Script(), True, "model call"),
]


def test_max_seconds_holds_inside_a_turn_for_a_slow_model_a_slow_check_and_a_long_wait(
    kit: RelayKit, relay_url: str, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for number, (name, model, budget, seconds, checks, script, held, ending) in enumerate(SLOW):
        if script is None:
            slow = functools.partial(provider_for, environ={SLOW_ENV: "2.5"})
            monkeypatch.setattr(kit.relay, "provider_for", slow)
        else:
            monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e, s=script: s)
        task = kit.running_task(model=model, budget=budget, slug=f"slow-{number}")
        if held:  # the room is held by a call in flight: the relay answers 429 with Retry-After
            now = utcnow()
            assert (
                kit.budget.reserve(
                    task_id=task.id,
                    owner=task.user,
                    model=task.model,
                    token_cap=Decimal(budget),
                    cost=Decimal(budget) - Decimal("0.0001"),
                    reservation_id="rheld",
                    expires_at=now + timedelta(minutes=5),
                    now=now,
                )
                is None
            )
        outcome, records = run_harness(
            kit, relay_url, task, repo, checks=checks, limits=HarnessLimits(max_seconds=seconds)
        )
        assert (outcome.completed, outcome.end) == (False, "time_limit"), name
        assert ending in outcome.detail, (name, outcome.detail)
        if ending == "model call":  # a reply that came after the deadline was never acted on
            assert [r for r in records if r["kind"] == "turn"] == [], name
        if script is None:
            deadline = time.monotonic() + 15  # let the relay settle the abandoned call before moto goes
            while not _settled(kit, task) and time.monotonic() < deadline:
                time.sleep(0.1)
        if SLOW_CHECK in checks:
            (check,) = outcome.checks
            assert (check["timed_out"], check["passed"]) == (True, False), name
