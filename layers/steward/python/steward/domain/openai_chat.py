"""OpenAI Chat Completions (`POST /v1/chat/completions`) as the one Converse shape, and back.

The relay admits, budgets and forwards Converse requests only; this module translates the
body a stock OpenAI client sends into that shape (`to_converse`), and a Converse answer into
what such a client reads (`completion`, or `completion_chunks` + `sse` when it streamed).
Pure: no I/O. Every refusal is a `BadRequest` naming the OpenAI field, dotted
(`messages.3.tool_calls.0.function.arguments`); `parse_chat_request` validates a body.

Translation rules:

* `system` and `developer` messages become Converse `system` blocks, in order, wherever
  they stand (Converse has system text only ahead of the conversation);
* `user` text and `tool` results form user messages, `assistant` text and `tool_calls`
  assistant messages; consecutive messages of one Converse role merge into one (Bedrock
  wants alternation), so the tool messages answering a turn and the user text after them
  become one user message, toolResult blocks first;
* `tool_calls` become toolUse blocks, `arguments` parsed as a JSON object (blank counts
  as `{}`); every tool message must answer a call of the assistant message before it, and
  every call must be answered before the next user or assistant message, as OpenAI and
  Bedrock both require; call ids must fit Converse's toolUseId (`[a-zA-Z0-9_-]`, 1 to 64);
* empty text is dropped, and so is a message left without content (an assistant message
  with empty content and no tool calls, as agent loops append after an empty answer: it
  carries nothing); the first remaining message must be the user's (Converse's rule);
* `tools` become `toolConfig.tools[].toolSpec` (`inputSchema.json` = `parameters`, or an
  empty object schema); `tool_choice` auto / required / a named function becomes `auto` /
  `any` / `tool`; `none` omits the tools, which is possible only while the history holds
  no tool calls (Converse then requires `toolConfig`, and has no "none");
* `max_completion_tokens` / `max_tokens` (the smaller when both), `temperature`, `top_p`
  and `stop` become `inferenceConfig`; `model` is not copied: the caller checks it against
  the capability's pinned model;
* answers: text blocks joined with a blank line as `content`, toolUse blocks as
  `tool_calls` (compact JSON `arguments`); other blocks (reasoning) are not shown, as
  OpenAI shows none; `prompt_tokens` counts cache reads and writes, `cached_tokens` the
  reads.

Refused, because the relay cannot honour them (OpenAI itself refuses unknown fields, so
an unknown field is refused too): `n` other than 1; `temperature` above 1 (Converse's scale
is 0 to 1, OpenAI's 0 to 2, and no rescaling means the same for every model);
`response_format` other than text, `logprobs` true, `top_logprobs`, `audio`, `modalities`
other than text, `web_search_options`, `moderation`, `reasoning_effort`, `verbosity` other
than medium, `presence_penalty` / `frequency_penalty` other than 0, a non-empty
`logit_bias`, `parallel_tool_calls` false, a `service_tier` other than auto or default (a
price and latency tier Steward does not sell); image, audio and file content parts (text
only: the budget's input bound holds for text); the deprecated `function` role,
`functions` and `function_call`; custom tools and `allowed_tools` tool choices.

Ignored, since they change neither what is generated nor what is billed beyond the
reservation: `user`, `safety_identifier`, `metadata`, `store` (the relay stores nothing),
`seed` (best effort at OpenAI too), `prediction` (a latency hint: the answer is the same),
`prompt_cache_key`, `prompt_cache_options`, `prompt_cache_retention` and text parts'
`prompt_cache_breakpoint` (caching is the provider's; usage says what it saved),
`stream_options.include_obfuscation`, a tool's `strict` (the schema is sent; decoding is
not constrained, and the client validates arguments anyway), messages' `name` and an
assistant message's `refusal` and refusal parts (Converse has neither), `stream_options`
without `stream`; an empty `tools` or `tool_calls` list counts as none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from steward.domain.converse import MAX_STOP_SEQUENCES, MAX_TOKENS_LIMIT, escape_surrogates
from steward.domain.errors import BadRequest

_CONFIG = ConfigDict(extra="forbid")
_CONVERSE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # Converse's tool names and toolUseIds
_MEDIA_PARTS = ("image_url", "input_audio", "file")
_CHUNK_CHARS = 64  # the most characters of text or arguments in one streamed delta
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "content_filtered": "content_filter",
    "guardrail_intervened": "content_filter",
}


def _compact(value: Any) -> str:
    # A model's lone surrogate travels escaped: the answer must encode, it was paid for.
    return escape_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


# -- the request ------------------------------------------------------------------------------


class ContentPart(BaseModel):
    """A content part: `text`, or `refusal` (assistant only, ignored); media is refused."""

    model_config = _CONFIG
    type: str
    text: str | None = Field(default=None, validate_default=True)
    refusal: str | None = None  # ignored
    prompt_cache_breakpoint: Any = None  # ignored

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value in _MEDIA_PARTS:
            raise ValueError(f"{value} content parts are refused: the relay forwards text only")
        if value not in ("text", "refusal"):
            raise ValueError(f"unknown content part type {value!r}: expected text")
        return value

    @field_validator("text")
    @classmethod
    def _text_present(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("type") == "text":
            raise ValueError("a text part needs text")
        return value


def _converse_name(value: str, what: str) -> str:
    if not _CONVERSE_NAME.fullmatch(value):
        raise ValueError(f"a {what} must be 1 to 64 of [a-zA-Z0-9_-] (Converse's pattern)")
    return value


class FunctionCall(BaseModel):
    model_config = _CONFIG
    name: str
    arguments: str  # JSON text, parsed by to_converse

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _converse_name(value, "tool name")


class ToolCall(BaseModel):
    model_config = _CONFIG
    id: str
    type: str
    function: FunctionCall

    @field_validator("id")
    @classmethod
    def _converse_id(cls, value: str) -> str:
        return _converse_name(value, "tool call id")

    @field_validator("type")
    @classmethod
    def _function(cls, value: str) -> str:
        if value != "function":
            raise ValueError(f"{value!r} tool calls are refused: only function tool calls translate")
        return value


def _only(roles: tuple[str, ...], field: str, value: Any, info: ValidationInfo) -> None:
    role = info.data.get("role")
    if value is not None and role is not None and role not in roles:
        raise ValueError(f"{field} belongs to {' and '.join(roles)} messages, not {role}")


class ChatMessage(BaseModel):
    """One message of any role; the rules of each role are checked field by field, so an
    error names the field (`messages.2.tool_call_id`), not a union member."""

    model_config = _CONFIG
    role: str
    content: list[ContentPart] | None = Field(default=None, validate_default=True)
    name: str | None = None  # ignored: Converse has no participant names
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(default=None, validate_default=True)
    refusal: str | None = None  # ignored
    function_call: Any = None
    audio: Any = None

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if value == "function":
            raise ValueError("the deprecated function role is refused: answer tool calls with tool messages")
        if value not in ("system", "developer", "user", "assistant", "tool"):
            raise ValueError(f"unknown role {value!r}: expected system, developer, user, assistant or tool")
        return value

    @field_validator("content", mode="before")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [{"type": "text", "text": value}]
        if value is not None and not isinstance(value, list):
            raise ValueError("content must be a string or a list of content parts")
        return value

    @field_validator("content")
    @classmethod
    def _content_fits_role(cls, value: list[ContentPart] | None, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if role is None:
            return value
        if value is None and role != "assistant":
            raise ValueError(f"a {role} message needs content")
        if role != "assistant" and any(part.type == "refusal" for part in value or ()):
            raise ValueError("refusal parts belong to assistant messages")
        return value

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls(cls, value: list[ToolCall] | None, info: ValidationInfo) -> list[ToolCall] | None:
        _only(("assistant",), "tool_calls", value, info)
        return value or None  # `[]` is no tool call

    @field_validator("tool_call_id")
    @classmethod
    def _tool_call_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        _only(("tool",), "tool_call_id", value, info)
        if value is None and info.data.get("role") == "tool":
            raise ValueError("a tool message needs tool_call_id")
        return value

    @field_validator("refusal")
    @classmethod
    def _refusal(cls, value: str | None, info: ValidationInfo) -> str | None:
        _only(("assistant",), "refusal", value, info)
        return value

    @field_validator("function_call")
    @classmethod
    def _function_call(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("the deprecated function_call is refused: use tool_calls")
        return value

    @field_validator("audio")
    @classmethod
    def _audio(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError("audio is refused: the relay forwards text only")
        return value

    def texts(self) -> list[str]:
        """The non-empty text of the message's text parts (refusal parts are not text)."""
        return [part.text for part in self.content or () if part.type == "text" and part.text]


class FunctionDefinition(BaseModel):
    model_config = _CONFIG
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None  # ignored: decoding is not constrained

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _converse_name(value, "tool name")


class ChatTool(BaseModel):
    model_config = _CONFIG
    type: str
    function: FunctionDefinition

    @field_validator("type")
    @classmethod
    def _function(cls, value: str) -> str:
        if value != "function":
            raise ValueError(f"{value!r} tools are refused: only function tools translate")
        return value


class ChosenFunction(BaseModel):
    model_config = _CONFIG
    name: str


class ToolChoice(BaseModel):
    """`tool_choice`, its string forms held as `type` ("auto", "none", "required")."""

    model_config = _CONFIG
    type: str
    function: ChosenFunction | None = Field(default=None, validate_default=True)

    @field_validator("type")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value not in ("auto", "none", "required", "function"):
            raise ValueError(
                f"{value!r} tool choices are refused: use auto, none, required or a named function"
            )
        return value

    @field_validator("function")
    @classmethod
    def _named(cls, value: ChosenFunction | None, info: ValidationInfo) -> ChosenFunction | None:
        if value is None and info.data.get("type") == "function":
            raise ValueError("a function tool choice needs function.name")
        return value


class StreamOptions(BaseModel):
    model_config = _CONFIG
    include_usage: StrictBool | None = None
    include_obfuscation: StrictBool | None = None  # ignored: nothing is obfuscated


def _zero(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool) and value == 0)


# Fields accepted only at the value that changes nothing: each with why another is refused.
_DEFAULT_ONLY: dict[str, tuple[Callable[[Any], bool], str]] = {
    "frequency_penalty": (_zero, "Converse has no frequency penalty: only 0 is accepted"),
    "presence_penalty": (_zero, "Converse has no presence penalty: only 0 is accepted"),
    "logit_bias": (lambda v: not v, "Converse has no logit bias"),
    "logprobs": (lambda v: v in (None, False), "the relay cannot return log probabilities"),
    "top_logprobs": (_zero, "the relay cannot return log probabilities"),
    "audio": (lambda v: v is None, "the relay answers text only"),
    "modalities": (lambda v: v in (None, ["text"]), "the relay answers text only"),
    "response_format": (
        lambda v: v is None or v == {"type": "text"},
        "the relay cannot constrain the answer to JSON: only type text is accepted",
    ),
    "web_search_options": (lambda v: v is None, "the relay has no web search"),
    "moderation": (lambda v: v is None, "the relay runs no moderation model"),
    "reasoning_effort": (lambda v: v is None, "Converse has no portable reasoning effort"),
    "verbosity": (lambda v: v in (None, "medium"), "Converse has no verbosity: only medium is accepted"),
    "parallel_tool_calls": (
        lambda v: v in (None, True),
        "Converse cannot limit a turn to one tool call: only true is accepted",
    ),
    "service_tier": (
        lambda v: v in (None, "auto", "default"),
        "the relay has one price and latency tier: only auto or default is accepted",
    ),
    "functions": (lambda v: v is None, "deprecated: use tools"),
    "function_call": (lambda v: v is None, "deprecated: use tool_choice"),
}


class ChatRequest(BaseModel):
    """The body of `POST /v1/chat/completions` (see the module docstring for what is
    translated, refused and ignored)."""

    model_config = _CONFIG
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: ToolChoice | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT, strict=True)
    temperature: float | None = Field(default=None, ge=0, allow_inf_nan=False, strict=True)
    top_p: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False, strict=True)
    stop: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None, max_length=MAX_STOP_SEQUENCES
    )
    n: int | None = Field(default=None, strict=True)
    stream: StrictBool | None = None
    stream_options: StreamOptions | None = None
    # ignored (module docstring)
    user: Any = None
    safety_identifier: Any = None
    metadata: Any = None
    store: Any = None
    seed: Any = None
    prediction: Any = None
    prompt_cache_key: Any = None
    prompt_cache_options: Any = None
    prompt_cache_retention: Any = None
    # refused unless at the value that changes nothing (_DEFAULT_ONLY)
    frequency_penalty: Any = None
    presence_penalty: Any = None
    logit_bias: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    audio: Any = None
    modalities: Any = None
    response_format: Any = None
    web_search_options: Any = None
    moderation: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    parallel_tool_calls: Any = None
    service_tier: Any = None
    functions: Any = None
    function_call: Any = None

    @field_validator(*_DEFAULT_ONLY)
    @classmethod
    def _default_only(cls, value: Any, info: ValidationInfo) -> Any:
        accepted, why = _DEFAULT_ONLY[str(info.field_name)]
        if not accepted(value):
            raise ValueError(f"refused: {why}")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _choice_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value not in ("auto", "none", "required"):
                raise ValueError("must be auto, none, required or a named function")
            return {"type": value}
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            if not value:
                raise ValueError("a stop sequence cannot be empty")
            return [value]
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float | None) -> float | None:
        if value is not None and value > 1:
            raise ValueError("above 1 is refused: Converse takes 0 to 1 (OpenAI's scale is 0 to 2)")
        return value

    @field_validator("n")
    @classmethod
    def _one_choice(cls, value: int | None) -> int | None:
        if value not in (None, 1):
            raise ValueError("only one choice is generated: n must be 1 or absent")
        return value

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk (`stream_options.include_usage`)."""
        return bool(self.stream_options and self.stream_options.include_usage)


def parse_chat_request(data: Any) -> ChatRequest:
    """`data` (the parsed JSON body) as a ChatRequest, or BadRequest naming the field."""
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        raise BadRequest.from_validation(exc) from exc


# -- Chat Completions -> Converse -------------------------------------------------------------


def _refuse(field: str, why: str) -> BadRequest:
    return BadRequest(f"{field}: {why}", field=field)


def _arguments(raw: str, field: str) -> dict[str, Any]:
    if not raw.strip():
        return {}  # a call without arguments, as some servers write it
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        raise _refuse(field, "not valid JSON") from None
    if not isinstance(parsed, dict):
        raise _refuse(field, "must be a JSON object")
    return parsed


class _Conversation:
    """The Converse messages and system blocks under construction, message by message:
    blocks of one role in a row share a message; tool calls wait for their tool messages."""

    def __init__(self) -> None:
        self.system: list[dict[str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.first_index = -1  # the OpenAI index of the first message kept
        self.uses_tools = False
        self._pending: dict[str, str] = {}  # tool call id -> its field, until a tool message answers it

    def add(self, i: int, message: ChatMessage) -> None:
        if message.role in ("system", "developer"):
            self.system.extend({"text": text} for text in message.texts())
        elif message.role == "tool":
            self._tool_result(i, message)
        else:
            self._check_answered()
            blocks: list[dict[str, Any]] = [{"text": text} for text in message.texts()]
            for k, call in enumerate(message.tool_calls or ()):
                blocks.append(self._tool_use(f"messages.{i}.tool_calls.{k}", call))
            self._append("user" if message.role == "user" else "assistant", blocks, i)

    def finish(self) -> list[dict[str, Any]]:
        self._check_answered()
        if not self.messages:
            raise _refuse("messages", "no user or assistant message has content")
        if self.messages[0]["role"] != "user":
            raise _refuse(
                f"messages.{self.first_index}.role",
                "the conversation must start with a user message (Converse's rule); system messages may "
                "precede it",
            )
        return self.messages

    def _tool_use(self, field: str, call: ToolCall) -> dict[str, Any]:
        if call.id in self._pending:
            raise _refuse(f"{field}.id", "repeats a tool call id of this message")
        self._pending[call.id] = f"{field}.id"
        self.uses_tools = True
        arguments = _arguments(call.function.arguments, f"{field}.function.arguments")
        return {"toolUse": {"toolUseId": call.id, "name": call.function.name, "input": arguments}}

    def _tool_result(self, i: int, message: ChatMessage) -> None:
        call_id = str(message.tool_call_id)
        if self._pending.pop(call_id, None) is None:
            raise _refuse(
                f"messages.{i}.tool_call_id",
                "answers no unanswered tool call of the assistant message before it",
            )
        self.uses_tools = True
        content = [{"text": part.text or ""} for part in message.content or ()] or [{"text": ""}]
        self._append("user", [{"toolResult": {"toolUseId": call_id, "content": content}}], i)

    def _check_answered(self) -> None:
        if self._pending:
            field = next(iter(self._pending.values()))
            raise _refuse(field, "no tool message answers this tool call")

    def _append(self, role: str, blocks: list[dict[str, Any]], index: int) -> None:
        if not blocks:
            return
        if self.messages and self.messages[-1]["role"] == role:
            self.messages[-1]["content"].extend(blocks)
            return
        if not self.messages:
            self.first_index = index
        self.messages.append({"role": role, "content": blocks})


def to_converse(request: ChatRequest) -> dict[str, Any]:
    """The Converse request body for `request` (without `modelId`: the capability pins the
    model); BadRequest naming the OpenAI field when it cannot be translated."""
    conversation = _Conversation()
    for i, message in enumerate(request.messages):
        conversation.add(i, message)
    body: dict[str, Any] = {"messages": conversation.finish()}
    if conversation.system:
        body["system"] = conversation.system
    tool_config = _tool_config(request, uses_tools=conversation.uses_tools)
    if tool_config is not None:
        body["toolConfig"] = tool_config
    inference = _inference_config(request)
    if inference:
        body["inferenceConfig"] = inference
    return body


def _tool_config(request: ChatRequest, *, uses_tools: bool) -> dict[str, Any] | None:
    choice = request.tool_choice.type if request.tool_choice is not None else None
    if choice == "none":
        if uses_tools:
            raise _refuse(
                "tool_choice",
                "none cannot be honoured while the messages hold tool calls: Converse then needs the tools "
                "and has no choice that forbids calling them",
            )
        return None
    if not request.tools:
        if choice is not None:
            raise _refuse("tool_choice", "a tool choice needs tools")
        if uses_tools:
            raise _refuse("tools", "the messages hold tool calls: Converse needs the tools declared")
        return None
    specs: list[dict[str, Any]] = []
    names: set[str] = set()
    for k, tool in enumerate(request.tools):
        function = tool.function
        if function.name in names:
            raise _refuse(f"tools.{k}.function.name", "repeats a tool name")
        names.add(function.name)
        spec: dict[str, Any] = {"name": function.name}
        if function.description:
            spec["description"] = function.description
        schema = (
            function.parameters if function.parameters is not None else {"type": "object", "properties": {}}
        )
        spec["inputSchema"] = {"json": schema}
        specs.append({"toolSpec": spec})
    config: dict[str, Any] = {"tools": specs}
    if choice == "auto":
        config["toolChoice"] = {"auto": {}}
    elif choice == "required":
        config["toolChoice"] = {"any": {}}
    elif request.tool_choice is not None and request.tool_choice.function is not None:
        name = request.tool_choice.function.name
        if name not in names:
            raise _refuse("tool_choice.function.name", "names none of the tools")
        config["toolChoice"] = {"tool": {"name": name}}
    return config


def _inference_config(request: ChatRequest) -> dict[str, Any]:
    limits = [limit for limit in (request.max_completion_tokens, request.max_tokens) if limit is not None]
    config: dict[str, Any] = {}
    if limits:
        config["maxTokens"] = min(limits)
    if request.temperature is not None:
        config["temperature"] = request.temperature
    if request.top_p is not None:
        config["topP"] = request.top_p
    if request.stop:
        config["stopSequences"] = list(request.stop)
    return config


# -- Converse -> Chat Completions -------------------------------------------------------------


def _answer(response: Mapping[str, Any]) -> tuple[str | None, list[dict[str, Any]], str]:
    """The text (None without any), the tool calls and the finish reason of an answer."""
    blocks = response.get("output", {}).get("message", {}).get("content", [])
    texts = [block["text"] for block in blocks if isinstance(block.get("text"), str)]
    calls = [
        {
            "id": block["toolUse"]["toolUseId"],
            "type": "function",
            "function": {"name": block["toolUse"]["name"], "arguments": _compact(block["toolUse"]["input"])},
        }
        for block in blocks
        if isinstance(block.get("toolUse"), Mapping)
    ]
    finish = _FINISH_REASONS.get(str(response.get("stopReason")), "stop")
    return ("\n\n".join(texts) if texts else None), calls, finish


def _usage(response: Mapping[str, Any]) -> dict[str, Any] | None:
    usage = response.get("usage")
    if not isinstance(usage, Mapping):
        return None
    cache_read = int(usage.get("cacheReadInputTokens") or 0)
    prompt = int(usage.get("inputTokens") or 0) + cache_read + int(usage.get("cacheWriteInputTokens") or 0)
    completion_tokens = int(usage.get("outputTokens") or 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cache_read},
    }


def completion(
    response: Mapping[str, Any], *, model: str, completion_id: str, created: int
) -> dict[str, Any]:
    """The `chat.completion` object of a Converse answer: one choice, usage when known."""
    text, calls, finish = _answer(response)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
    }
    usage = _usage(response)
    if usage is not None:
        body["usage"] = usage
    return body


def _pieces(text: str) -> list[str]:
    return [text[i : i + _CHUNK_CHARS] for i in range(0, len(text), _CHUNK_CHARS)]


def completion_chunks(
    response: Mapping[str, Any], *, model: str, completion_id: str, created: int, include_usage: bool
) -> list[dict[str, Any]]:
    """The `chat.completion.chunk` objects streaming that answer, in OpenAI's order: the
    role, text deltas, tool call deltas (id and name first, then arguments in pieces), the
    finish reason; with `include_usage`, `usage: null` on each and a last usage chunk
    (left out when the answer has no usage)."""
    text, calls, finish = _answer(response)
    head: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out = {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if include_usage:
            out["usage"] = None
        return out

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks.extend(chunk({"content": piece}) for piece in _pieces(text or ""))
    for index, call in enumerate(calls):
        first = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(
            chunk(
                {"tool_calls": [{**first, "function": {"name": call["function"]["name"], "arguments": ""}}]}
            )
        )
        chunks.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(call["function"]["arguments"])
        )
    chunks.append(chunk({}, finish))
    usage = _usage(response)
    if include_usage and usage is not None:
        chunks.append({**head, "choices": [], "usage": usage})
    return chunks


# The blank line that ends `[DONE]` is CRLF, after the data line's LF: any end of line is
# one in SSE, but the openai SDK's reader completes an event mid-body only at LF LF, CR CR or
# CRLF CRLF, and reads this one at the end of the body instead. It stops reading at `[DONE]`
# and drops a connection whose body it left unread (its HTTP library learns that the body
# ended only when asked for more, even with a Content-Length): ending as OpenAI does, every
# streamed call paid a new TCP and TLS handshake.
_DONE = b"data: [DONE]\n\r\n"


def sse(chunks: Iterable[Mapping[str, Any]]) -> bytes:
    """Server-sent events of the chunks, ended by `data: [DONE]` as OpenAI ends a stream
    (its blank line is `_DONE`'s: the stock SDK then keeps its connection)."""
    events = [b"data: " + _compact(chunk).encode("utf-8") + b"\n\n" for chunk in chunks]
    return b"".join(events) + _DONE


def models_list(model_id: str, *, created: int) -> dict[str, Any]:
    """`GET /v1/models`: the one model the capability pins."""
    return {
        "object": "list",
        "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "steward"}],
    }
