"""Stock clients against the relay, as their users run them: boto3's `bedrock-runtime` with
nothing but the documented environment (endpoint, bearer token, region, CA bundle) over the
local stack's HTTPS, and the openai SDK with the capability as its API key. Every call goes
through the one admission, reservation and settlement; the budget is read back from the
task, not from what the client was told."""

from __future__ import annotations

import base64
import io
import json
import logging
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import botocore.exceptions
import httpx
import pytest
from botocore.config import Config
from steward import relay_handler, wiring
from steward.adapters.brake_store import BrakeStore
from steward.adapters.price_file import load_price_table
from steward.domain.budget import input_bound_tokens, max_cost
from steward.domain.converse import ConverseRequest, payload_bytes
from steward.domain.models import Task, utcnow
from steward.domain.routes import RELAY_BINARY_MEDIA_TYPES
from steward.local import tls
from steward.local.http_adapter import LambdaHttpServer
from steward.local.http_base import LocalHandler
from steward.services.brake import CachedBrake
from steward.wiring import Services

from tests.support.relay import RelayKit, build_relay

TOOLS_MODEL = "scripted-tools"  # the scripted provider's tool-then-stop policy
HELLO = [{"role": "user", "content": [{"text": "Say hello."}]}]
WEATHER_TOOL = {
    "toolSpec": {
        "name": "get_weather",
        "description": "The weather in a city",
        "inputSchema": {
            "json": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        },
    }
}


@dataclass
class Relay:
    kit: RelayKit
    url: str
    ca_bundle: Path
    monkeypatch: pytest.MonkeyPatch

    def bedrock(
        self, task: Task, *, token: str | None = None, retries: int | None = None, pool: int = 10
    ) -> Any:
        """A stock bedrock-runtime client configured only by the environment."""
        self.monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", self.url)
        self.monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", token or self.kit.capability(task))
        self.monkeypatch.setenv("AWS_CA_BUNDLE", str(self.ca_bundle))
        retry = {"retries": {"max_attempts": retries, "mode": "standard"}} if retries else {}
        config = Config(max_pool_connections=pool, **retry)
        return boto3.session.Session().client("bedrock-runtime", config=config)

    @property
    def tls_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_bundle))

    def openai(self, task: Task, **kwargs: Any) -> Any:
        import openai  # noqa: PLC0415

        return openai.OpenAI(
            api_key=self.kit.capability(task),
            base_url=f"{self.url}/v1",
            http_client=httpx.Client(verify=self.tls_context),
            **kwargs,
        )


@pytest.fixture
def relay(services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Relay]:
    kit = build_relay(services)
    monkeypatch.setattr(wiring, "relay", lambda: kit.relay)
    secured = tls.create(tmp_path / "state")
    with LambdaHttpServer(
        relay_handler.lambda_handler,
        kind="rest_api",
        tls=secured.context,
        binary_media_types=RELAY_BINARY_MEDIA_TYPES,  # as in AWS: every request body in base64
    ) as server:
        assert server.url.startswith("https://")
        yield Relay(kit, server.url, secured.ca_bundle, monkeypatch)


def calls_worth(calls: int, max_tokens: int = 64, messages: list[dict[str, Any]] = HELLO) -> Decimal:
    """A budget that pays for about `calls` reservations of `messages` at `max_tokens`."""
    entry = load_price_table().entry("scripted")
    request = ConverseRequest.model_validate({"messages": messages})
    return (max_cost(entry, input_bound_tokens(payload_bytes(request)), max_tokens) * calls).quantize(
        Decimal("0.000001")
    )


# ---- Bedrock Runtime: converse


def test_boto3_converse_is_admitted_settled_and_reports_its_cost_in_headers(relay: Relay) -> None:
    task = relay.kit.running_task()
    client = relay.bedrock(task)
    answer = client.converse(modelId="scripted", messages=HELLO, inferenceConfig={"maxTokens": 64})
    assert answer["output"]["message"]["role"] == "assistant"
    assert answer["output"]["message"]["content"][0]["text"]
    assert answer["stopReason"] == "end_turn"
    assert answer["usage"]["outputTokens"] >= 1
    headers = answer["ResponseMetadata"]["HTTPHeaders"]
    cost, committed = relay.kit.spent(task)
    assert cost == committed == Decimal(headers["x-steward-cost-usd"]) > 0
    assert Decimal(headers["x-steward-remaining-usd"]) == Decimal("1.00") - cost


def test_boto3_sends_the_capability_as_a_bearer_and_a_garbage_one_is_refused(relay: Relay) -> None:
    task = relay.kit.running_task()
    client = relay.bedrock(task, token="not-a-capability")
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client.converse(modelId="scripted", messages=HELLO)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 401
    assert relay.kit.spent(task) == (0, 0)


def test_boto3_tool_use_round_trip(relay: Relay) -> None:
    task = relay.kit.running_task(model=TOOLS_MODEL)
    client = relay.bedrock(task)
    tools = {"tools": [WEATHER_TOOL], "toolChoice": {"any": {}}}
    first = client.converse(modelId=TOOLS_MODEL, messages=HELLO, toolConfig=tools)
    assert first["stopReason"] == "tool_use"
    use = first["output"]["message"]["content"][0]["toolUse"]
    assert use["name"] == "get_weather"
    assert isinstance(use["input"], dict)
    history = [
        *HELLO,
        first["output"]["message"],
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": use["toolUseId"], "content": [{"json": {"sunny": True}}]}}
            ],
        },
    ]
    second = client.converse(modelId=TOOLS_MODEL, messages=history, toolConfig=tools)
    assert second["stopReason"] == "end_turn"
    assert "done after tool results" in second["output"]["message"]["content"][0]["text"]
    cost, committed = relay.kit.spent(task)
    assert cost == committed > 0


def test_boto3_another_model_id_is_refused_by_the_pin(relay: Relay) -> None:
    task = relay.kit.running_task()
    client = relay.bedrock(task)
    for model in ("anthropic.claude-3-haiku-20240307-v1:0", "arn:aws:bedrock:us-east-1::foundation-model/x"):
        with pytest.raises(client.exceptions.AccessDeniedException):
            client.converse(modelId=model, messages=HELLO)
    assert relay.kit.spent(task) == (0, 0)


def test_a_model_id_is_decoded_once_from_its_percent_encoded_path(relay: Relay) -> None:
    """An ARN holds `/` and `:`; boto3 percent-encodes it into one path segment. Decoded once
    it matches the capability's pin (and is then refused only for want of a price);
    encoded twice it is another model."""
    arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.scripted"
    task = relay.kit.running_task()
    token = relay.kit.capability(task, model_id=arn)

    def post(segment: str) -> httpx.Response:
        return httpx.post(
            f"{relay.url}/model/{segment}/converse",
            json={"messages": HELLO},
            headers={"Authorization": f"Bearer {token}"},
            verify=relay.tls_context,
        )

    once, twice = post(quote(arn, safe="")), post(quote(quote(arn, safe=""), safe=""))
    assert (once.status_code, twice.status_code) == (403, 403)
    assert once.headers["x-amzn-errortype"] == twice.headers["x-amzn-errortype"] == "AccessDeniedException"
    assert "not in the price table" in once.json()["message"]
    assert twice.json()["message"] == "the capability is pinned to another model"
    assert twice.json()["error"]["field"] == "modelId"
    assert relay.kit.spent(task) == (0, 0)


def test_boto3_budget_refusal_raises_the_documented_exception_and_charges_nothing(relay: Relay) -> None:
    task = relay.kit.running_task(budget="0.000001")
    client = relay.bedrock(task)
    with pytest.raises(client.exceptions.ServiceQuotaExceededException) as refused:
        client.converse(modelId="scripted", messages=HELLO, inferenceConfig={"maxTokens": 64})
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 402
    assert refused.value.response["Error"]["Message"] == "the task's budget is spent"
    assert relay.kit.spent(task) == (0, 0)


def test_boto3_retries_a_429_after_x_amz_retry_after_and_is_then_admitted(relay: Relay) -> None:
    task = relay.kit.running_task(budget=str(calls_worth(1)))
    held = calls_worth(1) - Decimal("0.000001")
    relay.kit.reserve(task, "rheld", cost=held)
    client = relay.bedrock(task, retries=3)
    statuses: list[int] = []

    def needs_retry(response: Any = None, **_: Any) -> None:
        http_response = response[0] if response else None
        if http_response is None:
            return
        statuses.append(http_response.status_code)
        if http_response.status_code == 429:  # the call in flight ends before the client retries
            assert int(http_response.headers["x-amz-retry-after"]) >= 1000
            relay.kit.budget.settle(task_id=task.id, reservation_id="rheld", reserved=held, actual=Decimal(0))

    client.meta.events.register("needs-retry.bedrock-runtime.Converse", needs_retry)
    answer = client.converse(modelId="scripted", messages=HELLO, inferenceConfig={"maxTokens": 64})
    assert statuses == [429, 200]
    assert answer["ResponseMetadata"]["RetryAttempts"] == 1
    cost, committed = relay.kit.spent(task)
    assert cost == committed > 0


# ---- Bedrock Runtime: converse-stream


def stream_events(answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, body) for event in answer["stream"] for name, body in event.items()]


def test_boto3_converse_stream_yields_bedrocks_events_and_is_settled_by_the_last_one(relay: Relay) -> None:
    task = relay.kit.running_task()
    client = relay.bedrock(task)
    answer = client.converse_stream(
        modelId="scripted",
        messages=[{"role": "user", "content": [{"text": "Say hello at some length, " * 8}]}],
        inferenceConfig={"maxTokens": 256},
    )
    events = stream_events(answer)
    names = [name for name, _ in events]
    assert names[0] == "messageStart"
    assert names[-2:] == ["messageStop", "metadata"]
    assert names.count("contentBlockDelta") > 1
    text = "".join(body["delta"]["text"] for name, body in events if name == "contentBlockDelta")
    assert "Say hello at some length" in text
    usage = events[-1][1]["usage"]
    assert usage["outputTokens"] >= 1
    cost, committed = relay.kit.spent(task)
    assert cost == committed == Decimal(answer["ResponseMetadata"]["HTTPHeaders"]["x-steward-cost-usd"]) > 0


def test_boto3_converse_stream_carries_a_tool_use(relay: Relay) -> None:
    task = relay.kit.running_task(model=TOOLS_MODEL)
    client = relay.bedrock(task)
    answer = client.converse_stream(
        modelId=TOOLS_MODEL, messages=HELLO, toolConfig={"tools": [WEATHER_TOOL], "toolChoice": {"any": {}}}
    )
    events = stream_events(answer)
    start = next(body for name, body in events if name == "contentBlockStart")
    assert start["start"]["toolUse"]["name"] == "get_weather"
    arguments = "".join(
        body["delta"]["toolUse"]["input"] for name, body in events if name == "contentBlockDelta"
    )
    assert isinstance(json.loads(arguments), dict)
    assert next(body for name, body in events if name == "messageStop")["stopReason"] == "tool_use"


def test_a_stream_refused_for_budget_is_an_http_error_before_any_event(relay: Relay) -> None:
    task = relay.kit.running_task(budget="0.000001")
    client = relay.bedrock(task)
    with pytest.raises(client.exceptions.ServiceQuotaExceededException):
        client.converse_stream(modelId="scripted", messages=HELLO)
    assert relay.kit.spent(task) == (0, 0)


def test_a_client_that_hangs_up_after_the_first_event_is_still_settled(relay: Relay) -> None:
    task = relay.kit.running_task()
    client = relay.bedrock(task)
    answer = client.converse_stream(
        modelId="scripted", messages=[{"role": "user", "content": [{"text": "long " * 200}]}]
    )
    first = next(iter(answer["stream"]))
    assert "messageStart" in first
    answer["stream"].close()
    cost, committed = relay.kit.spent(task)
    assert cost == committed > 0


STREAMS = 100


def test_a_hundred_concurrent_streams_on_one_task_never_commit_above_the_cap(relay: Relay) -> None:
    """100 stock clients stream at once against a cap that pays for 10 reservations: committed
    (sampled throughout) never passes the cap, every stream either ends with its metadata
    or was refused with an HTTP status before it began, and nothing is left reserved."""
    cap = calls_worth(10)
    task = relay.kit.running_task(budget=str(cap), slug="streams")
    client = relay.bedrock(task, retries=1, pool=STREAMS)
    together = threading.Barrier(STREAMS, timeout=30)
    stop = threading.Event()
    seen: list[Decimal] = []

    def sample() -> None:
        while not stop.wait(0.005):
            seen.append(relay.kit.spent(task)[1])

    def call(_: int) -> str:
        together.wait()
        try:
            answer = client.converse_stream(
                modelId="scripted", messages=HELLO, inferenceConfig={"maxTokens": 64}
            )
        except botocore.exceptions.ClientError as exc:
            return str(exc.response["ResponseMetadata"]["HTTPStatusCode"])
        names = [name for name, _ in stream_events(answer)]
        return "streamed" if names[-1] == "metadata" else "cut"

    sampler = threading.Thread(target=sample)
    sampler.start()
    with ThreadPoolExecutor(STREAMS) as pool:
        outcomes = Counter(pool.map(call, range(STREAMS)))
    stop.set()
    sampler.join()
    assert set(outcomes) <= {"streamed", "402", "429"}, outcomes
    assert outcomes["streamed"] >= 10, outcomes  # the cap pays for 10 full reservations at least
    assert outcomes["402"] + outcomes["429"] >= 1, outcomes  # and not for a hundred calls
    assert max(seen, default=Decimal(0)) <= cap
    cost, committed = relay.kit.spent(task)
    assert cost == committed <= cap


def test_the_brake_refuses_both_clients_with_503_and_charges_nothing(relay: Relay) -> None:
    import openai  # noqa: PLC0415

    store = BrakeStore(relay.kit.services.tables)
    relay.kit.relay.brake = CachedBrake(store.read, ttl=0).engaged
    task = relay.kit.running_task()
    store.engage(reason="incident", by="operator", now=utcnow())
    client = relay.bedrock(task, retries=1)
    with pytest.raises(client.exceptions.ServiceUnavailableException) as braked:
        client.converse_stream(modelId="scripted", messages=HELLO)
    assert braked.value.response["Error"]["Message"].startswith("the operators' brake is engaged")
    with pytest.raises(openai.InternalServerError) as refused:
        relay.openai(task).chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}]
        )
    assert (refused.value.status_code, refused.value.code) == (503, "brake_engaged")
    assert relay.kit.spent(task) == (0, 0)
    store.release(by="operator", now=utcnow())
    assert relay.bedrock(task).converse(modelId="scripted", messages=HELLO)["stopReason"] == "end_turn"


LONG = "x" * 4200  # with scripted-pricey, leaves room in $0.4999 for fewer than 256 output tokens
TOO_LARGE = [  # every relay surface: (path, body, the error as the client reads it, the field to lower)
    (
        "/v1/relay/converse",
        {"messages": [{"role": "user", "content": [{"text": LONG}]}]},
        lambda body: (body["error"]["code"], body["error"]["message"]),
        "inferenceConfig.maxTokens",
    ),
    (
        "/model/scripted-pricey/converse",
        {"messages": [{"role": "user", "content": [{"text": LONG}]}]},
        lambda body: (body["error"]["code"], body["message"]),
        "inferenceConfig.maxTokens",
    ),
    (
        "/model/scripted-pricey/converse-stream",
        {"messages": [{"role": "user", "content": [{"text": LONG}]}]},
        lambda body: (body["error"]["code"], body["message"]),
        "inferenceConfig.maxTokens",
    ),
    (
        "/v1/chat/completions",
        {"model": "scripted-pricey", "messages": [{"role": "user", "content": LONG}]},
        lambda body: (body["error"]["code"], body["error"]["message"]),
        "max_tokens",
    ),
]


@pytest.mark.parametrize(("path", "body", "read", "field"), TOO_LARGE)
def test_a_call_too_large_for_what_is_left_is_a_402_of_its_own_on_every_surface(
    relay: Relay, path: str, body: dict[str, Any], read: Any, field: str
) -> None:
    task = relay.kit.running_task(budget="0.50", model="scripted-pricey")
    spent = Decimal("0.0001")
    relay.kit.reserve(task, "rspent", cost=spent)
    relay.kit.budget.settle(task_id=task.id, reservation_id="rspent", reserved=spent, actual=spent)
    answer = httpx.post(
        relay.url + path,
        json=body,
        headers={"Authorization": f"Bearer {relay.kit.capability(task)}"},
        verify=relay.tls_context,
    )
    assert answer.status_code == 402, answer.text
    code, message = read(answer.json())
    assert code == "call_exceeds_budget"
    assert "the $0.4999 left of the task's budget" in message
    assert f"send {field} of at most " in message
    if path.startswith("/model/"):
        assert answer.headers["x-amzn-ErrorType"] == "ServiceQuotaExceededException"
    if path == "/v1/chat/completions":
        assert answer.json()["error"]["type"] == "insufficient_quota"
        assert answer.headers["x-should-retry"] == "false"
    assert relay.kit.spent(task) == (spent, spent)


@contextmanager
def relay_log() -> Iterator[io.StringIO]:
    """What the relay handler's logger writes while the block runs, formatted as it writes it."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(relay_handler.logger.registered_formatter)
    logger = logging.getLogger(relay_handler.logger.name)
    logger.addHandler(handler)
    try:
        yield out
    finally:
        logger.removeHandler(handler)


BRAKED_CALLS = [  # every relay surface: (path, body)
    ("/v1/relay/converse", {"messages": HELLO}),
    ("/model/scripted/converse", {"messages": HELLO}),
    ("/model/scripted/converse-stream", {"messages": HELLO}),
    ("/v1/chat/completions", {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}),
]


def test_a_brake_refusal_is_logged_as_a_refusal_never_an_error_with_a_traceback(relay: Relay) -> None:
    store = BrakeStore(relay.kit.services.tables)
    relay.kit.relay.brake = CachedBrake(store.read, ttl=0).engaged
    task = relay.kit.running_task()
    token = relay.kit.capability(task)
    store.engage(reason="incident", by="operator", now=utcnow())
    try:
        for path, body in BRAKED_CALLS:
            with relay_log() as out:
                answer = httpx.post(
                    relay.url + path,
                    json=body,
                    headers={"Authorization": f"Bearer {token}"},
                    verify=relay.tls_context,
                )
            assert answer.status_code == 503, (path, answer.text)
            lines = [json.loads(line) for line in out.getvalue().splitlines()]
            assert [line["level"] for line in lines] == ["WARNING"], (path, lines)
            assert "brake" in lines[0]["message"], (path, lines)
            assert "exception" not in lines[0], path
            assert "Traceback" not in out.getvalue(), path
            assert token not in out.getvalue()
    finally:
        store.release(by="operator", now=utcnow())


def test_an_unknown_route_answers_404_json_never_500(relay: Relay) -> None:
    task = relay.kit.running_task()
    for path in ("/model/scripted/invoke", "/v1/completions", "/nothing", "/model//converse"):
        answer = httpx.post(
            relay.url + path,
            json={},
            headers={"Authorization": f"Bearer {relay.kit.capability(task)}"},
            verify=relay.tls_context,
        )
        assert answer.status_code in (404, 400), (path, answer.status_code)
        assert "error" in answer.json()


# ---- OpenAI-compatible: chat.completions


def test_openai_chat_completion_is_admitted_settled_and_reports_its_cost(relay: Relay) -> None:
    task = relay.kit.running_task()
    client = relay.openai(task)
    raw = client.chat.completions.with_raw_response.create(
        model="scripted", messages=[{"role": "user", "content": "Say hello."}], max_tokens=64
    )
    answer = raw.parse()
    assert answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert answer.usage.completion_tokens >= 1
    cost, committed = relay.kit.spent(task)
    assert cost == committed == Decimal(raw.headers["x-steward-cost-usd"]) > 0
    assert Decimal(raw.headers["x-steward-remaining-usd"]) == Decimal("1.00") - cost
    assert [m.id for m in client.models.list()] == ["scripted"]


@pytest.mark.parametrize("include_usage", [True, False])
def test_openai_streamed_completion_ends_with_done_and_usage_when_asked(
    relay: Relay, include_usage: bool
) -> None:
    task = relay.kit.running_task()
    client = relay.openai(task)
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(
        client.chat.completions.create(
            model="scripted",
            messages=[{"role": "user", "content": "Say hello, at some length please."}],
            max_completion_tokens=64,
            stream=True,
            **options,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == (1 if include_usage else 0)
    cost, committed = relay.kit.spent(task)
    assert cost == committed > 0  # settled as soon as the client has the last chunk


def test_the_stock_openai_sdk_keeps_its_connection_across_streamed_calls(relay: Relay) -> None:
    """The SDK stops reading a stream at `data: [DONE]` and drops a connection whose body it
    left unread: unless the relay's stream ends so that the SDK meets `[DONE]` at the end of
    the body (`steward.domain.openai_chat:sse`), every streamed call opens a new connection
    (a TCP and a TLS handshake through API Gateway)."""
    import openai  # noqa: PLC0415

    connections: list[tuple[str, int]] = []

    def count(handler: LocalHandler) -> bool:
        connections.append(handler.client_address)  # one (address, port) per connection
        return False  # then served as usual

    task = relay.kit.running_task()
    with LambdaHttpServer(
        relay_handler.lambda_handler,
        kind="rest_api",
        binary_media_types=RELAY_BINARY_MEDIA_TYPES,
        front=count,
    ) as server:
        client = openai.OpenAI(api_key=relay.kit.capability(task), base_url=f"{server.url}/v1", max_retries=0)
        for _ in range(3):
            chunks = list(
                client.chat.completions.create(
                    model="scripted",
                    messages=[{"role": "user", "content": "Say hello."}],
                    max_completion_tokens=64,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
            assert [c.usage for c in chunks if c.usage is not None] != []
        client.close()
    assert len(connections) == 3
    assert len(set(connections)) == 1, "each streamed call opened a new connection"


def test_openai_tool_calls_round_trip(relay: Relay) -> None:
    task = relay.kit.running_task(model=TOOLS_MODEL)
    client = relay.openai(task)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city",
                "parameters": WEATHER_TOOL["toolSpec"]["inputSchema"]["json"],  # type: ignore[index]
            },
        }
    ]
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(
        model=TOOLS_MODEL, messages=messages, tools=tools, tool_choice="required"
    )
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = client.chat.completions.create(model=TOOLS_MODEL, messages=messages, tools=tools)
    assert "done after tool results" in (second.choices[0].message.content or "")


def test_openai_budget_refusal_raises_without_retrying_and_charges_nothing(relay: Relay) -> None:
    import openai  # noqa: PLC0415

    task = relay.kit.running_task(budget="0.000001")
    client = relay.openai(task)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 402
    assert refused.value.code == "budget_exhausted"
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert relay.kit.spent(task) == (0, 0)


def test_openai_another_model_and_n_are_refused_naming_the_field(relay: Relay) -> None:
    import openai  # noqa: PLC0415

    task = relay.kit.running_task()
    client = relay.openai(task, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError) as pinned:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert pinned.value.param == "model"  # type: ignore[attr-defined]
    with pytest.raises(openai.BadRequestError) as many:
        client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "hi"}], n=2)
    assert many.value.param == "n"  # type: ignore[attr-defined]
    assert relay.kit.spent(task) == (0, 0)


# ---- hostile requests and answers (review findings kept as data: a new attack is one line)

GITHUB_TOKEN = "ghp_" + "A" * 36
ESCAPED = "\\u0067" + GITHUB_TOKEN[1:]  # `g` as a JSON escape inside the arguments string


def chat_with_arguments(arguments: str) -> dict[str, Any]:
    return {
        "model": TOOLS_MODEL,
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        ],
    }


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


# (path, body, expected status, expected field or None); the token is the task's capability.
HOSTILE_REQUESTS: list[tuple[str, Any, int, str | None]] = [
    ("/v1/chat/completions", chat_with_arguments('{"city": "' + ESCAPED + '"}'), 400, None),
    ("/v1/chat/completions", chat_with_arguments('{"city": "\\ud800"}'), 400, None),
    (
        "/v1/chat/completions",
        chat_with_arguments("[" * 100_000),
        400,
        "messages.1.tool_calls.0.function.arguments",
    ),
    ("/v1/chat/completions", chat_with_arguments(json.dumps(nested(100))), 400, None),
    (
        f"/model/{TOOLS_MODEL}/converse",
        {
            "messages": [
                {"role": "user", "content": [{"text": "go"}]},
                {
                    "role": "assistant",
                    "content": [{"toolUse": {"toolUseId": "t", "name": "get_weather", "input": nested(300)}}],
                },
                {
                    "role": "user",
                    "content": [{"toolResult": {"toolUseId": "t", "content": [{"text": "ok"}]}}],
                },
            ],
            "toolConfig": {"tools": [WEATHER_TOOL]},
        },
        400,
        None,
    ),
    ("/v1/relay/converse", {"messages": HELLO, "system": [{"text": "x"}], "extra": nested(500)}, 400, None),
    (f"/model/{TOOLS_MODEL}/converse", {"messages": HELLO, "modelId": "another-model"}, 403, "modelId"),
    # An issued credential disguised, or split across text blocks (the screen's own table of
    # disguises is in tests/unit/test_redaction.py): refused on every surface.
    (
        "/v1/relay/converse",
        {"messages": [{"role": "user", "content": [{"text": GITHUB_TOKEN[:9]}, {"text": GITHUB_TOKEN[9:]}]}]},
        400,
        "messages.0.content",
    ),
    (
        f"/model/{TOOLS_MODEL}/converse",
        {
            "messages": [
                {"role": "user", "content": [{"text": "keep " + GITHUB_TOKEN[:9]}]},
                {"role": "assistant", "content": [{"text": GITHUB_TOKEN[9:]}]},
                {"role": "user", "content": [{"text": "go on"}]},
            ]
        },
        400,
        "body",
    ),
    (
        f"/model/{TOOLS_MODEL}/converse-stream",
        {
            "messages": [
                {"role": "user", "content": [{"text": base64.b64encode(GITHUB_TOKEN.encode()).decode()}]}
            ]
        },
        400,
        "messages.0.content.0.text",
    ),
    (
        "/v1/chat/completions",
        {
            "model": TOOLS_MODEL,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": GITHUB_TOKEN[:5]},
                        {"type": "text", "text": GITHUB_TOKEN[5:]},
                    ],
                }
            ],
        },
        400,
        "messages.0.content",
    ),
    (
        "/v1/chat/completions",
        {
            "model": TOOLS_MODEL,
            "messages": [{"role": "user", "content": "\uff47\uff48\uff50_\u200b" + GITHUB_TOKEN[4:]}],
        },
        400,
        "messages.0.content",
    ),
]


@pytest.mark.parametrize(("path", "body", "status", "field"), HOSTILE_REQUESTS)
def test_hostile_requests_are_refused_before_the_provider_and_charge_nothing(
    relay: Relay, path: str, body: Any, status: int, field: str | None
) -> None:
    calls: list[object] = []
    real = relay.kit.relay.provider_for
    relay.kit.relay.provider_for = lambda *a: calls.append(a) or real(*a)  # type: ignore[func-returns-value]
    task = relay.kit.running_task(model=TOOLS_MODEL)
    token = relay.kit.capability(task)
    answer = httpx.post(
        relay.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, verify=relay.tls_context
    )
    assert answer.status_code == status, answer.text
    if field is not None:
        assert answer.json()["error"]["field"] == field
    assert GITHUB_TOKEN not in answer.text
    assert token not in answer.text
    assert calls == []
    assert relay.kit.spent(task) == (0, 0)


class Scripted:
    """A provider that answers what the test says and counts its calls."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, 0

    def __call__(self, model_id: str, entry: Any) -> Scripted:
        return self

    def converse(self, request: Any, *, max_tokens: int) -> Any:
        from steward.adapters.providers import ProviderResult  # noqa: PLC0415
        from steward.domain.budget import Usage  # noqa: PLC0415

        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        usage = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15}
        return ProviderResult({**self.answer, "usage": usage, "metrics": {"latencyMs": 1}}, Usage(10, 5))


def message(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"output": {"message": {"role": "assistant", "content": list(blocks)}}, "stopReason": "end_turn"}


def test_a_models_odd_answer_is_streamed_once_and_charged_once(relay: Relay) -> None:
    """A lone surrogate travels escaped and a reasoning block is left out: never a 5xx a
    client would retry (and be charged for again)."""
    reasoning = {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}
    provider = Scripted(message(reasoning, {"text": "odd \ud800 text"}))
    relay.kit.relay.provider_for = provider
    task = relay.kit.running_task()
    events = stream_events(relay.bedrock(task, retries=3).converse_stream(modelId="scripted", messages=HELLO))
    text = "".join(body["delta"]["text"] for name, body in events if name == "contentBlockDelta")
    assert text == "odd \ud800 text"
    chunks = list(
        relay.openai(task).chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "odd \ud800 text"
    assert provider.calls == 2
    cost, committed = relay.kit.spent(task)
    assert cost == committed > 0


def test_an_answer_that_cannot_be_streamed_after_settlement_is_an_exception_frame_never_retried(
    relay: Relay,
) -> None:
    provider = Scripted(message({"text": "a", "toolUse": {"toolUseId": "t", "name": "n", "input": {}}}))
    relay.kit.relay.provider_for = provider
    task = relay.kit.running_task()
    answer = relay.bedrock(task, retries=3).converse_stream(modelId="scripted", messages=HELLO)
    with pytest.raises(botocore.exceptions.EventStreamError) as failed:
        stream_events(answer)
    assert failed.value.response["Error"]["Code"] == "modelStreamErrorException"
    assert provider.calls == 1


def test_an_unknown_provider_outcome_is_charged_once_and_neither_client_retries(relay: Relay) -> None:
    import openai  # noqa: PLC0415
    from steward.domain.errors import ProviderOutcomeUnknown  # noqa: PLC0415

    provider = Scripted(ProviderOutcomeUnknown("scripted: the answer never came"))
    relay.kit.relay.provider_for = provider
    task = relay.kit.running_task()
    client = relay.bedrock(task, retries=3)
    with pytest.raises(client.exceptions.ModelTimeoutException) as timed_out:
        client.converse(modelId="scripted", messages=HELLO)
    assert timed_out.value.response["ResponseMetadata"]["RetryAttempts"] == 0
    with pytest.raises(openai.InternalServerError) as unknown:
        relay.openai(task).chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "hi"}]
        )
    assert (unknown.value.status_code, unknown.value.code) == (502, "provider_outcome_unknown")
    assert provider.calls == 2  # one per client call: nothing retried
    cost, committed = relay.kit.spent(task)
    assert cost == committed > 0  # each charged its reservation, as the relay must


def test_a_provider_error_is_bedrocks_424_and_releases_the_reservation(relay: Relay) -> None:
    from steward.domain.errors import ProviderError  # noqa: PLC0415

    relay.kit.relay.provider_for = Scripted(ProviderError("scripted: failure"))
    task = relay.kit.running_task()
    client = relay.bedrock(task, retries=3)
    with pytest.raises(client.exceptions.ModelErrorException) as failed:
        client.converse(modelId="scripted", messages=HELLO)
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert relay.kit.spent(task) == (0, 0)


def test_errors_on_a_path_with_a_trailing_slash_keep_the_clients_shape(relay: Relay) -> None:
    task = relay.kit.running_task(budget="0.000001")
    answer = httpx.post(
        f"{relay.url}/v1/chat/completions/",
        json={"model": "scripted", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {relay.kit.capability(task)}"},
        verify=relay.tls_context,
    )
    assert answer.status_code == 402
    assert answer.json()["error"]["type"] == "insufficient_quota"
    assert answer.headers["x-should-retry"] == "false"
