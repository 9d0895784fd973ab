"""What the relay charges and what it forwards, against moto and through the relay Lambda's
HTTP adapter: a provider's over-report never breaks the ceiling, text that is not valid
Unicode is a 400 naming the field, and no credential Steward or GitHub issued reaches a
provider, while the generic shapes repositories hold in fixtures still pass."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from steward import relay_handler, wiring
from steward.adapters.dynamo import count_requests
from steward.adapters.providers.base import ProviderResult, converse_usage
from steward.adapters.ticket_store import TicketStore
from steward.domain.budget import Usage, cost_of, input_bound_tokens, max_cost, per_token
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.errors import BadRequest
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


HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"  # Claude Haiku 4.5 through its global inference profile  # priced cache reads and writes


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


# ---- item 5: text that is not valid Unicode is the caller's fault, never a 500


def _with_tool_use(tool_input: dict[str, Any]) -> dict[str, Any]:
    schema = {"json": {"type": "object"}}
    return {
        "messages": [
            {"role": "user", "content": [{"text": "go"}]},
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "t1", "name": "read_file", "input": tool_input}}],
            },
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "ok"}]}}]},
        ],
        "toolConfig": {"tools": [{"toolSpec": {"name": "read_file", "inputSchema": schema}}]},
        "inferenceConfig": {"maxTokens": 64},
    }


def _put(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`body` with `value` at the dotted `path` (a copy)."""
    body = json.loads(json.dumps(body))
    *parents, last = path.split(".")
    node: Any = body
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(last) if isinstance(node, list) else last] = value
    return body


# (case, a body as Python data holding a lone surrogate, the field the 400 must name); json.dumps
# writes each as a `\ud8xx` escape, as a client or a model's echo would send it.
SURROGATES: list[tuple[str, dict[str, Any], str]] = [
    ("message text", ask("hello \ud800 there"), "messages.0.content.0.text"),
    ("a lone low surrogate", ask("\udfff"), "messages.0.content.0.text"),
    ("system text", {**ask(), "system": [{"text": "be \udc00 brief"}]}, "system.0.text"),
    ("a tool argument", _with_tool_use({"path": "src/\ud83d.py"}), "messages.1.content.0.toolUse.input.path"),
    ("a tool argument's key", _with_tool_use({"pa\udc80th": "x"}), "messages.1.content.0.toolUse.input"),
    (
        "a nested tool argument",
        _with_tool_use({"a": [{"b": "\ud800"}]}),
        "messages.1.content.0.toolUse.input.a.0.b",
    ),
    (
        "a tool result",
        _put(_with_tool_use({"path": "x"}), "messages.2.content.0.toolResult.content.0.text", "\udbff"),
        "messages.2.content.0.toolResult.content.0.text",
    ),
    (
        "a stop sequence",
        _put(ask(), "inferenceConfig", {"maxTokens": 64, "stopSequences": ["\ud800"]}),
        "inferenceConfig.stopSequences.0",
    ),
]


def test_text_that_is_not_valid_unicode_is_a_400_naming_the_field_in_process_and_over_http(
    kit: RelayKit, served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = kit.running_task()
    token = kit.capability(task)
    provider = Provider()
    monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e: provider)
    for name, body, field in SURROGATES:
        raw = json.dumps(body)
        assert "\\ud" in raw, name  # sent as JSON's escape, as a client would send it
        with pytest.raises(BadRequest) as refused:
            kit.relay.converse(f"Bearer {token}", raw)
        assert refused.value.field == field, name
        answer = httpx.post(
            served,
            content=raw,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        assert answer.status_code == 400, (name, answer.text)
        assert answer.json()["error"]["field"] == field, name
        assert "UTF-8" in answer.json()["error"]["message"], name
    assert provider.calls == 0
    stored = item(kit, task)
    assert (stored["cost_usd"], stored["committed_usd"], stored["reservations"]) == (0, 0, {})


def test_a_models_answer_holding_a_lone_surrogate_is_answered_as_json_for_the_runner_to_judge(
    kit: RelayKit, served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = kit.running_task()
    reply = {
        "toolUse": {"toolUseId": "t1", "name": "write_file", "input": {"path": "a\ud800.py", "content": "x"}}
    }
    monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e: Provider(reply=reply))
    answer = httpx.post(served, json=ask(), headers={"Authorization": f"Bearer {kit.capability(task)}"})
    assert answer.status_code == 200, answer.text
    assert answer.content.isascii()  # the surrogate travels as an escape
    (block,) = answer.json()["output"]["message"]["content"]
    assert block["toolUse"]["input"]["path"] == "a\ud800.py"


# ---- item 6: credentials Steward or GitHub issued never reach a provider


def _token(prefix: str, length: int = 36) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


def _jwt(header: dict[str, Any], claims: dict[str, Any], signature: str = "c2lnbmF0dXJlLWJ5dGVz") -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header)}.{part(claims)}" + (f".{signature}" if signature else "")


def _places(secret: str) -> list[tuple[str, dict[str, Any], str]]:
    """`secret` in each place a body can carry text: (place, body, the field to name)."""
    return [
        ("message text", ask(f"please use {secret} now"), "messages.0.content.0.text"),
        ("system text", {**ask(), "system": [{"text": f"token={secret}"}]}, "system.0.text"),
        (
            "a tool argument",
            _with_tool_use({"content": f"x = '{secret}'\n"}),
            "messages.1.content.0.toolUse.input.content",
        ),
        ("a tool argument's key", _with_tool_use({secret: "x"}), "messages.1.content.0.toolUse.input"),
        (
            "a tool result",
            _put(
                _with_tool_use({"path": "x"}),
                "messages.2.content.0.toolResult.content.0.text",
                f"GITHUB_TOKEN={secret}",
            ),
            "messages.2.content.0.toolResult.content.0.text",
        ),
    ]


def test_credentials_are_refused_with_nothing_charged_while_fixture_shapes_pass(
    kit: RelayKit, served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = kit.running_task(budget="5.00")
    other = kit.running_task(slug="other-task")
    token = kit.capability(task)
    now = int(utcnow().timestamp())
    steward_claims = {
        "iss": "steward",
        "aud": "steward-runtime",
        "sub": "mallory",
        "iat": now,
        "exp": now + 60,
    }
    refused: list[tuple[str, str]] = [
        ("the bearer of this very call", token),
        ("another task's capability", kit.capability(other)),
        ("an expired capability", kit.capability(other, iat=now - 7000, exp=now - 100)),
        (
            "a token of this deployment's key with foreign claims",
            kit.signer.mint({"iss": "elsewhere", "sub": "x"}),
        ),
        (
            "a capability's claims, unsigned, under an unknown key",
            _jwt({"alg": "ES256", "kid": "k-1"}, steward_claims, ""),
        ),
        (
            "a capability whose audience is a list",
            _jwt({"alg": "ES256", "typ": "JWT"}, {**steward_claims, "aud": ["a", "steward-runtime"]}),
        ),
        ("a ticket the control plane issued", TicketStore(kit.services.tables).issue(other.id, now=utcnow())),
        *[(f"a {prefix} token", _token(prefix)) for prefix in ("ghs_", "gho_", "ghp_", "ghu_", "ghr_")],
        ("an installation token with . and -", _token("ghs_", 30) + ".-_" + _token("", 40)),
        ("a fine-grained token", "github_pat_" + _token("", 22) + "_" + _token("", 59)),
        (
            "a Basic header of x-access-token",
            "Basic " + base64.b64encode(f"x-access-token:{_token('ghs_')}".encode()).decode(),
        ),
    ]
    passing: list[tuple[str, str]] = [
        (
            "jwt.io's example JWT",
            _jwt(
                {"alg": "HS256", "typ": "JWT"}, {"sub": "1234567890", "name": "John Doe", "iat": 1516239022}
            ),
        ),
        (
            "an ES256 JWT of another issuer",
            _jwt(
                {"alg": "ES256", "typ": "JWT", "kid": "abc"}, {"iss": "https://id.example.com", "aud": "api"}
            ),
        ),
        ("AWS's example access key", "AKIAIOSFODNN7EXAMPLE"),
        ("AWS's example secret key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("URL userinfo", "git clone https://user:pass@host.example/repo.git"),
        ("a bare 43-character urlsafe token", secrets.token_urlsafe(32)),
        (
            "a SHA-256 digest in base64url",
            base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("="),
        ),
        ("a bearer placeholder", "Authorization: Bearer <capability>"),
        ("a short gh prefix", "ghs_short and gh_pr_list"),
        ("a ticket's prefix alone", "stwt_ is the ticket prefix"),
    ]
    provider = Provider()
    monkeypatch.setattr(kit.relay, "provider_for", lambda _m, _e: provider)
    authorization = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for kind, secret in refused:
        cases = _places(secret)
        # The same, with JSON escapes for the first characters: what is read is what counts.
        first_place, first_body, first_field = cases[0]
        spelled = "".join(f"\\u{ord(c):04x}" for c in secret[:2]) + json.dumps(secret)[3:-1]
        escaped = json.dumps(first_body).replace(json.dumps(secret)[1:-1], spelled, 1)
        assert escaped != json.dumps(first_body)
        sent = [(p, json.dumps(b), f) for p, b, f in cases] + [
            (f"{first_place}, escaped", escaped, first_field)
        ]
        for place, raw, field in sent:
            with count_requests(kit.services.tables) as requests, pytest.raises(BadRequest) as error:
                kit.relay.converse(f"Bearer {token}", raw)
            assert error.value.field == field, (kind, place)
            assert secret not in error.value.message, (kind, place)
            assert secret not in (error.value.field or ""), (kind, place)
            assert sum(requests.values()) == 0, (kind, place)  # refused before anything is stored
        answer = httpx.post(served, content=json.dumps(cases[0][1]), headers=authorization)
        assert answer.status_code == 400, (kind, answer.text)
        assert answer.json()["error"]["field"] == cases[0][2], kind
        assert secret not in answer.text, kind
    assert provider.calls == 0
    assert item(kit, task)["committed_usd"] == 0
    for kind, fixture in passing:  # each in every place at once
        body = _put(_with_tool_use({"content": fixture, fixture: "x"}), "system", [{"text": fixture}])
        body = _put(body, "messages.0.content.0.text", fixture)
        body = _put(body, "messages.2.content.0.toolResult.content.0.text", fixture)
        answer = httpx.post(served, content=json.dumps(body), headers=authorization)
        assert answer.status_code == 200, (kind, answer.text)
    assert provider.calls == len(passing)
