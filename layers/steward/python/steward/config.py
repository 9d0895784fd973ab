"""Deployment settings, read once from the environment (Lambda, Fargate and the local stack
set the same variables)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from steward.domain.documents import DocumentPolicy


def _decimal(name: str, default: str) -> Decimal:
    raw = os.environ.get(name, default)
    try:
        value = Decimal(raw)
    except InvalidOperation as exc:
        raise ValueError(f"{name} must be a decimal number, got {raw!r}") from exc
    if not value.is_finite() or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {raw!r}")
    return value


@dataclass(frozen=True)
class Settings:
    table_prefix: str = "steward-"
    artifacts_bucket: str = "steward-artifacts"
    max_budget_usd: Decimal = Decimal("10.00")
    default_budget_usd: Decimal = Decimal("2.00")
    default_model: str = "scripted"

    @classmethod
    def from_env(cls) -> Settings:
        settings = cls(
            table_prefix=os.environ.get("STEWARD_TABLE_PREFIX", cls.table_prefix),
            artifacts_bucket=os.environ.get("STEWARD_ARTIFACTS_BUCKET", cls.artifacts_bucket),
            max_budget_usd=_decimal("STEWARD_MAX_BUDGET_USD", str(cls.max_budget_usd)),
            default_budget_usd=_decimal("STEWARD_DEFAULT_BUDGET_USD", str(cls.default_budget_usd)),
            default_model=os.environ.get("STEWARD_DEFAULT_MODEL", cls.default_model),
        )
        if settings.default_budget_usd > settings.max_budget_usd:
            raise ValueError("STEWARD_DEFAULT_BUDGET_USD exceeds STEWARD_MAX_BUDGET_USD")
        return settings

    @property
    def document_policy(self) -> DocumentPolicy:
        return DocumentPolicy(
            max_budget_usd=self.max_budget_usd,
            default_budget_usd=self.default_budget_usd,
            default_model=self.default_model,
        )
