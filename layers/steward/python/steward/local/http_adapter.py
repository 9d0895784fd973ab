"""Serve a real Lambda handler over HTTP on loopback, as API Gateway or a Function URL would.

The local stack runs the same handler code as AWS, so the adapter's job is to be a faithful
front door: it builds the event the handler would get in AWS, runs the authorizer step before
the handler as API Gateway does, and turns the handler's response dict back into HTTP. Kinds:

* `http_api`: an HTTP API with a JWT authorizer, payload format 2.0; claims arrive at
  `requestContext.authorizer.jwt.claims`.
* `function_url`: a Lambda Function URL (payload 2.0 as well, no authorizer).
* `rest_api`: a REST API whose `ANY /{proxy+}` (and `ANY /`) method is a Lambda proxy
  integration, payload format 1.0, deployed to the stage `local`; with an authorizer, claims
  arrive at `requestContext.authorizer.claims` as from a Cognito user pool authorizer. Its
  response is read as API Gateway reads a 1.0 response: `statusCode` is required,
  `multiValueHeaders` is merged with `headers`, and `cookies` is not a field of it.

Choices where AWS has no local equivalent:

* Invocations of one server are serialized by default (one warm execution environment):
  Lambda never runs two events in one environment at once, and handlers may rely on that
  (Powertools' resolvers keep the current event in class state). Pass `invocation_lock` to
  share one lock between servers of a process, or `contextlib.nullcontext()` to disable it.
* A REST API's request body is base64 when its Content-Type is not text, or always with the
  binary media type `*/*` (`binary_media_types`, as the relay's REST API is configured).
* The path is passed as sent; a path with `.` or `..` segments is refused (400) so that a
  public prefix can never be used to reach an authorized route.
* Access logs are not written, and neither headers nor events are ever logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote

from steward.domain.errors import Unauthorized
from steward.local.http_base import LocalHandler, LocalHttpServer, Refused
from steward.local.running import Running

_LOG = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
Authorizer = Callable[[str], Mapping[str, Any]]
Kind = Literal["http_api", "function_url", "rest_api"]
KINDS: tuple[Kind, ...] = ("http_api", "function_url", "rest_api")
REST_STAGE = "local"  # the stage name of the local REST API: `requestContext.stage`

TIMEOUT_SECONDS = 30.0  # API Gateway's integration timeout: the handler's budget
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_TEXT_TYPES = (
    "text/",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/yaml",
    "application/x-yaml",
    "application/x-www-form-urlencoded",
    "application/graphql",
)
_HOP_BY_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive"}
_REST_RESOURCE_ID = "l0ca1p"  # API Gateway's id of the `/{proxy+}` resource (6 characters)
_REST_ROOT_RESOURCE_ID = "l0ca1r"  # and of the root resource `/`
_REST_IDENTITY_KEYS = (
    "cognitoIdentityPoolId",
    "accountId",
    "cognitoIdentityId",
    "caller",
    "principalOrgId",
    "accessKey",
    "cognitoAuthenticationType",
    "cognitoAuthenticationProvider",
    "userArn",
    "user",
)


class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    function_version = "$LATEST"
    memory_limit_in_mb = 512
    client_context = None
    identity = None

    def __init__(self, function_name: str, timeout_seconds: float = TIMEOUT_SECONDS) -> None:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.function_name = function_name
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:{region}:000000000000:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = f"{time.strftime('%Y/%m/%d', time.gmtime())}/[$LATEST]{uuid.uuid4().hex}"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class LambdaHttpServer(Running):
    """One Lambda handler behind a loopback HTTP server; see the module docstring."""

    def __init__(
        self,
        handler: Handler,
        *,
        kind: Kind,
        authorizer: Authorizer | None = None,
        public_path_prefixes: tuple[str, ...] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 10 * 1024 * 1024,
        function_name: str = "steward-local",
        invocation_lock: AbstractContextManager[Any] | None = None,
        tls: ssl.SSLContext | None = None,
        binary_media_types: tuple[str, ...] = (),
        front: Callable[[LocalHandler], bool] | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}")
        if kind == "function_url" and authorizer is not None:
            raise ValueError("a Function URL has no JWT authorizer")
        self.handler = handler
        self.kind = kind
        self.authorizer = authorizer
        self.public_path_prefixes = public_path_prefixes
        self.max_body_bytes = max_body_bytes
        self.function_name = function_name
        self.invocation_lock = invocation_lock if invocation_lock is not None else threading.Lock()
        self.tls = tls  # serve HTTPS with this server context (`steward.local.tls`)
        # A REST API's binary media types: with `*/*` every request body arrives base64.
        self.binary_media_types = binary_media_types
        # Local-only routes answered before the front door (True: answered); see the stack.
        self.front = front
        self._address = (host, port)
        self._server: LocalHttpServer[LambdaHttpServer] | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("LambdaHttpServer is not started")
        return self._server.url

    def start(self) -> None:
        if self._server is None:
            self._server = LocalHttpServer(
                self._address, _RequestHandler, self, name=f"lambda-http-{self.function_name}", tls=self.tls
            )
            self._server.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def invoke(self, event: dict[str, Any]) -> Any:
        """Run the handler once with a fresh context, as one Lambda invocation."""
        context = LambdaContext(function_name=self.function_name)
        with self.invocation_lock:
            return self.handler(event, context)


class _RequestHandler(LocalHandler):
    methods = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
    server: LocalHttpServer[LambdaHttpServer]
    request_id = ""

    def serve(self) -> None:
        adapter = self.server.app
        self.request_id = str(uuid.uuid4())
        try:
            if adapter.front is not None and adapter.front(self):
                return
            body = self.read_body(adapter.max_body_bytes)
            event = self._event(adapter, body, self.request_id)
            self._authorize(adapter, event)
        except Refused as refused:
            self.refuse(refused)
            return
        except Exception as exc:  # an authorizer bug or a broken request: fail closed with a 500
            _log_failure("front door", adapter.function_name, exc, self.request_id)
            self.refuse(Refused(500, "internal", "internal error", close=True))
            return
        try:
            result = adapter.invoke(event)
            status, headers, payload = _http_response(result, v1=adapter.kind == "rest_api")
        except Exception as exc:
            _log_failure("handler", adapter.function_name, exc, self.request_id)
            self.refuse(Refused(500, "internal", "internal error"))
            return
        self.send(status, payload, [*headers, self._request_id_header()])

    def refuse(self, refused: Refused) -> None:
        headers = [self._request_id_header()]
        if refused.status == 401:
            headers.append(("WWW-Authenticate", "Bearer"))
        self.send_error_json(refused.status, refused.code, refused.message, headers, close=refused.close)

    def _request_id_header(self) -> tuple[str, str]:
        # REST APIs name their request id header differently from HTTP APIs
        rest = self.server.app.kind == "rest_api"
        return ("x-amzn-RequestId" if rest else "apigw-requestid", self.request_id)

    # -- request ---------------------------------------------------------------------------

    def _event(self, adapter: LambdaHttpServer, body: bytes, request_id: str) -> dict[str, Any]:
        raw_path, _, raw_query = self.path.partition("?")
        if not raw_path.startswith("/") or any(s in (".", "..") for s in unquote(raw_path).split("/")):
            raise Refused(400, "bad_request", "invalid request path")
        if adapter.kind == "rest_api":
            return self._rest_event(body, request_id, raw_path, raw_query)
        headers = self.header_map()
        cookies = [c.strip() for c in headers.pop("cookie", "").split(";") if c.strip()]
        client_ip = self.client_address[0]
        forwarded = headers.get("x-forwarded-for")
        headers["x-forwarded-for"] = f"{forwarded}, {client_ip}" if forwarded else client_ip
        headers["x-forwarded-proto"] = "http"
        headers["x-forwarded-port"] = str(self.server.server_address[1])
        domain = headers.get("host") or "{}:{}".format(*self.server.server_address[:2])
        now = time.time()
        gmt = time.gmtime(now)
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": raw_path,
            "rawQueryString": raw_query,
        }
        if cookies:
            event["cookies"] = cookies
        event["headers"] = headers
        query = _query_parameters(raw_query)
        if query:
            event["queryStringParameters"] = query
        event["requestContext"] = {
            "accountId": "000000000000",
            "apiId": "local" if adapter.kind == "http_api" else "local-url",
            "domainName": domain,
            "domainPrefix": domain.split(":", 1)[0].split(".", 1)[0],
            "http": {
                "method": self.command,
                "path": raw_path,
                "protocol": self.request_version,
                "sourceIp": client_ip,
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": request_id,
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime(f"%d/{_MONTHS[gmt.tm_mon - 1]}/%Y:%H:%M:%S +0000", gmt),
            "timeEpoch": int(now * 1000),
        }
        if body:
            event["body"], event["isBase64Encoded"] = _event_body(body, headers.get("content-type"))
        else:
            event["isBase64Encoded"] = False
        return event

    def _rest_event(self, body: bytes, request_id: str, raw_path: str, raw_query: str) -> dict[str, Any]:
        """The REST API Lambda proxy event (payload 1.0) of `ANY /{proxy+}` or `ANY /`.

        Header names keep the spelling the client sent; a repeated header (names compared
        without case) lists every value in `multiValueHeaders` and its last value in
        `headers`. Query parameters are decoded the same way. `path` and the `proxy` path
        parameter are the path as sent, percent-encoding included.
        """
        multi_headers: dict[str, list[str]] = {}
        spelling: dict[str, str] = {}  # lower-case name -> the first spelling seen
        for name, value in self.headers.items():
            key = spelling.setdefault(name.lower(), name)
            multi_headers.setdefault(key, []).append(value)
        client_ip = self.client_address[0]
        forwarded = multi_headers.pop(spelling.pop("x-forwarded-for", ""), None)
        for name in ("x-forwarded-proto", "x-forwarded-port", "x-amzn-trace-id"):
            multi_headers.pop(spelling.pop(name, ""), None)
        multi_headers["X-Forwarded-For"] = [", ".join([*(forwarded or []), client_ip])]
        multi_headers["X-Forwarded-Port"] = [str(self.server.server_address[1])]
        multi_headers["X-Forwarded-Proto"] = ["http"]
        now = time.time()
        multi_headers["X-Amzn-Trace-Id"] = [f"Root=1-{int(now):08x}-{uuid.uuid4().hex[:24]}"]
        headers = {name: values[-1] for name, values in multi_headers.items()}
        host = _header(headers, "host")
        domain = host or "{}:{}".format(*self.server.server_address[:2])

        multi_query: dict[str, list[str]] = {}
        for key, value in parse_qsl(raw_query, keep_blank_values=True):
            multi_query.setdefault(key, []).append(value)
        root = raw_path == "/"
        resource = "/" if root else "/{proxy+}"
        gmt = time.gmtime(now)
        event: dict[str, Any] = {
            "resource": resource,
            "path": raw_path,
            "httpMethod": self.command,
            "headers": headers,
            "multiValueHeaders": multi_headers,
            "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
            "multiValueQueryStringParameters": multi_query or None,
            "pathParameters": None if root else {"proxy": raw_path[1:]},
            "stageVariables": None,
            "requestContext": {
                "resourceId": _REST_ROOT_RESOURCE_ID if root else _REST_RESOURCE_ID,
                "resourcePath": resource,
                "httpMethod": self.command,
                "extendedRequestId": base64.b64encode(os.urandom(11)).decode("ascii"),
                "requestTime": time.strftime(f"%d/{_MONTHS[gmt.tm_mon - 1]}/%Y:%H:%M:%S +0000", gmt),
                "path": f"/{REST_STAGE}{raw_path}",
                "accountId": "000000000000",
                "protocol": self.request_version,
                "stage": REST_STAGE,
                "domainPrefix": domain.split(":", 1)[0].split(".", 1)[0],
                "requestTimeEpoch": int(now * 1000),
                "requestId": request_id,
                "identity": {
                    **dict.fromkeys(_REST_IDENTITY_KEYS),
                    "sourceIp": client_ip,
                    "userAgent": _header(headers, "user-agent"),
                },
                "domainName": domain,
                "apiId": "local-rest",
            },
            "body": None,
            "isBase64Encoded": False,
        }
        if body:
            if "*/*" in self.server.app.binary_media_types:
                event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode("ascii"), True
            else:
                event["body"], event["isBase64Encoded"] = _event_body(body, _header(headers, "content-type"))
        return event

    def _authorize(self, adapter: LambdaHttpServer, event: dict[str, Any]) -> None:
        """The JWT authorizer step: no valid bearer token, no invocation.

        Real API Gateway answers 401 `{"message":"Unauthorized"}`; locally the body is the
        JSON error shape of docs/concepts/identity.md so clients handle one error format.
        """
        if adapter.kind == "function_url" or adapter.authorizer is None:
            return
        rest = adapter.kind == "rest_api"
        if event["path" if rest else "rawPath"].startswith(adapter.public_path_prefixes):
            return
        authorization = _header(event["headers"], "authorization") or ""
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if not scheme:
            raise Refused(401, "unauthorized", "missing bearer token")
        if scheme.lower() != "bearer" or not token or " " in token or "," in token:
            raise Refused(401, "unauthorized", "Authorization header must be 'Bearer <token>'")
        try:
            claims = adapter.authorizer(token)
        except Unauthorized as exc:
            raise Refused(401, "unauthorized", exc.message) from None
        strings = {k: _claim_string(v) for k, v in claims.items()}
        if rest:  # a Cognito user pool authorizer of a REST API
            event["requestContext"]["authorizer"] = {"claims": strings}
        else:
            event["requestContext"]["authorizer"] = {"jwt": {"claims": strings, "scopes": None}}


def _log_failure(what: str, function_name: str, exc: Exception, request_id: str) -> None:
    """Only the exception type: its message or traceback may carry secrets from the event."""
    _LOG.error("%s of %s failed with %s (request %s)", what, function_name, type(exc).__name__, request_id)


def _http_response(result: Any, *, v1: bool = False) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and body from a Lambda proxy response (ValueError if malformed).

    Payload 2.0 (`v1=False`): as an HTTP API does, a result without `statusCode` is returned
    as a 200 JSON body. Payload 1.0 (`v1=True`, a REST API): `statusCode` is required (API
    Gateway answers 502 otherwise), `cookies` is not a field, and a name that is in both
    `headers` and `multiValueHeaders` gets the multi values plus the single one if it differs.
    """
    if not isinstance(result, dict) or "statusCode" not in result:
        if v1:
            raise ValueError("malformed Lambda proxy response: no statusCode")
        return 200, [("Content-Type", "application/json")], json.dumps(result).encode()
    status = result["statusCode"]
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise ValueError("statusCode must be an HTTP status")
    headers = _response_headers(result, v1=v1)
    body = result.get("body")
    if body is None:
        payload = b""
    elif not isinstance(body, str):
        raise ValueError("body must be a string")
    elif result.get("isBase64Encoded"):
        try:
            payload = base64.b64decode(body, validate=True)
        except binascii.Error:
            raise ValueError("body is not valid base64") from None
    else:
        payload = body.encode()
    return status, headers, payload


def _response_headers(result: dict[str, Any], *, v1: bool) -> list[tuple[str, str]]:
    multi: list[tuple[str, str]] = []
    for name, values in (result.get("multiValueHeaders") or {}).items():
        if not isinstance(values, list):
            raise ValueError("multiValueHeaders values must be lists")
        multi.extend((str(name), str(v)) for v in values)
    in_multi = {(name.lower(), value) for name, value in multi} if v1 else set()
    single = [(str(name), str(value)) for name, value in (result.get("headers") or {}).items()]
    headers = [(n, v) for n, v in single if (n.lower(), v) not in in_multi] + multi
    if not v1:
        headers.extend(("Set-Cookie", str(cookie)) for cookie in result.get("cookies") or [])
    return [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]


def _query_parameters(raw_query: str) -> dict[str, str]:
    """Decoded query parameters; a repeated key's values comma-joined, as API Gateway does."""
    params: dict[str, str] = {}
    for key, value in parse_qsl(raw_query, keep_blank_values=True):
        params[key] = f"{params[key]},{value}" if key in params else value
    return params


def _claim_string(value: Any) -> Any:
    """API Gateway hands claims to the handler as strings: numbers and booleans included,
    and arrays in its `[a b]` form. Other values (objects) pass through unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list):
        return "[" + " ".join(str(_claim_string(v)) for v in value) + "]"
    return value


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value by its name in any case (payload 1.0 keeps the client's spelling)."""
    value = headers.get(name)
    if value is not None:
        return value
    return next((v for k, v in headers.items() if k.lower() == name), None)


def _event_body(body: bytes, content_type: str | None) -> tuple[str, bool]:
    """The event's `body` and `isBase64Encoded`: text as is, anything else in base64."""
    text = None if _is_binary(content_type) else _utf8(body)
    if text is not None:
        return text, False
    return base64.b64encode(body).decode("ascii"), True


def _is_binary(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return not (media.startswith(_TEXT_TYPES) or media.endswith(("+json", "+xml")))


def _utf8(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None
