"""HTTP client of the Steward API, used by the CLI and the demo."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from steward.adapters import login

DEFAULT_STATE_FILE = Path(".steward/local.json")


class ApiError(Exception):
    """An answer other than 2xx/3xx, carrying the API's JSON error."""

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.line = line  # the document line an invalid document goes wrong at


@dataclass(frozen=True)
class Endpoint:
    api_url: str
    token: str
    stream_url: str | None = None  # the local stack's live output; AWS has none


def resolve_endpoint(user: str | None, state_file: Path | None = None) -> Endpoint:
    """Where the CLI sends requests, and as whom; the first that applies wins:

    1. STEWARD_API_URL and STEWARD_TOKEN (unless `--user` names a local dev identity);
    2. the local stack's state file with the token of `user` (default alice): the one given
       (`--state-file`, STEWARD_STATE_FILE), or `.steward/local.json` when it exists;
    3. the stored `steward login` (`steward.adapters.login`), its token renewed when expired.

    STEWARD_API_URL alone, or STEWARD_TOKEN alone, overrides that part of 2 or 3.
    """
    url = os.environ.get("STEWARD_API_URL")
    token = os.environ.get("STEWARD_TOKEN")
    if url and token and user is None:
        return Endpoint(url.rstrip("/"), token)
    explicit = state_file or os.environ.get("STEWARD_STATE_FILE")
    path = Path(explicit or DEFAULT_STATE_FILE)
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        if not explicit and user is None:
            stored = _stored_login()
            if stored is not None:
                return Endpoint((url or stored[0]).rstrip("/"), token or stored[1])
        raise ApiError(
            0,
            "no_endpoint",
            f"no API configured: sign in to a deployment (`steward login`), set STEWARD_API_URL and "
            f"STEWARD_TOKEN, or start the local stack (`steward local up`, which writes {path})",
        ) from None
    name = user or os.environ.get("STEWARD_USER", "alice")
    users = state.get("users", {})
    if name not in users:
        raise ApiError(0, "no_user", f"{path} has no token for user {name!r} (known: {', '.join(users)})")
    return Endpoint(
        (url or state["api_url"]).rstrip("/"),
        token if user is None and token else users[name],
        stream_url=None if url else state.get("stream_url"),
    )


def _stored_login() -> tuple[str, str] | None:
    try:
        return login.stored_token()
    except login.LoginError as exc:
        raise ApiError(0, exc.code, exc.message) from None


class ApiClient:
    def __init__(self, endpoint: Endpoint, timeout: float = 30.0) -> None:
        self._http = httpx.Client(
            base_url=endpoint.api_url,
            headers={"Authorization": f"Bearer {endpoint.token}"},
            timeout=timeout,
            follow_redirects=False,
        )
        self.api_url = endpoint.api_url
        self.stream_url = endpoint.stream_url
        self._token = endpoint.token

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            response = self._http.request(
                method,
                path,
                json=body,
                params={k: v for k, v in (params or {}).items() if v is not None},
            )
        except httpx.TransportError as exc:
            raise ApiError(
                0, "unreachable", f"cannot reach the API at {self.api_url} ({type(exc).__name__})"
            ) from None
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "http_error", "message": response.text[:500] or response.reason_phrase}
            line = error.get("line")
            raise ApiError(
                response.status_code,
                error.get("code", ""),
                error.get("message", ""),
                error.get("field"),
                line if isinstance(line, int) and not isinstance(line, bool) else None,
            )
        return response.json() if response.content else None

    def artifact(self, task_id: str, name: str) -> bytes:
        """One artifact's bytes: the API answers a redirect to a presigned URL, which is
        fetched without the bearer token (it is S3's, and carries its own signature)."""
        located = self.request("GET", f"/v1/tasks/{task_id}/artifacts/{name}")
        url = str((located or {}).get("url", ""))
        try:
            response = httpx.get(url, timeout=self._http.timeout, follow_redirects=False)
        except (httpx.TransportError, httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise ApiError(0, "unreachable", f"cannot fetch {name} ({type(exc).__name__})") from None
        if response.status_code != 200:
            raise ApiError(
                response.status_code, "artifact_unreadable", f"{name}: HTTP {response.status_code}"
            )
        return response.content

    def output(self, task_id: str, *, follow: bool) -> Iterator[str]:
        """A running task's live output from the local stack's stream (Server-Sent Events):
        what it printed so far, then, with `follow`, what follows until the run ends."""
        if self.stream_url is None:
            raise ApiError(
                0, "no_stream", "this deployment keeps no live output (only the final screen tail)"
            )
        url = f"{self.stream_url}/v1/tasks/{task_id}/stream"
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            with httpx.stream(
                "GET",
                url,
                headers=headers,
                params=None if follow else {"follow": "0"},
                timeout=httpx.Timeout(30.0, read=None),
            ) as response:
                if response.status_code != 200:
                    raise ApiError(
                        response.status_code, "no_stream", f"live output: HTTP {response.status_code}"
                    )
                event, data = "", []
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                    elif not line:
                        if event == "output":
                            yield "\n".join(data)
                        elif event == "end":
                            return
                        event, data = "", []
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"cannot reach the live output ({type(exc).__name__})") from None

    def paged(self, path: str, key: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Every page of a list route, following `next`."""
        out: list[Any] = []
        cursor = None
        while True:
            page = self.request("GET", path, params={**(params or {}), "cursor": cursor, "limit": 100})
            out.extend(page[key])
            cursor = page.get("next")
            if not cursor:
                return out


def local_login_code(api_url: str, token: str) -> dict[str, Any]:
    """A one-time console login code from the local stack (`steward.local.console_login`)."""
    try:
        answer = httpx.post(
            f"{api_url}/local/login-codes", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
    except httpx.TransportError as exc:
        raise ApiError(0, "unreachable", f"the local stack does not answer ({type(exc).__name__})") from None
    if answer.status_code != 200:
        raise ApiError(
            answer.status_code,
            "login_refused",
            f"the local stack refused a login code (HTTP {answer.status_code})",
        )
    return dict(answer.json())
