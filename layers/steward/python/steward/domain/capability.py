"""The runtime capability (docs/concepts/relay.md): what a runtime may spend, on which task, with
which model, for how long. Pure: the claims and their rules; signing and verification live
in `steward.adapters.capability_signer`.

Money is a decimal string in the token ("2.50"), never a JSON number: a float would round
and an integer would hide a unit mistake, so parsing refuses both.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from steward.domain.errors import Unauthorized

ISSUER = "steward"
AUDIENCE = "steward-runtime"
MAX_LIFETIME_SECONDS = 7200
LEEWAY_SECONDS = 30
REQUIRED_CLAIMS: tuple[str, ...] = (
    "sub",
    "task_id",
    "model_id",
    "max_budget_usd",
    "iss",
    "aud",
    "iat",
    "exp",
    "jti",
)

BUDGET_PATTERN = re.compile(r"^\d+(\.\d{1,6})?$")
_MAX_BUDGET_PLACES = 6


def budget_string(amount: Decimal) -> str:
    """`amount` as the claim's plain decimal string (never exponent notation), or ValueError
    for an amount the claim cannot carry exactly (negative, not finite, over 6 places)."""
    if not amount.is_finite() or amount < 0:
        raise ValueError("max_budget_usd must be a finite, non-negative amount")
    text = format(amount, "f")
    if not BUDGET_PATTERN.match(text):
        raise ValueError(f"max_budget_usd must have at most {_MAX_BUDGET_PLACES} decimal places")
    return text


class Capability(BaseModel):
    """The verified claims of a capability. Strict: a claim of the wrong JSON type is refused,
    not coerced, and no unknown claim is accepted."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    sub: str = Field(min_length=1)
    task_id: str = Field(min_length=1)
    model_id: str = Field(min_length=1)
    max_budget_usd: Decimal
    iss: str
    aud: str
    iat: int
    exp: int
    jti: str = Field(min_length=1)

    @field_validator("max_budget_usd", mode="before")
    @classmethod
    def _budget_is_a_decimal_string(cls, value: Any) -> Decimal:
        # A Decimal comes only from Python code (JSON parsing never makes one); a token's
        # claim is a string, and a JSON number (float or integer) is refused.
        if isinstance(value, Decimal):
            budget_string(value)
            return value
        if not isinstance(value, str) or not BUDGET_PATTERN.match(value):
            raise ValueError("max_budget_usd must be a decimal string such as '2.50'")
        return Decimal(value)

    @field_serializer("max_budget_usd")
    def _budget_as_string(self, value: Decimal) -> str:
        return budget_string(value)

    @property
    def lifetime_seconds(self) -> int:
        return self.exp - self.iat


def capability_claims(
    *,
    sub: str,
    task_id: str,
    model_id: str,
    max_budget_usd: Decimal,
    now: datetime,
    lifetime_seconds: int = 3600,
    jti: str | None = None,
) -> dict[str, object]:
    """The claims of a fresh capability issued at `now` (whole seconds, as JWT times are).
    The result validates as a `Capability`, so the minter cannot sign what the relay refuses."""
    if not 0 < lifetime_seconds <= MAX_LIFETIME_SECONDS:
        raise ValueError(f"lifetime_seconds must be within 1..{MAX_LIFETIME_SECONDS}")
    iat = int(now.timestamp())
    claims: dict[str, object] = {
        "sub": sub,
        "task_id": task_id,
        "model_id": model_id,
        "max_budget_usd": budget_string(max_budget_usd),
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": iat,
        "exp": iat + lifetime_seconds,
        "jti": jti if jti is not None else uuid.uuid4().hex,
    }
    Capability.model_validate(claims)
    return claims


MAX_AUTHORIZATION_CHARS = 8192  # a capability is ~1 KB; anything far longer is not one


def bearer_token(authorization: str | None) -> str:
    """The credential of an `Authorization: Bearer <token>` header (scheme in any case), or
    Unauthorized: every route that takes a capability reads it this one way."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip() or len(authorization or "") > MAX_AUTHORIZATION_CHARS:
        raise Unauthorized("send the capability as Authorization: Bearer <capability>")
    return token.strip()


class Verify(Protocol):
    """`CapabilityVerifier.verify`: the capability a token carries at `now`, or Unauthorized.
    Callers pass their own clock, so one component's notion of time decides expiry."""

    def __call__(self, token: str, *, now: datetime | None = None) -> Capability: ...
