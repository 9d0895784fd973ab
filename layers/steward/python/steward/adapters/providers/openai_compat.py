"""Any OpenAI-compatible Chat Completions endpoint (Ollama, vLLM, OpenAI) through httpx.

Translates Converse to `POST {base_url}/chat/completions` and the answer back:

* system blocks become one system message; text blocks of a message are joined with a
  blank line (a string `content` is what every compatible server accepts);
* assistant toolUse blocks become `tool_calls` (arguments as a JSON string); user
  toolResult blocks become `tool` messages (`tool_call_id`), placed before the user's text
  as Chat Completions requires; a result with status "error" is prefixed with "Error: ";
* tools become `function` tools; toolChoice auto / any / tool becomes "auto" / "required" /
  `{"type": "function", ...}`;
* the output limit is sent as `max_tokens`, not `max_completion_tokens`: Ollama, vLLM and
  most compatible servers honour `max_tokens`, and OpenAI models that only take the newer
  field refuse the call (a provider error: nothing is spent) rather than ignore the limit;
* usage: `prompt_tokens` includes `prompt_tokens_details.cached_tokens`, so plain input is
  `prompt - cached` and cache reads are `cached`: each token counted once.

The API key comes from the environment variable or the Secrets Manager secret the price
entry names (the whole SecretString, cached for five minutes) and is sent only as
`Authorization: Bearer`; redirects are not followed, so it never goes anywhere else.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

import httpx

from steward.adapters.providers.base import ProviderResult, check_max_tokens, converse_usage
from steward.domain.budget import Usage
from steward.domain.converse import (
    ConverseRequest,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolResultText,
    ToolUseBlock,
)
from steward.domain.errors import ProviderError, ProviderOutcomeUnknown
from steward.domain.prices import PriceEntry

TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=30.0, pool=10.0)
_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filtered",
}
_NOT_ID = re.compile(r"[^a-zA-Z0-9_-]")

_client_lock = threading.Lock()
_client: httpx.Client | None = None


def _http() -> httpx.Client:
    """One pooled client per process (thread-safe); no redirects, so the key stays put."""
    global _client  # noqa: PLW0603 (a process-wide connection pool)
    with _client_lock:
        if _client is None:
            _client = httpx.Client(timeout=TIMEOUT, follow_redirects=False)
        return _client


class OpenAICompatProvider:
    """`Provider` for an OpenAI-compatible endpoint; `model` is the name the server knows."""

    def __init__(self, model: str, entry: PriceEntry, *, environ: Mapping[str, str]) -> None:
        if entry.base_url is None:
            raise ValueError("an openai price entry needs base_url")
        self.model = model
        self.url = entry.base_url.rstrip("/") + "/chat/completions"
        self._key_env = entry.api_key_env
        self._key_secret = entry.api_key_secret
        self._environ = environ

    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        check_max_tokens(max_tokens)
        body = to_chat_completions(request, model=self.model, max_tokens=max_tokens)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        started = time.monotonic()
        try:
            answer = _http().post(
                self.url, content=json.dumps(body, ensure_ascii=False).encode(), headers=headers
            )
        except httpx.ReadTimeout:  # the request went out: the server may have billed it
            raise ProviderOutcomeUnknown("openai: ReadTimeout") from None
        except httpx.HTTPError as exc:  # the type only: messages can carry the URL
            raise ProviderError(f"openai: {type(exc).__name__}") from None
        latency_ms = int((time.monotonic() - started) * 1000)
        if answer.status_code != 200:
            raise ProviderError(f"openai: HTTP {answer.status_code}")
        try:
            data = answer.json()
        except ValueError:
            raise ProviderOutcomeUnknown("openai: malformed response (not JSON)") from None
        return from_chat_completions(data, latency_ms=latency_ms)

    def _api_key(self) -> str | None:
        if self._key_env is not None:
            key = self._environ.get(self._key_env, "").strip()
            if not key:
                raise ProviderError(f"openai: the API key variable {self._key_env} is not set")
            return key
        if self._key_secret is not None:
            return _secret(self._key_secret)
        return None


def _secret(secret_id: str) -> str:
    """The API key in `secret_id` (Secrets Manager, cached with a bounded age by the adapter)."""
    from steward.adapters.secrets import SecretUnavailable, secret_string  # noqa: PLC0415 (boto3 only when used)

    try:
        key = secret_string(secret_id).strip()
    except SecretUnavailable as exc:
        raise ProviderError(f"openai: cannot read the API key secret ({exc.code})") from None
    if not key:
        raise ProviderError("openai: the API key secret is empty")
    return key


# -- Converse -> Chat Completions -------------------------------------------------------------


def to_chat_completions(request: ConverseRequest, *, model: str, max_tokens: int) -> dict[str, Any]:
    """The Chat Completions body for `request`, with exactly `max_tokens` as output limit."""
    body: dict[str, Any] = {
        "model": model,
        "messages": _messages(request),
        "max_tokens": max_tokens,
        "stream": False,
    }
    if request.toolConfig is not None:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.toolSpec.name,
                    **({"description": tool.toolSpec.description} if tool.toolSpec.description else {}),
                    "parameters": tool.toolSpec.inputSchema.json_,
                },
            }
            for tool in request.toolConfig.tools
        ]
        choice = request.toolConfig.toolChoice
        if choice is not None and choice.tool is not None:
            body["tool_choice"] = {"type": "function", "function": {"name": choice.tool.name}}
        elif choice is not None:
            body["tool_choice"] = "required" if choice.any is not None else "auto"
    inference = request.inferenceConfig
    if inference is not None:
        optional = {"temperature": inference.temperature, "top_p": inference.topP}
        body.update({name: value for name, value in optional.items() if value is not None})
        if inference.stopSequences:
            body["stop"] = list(inference.stopSequences)
    return body


def _messages(request: ConverseRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": "\n\n".join(block.text for block in request.system)})
    for message in request.messages:
        texts = [block.text for block in message.content if isinstance(block, TextBlock)]
        if message.role == "user":
            messages.extend(
                {
                    "role": "tool",
                    "tool_call_id": block.toolResult.toolUseId,
                    "content": _tool_result_text(block.toolResult),
                }
                for block in message.content
                if isinstance(block, ToolResultBlock)
            )
            if texts:
                messages.append({"role": "user", "content": "\n\n".join(texts)})
            continue
        calls = [
            {
                "id": block.toolUse.toolUseId,
                "type": "function",
                "function": {
                    "name": block.toolUse.name,
                    "arguments": json.dumps(block.toolUse.input, ensure_ascii=False, separators=(",", ":")),
                },
            }
            for block in message.content
            if isinstance(block, ToolUseBlock)
        ]
        if calls:
            messages.append(
                {"role": "assistant", "content": "\n\n".join(texts) if texts else None, "tool_calls": calls}
            )
        else:
            messages.append({"role": "assistant", "content": "\n\n".join(texts)})
    return messages


def _tool_result_text(result: ToolResult) -> str:
    parts = [
        item.text
        if isinstance(item, ToolResultText)
        else json.dumps(item.json_, ensure_ascii=False, separators=(",", ":"))
        for item in result.content
    ]
    text = "\n".join(parts)
    return f"Error: {text}" if result.status == "error" else text


# -- Chat Completions -> Converse -------------------------------------------------------------


def from_chat_completions(data: Any, *, latency_ms: int = 0) -> ProviderResult:
    """A Converse response from a Chat Completions answer (a 200); ProviderOutcomeUnknown
    when it has no choice (the call was made, so its cost is not known to be nothing)."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        if not isinstance(message, dict):
            raise TypeError("message")
    except (KeyError, IndexError, TypeError):
        raise ProviderOutcomeUnknown("openai: malformed response (no choices[0].message)") from None
    content: list[dict[str, Any]] = []
    text = _message_text(message.get("content"))
    if text:
        content.append({"text": text})
    calls = message.get("tool_calls") or []
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        block = _tool_use(call, index)
        if block is not None:
            content.append(block)
    has_calls = any("toolUse" in block for block in content)
    stop_reason = "tool_use" if has_calls else _STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn")
    usage = _usage(data.get("usage"))
    response: dict[str, Any] = {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "metrics": {"latencyMs": latency_ms},
    }
    if usage is not None:
        response["usage"] = converse_usage(usage)
    return ProviderResult(response=response, usage=usage)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def _tool_use(call: Any, index: int) -> dict[str, Any] | None:
    """A toolUse block, with id and name made to fit Converse's patterns so that the next
    request (which carries them back) validates; unparsable arguments kept as `_raw`."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return None
    function = call["function"]
    name = _NOT_ID.sub("_", str(function.get("name") or ""))[:64] or "unnamed"
    raw_id = _NOT_ID.sub("_", str(call.get("id") or ""))[:64]
    arguments = function.get("arguments")
    parsed: dict[str, Any]
    if isinstance(arguments, dict):
        parsed = arguments
    else:
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        try:
            loaded = json.loads(raw) if raw.strip() else {}
        except ValueError:
            loaded = None
        parsed = loaded if isinstance(loaded, dict) else {"_raw": raw}
    return {"toolUse": {"toolUseId": raw_id or f"tooluse_{index}", "name": name, "input": parsed}}


def _usage(reported: Any) -> Usage | None:
    """Usage with cached prompt tokens counted once; None when absent or inconsistent."""
    if not isinstance(reported, dict):
        return None
    details = reported.get("prompt_tokens_details")
    raw_cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = _count(reported.get("prompt_tokens"))
    completion = _count(reported.get("completion_tokens"))
    cached = 0 if raw_cached is None else _count(raw_cached)
    if prompt is None or completion is None or cached is None or cached > prompt:
        return None
    return Usage(input_tokens=prompt - cached, output_tokens=completion, cache_read_tokens=cached)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
