"""A deterministic provider for tests and the demo: no network, replies chosen by a policy.

The policy is the price entry's `provider_model`:

* `echo`: a text reply quoting the last user message;
* `tool-then-stop`: when the last user message holds text and tools are offered, calls the
  chosen tool (toolChoice.tool) or else the first one, with an input built from its schema;
  after a toolResult, ends the turn with a text reply;
* `fail`: raises ProviderError;
* `no-usage`: an echo reply without usage (the relay must charge the reservation in full);
* `slow`: sleeps `STEWARD_SCRIPTED_SLOW_SECONDS` (default 0.2 s) first, then echoes;
* `playbook`: plays a coding agent from a playbook (`steward.adapters.providers.playbook`): the
  runner's tools driven step by step, chosen by the task the conversation is about; a task
  no play matches is refused (`ModelCannotAnswer`), never answered.

Usage follows from the request so that budget math is exercised: input tokens are
ceil(payload_bytes / 4) (within the relay's byte bound) and output tokens are
min(max_tokens, ceil(reply bytes / 4)), never more than `max_tokens`. A reply that does not
fit is cut to max_tokens * 4 bytes of text with stopReason "max_tokens".
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from typing import Any

from steward.adapters.providers.base import ProviderResult, check_max_tokens, converse_usage
from steward.domain.budget import Usage
from steward.domain.converse import (
    ConverseRequest,
    TextBlock,
    ToolResultBlock,
    ToolResultText,
    ToolSpec,
    payload_bytes,
)
from steward.domain.errors import ProviderError
from steward.domain.prices import SCRIPTED_POLICIES

SLOW_ENV = "STEWARD_SCRIPTED_SLOW_SECONDS"
DEFAULT_SLOW_SECONDS = 0.2
BYTES_PER_TOKEN = 4
_QUOTE_CHARS = 400
_MAX_SLOW_SECONDS = 60.0


class ScriptedProvider:
    """`Provider` whose replies are a pure function of the request (and `policy`)."""

    def __init__(
        self, policy: str, *, environ: Mapping[str, str] | None = None, slow_seconds: float | None = None
    ) -> None:
        if policy not in SCRIPTED_POLICIES:
            raise ValueError(f"unknown scripted policy {policy!r}")
        if slow_seconds is None:
            raw = (environ or {}).get(SLOW_ENV, "")
            try:
                slow_seconds = float(raw) if raw.strip() else DEFAULT_SLOW_SECONDS
            except ValueError:
                raise ValueError(f"{SLOW_ENV} must be a number of seconds") from None
        if not 0 <= slow_seconds <= _MAX_SLOW_SECONDS:
            raise ValueError(f"slow_seconds must be within 0..{_MAX_SLOW_SECONDS:g}")
        self.policy = policy
        self.slow_seconds = slow_seconds
        if policy == "playbook":
            from steward.adapters.providers.playbook import (  # noqa: PLC0415 - only this policy needs it
                PLAYBOOK_ENV,
                Playbook,
            )

            self._playbook = Playbook.load(environ or {})
            self._playbook_source = (environ or {}).get(PLAYBOOK_ENV, "")

    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        check_max_tokens(max_tokens)
        started = time.monotonic()
        if self.policy == "fail":
            raise ProviderError("scripted: failure (policy fail)")
        if self.policy == "slow":
            time.sleep(self.slow_seconds)
        block = self._reply(request)
        reply = block["text"] if "text" in block else _compact(block)
        reply_bytes = reply.encode("utf-8")
        output_tokens = min(max_tokens, math.ceil(len(reply_bytes) / BYTES_PER_TOKEN))
        if len(reply_bytes) <= max_tokens * BYTES_PER_TOKEN:
            content, stop_reason = [block], "tool_use" if "toolUse" in block else "end_turn"
        else:
            cut = reply_bytes[: max_tokens * BYTES_PER_TOKEN].decode("utf-8", errors="ignore")
            content, stop_reason = [{"text": cut}], "max_tokens"
        usage = Usage(
            input_tokens=math.ceil(payload_bytes(request) / BYTES_PER_TOKEN), output_tokens=output_tokens
        )
        response: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop_reason,
            "metrics": {"latencyMs": int((time.monotonic() - started) * 1000)},
        }
        if self.policy == "no-usage":
            return ProviderResult(response=response, usage=None)
        response["usage"] = converse_usage(usage)
        return ProviderResult(response=response, usage=usage)

    def _reply(self, request: ConverseRequest) -> dict[str, Any]:
        last = request.messages[-1]
        results = [block.toolResult for block in last.content if isinstance(block, ToolResultBlock)]
        if self.policy == "playbook":
            return self._playbook.reply(request, source=self._playbook_source)
        if self.policy != "tool-then-stop" or last.role != "user":
            return {"text": _echo(request)}
        if results:
            summary = "; ".join(
                f"{result.toolUseId}: {result.status or 'success'}, {_result_text(result.content)}"
                for result in results
            )
            return {"text": f"done after tool results ({summary})"}
        spec = _chosen_tool(request)
        if spec is None:
            return {"text": _echo(request)}
        return {
            "toolUse": {
                "toolUseId": f"tooluse_scripted_{len(request.messages)}",
                "name": spec.name,
                "input": _example_object(spec.inputSchema.json_),
            }
        }


def _echo(request: ConverseRequest) -> str:
    for message in reversed(request.messages):
        if message.role != "user":
            continue
        texts = [block.text for block in message.content if isinstance(block, TextBlock)]
        if texts:
            text = "\n".join(texts)
            quoted = text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "..."
            return f"echo ({len(text)} characters): {quoted}"
        results = [
            block.toolResult.toolUseId for block in message.content if isinstance(block, ToolResultBlock)
        ]
        return f"echo: received tool results {', '.join(results)}"
    return "echo: no user message"


def _result_text(content: list[Any]) -> str:
    parts = [item.text if isinstance(item, ToolResultText) else _compact(item.json_) for item in content]
    text = " ".join(parts)
    return text if len(text) <= 80 else text[:80] + "..."


def _chosen_tool(request: ConverseRequest) -> ToolSpec | None:
    config = request.toolConfig
    if config is None:
        return None
    if config.toolChoice is not None and config.toolChoice.tool is not None:
        wanted = config.toolChoice.tool.name
        return next(tool.toolSpec for tool in config.tools if tool.toolSpec.name == wanted)
    return config.tools[0].toolSpec


def _example_object(schema: dict[str, Any]) -> dict[str, Any]:
    value = _example(schema, depth=0)
    return value if isinstance(value, dict) else {}


def _example(schema: Any, *, depth: int) -> Any:
    """A deterministic value for a JSON schema: required properties only, simple defaults."""
    if not isinstance(schema, dict) or depth > 5:
        return None
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        required = required if isinstance(required, list) else []
        return {
            str(name): _example(properties.get(name, {"type": "string"}), depth=depth + 1)
            for name in required
        }
    return {"array": [], "string": "scripted", "integer": 1, "number": 1, "boolean": True, "null": None}.get(
        str(kind), "scripted"
    )


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
