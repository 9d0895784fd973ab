"""Budget math of the relay: what a call cost, and the most it could cost before it is made.

Pure and exact: money is `Decimal`, computed in a 100-digit context that traps `Inexact`,
so a result is either exact or an exception, never silently rounded. Price entries are
bounded (see `steward.domain.prices.Price`), which keeps every product well inside that.

Token convention (as Bedrock's Converse usage reports it): `input_tokens` counts only the
plain input tokens; tokens read from or written to a prompt cache are counted in
`cache_read_tokens` / `cache_write_tokens` and NOT also in `input_tokens`. Each token kind is
charged once, at its own price. Adapters of providers that report otherwise (OpenAI's
`prompt_tokens` includes `cached_tokens`) convert to this convention.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, Inexact, localcontext

from steward.domain.errors import BudgetExhausted, CallExceedsBudget, Forbidden, LifecycleError
from steward.domain.prices import PriceEntry

_MILLION = Decimal(1_000_000)
_EXACT = Context(prec=100, traps=[Inexact])
_MICRO = Decimal("0.000001")

# Below this many output tokens a call is not worth making: the relay refuses instead of
# lowering `maxTokens` further (`steward.services.relay`), and publish refuses a budget that
# cannot pay for one such call (`min_call_cost`).
MIN_OUTPUT_TOKENS = 256
# The input of the smallest call a budget must pay for: one KiB of request.
MIN_CALL_INPUT_BYTES = 1024


@dataclass(frozen=True)
class Usage:
    """Tokens a provider reported for one call (see the module docstring for the convention)."""

    input_tokens: int
    output_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __post_init__(self) -> None:
        # A negative count would lower a charge: refuse it where usage enters the domain.
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{field.name} must be a non-negative integer")

    @property
    def input_side_tokens(self) -> int:
        """Every token of the prompt, whatever its price: what the input bound must cover."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


def per_token(per_mtok: Decimal) -> Decimal:
    """A price per million tokens as a price per token (exact: a shift of the exponent)."""
    with localcontext(_EXACT):
        return per_mtok / _MILLION


def cost_of(entry: PriceEntry, usage: Usage) -> Decimal:
    """The actual cost of a call in USD: each token kind once, at its own price."""
    with localcontext(_EXACT):
        return (
            usage.input_tokens * per_token(entry.input_per_mtok)
            + usage.output_tokens * per_token(entry.output_per_mtok)
            + usage.cache_read_tokens * per_token(entry.cache_read_per_mtok)
            + usage.cache_write_tokens * per_token(entry.cache_write_per_mtok)
        )


def input_bound_tokens(payload_bytes: int) -> int:
    """An upper bound on the input tokens of `payload_bytes` bytes of UTF-8 JSON.

    Every tokenizer in use (BPE-style, byte-fallback) maps at least one byte of UTF-8 to
    each token of text, so the byte count of everything sent (messages, system text, tool
    schemas, serialized as JSON, which only adds bytes) bounds its tokens. Tokens a
    provider adds on its own side are not in the payload: `max_cost` adds the entry's
    `input_overhead_tokens` for them.
    """
    if payload_bytes < 0:
        raise ValueError("payload_bytes must be non-negative")
    return payload_bytes


def max_cost(entry: PriceEntry, input_bound: int, max_tokens: int) -> Decimal:
    """The most a call can cost: an amount the actual cost can never exceed.

    The input side (`input_bound` plus the entry's `input_overhead_tokens`) is priced at
    the highest of the input, cache-read and cache-write prices, since the provider decides
    how the prompt splits between them; `max_tokens` is priced at the output price.
    """
    if input_bound < 0 or max_tokens < 0:
        raise ValueError("token counts must be non-negative")
    with localcontext(_EXACT):
        input_side = (input_bound + entry.input_overhead_tokens) * per_token(entry.max_price_per_mtok())
        return input_side + max_tokens * per_token(entry.output_per_mtok)


def min_call_cost(entry: PriceEntry) -> Decimal:
    """The most the smallest useful call can cost: 1 KiB of input (plus the model's own
    overhead) and the relay's floor of output tokens (the model's limit, if lower). A task
    budget below it cannot pay for one call the relay would admit at its floor."""
    output = min(MIN_OUTPUT_TOKENS, entry.max_output_tokens)
    return max_cost(entry, input_bound_tokens(MIN_CALL_INPUT_BYTES), output)


def _usd(amount: Decimal, rounding: str) -> str:
    """`amount` for a person: to the millionth of a dollar, rounded the way `rounding` says."""
    return f"${amount.quantize(_MICRO, rounding=rounding).normalize():f}"


def unaffordable(
    entry: PriceEntry, input_bound: int, floor: int, left: Decimal, *, max_tokens_field: str
) -> BudgetExhausted:
    """The 402 for a call whose maximum cost with `floor` output tokens (the fewest it takes)
    is more than `left`, what the budget has after settled spend. When `left` cannot pay even
    the smallest call (`min_call_cost`), the budget is spent. Otherwise it is this call that
    is too large: the answer says so, with the figures (the cost rounded up, what is left
    rounded down) and what would fit, `max_tokens_field` being the caller's own name for it."""
    if left < min_call_cost(entry):
        return BudgetExhausted("the task's budget is spent", field="budget")
    fits = affordable_max_tokens(entry, input_bound, left)
    remedy = (
        f"send {max_tokens_field} of at most {fits}, or a shorter input"
        if fits > 0
        else "send a shorter input (its bound alone costs more than is left)"
    )
    return CallExceedsBudget(
        f"this call may cost up to {_usd(max_cost(entry, input_bound, floor), ROUND_CEILING)} "
        f"(up to {input_bound + entry.input_overhead_tokens} input tokens and {floor} output "
        f"tokens), more than the {_usd(left, ROUND_FLOOR)} left of the task's budget: {remedy}",
        field="budget",
    )


def affordable_max_tokens(entry: PriceEntry, input_bound: int, room: Decimal) -> int:
    """The largest `n` in [0, entry.max_output_tokens] with `max_cost(entry, input_bound, n) <= room`.

    0 when even the input side does not fit (the caller tells that apart with `max_cost(...,
    0) > room`). Capped at the model's output limit: the provider refuses more anyway, and a
    free output price would otherwise have no largest `n`. Exact integer division, no float.
    """
    if input_bound < 0:
        raise ValueError("input_bound must be non-negative")
    # Compare before subtracting, so an absurd `room` never reaches the arithmetic.
    if room < max_cost(entry, input_bound, 0):
        return 0
    if room >= max_cost(entry, input_bound, entry.max_output_tokens):
        return entry.max_output_tokens
    with localcontext(_EXACT):
        left = room - max_cost(entry, input_bound, 0)
        # Here the output price is positive (else the cap above would have fitted) and the
        # quotient is below max_output_tokens; `//` on non-negative decimals is the floor.
        return int(left // per_token(entry.output_per_mtok))


# ---- admission outcomes (the budget store fills them from the item a condition saw)


@dataclass(frozen=True)
class Refusal:
    """Why a reservation was refused, read from the item the failed condition saw."""

    found: bool
    owner: str | None
    status: str | None
    model: str | None
    budget_usd: Decimal
    cost_usd: Decimal  # settled
    committed_usd: Decimal  # settled + in flight
    earliest_expiry: datetime | None

    def room(self, token_cap: Decimal) -> Decimal:
        """What a new reservation could take now."""
        return min(self.budget_usd, token_cap) - self.committed_usd

    def settled_room(self, token_cap: Decimal) -> Decimal:
        """What would be left if every call in flight were released."""
        return min(self.budget_usd, token_cap) - self.cost_usd


@dataclass(frozen=True)
class Charge:
    """What one settlement charges, and what a provider reported beyond it."""

    charged: Decimal  # never more than the reservation that admitted the call
    over_reported: Decimal  # reported cost above the reservation (0 for honest usage)


def charge_for(reserved: Decimal, reported: Decimal) -> Charge:
    """The settlement of a call admitted with `reserved` whose provider reported `reported`.

    The reservation is the most the relay authorized for the call, so it is also the most a
    settlement charges: a provider reporting more (its usage cannot follow from a request
    bounded by the reservation) is charged the reservation, and the excess is an
    over-report to record and alarm on, never spend. Negative amounts are refused."""
    if reserved < 0 or reported < 0:
        raise ValueError("amounts must be non-negative")
    if reported <= reserved:
        return Charge(reported, Decimal(0))
    with localcontext(_EXACT):
        return Charge(reserved, reported - reserved)


@dataclass(frozen=True)
class Settlement:
    applied: bool  # False: the reservation was already settled or expired
    cost_usd: Decimal  # settled spend after this settlement
    committed_usd: Decimal
    headroom_usd: Decimal  # task budget - committed
    charged_usd: Decimal = Decimal(0)  # what this settlement charged (0 when not applied)
    over_reported_usd: Decimal = Decimal(0)  # what it recorded as over-reported (0 when not applied)

    def remaining(self, token_cap: Decimal) -> Decimal:
        return max(Decimal(0), min(self.headroom_usd, token_cap - self.committed_usd))


def judge_refusal(refusal: Refusal, *, owner: str, model_id: str, running: str) -> None:
    """Raise when a refusal was not about money: the task is another owner's (or missing),
    pinned to another model, or not `running`. A refusal that passes was about the budget."""
    if not refusal.found or refusal.owner != owner:
        raise Forbidden("the capability does not own this task", field="task_id")
    if refusal.model != model_id:
        raise Forbidden("the task is pinned to another model", field="model")
    if refusal.status != running:
        raise LifecycleError(f"the task is {refusal.status}, not running", field="status")
