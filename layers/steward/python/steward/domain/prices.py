"""The price table: which models the relay serves, through which provider, at what price.

The table is data shipped with the package (`steward/data/prices.json`); a deployment
extends or overrides it with its own JSON file named by `STEWARD_PRICE_TABLE` (same shape,
entries replace packaged ones whole, by model id; `steward.adapters.price_file` reads and
merges the files). A model not in the table is refused at minting and at admission
(`UnknownModel`, 403).

Prices are USD per million tokens and are read as exact decimals: JSON numbers are parsed
with `parse_float=Decimal` (strings work too) and a float handed in from code is refused,
so no binary rounding ever reaches budget math.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from steward.domain.errors import Forbidden

SCRIPTED_POLICIES = frozenset({"echo", "tool-then-stop", "fail", "no-usage", "slow", "playbook"})
"""Reply policies of the scripted provider; an entry naming another is refused at load time."""

# Bounded so that every product in budget math stays exact in a 100-digit context.
Price = Annotated[Decimal, Field(ge=0, le=1_000_000, decimal_places=12, allow_inf_nan=False)]


class UnknownModel(Forbidden):
    """The model is not in the price table: nothing can be minted or admitted for it."""

    code = "unknown_model"


class PriceEntry(BaseModel):
    """One model: provider adapter, prices per million tokens, output limit, connection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["bedrock", "openai", "scripted"]
    input_per_mtok: Price
    output_per_mtok: Price
    cache_read_per_mtok: Price = Decimal(0)
    cache_write_per_mtok: Price = Decimal(0)
    max_output_tokens: int = Field(ge=1, le=1_000_000, strict=True)
    # Tokens the provider adds to every request beyond what is sent (chat template, the
    # tool-use system prompt some models get): part of the input bound, see budget.max_cost.
    input_overhead_tokens: int = Field(default=0, ge=0, le=1_000_000, strict=True)
    provider_model: str | None = Field(default=None, min_length=1)
    base_url: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, min_length=1)
    api_key_secret: str | None = Field(default=None, min_length=1)

    @field_validator(
        "input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok", mode="before"
    )
    @classmethod
    def _no_float(cls, value: Any) -> Any:
        if isinstance(value, float):
            raise ValueError("prices must be exact decimals (a JSON number or a string), never a float")
        return value

    @model_validator(mode="after")
    def _connection(self) -> PriceEntry:
        if self.provider == "openai":
            if self.base_url is None:
                raise ValueError("an openai entry needs base_url")
            if not self.base_url.startswith(("http://", "https://")):
                raise ValueError("base_url must be an http(s) URL")
            if self.api_key_env is not None and self.api_key_secret is not None:
                raise ValueError("set at most one of api_key_env and api_key_secret")
        elif self.base_url is not None or self.api_key_env is not None or self.api_key_secret is not None:
            raise ValueError("base_url, api_key_env and api_key_secret apply to openai entries only")
        return self

    def provider_model_for(self, model_id: str) -> str:
        """The id the provider knows the model by: `provider_model`, else the table's id."""
        return self.provider_model if self.provider_model is not None else model_id

    def max_price_per_mtok(self) -> Decimal:
        """The highest price any input token can be charged at (plain, cache read or write)."""
        return max(self.input_per_mtok, self.cache_read_per_mtok, self.cache_write_per_mtok)


class PriceTable(BaseModel):
    """A version string and the entries by model id. Shared and cached: do not mutate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(min_length=1, max_length=200)
    models: dict[str, PriceEntry]

    @model_validator(mode="after")
    def _scripted_policies(self) -> PriceTable:
        for model_id, entry in self.models.items():
            if not model_id:
                raise ValueError("model ids must be non-empty")
            policy = entry.provider_model_for(model_id)
            if entry.provider == "scripted" and policy not in SCRIPTED_POLICIES:
                known = ", ".join(sorted(SCRIPTED_POLICIES))
                raise ValueError(
                    f"models.{model_id}.provider_model: unknown scripted policy (one of {known})"
                )
        return self

    def entry(self, model_id: str) -> PriceEntry:
        """The entry for `model_id`; `UnknownModel` (403) when the table has none."""
        found = self.models.get(model_id)
        if found is None:
            shown = model_id if len(model_id) <= 120 else model_id[:120] + "..."
            raise UnknownModel(f"model {shown!r} is not in the price table (version {self.version})")
        return found


def parse_price_table(text: str, *, where: str) -> PriceTable:
    """The table in `text` (JSON); ValueError naming `where` and the offending field."""
    try:
        data = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"price table {where}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"price table {where}: the top level must be an object with version and models")
    try:
        return PriceTable.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors(include_url=False, include_input=False))
        raise ValueError(f"price table {where}: {problems}") from None


def _describe(error: Mapping[str, Any]) -> str:
    location = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{location}: {message}" if location else message
