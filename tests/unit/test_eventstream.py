"""The converse-stream bytes the relay writes, proved with botocore's own parts, not a decoder of ours.

Three readers: `EventStreamBuffer` (framing and both CRCs), the rest-json parser botocore
builds for bedrock-runtime's ConverseStream (the events as the service model types them),
and a stock boto3 `bedrock-runtime` client whose HTTP send is answered in-process through
the `before-send` event with the bytes as a urllib3 body, as a socket would deliver them.
The published event-stream test vectors pin the byte layout itself.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import botocore.session
import pytest
import urllib3
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer
from botocore.exceptions import EventStreamError
from botocore.model import OperationModel, StructureShape
from botocore.parsers import create_parser
from botocore.validate import ParamValidator
from steward.domain.eventstream import (
    CONTENT_TYPE,
    MAX_HEADER_NAME_BYTES,
    MAX_HEADER_VALUE_BYTES,
    MAX_HEADERS_BYTES,
    MAX_MESSAGE_BYTES,
    STREAM_EXCEPTIONS,
    converse_stream_events,
    encode_converse_stream,
    encode_message,
    event,
    exception,
)

MODEL_ID = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4:0"
USAGE = {"inputTokens": 1200, "outputTokens": 85, "totalTokens": 1285}
METRICS = {"latencyMs": 412}
_ABSENT: Any = object()


def answer(
    *content: Any, stop: str = "end_turn", usage: Any = USAGE, metrics: Any = METRICS, **extra: Any
) -> dict[str, Any]:
    """A complete Converse response as a provider adapter answers it; `_ABSENT` leaves a key out."""
    response: dict[str, Any] = {
        "output": {"message": {"role": "assistant", "content": list(content)}},
        "stopReason": stop,
        "usage": usage,
        "metrics": metrics,
        **extra,
    }
    return {key: value for key, value in response.items() if value is not _ABSENT}


def tool(tool_use_id: str, name: str, tool_input: Any) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": tool_use_id, "name": name, "input": tool_input}}


NESTED_INPUT = {
    "path": "src/app.py",
    "range": {"start": 1, "end": None},
    "flags": [True, False, None],
    "deep": {"a": {"b": {"c": [1, 2.5, "three", {"d": None}]}}},
    "note": 'a line\nwith "quotes", a tab\t and a backslash \\ ' * 3,
}
UNICODE_TEXT = "Grüße 👩‍👩‍👧 世界、こんにちは 한국어 🇯🇵 … " * 6

# What a provider may answer, each streamed and read back by botocore and boto3.
RESPONSES = [
    pytest.param(answer({"text": "Hello, world."}), id="text"),
    pytest.param(
        answer({"text": "First paragraph."}, {"text": ""}, {"text": "lorem ipsum " * 30}),
        id="several-text-blocks",
    ),
    pytest.param(
        answer({"text": "Reading it."}, tool("tooluse_a-1", "read_file", NESTED_INPUT), stop="tool_use"),
        id="tool-use-nested-input",
    ),
    pytest.param(
        answer(tool("t1", "list_files", {}), tool("t2", "run-tests", {"k": None}), stop="tool_use"),
        id="two-tools-empty-input",
    ),
    pytest.param(
        answer({"text": UNICODE_TEXT}, tool("t_ü", "write_file", {"路径": "файл.txt", "内容": UNICODE_TEXT})),
        id="unicode",
    ),
    pytest.param(
        answer({"text": "cached"}, usage={**USAGE, "cacheReadInputTokens": 1024, "cacheWriteInputTokens": 0}),
        id="usage-with-cache-tokens",
    ),
    pytest.param(answer({"text": "no usage reported"}, usage=_ABSENT), id="no-usage"),
    pytest.param(answer({"text": "no metrics"}, metrics=_ABSENT), id="no-metrics"),
    pytest.param(answer(stop="content_filtered"), id="no-content"),
    pytest.param(
        answer({"text": "cut"}, stop="max_tokens", additionalModelResponseFields={"stop_sequence": None}),
        id="max-tokens-additional-fields",
    ),
    pytest.param(answer({"text": "stopped"}, stop="stop_sequence"), id="stop-sequence"),
]


class _Raw:
    """The part of urllib3's response botocore's EventStream reads, in chunks of a given size."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data = data
        self._chunk = chunk

    def stream(self) -> Iterator[bytes]:
        for start in range(0, len(self._data), self._chunk):
            yield self._data[start : start + self._chunk]

    def close(self) -> None:
        pass


class _StockClient:
    """A stock boto3 bedrock-runtime client whose HTTP send answers `body` instead of the network."""

    def __init__(self) -> None:
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
        )
        self.client = session.client("bedrock-runtime")
        self.client.meta.events.register("before-send.bedrock-runtime.ConverseStream", self._send)
        self.body = b""
        self.paths: list[str] = []

    def _send(self, request: Any, **_: Any) -> AWSResponse:
        self.paths.append(urlsplit(request.url).path)
        raw = urllib3.HTTPResponse(body=io.BytesIO(self.body), preload_content=False)
        headers = HTTPHeaders()
        headers["content-type"] = CONTENT_TYPE
        return AWSResponse(request.url, 200, headers, raw)

    def converse_stream(self, body: bytes) -> Any:
        self.body = body
        messages = [{"role": "user", "content": [{"text": "hi"}]}]
        return self.client.converse_stream(modelId=MODEL_ID, messages=messages)["stream"]


@pytest.fixture(scope="module")
def stock() -> _StockClient:
    return _StockClient()


@pytest.fixture(scope="module")
def operation() -> OperationModel:
    return (
        botocore.session.get_session().get_service_model("bedrock-runtime").operation_model("ConverseStream")
    )


def _output_shape(operation: OperationModel) -> StructureShape:
    assert operation.output_shape is not None
    return operation.output_shape


def _stream_shape(operation: OperationModel) -> StructureShape:
    shape = _output_shape(operation).members["stream"]
    assert isinstance(shape, StructureShape)
    return shape


def parse(operation: OperationModel, data: bytes, chunk: int) -> list[dict[str, Any]]:
    """The events botocore's rest-json parser for ConverseStream yields from the raw body."""
    http = {
        "status_code": 200,
        "headers": {"content-type": CONTENT_TYPE},
        "body": _Raw(data, chunk),
        "context": {"operation_name": operation.name},
    }
    parsed = create_parser("rest-json").parse(http, _output_shape(operation))
    return list(parsed["stream"])


def decode(data: bytes) -> list[Any]:  # EventStreamMessage, which botocore-stubs types loosely
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    messages: list[Any] = list(buffer)
    assert sum(message.prelude.total_length for message in messages) == len(data)  # no bytes left over
    return messages


def reassemble(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What a streaming client rebuilds from the events: blocks by index, tool input parsed at stop."""
    blocks: dict[int, dict[str, Any]] = {}
    result: dict[str, Any] = {}
    for item in events:
        ((kind, body),) = item.items()
        if kind == "messageStart":
            result["role"] = body["role"]
        elif kind == "contentBlockStart":
            blocks[body["contentBlockIndex"]] = {"toolUse": {**body["start"]["toolUse"], "input": ""}}
        elif kind == "contentBlockDelta":
            delta = body["delta"]
            if "text" in delta:
                block = blocks.setdefault(body["contentBlockIndex"], {"text": ""})
                block["text"] += delta["text"]
            else:
                blocks[body["contentBlockIndex"]]["toolUse"]["input"] += delta["toolUse"]["input"]
        elif kind == "contentBlockStop":
            tool_use = blocks[body["contentBlockIndex"]].get("toolUse")
            if tool_use is not None:
                tool_use["input"] = json.loads(tool_use["input"])
        else:  # messageStop, metadata
            result.update(body)
    assert sorted(blocks) == list(range(len(blocks)))  # indices count the blocks from 0
    result["content"] = [blocks[index] for index in sorted(blocks)]
    return result


def expected_reassembly(response: Mapping[str, Any]) -> dict[str, Any]:
    expected: dict[str, Any] = {
        "role": "assistant",
        "content": response["output"]["message"]["content"],
        "stopReason": response["stopReason"],
        "metrics": response.get("metrics", {"latencyMs": 0}),
    }
    for key in ("usage", "additionalModelResponseFields"):
        if key in response:
            expected[key] = response[key]
    return expected


def as_client_events(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{kind: payload} for kind, payload in converse_stream_events(response)]


# ---- a stock boto3 client


@pytest.mark.parametrize("response", RESPONSES)
def test_a_stock_client_streams_the_answer(stock: _StockClient, response: dict[str, Any]) -> None:
    events = list(stock.converse_stream(encode_converse_stream(response)))

    assert events == as_client_events(response)
    assert reassemble(events) == expected_reassembly(response)
    assert stock.paths[-1] == f"/model/{quote(MODEL_ID, safe='')}/converse-stream"


@pytest.mark.parametrize("error_type", sorted(STREAM_EXCEPTIONS))
def test_an_exception_after_the_start_raises_in_the_client(stock: _StockClient, error_type: str) -> None:
    started = converse_stream_events(answer({"text": "partial answer"}))[:2]
    body = b"".join(event(kind, payload) for kind, payload in started)
    stream = stock.converse_stream(body + exception(error_type, "provider failed: 上游错误 ⚠"))

    seen = []
    with pytest.raises(EventStreamError) as raised:
        seen.extend(stream)
    # botocore raises EventStreamError carrying the member's code, not the client's modelled
    # class (client.exceptions.ThrottlingException): boto/botocore#3126.
    assert raised.value.response["Error"] == {"Code": error_type, "Message": "provider failed: 上游错误 ⚠"}
    assert seen == [{kind: payload} for kind, payload in started]


def test_a_tampered_stream_fails_in_the_client(stock: _StockClient) -> None:
    body = bytearray(encode_converse_stream(answer({"text": "Hello"})))
    body[-30] ^= 0x20  # inside the payload of the last message

    with pytest.raises(ChecksumMismatch):
        list(stock.converse_stream(bytes(body)))


# ---- botocore's parser and decoder


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_the_parser_reads_the_stream_however_it_arrives(operation: OperationModel, chunk: int) -> None:
    response = answer({"text": UNICODE_TEXT}, tool("t1", "read_file", NESTED_INPUT), stop="tool_use")

    assert parse(operation, encode_converse_stream(response), chunk) == as_client_events(response)


@pytest.mark.parametrize("response", RESPONSES)
def test_every_event_is_one_the_model_defines(operation: OperationModel, response: dict[str, Any]) -> None:
    stream = _stream_shape(operation)
    for kind, payload in converse_stream_events(response):
        shape = stream.members[kind]
        assert not shape.metadata.get("exception")
        report = ParamValidator().validate(payload, shape).generate_report()
        if kind == "metadata" and "usage" not in response:
            # Deliberate: the model marks usage required, but an unknown usage is left out
            # rather than invented; botocore's parser and boto3 read it (test above).
            assert report == 'Missing required parameter in input: "usage"'
        else:
            assert report == ""


def test_the_exceptions_are_the_streams_modelled_ones(operation: OperationModel) -> None:
    stream = _stream_shape(operation)
    modelled = {name for name, shape in stream.members.items() if shape.metadata.get("exception")}

    assert modelled == STREAM_EXCEPTIONS


def test_event_frames_carry_bedrocks_headers() -> None:
    payload = {"contentBlockIndex": 0, "delta": {"text": "héllo 👋"}}
    (message,) = decode(event("contentBlockDelta", payload))

    assert message.headers == {
        ":event-type": "contentBlockDelta",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert message.payload == '{"contentBlockIndex":0,"delta":{"text":"héllo 👋"}}'.encode()
    assert message.to_response_dict()["status_code"] == 200


def test_exception_frames_carry_the_exception_type() -> None:
    (message,) = decode(exception("modelStreamErrorException", "upstream closed"))

    assert message.headers == {
        ":exception-type": "modelStreamErrorException",
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    assert json.loads(message.payload) == {"message": "upstream closed"}
    assert message.to_response_dict()["status_code"] == 400


@pytest.mark.parametrize(
    ("error_type", "message"),
    [
        pytest.param("ThrottlingException", "slow down", id="shape-name-not-member"),
        pytest.param("accessDeniedException", "no", id="not-in-the-stream"),
        pytest.param("throttlingException", " \n", id="blank-message"),
    ],
)
def test_exception_refuses_what_the_client_could_not_read(error_type: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"exception|message"):
        exception(error_type, message)


# The published event-stream test vectors (the ones botocore's decoder tests use) whose
# headers are strings: the byte layout, both CRCs and the header encoding, bit for bit.
KNOWN_VECTORS = [
    pytest.param({}, b"", b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff", id="empty"),
    pytest.param(
        {},
        b"{'foo':'bar'}",
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96",
        id="payload-no-headers",
    ),
    pytest.param(
        {"content-type": "application/json"},
        b"{'foo':'bar'}",
        b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10"
        b"application/json{'foo':'bar'}\x8d\x9c\x08\xb1",
        id="payload-one-string-header",
    ),
    pytest.param(
        {":message-type": "error", ":error-code": "code", ":error-message": "message"},
        b"",
        b"\x00\x00\x00\x52\x00\x00\x00\x42\xbf\x23\x63\x7e\x0d:message-type\x07\x00\x05error"
        b"\x0b:error-code\x07\x00\x04code\x0e:error-message\x07\x00\x07message\x6b\x6c\xea\x3d",
        id="error-message",
    ),
    pytest.param(
        {":message-type": "event", ":event-type": "initial-response", ":content-type": "text/json"},
        b'{"InitialResponse": "sometext"}',
        b"\x00\x00\x00~\x00\x00\x00O\xc5\xa3\xdd\xc6\r:message-type\x07\x00\x05event\x0b:event-type"
        b'\x07\x00\x10initial-response\r:content-type\x07\x00\ttext/json{"InitialResponse": "sometext"}'
        b"\xf6\x98$\x83",
        id="initial-response",
    ),
]


@pytest.mark.parametrize(("headers", "payload", "expected"), KNOWN_VECTORS)
def test_messages_match_the_published_vectors(
    headers: dict[str, str], payload: bytes, expected: bytes
) -> None:
    assert encode_message(headers, payload) == expected


# ---- the events themselves


def test_events_come_in_bedrocks_order() -> None:
    response = answer(
        {"text": "Let me look."},
        tool("tooluse_1", "read_file", {"path": "a.py"}),
        stop="tool_use",
        usage={**USAGE, "cacheReadInputTokens": 7},
    )

    assert converse_stream_events(response) == [
        ("messageStart", {"role": "assistant"}),
        ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Let me look."}}),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        (
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "read_file"}}},
        ),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"path":"a.py"}'}}}),
        ("contentBlockStop", {"contentBlockIndex": 1}),
        ("messageStop", {"stopReason": "tool_use"}),
        ("metadata", {"usage": {**USAGE, "cacheReadInputTokens": 7}, "metrics": {"latencyMs": 412}}),
    ]


def _deltas(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        payload["delta"] for kind, payload in converse_stream_events(response) if kind == "contentBlockDelta"
    ]


def test_text_and_tool_input_arrive_in_several_deltas() -> None:
    text = "x" * 128 + UNICODE_TEXT[:22]  # code points, emoji and CJK among them
    tool_input = {"content": "y" * 192}

    texts = [delta["text"] for delta in _deltas(answer({"text": text}))]
    inputs = [delta["toolUse"]["input"] for delta in _deltas(answer(tool("t", "write_file", tool_input)))]

    assert [len(chunk) for chunk in texts] == [64, 64, 22]
    assert "".join(texts) == text
    assert len(inputs) == 4
    assert all(len(chunk) <= 64 for chunk in inputs)
    assert json.loads("".join(inputs)) == tool_input
    assert _deltas(answer({"text": ""})) == [{"text": ""}]


# Inputs the relay never accepts from a provider: refused, never streamed in part.
HOSTILE = [
    pytest.param(
        answer({"text": "a", "toolUse": {"toolUseId": "t", "name": "n", "input": {}}}), id="two-keys"
    ),
    pytest.param(answer({}), id="empty-block"),
    pytest.param(answer("text"), id="block-not-an-object"),
    pytest.param(answer({"text": 5}), id="text-not-a-string"),
    pytest.param(answer({"text": None}), id="text-null"),
    pytest.param(answer({"toolUse": {"toolUseId": "t", "input": {}}}), id="tool-without-name"),
    pytest.param(answer({"toolUse": {"toolUseId": "", "name": "n", "input": {}}}), id="tool-empty-id"),
    pytest.param(answer({"toolUse": {"toolUseId": "t", "name": "n"}}), id="tool-without-input"),
    pytest.param(answer(tool("t", "n", ["a"])), id="tool-input-a-list"),
    pytest.param(answer(tool("t", "n", {"x": math.nan})), id="tool-input-nan"),
    pytest.param(answer(tool("t", "n", {"x": math.inf})), id="tool-input-infinity"),
    pytest.param(answer(tool("t", "n", {"x": b"raw"})), id="tool-input-bytes"),
    pytest.param({"stopReason": "end_turn"}, id="no-output"),
    pytest.param({"output": {}, "stopReason": "end_turn"}, id="no-message"),
    pytest.param({"output": {"message": {"role": "assistant"}}, "stopReason": "end_turn"}, id="no-content"),
    pytest.param(
        {"output": {"message": {"role": "assistant", "content": {"text": "a"}}}, "stopReason": "end_turn"},
        id="content-not-a-list",
    ),
    pytest.param(
        {"output": {"message": {"role": "user", "content": []}}, "stopReason": "end_turn"}, id="role-user"
    ),
    pytest.param({"output": {"message": {"role": "assistant", "content": []}}}, id="no-stop-reason"),
    pytest.param(answer(stop=""), id="empty-stop-reason"),
    pytest.param(answer(usage={"inputTokens": 1, "outputTokens": 2}), id="usage-without-total"),
    pytest.param(answer(usage={**USAGE, "outputTokens": -1}), id="usage-negative"),
    pytest.param(answer(usage={**USAGE, "inputTokens": True}), id="usage-boolean"),
    pytest.param(answer(usage={**USAGE, "totalTokens": "1285"}), id="usage-string"),
    pytest.param(answer(usage=[1, 2, 3]), id="usage-not-an-object"),
    pytest.param(answer(metrics=[412]), id="metrics-not-an-object"),
]


def test_blocks_a_stream_client_is_not_shown_are_left_out_and_a_lone_surrogate_travels_escaped() -> None:
    reasoning = {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}}
    image = {"image": {"format": "png", "source": {"bytes": b"\x89PNG"}}}
    response = {
        "output": {
            "message": {"role": "assistant", "content": [reasoning, image, {"text": "lone \ud800 end"}]}
        },
        "stopReason": "end_turn",
    }
    events = converse_stream_events(response)
    starts = [body for name, body in events if name == "contentBlockDelta"]
    assert [body["contentBlockIndex"] for body in starts] == [2]  # Bedrock's index of the text block
    assert b"lone \\ud800 end" in encode_converse_stream(response)


@pytest.mark.parametrize("response", HOSTILE)
def test_a_response_the_relay_cannot_have_accepted_is_refused(response: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case fails on its own field
        encode_converse_stream(response)


# ---- the bounds of one message


def _headers_of(total: int) -> dict[str, str]:
    """Three one-letter string headers whose encoded section is exactly `total` bytes."""
    values = total - 3 * (1 + 1 + 3)
    first = min(values, MAX_HEADER_VALUE_BYTES)
    second = min(values - first, MAX_HEADER_VALUE_BYTES)
    return {"a": "v" * first, "b": "v" * second, "c": "v" * (values - first - second)}


FRAME = 16  # prelude (8), its CRC (4), the message CRC (4)

WITHIN_BOUNDS = [
    pytest.param({"n" * MAX_HEADER_NAME_BYTES: "v"}, 0, id="longest-name"),
    pytest.param({"é" * (MAX_HEADER_NAME_BYTES // 2): "v"}, 0, id="longest-two-byte-name"),
    pytest.param({"v": "w" * MAX_HEADER_VALUE_BYTES}, 0, id="longest-value"),
    pytest.param(_headers_of(MAX_HEADERS_BYTES), 0, id="largest-header-section"),
    pytest.param({}, MAX_MESSAGE_BYTES - FRAME, id="largest-message"),
    pytest.param({":event-type": "x"}, MAX_MESSAGE_BYTES - FRAME - 16, id="largest-message-with-header"),
]

BEYOND_BOUNDS = [
    pytest.param({"": "v"}, 0, id="empty-name"),
    pytest.param({"n" * (MAX_HEADER_NAME_BYTES + 1): "v"}, 0, id="name-too-long"),
    pytest.param({"é" * 128: "v"}, 0, id="name-too-long-in-bytes"),
    pytest.param({"v": "w" * (MAX_HEADER_VALUE_BYTES + 1)}, 0, id="value-too-long"),
    pytest.param({"v": "世" * 21846}, 0, id="value-too-long-in-bytes"),
    pytest.param(_headers_of(MAX_HEADERS_BYTES + 1), 0, id="header-section-too-large"),
    pytest.param({}, MAX_MESSAGE_BYTES - FRAME + 1, id="message-too-large"),
    pytest.param({":event-type": "x"}, MAX_MESSAGE_BYTES - FRAME - 15, id="message-with-header-too-large"),
    pytest.param({"\ud800": "v"}, 0, id="lone-surrogate-name"),
    pytest.param({"v": "\udfff"}, 0, id="lone-surrogate-value"),
]


@pytest.mark.parametrize(("headers", "payload_bytes"), WITHIN_BOUNDS)
def test_messages_at_the_bounds_decode(headers: dict[str, str], payload_bytes: int) -> None:
    payload = b"p" * payload_bytes
    data = encode_message(headers, payload)
    (message,) = decode(data)

    assert message.headers == headers
    assert message.payload == payload
    assert message.prelude.total_length == len(data) <= MAX_MESSAGE_BYTES


@pytest.mark.parametrize(("headers", "payload_bytes"), BEYOND_BOUNDS)
def test_messages_beyond_the_bounds_are_refused(headers: dict[str, str], payload_bytes: int) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case fails on its own bound
        encode_message(headers, b"p" * payload_bytes)


# ---- checksums


_SAMPLE = event("messageStart", {"role": "assistant"})
TAMPERED_OFFSETS = [
    pytest.param(3, id="total-length"),
    pytest.param(7, id="headers-length"),
    pytest.param(9, id="prelude-crc"),
    pytest.param(12, id="header-name-length"),
    pytest.param(14, id="header-name"),
    pytest.param(24, id="header-value-type"),
    pytest.param(len(_SAMPLE) - 10, id="payload"),
    pytest.param(len(_SAMPLE) - 1, id="message-crc"),
]


@pytest.mark.parametrize("offset", TAMPERED_OFFSETS)
def test_a_flipped_bit_anywhere_fails_the_checksum(offset: int) -> None:
    data = bytearray(_SAMPLE)
    data[offset] ^= 0x01

    with pytest.raises(ChecksumMismatch):
        decode(bytes(data))
