"""Price table loading and overrides, and the relay's budget math (exact, property-tested)."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from steward.adapters.price_file import load_price_table
from steward.domain.budget import (
    Usage,
    affordable_max_tokens,
    cost_of,
    input_bound_tokens,
    max_cost,
    per_token,
)
from steward.domain.errors import Forbidden
from steward.domain.prices import PriceEntry, PriceTable, UnknownModel

HAIKU = (
    "global.anthropic.claude-haiku-4-5-20251001-v1:0"  # Claude Haiku 4.5 through its global inference profile
)
NOVA = "amazon.nova-lite-v1:0"


def _write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def _entry(**overrides: Any) -> PriceEntry:
    fields: dict[str, Any] = {
        "provider": "scripted",
        "provider_model": "echo",
        "input_per_mtok": Decimal("1"),
        "output_per_mtok": Decimal("5"),
        "max_output_tokens": 4096,
    }
    fields.update(overrides)
    return PriceEntry(**fields)


# -- the packaged table ------------------------------------------------------------------------


def test_packaged_table_has_the_models_the_relay_and_demo_use() -> None:
    table = load_price_table()
    assert table.version == "2026-11-01"
    for model_id in (
        "scripted",
        "scripted-pricey",
        "scripted-tools",
        "scripted-fail",
        "scripted-no-usage",
        "scripted-slow",
        HAIKU,
        NOVA,
        "ollama/llama3.2",
    ):
        assert model_id in table.models
    haiku = table.entry(HAIKU)
    assert haiku.provider == "bedrock"
    # Read as exact decimals, never through a float.
    assert (haiku.input_per_mtok, haiku.output_per_mtok) == (Decimal("1.00"), Decimal("5.00"))
    assert (haiku.cache_read_per_mtok, haiku.cache_write_per_mtok) == (Decimal("0.10"), Decimal("1.25"))
    assert haiku.provider_model_for(HAIKU) == HAIKU
    assert table.entry("scripted-pricey").output_per_mtok == Decimal(500)
    ollama = table.entry("ollama/llama3.2")
    assert (ollama.provider, ollama.base_url, ollama.api_key_env) == (
        "openai",
        "http://127.0.0.1:11434/v1",
        None,
    )
    assert ollama.provider_model_for("ollama/llama3.2") == "llama3.2"
    policies = {table.entry(m).provider_model for m in table.models if table.entry(m).provider == "scripted"}
    assert policies == {"echo", "tool-then-stop", "fail", "no-usage", "slow", "playbook"}
    assert table.entry("scripted-coder").provider_model == "playbook"  # the demo's model


def test_unknown_model_is_a_403_naming_the_model() -> None:
    table = load_price_table()
    with pytest.raises(UnknownModel) as caught:
        table.entry("gpt-imaginary")
    assert isinstance(caught.value, Forbidden)
    assert (caught.value.status, caught.value.code) == (403, "unknown_model")
    assert "gpt-imaginary" in caught.value.message
    assert caught.value.to_body()["error"] == {"code": "unknown_model", "message": caught.value.message}


def test_a_blank_path_is_the_packaged_table(tmp_path: Path) -> None:
    override = _write(tmp_path / "p.json", {"version": "env", "models": {}})
    assert load_price_table(str(override)).version == "2026-11-01+env"
    assert load_price_table("  ").version == "2026-11-01"


# -- overrides ---------------------------------------------------------------------------------


def test_override_file_extends_and_replaces_entries_by_id(tmp_path: Path) -> None:
    override = _write(
        tmp_path / "prices.json",
        """{
          "version": "custom-1",
          "models": {
            "scripted": {"provider": "scripted", "provider_model": "echo",
                         "input_per_mtok": 2.5, "output_per_mtok": "7.125", "max_output_tokens": 100},
            "vllm/qwen": {"provider": "openai", "base_url": "http://10.0.0.5:8000/v1",
                          "api_key_secret": "steward/vllm-key", "input_per_mtok": 0.1,
                          "output_per_mtok": 0.2, "max_output_tokens": 2048}
          }
        }""",
    )
    table = load_price_table(str(override))
    assert table.version == "2026-11-01+custom-1"
    assert table.entry("scripted").input_per_mtok == Decimal("2.5")
    assert table.entry("scripted").output_per_mtok == Decimal("7.125")
    assert table.entry("scripted").max_output_tokens == 100
    assert table.entry("vllm/qwen").api_key_secret == "steward/vllm-key"
    assert table.entry(HAIKU) == load_price_table().entry(HAIKU)  # the rest is untouched
    assert load_price_table().entry("scripted").input_per_mtok == Decimal("1.00")  # packaged unchanged


def test_an_edited_override_file_is_picked_up(tmp_path: Path) -> None:
    path = _write(tmp_path / "prices.json", {"version": "a", "models": {}})
    assert load_price_table(str(path)).version == "2026-11-01+a"
    _write(path, {"version": "b", "models": {}})
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_price_table(str(path)).version == "2026-11-01+b"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"version": "x", "models": {', "not valid JSON"),
        ("[1, 2]", "top level must be an object"),
        ({"models": {}}, "version: Field required"),
        ({"version": "x", "models": {}, "extra": 1}, "extra: Extra inputs are not permitted"),
        (
            {"version": "x", "models": {"m": {"provider": "scripted", "input_per_mtok": 1}}},
            "models.m.output_per_mtok: Field required",
        ),
        (
            {
                "version": "x",
                "models": {
                    "m": {
                        "provider": "azure",
                        "input_per_mtok": 1,
                        "output_per_mtok": 1,
                        "max_output_tokens": 1,
                    }
                },
            },
            "models.m.provider",
        ),
        (
            {
                "version": "x",
                "models": {
                    "m": {
                        "provider": "bedrock",
                        "input_per_mtok": -1,
                        "output_per_mtok": 1,
                        "max_output_tokens": 1,
                    }
                },
            },
            "models.m.input_per_mtok: Input should be greater than or equal to 0",
        ),
        (
            '{"version": "x", "models": {"m": {"provider": "bedrock", "input_per_mtok": NaN,'
            ' "output_per_mtok": 1, "max_output_tokens": 1}}}',
            "models.m.input_per_mtok",
        ),
        (
            {
                "version": "x",
                "models": {
                    "m": {
                        "provider": "bedrock",
                        "input_per_mtok": 1,
                        "output_per_mtok": 1,
                        "max_output_tokens": 0,
                    }
                },
            },
            "models.m.max_output_tokens",
        ),
        (
            {
                "version": "x",
                "models": {
                    "m": {
                        "provider": "openai",
                        "input_per_mtok": 0,
                        "output_per_mtok": 0,
                        "max_output_tokens": 9,
                    }
                },
            },
            "models.m: an openai entry needs base_url",
        ),
        (
            {
                "version": "x",
                "models": {
                    "m": {
                        "provider": "openai",
                        "base_url": "http://h/v1",
                        "api_key_env": "A",
                        "api_key_secret": "B",
                        "input_per_mtok": 0,
                        "output_per_mtok": 0,
                        "max_output_tokens": 9,
                    }
                },
            },
            "at most one of api_key_env and api_key_secret",
        ),
        (
            {
                "version": "x",
                "models": {
                    "m": {
                        "provider": "scripted",
                        "provider_model": "improvise",
                        "input_per_mtok": 0,
                        "output_per_mtok": 0,
                        "max_output_tokens": 9,
                    }
                },
            },
            "models.m.provider_model: unknown scripted policy",
        ),
    ],
)
def test_a_bad_override_file_names_the_file_and_the_field(
    tmp_path: Path, content: Any, expected: str
) -> None:
    path = _write(tmp_path / "bad-prices.json", content)
    with pytest.raises(ValueError, match="price table") as caught:
        load_price_table(str(path))
    message = str(caught.value)
    assert str(path) in message
    assert expected in message


def test_a_missing_override_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ValueError, match=r"price table .*nope\.json: cannot read"):
        load_price_table(str(missing))


def test_prices_refuse_floats_but_take_strings_and_decimals() -> None:
    with pytest.raises(ValidationError, match="never a float"):
        _entry(input_per_mtok=0.8)
    assert _entry(input_per_mtok="0.8").input_per_mtok == Decimal("0.8")
    with pytest.raises(ValidationError):
        _entry(input_per_mtok=Decimal("1e-20"))  # more decimal places than budget math allows
    with pytest.raises(ValidationError):
        PriceTable(version="v", models={"": _entry()})


# -- cost and bounds: examples -----------------------------------------------------------------


def test_per_token_is_exact() -> None:
    assert per_token(Decimal("0.80")) == Decimal("0.0000008")
    assert per_token(Decimal("0.80")) * 1_000_000 == Decimal("0.80")
    assert per_token(Decimal("0.000000000001")) == Decimal("1E-18")


def test_cost_counts_each_token_kind_once_at_its_own_price() -> None:
    haiku = load_price_table().entry(HAIKU)
    usage = Usage(input_tokens=1000, output_tokens=500, cache_read_tokens=2000, cache_write_tokens=100)
    # 1000 * 1.00 + 500 * 5.00 + 2000 * 0.10 + 100 * 1.25, per million
    assert cost_of(haiku, usage) == Decimal("0.003825")
    assert cost_of(haiku, Usage(0, 0)) == 0


def test_usage_refuses_negative_or_non_integer_counts() -> None:
    with pytest.raises(ValueError, match="input_tokens"):
        Usage(input_tokens=-1, output_tokens=0)
    with pytest.raises(ValueError, match="cache_read_tokens"):
        Usage(input_tokens=1, output_tokens=0, cache_read_tokens=True)
    with pytest.raises(ValueError, match="output_tokens"):
        Usage(input_tokens=1, output_tokens=1.0)  # type: ignore[arg-type]


def test_input_bound_is_the_byte_count() -> None:
    assert input_bound_tokens(0) == 0
    assert input_bound_tokens(12345) == 12345
    with pytest.raises(ValueError, match="non-negative"):
        input_bound_tokens(-1)


def test_max_cost_prices_input_at_the_highest_input_side_price_plus_overhead() -> None:
    haiku = load_price_table().entry(HAIKU)
    assert haiku.input_overhead_tokens == 1024
    # (1000 + 1024) tokens at the cache-write price 1.25 (the highest) + 100 at 5.00, per million
    assert max_cost(haiku, 1000, 100) == Decimal("0.00303")
    scripted = load_price_table().entry("scripted")
    assert max_cost(scripted, 400, 1000) == Decimal("0.0054")


def test_affordable_max_tokens_examples() -> None:
    entry = _entry(input_per_mtok=Decimal(100), output_per_mtok=Decimal(500), max_output_tokens=4096)
    # input 1000 bytes costs 0.1; each output token 0.0005
    assert affordable_max_tokens(entry, 1000, Decimal("0.1")) == 0
    assert affordable_max_tokens(entry, 1000, Decimal("0.0999")) == 0  # even the input does not fit
    assert affordable_max_tokens(entry, 1000, Decimal("0.1005")) == 1
    assert affordable_max_tokens(entry, 1000, Decimal("0.10099")) == 1
    assert affordable_max_tokens(entry, 1000, Decimal("0.6")) == 1000
    assert affordable_max_tokens(entry, 1000, Decimal("1000")) == 4096  # capped at the model's limit
    assert affordable_max_tokens(entry, 1000, Decimal("-5")) == 0
    assert affordable_max_tokens(entry, 1000, Decimal("1E+400")) == 4096  # absurd room, no arithmetic error
    free_output = _entry(output_per_mtok=Decimal(0), max_output_tokens=77)
    assert affordable_max_tokens(free_output, 10, Decimal("0.00001")) == 77
    assert affordable_max_tokens(free_output, 10, Decimal("0.000009")) == 0


# -- cost and bounds: properties ---------------------------------------------------------------

_prices = st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False, allow_infinity=False)


@st.composite
def _entries(draw: st.DrawFn) -> PriceEntry:
    return _entry(
        input_per_mtok=draw(_prices),
        output_per_mtok=draw(_prices),
        cache_read_per_mtok=draw(_prices),
        cache_write_per_mtok=draw(_prices),
        max_output_tokens=draw(st.integers(min_value=1, max_value=200_000)),
        input_overhead_tokens=draw(st.integers(min_value=0, max_value=4096)),
    )


@settings(max_examples=300, deadline=None)
@given(
    entry=_entries(),
    bound=st.integers(min_value=0, max_value=5_000_000),
    max_tokens=st.integers(min_value=0, max_value=200_000),
    data=st.data(),
)
def test_actual_cost_never_exceeds_max_cost(
    entry: PriceEntry, bound: int, max_tokens: int, data: st.DataObject
) -> None:
    # Any split of up to bound + overhead prompt tokens among plain, cache-read and cache-write
    # input, and any output up to max_tokens.
    prompt = data.draw(st.integers(min_value=0, max_value=bound + entry.input_overhead_tokens))
    cache_read = data.draw(st.integers(min_value=0, max_value=prompt))
    cache_write = data.draw(st.integers(min_value=0, max_value=prompt - cache_read))
    usage = Usage(
        input_tokens=prompt - cache_read - cache_write,
        output_tokens=data.draw(st.integers(min_value=0, max_value=max_tokens)),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    assert usage.input_side_tokens <= bound + entry.input_overhead_tokens
    assert cost_of(entry, usage) <= max_cost(entry, bound, max_tokens)


@settings(max_examples=300, deadline=None)
@given(
    entry=_entries(),
    bound=st.integers(min_value=0, max_value=5_000_000),
    room=st.decimals(min_value=-1, max_value=10_000, places=8, allow_nan=False, allow_infinity=False),
)
def test_affordable_max_tokens_is_the_largest_that_fits(entry: PriceEntry, bound: int, room: Decimal) -> None:
    n = affordable_max_tokens(entry, bound, room)
    assert 0 <= n <= entry.max_output_tokens
    if max_cost(entry, bound, 0) > room:
        assert n == 0
        return
    assert max_cost(entry, bound, n) <= room
    if n < entry.max_output_tokens:
        assert max_cost(entry, bound, n + 1) > room
