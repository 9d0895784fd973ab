"""A loopback stand-in for bedrock-runtime's Converse API (moto has none), for tests and demos.

It speaks the REST JSON protocol well enough for boto3's own client: `POST
/model/{modelId}/converse` with a JSON body, answered with the Converse JSON response, or
with an error status plus the `x-amzn-ErrorType` header from which botocore builds its
ClientError (`ThrottlingException`, `ValidationException`, ...). What it answers is the
test's `behaviour`: a callable from the received request to a response dict or an
`ErrorReply`. Every request is recorded in `requests`, so tests can assert what arrived.

Requests are SigV4-signed by boto3; the signature is accepted without being verified (there
is no account to verify against, and the server only ever listens on loopback). Access
logs are not written.

`JsonLoopbackServer` is the shared plumbing (threaded, 127.0.0.1, free port, context
manager); `steward.local.openai_server` builds on it too.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from steward.local.http_base import LocalHandler, LocalHttpServer, Refused
from steward.local.running import Running

_LOG = logging.getLogger(__name__)
_MAX_BODY = 32 * 1024 * 1024


@dataclass(frozen=True)
class Reply:
    """What a `JsonLoopbackServer` route answers: status, JSON body, extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


Route = Callable[[str, str, dict[str, str], bytes], Reply]
"""(method, path, lower-cased headers, raw body) -> Reply."""


class JsonLoopbackServer(Running):
    """A threaded HTTP/1.1 server on 127.0.0.1 that hands every request to `route`."""

    def __init__(
        self, route: Route, *, host: str = "127.0.0.1", port: int = 0, name: str = "loopback"
    ) -> None:
        self._route = route
        self._address = (host, port)
        self._name = name
        self._server: LocalHttpServer[Route] | None = None

    @property
    def url(self) -> str:
        """Base URL such as `http://127.0.0.1:54321`; only valid while started."""
        if self._server is None:
            raise RuntimeError(f"{self._name} server is not started")
        return self._server.url

    def start(self) -> None:
        if self._server is None:
            self._server = LocalHttpServer(self._address, _Handler, self._route, name=self._name)
            self._server.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()


class _Handler(LocalHandler):
    server: LocalHttpServer[Route]

    def serve(self) -> None:
        body = self.read_body(_MAX_BODY)
        try:
            reply = self.server.app(self.command, self.path, self.header_map(), body)
        except Exception as exc:  # a broken behaviour: answer 500, keep serving
            _LOG.warning("loopback route failed with %s", type(exc).__name__)
            reply = Reply(500, {"message": "internal error"})
        self.send_json(reply.status, reply.body, reply.headers.items())

    def refuse(self, refused: Refused) -> None:
        """Before any route runs, so in the one shape both protocols' clients read: `{"message"}`."""
        self.send_json(refused.status, {"message": refused.message}, close=refused.close)


# -- Converse ----------------------------------------------------------------------------------

ERROR_STATUS = {
    "AccessDeniedException": 403,
    "InternalServerException": 500,
    "ModelErrorException": 424,
    "ModelNotReadyException": 429,
    "ModelTimeoutException": 408,
    "ResourceNotFoundException": 404,
    "ServiceUnavailableException": 503,
    "ThrottlingException": 429,
    "ValidationException": 400,
}


@dataclass(frozen=True)
class ErrorReply:
    """An error as bedrock-runtime sends it; the status defaults to the type's real one."""

    error_type: str
    message: str = "scripted error"
    status: int | None = None

    def reply(self) -> Reply:
        status = self.status if self.status is not None else ERROR_STATUS.get(self.error_type, 400)
        headers = {
            "x-amzn-ErrorType": f"{self.error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-RequestId": str(uuid.uuid4()),
        }
        return Reply(status, {"message": self.message}, headers)


@dataclass(frozen=True)
class ReceivedConverse:
    """One Converse call as it arrived: the decoded model id, the JSON body, the headers."""

    model_id: str
    body: dict[str, Any]
    headers: dict[str, str]


Behaviour = Callable[[ReceivedConverse], dict[str, Any] | ErrorReply]


def echo_behaviour(call: ReceivedConverse) -> dict[str, Any]:
    """The default answer: quotes the last text of the request, with fixed usage figures."""
    last_text = ""
    for message in call.body.get("messages", []):
        for block in message.get("content", []):
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                last_text = block["text"]
    return converse_response(text=f"echo: {last_text}", input_tokens=10, output_tokens=5)


def converse_response(
    *,
    text: str | None = None,
    content: list[dict[str, Any]] | None = None,
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    latency_ms: int = 12,
) -> dict[str, Any]:
    """A Converse response body in Bedrock's wire shape, for behaviours to return."""
    blocks = content if content is not None else [{"text": text or ""}]
    usage: dict[str, int] = {
        "inputTokens": input_tokens,
        "outputTokens": output_tokens,
        "totalTokens": input_tokens + output_tokens + (cache_read_tokens or 0) + (cache_write_tokens or 0),
    }
    if cache_read_tokens is not None:
        usage["cacheReadInputTokens"] = cache_read_tokens
    if cache_write_tokens is not None:
        usage["cacheWriteInputTokens"] = cache_write_tokens
    return {
        "output": {"message": {"role": "assistant", "content": blocks}},
        "stopReason": stop_reason,
        "usage": usage,
        "metrics": {"latencyMs": latency_ms},
    }


class ConverseServer(JsonLoopbackServer):
    """bedrock-runtime's Converse on loopback; point boto3 at `url` (endpoint_url)."""

    def __init__(self, behaviour: Behaviour | None = None, *, port: int = 0) -> None:
        super().__init__(self._route, port=port, name="converse-server")
        self.behaviour: Behaviour = behaviour or echo_behaviour
        self.requests: list[ReceivedConverse] = []
        self._lock = threading.Lock()

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        parts = path.split("?", 1)[0].split("/")
        if method != "POST" or len(parts) != 4 or parts[1] != "model" or parts[3] != "converse":
            return ErrorReply("UnknownOperationException", "unknown operation", status=404).reply()
        try:
            parsed = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            return ErrorReply("SerializationException", "body is not JSON", status=400).reply()
        if not isinstance(parsed, dict):
            return ErrorReply("SerializationException", "body is not a JSON object", status=400).reply()
        call = ReceivedConverse(model_id=unquote(parts[2]), body=parsed, headers=headers)
        with self._lock:
            self.requests.append(call)
        answer = self.behaviour(call)
        if isinstance(answer, ErrorReply):
            return answer.reply()
        return Reply(200, answer, {"x-amzn-RequestId": str(uuid.uuid4())})
