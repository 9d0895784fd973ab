"""What the relay charges, against moto and through the relay Lambda's HTTP adapter: a
provider's over-report never breaks the ceiling."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from steward import relay_handler, wiring
from steward.adapters.dynamo import count_requests
from steward.adapters.providers.base import ProviderResult, converse_usage
from steward.domain.budget import Usage, cost_of, input_bound_tokens, max_cost, per_token
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.models import Task, utcnow
from steward.domain.prices import PriceEntry
from steward.local.http_adapter import LambdaHttpServer
from steward.wiring import Services

from tests.support.relay import RelayKit, ask, build_relay

MAX_TOKENS = 1024


@pytest.fixture
def kit(services: Services) -> RelayKit:
    return build_relay(services)


class Provider:
    """A provider that answers `reply` and reports `usage` (None: the usage of the request,
    as the scripted provider would), and counts its calls."""

    def __init__(
        self, usage: Callable[[int], Usage] | None = None, reply: dict[str, Any] | None = None
    ) -> None:
        self.usage = usage
        self.reply = reply or {"text": "hello"}
        self.calls = 0

    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        self.calls += 1
        usage = self.usage(max_tokens) if self.usage else Usage(payload_bytes(request) // 4, 8)
        response = {
            "output": {"message": {"role": "assistant", "content": [self.reply]}},
            "stopReason": "end_turn",
            "usage": converse_usage(usage),
        }
        return ProviderResult(response=response, usage=usage)


@pytest.fixture
def served(kit: RelayKit, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The relay Lambda's converse URL, behind the local REST API adapter."""
    monkeypatch.setattr(wiring, "relay", lambda: kit.relay)
    with LambdaHttpServer(relay_handler.lambda_handler, kind="rest_api") as server:
        yield f"{server.url}/v1/relay/converse"


def item(kit: RelayKit, task: Task) -> dict[str, Any]:
    found: dict[str, Any] = kit.services.tables.table_by_name("tasks").get_item(
        Key={"task_id": task.id}, ConsistentRead=True
    )["Item"]
    return found


def entry(kit: RelayKit, model: str = "scripted") -> PriceEntry:
    return kit.relay.prices.entry(model)


# ---- item 4: an over-report is recorded and alarmed, never charged


HAIKU = "anthropic.claude-3-5-haiku-20241022-v1:0"  # priced cache reads and writes


def _reservation(price: PriceEntry) -> Decimal:
    bound = input_bound_tokens(payload_bytes(ConverseRequest.model_validate(ask(max_tokens=MAX_TOKENS))))
    return max_cost(price, bound, MAX_TOKENS)


def _just_over(price: PriceEntry) -> Usage:
    """Output tokens worth one token more than the whole reservation."""
    return Usage(0, int(_reservation(price) / per_token(price.output_per_mtok)) + 1)


# (case, model, the usage the provider reports for a call admitted with maxTokens 1024)
OVER_REPORTS: list[tuple[str, str, Callable[[PriceEntry], Usage]]] = [
    ("200,000 completion tokens for maxTokens 1024", "scripted", lambda _p: Usage(900, 200_000)),
    ("a million input tokens for a short prompt", "scripted", lambda _p: Usage(10**6, MAX_TOKENS)),
    ("cache reads and writes no prompt of this size holds", HAIKU, lambda _p: Usage(10, 10, 10**6, 10**6)),
    ("one output token beyond the reservation", "scripted", _just_over),
]


def test_an_over_reporting_provider_is_charged_its_reservation_and_recorded_and_alarmed(
    kit: RelayKit, served: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for number, (name, model, usage_for) in enumerate(OVER_REPORTS):
        price = entry(kit, model)
        reserved = _reservation(price)
        task = kit.running_task(budget="0.50", model=model, slug=f"over-{number}")
        headers = {"Authorization": f"Bearer {kit.capability(task)}"}
        honest = Provider()
        monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e, p=honest: p)
        capsys.readouterr()
        with count_requests(kit.services.tables) as requests:
            first = httpx.post(served, json=ask(max_tokens=MAX_TOKENS), headers=headers)
        assert first.status_code == 200, (name, first.text)
        assert sum(requests.values()) == 2, name  # an honest call: one reservation, one settlement
        assert "ProviderOverReport" not in capsys.readouterr().out, name
        honest_cost = Decimal(first.json()["steward"]["cost_usd"])

        usage = usage_for(price)
        liar = Provider(lambda _max, u=usage: u)
        monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e, p=liar: p)
        reported = cost_of(price, usage)
        assert reported > reserved, name  # the case is an over-report
        with count_requests(kit.services.tables) as requests:
            answer = httpx.post(served, json=ask(max_tokens=MAX_TOKENS), headers=headers)
        assert answer.status_code == 200, (name, answer.text)
        # reserve and settle as ever, then the event's consistent read and its transaction
        assert sum(requests.values()) == 4, (name, requests)
        assert Decimal(answer.json()["steward"]["cost_usd"]) == reserved, name
        stored = item(kit, task)
        assert Decimal(stored["cost_usd"]) == Decimal(stored["committed_usd"]) == honest_cost + reserved, name
        assert Decimal(stored["committed_usd"]) <= Decimal("0.50"), name
        assert stored["reservations"] == {}, name
        assert Decimal(stored["over_reported_usd"]) == reported - reserved, name
        assert kit.services.tasks.tasks.require(task.id).over_reported_usd == reported - reserved, name
        events = kit.services.tasks.events.list(task.id, after=0, limit=50)
        (event,) = [e for e in events if e["type"] == "over_report"]
        data = event["data"]
        assert (Decimal(data["reserved_usd"]), Decimal(data["charged_usd"])) == (reserved, reserved), name
        assert Decimal(data["reported_usd"]) == reported, name
        assert Decimal(data["over_reported_usd"]) == reported - reserved, name
        assert data["usage"]["output_tokens"] == usage.output_tokens, name
        metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
        assert any(m.get("ProviderOverReport") == [1.0] for m in metrics), (name, metrics)


def test_a_settlement_never_charges_more_than_its_reservation(kit: RelayKit) -> None:
    task = kit.running_task(budget="1.00")
    refused = kit.budget.reserve(
        task_id=task.id,
        owner=task.user,
        model=task.model,
        token_cap=Decimal("1.00"),
        cost=Decimal("0.25"),
        reservation_id="r1",
        expires_at=utcnow(),
        now=utcnow(),
    )
    assert refused is None
    settled = kit.budget.settle(
        task_id=task.id, reservation_id="r1", reserved=Decimal("0.25"), actual=Decimal(6)
    )
    assert (settled.applied, settled.charged_usd, settled.over_reported_usd) == (
        True,
        Decimal("0.25"),
        Decimal("5.75"),
    )
    again = kit.budget.settle(
        task_id=task.id, reservation_id="r1", reserved=Decimal("0.25"), actual=Decimal(6)
    )
    assert (again.applied, again.over_reported_usd) == (False, Decimal(0))  # recorded once
    stored = item(kit, task)
    assert (stored["cost_usd"], stored["committed_usd"], stored["over_reported_usd"]) == (
        Decimal("0.25"),
        Decimal("0.25"),
        Decimal("5.75"),
    )
