"""HTTP client of every control-plane call the runtime makes (docs/concepts/relay.md, docs/concepts/runner.md): the
ticket exchange, scoped GitHub tokens, the claim, heartbeats, progress events, the finish,
artifact uploads, and model calls through the relay. The runtime holds no AWS credential:
these calls are how it writes anything, and an artifact goes to S3 by a presigned PUT the
control plane answers for exactly that task's object.

The capability and tokens travel only in request headers and bodies; no message raised
here holds one, nor a presigned URL (the API's own error text is bounded, and the relay
never echoes a token). Calls that are safe to repeat (token, claim, heartbeat, finish,
upload, model calls) retry a transport failure or a 5xx (other than a provider error) a few
times and wait out a 429 for what `Retry-After` says, within a bounded total; the exchange
(single use) and progress events (a repeat would record twice; one lost event is not worth
a delay) are sent once. A 402 from the relay is the end of the task's budget. A model call
given a `timeout` (the run's remaining time) spends no more than that on its attempts and
waits together, and raises `ModelTimeout` (a `TimeoutError`) once it is spent.
"""

from __future__ import annotations

import json as jsonlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

from steward.adapters.github import InstallationToken
from steward.domain.models import Task, TaskStatus
from steward.domain.routes import (
    ARTIFACTS_PATH,
    CLAIM_PATH,
    CONVERSE_PATH,
    EVENTS_PATH,
    EXCHANGE_PATH,
    FINISH_PATH,
    GITHUB_TOKEN_PATH,
    HEARTBEAT_PATH,
)

_MESSAGE_LIMIT = 300
UPLOAD_TIMEOUT = 120.0


# The runner waits for a model call a little longer than the relay's route may take (its
# integration timeout, 300 s), so the relay's own answer, an error included, reaches it.
MODEL_TIMEOUT_SECONDS = 330.0


@dataclass(frozen=True)
class Claimed:
    task: Task
    # The plan's items its item waits for and that wait for it, with their pull requests
    # (`steward.domain.order.related`): what the pull request's body links.
    related: list[dict[str, Any]]


class RuntimeApiError(Exception):
    """A control-plane call failed. `retryable`: an infrastructure fault (transport, 5xx,
    throttling that outlasted the wait), as opposed to a refusal. `detail`: the server's own
    message (bounded), when it answered one."""

    def __init__(
        self, message: str, *, status: int | None, code: str = "", retryable: bool = False, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retryable = retryable
        self.detail = detail


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


@dataclass(frozen=True)
class Beat:
    """A heartbeat's answer: `running` false once the task is no longer this runtime's
    running task (the runtime stops); the task's status and spend as the control plane
    holds them."""

    running: bool
    status: TaskStatus
    cost_usd: Decimal


class RuntimeApi:
    def __init__(
        self,
        api_url: str,
        relay_url: str,
        *,
        timeout: float = 30.0,
        model_timeout: float = MODEL_TIMEOUT_SECONDS,
        max_wait_seconds: float = 120.0,
        attempts: int = 4,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.relay_url = relay_url.rstrip("/")
        self.model_timeout = model_timeout
        self.max_wait_seconds = max_wait_seconds
        self.attempts = attempts
        self._sleep = sleep
        self._http = httpx.Client(timeout=timeout, transport=transport)

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

    def claim(self, capability: str, runtime_id: str) -> Claimed:
        """The capability's task, claimed for `runtime_id` (queued -> running), and the plan's
        pull requests around its item. A 409 means another runtime holds it, or it is no
        longer startable: nothing to do."""
        body = self._call(
            "claim the task",
            "POST",
            self.api_url + CLAIM_PATH,
            headers=_bearer(capability),
            json={"runtime_id": runtime_id},
            retries=True,
        )
        related = body.get("related")
        return Claimed(Task.model_validate(body["task"]), related if isinstance(related, list) else [])

    def heartbeat(self, capability: str, runtime_id: str) -> Beat:
        body = self._call(
            "send a heartbeat",
            "POST",
            self.api_url + HEARTBEAT_PATH,
            headers=_bearer(capability),
            json={"runtime_id": runtime_id},
            retries=True,
        )
        return Beat(bool(body["running"]), TaskStatus(str(body["status"])), Decimal(str(body["cost_usd"])))

    def event(self, capability: str, runtime_id: str, kind: str, data: Mapping[str, Any]) -> int:
        """Append one progress event (sent once); its sequence number."""
        body = self._call(
            f"record a {kind[:32]} event",
            "POST",
            self.api_url + EVENTS_PATH,
            headers=_bearer(capability),
            json={"runtime_id": runtime_id, "type": kind, "data": dict(data)},
        )
        return int(body["seq"])

    def finish(self, capability: str, runtime_id: str, ending: Mapping[str, Any]) -> str:
        """Record how the run ended (`steward.services.runtime:Ending`); the task's status
        as the control plane left it (unchanged when the task was no longer this runtime's)."""
        body = self._call(
            "finish the task",
            "POST",
            self.api_url + FINISH_PATH,
            headers=_bearer(capability),
            json={"runtime_id": runtime_id, **ending},
            retries=True,
        )
        return str(body["status"])

    def upload(self, capability: str, runtime_id: str, name: str, content: bytes) -> None:
        """Store artifact `name` of the capability's task: a presigned PUT URL from the
        control plane, then the bytes straight to S3 with no credential of the runtime's."""
        grant = self._call(
            f"get an upload URL for {name[:64]}",
            "POST",
            f"{self.api_url}{ARTIFACTS_PATH}/{name}",
            headers=_bearer(capability),
            json={"runtime_id": runtime_id, "size": len(content)},
            retries=True,
        )
        headers = {
            k: str(v) for k, v in dict(grant.get("headers") or {}).items() if k.lower() != "content-length"
        }
        for attempt in range(1, self.attempts + 1):
            try:
                response = self._http.request(
                    str(grant.get("method", "PUT")),
                    str(grant["url"]),
                    content=content,
                    headers=headers,
                    timeout=UPLOAD_TIMEOUT,
                )
            except httpx.TransportError as exc:
                problem, status, transient = f"no answer ({type(exc).__name__})", None, True
            else:
                if response.status_code < 300:
                    return
                problem, status = f"HTTP {response.status_code}", response.status_code
                transient = status == 429 or status >= 500
            if not transient or attempt >= self.attempts:
                # Never the URL: it is a credential for that object while it lasts.
                raise RuntimeApiError(
                    f"could not upload {name[:64]}: {problem}", status=status, retryable=transient
                )
            self._sleep(min(2.0**attempt, 10.0))

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
                response = self._http.request(
                    method,
                    url,
                    headers={**(headers or {}), "Content-Type": "application/json"}
                    if json is not None
                    else headers,
                    content=None if json is None else jsonlib.dumps(json, default=str).encode(),
                    timeout=limit,
                )
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
                raise BudgetExhausted(text, status=status, code=code, detail=message)
            transient = status == 429 or status >= 500
            if status == 429:
                wait, again = _retry_after(response), True
            else:
                wait, again = min(2.0**attempt, 10.0), attempt < self.attempts
            if retries and transient and again and waited + wait <= self.max_wait_seconds:
                waited += wait
                self._pause(wait, deadline, what)
                continue
            raise RuntimeApiError(text, status=status, code=code, retryable=transient, detail=message)

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


class RuntimeArtifacts:
    """The artifact sink of a runtime (`steward.services.publication:ArtifactSink`): uploads
    through the runtime routes, for the capability's task only."""

    def __init__(self, api: RuntimeApi, capability: str, runtime_id: str, task_id: str) -> None:
        self._api = api
        self._capability = capability
        self._runtime_id = runtime_id
        self._task_id = task_id

    def __repr__(self) -> str:
        return f"RuntimeArtifacts(task_id={self._task_id!r})"

    def put(self, task_id: str, name: str, body: bytes, content_type: str) -> None:
        """`content_type` is decided by the control plane from the name (it signs it)."""
        if task_id != self._task_id:
            raise ValueError("a runtime uploads only its own task's artifacts")
        self._api.upload(self._capability, self._runtime_id, name, body)
