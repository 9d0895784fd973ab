"""The relay: every model call admitted against the task's budget (docs/concepts/relay.md).

Per call: size bound (413) before anything touches storage; capability verified (401); the
operators' global brake (503, read through a cache at most 5 s stale); body screened,
translated from the client's wire format by its `Surface` (Steward's own and Bedrock's are
Converse already; OpenAI's is translated by `steward.domain.openai_chat`) and validated (400
naming the field) and its model checked against the pinned one (403); the price entry (403 when unknown); one conditional UpdateItem reserves the call's
maximum cost (input bounded by its UTF-8 byte count, plus `maxTokens` at the output price);
the provider is called with exactly the admitted `maxTokens`; one conditional UpdateItem
settles, never for more than the reservation.

The screen refuses, before anything is charged, text that is not valid Unicode (a lone
surrogate, which no provider takes) and every credential the relay must never hand to a
provider: the bearer this call presents, any other Steward capability or ticket, and GitHub
tokens (`steward.domain.redaction.issued_credential`), also when disguised (normalized,
another case, base64) or split across text blocks (`steward.domain.converse.joined_texts`).
Generic shapes (any JWT, AWS keys, URL userinfo) pass: repositories hold them in fixtures.

A provider that reports more usage than the reservation could pay for is charged the
reservation (the most the relay authorized for the call); the excess goes to the task's
`over_reported_usd` in the same settlement write, an `over_report` event is recorded (the
only extra requests, and only then), and the handler emits the `ProviderOverReport` metric.

When the full `maxTokens` does not fit, it is lowered to what the room pays for (one more
UpdateItem), and the call is refused only below a floor: 402 when settled spend leaves no
room for it (`budget_exhausted` when what is left cannot pay even the smallest call,
`call_exceeds_budget`, with the figures and what would fit, when it pays for smaller calls
than this one), 429 with Retry-After when the room is only held by calls in flight.
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from steward.adapters.budget_store import BudgetStore
from steward.domain.budget import (
    MIN_OUTPUT_TOKENS,
    Charge,
    Refusal,
    Usage,
    affordable_max_tokens,
    charge_for,
    cost_of,
    input_bound_tokens,
    judge_refusal,
    max_cost,
    unaffordable,
)
from steward.domain.capability import Capability, Verify, bearer_token
from steward.domain.converse import (
    MAX_DEPTH,
    ConverseRequest,
    is_valid_text,
    joined_texts,
    payload_bytes,
    text_fields,
    too_deep,
)
from steward.domain.errors import (
    BadRequest,
    BrakeEngaged,
    Forbidden,
    ProviderError,
    ProviderOutcomeUnknown,
    RetryLater,
    TooLarge,
)
from steward.domain.models import TaskStatus, utcnow
from steward.domain.prices import PriceEntry, PriceTable
from steward.domain.redaction import issued_credential

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
RESERVATION_TTL = timedelta(minutes=15)


@dataclass
class RelayOutcome:
    response: dict[str, Any]
    cost_usd: Decimal  # what the call was charged: never more than its reservation
    remaining_usd: Decimal
    max_tokens: int
    over_reported_usd: Decimal = Decimal(0)  # what the provider reported beyond the reservation

    @property
    def over_reported(self) -> bool:
        return self.over_reported_usd > 0


RecordOverReport = Callable[[str, Mapping[str, Any], datetime], None]


@dataclass(frozen=True)
class Surface:
    """How one wire format enters the one Converse path: `translate` turns the client's body
    (already screened) into (the model it names or None, a Converse body); the field names
    are the client's own, for refusals."""

    translate: Callable[[dict[str, Any]], tuple[str | None, dict[str, Any]]]
    model_field: str = "modelId"
    max_tokens_field: str = "inferenceConfig.maxTokens"
    # Stock OpenAI clients send generous limits: lower them to what the model and the budget
    # take instead of refusing (Bedrock Converse callers are told, as Bedrock would tell them).
    clamp_max_tokens: bool = False


CONVERSE = Surface(translate=lambda data: (None, data))
# Steward's own runner cannot know each model's output limit (a price table of one's own may
# set it below the runner's default): its surface lowers `maxTokens` and answers what it
# admitted, so a limit the relay knows is never a refused call of Steward's own.
RUNNER = Surface(translate=lambda data: (None, data), clamp_max_tokens=True)


@dataclass
class Relay:
    verify: Verify
    budget: BudgetStore
    prices: PriceTable
    provider_for: Callable[[str, PriceEntry], Any]
    # (task id, event data, now): the durable `over_report` event (TaskStore.record_over_report)
    record_over_report: RecordOverReport
    # The deployment's capability key ids: a JWT in a body whose header names one is refused
    # as a capability even if its claims do not say so.
    capability_key_ids: frozenset[str] = field(default_factory=frozenset)
    clock: Callable[[], datetime] = utcnow
    # The operators' global brake (`steward.services.brake.CachedBrake.engaged`): True refuses
    # every new reservation with 503.
    brake: Callable[[], bool] = field(default=lambda: False)
    max_body_bytes: int = MAX_BODY_BYTES
    # maxTokens is also bounded so that a call fits the API's integration timeout.
    max_tokens_ceiling: int = 8192

    def capability(self, authorization: str | None) -> Capability:
        """The verified capability of a call (401 otherwise), for routes that only read it."""
        return self.verify(bearer_token(authorization), now=self.clock())

    def converse(
        self,
        authorization: str | None,
        body: str | bytes | None,
        *,
        surface: Surface | None = None,
        model_id: str | None = None,
    ) -> RelayOutcome:
        """Admit, call and settle one model call. `surface` translates a stock client's body
        to Converse (default: the body is Converse); `model_id` is the model the client named
        outside the body (Bedrock's path), refused unless it is the pinned one."""
        surface = surface or CONVERSE
        raw = body.encode() if isinstance(body, str) else (body or b"")
        if len(raw) > self.max_body_bytes:
            raise TooLarge(f"request body is over {self.max_body_bytes} bytes", field="body")
        bearer = bearer_token(authorization)
        capability = self.verify(bearer, now=self.clock())
        if self.brake():
            raise BrakeEngaged(
                "the operators' brake is engaged: no new model call is admitted", field="brake"
            )
        data = _load(raw)
        self._screen(data, bearer)
        named, converse_body = surface.translate(data)
        if converse_body is not data:  # what a translation decoded (tool arguments) is screened too
            _check_depth(converse_body)
            self._screen(converse_body, bearer)
        request = _validate(converse_body)
        for where, value in ((surface.model_field, model_id or named), ("modelId", request.modelId)):
            if value is not None and value != capability.model_id:
                raise Forbidden("the capability is pinned to another model", field=where)
        entry = self.prices.entry(capability.model_id)
        ceiling = min(entry.max_output_tokens, self.max_tokens_ceiling)
        wanted = (
            request.inferenceConfig.maxTokens
            if request.inferenceConfig and request.inferenceConfig.maxTokens
            else ceiling
        )
        if wanted > ceiling:
            if not surface.clamp_max_tokens:
                raise BadRequest(
                    f"maxTokens must be at most {ceiling} for this model", field=surface.max_tokens_field
                )
            wanted = ceiling
        bound = input_bound_tokens(payload_bytes(request))
        admitted, reserved, rid = self._reserve(capability, entry, bound, wanted, surface.max_tokens_field)
        # Settled exactly once, whatever happens after the reservation: released when the
        # provider failed before any output, the actual cost when usage came, and the whole
        # reservation when the provider may have done (and billed) the work but no usage
        # came, or when anything after its answer failed.
        reported = reserved
        try:
            try:
                result = self.provider_for(capability.model_id, entry).converse(request, max_tokens=admitted)
            except ProviderOutcomeUnknown:  # it may have been billed: charged as reserved, never more
                raise
            except ProviderError:
                reported = Decimal(0)
                raise
            except Exception as exc:  # an adapter bug must not hold the reservation until expiry
                reported = Decimal(0)
                raise ProviderError(f"the provider call failed ({type(exc).__name__})") from None
            usage: Usage | None = result.usage
            reported = reserved if usage is None else cost_of(entry, usage)
        finally:
            settlement = self.budget.settle(
                task_id=capability.task_id,
                reservation_id=rid,
                reserved=reserved,
                actual=reported,
                now=self.clock(),
            )
        charge = charge_for(reserved, reported)
        if charge.over_reported > 0:  # cannot happen with honest usage: the bound is an upper bound
            self._over_report(
                capability,
                reservation_id=rid,
                max_tokens=admitted,
                reported=reported,
                charge=charge,
                usage=usage,
                settled=settlement.applied,
            )
        return RelayOutcome(
            response=result.response,
            cost_usd=charge.charged,
            remaining_usd=settlement.remaining(capability.max_budget_usd),
            max_tokens=admitted,
            over_reported_usd=charge.over_reported,
        )

    def _screen(self, data: dict[str, Any], bearer: str) -> None:
        """400 naming the field for text that is not valid Unicode or that carries a
        credential the relay must not forward (see the module docstring)."""
        for where, text in text_fields(data):
            if not is_valid_text(text):
                raise BadRequest(f"{where}: not valid UTF-8 text (a lone surrogate)", field=where)
            if bearer in text:
                raise BadRequest(
                    f"{where}: carries the capability this call presents; the relay never forwards "
                    "a credential to a model provider",
                    field=where,
                )
            self._refuse_credential(where, text)
        for where, text in joined_texts(data):  # a credential split across text blocks
            self._refuse_credential(where, text)

    def _refuse_credential(self, where: str, text: str) -> None:
        kind = issued_credential(text, self.capability_key_ids)
        if kind is not None:
            raise BadRequest(
                f"{where}: carries {kind}; the relay never forwards a credential to a model provider",
                field=where,
            )

    def _over_report(
        self,
        capability: Capability,
        *,
        reservation_id: str,
        max_tokens: int,
        reported: Decimal,
        charge: Charge,
        usage: Usage | None,
        settled: bool,
    ) -> None:
        """Record a provider's report beyond the reservation: the log line and the durable
        event (the settlement already added the excess to the task's `over_reported_usd`).
        The call's answer does not depend on it: the money is settled either way."""
        data: dict[str, Any] = {
            "model_id": capability.model_id,
            "reservation_id": reservation_id,
            "max_tokens": max_tokens,
            "reserved_usd": str(charge.charged),  # an over-report is charged its reservation
            "reported_usd": str(reported),
            "charged_usd": str(charge.charged),
            "over_reported_usd": str(charge.over_reported),
            "settled": settled,
        }
        if usage is not None:
            data["usage"] = {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
            }
        logger.error(
            "provider reported more than reserved",
            extra={"task_id": capability.task_id, "over_reported_usd": data["over_reported_usd"]},
        )
        try:
            self.record_over_report(capability.task_id, data, self.clock())
        except Exception:  # the item's total and the metric hold it; the event is the detail
            logger.exception("could not record the over-report event", extra={"task_id": capability.task_id})

    def _reserve(
        self, capability: Capability, entry: PriceEntry, bound: int, wanted: int, max_tokens_field: str
    ) -> tuple[int, Decimal, str]:
        """Reserve for `wanted` output tokens, or fewer if that is all the room pays for."""
        floor = min(wanted, MIN_OUTPUT_TOKENS)
        tokens = wanted
        refusal: Refusal | None = None
        for _ in range(3):  # full, lowered, lowered again if a concurrent call took the room
            cost = max_cost(entry, bound, tokens)
            now = self.clock()
            rid = "r" + uuid.uuid4().hex
            refusal = self.budget.reserve(
                task_id=capability.task_id,
                owner=capability.sub,
                model=capability.model_id,
                token_cap=capability.max_budget_usd,
                cost=cost,
                reservation_id=rid,
                expires_at=now + RESERVATION_TTL,
                now=now,
            )
            if refusal is None:
                return tokens, cost, rid
            judge_refusal(
                refusal, owner=capability.sub, model_id=capability.model_id, running=TaskStatus.RUNNING.value
            )
            affordable = affordable_max_tokens(entry, bound, refusal.room(capability.max_budget_usd))
            if affordable < floor:
                break
            tokens = min(affordable, wanted)
        assert refusal is not None
        if affordable_max_tokens(entry, bound, refusal.settled_room(capability.max_budget_usd)) >= floor:
            wait = 2
            if refusal.earliest_expiry is not None:
                wait = max(1, min(wait, math.ceil((refusal.earliest_expiry - self.clock()).total_seconds())))
            raise RetryLater(
                f"the budget is held by calls in flight; retry in {wait} s", field="budget", retry_after=wait
            )
        left = refusal.settled_room(capability.max_budget_usd)
        raise unaffordable(entry, bound, floor, left, max_tokens_field=max_tokens_field)


def _load(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # invalid UTF-8 bytes too (a UnicodeDecodeError)
        raise BadRequest("request body is not valid JSON", field="body") from exc
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object", field="body")
    _check_depth(data)
    return data


def _check_depth(data: dict[str, Any]) -> None:
    where = too_deep(data)
    if where is not None:
        raise BadRequest(f"{where}: nested deeper than {MAX_DEPTH} levels", field=where)


def _validate(data: dict[str, Any]) -> ConverseRequest:
    try:
        return ConverseRequest.model_validate(data)
    except ValidationError as exc:
        raise BadRequest.from_validation(exc) from exc
