"""The Bedrock Converse request the relay accepts, validated before anything is charged.

Field names are Bedrock's own (camelCase) and every object forbids unknown fields, so a
body that passes here is one Bedrock would take, and the same shape is what every provider
adapter translates from. Only text, toolUse and toolResult content is accepted: the budget
bound of `payload_bytes` holds for text, not for images or documents.

`json` is a Bedrock field name that would shadow a pydantic method, so the models call it
`json_` and accept and emit it only under its alias; dump with `wire(...)`, not by hand.

Text must be Unicode that UTF-8 can encode: JSON's `\\ud800` escape decodes to a lone
surrogate, which no provider takes and which would break the byte count of the budget bound.
`text_fields` yields every string of a body (keys included) with its field, for the relay to
refuse such text, and the credentials it never forwards, naming the field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

_CONFIG = ConfigDict(extra="forbid")
_TOOL_NAME = r"^[a-zA-Z0-9_-]+$"  # Bedrock's pattern for tool names
_TOOL_USE_ID = r"^[a-zA-Z0-9_-]+$"  # Bedrock's pattern for tool use ids
MAX_TOKENS_LIMIT = 1_000_000  # above every model's output limit: larger is absurd, refused
MAX_STOP_SEQUENCES = 4


def _first_key(*tags: str) -> Any:
    """A discriminator that picks the union member by which Bedrock key the block holds.

    The tag is the Bedrock key; on a model instance the attribute (`json_` for `json`).
    """

    def pick(value: Any) -> str | None:
        if isinstance(value, dict):
            return next((tag for tag in tags if tag in value), None)
        return next((tag for tag in tags if getattr(value, _attribute(tag), None) is not None), None)

    return Discriminator(
        pick,
        custom_error_type="unknown_block",
        custom_error_message=f"expected a block holding one of: {', '.join(tags)}",
    )


def _attribute(key: str) -> str:
    return "json_" if key == "json" else key


class TextBlock(BaseModel):
    model_config = _CONFIG
    text: str


class ToolUse(BaseModel):
    model_config = _CONFIG
    toolUseId: str = Field(min_length=1, max_length=64, pattern=_TOOL_USE_ID)
    name: str = Field(min_length=1, max_length=64, pattern=_TOOL_NAME)
    input: dict[str, Any]


class ToolUseBlock(BaseModel):
    model_config = _CONFIG
    toolUse: ToolUse


class ToolResultText(BaseModel):
    model_config = _CONFIG
    text: str


class ToolResultJson(BaseModel):
    model_config = _CONFIG
    json_: dict[str, Any] = Field(alias="json")


ToolResultContent = Annotated[
    Annotated[ToolResultText, Tag("text")] | Annotated[ToolResultJson, Tag("json")],
    _first_key("text", "json"),
]


class ToolResult(BaseModel):
    model_config = _CONFIG
    toolUseId: str = Field(min_length=1, max_length=64, pattern=_TOOL_USE_ID)
    content: list[ToolResultContent]
    status: Literal["success", "error"] | None = None


class ToolResultBlock(BaseModel):
    model_config = _CONFIG
    toolResult: ToolResult


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("toolUse")]
    | Annotated[ToolResultBlock, Tag("toolResult")],
    _first_key("text", "toolUse", "toolResult"),
]


class Message(BaseModel):
    model_config = _CONFIG
    role: Literal["user", "assistant"]
    content: list[ContentBlock] = Field(min_length=1)

    @model_validator(mode="after")
    def _blocks_fit_role(self) -> Message:
        # Bedrock refuses these; refusing them here keeps a doomed call from being charged.
        for block in self.content:
            if isinstance(block, ToolUseBlock) and self.role != "assistant":
                raise ValueError("toolUse blocks belong in assistant messages")
            if isinstance(block, ToolResultBlock) and self.role != "user":
                raise ValueError("toolResult blocks belong in user messages")
        return self


class SystemBlock(BaseModel):
    model_config = _CONFIG
    text: str


class InputSchema(BaseModel):
    model_config = _CONFIG
    json_: dict[str, Any] = Field(alias="json")


class ToolSpec(BaseModel):
    model_config = _CONFIG
    name: str = Field(min_length=1, max_length=64, pattern=_TOOL_NAME)
    description: str | None = Field(default=None, min_length=1)
    inputSchema: InputSchema


class Tool(BaseModel):
    model_config = _CONFIG
    toolSpec: ToolSpec


class Empty(BaseModel):
    model_config = _CONFIG


class SpecificTool(BaseModel):
    model_config = _CONFIG
    name: str = Field(min_length=1, max_length=64, pattern=_TOOL_NAME)


class ToolChoice(BaseModel):
    """Exactly one of `auto`, `any` (some tool must be called) or `tool` (this one)."""

    model_config = _CONFIG
    auto: Empty | None = None
    any: Empty | None = None
    tool: SpecificTool | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ToolChoice:
        if sum(choice is not None for choice in (self.auto, self.any, self.tool)) != 1:
            raise ValueError("toolChoice takes exactly one of auto, any, tool")
        return self


class ToolConfig(BaseModel):
    model_config = _CONFIG
    tools: list[Tool] = Field(min_length=1)
    toolChoice: ToolChoice | None = None

    @model_validator(mode="after")
    def _names(self) -> ToolConfig:
        names = [tool.toolSpec.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError("tool names must be unique")
        chosen = self.toolChoice.tool if self.toolChoice is not None else None
        if chosen is not None and chosen.name not in names:
            raise ValueError("toolChoice.tool.name must name one of the tools")
        return self


class InferenceConfig(BaseModel):
    model_config = _CONFIG
    maxTokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    temperature: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    topP: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    stopSequences: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, max_length=MAX_STOP_SEQUENCES
    )


class ConverseRequest(BaseModel):
    """The body of `POST /v1/relay/converse`. The model comes from the capability:
    `modelId` is accepted only so that the relay can refuse a body naming another model."""

    model_config = _CONFIG
    messages: list[Message] = Field(min_length=1)
    system: list[SystemBlock] | None = None
    toolConfig: ToolConfig | None = None
    inferenceConfig: InferenceConfig | None = None
    modelId: str | None = None

    @model_validator(mode="after")
    def _conversation(self) -> ConverseRequest:
        if self.messages[0].role != "user":
            raise ValueError("the first message must have role user")
        uses_tools = any(
            isinstance(block, ToolUseBlock | ToolResultBlock)
            for message in self.messages
            for block in message.content
        )
        if uses_tools and self.toolConfig is None:
            raise ValueError("toolConfig is required when messages hold toolUse or toolResult blocks")
        return self


def wire(model: BaseModel) -> Any:
    """A model as Bedrock's JSON: aliases (`json`), absent optional fields left out.

    `exclude_none` applies to model fields only: a null inside a tool input stays.
    """
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def model_input(request: ConverseRequest) -> dict[str, Any]:
    """Everything that is sent to the model: messages, system text and tool configuration."""
    sent: dict[str, Any] = {"messages": [wire(message) for message in request.messages]}
    if request.system is not None:
        sent["system"] = [wire(block) for block in request.system]
    if request.toolConfig is not None:
        sent["toolConfig"] = wire(request.toolConfig)
    return sent


def payload_bytes(request: ConverseRequest) -> int:
    """UTF-8 length of the compact JSON of `model_input`: the basis of the input-token bound."""
    text = json.dumps(model_input(request), ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8"))


_SURROGATE = re.compile("[\ud800-\udfff]")
_PLAIN_KEY = re.compile("[A-Za-z0-9_-]{1,64}")


def is_valid_text(text: str) -> bool:
    """Whether `text` is Unicode that UTF-8 can encode (no lone surrogate)."""
    return _SURROGATE.search(text) is None


def valid_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (what a UTF-8 decoder shows)."""
    return _SURROGATE.sub("\ufffd", text)


MAX_DEPTH = 64  # JSON nesting a body may have: far beyond any real tool input or schema


def too_deep(data: Any, limit: int = MAX_DEPTH) -> str | None:
    """The field (dotted as `text_fields` names them) of the first object or array nested
    deeper than `limit`, or None. Deeper bodies fail pydantic's serializer (about 255 levels)
    and Python's parser (about 1000) with errors that are not the client's to read."""
    stack: list[tuple[str, Any, int]] = [("", data, 1)]
    while stack:
        field, value, depth = stack.pop()
        if not isinstance(value, dict | list):
            continue
        if depth > limit:
            return field or "body"
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in pairs:
            name = str(key) if _PLAIN_KEY.fullmatch(str(key)) else "*"
            stack.append((f"{field}.{name}" if field else name, item, depth + 1))
    return None


def escape_surrogates(json_text: str) -> str:
    """`json_text` (JSON written with `ensure_ascii=False`) with each lone surrogate as its
    `\\uXXXX` escape: still the same JSON, and now encodable as UTF-8. A surrogate can only
    stand inside a JSON string, where an escape means the same."""
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", json_text)


JOIN_WINDOW = 4096  # longer than any issued credential, even base64 of base64 of one


def joined_texts(data: Any, window: int = JOIN_WINDOW) -> Iterator[tuple[str, str]]:
    """What a screen must see beyond each text alone: a model reads adjacent text blocks
    (objects with a string `text`: a message's content, `system`, a tool result's content)
    as one text, so a credential can be split across two. All of them joined in document
    order, the text around each place where one block meets the next (`window` characters
    either side, windows that overlap merged: linear in the body), each with the field of the
    list holding its blocks, or `body` when they stand in more than one list. Iterative."""
    blocks: list[tuple[str, str]] = []  # (the field of the list, the text), in document order
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        field, value = stack.pop()
        if isinstance(value, dict):
            items: Any = [(key if _PLAIN_KEY.fullmatch(key) else "*", item) for key, item in value.items()]
        elif isinstance(value, list):
            blocks += [
                (field or "body", item["text"])
                for item in value
                if isinstance(item, dict) and isinstance(item.get("text"), str)
            ]
            items = enumerate(value)
        else:
            continue
        # Depth-first, in order: a list's own blocks come before any nested deeper in it.
        stack.extend(
            reversed(
                [
                    (f"{field}.{key}" if field else str(key), item)
                    for key, item in items
                    if isinstance(item, dict | list)
                ]
            )
        )
    if len(blocks) < 2:
        return
    joined = "".join(text for _, text in blocks)
    start = end = -1
    fields: set[str] = set()
    offset = 0
    for index in range(1, len(blocks)):
        offset += len(blocks[index - 1][1])
        if offset - window > end and fields:  # this meeting's window does not touch the last
            yield (next(iter(fields)) if len(fields) == 1 else "body"), joined[start:end]
            fields = set()
        if not fields:
            start = max(0, offset - window)
        end = offset + window
        fields |= {blocks[index - 1][0], blocks[index][0]}
    yield (next(iter(fields)) if len(fields) == 1 else "body"), joined[start:end]


def text_fields(data: Any, root: str = "") -> Iterator[tuple[str, str]]:
    """Every string of the JSON value `data`, object keys included, with the field it is in,
    dotted as `BadRequest` names fields (`messages.0.content.1.text`, below `root` if given);
    a key is reported at its object's field (`body` for the top level without a root). A
    key that is not a plain name (64 characters of `[A-Za-z0-9_-]`) shows as `*` in the
    fields below it, so a field name never quotes arbitrary content. A key is yielded before
    anything under it. Iterative: any depth JSON parses is fine."""
    stack: list[tuple[str, Any]] = [(root, data)]
    while stack:
        field, value = stack.pop()
        if isinstance(value, str):
            yield field or "body", value
        elif isinstance(value, dict):
            children = []
            for raw_key, item in value.items():
                key = str(raw_key)
                yield field or "body", key
                name = key if _PLAIN_KEY.fullmatch(key) else "*"
                children.append((f"{field}.{name}" if field else name, item))
            stack.extend(reversed(children))
        elif isinstance(value, list):
            stack.extend(
                reversed([(f"{field}.{i}" if field else str(i), item) for i, item in enumerate(value)])
            )
