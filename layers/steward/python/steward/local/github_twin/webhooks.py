"""Webhook delivery as GitHub's hookshot does it: signed POSTs, one queue, no retries.

Each event is serialized once, compactly as GitHub does, and those exact bytes are signed
and sent (a redelivery re-sends the same bytes and the same delivery id). Deliveries leave
from one background thread in the order the events happened, unless a fault switch says
otherwise; a failed delivery is recorded and not retried, because GitHub does not retry
either. Bodies are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from steward.local.github_twin.faults import Faults

_LOG = logging.getLogger(__name__)

USER_AGENT = "GitHub-Hookshot/twin"
HOOK_ID = 1  # the App's one webhook
TIMEOUT_SECONDS = 10.0  # GitHub gives a receiver 10 s to answer


@dataclass(frozen=True)
class Delivery:
    """One POST the twin made (or tried): what it sent and what the receiver answered."""

    event: str
    action: str | None
    delivery_id: str
    body: bytes
    status: int | None  # None: no answer (refused, reset, timed out)
    error: str | None = None  # the failure's exception type when there was no answer
    redelivery: bool = False
    delivered_at: float = 0.0
    duration: float = 0.0  # seconds the receiver took (GitHub shows it per delivery)

    def summary(self) -> dict[str, Any]:
        """JSON for the admin API (the body as text: it is JSON the twin made)."""
        return {
            "event": self.event,
            "action": self.action,
            "delivery_id": self.delivery_id,
            "status": self.status,
            "error": self.error,
            "redelivery": self.redelivery,
            "delivered_at": self.delivered_at,
            "body": self.body.decode(),
        }


@dataclass(frozen=True)
class _Outgoing:
    event: str
    action: str | None
    delivery_id: str
    body: bytes
    redelivery: bool = False


def _withheld(item: _Outgoing) -> Delivery:
    return Delivery(
        event=item.event,
        action=item.action,
        delivery_id=item.delivery_id,
        body=item.body,
        status=None,
        error="withheld",
        delivered_at=time.time(),
    )


def signature_256(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def encode(payload: dict[str, Any]) -> bytes:
    """GitHub's webhook body: compact JSON, UTF-8, no trailing newline."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class Deliverer:
    """The delivery queue and its one worker thread."""

    def __init__(
        self,
        faults: Faults,
        *,
        app_id: int,
        url: Callable[[], str | None],
        secret: Callable[[], str],
    ) -> None:
        self._faults = faults
        self._app_id = app_id
        self._url = url
        self._secret = secret
        self._queue: queue.Queue[_Outgoing | None] = queue.Queue()
        self._held: list[_Outgoing] = []
        self._withholding = False
        self._records: list[Delivery] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._thread: threading.Thread | None = None
        self._client: httpx.Client | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._client = httpx.Client(timeout=TIMEOUT_SECONDS, trust_env=False, follow_redirects=False)
        self._thread = threading.Thread(target=self._run, name="github-twin-hookshot", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, client = self._thread, self._client
        self._thread = self._client = None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout=TIMEOUT_SECONDS + 5)
        if client is not None:
            client.close()

    # -- producing -------------------------------------------------------------------------

    def emit(self, event: str, payload: dict[str, Any]) -> str | None:
        """Queue one event; its delivery id, or None when no webhook URL is configured."""
        if self._url() is None:
            return None
        action = payload.get("action")
        outgoing = _Outgoing(
            event, action if isinstance(action, str) else None, str(uuid.uuid4()), encode(payload)
        )
        with self._lock:
            if self._withholding:
                # GitHub failed to deliver it: recorded (and redeliverable), never sent.
                self._records.append(_withheld(outgoing))
                return outgoing.delivery_id
        if self._faults.take("reorder_deliveries"):
            with self._lock:
                self._held.append(outgoing)
        else:
            self._enqueue([outgoing])
        return outgoing.delivery_id

    def withhold(self, on: bool) -> None:
        """While on, every new event is recorded as a failed delivery and never sent (a lost
        webhook, for resync tests); turning it off sends only later events."""
        with self._lock:
            self._withholding = on

    @property
    def withholding(self) -> bool:
        with self._lock:
            return self._withholding

    def flush(self) -> int:
        """Send the held deliveries, newest first; how many there were."""
        with self._lock:
            held, self._held = self._held, []
        self._enqueue(list(reversed(held)))
        return len(held)

    def redeliver(self, delivery_id: str) -> None:
        """Send a delivery again: the same body and id, as GitHub's "Redeliver" does."""
        with self._lock:
            original = next((r for r in self._records if r.delivery_id == delivery_id), None)
        if original is None:
            raise KeyError(delivery_id)
        self._enqueue(
            [_Outgoing(original.event, original.action, delivery_id, original.body, redelivery=True)]
        )

    def _enqueue(self, items: list[_Outgoing]) -> None:
        with self._lock:
            self._pending += len(items)
        for item in items:
            self._queue.put(item)

    # -- observing -------------------------------------------------------------------------

    @property
    def records(self) -> list[Delivery]:
        with self._lock:
            return list(self._records)

    @property
    def held(self) -> int:
        with self._lock:
            return len(self._held)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until every queued delivery was attempted (held ones excepted)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # -- the worker ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                copies = 2 if self._faults.take("duplicate_deliveries") else 1
                for _ in range(copies):
                    record = self._send(item)
                    with self._lock:
                        self._records.append(record)
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _send(self, item: _Outgoing) -> Delivery:
        url, secret, client = self._url(), self._secret(), self._client
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        if url is None or client is None:
            error = "no webhook URL"
        else:
            headers = {
                "User-Agent": USER_AGENT,
                "Content-Type": "application/json",
                "X-GitHub-Event": item.event,
                "X-GitHub-Delivery": item.delivery_id,
                "X-GitHub-Hook-ID": str(HOOK_ID),
                "X-GitHub-Hook-Installation-Target-ID": str(self._app_id),
                "X-GitHub-Hook-Installation-Target-Type": "integration",
            }
            if secret:  # GitHub signs only when the hook has a secret
                headers["X-Hub-Signature"] = (
                    "sha1=" + hmac.new(secret.encode(), item.body, hashlib.sha1).hexdigest()
                )
                headers["X-Hub-Signature-256"] = signature_256(secret, item.body)
            try:
                response = client.post(url, content=item.body, headers=headers)
                status = response.status_code
            except httpx.HTTPError as exc:
                error = type(exc).__name__
                _LOG.info("webhook delivery %s (%s) got no answer: %s", item.delivery_id, item.event, error)
        return Delivery(
            event=item.event,
            action=item.action,
            delivery_id=item.delivery_id,
            body=item.body,
            status=status,
            error=error,
            redelivery=item.redelivery,
            delivered_at=time.time(),
            duration=time.monotonic() - started,
        )
