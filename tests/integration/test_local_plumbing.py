"""Local-stack plumbing: moto server, serialized DynamoDB, dev JWT issuer, Lambda HTTP adapter.

Real sockets on 127.0.0.1, a real moto server, no mocks.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import json
import logging
import socket
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import httpx
import jwt
import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, APIGatewayRestResolver
from botocore.config import Config
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives import serialization
from moto import mock_aws
from moto.dynamodb.responses import DynamoHandler
from steward.domain.errors import Unauthorized
from steward.local.dev_auth import DevIssuer
from steward.local.http_adapter import LambdaHttpServer
from steward.local.moto_serial import install_dynamodb_lock, install_s3_lock
from steward.local.moto_server import MotoServer, wait_until_ready

pytestmark = pytest.mark.integration

REGION = "us-east-1"


# -- moto server and the DynamoDB lock ---------------------------------------------------------


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with MotoServer() as server:
        yield server.url


def _dynamodb(endpoint_url: str | None = None) -> Any:
    return boto3.client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(max_pool_connections=32, retries={"max_attempts": 1}),
    )


def _create_table(client: Any) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def _race(client: Any, table: str, threads: int = 20, limit: int = 10) -> tuple[int, int, int]:
    """`threads` conditional ADDs at once; returns (final n, successes, condition failures)."""
    key = {"pk": {"S": "counter"}}
    client.put_item(TableName=table, Item={**key, "n": {"N": "0"}})
    barrier = threading.Barrier(threads)

    def bump(_: int) -> str:
        barrier.wait()
        try:
            client.update_item(
                TableName=table,
                Key=key,
                UpdateExpression="ADD n :one",
                ConditionExpression="n < :limit",
                ExpressionAttributeValues={":one": {"N": "1"}, ":limit": {"N": str(limit)}},
            )
        except ClientError as exc:  # not client.exceptions.X: botocore builds those lazily, racily
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return "failed"
        return "ok"

    with ThreadPoolExecutor(threads) as pool:
        outcomes = list(pool.map(bump, range(threads)))
    item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    return int(item["n"]["N"]), outcomes.count("ok"), outcomes.count("failed")


def test_moto_server_serves_dynamodb_and_stop_frees_the_port() -> None:
    server = MotoServer()
    server.start()
    url = server.url
    assert url.startswith("http://127.0.0.1:")
    port = int(url.rsplit(":", 1)[1])
    wait_until_ready(url, timeout=5)

    client = _dynamodb(url)
    table = _create_table(client)
    client.put_item(TableName=table, Item={"pk": {"S": "a"}, "v": {"S": "hello"}})
    got = client.get_item(TableName=table, Key={"pk": {"S": "a"}}, ConsistentRead=True)
    assert got["Item"]["v"] == {"S": "hello"}
    client.close()

    server.stop()
    with pytest.raises(RuntimeError):
        _ = server.url
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    with socket.socket() as probe:  # a new server can take the port
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen()


def test_moto_server_on_a_taken_port_raises_instead_of_hanging() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="in use"):
            MotoServer(port=taken.getsockname()[1]).start()


def test_install_dynamodb_lock_is_idempotent() -> None:
    install_dynamodb_lock()
    wrapped = DynamoHandler.call_action
    install_dynamodb_lock()
    assert DynamoHandler.call_action is wrapped


@pytest.fixture
def eager_thread_switching() -> Iterator[None]:
    """Switch threads every 10 us so that an unserialized moto overshoots in most runs."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


@pytest.mark.usefixtures("eager_thread_switching")
@pytest.mark.parametrize("run", range(3))
def test_conditional_add_is_atomic_against_the_moto_server(moto_url: str, run: int) -> None:
    client = _dynamodb(moto_url)
    assert _race(client, _create_table(client)) == (10, 10, 10)


@pytest.mark.usefixtures("eager_thread_switching")
@pytest.mark.parametrize("run", range(3))
def test_conditional_add_is_atomic_in_process(run: int) -> None:
    install_dynamodb_lock()
    with mock_aws():
        client = _dynamodb()
        assert _race(client, _create_table(client)) == (10, 10, 10)


@pytest.mark.usefixtures("eager_thread_switching")
def test_concurrent_overwrites_and_reads_of_one_s3_key_in_process_all_succeed() -> None:
    """Real S3 answers every PUT and GET of one key (last writer wins); unserialized, moto
    closes the key's buffer under a concurrent reader ("I/O operation on closed file")."""
    install_s3_lock()
    errors: list[BaseException] = []
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="race")

        def churn(n: int) -> None:
            try:
                for i in range(40):
                    s3.put_object(Bucket="race", Key="one", Body=f"{n}-{i}".encode() * 200)
                    s3.get_object(Bucket="race", Key="one")["Body"].read()
            except BaseException as exc:  # every failure is the finding
                errors.append(exc)

        threads = [threading.Thread(target=churn, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []


# -- dev identities ------------------------------------------------------------------------------


@pytest.fixture
def key_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "keys" / "dev-issuer.pem"


@pytest.fixture
def issuer(key_path: Path) -> DevIssuer:
    return DevIssuer.load_or_create(key_path)


def _forge(key_path: Path, kid: str, **overrides: Any) -> str:
    """A token signed by the issuer's own key with chosen claims (to test claim checks)."""
    now = int(time.time())
    claims = {"iss": "steward-local", "aud": "steward", "sub": "alice", "iat": now, "nbf": now}
    claims["exp"] = now + 600
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid})  # type: ignore[arg-type]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _rejected(issuer: DevIssuer, token: str, reason: str) -> None:
    with pytest.raises(Unauthorized) as caught:
        issuer.verify(token)
    assert reason in caught.value.message
    for part in [token, *token.split(".")]:
        assert not part or part not in caught.value.message


def test_dev_token_round_trip(issuer: DevIssuer) -> None:
    token = issuer.mint("alice")
    assert jwt.get_unverified_header(token)["kid"] == issuer.kid
    claims = issuer.verify(token)
    assert claims["sub"] == "alice"
    assert claims["iss"] == "steward-local"
    assert claims["aud"] == "steward"
    assert claims["token_use"] == "access"
    assert isinstance(claims["exp"], int)
    assert isinstance(claims["iat"], int)
    assert claims["exp"] - claims["iat"] == 12 * 3600
    assert claims["nbf"] == claims["iat"]
    assert claims["jti"] != issuer.verify(issuer.mint("alice"))["jti"]


def test_dev_token_claim_checks(issuer: DevIssuer, key_path: Path) -> None:
    now = int(time.time())
    kid = issuer.kid
    _rejected(issuer, _forge(key_path, kid, iat=now - 7200, nbf=now - 7200, exp=now - 60), "expired")
    _rejected(issuer, _forge(key_path, kid, aud="someone-else"), "audience")
    _rejected(issuer, _forge(key_path, kid, iss="https://evil.example"), "issuer")
    _rejected(issuer, _forge(key_path, kid, nbf=now + 600), "not valid yet")
    _rejected(issuer, _forge(key_path, kid, exp=None), "'exp'")
    _rejected(issuer, _forge(key_path, kid, sub=None), "'sub'")
    # within the 30 s leeway a just-expired token still passes
    assert issuer.verify(_forge(key_path, kid, exp=now - 10))["sub"] == "alice"


def test_dev_token_tampering_and_foreign_keys(issuer: DevIssuer) -> None:
    token = issuer.mint("alice")
    header, payload, signature = token.split(".")

    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    _rejected(issuer, f"{header}.{payload}.{flipped}", "signature")

    as_bob = json.loads(base64.urlsafe_b64decode(payload + "==")) | {"sub": "bob"}
    _rejected(issuer, f"{header}.{_b64(json.dumps(as_bob).encode())}.{signature}", "signature")

    other = DevIssuer.generate()
    _rejected(issuer, other.mint("alice"), "key id")
    # another key that claims our kid: the signature check catches it
    now = int(time.time())
    claims = {"iss": "steward-local", "aud": "steward", "sub": "alice", "iat": now, "exp": now + 60}
    forged = jwt.encode(claims, other._private_key, algorithm="ES256", headers={"kid": issuer.kid})
    _rejected(issuer, forged, "signature")

    _rejected(issuer, "not-a-jwt", "malformed")
    _rejected(issuer, "", "missing")


def test_dev_token_rejects_none_and_hmac_algorithms(issuer: DevIssuer, key_path: Path) -> None:
    now = int(time.time())
    claims = {"iss": "steward-local", "aud": "steward", "sub": "alice", "iat": now, "exp": now + 60}
    body = _b64(json.dumps(claims).encode())

    none_header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": issuer.kid}).encode())
    _rejected(issuer, f"{none_header}.{body}.", "algorithm")

    # key confusion: HS256 keyed with the public key, the classic attack on RS/ES verifiers
    public_pem = issuer._private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    hs_header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": issuer.kid}).encode())
    mac = hmac.new(public_pem, f"{hs_header}.{body}".encode(), hashlib.sha256).digest()
    _rejected(issuer, f"{hs_header}.{body}.{_b64(mac)}", "algorithm")


def test_dev_issuer_key_file_is_private_and_reloads(issuer: DevIssuer, key_path: Path) -> None:
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_path.parent.stat().st_mode) == 0o700
    assert list(key_path.parent.iterdir()) == [key_path]  # no temporary file left behind
    token = issuer.mint("bob")

    reloaded = DevIssuer.load_or_create(key_path)
    assert reloaded.kid == issuer.kid
    assert reloaded.verify(token)["sub"] == "bob"
    assert issuer.verify(reloaded.mint("carol"))["sub"] == "carol"
    assert reloaded.jwks()["keys"] == issuer.jwks()["keys"]


# -- Lambda HTTP adapter -----------------------------------------------------------------------


class Recorder:
    """A handler that answers with the event it received, and counts its calls."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.contexts: list[Any] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.events.append(event)
        self.contexts.append(context)
        return {
            "statusCode": 200,
            "headers": {"content-type": "application/json", "x-echo": "yes"},
            "cookies": ["session=abc; Path=/", "theme=dark"],
            "body": json.dumps(event),
            "isBase64Encoded": False,
        }


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def api(recorder: Recorder, issuer: DevIssuer) -> Iterator[LambdaHttpServer]:
    with LambdaHttpServer(
        recorder,
        kind="http_api",
        authorizer=issuer.verify,
        public_path_prefixes=("/v1/mint/",),
        max_body_bytes=1024,
        function_name="steward-api",
    ) as server:
        yield server


def test_adapter_builds_the_http_api_event(
    api: LambdaHttpServer, issuer: DevIssuer, recorder: Recorder
) -> None:
    token = issuer.mint("alice")
    response = httpx.post(
        f"{api.url}/v1/plans/demo/submit?a=1&a=2&b=x%20y&empty=",
        headers=[
            ("Authorization", f"Bearer {token}"),
            ("X-Multi", "one"),
            ("X-Multi", "two"),
            ("Cookie", "c1=v1; c2=v2"),
            ("Content-Type", "application/json"),
        ],
        content=b'{"hello": "w\xc3\xb6rld"}',
    )
    assert response.status_code == 200
    assert response.headers["x-echo"] == "yes"
    assert response.headers.get_list("set-cookie") == ["session=abc; Path=/", "theme=dark"]
    assert response.headers["apigw-requestid"]
    event = response.json()
    assert event == recorder.events[0]

    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    assert event["rawPath"] == "/v1/plans/demo/submit"
    assert event["rawQueryString"] == "a=1&a=2&b=x%20y&empty="
    assert event["queryStringParameters"] == {"a": "1,2", "b": "x y", "empty": ""}
    assert event["cookies"] == ["c1=v1", "c2=v2"]
    headers = event["headers"]
    assert headers["x-multi"] == "one,two"
    assert headers["authorization"] == f"Bearer {token}"
    assert "cookie" not in headers
    assert all(name == name.lower() for name in headers)
    assert headers["x-forwarded-for"] == "127.0.0.1"
    assert event["body"] == '{"hello": "wörld"}'
    assert event["isBase64Encoded"] is False

    ctx = event["requestContext"]
    assert ctx["accountId"] == "000000000000"
    assert ctx["apiId"] == "local"
    assert ctx["stage"] == "$default"
    assert ctx["routeKey"] == "$default"
    assert ctx["domainName"] == api.url.removeprefix("http://")
    assert ctx["domainPrefix"] == "127"
    assert ctx["http"] == {
        "method": "POST",
        "path": "/v1/plans/demo/submit",
        "protocol": "HTTP/1.1",
        "sourceIp": "127.0.0.1",
        "userAgent": headers["user-agent"],
    }
    assert str(uuid.UUID(ctx["requestId"])) == ctx["requestId"]
    assert abs(ctx["timeEpoch"] / 1000 - time.time()) < 60
    time.strptime(ctx["time"], "%d/%b/%Y:%H:%M:%S +0000")
    claims = ctx["authorizer"]["jwt"]["claims"]
    assert ctx["authorizer"]["jwt"]["scopes"] is None
    assert claims["sub"] == "alice"
    assert claims["iat"] == str(issuer.verify(token)["iat"])  # numbers arrive as strings
    assert all(isinstance(value, str) for value in claims.values())

    context = recorder.contexts[0]
    assert context.function_name == "steward-api"
    assert context.function_version == "$LATEST"
    assert context.memory_limit_in_mb == 512
    assert context.invoked_function_arn.endswith(":function:steward-api")
    assert 0 < context.get_remaining_time_in_millis() <= 30_000


def test_adapter_get_without_query_or_body(api: LambdaHttpServer, issuer: DevIssuer) -> None:
    response = httpx.get(f"{api.url}/v1/plans", headers={"Authorization": f"Bearer {issuer.mint('bob')}"})
    event = response.json()
    assert event["rawQueryString"] == ""
    assert "queryStringParameters" not in event
    assert "body" not in event
    assert "cookies" not in event
    assert event["requestContext"]["http"]["method"] == "GET"
    assert event["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] == "bob"


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer", "Bearer not.a.jwt", "Basic YWxpY2U6c2VjcmV0", "Bearer a b"],
)
def test_adapter_rejects_missing_or_bad_tokens(
    api: LambdaHttpServer, recorder: Recorder, authorization: str | None
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    response = httpx.get(f"{api.url}/v1/plans", headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"
    assert response.json()["error"]["message"]
    assert recorder.events == []


def test_adapter_rejects_foreign_and_expired_tokens(api: LambdaHttpServer, recorder: Recorder) -> None:
    foreign = DevIssuer.generate().mint("alice")
    response = httpx.get(f"{api.url}/v1/plans", headers={"Authorization": f"Bearer {foreign}"})
    assert response.status_code == 401
    assert foreign not in response.text
    assert recorder.events == []


def test_adapter_public_prefix_skips_the_authorizer(api: LambdaHttpServer, recorder: Recorder) -> None:
    response = httpx.post(f"{api.url}/v1/mint/ticket", json={"ticket": "t"})
    assert response.status_code == 200
    event = response.json()
    assert "authorizer" not in event["requestContext"]
    assert json.loads(event["body"]) == {"ticket": "t"}
    # a dot segment cannot turn a public prefix into a private route
    dotted = httpx.get(f"{api.url}/v1/mint/../plans")
    assert dotted.status_code in (400, 401)
    assert len(recorder.events) == 1


def test_adapter_refuses_oversized_bodies(
    api: LambdaHttpServer, issuer: DevIssuer, recorder: Recorder
) -> None:
    auth = {"Authorization": f"Bearer {issuer.mint('alice')}"}
    for size in (1025, 4 * 1024 * 1024):  # the second is larger than any socket buffer
        response = httpx.put(f"{api.url}/v1/plans/big", headers=auth, content=b"x" * size, timeout=30)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "too_large"
    assert recorder.events == []
    assert httpx.put(f"{api.url}/v1/plans/ok", headers=auth, content=b"x" * 1024).status_code == 200


def test_adapter_handler_exception_is_a_json_500(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise RuntimeError("secret-value-in-message")

    with (
        caplog.at_level(logging.ERROR, logger="steward.local.http_adapter"),
        LambdaHttpServer(broken, kind="function_url") as server,
    ):
        response = httpx.post(f"{server.url}/hook", content=b"payload-marker")
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal", "message": "internal error"}}
    assert "RuntimeError" in caplog.text
    assert "secret-value-in-message" not in caplog.text
    assert "payload-marker" not in caplog.text


def test_adapter_binary_body_round_trip() -> None:
    seen: list[dict[str, Any]] = []

    def echo_bytes(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(event)
        data = base64.b64decode(event["body"]) if event["isBase64Encoded"] else event["body"].encode()
        return {
            "statusCode": 201,
            "headers": {"content-type": "application/octet-stream"},
            "body": base64.b64encode(data[::-1]).decode(),
            "isBase64Encoded": True,
        }

    payload = bytes(range(256)) * 4
    with LambdaHttpServer(echo_bytes, kind="function_url") as server:
        binary = httpx.post(
            f"{server.url}/blob", content=payload, headers={"content-type": "application/octet-stream"}
        )
        invalid_utf8 = httpx.post(
            f"{server.url}/blob", content=b"\xff\xfe", headers={"content-type": "text/plain"}
        )
    assert binary.status_code == 201
    assert binary.content == payload[::-1]
    assert seen[0]["isBase64Encoded"] is True
    assert seen[0]["requestContext"]["apiId"] == "local-url"
    assert "authorizer" not in seen[0]["requestContext"]
    assert invalid_utf8.content == b"\xfe\xff"
    assert seen[1]["isBase64Encoded"] is True


def test_adapter_infers_a_json_response_like_api_gateway() -> None:
    with LambdaHttpServer(lambda event, context: {"ok": True}, kind="function_url") as server:
        response = httpx.get(f"{server.url}/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"ok": True}


def test_powertools_resolver_runs_through_the_adapter(issuer: DevIssuer) -> None:
    app = APIGatewayHttpResolver()
    logger = Logger(service="steward-test", level="WARNING")

    @app.get("/v1/ping")
    def ping() -> dict[str, Any]:
        claims = app.current_event.request_context.authorizer.jwt_claim
        return {"sub": claims["sub"]}

    @logger.inject_lambda_context
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return app.resolve(event, context)

    with (
        LambdaHttpServer(lambda_handler, kind="http_api", authorizer=issuer.verify) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        ok = client.get("/v1/ping", headers={"Authorization": f"Bearer {issuer.mint('alice')}"})
        missing = client.get("/v1/nope", headers={"Authorization": f"Bearer {issuer.mint('alice')}"})
        anonymous = client.get("/v1/ping")
    assert ok.status_code == 200
    assert ok.json() == {"sub": "alice"}
    assert missing.status_code == 404
    assert anonymous.status_code == 401


def test_adapter_runs_one_invocation_at_a_time_unless_told_otherwise() -> None:
    active = 0
    peak = 0
    guard = threading.Lock()

    def slow(event: dict[str, Any], context: Any) -> dict[str, Any]:
        nonlocal active, peak
        with guard:
            active += 1
            peak = max(peak, active)
        time.sleep(0.1)
        with guard:
            active -= 1
        return {"statusCode": 204}

    with LambdaHttpServer(slow, kind="function_url") as server, ThreadPoolExecutor(4) as pool:
        codes = list(pool.map(lambda _: httpx.get(server.url).status_code, range(4)))
    assert codes == [204] * 4
    assert peak == 1

    meeting = threading.Barrier(2, timeout=5)

    def rendezvous(event: dict[str, Any], context: Any) -> dict[str, Any]:
        meeting.wait()  # only passes if two invocations run at once
        return {"statusCode": 204}

    with (
        LambdaHttpServer(rendezvous, kind="function_url", invocation_lock=contextlib.nullcontext()) as server,
        ThreadPoolExecutor(2) as pool,
    ):
        codes = list(pool.map(lambda _: httpx.get(server.url).status_code, range(2)))
    assert codes == [204, 204]


# -- Lambda HTTP adapter: REST API (payload 1.0) -------------------------------------------------


@pytest.fixture
def rest(recorder: Recorder) -> Iterator[LambdaHttpServer]:
    with LambdaHttpServer(
        recorder, kind="rest_api", max_body_bytes=1024, function_name="steward-relay"
    ) as server:
        yield server


def test_rest_adapter_builds_the_rest_api_proxy_event(rest: LambdaHttpServer, recorder: Recorder) -> None:
    response = httpx.post(
        f"{rest.url}/v1/relay/converse?a=1&a=2&b=x%20y&empty=",
        headers=[
            ("Authorization", "Bearer cap"),
            ("X-Multi", "one"),
            ("X-Multi", "two"),
            ("Content-Type", "application/json"),
        ],
        content=b'{"hello": "w\xc3\xb6rld"}',
    )
    assert response.status_code == 200
    assert response.headers["x-echo"] == "yes"
    assert "set-cookie" not in response.headers  # `cookies` is not a field of a 1.0 response
    assert response.headers["x-amzn-requestid"]
    event = response.json()
    assert event == recorder.events[0]

    assert "version" not in event
    assert "rawPath" not in event
    assert event["resource"] == "/{proxy+}"
    assert event["path"] == "/v1/relay/converse"
    assert event["httpMethod"] == "POST"
    assert event["pathParameters"] == {"proxy": "v1/relay/converse"}
    assert event["stageVariables"] is None
    headers, multi = event["headers"], event["multiValueHeaders"]
    assert headers["Authorization"] == "Bearer cap"  # names as sent
    assert headers["X-Multi"] == "two"  # the last value
    assert multi["X-Multi"] == ["one", "two"]
    assert multi["Authorization"] == ["Bearer cap"]
    assert set(headers) == set(multi)
    assert all(multi[name][-1] == value for name, value in headers.items())
    assert headers["X-Forwarded-For"] == "127.0.0.1"
    assert headers["X-Forwarded-Proto"] == "http"
    assert event["queryStringParameters"] == {"a": "2", "b": "x y", "empty": ""}
    assert event["multiValueQueryStringParameters"] == {"a": ["1", "2"], "b": ["x y"], "empty": [""]}
    assert event["body"] == '{"hello": "wörld"}'
    assert event["isBase64Encoded"] is False

    ctx = event["requestContext"]
    assert ctx["accountId"] == "000000000000"
    assert ctx["apiId"] == "local-rest"
    assert ctx["resourcePath"] == "/{proxy+}"
    assert ctx["resourceId"]
    assert ctx["httpMethod"] == "POST"
    assert ctx["stage"] == "local"
    assert ctx["path"] == "/local/v1/relay/converse"  # the stage is part of it
    assert ctx["protocol"] == "HTTP/1.1"
    assert ctx["domainName"] == rest.url.removeprefix("http://")
    assert ctx["domainPrefix"] == "127"
    assert str(uuid.UUID(ctx["requestId"])) == ctx["requestId"]
    assert ctx["requestId"] == response.headers["x-amzn-requestid"]
    assert len(base64.b64decode(ctx["extendedRequestId"])) == 11
    assert abs(ctx["requestTimeEpoch"] / 1000 - time.time()) < 60
    time.strptime(ctx["requestTime"], "%d/%b/%Y:%H:%M:%S +0000")
    identity = ctx["identity"]
    assert identity["sourceIp"] == "127.0.0.1"
    assert identity["userAgent"] == headers["User-Agent"]
    assert identity["caller"] is None
    assert identity["cognitoIdentityId"] is None
    assert identity["userArn"] is None
    assert "authorizer" not in ctx
    assert recorder.contexts[0].function_name == "steward-relay"


def test_rest_adapter_nulls_absent_parts_and_base64_encodes_binary_bodies(
    rest: LambdaHttpServer, recorder: Recorder
) -> None:
    plain = httpx.get(f"{rest.url}/v1/relay/health").json()
    assert plain["httpMethod"] == "GET"
    assert plain["queryStringParameters"] is None
    assert plain["multiValueQueryStringParameters"] is None
    assert plain["body"] is None
    assert plain["isBase64Encoded"] is False
    assert plain["pathParameters"] == {"proxy": "v1/relay/health"}

    only_flag = httpx.get(f"{rest.url}/v1/x?flag").json()
    assert only_flag["queryStringParameters"] == {"flag": ""}
    assert only_flag["multiValueQueryStringParameters"] == {"flag": [""]}

    payload = bytes(range(256))
    binary = httpx.put(
        f"{rest.url}/v1/blob", content=payload, headers={"Content-Type": "application/octet-stream"}
    ).json()
    assert binary["isBase64Encoded"] is True
    assert base64.b64decode(binary["body"]) == payload

    root = httpx.get(f"{rest.url}/").json()
    assert root["resource"] == "/"
    assert root["requestContext"]["resourcePath"] == "/"
    assert root["requestContext"]["path"] == "/local/"
    assert root["pathParameters"] is None

    host, port = rest.url.removeprefix("http://").rsplit(":", 1)
    for dotted in ("/v1/relay/../converse", "/v1/relay/%2e%2e/converse", "/v1/./relay"):
        conn = http.client.HTTPConnection(host, int(port), timeout=5)  # httpx would normalize it
        try:
            conn.request("GET", dotted)
            assert conn.getresponse().status == 400
        finally:
            conn.close()
    assert len(recorder.events) == 4


def test_rest_adapter_authorizer_puts_claims_where_a_cognito_authorizer_does(
    recorder: Recorder, issuer: DevIssuer
) -> None:
    with LambdaHttpServer(
        recorder, kind="rest_api", authorizer=issuer.verify, public_path_prefixes=("/v1/public/",)
    ) as server:
        token = issuer.mint("alice")
        ok = httpx.get(f"{server.url}/v1/plans", headers={"authorization": f"Bearer {token}"})
        missing = httpx.get(f"{server.url}/v1/plans")
        foreign = httpx.get(
            f"{server.url}/v1/plans",
            headers={"Authorization": f"Bearer {DevIssuer.generate().mint('alice')}"},
        )
        public = httpx.get(f"{server.url}/v1/public/ping")
    assert ok.status_code == 200
    authorizer = ok.json()["requestContext"]["authorizer"]
    assert set(authorizer) == {"claims"}
    assert authorizer["claims"]["sub"] == "alice"
    assert authorizer["claims"]["iat"] == str(issuer.verify(token)["iat"])
    assert all(isinstance(value, str) for value in authorizer["claims"].values())
    for rejected in (missing, foreign):
        assert rejected.status_code == 401
        assert rejected.json()["error"]["code"] == "unauthorized"
    assert "authorizer" not in public.json()["requestContext"]
    assert len(recorder.events) == 2


def test_rest_adapter_reads_a_1_0_response_as_api_gateway_does(caplog: pytest.LogCaptureFixture) -> None:
    results: list[Any] = [
        {
            "statusCode": 202,
            "headers": {"X-One": "a", "X-Both": "same", "X-Extra": "single"},
            "multiValueHeaders": {"X-Both": ["same", "other"], "X-Extra": ["multi"]},
            "cookies": ["ignored=1"],
            "body": "accepted",
        },
        {"ok": True},  # no statusCode: a malformed proxy response for a REST API
    ]
    with (
        caplog.at_level(logging.ERROR, logger="steward.local.http_adapter"),
        LambdaHttpServer(lambda event, context: results.pop(0), kind="rest_api") as server,
    ):
        first = httpx.get(f"{server.url}/v1/a")
        second = httpx.get(f"{server.url}/v1/b")
    assert first.status_code == 202
    assert first.text == "accepted"
    assert first.headers.get_list("x-one") == ["a"]
    assert first.headers.get_list("x-both") == ["same", "other"]
    assert sorted(first.headers.get_list("x-extra")) == ["multi", "single"]
    assert "set-cookie" not in first.headers
    assert second.status_code == 500
    assert second.json()["error"]["code"] == "internal"
    assert "ValueError" in caplog.text


def test_powertools_rest_resolver_runs_through_the_rest_adapter() -> None:
    app = APIGatewayRestResolver()
    logger = Logger(service="steward-test", level="WARNING")

    @app.post("/v1/relay/converse")
    def converse() -> dict[str, Any]:
        event = app.current_event
        body = event.json_body
        return {
            "authorization": event.headers.get("authorization"),  # any case, as in AWS
            "messages": len(body["messages"]),
            "max_tokens": body["inferenceConfig"]["maxTokens"],
            "stage": event.request_context.stage,
            "proxy": event.path_parameters["proxy"],
            "trace": event.query_string_parameters.get("trace"),
        }

    @logger.inject_lambda_context
    def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return app.resolve(event, context)

    request = {
        "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        "inferenceConfig": {"maxTokens": 64},
    }
    with (
        LambdaHttpServer(lambda_handler, kind="rest_api", function_name="steward-relay") as server,
        httpx.Client(base_url=server.url) as client,
    ):
        ok = client.post(
            "/v1/relay/converse?trace=1", json=request, headers={"Authorization": "Bearer cap-123"}
        )
        wrong_method = client.get("/v1/relay/converse")
        missing = client.post("/v1/relay/nope", json=request)
    assert ok.status_code == 200
    assert ok.headers["content-type"] == "application/json"
    assert ok.json() == {
        "authorization": "Bearer cap-123",
        "messages": 1,
        "max_tokens": 64,
        "stage": "local",
        "proxy": "v1/relay/converse",
        "trace": "1",
    }
    assert wrong_method.status_code in (404, 405)
    assert missing.status_code == 404


def test_rest_adapter_refuses_oversized_bodies(rest: LambdaHttpServer, recorder: Recorder) -> None:
    for size in (1025, 4 * 1024 * 1024):
        response = httpx.post(f"{rest.url}/v1/relay/converse", content=b"x" * size, timeout=30)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "too_large"
    assert recorder.events == []
    ok = httpx.post(f"{rest.url}/v1/relay/converse", content=b"x" * 1024)
    assert ok.status_code == 200
    assert ok.json()["body"] == "x" * 1024


# -- the HTTP base every local server shares (steward.local.http_base) ----------------------------


def _exchange(server: LambdaHttpServer, raw: bytes) -> bytes:
    """Send `raw` on one connection and read until the server closes it (bounded)."""
    host, port = server.url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(raw)
        while chunk := connection.recv(65536):
            received += chunk
    return received


def test_a_body_without_a_usable_length_is_a_400_that_closes_the_connection(
    rest: LambdaHttpServer, recorder: Recorder
) -> None:
    for length in ("-1", "12abc", "1_0", "+5", "0x10", "5, 6", "9" * 40):
        request = f"POST /v1/relay/converse HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\nhello"
        # the second request is never read: after a 400 where the body ends is unknown
        answer = _exchange(rest, request.encode() + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 "), length
        assert b"\r\nConnection: close\r\n" in answer, length
        assert answer.count(b"HTTP/1.1 ") == 1, length
        assert b'"invalid Content-Length"' in answer, length
    assert recorder.events == []


# What the standard library refuses before a handler runs: each answered in the JSON shape.
MALFORMED_REQUESTS = [
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),  # request line too long
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", 431),  # a header too long
    (b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", 505),  # a version nobody speaks
    (b"GET\r\n\r\n", 400),  # no path, no version
    (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501),  # a method no route has
]


@pytest.mark.parametrize(("raw", "status"), MALFORMED_REQUESTS, ids=[str(s) for _, s in MALFORMED_REQUESTS])
def test_what_the_standard_library_refuses_is_answered_as_json(
    rest: LambdaHttpServer, recorder: Recorder, raw: bytes, status: int
) -> None:
    answer = _exchange(rest, raw)
    if answer.startswith(b"HTTP/"):
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b" ", 2)[1] == str(status).encode()
        assert b"Content-Type: application/json" in head
    else:  # a request line without a version the server speaks gets an HTTP/0.9 answer: no head
        body = answer
    assert set(json.loads(body)["error"]) >= {"code", "message"}
    assert b"<html" not in answer.lower()
    assert recorder.events == []


def test_chunked_bodies_are_decoded_within_the_limit(rest: LambdaHttpServer, recorder: Recorder) -> None:
    url = f"{rest.url}/v1/relay/converse"
    ok = httpx.post(url, content=iter([b"hello ", b"chunked ", b"world"]))
    assert ok.status_code == 200
    assert recorder.events[-1]["body"] == "hello chunked world"
    over = httpx.post(url, content=iter([b"x" * 1000, b"x" * 25]))
    assert over.status_code == 413
    assert over.json()["error"]["code"] == "too_large"
    for chunks in (b"-1\r\nx\r\n0\r\n\r\n", b"zz\r\nx\r\n0\r\n\r\n", b"5\r\nhi\r\n0\r\n\r\n"):
        head = b"POST /v1/relay/converse HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        answer = _exchange(rest, head + chunks)
        assert answer.startswith(b"HTTP/1.1 400 "), chunks
        assert b'"invalid chunked body"' in answer, chunks
    assert len(recorder.events) == 1


def test_keep_alive_serves_requests_in_turn_on_one_connection(
    rest: LambdaHttpServer, recorder: Recorder
) -> None:
    one = b"POST /v1/relay/converse HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\none"
    last = (
        b"POST /v1/relay/converse HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\nlast"
    )
    answer = _exchange(rest, one + last)
    assert answer.count(b"HTTP/1.1 200 ") == 2
    assert [event["body"] for event in recorder.events] == ["one", "last"]


def test_the_http_base_logs_no_header_body_or_token(
    rest: LambdaHttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Bearer secret-token-marker"
    with caplog.at_level(logging.DEBUG):
        httpx.post(f"{rest.url}/v1/relay/converse", headers={"Authorization": secret}, content=b"body-marker")
        _exchange(rest, f"POST /x HTTP/1.1\r\nAuthorization: {secret}\r\nContent-Length: -1\r\n\r\n".encode())
    assert "secret-token-marker" not in caplog.text
    assert "body-marker" not in caplog.text
