"""Seeded faults and interleavings at the DynamoDB boundary, from botocore's own event hooks.

A schedule arms a fault with a countdown: the fault fires on the countdown-th matching
request from then on, whichever rule makes it. Kinds:

* `throttle_before_write`: a write is refused with ProvisionedThroughputExceededException
  before it reaches the table (botocore's retries ran out).
* `response_lost_after_write`: a write is applied, then its caller sees a read timeout.
* `write_replayed_after_lost_response`: a write is applied, its response is lost, and
  botocore's retry sends the identical request again: the caller sees the retry's answer
  (a conditional write then fails its own condition).
* `interleave`: before a request (any operation), another rule runs to completion: a
  second heartbeat, a webhook, a cancel... between two requests of the first.

Everything runs on the schedule's one thread, so a seed replays the same schedule exactly.
Interleaved rules do not interleave again (depth 1), and faults fire at any depth.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ReadTimeoutError

WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
DYNAMO_FAULTS = ("throttle_before_write", "response_lost_after_write", "write_replayed_after_lost_response")


class _Status:
    """The part of botocore's AWSResponse that `BaseClient._make_api_call` reads."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.headers: dict[str, str] = {}


@dataclass
class Armed:
    kind: str
    countdown: int
    action: Callable[[], None] | None = None  # for interleave
    label: str = ""


@dataclass
class FaultBoard:
    """The armed faults of the running schedule and how often each kind fired (over the run)."""

    fired: Counter[str] = field(default_factory=Counter)
    requests: int = 0  # every DynamoDB request of the run
    armed: list[Armed] = field(default_factory=list)
    depth: int = 0
    _params: dict[str, Any] = field(default_factory=dict)
    _client: Any = None

    def install(self, client: Any) -> None:
        self._client = client
        events = client.meta.events
        events.register("before-call.dynamodb", self._before)
        # First, before boto3's resource layer turns the answer into Python values, so that a
        # replayed answer is turned as the original would have been.
        events.register_first("after-call.dynamodb", self._after)

    def reset(self) -> None:
        self.armed.clear()
        self.depth = 0

    def arm(
        self, kind: str, countdown: int, action: Callable[[], None] | None = None, label: str = ""
    ) -> None:
        self.armed.append(Armed(kind, countdown, action, label))

    def note(self, kind: str) -> None:
        """Count a fault fired outside DynamoDB (the twin, ECS, the runtime, the provider)."""
        self.fired[kind] += 1

    # ---- hooks
    def _take(self, operation: str, kinds: tuple[str, ...]) -> Armed | None:
        for armed in self.armed:
            if armed.kind not in kinds:
                continue
            if armed.kind != "interleave" and operation not in WRITES:
                continue
            if armed.kind == "interleave" and self.depth > 0:
                continue
            if armed.countdown > 0:
                armed.countdown -= 1
                continue
            self.armed.remove(armed)
            self.fired[armed.kind if not armed.label else f"{armed.kind}:{armed.label}"] += 1
            return armed
        return None

    def _before(self, model: Any, params: dict[str, Any], **_: Any) -> Any:
        operation = model.name
        self.requests += 1
        armed = self._take(operation, ("interleave",))
        if armed is not None and armed.action is not None:
            self.depth += 1
            try:
                armed.action()
            finally:
                self.depth -= 1
        self._params[operation] = params  # the serialized request (after any nested one), for a replay
        armed = self._take(operation, ("throttle_before_write",))
        if armed is not None:
            error = {
                "Code": "ProvisionedThroughputExceededException",
                "Message": "Rate of requests exceeds the allowed throughput.",
            }
            return _Status(400), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}
        return None

    def _after(self, http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        operation = model.name
        if http_response.status_code >= 300:
            return
        armed = self._take(operation, ("response_lost_after_write", "write_replayed_after_lost_response"))
        if armed is None:
            return
        if armed.kind == "response_lost_after_write":
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com/")
        # botocore's retry of a request whose response was lost: the same serialized request
        # sent again below the client (no second before/after-call), its answer the caller's.
        again, replayed = self._client._endpoint.make_request(model, self._params[operation])
        http_response.status_code = again.status_code
        parsed.clear()
        parsed.update(replayed)
