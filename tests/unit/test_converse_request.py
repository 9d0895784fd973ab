"""The Converse request shape the relay accepts, and the byte count its input bound rests on."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from steward.domain.converse import (
    ConverseRequest,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    model_input,
    payload_bytes,
)

TOOLS: dict[str, Any] = {
    "tools": [
        {
            "toolSpec": {
                "name": "read_file",
                "description": "Read a file of the repository",
                "inputSchema": {
                    "json": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                        "required": ["path"],
                    }
                },
            }
        },
        {"toolSpec": {"name": "run-tests", "inputSchema": {"json": {"type": "object"}}}},
    ],
    "toolChoice": {"tool": {"name": "read_file"}},
}

FULL: dict[str, Any] = {
    "messages": [
        {"role": "user", "content": [{"text": "Fix the bug in main.py, s'il vous plaît ✓"}]},
        {
            "role": "assistant",
            "content": [
                {"text": "Reading it."},
                {
                    "toolUse": {
                        "toolUseId": "tooluse_1",
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
                        "toolUseId": "tooluse_1",
                        "content": [{"text": "print(1)"}, {"json": {"lines": 1}}],
                        "status": "success",
                    }
                }
            ],
        },
    ],
    "system": [{"text": "You are careful."}, {"text": "Answer briefly."}],
    "toolConfig": TOOLS,
    "inferenceConfig": {"maxTokens": 512, "temperature": 0.2, "topP": 0.9, "stopSequences": ["END"]},
    "modelId": "scripted",
}


def _minimal(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [{"text": "hi"}]}], **extra}


def _with(path: tuple[Any, ...], value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    body = copy.deepcopy(base if base is not None else FULL)
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def test_minimal_request() -> None:
    request = ConverseRequest.model_validate(_minimal())
    assert request.system is None
    assert request.toolConfig is None
    assert request.inferenceConfig is None
    assert isinstance(request.messages[0].content[0], TextBlock)


def test_full_request_round_trips_in_bedrock_field_names() -> None:
    request = ConverseRequest.model_validate(FULL)
    assert isinstance(request.messages[1].content[1], ToolUseBlock)
    assert isinstance(request.messages[2].content[0], ToolResultBlock)
    assert request.inferenceConfig is not None
    assert request.inferenceConfig.maxTokens == 512
    assert request.modelId == "scripted"
    sent = model_input(request)
    # Exactly what goes to the model: no inferenceConfig, no modelId, `json` under its own name,
    # and a null inside a tool input kept.
    assert sent == {key: FULL[key] for key in ("messages", "system", "toolConfig")}
    # The same request parsed from JSON text is the same.
    assert ConverseRequest.model_validate_json(json.dumps(FULL)) == request


def test_payload_bytes_is_the_utf8_length_of_the_compact_json_of_what_is_sent() -> None:
    request = ConverseRequest.model_validate(FULL)
    expected = json.dumps(
        {key: FULL[key] for key in ("messages", "system", "toolConfig")},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    assert payload_bytes(request) == len(expected)
    # inferenceConfig and modelId are not sent to the model and do not count.
    assert payload_bytes(ConverseRequest.model_validate(_minimal())) == payload_bytes(
        ConverseRequest.model_validate(_minimal(inferenceConfig={"maxTokens": 5}, modelId="m"))
    )


@given(st.lists(st.text(min_size=0, max_size=200), min_size=1, max_size=4), st.text(max_size=200))
def test_payload_bytes_covers_every_byte_of_text_sent(texts: list[str], system: str) -> None:
    request = ConverseRequest.model_validate(
        {
            "messages": [{"role": "user", "content": [{"text": t} for t in texts]}],
            "system": [{"text": system}],
        }
    )
    content_bytes = sum(len(t.encode("utf-8")) for t in [*texts, system])
    assert payload_bytes(request) >= content_bytes


def test_tool_choice_any_and_auto() -> None:
    choices: list[dict[str, Any]] = [{"auto": {}}, {"any": {}}]
    for choice in choices:
        request = ConverseRequest.model_validate(_with(("toolConfig", "toolChoice"), choice))
        assert model_input(request)["toolConfig"]["toolChoice"] == choice


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"messages": [{"role": "system", "content": [{"text": "x"}]}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": []}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": [{"image": {"format": "png"}}]}]}, "messages.0.content.0"),
        ({"messages": [{"role": "user", "content": [{"text": "x", "toolUse": {}}]}]}, "messages.0.content.0"),
        ({"messages": [{"role": "user", "content": "hello"}]}, "messages.0.content"),
        ({"messages": [{"role": "assistant", "content": [{"text": "x"}]}]}, "the first message"),
        (_minimal(inferenceConfig={"maxTokens": 0}), "inferenceConfig.maxTokens"),
        (_minimal(inferenceConfig={"maxTokens": -5}), "inferenceConfig.maxTokens"),
        (_minimal(inferenceConfig={"maxTokens": 10**12}), "inferenceConfig.maxTokens"),
        (_minimal(inferenceConfig={"maxTokens": "100"}), "inferenceConfig.maxTokens"),
        (_minimal(inferenceConfig={"maxTokens": 100.0}), "inferenceConfig.maxTokens"),
        (_minimal(inferenceConfig={"maxTokens": True}), "inferenceConfig.maxTokens"),
        (_minimal(inferenceConfig={"temperature": 1.5}), "inferenceConfig.temperature"),
        (_minimal(inferenceConfig={"topP": -0.1}), "inferenceConfig.topP"),
        (
            _minimal(inferenceConfig={"stopSequences": ["a", "b", "c", "d", "e"]}),
            "inferenceConfig.stopSequences",
        ),
        (_minimal(inferenceConfig={"max_tokens": 5}), "inferenceConfig.max_tokens"),
        (_minimal(unknown=1), "unknown"),
        (_minimal(additionalModelRequestFields={}), "additionalModelRequestFields"),
        (_with(("messages", 0, "extra"), 1), "messages.0.extra"),
        (_with(("system", 0, "cachePoint"), {"type": "default"}), "system.0.cachePoint"),
        (_with(("toolConfig", "toolChoice"), {"auto": {}, "any": {}}), "exactly one"),
        (
            _with(("toolConfig", "toolChoice"), {"tool": {"name": "delete_repo"}}),
            "must name one of the tools",
        ),
        (_with(("toolConfig", "tools"), []), "toolConfig.tools"),
        (_with(("toolConfig", "tools", 1, "toolSpec", "name"), "read_file"), "unique"),
        (_with(("toolConfig", "tools", 1, "toolSpec", "name"), "has space"), "toolSpec.name"),
        (_with(("toolConfig", "tools", 1, "toolSpec", "inputSchema"), {"json_": {}}), "inputSchema"),
        (_with(("toolConfig",), None), "toolConfig is required"),
        (
            _with(("messages", 1, "content", 1, "toolUse", "input"), "main.py"),
            "messages.1.content.1.toolUse.toolUse.input",
        ),
        (_with(("messages", 1, "role"), "user"), "toolUse blocks belong in assistant messages"),
        (_with(("messages", 2, "role"), "assistant"), "toolResult blocks belong in user messages"),
        (_with(("messages", 2, "content", 0, "toolResult", "status"), "maybe"), "status"),
        (
            _with(("messages", 2, "content", 0, "toolResult", "content", 0), {"image": {}}),
            "toolResult.content.0",
        ),
    ],
)
def test_invalid_requests_are_refused(body: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ConverseRequest.model_validate(body)
    described = "; ".join(
        ".".join(str(part) for part in error["loc"]) + ": " + error["msg"] for error in caught.value.errors()
    )
    assert where in described
