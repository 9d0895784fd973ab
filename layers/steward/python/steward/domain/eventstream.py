"""Bedrock's ConverseStream in AWS event-stream framing, synthesized from one Converse answer.

A stock boto3 `bedrock-runtime` client calls `POST /model/{modelId}/converse-stream` and
reads the body as `application/vnd.amazon.eventstream`: binary messages, each a prelude
(total and header lengths with their CRC32), string headers, a JSON payload and a CRC32 of
the whole. botocore ships only a decoder (`botocore.eventstream`), no encoder, so the relay
writes the frames itself, here, with `struct` and `zlib.crc32`.

The relay does not stream from the provider: it makes one complete, non-streaming Converse
call (one reservation, one settlement on known usage) and then replays that answer as the
events Bedrock would have sent, in Bedrock's order, text cut into several deltas so that
a client's streaming code path is exercised. Text and toolUse blocks are streamed; a block
of another kind (a reasoning model's `reasoningContent`, an image) is left out, as the
OpenAI surface leaves it out, and a malformed answer is refused (ValueError). The relay has
settled the call before it encodes, so it answers an encoding failure with a 200 whose body
is one `exception` message (`modelStreamErrorException`) rather than a 5xx a client would
retry and be charged for again. Absent usage is left out of `metadata` instead of being
invented (the model marks it required, botocore's parser does not enforce that).

Pure: no I/O, no AWS SDK (tests/unit/test_eventstream.py proves the bytes with botocore's
own decoder, parser and a stock boto3 client).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from steward.domain.converse import escape_surrogates

CONTENT_TYPE = "application/vnd.amazon.eventstream"

MAX_HEADER_NAME_BYTES = 255  # the name's length is one byte
MAX_HEADER_VALUE_BYTES = 65_535  # a string value's length is two bytes
MAX_HEADERS_BYTES = 128 * 1024  # botocore's decoder refuses a larger header section
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # the event-stream bound on one message
TEXT_CHUNK_CHARS = 64  # characters per delta: several deltas for all but short answers

# The exceptions ConverseStreamOutput models, by member name: botocore looks the
# `:exception-type` up among the stream's members, so the shape name
# (`ThrottlingException`) would reach the client without its code.
STREAM_EXCEPTIONS = frozenset(
    {
        "internalServerException",
        "modelStreamErrorException",
        "serviceUnavailableException",
        "throttlingException",
        "validationException",
    }
)

_PRELUDE = struct.Struct(">II")  # total length, headers length
_UINT32 = struct.Struct(">I")
_STRING_VALUE = struct.Struct(">BH")  # value type, value length
_STRING_TYPE = 7
_FRAME_BYTES = _PRELUDE.size + 2 * _UINT32.size  # prelude, its CRC, the message CRC
_USAGE_REQUIRED = ("inputTokens", "outputTokens", "totalTokens")


def encode_message(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One event-stream message with string headers; ValueError past a bound the decoder enforces.

    Text that UTF-8 cannot encode (a lone surrogate) raises UnicodeEncodeError, a ValueError.
    """
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    if len(encoded) > MAX_HEADERS_BYTES:
        raise ValueError(f"headers of {len(encoded)} bytes exceed {MAX_HEADERS_BYTES}")
    total = _FRAME_BYTES + len(encoded) + len(payload)
    if total > MAX_MESSAGE_BYTES:
        raise ValueError(f"a message of {total} bytes exceeds {MAX_MESSAGE_BYTES}")
    prelude = _PRELUDE.pack(total, len(encoded))
    message = b"".join((prelude, _UINT32.pack(zlib.crc32(prelude)), encoded, payload))
    return message + _UINT32.pack(zlib.crc32(message))


def event(event_type: str, payload: Mapping[str, Any]) -> bytes:
    """An event message: botocore picks the stream member by `:event-type` and parses the JSON."""
    return encode_message(
        {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"},
        _json(payload),
    )


def exception(error_type: str, message: str) -> bytes:
    """An exception message, the only way to report a failure once the 200 has been sent.

    `error_type` is a ConverseStreamOutput member (STREAM_EXCEPTIONS); boto3 then raises
    EventStreamError with that code and the message. The model requires a non-blank message.
    """
    if error_type not in STREAM_EXCEPTIONS:
        raise ValueError(f"{error_type!r} is not a ConverseStream exception: {sorted(STREAM_EXCEPTIONS)}")
    if not message.strip():
        raise ValueError("an exception needs a non-blank message")
    return encode_message(
        {
            ":exception-type": error_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        _json({"message": message}),
    )


def converse_stream_events(response: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (event type, payload) pairs Bedrock would stream for this complete Converse response.

    `additionalModelResponseFields`, when the response has it, rides on messageStop as in Bedrock.

    ValueError for a response the relay cannot have accepted from a provider: a block that is
    not exactly one of text or toolUse, no stop reason, usage without its required counts.
    """
    message = _mapping(response.get("output"), "output")
    message = _mapping(message.get("message"), "output.message")
    if message.get("role", "assistant") != "assistant":
        raise ValueError(f"output.message.role must be assistant, not {message.get('role')!r}")
    content = message.get("content")
    if not isinstance(content, list):
        raise ValueError("output.message.content must be a list of blocks")
    stop_reason = response.get("stopReason")
    if not isinstance(stop_reason, str) or not stop_reason:
        raise ValueError("stopReason must be a non-empty string")

    events: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    for index, block in enumerate(content):
        events.extend(_block_events(index, block))
    stop: dict[str, Any] = {"stopReason": stop_reason}
    if "additionalModelResponseFields" in response:
        stop["additionalModelResponseFields"] = response["additionalModelResponseFields"]
    events.append(("messageStop", stop))

    metadata: dict[str, Any] = {}
    usage = response.get("usage")
    if usage is not None:
        usage = _mapping(usage, "usage")
        for key in _USAGE_REQUIRED:
            if not _is_count(usage.get(key)):
                raise ValueError(f"usage.{key} must be a non-negative integer")
        metadata["usage"] = dict(usage)
    metrics = response.get("metrics")
    metadata["metrics"] = {"latencyMs": 0} if metrics is None else dict(_mapping(metrics, "metrics"))
    events.append(("metadata", metadata))
    return events


def encode_converse_stream(response: Mapping[str, Any]) -> bytes:
    """The whole response body of converse-stream for one complete Converse response."""
    return b"".join(event(event_type, payload) for event_type, payload in converse_stream_events(response))


def _block_events(index: int, block: Any) -> list[tuple[str, dict[str, Any]]]:
    where = f"output.message.content[{index}]"
    if not isinstance(block, Mapping) or len(block) != 1:
        keys = sorted(block) if isinstance(block, Mapping) else type(block).__name__
        raise ValueError(f"{where} must hold exactly one block kind, not {keys}")
    if next(iter(block)) not in ("text", "toolUse"):
        return []  # a kind a stream client is not shown (reasoning, an image): left out, as OpenAI's are
    events: list[tuple[str, dict[str, Any]]] = []
    if "text" in block:
        text = block["text"]
        if not isinstance(text, str):
            raise ValueError(f"{where}.text must be a string")
        deltas: list[dict[str, Any]] = [{"text": chunk} for chunk in _chunks(text)]
    else:
        tool_use = _mapping(block["toolUse"], f"{where}.toolUse")
        start: dict[str, str] = {}
        for key in ("toolUseId", "name"):
            value = tool_use.get(key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{where}.toolUse.{key} must be a non-empty string")
            start[key] = value
        tool_input = _mapping(tool_use.get("input"), f"{where}.toolUse.input")
        events.append(("contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": start}}))
        serialized = _json(tool_input).decode("utf-8")
        deltas = [{"toolUse": {"input": chunk}} for chunk in _chunks(serialized)]
    events.extend(("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}) for delta in deltas)
    events.append(("contentBlockStop", {"contentBlockIndex": index}))
    return events


def _chunks(text: str) -> list[str]:
    """Cuts on code points (a Python str holds no surrogate pairs); "" is one empty delta."""
    return [text[i : i + TEXT_CHUNK_CHARS] for i in range(0, len(text), TEXT_CHUNK_CHARS)] or [""]


def _header(name: str, value: str) -> bytes:
    raw_name = name.encode("utf-8")
    raw_value = value.encode("utf-8")
    if not 1 <= len(raw_name) <= MAX_HEADER_NAME_BYTES:
        raise ValueError(f"a header name takes 1 to {MAX_HEADER_NAME_BYTES} bytes, not {len(raw_name)}")
    if len(raw_value) > MAX_HEADER_VALUE_BYTES:
        raise ValueError(
            f"header {name!r}: a value of {len(raw_value)} bytes exceeds {MAX_HEADER_VALUE_BYTES}"
        )
    return bytes((len(raw_name),)) + raw_name + _STRING_VALUE.pack(_STRING_TYPE, len(raw_value)) + raw_value


def _json(value: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON; what JSON cannot hold (NaN, bytes) raises ValueError. A model's lone
    surrogate, which UTF-8 cannot encode, travels as its JSON escape (botocore's parser reads
    it) instead of failing the encoding after the call was charged."""
    try:
        text = json.dumps(dict(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except TypeError as error:  # a value of a type JSON has no form for
        raise ValueError(str(error)) from error
    return escape_surrogates(text).encode("utf-8")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be an object")
    return value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
