"""Lambda handlers behind an in-process httpx transport: the runtime's own client
(`steward.adapters.runtime_api.RuntimeApi`) reaches the real runtime and relay handlers with
the event API Gateway would build (an HTTP API for the runtime routes, payload 2.0; a REST
API for the relay, payload 1.0), on the caller's thread. No socket and no server thread, so
a schedule is one thread and replays exactly from its seed (the socket front door has its
own tests: `tests/integration/test_local_plumbing.py`)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

import httpx

Handler = Callable[[dict[str, Any], Any], Any]


class _Context:
    function_name = "steward-sim"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:steward-sim"
    aws_request_id = "sim"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


class LambdaTransport(httpx.BaseTransport):
    """Dispatches by host: `routes` maps a host name to (kind, handler), kind `http_api` or
    `rest_api`."""

    def __init__(self, routes: Mapping[str, tuple[str, Handler]]) -> None:
        self.routes = dict(routes)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        kind, handler = self.routes[request.url.host]
        body = request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        path = request.url.path
        method = request.method
        text = body.decode() if body else None
        if kind == "rest_api":
            event: dict[str, Any] = {
                "resource": "/{proxy+}",
                "path": path,
                "httpMethod": method,
                "headers": headers,
                "multiValueHeaders": {k: [v] for k, v in headers.items()},
                "queryStringParameters": None,
                "multiValueQueryStringParameters": None,
                "pathParameters": {"proxy": path[1:]},
                "stageVariables": None,
                "requestContext": {
                    "stage": "sim",
                    "path": f"/sim{path}",
                    "httpMethod": method,
                    "requestId": "sim",
                },
                "body": text,
                "isBase64Encoded": False,
            }
        else:
            event = {
                "version": "2.0",
                "routeKey": "$default",
                "rawPath": path,
                "rawQueryString": request.url.query.decode(),
                "headers": headers,
                "requestContext": {
                    "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "10.0.0.1"},
                    "stage": "$default",
                    "requestId": "sim",
                    "routeKey": "$default",
                },
                "body": text,
                "isBase64Encoded": False,
            }
        result = handler(event, _Context())
        status = int(result.get("statusCode", 200))
        out = result.get("body") or ""
        raw = base64.b64decode(out) if result.get("isBase64Encoded") else str(out).encode()
        answer_headers = dict(result.get("headers") or {})
        for name, values in (result.get("multiValueHeaders") or {}).items():
            answer_headers[name] = values[-1]
        return httpx.Response(status, headers=answer_headers, content=raw)
