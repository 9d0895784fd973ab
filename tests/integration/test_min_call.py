"""Publish and the relay share one floor (`steward.domain.budget:min_call_cost`): the smallest
budget publish accepts pays for one call of 1 KiB in and the relay's floor of output tokens,
and the relay refuses that call on any budget publish refuses. Real stores on moto, the
packaged price table, the plan service as the API builds it (publish checks on)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from steward.adapters.price_file import load_price_table
from steward.config import Settings
from steward.domain import budget
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.errors import BudgetExhausted, InvalidDocument
from steward.services import relay
from steward.wiring import Services

from tests.support.documents import DOCUMENT_REPO
from tests.support.installations import link_installation
from tests.support.relay import ask, build_relay

MODEL = "scripted"


def minimal_call() -> dict[str, Any]:
    """A request of exactly 1 KiB of model input, asking for the relay's floor of tokens."""
    body = ask("x", max_tokens=budget.MIN_OUTPUT_TOKENS)
    pad = budget.MIN_CALL_INPUT_BYTES - payload_bytes(ConverseRequest.model_validate(body))
    body = ask("x" * (1 + pad), max_tokens=budget.MIN_OUTPUT_TOKENS)
    assert payload_bytes(ConverseRequest.model_validate(body)) == budget.MIN_CALL_INPUT_BYTES
    return body


@pytest.fixture
def checked(services: Services, settings: Settings) -> Services:
    link_installation(services.tables, "alice", DOCUMENT_REPO)
    return Services.build(settings, services.tables, services.tasks.artifacts, publish_checks=True)


def test_the_relay_uses_the_domain_floor() -> None:
    assert relay.MIN_OUTPUT_TOKENS is budget.MIN_OUTPUT_TOKENS == 256
    entry = load_price_table().entry(MODEL)
    assert budget.min_call_cost(entry) == budget.max_cost(entry, 1024, 256) == Decimal("0.002304")


def test_the_smallest_budget_publish_accepts_pays_for_one_minimal_call(checked: Services) -> None:
    floor = budget.min_call_cost(load_price_table().entry(MODEL))
    kit = build_relay(checked)
    task = kit.running_task(budget=str(floor), model=MODEL)
    outcome = kit.call(task, minimal_call())
    assert outcome.max_tokens == budget.MIN_OUTPUT_TOKENS


def test_a_budget_below_it_is_refused_at_publish_and_its_call_by_the_relay(
    checked: Services, services: Services
) -> None:
    below = budget.min_call_cost(load_price_table().entry(MODEL)) - Decimal("0.000001")
    with pytest.raises(InvalidDocument) as refused:
        build_relay(checked).running_task(budget=str(below), model=MODEL)
    assert (refused.value.field, refused.value.line) == ("front_matter.budget_usd", 4)
    # Made anyway (past publish, as a plan approved under an older price table would be):
    # the relay refuses its one minimal call.
    kit = build_relay(services)
    task = kit.running_task(budget=str(below), model=MODEL, slug="below")
    with pytest.raises(BudgetExhausted):
        kit.call(task, minimal_call())
