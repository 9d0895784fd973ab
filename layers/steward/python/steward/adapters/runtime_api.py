"""HTTP client of the runtime's three control-plane calls (DESIGN sections 5, 6): the ticket
exchange, scoped GitHub tokens and model calls through the relay.

The capability and tokens travel only in request headers and bodies; no message raised
here holds one (the API's own error text is bounded, and the relay never echoes a token).
Model calls wait out a 429 for what `Retry-After` says, within a bounded total, and retry
a transport failure or a 5xx other than a provider error a few times; a 402 is the end of
the task's budget. A model call given a `timeout` (the run's remaining time) spends no more
than that on its attempts and waits together, and raises `ModelTimeout` (a `TimeoutError`)
once it is spent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from steward.adapters.github import InstallationToken

EXCHANGE_PATH = "/v1/runtime/exchange"
GITHUB_TOKEN_PATH = "/v1/runtime/github-token"  # noqa: S105 - a route, not a secret
CONVERSE_PATH = "/v1/relay/converse"
_MESSAGE_LIMIT = 300


class RuntimeApiError(Exception):
    """A control-plane call failed. `retryable`: an infrastructure fault (transport, 5xx,
    throttling that outlasted the wait), as opposed to a refusal."""

    def __init__(self, message: str, *, status: int | None, code: str = "", retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retryable = retryable


class BudgetExhausted(RuntimeApiError):
    """The relay answered 402: the task's budget cannot pay for another call."""


class ModelTimeout(RuntimeApiError, TimeoutError):
    """A model call's `timeout` ran out (the run's time, not an infrastructure fault)."""


@dataclass(frozen=True)
class Exchanged:
    task_id: str
    capability: str = field(repr=False)
    expires_at: str


@dataclass(frozen=True)
class IssuedToken:
    token: InstallationToken = field(repr=False)
    installation_id: int
    api_url: str | None
    clone_url: str


class RuntimeApi:
    def __init__(
        self,
        api_url: str,
        relay_url: str,
        *,
        timeout: float = 30.0,
        model_timeout: float = 300.0,
        max_wait_seconds: float = 120.0,
        attempts: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.relay_url = relay_url.rstrip("/")
        self.model_timeout = model_timeout
        self.max_wait_seconds = max_wait_seconds
        self.attempts = attempts
        self._sleep = sleep
        self._http = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def exchange(self, ticket: str) -> Exchanged:
        """The capability for a one-time ticket (no retry: a used ticket cannot be reused)."""
        body = self._call(
            "exchange the ticket", "POST", self.api_url + EXCHANGE_PATH, json={"ticket": ticket}
        )
        return Exchanged(str(body["task_id"]), str(body["capability"]), str(body["expires_at"]))

    def github_token(self, capability: str) -> IssuedToken:
        body = self._call(
            "get a GitHub token",
            "POST",
            self.api_url + GITHUB_TOKEN_PATH,
            headers=_bearer(capability),
            retries=True,
        )
        expires = datetime.fromisoformat(str(body["expires_at"]).replace("Z", "+00:00"))
        return IssuedToken(
            InstallationToken(str(body["token"]), expires, str(body["repository"])),
            int(body["installation_id"]),
            body.get("api_url") or None,
            str(body["clone_url"]),
        )

    def converse(
        self, capability: str, request: dict[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """One model call through the relay: the Converse response plus the relay's
        `steward` block (cost_usd, remaining_usd, max_tokens). With `timeout`, every attempt
        and wait fits in that many seconds from now, else `ModelTimeout`."""
        return self._call(
            "call the model",
            "POST",
            self.relay_url + CONVERSE_PATH,
            headers=_bearer(capability),
            json=request,
            retries=True,
            timeout=self.model_timeout,
            deadline=None if timeout is None else time.monotonic() + timeout,
        )

    def _call(
        self,
        what: str,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        json: Any = None,
        retries: bool = False,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        waited = 0.0
        attempt = 0
        while True:
            attempt += 1
            limit: Any = timeout or httpx.USE_CLIENT_DEFAULT
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ModelTimeout(
                        f"could not {what}: the run's time ran out", status=None, code="timeout"
                    )
                limit = min(timeout, left) if timeout else left
            try:
                response = self._http.request(method, url, headers=headers, json=json, timeout=limit)
            except httpx.TransportError as exc:
                if (
                    isinstance(exc, httpx.TimeoutException)
                    and deadline is not None
                    and time.monotonic() >= deadline
                ):
                    raise ModelTimeout(
                        f"could not {what}: the run's time ran out", status=None, code="timeout"
                    ) from None
                problem = f"could not {what}: no answer ({type(exc).__name__})"
                if not retries or attempt >= self.attempts:
                    raise RuntimeApiError(problem, status=None, retryable=True) from None
                self._pause(min(2.0**attempt, 10.0), deadline, what)
                continue
            if response.status_code < 400:
                payload = response.json()
                if not isinstance(payload, dict):
                    raise RuntimeApiError(f"could not {what}: unreadable answer", status=response.status_code)
                return payload
            code, message = _error(response)
            status = response.status_code
            text = f"could not {what}: HTTP {status} {code}: {message}"
            if status == 402:
                raise BudgetExhausted(text, status=status, code=code)
            transient = status == 429 or status >= 500
            if status == 429:
                wait, again = _retry_after(response), True
            else:
                wait, again = min(2.0**attempt, 10.0), attempt < self.attempts
            if retries and transient and again and waited + wait <= self.max_wait_seconds:
                waited += wait
                self._pause(wait, deadline, what)
                continue
            raise RuntimeApiError(text, status=status, code=code, retryable=transient)

    def _pause(self, seconds: float, deadline: float | None, what: str) -> None:
        """Sleep before another attempt, unless that would outlast `deadline`."""
        if deadline is not None and time.monotonic() + seconds >= deadline:
            raise ModelTimeout(f"could not {what}: the run's time ran out", status=None, code="timeout")
        self._sleep(seconds)


def _bearer(capability: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {capability}"}


def _error(response: httpx.Response) -> tuple[str, str]:
    try:
        error = response.json().get("error", {})
        return str(error.get("code", ""))[:64], str(error.get("message", ""))[:_MESSAGE_LIMIT]
    except (ValueError, AttributeError):
        return "", ""


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.1), 30.0)
    except ValueError:
        return 1.0
