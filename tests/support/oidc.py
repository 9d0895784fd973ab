"""A fake OIDC authorization server and a fake Steward API on loopback, for `steward login`.

`FakeIssuer` serves what the CLI uses of a Cognito user pool with a hosted UI domain:

* `GET /.well-known/openid-configuration`: the discovery document;
* `GET /authorize`: "logs the user in" at once, redirecting to `redirect_uri` with a code and
  the same `state` (or with `error=access_denied` when `deny` is set);
* `POST /token`: `authorization_code` (the code is single-use; client id, redirect URI and
  the PKCE S256 verifier are checked) and `refresh_token` (Cognito's answer: new ID and
  access tokens, no new refresh token). Tokens are HS256 JWTs; every one issued is kept in
  `issued`, so a test can check that none leaks into the CLI's output. The token endpoint
  answers a browser's cross-origin request as Cognito's does (`Access-Control-Allow-Origin`),
  for the web console's sign-in.

With `tls`, it is served over HTTPS (the console's policy reaches only an https token
origin). `verify` checks a token as API Gateway's JWT authorizer does (issuer, audience or
client id, expiry) and gives its claims, so a local API can be put behind this issuer.

`browser()` stands in for `webbrowser.open`: it fetches the authorization URL with httpx and
follows the redirect to the CLI's loopback callback, with optional tampering on the way.
`FakeApi` records the Authorization header of each request.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
from steward.domain.errors import Unauthorized
from steward.local.http_base import LocalHandler, LocalHttpServer

SIGNING_KEY = "fake-issuer-test-key-of-32-bytes-or-more"
CLIENT_ID = "steward-cli-test"


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


class FakeIssuer:
    def __init__(
        self, client_id: str = CLIENT_ID, ttl: int = 3600, tls: ssl.SSLContext | None = None
    ) -> None:
        self.client_id = client_id
        self.ttl = ttl
        self.deny = False
        self.issued: list[str] = []
        self.grants: list[str] = []
        self.authorizations: list[dict[str, str]] = []  # the query of each /authorize request
        self._codes: dict[str, dict[str, str]] = {}
        self._refresh: dict[str, str] = {}  # refresh token -> sub
        self._lock = threading.Lock()
        self.server: LocalHttpServer[FakeIssuer] = LocalHttpServer(
            ("127.0.0.1", 0), _IssuerHandler, self, name="fake-oidc", tls=tls
        )
        self.url = self.server.url

    def __enter__(self) -> FakeIssuer:
        self.server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop()

    def revoke_refresh_tokens(self) -> None:
        with self._lock:
            self._refresh.clear()

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        }

    def authorize(self, query: dict[str, str]) -> tuple[int, str]:
        """(status, Location or error text)."""
        self.authorizations.append(query)
        if query.get("client_id") != self.client_id or query.get("response_type") != "code":
            return 400, "unknown client or response type"
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return 400, "PKCE S256 required"
        redirect = query.get("redirect_uri", "")
        if urlsplit(redirect).hostname not in ("localhost", "127.0.0.1"):
            return 400, "redirect_uri not registered"
        back: dict[str, str] = {"state": query.get("state", "")}
        if self.deny:
            back = {"error": "access_denied", "error_description": "User denied the request", **back}
        else:
            code = secrets.token_urlsafe(16)
            with self._lock:
                self._codes[code] = {
                    "client_id": self.client_id,
                    "redirect_uri": redirect,
                    "challenge": query["code_challenge"],
                    "scope": query.get("scope", ""),
                }
            back = {"code": code, **back}
        return 302, f"{redirect}?{urlencode(back)}"

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        grant = form.get("grant_type", "")
        self.grants.append(grant)
        if form.get("client_id") != self.client_id:
            return 400, {"error": "invalid_client"}
        if grant == "authorization_code":
            return self._exchange(form)
        if grant == "refresh_token":
            with self._lock:
                sub = self._refresh.get(form.get("refresh_token", ""))
            if sub is None:
                return 400, {"error": "invalid_grant", "error_description": "Refresh Token has expired"}
            return 200, self._tokens(sub)
        return 400, {"error": "unsupported_grant_type"}

    def _exchange(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            request = self._codes.pop(form.get("code", ""), None)  # a code is good once
        if request is None or request["redirect_uri"] != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant", "error_description": "unknown code or redirect_uri"}
        if s256(form.get("code_verifier", "")) != request["challenge"]:
            return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        refresh = secrets.token_urlsafe(32)
        self.issued.append(refresh)
        with self._lock:
            self._refresh[refresh] = "user-123"
        return 200, {**self._tokens("user-123"), "refresh_token": refresh}

    def verify(self, token: str) -> dict[str, Any]:
        """The claims of a current token of this issuer for this client; `Unauthorized` otherwise."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token, SIGNING_KEY, algorithms=["HS256"], issuer=self.url, options={"verify_aud": False}
            )
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"token refused: {exc}") from None
        if self.client_id not in (claims.get("aud"), claims.get("client_id")):
            raise Unauthorized("token is for another client")
        return claims

    def _tokens(self, sub: str) -> dict[str, Any]:
        now = int(time.time())
        common = {"sub": sub, "iss": self.url, "iat": now, "exp": now + self.ttl, "jti": str(uuid.uuid4())}
        id_token = jwt.encode(
            {**common, "aud": self.client_id, "token_use": "id", "email": "user@example.com"},
            SIGNING_KEY,
            algorithm="HS256",
        )
        access_token = jwt.encode(
            {**common, "client_id": self.client_id, "token_use": "access", "scope": "openid email"},
            SIGNING_KEY,
            algorithm="HS256",
        )
        self.issued += [id_token, access_token]
        return {
            "id_token": id_token,
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": self.ttl,
        }


class _IssuerHandler(LocalHandler):
    server: LocalHttpServer[FakeIssuer]

    def serve(self) -> None:
        issuer = self.server.app
        parts = urlsplit(self.path)
        if self.command == "GET" and parts.path == "/.well-known/openid-configuration":
            self.send_json(200, issuer.discovery())
        elif self.command == "GET" and parts.path == "/authorize":
            status, where = issuer.authorize(first_values(parts.query))
            if status == 302:
                self.send(302, b"", [("Location", where)])
            else:
                self.send_error_json(status, "bad_request", where)
        elif self.command == "POST" and parts.path == "/token":
            body = self.read_body(64 * 1024).decode()
            status, answer = issuer.token(first_values(body))
            cors = [("Access-Control-Allow-Origin", self.headers["Origin"])] if self.headers["Origin"] else []
            self.send_json(status, answer, [("Cache-Control", "no-store"), *cors])
        else:
            self.send_error_json(404, "not_found", "no such route")


def browser(
    tamper_authorize: Callable[[str], str] | None = None,
    tamper_callback: Callable[[str], str] | None = None,
) -> Callable[[str], bool]:
    """A stand-in for `webbrowser.open`: the user signs in at once."""

    def open_url(url: str) -> bool:
        with httpx.Client(trust_env=False, timeout=10) as http:
            answer = http.get(tamper_authorize(url) if tamper_authorize else url)
            assert answer.status_code == 302, answer.text
            location = answer.headers["location"]
            http.get(tamper_callback(location) if tamper_callback else location)
        return True

    return open_url


def first_values(query: str) -> dict[str, str]:
    """A query string (or form body) as name -> its first value."""
    return {k: v[0] for k, v in parse_qs(query).items()}


def replace_param(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = first_values(parts.query)
    query[name] = value
    return parts._replace(query=urlencode(query)).geturl()


class FakeApi:
    """Answers `GET /v1/loop`; keeps each request's Authorization header."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        self.server: LocalHttpServer[FakeApi] = LocalHttpServer(
            ("127.0.0.1", 0), _ApiHandler, self, name="fake-api"
        )
        self.url = self.server.url

    def __enter__(self) -> FakeApi:
        self.server.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.stop()


class _ApiHandler(LocalHandler):
    server: LocalHttpServer[FakeApi]

    def serve(self) -> None:
        self.server.app.authorizations.append(self.headers.get("Authorization"))
        self.send_json(200, {"enabled": True, "paused": False, "interval_seconds": 60})
