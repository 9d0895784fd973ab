"""The scripted model's playbooks: the packaged one plays the demo's items and refuses every
other item at its first call, charging nothing, saying to write a playbook or use a real
model; the example playbook of a plan of one's own (examples/) has a play for each item of
its plan. (tests/integration/test_runner.py runs both through the runner.)"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from steward.adapters.providers.playbook import Playbook
from steward.domain.converse import ConverseRequest
from steward.domain.documents import parse_document
from steward.domain.errors import ModelCannotAnswer
from steward.domain.models import Task
from steward.domain.phases import RunState
from steward.local.sample_repo import SAMPLE_REPO
from steward.runner.harness import system_prompt, task_prompt, tool_config
from steward.wiring import Services

from tests.support.relay import RelayKit, build_relay

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def first_call(title: str, details: str = "") -> dict[str, object]:
    """The runner's first model call for an item, as the harness builds it."""
    task = Task.model_construct(title=title, details=details, checks=("python -m pytest -q",))
    return {
        "system": [{"text": system_prompt(task)}],
        "messages": [{"role": "user", "content": [{"text": task_prompt(task)}]}],
        "inferenceConfig": {"maxTokens": 1024},
        "toolConfig": tool_config(RunState().offered),
    }


# Items of a person's own plan that no play of the packaged playbook matches.
OWN_ITEMS = [
    "Rename `add` to `plus` everywhere",
    "Add type hints to the whole package",
    "Write a CHANGELOG.md",
]


@pytest.fixture
def kit(services: Services) -> RelayKit:
    return build_relay(services)


def test_the_packaged_playbook_refuses_an_item_it_has_no_play_for_and_charges_nothing(kit: RelayKit) -> None:
    task = kit.running_task(model="scripted-coder")
    for title in OWN_ITEMS:
        with pytest.raises(ModelCannotAnswer) as refused:
            kit.call(task, first_call(title))
        assert refused.value.status == 422
        message = refused.value.message
        assert "no play for this task in the packaged playbook (demo and smoke test)" in message
        assert "STEWARD_SCRIPTED_PLAYBOOK" in message
        assert "use a real model" in message
        assert len(message) <= 250  # whole in the task's reason (300 characters with its prefix)
    assert kit.spent(task) == (Decimal(0), Decimal(0))  # every reservation released
    # The demo's items still play.
    answer = kit.call(task, first_call("Add a `subtract(a, b)` function to `calculator.py`."))
    (block,) = answer.response["output"]["message"]["content"]
    assert block["toolUse"]["name"] == "read_file"


def test_the_example_playbook_has_one_play_for_each_item_of_its_plan() -> None:
    playbook = Playbook.model_validate(json.loads((EXAMPLES / "own-playbook.json").read_text()))
    document = parse_document((EXAMPLES / "own-plan.md").read_text())
    matched = []
    for item in document.items:
        request = ConverseRequest.model_validate(first_call(item.title, item.details))
        plays = [p for p in playbook.plays if p.match.lower() in task_prompt_text(request).lower()]
        assert len(plays) == 1, (item.title, [p.match for p in plays])
        matched.append(plays[0].match)
        assert "toolUse" in playbook.reply(request)  # its first step is a tool call
    assert sorted(matched) == sorted(p.match for p in playbook.plays)  # and no play is idle
    assert document.front_matter.repo == SAMPLE_REPO  # the local stack's sample repository


def task_prompt_text(request: ConverseRequest) -> str:
    return " ".join(getattr(block, "text", "") for block in request.messages[0].content)
