"""`steward login`: sign the CLI in to a deployed Steward with OIDC authorization code + PKCE.

The flow (RFC 6749 section 4.1, RFC 7636, RFC 8252 for the loopback redirect):

1. discover the authorization and token endpoints from `{issuer}/.well-known/openid-configuration`
   (a Cognito user pool's issuer is `https://cognito-idp.<region>.amazonaws.com/<pool id>`; its
   discovery document names the hosted UI domain's `/oauth2/authorize` and `/oauth2/token`);
2. listen on 127.0.0.1 (a fixed port by default, as Cognito accepts only a registered callback
   URL exactly; the redirect URI is `http://localhost:<port>/callback`, the one http URL Cognito
   allows);
3. open the authorization URL (`response_type=code`, a random `state`, an S256 `code_challenge`)
   in a browser, or print it;
4. take the code from the callback (a wrong `state` or an `error=` ends the login, nothing stored);
5. exchange it at the token endpoint with the `code_verifier` (public client: no secret);
6. keep the tokens in the user's config directory (`credentials.json`, mode 0600, directory 0700).

Which token is sent: the ID token by default. Its `aud` is the app client id for every OIDC
issuer, which is what an HTTP API JWT authorizer whose audience is the client id checks.
(API Gateway also accepts a Cognito access token there, by its `client_id` claim when it has
no `aud`; `--token access` sends that one, e.g. when routes require scopes.)

Tokens are never printed or logged; errors name what failed, not the token.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import json
import os
import re
import secrets
import tempfile
import threading
import time
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt

from steward.local.http_base import LocalHandler, LocalHttpServer

DEFAULT_PORT = 8765
DEFAULT_SCOPES = "openid email"
DEFAULT_TIMEOUT_SECONDS = 300.0
CALLBACK_PATH = "/callback"
REFRESH_MARGIN_SECONDS = 60  # renew a token this close to its expiry, before the API refuses it
TOKEN_KINDS = ("id", "access")
CONFIG_KEYS = ("api_url", "issuer", "client_id", "scopes", "port", "bearer")
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


class LoginError(Exception):
    """A login, refresh or logout that failed; `message` is one line fit for the terminal."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- where things are kept -------------------------------------------------------------------


def config_dir() -> Path:
    """`$XDG_CONFIG_HOME/steward`, or `~/.config/steward`."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "steward"


def config_file() -> Path:
    return config_dir() / "config.json"


def credentials_file() -> Path:
    return config_dir() / "credentials.json"


def _write_private(path: Path, data: dict[str, Any]) -> None:
    """Write JSON readable by the owner only (0600; directory 0700), replacing atomically."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LoginError("bad_login_file", f"cannot read {path} ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise LoginError("bad_login_file", f"{path} is not a JSON object")
    return data


def load_config() -> dict[str, Any]:
    """The saved `steward login` settings (no secrets), or {}."""
    return _read_json(config_file()) or {}


def load_credentials() -> dict[str, Any] | None:
    return _read_json(credentials_file())


def logout() -> Path | None:
    """Remove the stored tokens; the path removed, or None when there were none."""
    path = credentials_file()
    try:
        path.unlink()
    except FileNotFoundError:
        return None
    return path


# -- settings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoginSettings:
    api_url: str
    issuer: str
    client_id: str
    scopes: str = DEFAULT_SCOPES
    port: int = DEFAULT_PORT
    bearer: str = "id"

    @classmethod
    def merge(cls, given: dict[str, Any]) -> LoginSettings:
        """`given` (flags, None for unset) over the saved config; says what is missing."""
        saved = load_config()
        values = {k: given[k] if given.get(k) is not None else saved.get(k) for k in CONFIG_KEYS}
        missing = [f"--{k.replace('_', '-')}" for k in ("api_url", "issuer", "client_id") if not values[k]]
        if missing:
            raise LoginError(
                "login_settings",
                f"missing {', '.join(missing)} (give them once; they are saved in {config_file()})",
            )
        kind = str(values["bearer"] or "id")
        if kind not in TOKEN_KINDS:
            raise LoginError("login_settings", f"--token must be one of {', '.join(TOKEN_KINDS)}")
        port = values["port"]
        if port is None:
            port = DEFAULT_PORT
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise LoginError("login_settings", "--port must be 0 to 65535")
        settings = cls(
            api_url=_checked_url("--api-url", str(values["api_url"])).rstrip("/"),
            issuer=_checked_url("--issuer", str(values["issuer"])).rstrip("/"),
            client_id=str(values["client_id"]),
            scopes=str(values["scopes"] or DEFAULT_SCOPES),
            port=port,
            bearer=kind,
        )
        return settings

    def save(self) -> None:
        _write_private(config_file(), {k: getattr(self, k) for k in CONFIG_KEYS})


def _checked_url(name: str, url: str) -> str:
    """https, or http on a loopback host only: tokens never travel in clear over a network."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS:
        return url
    raise LoginError("login_settings", f"{name} must be an https URL (http only on loopback): {url!r}")


# -- the flow --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoints:
    authorization: str
    token: str


def discover(issuer: str, http: httpx.Client) -> Endpoints:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = http.get(url)
    except httpx.HTTPError as exc:
        raise LoginError("discovery", f"cannot reach {url} ({type(exc).__name__})") from None
    if response.status_code != 200:
        raise LoginError("discovery", f"{url} answered {response.status_code}")
    try:
        doc = response.json()
        authorization, token, named = (
            doc["authorization_endpoint"],
            doc["token_endpoint"],
            doc.get("issuer"),
        )
    except (ValueError, KeyError, TypeError):
        raise LoginError(
            "discovery", f"{url} is not an OIDC discovery document (no authorization/token endpoint)"
        ) from None
    if named is not None and str(named).rstrip("/") != issuer:
        raise LoginError("discovery", f"{url} names another issuer ({_printable(str(named))})")
    return Endpoints(
        _checked_url("authorization_endpoint", str(authorization)), _checked_url("token_endpoint", str(token))
    )


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge)."""
    verifier = secrets.token_urlsafe(64)  # 86 characters of the unreserved set (43..128 allowed)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass
class _Callback:
    state: str
    done: threading.Event
    code: str | None = None
    error: LoginError | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class _CallbackHandler(LocalHandler):
    methods = frozenset({"GET"})
    server: LocalHttpServer[_Callback]

    def serve(self) -> None:
        with self.server.app.lock:  # the first answer on the callback decides; later ones are 404
            self._answer()

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        result = self.server.app
        if parts.path != CALLBACK_PATH or result.done.is_set():
            self.send(404, b"not found", [("Content-Type", "text/plain")])
            return
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        state = query.get("state")
        if state is not None and not secrets.compare_digest(state.encode(), result.state.encode()):
            result.error = LoginError(
                "login_state",
                "the sign-in answer carried the wrong state (not the request made here); refused",
            )
        elif "error" in query:
            detail = _printable(query.get("error_description") or "")
            result.error = LoginError(
                "login_refused",
                f"the issuer refused the sign-in: {_printable(query['error'])}"
                + (f" ({detail})" if detail else ""),
            )
        elif state is None:
            result.error = LoginError("login_state", "the sign-in answer carried no state; refused")
        elif not query.get("code"):
            result.error = LoginError("login_refused", "the sign-in answer carried no code")
        else:
            result.code = query["code"]
        title = "Signed in to Steward" if result.error is None else "Steward sign-in failed"
        text = (
            "You can close this tab and return to the terminal."
            if result.error is None
            else result.error.message
        )
        page = (
            f"<!doctype html><meta charset=utf-8><title>{title}</title>"
            f"<h1>{title}</h1><p>{html.escape(text)}</p>"
        ).encode()
        self.send(
            200 if result.error is None else 400,
            page,
            [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")],
            close=True,
        )
        result.done.set()


def _printable(text: str) -> str:
    """Issuer-supplied text fit for one terminal line: no control characters, bounded."""
    return _UNPRINTABLE.sub("?", text)[:300]


def login(
    settings: LoginSettings,
    *,
    open_browser: Callable[[str], object] | None = None,
    say: Callable[[str], None] = print,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    http: httpx.Client | None = None,
) -> dict[str, Any]:
    """Run the whole flow; store and return the credentials (the caller must not print them).

    `say` tells the person the authorization URL; `open_browser(url)` (the CLI passes
    `default_browser`, None with --no-browser; tests pass a fake browser) then opens it.
    """
    client = http or httpx.Client(timeout=30.0)
    try:
        endpoints = discover(settings.issuer, client)
        verifier, challenge = pkce_pair()
        callback = _Callback(state=secrets.token_urlsafe(32), done=threading.Event())
        try:
            server = LocalHttpServer(("127.0.0.1", settings.port), _CallbackHandler, callback, name="login")
        except OSError as exc:
            raise LoginError(
                "login_port",
                f"cannot listen on 127.0.0.1:{settings.port} ({exc.strerror or type(exc).__name__}); "
                "free it, or pass the --port registered as the app client's callback",
            ) from None
        redirect_uri = f"http://localhost:{server.server_address[1]}{CALLBACK_PATH}"
        query = {
            "response_type": "code",
            "client_id": settings.client_id,
            "redirect_uri": redirect_uri,
            "scope": settings.scopes,
            "state": callback.state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        url = f"{endpoints.authorization}{'&' if '?' in endpoints.authorization else '?'}{urlencode(query)}"
        server.start()
        try:
            say(f"Sign in with your browser at:\n  {url}\nwaiting for the answer on {redirect_uri} ...")
            if open_browser is not None:
                open_browser(url)
            if not callback.done.wait(timeout):
                raise LoginError("login_timeout", f"no sign-in answer within {timeout:.0f} s")
        finally:
            server.stop()
        if callback.error is not None:
            raise callback.error
        assert callback.code is not None
        answer = _token_request(
            client,
            endpoints.token,
            {
                "grant_type": "authorization_code",
                "code": callback.code,
                "redirect_uri": redirect_uri,
                "client_id": settings.client_id,
                "code_verifier": verifier,
            },
            "the token endpoint refused the code",
        )
        credentials = _credentials(settings, endpoints.token, answer, previous=None)
        _write_private(credentials_file(), credentials)
        settings.save()
        return credentials
    finally:
        if http is None:
            client.close()


def default_browser(url: str) -> object:
    """`webbrowser.open`, looked up when called (tests replace it)."""
    return webbrowser.open(url)


def _token_request(http: httpx.Client, url: str, form: dict[str, str], what: str) -> dict[str, Any]:
    try:
        response = http.post(url, data=form, headers={"Accept": "application/json"})
    except httpx.HTTPError as exc:
        raise LoginError(
            "token_endpoint", f"cannot reach the token endpoint {url} ({type(exc).__name__})"
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code != 200 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        detail = body.get("error_description") if isinstance(body, dict) else None
        reason = _printable(str(error)) if error else f"HTTP {response.status_code}"
        if detail:
            reason += f" ({_printable(str(detail))})"
        raise LoginError("token_refused", f"{what}: {reason}")
    return body


def _credentials(
    settings: LoginSettings, token_endpoint: str, answer: dict[str, Any], previous: dict[str, Any] | None
) -> dict[str, Any]:
    id_token = answer.get("id_token")
    access_token = answer.get("access_token")
    wanted = id_token if settings.bearer == "id" else access_token
    if not isinstance(wanted, str) or not wanted:
        raise LoginError(
            "token_refused",
            f"the token endpoint returned no {settings.bearer} token (is `openid` in --scopes?)",
        )
    refresh = answer.get("refresh_token") or (previous or {}).get("refresh_token")
    expires_at = _expiry(wanted)
    if expires_at is None:
        lifetime = answer.get("expires_in")
        expires_at = int(time.time()) + (int(lifetime) if isinstance(lifetime, int | float) else 3600)
    return {
        "version": 1,
        "api_url": settings.api_url,
        "issuer": settings.issuer,
        "client_id": settings.client_id,
        "token_endpoint": token_endpoint,
        "bearer": settings.bearer,
        "scopes": settings.scopes,
        "id_token": id_token,
        "access_token": access_token,
        "refresh_token": refresh,
        "expires_at": expires_at,
    }


def _expiry(token: str) -> int | None:
    """The token's `exp`, read without verifying it (the API verifies; this only times a refresh)."""
    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return None
    return int(exp) if isinstance(exp, int | float) else None


def claims(token: str) -> dict[str, Any]:
    """The unverified claims of a JWT (for display: who signed in), or {}."""
    try:
        return dict(jwt.decode(token, options={"verify_signature": False}))
    except jwt.PyJWTError:
        return {}


# -- using the stored login ------------------------------------------------------------------


def stored_token(http: httpx.Client | None = None, now: float | None = None) -> tuple[str, str] | None:
    """(api_url, bearer token) of the stored login, refreshed first when it expires within
    `REFRESH_MARGIN_SECONDS`; None without a stored login."""
    credentials = load_credentials()
    if credentials is None:
        return None
    kind = credentials.get("bearer", "id")
    current = credentials.get(f"{kind}_token")
    expires_at = credentials.get("expires_at")
    fresh = isinstance(expires_at, int | float) and expires_at - REFRESH_MARGIN_SECONDS > (now or time.time())
    if not (isinstance(current, str) and current and fresh):
        credentials = refresh(credentials, http)
        current = credentials[f"{kind}_token"]
    return str(credentials["api_url"]), str(current)


def refresh(credentials: dict[str, Any], http: httpx.Client | None = None) -> dict[str, Any]:
    """Renew the tokens with the refresh token and store them; `LoginError` says to log in again."""
    again = "run `steward login` again"
    token = credentials.get("refresh_token")
    endpoint = credentials.get("token_endpoint")
    if not token or not endpoint or not credentials.get("client_id"):
        raise LoginError("login_expired", f"the stored sign-in has expired and cannot be renewed; {again}")
    client = http or httpx.Client(timeout=30.0)
    try:
        answer = _token_request(
            client,
            str(endpoint),
            {
                "grant_type": "refresh_token",
                "refresh_token": str(token),
                "client_id": str(credentials["client_id"]),
            },
            "the stored sign-in has expired and its renewal was refused",
        )
    except LoginError as exc:
        raise LoginError("login_expired", f"{exc.message}; {again}") from None
    finally:
        if http is None:
            client.close()
    settings = LoginSettings(
        api_url=str(credentials["api_url"]),
        issuer=str(credentials.get("issuer", "")),
        client_id=str(credentials["client_id"]),
        scopes=str(credentials.get("scopes", DEFAULT_SCOPES)),
        bearer=str(credentials.get("bearer", "id")),
    )
    try:
        renewed = _credentials(settings, str(endpoint), answer, previous=credentials)
    except LoginError as exc:
        raise LoginError("login_expired", f"{exc.message}; {again}") from None
    _write_private(credentials_file(), renewed)
    return renewed
