"""The relay against moto: admission, lowering, refusals, settlement, expiry; every bad
input refused before the provider is called, with nothing charged."""

from __future__ import annotations

import http.client
import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import ROUND_CEILING, Decimal
from urllib.parse import urlsplit

import pytest
from steward.adapters.dynamo import count_requests
from steward.adapters.price_file import load_price_table
from steward.domain.budget import affordable_max_tokens, input_bound_tokens, max_cost, min_call_cost
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.errors import (
    BadRequest,
    BudgetExhausted,
    Forbidden,
    LifecycleError,
    ProviderError,
    RetryLater,
    TooLarge,
    Unauthorized,
)
from steward.domain.models import TaskStatus, utcnow
from steward.local.http_adapter import LambdaHttpServer
from steward.services.reaper import Reaper
from steward.wiring import Services

from tests.support.documents import document
from tests.support.relay import RelayKit, ask, build_relay


@pytest.fixture
def kit(services: Services) -> RelayKit:
    return build_relay(services)


def test_an_admitted_call_reserves_settles_and_reports_cost(kit: RelayKit) -> None:
    task = kit.running_task(budget="1.00")
    token = kit.capability(task)
    with count_requests(kit.services.tables) as requests:
        outcome = kit.call(task, token=token)
    assert sum(requests.values()) == 2  # one reservation, one settlement
    assert outcome.response["output"]["message"]["role"] == "assistant"
    cost, committed = kit.spent(task)
    assert cost == committed == outcome.cost_usd > 0
    assert outcome.remaining_usd == Decimal("1.00") - cost
    assert outcome.max_tokens == 64


def test_a_refused_call_is_one_request_and_charges_nothing(kit: RelayKit) -> None:
    task = kit.running_task(budget="0.0001")
    token = kit.capability(task)
    with count_requests(kit.services.tables) as requests, pytest.raises(BudgetExhausted):
        kit.call(task, token=token)
    assert sum(requests.values()) == 1
    assert kit.spent(task) == (Decimal(0), Decimal(0))


def test_max_tokens_is_lowered_to_what_the_budget_pays(kit: RelayKit) -> None:
    task = kit.running_task(budget="0.005", model="scripted")
    outcome = kit.call(task, ask(max_tokens=4000))
    assert 256 <= outcome.max_tokens < 4000
    cost, committed = kit.spent(task)
    assert cost == committed <= Decimal("0.005")


def test_room_held_by_calls_in_flight_is_429_and_settled_room_gone_is_402(kit: RelayKit) -> None:
    task = kit.running_task(budget="0.01")
    kit.reserve(task, "rheld", cost=Decimal("0.0099"), cap=Decimal("0.01"), minutes=5)
    with pytest.raises(RetryLater) as wait:
        kit.call(task)
    assert 1 <= wait.value.retry_after <= 30
    kit.budget.settle(
        task_id=task.id, reservation_id="rheld", reserved=Decimal("0.0099"), actual=Decimal("0.0099")
    )
    with pytest.raises(BudgetExhausted):
        kit.call(task)
    assert kit.spent(task) == (Decimal("0.0099"), Decimal("0.0099"))


PRICEY = load_price_table().entry("scripted-pricey")  # $100 in, $500 out per million tokens
# (what the call sends, its maxTokens, what the answer tells the caller to do). Against $0.4999
# left of $0.50: an input whose bound alone costs more; one that leaves room for fewer output
# tokens than the relay's floor (256); one that asked fewer still, and not even those fit.
TOO_LARGE_CALLS = [
    ("x" * 6000, 4096, "send a shorter input"),
    ("x" * 4200, 4096, "send inferenceConfig.maxTokens of at most "),
    ("x" * 4200, 200, "send inferenceConfig.maxTokens of at most "),
]


def usd(amount: Decimal, rounding: str) -> str:
    return f"${amount.quantize(Decimal('0.000001'), rounding=rounding).normalize():f}"


@pytest.mark.parametrize(("text", "max_tokens", "remedy"), TOO_LARGE_CALLS)
def test_a_call_too_large_for_what_is_left_says_so_with_the_figures_not_that_the_budget_is_spent(
    kit: RelayKit, text: str, max_tokens: int, remedy: str
) -> None:
    task = kit.running_task(budget="0.50", model="scripted-pricey")
    kit.reserve(task, "rspent", cost=Decimal("0.0001"), cap=Decimal("0.50"), minutes=5)
    kit.budget.settle(
        task_id=task.id, reservation_id="rspent", reserved=Decimal("0.0001"), actual=Decimal("0.0001")
    )
    body = ask(text, max_tokens=max_tokens)
    with pytest.raises(BudgetExhausted) as refused:  # 402, as a spent budget is
        kit.call(task, body)
    error = refused.value.to_body()["error"]
    assert (refused.value.status, error["code"]) == (402, "call_exceeds_budget")
    bound = input_bound_tokens(payload_bytes(ConverseRequest.model_validate(body)))
    floor = min(max_tokens, 256)
    message = str(error["message"])
    assert message.startswith(
        f"this call may cost up to {usd(max_cost(PRICEY, bound, floor), ROUND_CEILING)} "
        f"(up to {bound} input tokens and {floor} output tokens), "
        "more than the $0.4999 left of the task's budget: "
    ), message
    assert remedy in message
    fits = affordable_max_tokens(PRICEY, bound, Decimal("0.4999"))
    if "at most" in remedy:  # what it says fits is admitted
        assert message.endswith(f"at most {fits}, or a shorter input")
        assert kit.call(task, ask(text, max_tokens=fits)).max_tokens == fits
    else:
        assert fits == 0
    assert kit.spent(task)[0] <= Decimal("0.50")


def test_a_budget_left_below_the_smallest_call_is_spent(kit: RelayKit) -> None:
    task = kit.running_task(budget="0.50", model="scripted-pricey")
    spent = Decimal("0.50") - min_call_cost(PRICEY) + Decimal("0.000001")
    kit.reserve(task, "rspent", cost=spent, cap=Decimal("0.50"), minutes=5)
    kit.budget.settle(task_id=task.id, reservation_id="rspent", reserved=spent, actual=spent)
    with pytest.raises(BudgetExhausted) as refused:  # what is left pays for less than 1 KiB in
        kit.call(task, ask("x" * 1500, max_tokens=4096))
    assert (refused.value.code, refused.value.message) == ("budget_exhausted", "the task's budget is spent")


def test_settlement_replayed_changes_nothing(kit: RelayKit) -> None:
    task = kit.running_task()
    kit.reserve(task, "r1", cost=Decimal("0.5"), cap=Decimal(1), minutes=5)
    first = kit.budget.settle(
        task_id=task.id, reservation_id="r1", reserved=Decimal("0.5"), actual=Decimal("0.1")
    )
    again = kit.budget.settle(
        task_id=task.id, reservation_id="r1", reserved=Decimal("0.5"), actual=Decimal("0.1")
    )
    assert (first.applied, again.applied) == (True, False)
    assert kit.spent(task) == (Decimal("0.1"), Decimal("0.1"))


def test_provider_failure_releases_and_missing_usage_charges_the_reservation(kit: RelayKit) -> None:
    failing = kit.running_task(model="scripted-fail", slug="fails")
    with pytest.raises(ProviderError):
        kit.call(failing)
    assert kit.spent(failing) == (Decimal(0), Decimal(0))

    silent = kit.running_task(model="scripted-no-usage", slug="silent")
    outcome = kit.call(silent)
    cost, committed = kit.spent(silent)
    assert cost == committed == outcome.cost_usd > 0  # charged in full: the reservation


def test_a_provider_outcome_that_is_unknown_charges_the_reservation_in_full(
    kit: RelayKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 that cannot be read, or an answer that never came back: the provider may have
    billed the call, so the reservation is charged as reserved (never more), not released."""
    from steward.domain.errors import ProviderOutcomeUnknown  # noqa: PLC0415

    class Lost:
        def converse(self, request: object, *, max_tokens: int) -> object:
            raise ProviderOutcomeUnknown("openai: ReadTimeout")

    monkeypatch.setattr(kit.relay, "provider_for", lambda model, entry: Lost())
    task = kit.running_task(slug="lost")
    with pytest.raises(ProviderOutcomeUnknown) as caught:
        kit.call(task)
    assert caught.value.status == 502
    cost, committed = kit.spent(task)
    assert cost == committed > 0  # the reservation, in full: nothing left held
    assert cost <= Decimal(task.budget_usd)


def test_expired_reservations_are_charged_in_full_by_the_reaper_once(kit: RelayKit) -> None:
    task = kit.running_task()
    now = utcnow()
    kit.reserve(task, "rlost", cost=Decimal("0.2"), cap=Decimal(1), minutes=1)
    reaper = Reaper(kit.services.tasks.tasks, None, kit.budget)
    assert reaper.sweep_reservations(now) == 0  # not expired yet
    assert reaper.sweep_reservations(now + timedelta(minutes=2)) == 1
    assert reaper.sweep_reservations(now + timedelta(minutes=3)) == 0
    assert kit.spent(task) == (Decimal("0.2"), Decimal("0.2"))
    late = kit.budget.settle(
        task_id=task.id, reservation_id="rlost", reserved=Decimal("0.2"), actual=Decimal("0.01")
    )
    assert not late.applied  # the relay's late settlement after expiry is a no-op
    assert kit.spent(task) == (Decimal("0.2"), Decimal("0.2"))


def _bad_inputs(kit: RelayKit):  # type: ignore[no-untyped-def]
    task = kit.running_task()
    good = kit.capability(task)
    yield "no token", None, json.dumps(ask()), Unauthorized
    yield "garbage token", "x.y.z", json.dumps(ask()), Unauthorized
    yield (
        "expired",
        kit.capability(task, iat=int(utcnow().timestamp()) - 7000, exp=int(utcnow().timestamp()) - 100),
        json.dumps(ask()),
        Unauthorized,
    )
    yield "another model in the body", good, json.dumps({**ask(), "modelId": "scripted-pricey"}), Forbidden
    yield "negative maxTokens", good, json.dumps(ask(max_tokens=-5)), BadRequest
    yield "absurd maxTokens", good, json.dumps(ask(max_tokens=10**9)), BadRequest
    yield "malformed messages", good, json.dumps({"messages": [{"role": "robot", "content": []}]}), BadRequest
    yield "not json", good, "{{{", BadRequest
    yield "too large", good, "x" * (2 * 1024 * 1024), TooLarge
    yield "token for another task's owner", kit.capability(task, sub="mallory"), json.dumps(ask()), Forbidden


def test_bad_input_is_refused_before_the_provider_and_charges_nothing(kit: RelayKit) -> None:
    cases = list(_bad_inputs(kit))
    task_id = kit.services.tables.table_by_name("tasks").scan()["Items"][0]["task_id"]
    for name, token, body, error in cases:
        with pytest.raises(error):
            kit.relay.converse(f"Bearer {token}" if token else None, body)
        item = kit.services.tables.table_by_name("tasks").get_item(Key={"task_id": task_id})["Item"]
        assert (item["cost_usd"], item["committed_usd"], item["reservations"]) == (0, 0, {}), name


def test_oversized_body_touches_no_storage(kit: RelayKit) -> None:
    task = kit.running_task()
    with count_requests(kit.services.tables) as requests, pytest.raises(TooLarge):
        kit.relay.converse(f"Bearer {kit.capability(task)}", "x" * (2 * 1024 * 1024))
    assert sum(requests.values()) == 0


def test_a_cancelled_task_refuses_its_capability(kit: RelayKit) -> None:
    task = kit.running_task()
    token = kit.capability(task)
    kit.services.tasks.tasks.transition(
        task, TaskStatus.CANCELLED, now=utcnow(), event="cancelled", classification="final"
    )
    with pytest.raises(LifecycleError):
        kit.call(task, token=token)
    assert kit.spent(task) == (Decimal(0), Decimal(0))


def test_a_superseded_task_refuses_its_capability(kit: RelayKit) -> None:
    task = kit.running_task(slug="edited")
    token = kit.capability(task)
    # the person edits the item and confirms the new revision
    markdown = document("Use the model, differently").replace(
        "checks:", 'model: scripted\nbudget_usd: "1.00"\nchecks:'
    )
    kit.services.plans.publish("alice", "edited", markdown)
    kit.services.plans.confirm("alice", "edited")
    with pytest.raises(LifecycleError) as refused:
        kit.call(task, token=token)
    assert refused.value.status == 409
    stored = kit.services.tasks.tasks.get(task.id)
    assert stored is not None
    assert (stored.status, stored.reason) == (TaskStatus.CANCELLED, "superseded")
    assert kit.spent(task) == (Decimal(0), Decimal(0))


def test_the_relay_lambda_answers_429_with_retry_after_over_http(
    kit: RelayKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx  # noqa: PLC0415
    from steward import relay_handler, wiring  # noqa: PLC0415
    from steward.local.http_adapter import LambdaHttpServer  # noqa: PLC0415

    monkeypatch.setattr(wiring, "relay", lambda: kit.relay)
    task = kit.running_task(budget="0.01")
    kit.reserve(task, "rheld", cost=Decimal("0.0099"), cap=Decimal("0.01"), minutes=5)
    with LambdaHttpServer(relay_handler.lambda_handler, kind="rest_api") as server:
        url = f"{server.url}/v1/relay/converse"
        held = httpx.post(url, json=ask(), headers={"Authorization": f"Bearer {kit.capability(task)}"})
        assert held.status_code == 429
        assert int(held.headers["retry-after"]) >= 1
        assert held.json()["error"]["code"] == "retry_later"
        assert httpx.post(url, json=ask()).status_code == 401
        kit.budget.settle(
            task_id=task.id, reservation_id="rheld", reserved=Decimal("0.0099"), actual=Decimal(0)
        )
        ok = httpx.post(url, json=ask(), headers={"Authorization": f"Bearer {kit.capability(task)}"})
        assert ok.status_code == 200
        assert set(ok.json()["steward"]) == {"cost_usd", "remaining_usd", "max_tokens"}


def test_the_runners_surface_lowers_max_tokens_to_the_models_limit_where_bedrocks_refuses(
    kit: RelayKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A price table of one's own may cap a model's output below what the runner asks for:
    Steward's own surface admits the model's limit and says so; the Bedrock surface answers
    as Bedrock would, naming the field."""
    import httpx  # noqa: PLC0415
    from steward import relay_handler, wiring  # noqa: PLC0415

    monkeypatch.setattr(wiring, "relay", lambda: kit.relay)
    task = kit.running_task(budget="1.00", model="scripted")
    limit = kit.relay.prices.entry("scripted").max_output_tokens
    headers = {"Authorization": f"Bearer {kit.capability(task)}"}
    with LambdaHttpServer(relay_handler.lambda_handler, kind="rest_api") as server:
        own = httpx.post(f"{server.url}/v1/relay/converse", json=ask(max_tokens=limit + 1), headers=headers)
        assert own.status_code == 200, own.text
        assert own.json()["steward"]["max_tokens"] == limit
        bedrock = httpx.post(
            f"{server.url}/model/scripted/converse", json=ask(max_tokens=limit + 1), headers=headers
        )
        assert bedrock.status_code == 400
        assert bedrock.json()["error"]["field"] == "inferenceConfig.maxTokens"


def test_the_capabilitys_own_ceiling_binds_below_the_tasks_budget(kit: RelayKit) -> None:
    task = kit.running_task(budget="1.00")
    token = kit.capability(task, max_budget_usd="0.0005")
    refused = None
    for _ in range(300):
        try:
            kit.call(task, token=token)
        except BudgetExhausted as exc:
            refused = exc
            break
    assert refused is not None, "a capability worth $0.0005 paid for 300 calls"
    cost, committed = kit.spent(task)
    assert cost == committed <= Decimal("0.0005")
    kit.call(task)  # the task's own budget still has room for a capability that allows it


BURST = 120


def test_a_burst_of_connections_to_the_relay_lambda_is_answered_never_reset(
    kit: RelayKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """120 callers connect at once (socketserver's default backlog of 5 reset about half of
    them): each is queued and answered, 200 while the budget lasts and 402 or 429 after."""
    from steward import relay_handler, wiring  # noqa: PLC0415

    monkeypatch.setattr(wiring, "relay", lambda: kit.relay)
    entry = load_price_table().entry("scripted")
    reserved = max_cost(entry, input_bound_tokens(payload_bytes(ConverseRequest.model_validate(ask()))), 64)
    cap = reserved * 5  # the relay admits about 5 calls before it refuses
    task = kit.running_task(budget=str(cap), slug="burst")
    headers = {"Authorization": f"Bearer {kit.capability(task)}", "Content-Type": "application/json"}
    body = json.dumps(ask())
    together = threading.Barrier(BURST, timeout=10)

    def call(url: str) -> int | str:
        address = urlsplit(url)
        together.wait()
        connection = http.client.HTTPConnection(address.netloc, timeout=30)
        try:
            connection.request("POST", "/v1/relay/converse", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException) as exc:  # a reset, a refusal, a broken pipe
            return type(exc).__name__
        finally:
            connection.close()

    with (
        LambdaHttpServer(relay_handler.lambda_handler, kind="rest_api") as server,
        ThreadPoolExecutor(BURST) as pool,
    ):
        answers = Counter(pool.map(call, [server.url] * BURST))
    assert set(answers) <= {200, 402, 429}, answers
    assert answers[200] >= 1, answers
    assert answers[402] + answers[429] >= 1, answers
    cost, committed = kit.spent(task)
    assert cost == committed <= cap
