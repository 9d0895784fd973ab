"""Provider adapters against real parts: boto3 against a loopback Converse server, httpx against a
loopback Chat Completions server, moto for Secrets Manager, and the scripted provider.

No mocks of Steward code: every request crosses a real socket on 127.0.0.1.
"""

from __future__ import annotations

import copy
import json
import math
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from steward.adapters.price_file import load_price_table
from steward.adapters.providers import provider_for
from steward.adapters.providers.bedrock import ENDPOINT_ENV, BedrockProvider
from steward.adapters.providers.openai_compat import OpenAICompatProvider
from steward.adapters.providers.scripted import SLOW_ENV, ScriptedProvider
from steward.domain.budget import Usage, cost_of, input_bound_tokens, max_cost
from steward.domain.converse import ConverseRequest, Message, payload_bytes
from steward.domain.errors import ProviderError, ProviderOutcomeUnknown
from steward.domain.prices import PriceEntry
from steward.local.converse_server import ConverseServer, ErrorReply, ReceivedConverse, converse_response
from steward.local.openai_server import OpenAIError, OpenAIServer, ReceivedChat, chat_response

pytestmark = pytest.mark.integration

HAIKU = (
    "global.anthropic.claude-haiku-4-5-20251001-v1:0"  # Claude Haiku 4.5 through its global inference profile
)
SECRET_PROMPT = "the launch code is 0000-SWORDFISH"
API_KEY = "sk-test-7f3a9c1e5b2d4a6f8e0c"

REQUEST: dict[str, Any] = {
    "messages": [
        {"role": "user", "content": [{"text": f"Fix the bug. {SECRET_PROMPT} ✓"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "Reading it."},
                {
                    "toolUse": {
                        "toolUseId": "call_1",
                        "name": "read_file",
                        "input": {"path": "main.py", "n": None},
                    }
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "call_1",
                        "content": [{"text": "print(1)"}, {"json": {"lines": 1, "name": "é"}}],
                        "status": "error",
                    }
                },
                {"text": "Now run the tests."},
            ],
        },
    ],
    "system": [{"text": "You are careful."}, {"text": "Answer briefly."}],
    "toolConfig": {
        "tools": [
            {
                "toolSpec": {
                    "name": "read_file",
                    "description": "Read a file",
                    "inputSchema": {
                        "json": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                            "required": ["path", "limit"],
                        }
                    },
                }
            },
            {"toolSpec": {"name": "run_tests", "inputSchema": {"json": {"type": "object"}}}},
        ],
        "toolChoice": {"auto": {}},
    },
    "inferenceConfig": {"maxTokens": 4096, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
}


def _request(body: dict[str, Any] | None = None) -> ConverseRequest:
    return ConverseRequest.model_validate(body if body is not None else REQUEST)


def _user(text: str, **extra: Any) -> ConverseRequest:
    return ConverseRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"text": text}]}], **extra}
    )


def _free_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _leaks(exc: BaseException, *secrets: str) -> bool:
    rendered = "".join(traceback.format_exception(exc)) + repr(exc)
    return any(secret in rendered for secret in secrets)


# -- Bedrock -----------------------------------------------------------------------------------


@pytest.fixture
def converse_server() -> Iterator[ConverseServer]:
    with ConverseServer() as server:
        yield server


@pytest.fixture
def bedrock_env(converse_server: ConverseServer) -> dict[str, str]:
    return {**os.environ, ENDPOINT_ENV: converse_server.url}


def test_bedrock_sends_the_request_as_given_with_the_lowered_max_tokens(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    provider = provider_for(HAIKU, load_price_table().entry(HAIKU), environ=bedrock_env)
    assert isinstance(provider, BedrockProvider)
    result = provider.converse(_request(), max_tokens=123)

    [call] = converse_server.requests
    assert call.model_id == HAIKU  # boto3 percent-encodes the ':'; the server decodes it
    expected = copy.deepcopy({key: REQUEST[key] for key in ("messages", "system", "toolConfig")})
    expected["inferenceConfig"] = {**REQUEST["inferenceConfig"], "maxTokens": 123}
    assert call.body == expected
    assert call.headers["authorization"].startswith("AWS4-HMAC-SHA256 ")  # signed, accepted unverified
    assert result.response["output"]["message"]["role"] == "assistant"
    assert "ResponseMetadata" not in result.response


def test_bedrock_uses_the_provider_model_of_the_entry(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    us_profile = HAIKU.replace("global.", "us.", 1)
    entry = load_price_table().entry(HAIKU).model_copy(update={"provider_model": us_profile})
    provider_for(HAIKU, entry, environ=bedrock_env).converse(_user("hi"), max_tokens=5)
    assert converse_server.requests[0].model_id == us_profile
    assert converse_server.requests[0].body["inferenceConfig"] == {"maxTokens": 5}


def test_bedrock_usage_maps_to_usage_and_the_response_passes_through(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    answer = converse_response(
        content=[
            {"text": "Let me look."},
            {"toolUse": {"toolUseId": "tooluse_9", "name": "read_file", "input": {"path": "a.py"}}},
        ],
        stop_reason="tool_use",
        input_tokens=120,
        output_tokens=30,
        cache_read_tokens=900,
        cache_write_tokens=50,
        latency_ms=321,
    )
    converse_server.behaviour = lambda call: answer
    entry = load_price_table().entry(HAIKU)
    result = provider_for(HAIKU, entry, environ=bedrock_env).converse(_request(), max_tokens=64)
    assert result.usage == Usage(
        input_tokens=120, output_tokens=30, cache_read_tokens=900, cache_write_tokens=50
    )
    assert result.response == answer
    # 120 * 1.00 + 30 * 5.00 + 900 * 0.10 + 50 * 1.25, per million
    assert cost_of(entry, result.usage) == Decimal("0.0004225")


def test_bedrock_response_without_usage_has_usage_none(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    answer = converse_response(text="ok")
    del answer["usage"]
    converse_server.behaviour = lambda call: answer
    result = provider_for(HAIKU, load_price_table().entry(HAIKU), environ=bedrock_env).converse(
        _user("hi"), max_tokens=5
    )
    assert result.usage is None
    assert "usage" not in result.response


def test_bedrock_throttling_is_retried_then_a_provider_error_without_content(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    def throttle(call: ReceivedConverse) -> ErrorReply:
        # A service message that quotes the request must not travel further.
        return ErrorReply(
            "ThrottlingException", f"slow down: {call.body['messages'][0]['content'][0]['text']}"
        )

    converse_server.behaviour = throttle
    provider = provider_for(HAIKU, load_price_table().entry(HAIKU), environ=bedrock_env)
    with pytest.raises(ProviderError) as caught:
        provider.converse(_request(), max_tokens=10)
    assert caught.value.message == "bedrock: ThrottlingException"
    assert (caught.value.status, caught.value.code) == (502, "provider_error")
    assert not _leaks(caught.value, SECRET_PROMPT, "slow down")
    assert len(converse_server.requests) == 3  # standard retries: three attempts in total


def test_bedrock_validation_error_is_not_retried(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    converse_server.behaviour = lambda call: ErrorReply("ValidationException", f"bad input: {SECRET_PROMPT}")
    provider = provider_for(HAIKU, load_price_table().entry(HAIKU), environ=bedrock_env)
    with pytest.raises(ProviderError, match=r"^bedrock: ValidationException$") as caught:
        provider.converse(_request(), max_tokens=10)
    assert not _leaks(caught.value, SECRET_PROMPT)
    assert len(converse_server.requests) == 1


def test_bedrock_unreachable_is_a_provider_error() -> None:
    provider = BedrockProvider(HAIKU, environ={ENDPOINT_ENV: _free_port_url()}, max_attempts=1)
    with pytest.raises(ProviderError, match=r"^bedrock: EndpointConnectionError$") as caught:
        provider.converse(_request(), max_tokens=10)
    assert not _leaks(caught.value, SECRET_PROMPT)


def test_bedrock_refuses_max_tokens_below_one_before_sending(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    provider = provider_for(HAIKU, load_price_table().entry(HAIKU), environ=bedrock_env)
    with pytest.raises(ValueError, match="max_tokens"):
        provider.converse(_user("hi"), max_tokens=0)
    assert converse_server.requests == []


# -- OpenAI-compatible -------------------------------------------------------------------------


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


def _openai_entry(server: OpenAIServer, **overrides: Any) -> PriceEntry:
    fields: dict[str, Any] = {
        "provider": "openai",
        "provider_model": "qwen2.5-coder",
        "base_url": server.base_url,
        "api_key_env": "TEST_OPENAI_KEY",
        "input_per_mtok": Decimal("0.50"),
        "output_per_mtok": Decimal("1.50"),
        "cache_read_per_mtok": Decimal("0.25"),
        "max_output_tokens": 4096,
    }
    fields.update(overrides)
    return PriceEntry(**fields)


def test_openai_translates_the_request(openai_server: OpenAIServer) -> None:
    provider = provider_for(
        "local/qwen", _openai_entry(openai_server), environ={"TEST_OPENAI_KEY": API_KEY, "OTHER": "x"}
    )
    assert isinstance(provider, OpenAICompatProvider)
    provider.converse(_request(), max_tokens=321)

    [call] = openai_server.requests
    assert call.body == {
        "model": "qwen2.5-coder",
        "messages": [
            {"role": "system", "content": "You are careful.\n\nAnswer briefly."},
            {"role": "user", "content": f"Fix the bug. {SECRET_PROMPT} ✓"},
            {
                "role": "assistant",
                "content": "Reading it.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"main.py","n":null}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": 'Error: print(1)\n{"lines":1,"name":"é"}'},
            {"role": "user", "content": "Now run the tests."},
        ],
        "max_tokens": 321,
        "stream": False,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file",
                    "parameters": REQUEST["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"],
                },
            },
            {"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}},
        ],
        "tool_choice": "auto",
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": ["END"],
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"auto": {}}, "auto"),
        ({"any": {}}, "required"),
        ({"tool": {"name": "run_tests"}}, {"type": "function", "function": {"name": "run_tests"}}),
        (None, None),
    ],
)
def test_openai_tool_choice(
    openai_server: OpenAIServer, choice: dict[str, Any] | None, expected: Any
) -> None:
    body = copy.deepcopy(REQUEST)
    if choice is None:
        del body["toolConfig"]["toolChoice"]
    else:
        body["toolConfig"]["toolChoice"] = choice
    OpenAICompatProvider("m", _openai_entry(openai_server), environ={"TEST_OPENAI_KEY": API_KEY}).converse(
        _request(body), max_tokens=5
    )
    assert openai_server.requests[0].body.get("tool_choice") == expected


def test_openai_key_goes_only_in_the_authorization_header(openai_server: OpenAIServer) -> None:
    provider = provider_for("local/qwen", _openai_entry(openai_server), environ={"TEST_OPENAI_KEY": API_KEY})
    result = provider.converse(_user("hello"), max_tokens=5)
    [call] = openai_server.requests
    assert call.headers["authorization"] == f"Bearer {API_KEY}"
    others = {name: value for name, value in call.headers.items() if name != "authorization"}
    assert API_KEY not in json.dumps(others)
    assert API_KEY not in json.dumps(call.body)
    assert API_KEY not in json.dumps(result.response)


def test_openai_without_a_configured_key_sends_no_authorization(openai_server: OpenAIServer) -> None:
    entry = _openai_entry(openai_server, api_key_env=None)
    provider_for("local/qwen", entry, environ={"TEST_OPENAI_KEY": API_KEY}).converse(
        _user("hi"), max_tokens=5
    )
    assert "authorization" not in openai_server.requests[0].headers


def test_openai_missing_key_variable_fails_before_sending(openai_server: OpenAIServer) -> None:
    provider = provider_for("local/qwen", _openai_entry(openai_server), environ={})
    with pytest.raises(ProviderError, match="TEST_OPENAI_KEY is not set"):
        provider.converse(_user("hi"), max_tokens=5)
    assert openai_server.requests == []


def test_openai_key_from_secrets_manager_is_cached(aws: None, openai_server: OpenAIServer) -> None:
    secrets = boto3.client("secretsmanager")
    secret_id = f"steward/test-openai-{time.monotonic_ns()}"
    secrets.create_secret(Name=secret_id, SecretString=f"{API_KEY}\n")
    entry = _openai_entry(openai_server, api_key_env=None, api_key_secret=secret_id)
    provider = provider_for("local/qwen", entry, environ={})
    provider.converse(_user("one"), max_tokens=5)
    secrets.put_secret_value(SecretId=secret_id, SecretString="sk-rotated")
    provider_for("local/qwen", entry, environ={}).converse(_user("two"), max_tokens=5)
    assert [call.headers["authorization"] for call in openai_server.requests] == [f"Bearer {API_KEY}"] * 2


def test_openai_unreadable_secret_is_a_provider_error(aws: None, openai_server: OpenAIServer) -> None:
    entry = _openai_entry(openai_server, api_key_env=None, api_key_secret="steward/does-not-exist")
    with pytest.raises(ProviderError, match=r"cannot read the API key secret \(ResourceNotFoundException\)"):
        provider_for("local/qwen", entry, environ={}).converse(_user("hi"), max_tokens=5)
    assert openai_server.requests == []


def test_openai_translates_the_response_with_tools_and_counts_cached_tokens_once(
    openai_server: OpenAIServer,
) -> None:
    openai_server.behaviour = lambda call: chat_response(
        content="I will read two files.",
        tool_calls=[
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
            },
            {
                "id": "call.b/2",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "b'},
            },
            {"id": "call_c", "type": "function", "function": {"name": "run_tests", "arguments": "[1, 2]"}},
            {"id": "call_d", "type": "function", "function": {"name": "run_tests", "arguments": ""}},
        ],
        finish_reason="tool_calls",
        prompt_tokens=1000,
        completion_tokens=70,
        cached_tokens=600,
    )
    entry = _openai_entry(openai_server)
    result = provider_for("local/qwen", entry, environ={"TEST_OPENAI_KEY": API_KEY}).converse(
        _request(), max_tokens=500
    )
    assert result.response["output"] == {
        "message": {
            "role": "assistant",
            "content": [
                {"text": "I will read two files."},
                {"toolUse": {"toolUseId": "call_a", "name": "read_file", "input": {"path": "a.py"}}},
                {"toolUse": {"toolUseId": "call_b_2", "name": "read_file", "input": {"_raw": '{"path": "b'}}},
                {"toolUse": {"toolUseId": "call_c", "name": "run_tests", "input": {"_raw": "[1, 2]"}}},
                {"toolUse": {"toolUseId": "call_d", "name": "run_tests", "input": {}}},
            ],
        }
    }
    assert result.response["stopReason"] == "tool_use"
    assert result.usage == Usage(input_tokens=400, output_tokens=70, cache_read_tokens=600)
    assert result.response["usage"] == {
        "inputTokens": 400,
        "outputTokens": 70,
        "totalTokens": 1070,
        "cacheReadInputTokens": 600,
    }
    assert result.response["metrics"]["latencyMs"] >= 0
    # Charged once each: 400 at 0.50, 600 at 0.25, 70 at 1.50 (per million), not 1000 at 0.50 + 600 at 0.25.
    assert cost_of(entry, result.usage) == Decimal("0.000455")
    # The answer can be carried into the next request unchanged (ids and names fit Converse).
    follow_up = copy.deepcopy(REQUEST)
    follow_up["messages"].append(result.response["output"]["message"])
    follow_up["messages"].append(
        {"role": "user", "content": [{"toolResult": {"toolUseId": "call_b_2", "content": [{"text": "x"}]}}]}
    )
    ConverseRequest.model_validate(follow_up)


@pytest.mark.parametrize(
    ("finish_reason", "tool_calls", "stop_reason"),
    [
        ("stop", None, "end_turn"),
        ("length", None, "max_tokens"),
        ("content_filter", None, "content_filtered"),
        (None, None, "end_turn"),
        # Some servers (older Ollama) say "stop" even when they call a tool.
        (
            "stop",
            [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            "tool_use",
        ),
    ],
)
def test_openai_finish_reasons(
    openai_server: OpenAIServer, finish_reason: Any, tool_calls: Any, stop_reason: str
) -> None:
    openai_server.behaviour = lambda call: chat_response(
        content="x", tool_calls=tool_calls, finish_reason=finish_reason
    )
    result = OpenAICompatProvider("m", _openai_entry(openai_server, api_key_env=None), environ={}).converse(
        _user("hi"), max_tokens=5
    )
    assert result.response["stopReason"] == stop_reason
    assert result.usage == Usage(input_tokens=10, output_tokens=5)


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {"prompt_tokens": 10},
        {"prompt_tokens": 10, "completion_tokens": -1},
        {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 11}},
        {"prompt_tokens": "10", "completion_tokens": 2},
    ],
)
def test_openai_missing_or_inconsistent_usage_is_none(openai_server: OpenAIServer, usage: Any) -> None:
    def answer(call: ReceivedChat) -> dict[str, Any]:
        body = chat_response(content="ok")
        body.pop("usage")
        if usage is not None:
            body["usage"] = usage
        return body

    openai_server.behaviour = answer
    result = OpenAICompatProvider("m", _openai_entry(openai_server, api_key_env=None), environ={}).converse(
        _user("hi"), max_tokens=5
    )
    assert result.usage is None
    assert "usage" not in result.response
    assert result.response["output"]["message"]["content"] == [{"text": "ok"}]


def test_openai_null_cached_tokens_count_as_zero(openai_server: OpenAIServer) -> None:
    def answer(call: ReceivedChat) -> dict[str, Any]:
        body = chat_response(content="ok", prompt_tokens=12, completion_tokens=3)
        body["usage"]["prompt_tokens_details"] = {"cached_tokens": None}
        return body

    openai_server.behaviour = answer
    result = OpenAICompatProvider("m", _openai_entry(openai_server, api_key_env=None), environ={}).converse(
        _user("hi"), max_tokens=5
    )
    assert result.usage == Usage(input_tokens=12, output_tokens=3)


def test_openai_http_500_is_a_provider_error_without_content_or_key(openai_server: OpenAIServer) -> None:
    openai_server.behaviour = lambda call: OpenAIError(500, f"failed on: {SECRET_PROMPT}")
    provider = provider_for("local/qwen", _openai_entry(openai_server), environ={"TEST_OPENAI_KEY": API_KEY})
    with pytest.raises(ProviderError) as caught:
        provider.converse(_request(), max_tokens=5)
    assert caught.value.message == "openai: HTTP 500"
    assert caught.value.status == 502
    assert not _leaks(caught.value, SECRET_PROMPT, API_KEY, "failed on")
    assert len(openai_server.requests) == 1  # no retry: the server may have billed the call


@pytest.mark.parametrize("answer", [{"choices": []}, {"choices": [{"message": "text"}]}, {}])
def test_openai_malformed_answer_is_an_outcome_unknown(openai_server: OpenAIServer, answer: object) -> None:
    # a 200 the relay cannot read may still have been billed: the relay charges it in full
    openai_server.behaviour = lambda call: answer
    with pytest.raises(ProviderOutcomeUnknown, match="malformed response"):
        OpenAICompatProvider("m", _openai_entry(openai_server, api_key_env=None), environ={}).converse(
            _user("hi"), max_tokens=5
        )


def test_bedrock_malformed_answer_is_an_outcome_unknown(
    converse_server: ConverseServer, bedrock_env: dict[str, str]
) -> None:
    answer = converse_response(text="ok")
    del answer["output"]
    converse_server.behaviour = lambda call: answer
    with pytest.raises(ProviderOutcomeUnknown, match="malformed response"):
        provider_for(HAIKU, load_price_table().entry(HAIKU), environ=bedrock_env).converse(
            _user("hi"), max_tokens=5
        )


def test_openai_unreachable_is_a_provider_error() -> None:
    entry = PriceEntry(
        provider="openai",
        base_url=_free_port_url() + "/v1",
        api_key_env="TEST_OPENAI_KEY",
        input_per_mtok=Decimal(0),
        output_per_mtok=Decimal(0),
        max_output_tokens=10,
    )
    with pytest.raises(ProviderError, match=r"^openai: ConnectError$") as caught:
        OpenAICompatProvider("m", entry, environ={"TEST_OPENAI_KEY": API_KEY}).converse(
            _request(), max_tokens=5
        )
    assert not _leaks(caught.value, SECRET_PROMPT, API_KEY)


def test_a_price_table_override_points_a_model_id_at_a_local_server(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """What a person does to use a local Ollama: an override file, nothing else."""
    override = tmp_path / "prices.json"
    override.write_text(
        json.dumps(
            {
                "version": "local-1",
                "models": {
                    "ollama/llama3.2": {
                        "provider": "openai",
                        "provider_model": "llama3.2",
                        "base_url": openai_server.base_url,
                        "api_key_env": None,
                        "input_per_mtok": 0,
                        "output_per_mtok": 0,
                        "max_output_tokens": 2048,
                    }
                },
            }
        )
    )
    table = load_price_table(str(override))
    result = provider_for("ollama/llama3.2", table.entry("ollama/llama3.2"), environ={}).converse(
        _user("hello there"), max_tokens=50
    )
    assert openai_server.requests[0].body["model"] == "llama3.2"
    assert result.response["output"]["message"]["content"] == [{"text": "echo: hello there"}]


# -- scripted ----------------------------------------------------------------------------------


def _scripted(model_id: str = "scripted", environ: dict[str, str] | None = None) -> Any:
    return provider_for(model_id, load_price_table().entry(model_id), environ=environ or {})


def test_scripted_echo_quotes_the_last_user_message_and_derives_usage() -> None:
    request = _user("Please summarise the plan ✓")
    result = _scripted().converse(request, max_tokens=1000)
    [block] = result.response["output"]["message"]["content"]
    assert block == {"text": "echo (27 characters): Please summarise the plan ✓"}
    assert result.response["stopReason"] == "end_turn"
    assert result.usage == Usage(
        input_tokens=math.ceil(payload_bytes(request) / 4),
        output_tokens=math.ceil(len(block["text"].encode()) / 4),
    )
    assert result.response["usage"]["totalTokens"] == result.usage.input_tokens + result.usage.output_tokens
    # Deterministic: the same request, the same answer.
    assert _scripted().converse(request, max_tokens=1000).response["output"] == result.response["output"]


def test_scripted_reply_is_cut_to_max_tokens() -> None:
    result = _scripted().converse(_user("x" * 400), max_tokens=3)
    assert result.response["stopReason"] == "max_tokens"
    assert result.usage is not None
    assert result.usage.output_tokens == 3
    assert len(result.response["output"]["message"]["content"][0]["text"].encode()) <= 12


def test_scripted_tools_calls_a_tool_then_stops_after_its_result() -> None:
    provider = _scripted("scripted-tools")
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": [{"text": "read main.py"}]}],
        "toolConfig": copy.deepcopy(REQUEST["toolConfig"]),
    }
    first = provider.converse(_request(body), max_tokens=200)
    assert first.response["stopReason"] == "tool_use"
    [call] = first.response["output"]["message"]["content"]
    assert call == {
        "toolUse": {
            "toolUseId": "tooluse_scripted_1",
            "name": "read_file",
            "input": {"path": "scripted", "limit": 1},
        }
    }

    body["messages"].append(first.response["output"]["message"])
    body["messages"].append(
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "tooluse_scripted_1", "content": [{"text": "print(1)"}]}}
            ],
        }
    )
    second = provider.converse(_request(body), max_tokens=200)
    assert second.response["stopReason"] == "end_turn"
    assert second.response["output"]["message"]["content"] == [
        {"text": "done after tool results (tooluse_scripted_1: success, print(1))"}
    ]

    chosen = copy.deepcopy(body)
    chosen["messages"] = chosen["messages"][:1]
    chosen["toolConfig"]["toolChoice"] = {"tool": {"name": "run_tests"}}
    third = provider.converse(_request(chosen), max_tokens=200)
    assert third.response["output"]["message"]["content"][0]["toolUse"]["name"] == "run_tests"
    # Without tools it echoes.
    assert provider.converse(_user("hi"), max_tokens=200).response["stopReason"] == "end_turn"


def test_scripted_fail_raises_a_provider_error() -> None:
    with pytest.raises(ProviderError, match="scripted"):
        _scripted("scripted-fail").converse(_user(SECRET_PROMPT), max_tokens=10)


def test_scripted_no_usage_reports_none() -> None:
    result = _scripted("scripted-no-usage").converse(_user("hi"), max_tokens=10)
    assert result.usage is None
    assert "usage" not in result.response
    assert result.response["output"]["message"]["content"][0]["text"].startswith("echo")


def test_scripted_slow_sleeps_first() -> None:
    provider = _scripted("scripted-slow", {SLOW_ENV: "0.15"})
    assert isinstance(provider, ScriptedProvider)
    assert provider.slow_seconds == 0.15
    started = time.monotonic()
    result = provider.converse(_user("hi"), max_tokens=10)
    assert time.monotonic() - started >= 0.15
    assert result.usage is not None
    with pytest.raises(ValueError, match=SLOW_ENV):
        _scripted("scripted-slow", {SLOW_ENV: "soon"})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.text(max_size=300), min_size=1, max_size=3),
    max_tokens=st.integers(min_value=1, max_value=200),
    model_id=st.sampled_from(["scripted", "scripted-pricey", "scripted-tools"]),
    with_tools=st.booleans(),
)
def test_scripted_usage_stays_within_the_relay_bounds(
    texts: list[str], max_tokens: int, model_id: str, with_tools: bool
) -> None:
    body: dict[str, Any] = {"messages": [{"role": "user", "content": [{"text": t} for t in texts]}]}
    if with_tools:
        body["toolConfig"] = REQUEST["toolConfig"]
    request = _request(body)
    entry = load_price_table().entry(model_id)
    result = provider_for(model_id, entry, environ={}).converse(request, max_tokens=max_tokens)
    usage = result.usage
    assert usage is not None
    bound = input_bound_tokens(payload_bytes(request))
    assert usage.input_side_tokens <= bound
    assert usage.output_tokens <= max_tokens
    assert cost_of(entry, usage) <= max_cost(entry, bound, max_tokens)
    # Every answer is a valid assistant message of the next request.
    Message.model_validate(result.response["output"]["message"])


# -- lazy imports ------------------------------------------------------------------------------


def test_importing_providers_imports_no_heavy_client() -> None:
    code = """
import json, sys
import steward.adapters.providers
from steward.adapters.price_file import load_price_table
from steward.domain.converse import ConverseRequest
table = load_price_table()
provider = steward.adapters.providers.provider_for("scripted", table.entry("scripted"), environ={})
provider.converse(ConverseRequest.model_validate(
    {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}), max_tokens=5)
heavy = ("boto3", "botocore", "httpx", "githubkit", "steward.adapters.providers.bedrock", "steward.adapters.providers.openai_compat")
print(json.dumps(sorted(name for name in sys.modules if name.startswith(heavy))))
"""
    env = {key: value for key, value in os.environ.items() if key != "STEWARD_PRICE_TABLE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(done.stdout) == []
