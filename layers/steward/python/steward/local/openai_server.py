"""A loopback stand-in for an OpenAI-compatible Chat Completions endpoint, for tests and demos.

`POST /v1/chat/completions` answers what the test's `behaviour` returns for the received
request (a response dict, or an `OpenAIError` status), and records every request with its
headers in `requests`, so tests can assert the translation and where the API key went.
Point a price entry's `base_url` at `url + "/v1"`. No streaming; no access log.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from steward.local.converse_server import JsonLoopbackServer, Reply


@dataclass(frozen=True)
class OpenAIError:
    """An error answer in OpenAI's shape (`{"error": {"message", "type", "code"}}`)."""

    status: int
    message: str = "scripted error"
    type: str = "server_error"

    def reply(self) -> Reply:
        return Reply(self.status, {"error": {"message": self.message, "type": self.type, "code": None}})


@dataclass(frozen=True)
class ReceivedChat:
    """One Chat Completions request as it arrived: JSON body and lower-cased headers."""

    body: dict[str, Any]
    headers: dict[str, str]


Behaviour = Callable[[ReceivedChat], dict[str, Any] | OpenAIError]


def chat_response(
    *,
    content: str | None = "",
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
    prompt_tokens: int | None = 10,
    completion_tokens: int = 5,
    cached_tokens: int | None = None,
    model: str = "local",
) -> dict[str, Any]:
    """A Chat Completions response body, for behaviours to return (`prompt_tokens=None`: no usage)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    response: dict[str, Any] = {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if prompt_tokens is not None:
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
        response["usage"] = usage
    return response


def echo_behaviour(call: ReceivedChat) -> dict[str, Any]:
    """The default answer: quotes the last user message."""
    last = ""
    for message in call.body.get("messages", []):
        if (
            isinstance(message, dict)
            and message.get("role") == "user"
            and isinstance(message.get("content"), str)
        ):
            last = message["content"]
    return chat_response(content=f"echo: {last}", model=str(call.body.get("model", "local")))


class OpenAIServer(JsonLoopbackServer):
    """Chat Completions on loopback; see the module docstring."""

    def __init__(self, behaviour: Behaviour | None = None, *, port: int = 0) -> None:
        super().__init__(self._route, port=port, name="openai-server")
        self.behaviour: Behaviour = behaviour or echo_behaviour
        self.requests: list[ReceivedChat] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """What a price entry's `base_url` should be."""
        return self.url + "/v1"

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        if method != "POST" or path.split("?", 1)[0] != "/v1/chat/completions":
            return OpenAIError(404, "unknown route", "invalid_request_error").reply()
        try:
            parsed = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            return OpenAIError(400, "body is not JSON", "invalid_request_error").reply()
        if not isinstance(parsed, dict):
            return OpenAIError(400, "body is not a JSON object", "invalid_request_error").reply()
        call = ReceivedChat(body=parsed, headers=headers)
        with self._lock:
            self.requests.append(call)
        answer = self.behaviour(call)
        return answer.reply() if isinstance(answer, OpenAIError) else Reply(200, answer)
