"""STEWARD_PRICE_TABLE, a documented setting: a price table of one's own, as a file's path
(locally) or the JSON itself (what the CDK app passes its functions), merged over the
packaged table; a table that cannot work is refused when the settings are read, naming the
variable and the field."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from steward.adapters.price_file import load_price_table
from steward.config import Settings

ENTRY = {
    "provider": "openai",
    "provider_model": "coder-7b",
    "base_url": "http://127.0.0.1:11434/v1",
    "api_key_env": None,
    "input_per_mtok": 3.00,
    "output_per_mtok": "15.00",
    "max_output_tokens": 4096,
}
TABLE = {"version": "mine-1", "models": {"my-ollama/coder": ENTRY}}


def test_a_table_of_ones_own_as_a_file_or_inline_json_extends_the_packaged_one(tmp_path: Path) -> None:
    path = tmp_path / "my-prices.json"
    path.write_text(json.dumps(TABLE))
    for value in (str(path), json.dumps(TABLE), "  " + json.dumps(TABLE, indent=2) + "\n"):
        settings = Settings.from_env({"STEWARD_PRICE_TABLE": value})
        table = load_price_table(settings.price_table)
        entry = table.entry("my-ollama/coder")
        assert (entry.input_per_mtok, entry.output_per_mtok) == (Decimal("3.00"), Decimal("15.00"))
        assert entry.provider_model_for("my-ollama/coder") == "coder-7b"
        assert table.entry("scripted-coder").provider == "scripted"  # the packaged ones stay
        assert table.version.endswith("+mine-1")
    assert Settings.from_env({}).price_table is None


def _with(**changes: object) -> str:
    return json.dumps({"version": "mine-1", "models": {"my-ollama/coder": {**ENTRY, **changes}}})


# (STEWARD_PRICE_TABLE's value, what the error names besides the variable)
BAD: list[tuple[str, str]] = [
    ("{not json", "not valid JSON"),
    ('{"models": {}}', "version"),
    ('{"version": "x", "models": []}', "models"),
    (_with(input_per_mtok=-1), "models.my-ollama/coder.input_per_mtok"),
    (_with(output_per_mtok="cheap"), "models.my-ollama/coder.output_per_mtok"),
    (_with(base_url=None), "an openai entry needs base_url"),
    (_with(base_url="file:///etc/passwd"), "base_url must be an http(s) URL"),
    (_with(provider="anthropic"), "models.my-ollama/coder.provider"),
    (_with(max_output_tokens=0), "models.my-ollama/coder.max_output_tokens"),
    (_with(api_key_env="K", api_key_secret="S"), "at most one of api_key_env and api_key_secret"),
    (_with(price=1), "models.my-ollama/coder.price"),
    ("/nonexistent/my-prices.json", "cannot read"),
]


def test_a_table_that_cannot_work_is_refused_naming_the_variable_and_the_field() -> None:
    for value, words in BAD:
        with pytest.raises(ValueError, match="STEWARD_PRICE_TABLE") as refused:
            Settings.from_env({"STEWARD_PRICE_TABLE": value})
        assert words in str(refused.value), (value, str(refused.value))
