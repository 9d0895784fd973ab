"""The OpenAI Chat Completions surface as the stock `openai` SDK sees it: what it sends
translates to a Converse request the relay accepts, and what the relay answers (plain or
streamed) parses as the SDK's own types and reads back the same to its caller."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)
from pydantic import ValidationError
from steward.domain.converse import ConverseRequest, wire
from steward.domain.errors import BadRequest
from steward.domain.openai_chat import (
    ChatRequest,
    completion,
    completion_chunks,
    models_list,
    parse_chat_request,
    sse,
    to_converse,
)

MODEL = "scripted-coder"
BASE_URL = "http://relay.test/v1"

READ_FILE: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file of the repository",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "strict": True,
    },
}
RUN_TESTS: ChatCompletionToolParam = {"type": "function", "function": {"name": "run-tests"}}

HISTORY: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You are careful."},
    {"role": "developer", "content": [{"type": "text", "text": "Answer briefly."}]},
    {"role": "user", "content": "Fix the bug in main.py ✓", "name": "alice"},
    {
        "role": "assistant",
        "content": "Reading both.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path":"main.py"}'},
            },
            {"id": "call-2", "type": "function", "function": {"name": "run-tests", "arguments": ""}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"},
    {"role": "tool", "tool_call_id": "call-2", "content": [{"type": "text", "text": "1 failed"}]},
    {"role": "user", "content": [{"type": "text", "text": "Go on."}]},
]

EXPECTED_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"text": "Fix the bug in main.py ✓"}]},
    {
        "role": "assistant",
        "content": [
            {"text": "Reading both."},
            {"toolUse": {"toolUseId": "call_1", "name": "read_file", "input": {"path": "main.py"}}},
            {"toolUse": {"toolUseId": "call-2", "name": "run-tests", "input": {}}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"toolResult": {"toolUseId": "call_1", "content": [{"text": "print(1)"}]}},
            {"toolResult": {"toolUseId": "call-2", "content": [{"text": "1 failed"}]}},
            {"text": "Go on."},
        ],
    },
]

TEXT_ANSWER: dict[str, Any] = {
    "output": {"message": {"role": "assistant", "content": [{"text": "Fixed: " + "the off-by-one. " * 12}]}},
    "stopReason": "end_turn",
    "usage": {
        "inputTokens": 100,
        "outputTokens": 40,
        "totalTokens": 175,
        "cacheReadInputTokens": 30,
        "cacheWriteInputTokens": 5,
    },
    "metrics": {"latencyMs": 12},
}
TOOL_ANSWER: dict[str, Any] = {
    "output": {
        "message": {
            "role": "assistant",
            "content": [
                {"text": "Running the tests."},
                {"toolUse": {"toolUseId": "tooluse_A1", "name": "run-tests", "input": {}}},
                {
                    "toolUse": {
                        "toolUseId": "tooluse_B2",
                        "name": "read_file",
                        "input": {"path": "src/" + "deep/" * 20 + "main.py", "note": "naïve ✓", "n": None},
                    }
                },
            ],
        }
    },
    "stopReason": "tool_use",
    "usage": {"inputTokens": 10, "outputTokens": 20, "totalTokens": 30},
    "metrics": {"latencyMs": 3},
}
NO_USAGE: dict[str, Any] = {
    "output": {
        "message": {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t", "name": "x", "input": {}}}],
        }
    },
    "stopReason": "max_tokens",
    "metrics": {"latencyMs": 1},
}


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}


def _converse(body: dict[str, Any]) -> ConverseRequest:
    """What the relay would admit for `body`: translated, then Converse-validated."""
    return ConverseRequest.model_validate(to_converse(parse_chat_request(body)))


# -- requests ---------------------------------------------------------------------------------


def test_history_with_tools_translates_to_one_converse_request() -> None:
    body = _body(
        messages=HISTORY,
        tools=[READ_FILE, RUN_TESTS],
        tool_choice={"type": "function", "function": {"name": "read_file"}},
        max_tokens=900,
        max_completion_tokens=512,
        temperature=0.2,
        top_p=0.9,
        stop="END",
        n=1,
        user="alice",
        seed=7,
        store=False,
        metadata={"k": "v"},
        parallel_tool_calls=True,
        presence_penalty=0,
        service_tier="auto",
        stream_options={"include_usage": True, "include_obfuscation": False},
    )
    converse = to_converse(parse_chat_request(body))
    assert "modelId" not in converse
    assert converse["messages"] == EXPECTED_MESSAGES
    assert converse["system"] == [{"text": "You are careful."}, {"text": "Answer briefly."}]
    assert converse["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "read_file",
                    "description": "Read a file of the repository",
                    "inputSchema": {"json": READ_FILE["function"]["parameters"]},
                }
            },
            {
                "toolSpec": {
                    "name": "run-tests",
                    "inputSchema": {"json": {"type": "object", "properties": {}}},
                }
            },
        ],
        "toolChoice": {"tool": {"name": "read_file"}},
    }
    assert converse["inferenceConfig"] == {
        "maxTokens": 512,
        "temperature": 0.2,
        "topP": 0.9,
        "stopSequences": ["END"],
    }
    assert wire(ConverseRequest.model_validate(converse)) == converse


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [("auto", {"auto": {}}), ("required", {"any": {}}), (None, None)],
)
def test_tool_choice_maps_to_converse(tool_choice: str | None, expected: dict[str, Any] | None) -> None:
    extra = {"tool_choice": tool_choice} if tool_choice else {}
    config = _converse(_body(tools=[READ_FILE], **extra)).toolConfig
    assert config is not None
    assert (wire(config.toolChoice) if config.toolChoice else None) == expected


def test_tool_choice_none_omits_the_tools_while_the_history_has_no_tool_calls() -> None:
    converse = to_converse(parse_chat_request(_body(tools=[READ_FILE], tool_choice="none")))
    assert "toolConfig" not in converse
    assert "inferenceConfig" not in converse


def test_empty_messages_are_dropped_and_same_roles_merge() -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "two"}]},
        {
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": "no"}, {"type": "text", "text": "ok"}],
        },
        {"role": "system", "content": "late system text"},
        {"role": "assistant", "content": "more", "refusal": None},
        {"role": "user", "content": ""},
    ]
    converse = _converse(_body(messages=messages))
    assert [wire(m) for m in converse.messages] == [
        {"role": "user", "content": [{"text": "one"}, {"text": "two"}]},
        {"role": "assistant", "content": [{"text": "ok"}, {"text": "more"}]},
    ]
    assert converse.system is not None
    assert [block.text for block in converse.system] == ["late system text"]


def test_a_round_tripped_answer_is_valid_history() -> None:
    """A client appends the answer's message (as the SDK dumps it) and the tool results."""
    answer = ChatCompletion.model_validate(completion(TOOL_ANSWER, model=MODEL, completion_id="c", created=1))
    messages: list[Any] = [
        {"role": "user", "content": "go"},
        answer.choices[0].message.model_dump(exclude_unset=True, mode="json"),
        {"role": "tool", "tool_call_id": "tooluse_A1", "content": "ok"},
        {"role": "tool", "tool_call_id": "tooluse_B2", "content": "print(1)"},
    ]
    converse = _converse(_body(messages=messages, tools=[READ_FILE, RUN_TESTS]))
    assert [m.role for m in converse.messages] == ["user", "assistant", "user"]
    assert wire(converse.messages[1])["content"] == TOOL_ANSWER["output"]["message"]["content"]


def test_include_usage_reads_stream_options() -> None:
    assert ChatRequest.model_validate(
        _body(stream=True, stream_options={"include_usage": True})
    ).include_usage
    assert not ChatRequest.model_validate(_body(stream=True)).include_usage
    with pytest.raises(ValidationError):  # parse_chat_request turns this into BadRequest
        ChatRequest.model_validate(_body(stream_options={"include_usage": 1}))


def _tool_history(**changes: Any) -> list[Any]:
    messages = copy.deepcopy(HISTORY)
    for path, value in changes.items():
        target: Any = messages
        *parents, last = path.split("__")
        for key in parents:
            target = target[int(key) if key.isdigit() else key]
        target[int(last) if last.isdigit() else last] = value
    return messages


TOOLS = [READ_FILE, RUN_TESTS]
REFUSED: list[tuple[str, Callable[[], Any], str]] = [
    ("n=2", lambda: _body(n=2), "n"),
    ("temperature 1.5", lambda: _body(temperature=1.5), "temperature"),
    ("temperature as text", lambda: _body(temperature="0.5"), "temperature"),
    ("top_p above 1", lambda: _body(top_p=1.2), "top_p"),
    ("max_tokens 0", lambda: _body(max_tokens=0), "max_tokens"),
    ("max_completion_tokens as text", lambda: _body(max_completion_tokens="5"), "max_completion_tokens"),
    ("five stop sequences", lambda: _body(stop=["a", "b", "c", "d", "e"]), "stop"),
    ("empty stop", lambda: _body(stop=""), "stop"),
    ("stream as text", lambda: _body(stream="yes"), "stream"),
    ("not an object", lambda: ["hi"], "body"),
    ("no model", lambda: {"messages": [{"role": "user", "content": "hi"}]}, "model"),
    ("empty messages", lambda: _body(messages=[]), "messages"),
    ("messages as text", lambda: _body(messages="hi"), "messages"),
    ("unknown field", lambda: _body(top_k=5), "top_k"),
    (
        "json_schema",
        lambda: _body(response_format={"type": "json_schema", "json_schema": {}}),
        "response_format",
    ),
    ("logprobs", lambda: _body(logprobs=True), "logprobs"),
    ("audio out", lambda: _body(modalities=["text", "audio"]), "modalities"),
    ("presence penalty", lambda: _body(presence_penalty=0.5), "presence_penalty"),
    ("logit bias", lambda: _body(logit_bias={"50256": -100}), "logit_bias"),
    ("one call a turn", lambda: _body(parallel_tool_calls=False), "parallel_tool_calls"),
    ("priority tier", lambda: _body(service_tier="priority"), "service_tier"),
    ("reasoning effort", lambda: _body(reasoning_effort="high"), "reasoning_effort"),
    ("functions", lambda: _body(functions=[{"name": "f"}]), "functions"),
    (
        "an image part",
        lambda: _body(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                    ],
                }
            ]
        ),
        "messages.0.content.1.type",
    ),
    (
        "a text part without text",
        lambda: _body(messages=[{"role": "user", "content": [{"type": "text"}]}]),
        "messages.0.content.0.text",
    ),
    (
        "a function role",
        lambda: _body(messages=[{"role": "function", "name": "f", "content": "1"}]),
        "messages.0.role",
    ),
    (
        "a function_call",
        lambda: _body(
            messages=_tool_history(**{"3__function_call": {"name": "f", "arguments": "{}"}}), tools=TOOLS
        ),
        "messages.3.function_call",
    ),
    ("user without content", lambda: _body(messages=[{"role": "user"}]), "messages.0.content"),
    ("content as a number", lambda: _body(messages=[{"role": "user", "content": 5}]), "messages.0.content"),
    (
        "tool calls on a user message",
        lambda: _body(messages=_tool_history(**{"2__tool_calls": HISTORY[3]["tool_calls"]}), tools=TOOLS),  # type: ignore[typeddict-item]
        "messages.2.tool_calls",
    ),
    (
        "tool without id",
        lambda: _body(messages=_tool_history(**{"4__tool_call_id": None}), tools=TOOLS),
        "messages.4.tool_call_id",
    ),
    (
        "bad tool arguments JSON",
        lambda: _body(
            messages=_tool_history(**{"3__tool_calls__0__function__arguments": "{path"}), tools=TOOLS
        ),
        "messages.3.tool_calls.0.function.arguments",
    ),
    (
        "tool arguments not an object",
        lambda: _body(
            messages=_tool_history(**{"3__tool_calls__1__function__arguments": "[1]"}), tools=TOOLS
        ),
        "messages.3.tool_calls.1.function.arguments",
    ),
    (
        "a bad tool call id",
        lambda: _body(
            messages=_tool_history(**{"3__tool_calls__0__id": "call.1", "4__tool_call_id": "call.1"}),
            tools=TOOLS,
        ),
        "messages.3.tool_calls.0.id",
    ),
    (
        "a tool call id over 64",
        lambda: _body(messages=_tool_history(**{"3__tool_calls__0__id": "c" * 65}), tools=TOOLS),
        "messages.3.tool_calls.0.id",
    ),
    (
        "a custom tool call",
        lambda: _body(
            messages=_tool_history(
                **{"3__tool_calls__0": {"id": "c1", "type": "custom", "custom": {"name": "x", "input": "y"}}}
            ),
            tools=TOOLS,
        ),
        "messages.3.tool_calls.0.type",
    ),
    (
        "a repeated tool call id",
        lambda: _body(messages=_tool_history(**{"3__tool_calls__1__id": "call_1"}), tools=TOOLS),
        "messages.3.tool_calls.1.id",
    ),
    (
        "an unanswered tool call",
        lambda: _body(messages=[*HISTORY[:5], HISTORY[6]], tools=TOOLS),
        "messages.3.tool_calls.1.id",
    ),
    (
        "a last unanswered tool call",
        lambda: _body(messages=HISTORY[:4], tools=TOOLS),
        "messages.3.tool_calls.0.id",
    ),
    (
        "a tool result for no call",
        lambda: _body(messages=_tool_history(**{"5__tool_call_id": "call_9"}), tools=TOOLS),
        "messages.5.tool_call_id",
    ),
    (
        "tool_choice none with tool history",
        lambda: _body(messages=HISTORY, tools=TOOLS, tool_choice="none"),
        "tool_choice",
    ),
    ("tool history without tools", lambda: _body(messages=HISTORY), "tools"),
    ("tool_choice without tools", lambda: _body(tool_choice="required"), "tool_choice"),
    ("tool_choice unknown", lambda: _body(tools=TOOLS, tool_choice="any"), "tool_choice"),
    (
        "tool_choice naming another tool",
        lambda: _body(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "write_file"}}),
        "tool_choice.function.name",
    ),
    (
        "allowed_tools",
        lambda: _body(
            tools=TOOLS, tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}
        ),
        "tool_choice.type",
    ),
    ("a custom tool", lambda: _body(tools=[{"type": "custom", "custom": {"name": "x"}}]), "tools.0.type"),
    (
        "a tool name with a dot",
        lambda: _body(tools=[{"type": "function", "function": {"name": "a.b"}}]),
        "tools.0.function.name",
    ),
    ("repeated tool names", lambda: _body(tools=[READ_FILE, READ_FILE]), "tools.1.function.name"),
    (
        "assistant first",
        lambda: _body(messages=[{"role": "system", "content": "s"}, {"role": "assistant", "content": "hi"}]),
        "messages.1.role",
    ),
    ("nothing to say", lambda: _body(messages=[{"role": "user", "content": ""}]), "messages"),
]


@pytest.mark.parametrize(
    ("body", "field"), [(body, field) for _, body, field in REFUSED], ids=[n for n, _, _ in REFUSED]
)
def test_refused_requests_name_the_openai_field(body: Callable[[], Any], field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        to_converse(parse_chat_request(body()))
    assert caught.value.field == field
    assert caught.value.message.startswith(f"{field}: ")


def test_temperature_refusal_says_why() -> None:
    with pytest.raises(BadRequest, match=r"^temperature: above 1 is refused: Converse takes 0 to 1"):
        parse_chat_request(_body(temperature=1.5))


# -- answers ----------------------------------------------------------------------------------


def _reassemble(chunks: list[ChatCompletionChunk]) -> dict[str, Any]:
    """Text, tool calls, finish reason and usage of a stream, read as a client reads it."""
    text = ""
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    usage = None
    for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = delta.id or call["id"]
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    return {
        "text": text or None,
        "calls": [calls[i] for i in sorted(calls)],
        "finish": finish,
        "usage": usage,
    }


def _read(answer: ChatCompletion) -> dict[str, Any]:
    message = answer.choices[0].message
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls or ()
        if c.type == "function"
    ]
    return {
        "text": message.content,
        "calls": calls,
        "finish": answer.choices[0].finish_reason,
        "usage": answer.usage,
    }


@pytest.mark.parametrize("response", [TEXT_ANSWER, TOOL_ANSWER, NO_USAGE], ids=["text", "tools", "no-usage"])
def test_streamed_answer_reads_as_the_plain_one(response: dict[str, Any]) -> None:
    plain = ChatCompletion.model_validate(
        completion(response, model=MODEL, completion_id="chatcmpl-1", created=5)
    )
    raw = completion_chunks(response, model=MODEL, completion_id="chatcmpl-1", created=5, include_usage=True)
    chunks = [ChatCompletionChunk.model_validate(chunk) for chunk in raw]
    assert _reassemble(chunks) == _read(plain)
    assert all(c.id == "chatcmpl-1" and c.model == MODEL and c.created == 5 for c in chunks)
    assert raw[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [d for c in raw for ch in c["choices"] for d in [ch["delta"]]]
    assert all(len(d.get("content", "")) <= 64 for d in pieces)
    assert all(
        len(t.get("function", {}).get("arguments", "")) <= 64 for d in pieces for t in d.get("tool_calls", ())
    )
    if response.get("usage"):
        assert raw[-1]["choices"] == []
        assert all("usage" in c and c["usage"] is None for c in raw[:-1])
        assert raw[-2]["choices"][0] == {
            "index": 0,
            "delta": {},
            "logprobs": None,
            "finish_reason": plain.choices[0].finish_reason,
        }
    else:
        assert raw[-1]["choices"][0]["delta"] == {}


def test_answer_fields() -> None:
    text = ChatCompletion.model_validate(completion(TEXT_ANSWER, model=MODEL, completion_id="a", created=1))
    assert text.object == "chat.completion"
    assert text.choices[0].message.content == TEXT_ANSWER["output"]["message"]["content"][0]["text"]
    assert text.choices[0].message.tool_calls is None
    assert text.choices[0].finish_reason == "stop"
    assert text.usage is not None
    assert (text.usage.prompt_tokens, text.usage.completion_tokens, text.usage.total_tokens) == (135, 40, 175)
    assert text.usage.prompt_tokens_details is not None
    assert text.usage.prompt_tokens_details.cached_tokens == 30
    tools = completion(TOOL_ANSWER, model=MODEL, completion_id="b", created=1)
    assert tools["choices"][0]["finish_reason"] == "tool_calls"
    assert tools["choices"][0]["message"]["content"] == "Running the tests."
    assert [json.loads(c["function"]["arguments"]) for c in tools["choices"][0]["message"]["tool_calls"]] == [
        {},
        TOOL_ANSWER["output"]["message"]["content"][2]["toolUse"]["input"],
    ]
    bare = completion(NO_USAGE, model=MODEL, completion_id="c", created=1)
    assert "usage" not in bare
    assert bare["choices"][0]["message"]["content"] is None
    assert bare["choices"][0]["finish_reason"] == "length"
    without = completion_chunks(TEXT_ANSWER, model=MODEL, completion_id="d", created=1, include_usage=False)
    assert all("usage" not in chunk and chunk["choices"] for chunk in without)


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("content_filtered", "content_filter"),
        ("guardrail_intervened", "content_filter"),
    ],
)
def test_finish_reasons(stop_reason: str, finish: str) -> None:
    response = {**TEXT_ANSWER, "stopReason": stop_reason}
    assert (
        completion(response, model=MODEL, completion_id="x", created=1)["choices"][0]["finish_reason"]
        == finish
    )


def test_sse_frames() -> None:
    # `[DONE]`'s blank line is CRLF: the stock SDK then reads the body to its end and keeps
    # the connection (tests/integration/test_relay_stock_clients.py counts them).
    assert (
        sse([{"a": "é"}, {"b": [1, 2]}])
        == 'data: {"a":"é"}\n\ndata: {"b":[1,2]}\n\ndata: [DONE]\n\r\n'.encode()
    )
    assert sse([]) == b"data: [DONE]\n\r\n"


def spec_events(body: bytes) -> tuple[list[str], list[str]]:
    """The data of each event as the SSE specification reads a stream (lines end at CRLF, LF
    or CR; a blank line dispatches), and the data lines still pending at the end."""
    events: list[str] = []
    pending: list[str] = []
    text = body.decode("utf-8")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for line in lines[:-1]:  # the last piece has no line end: not a line
        if line == "":
            if pending:
                events.append("\n".join(pending))
            pending = []
        elif line.startswith("data:"):
            pending.append(line[5:].removeprefix(" "))
    return events, pending


@pytest.mark.parametrize(
    "chunks",
    [[], [{"a": "é"}], [{"a": "line\nbreak"}, {"b": "\r"}, {"c": [1, 2]}], [{"error": {"code": "x"}}]],
)
def test_every_event_and_done_reach_a_reader_of_the_specification(chunks: list[dict[str, Any]]) -> None:
    events, pending = spec_events(sse(chunks))
    assert events == [*(json.dumps(c, separators=(",", ":"), ensure_ascii=False) for c in chunks), "[DONE]"]
    assert pending == []


# -- the stock client, end to end ---------------------------------------------------------------


class Relay:
    """A stand-in for the relay's route: what the SDK sent, translated, answered with `answer`."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.sent: list[dict[str, Any]] = []
        self.converse: list[ConverseRequest] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=models_list(MODEL, created=1_700_000_000))
        assert request.url.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer capability-jwt"
        body = json.loads(request.content)
        self.sent.append(body)
        try:
            chat = parse_chat_request(body)
            self.converse.append(ConverseRequest.model_validate(to_converse(chat)))
        except BadRequest as exc:
            return httpx.Response(400, json=exc.to_body())
        assert chat.model == MODEL
        created = 1_700_000_000
        if chat.stream:
            chunks = completion_chunks(
                self.answer,
                model=chat.model,
                completion_id="chatcmpl-test",
                created=created,
                include_usage=chat.include_usage,
            )
            return httpx.Response(200, content=sse(chunks), headers={"content-type": "text/event-stream"})
        answer = completion(self.answer, model=chat.model, completion_id="chatcmpl-test", created=created)
        return httpx.Response(200, json=answer)


@pytest.fixture
def client() -> Iterator[Callable[[dict[str, Any]], tuple[openai.OpenAI, Relay]]]:
    made: list[openai.OpenAI] = []

    def make(answer: dict[str, Any]) -> tuple[openai.OpenAI, Relay]:
        relay = Relay(answer)
        http = httpx.Client(transport=httpx.MockTransport(relay))
        made.append(
            openai.OpenAI(api_key="capability-jwt", base_url=BASE_URL, http_client=http, max_retries=0)
        )
        return made[-1], relay

    yield make
    for sdk in made:
        sdk.close()


def test_sdk_plain_call(client: Callable[[dict[str, Any]], tuple[openai.OpenAI, Relay]]) -> None:
    sdk, relay = client(TEXT_ANSWER)
    answer = sdk.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Fix it"}],
        max_completion_tokens=300,
        temperature=0,
    )
    assert relay.sent == [
        {
            "messages": [{"role": "user", "content": "Fix it"}],
            "model": MODEL,
            "max_completion_tokens": 300,
            "temperature": 0,
        }
    ]
    assert wire(relay.converse[0]) == {
        "messages": [{"role": "user", "content": [{"text": "Fix it"}]}],
        "inferenceConfig": {"maxTokens": 300, "temperature": 0.0},
    }
    assert answer.id == "chatcmpl-test"
    assert answer.choices[0].message.content == TEXT_ANSWER["output"]["message"]["content"][0]["text"]
    assert answer.usage is not None
    assert answer.usage.total_tokens == 175


def test_sdk_tool_loop_plain_and_streamed(
    client: Callable[[dict[str, Any]], tuple[openai.OpenAI, Relay]],
) -> None:
    sdk, relay = client(TOOL_ANSWER)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Fix the bug"}]
    first = sdk.chat.completions.create(
        model=MODEL, messages=messages, tools=[READ_FILE, RUN_TESTS], tool_choice="auto"
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content == "Running the tests."
    assert message.tool_calls is not None
    calls = [c for c in message.tool_calls if c.type == "function"]
    assert [(c.id, c.function.name) for c in calls] == [
        ("tooluse_A1", "run-tests"),
        ("tooluse_B2", "read_file"),
    ]
    # The client's loop: the answer's message goes back, with one tool message per call.
    messages.append(message)  # type: ignore[arg-type]  # the SDK accepts its own message model
    messages.extend(
        {"role": "tool", "tool_call_id": c.id, "content": f"ran {c.function.name}"} for c in calls
    )
    relay.answer = TEXT_ANSWER
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[READ_FILE, RUN_TESTS],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert relay.sent[1]["stream"] is True
    assert relay.sent[1]["messages"][1]["tool_calls"][1]["function"]["arguments"] == json.dumps(
        TOOL_ANSWER["output"]["message"]["content"][2]["toolUse"]["input"],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert [wire(m) for m in relay.converse[1].messages][1:] == [
        {"role": "assistant", "content": TOOL_ANSWER["output"]["message"]["content"]},
        {
            "role": "user",
            "content": [
                {"toolResult": {"toolUseId": "tooluse_A1", "content": [{"text": "ran run-tests"}]}},
                {"toolResult": {"toolUseId": "tooluse_B2", "content": [{"text": "ran read_file"}]}},
            ],
        },
    ]
    plain = ChatCompletion.model_validate(
        completion(TEXT_ANSWER, model=MODEL, completion_id="chatcmpl-test", created=1)
    )
    assert _reassemble(chunks) == _read(plain)
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens_details is not None
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 30


def test_sdk_streamed_tool_calls(client: Callable[[dict[str, Any]], tuple[openai.OpenAI, Relay]]) -> None:
    sdk, relay = client(TOOL_ANSWER)
    with sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}], tools=[READ_FILE, RUN_TESTS], stream=True
    ) as stream:
        chunks = list(stream)
    assert "stream_options" not in relay.sent[0]
    read = _reassemble(chunks)
    assert read["usage"] is None
    assert read["finish"] == "tool_calls"
    assert [json.loads(c["arguments"]) for c in read["calls"]] == [
        {},
        TOOL_ANSWER["output"]["message"]["content"][2]["toolUse"]["input"],
    ]


def test_sdk_sees_a_refusal_as_bad_request(
    client: Callable[[dict[str, Any]], tuple[openai.OpenAI, Relay]],
) -> None:
    sdk, _ = client(TEXT_ANSWER)
    with pytest.raises(openai.BadRequestError, match="above 1 is refused") as caught:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], temperature=1.5)
    assert caught.value.body == {
        "code": "bad_request",
        "message": caught.value.body["message"],  # type: ignore[index]
        "field": "temperature",
    }


def test_sdk_lists_the_pinned_model(client: Callable[[dict[str, Any]], tuple[openai.OpenAI, Relay]]) -> None:
    sdk, _ = client(TEXT_ANSWER)
    models = list(sdk.models.list())
    assert [(m.id, m.object, m.owned_by, m.created) for m in models] == [
        (MODEL, "model", "steward", 1_700_000_000)
    ]


@pytest.mark.parametrize(
    "name", ["a", "read_file", "run-tests", "x" * 64, "a.b", "", "x" * 65, "naïve", "abc\n"]
)
def test_names_and_ids_fit_exactly_what_converse_takes(name: str) -> None:
    """The translation refuses a tool name or call id exactly when Converse would."""
    converse_ok = True
    try:
        ConverseRequest.model_validate(
            {
                "messages": [
                    {"role": "user", "content": [{"text": "hi"}]},
                    {
                        "role": "assistant",
                        "content": [{"toolUse": {"toolUseId": name, "name": name, "input": {}}}],
                    },
                ],
                "toolConfig": {"tools": [{"toolSpec": {"name": name, "inputSchema": {"json": {}}}}]},
            }
        )
    except ValidationError:
        converse_ok = False
    call = {"id": name, "type": "function", "function": {"name": name, "arguments": "{}"}}
    body = _body(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": name, "content": "ok"},
        ],
        tools=[{"type": "function", "function": {"name": name}}],
    )
    try:
        to_converse(parse_chat_request(body))
        translated = True
    except BadRequest:
        translated = False
    assert translated == converse_ok
