"""The settings list (`steward.config.SETTINGS`) is the one account of what a deployment
configures: the parser reads every variable on it, only the composition root reads the
environment, and the documentation's settings page names every variable."""

from __future__ import annotations

import ast
import re
from decimal import Decimal
from pathlib import Path

import pytest
from steward.config import FUNCTIONS, SETTINGS, Settings, settings_for

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "steward" / "python" / "steward"

# Modules that may read the process environment: the composition root and its parser, the
# CLI, its API client and its login (a person's shell: XDG_CONFIG_HOME), the local stack and the runtime (each reads its
# own), git's adapter (PATH for the git subprocess, nothing else), and the tracer (Powertools'
# own LAMBDA_TASK_ROOT and POWERTOOLS_TRACE_DISABLED).
MAY_READ_ENVIRONMENT = (
    "config.py",
    "wiring.py",
    "observability.py",
    "cli.py",
    "adapters/api_client.py",
    "adapters/login.py",
    "adapters/git.py",
)
MAY_READ_ENVIRONMENT_UNDER = ("local/", "runner/")


def environment_reads(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in ("environ", "getenv", "environb")
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    ]


def test_only_the_composition_root_reads_the_environment() -> None:
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in MAY_READ_ENVIRONMENT or relative.startswith(MAY_READ_ENVIRONMENT_UNDER):
            continue
        readers += [f"{relative}:{line}" for line in environment_reads(path)]
    assert readers == []


def test_every_setting_is_parsed_and_tagged() -> None:
    assert len({s.env for s in SETTINGS}) == len(SETTINGS)
    parsed = Settings.from_env({})
    for setting in SETTINGS:
        assert hasattr(parsed, setting.attr), setting.env
        assert setting.functions, f"{setting.env} is read by no function"
        assert setting.functions <= set(FUNCTIONS)
    assert {s.env for s in settings_for("relay")} >= {"STEWARD_TABLE_PREFIX", "STEWARD_CAPABILITY_KEY_ID"}
    assert "STEWARD_GITHUB_APP_ID" not in {s.env for s in settings_for("relay")}


def test_values_are_parsed_from_the_environment() -> None:
    parsed = Settings.from_env(
        {
            "STEWARD_TABLE_PREFIX": "prod-",
            "STEWARD_CAPABILITY_KEY_ID": "new-key, old-key",
            "STEWARD_MAX_BUDGET_USD": "25",
            "STEWARD_RUNNER_SUBNETS": "subnet-a,subnet-b",
            "STEWARD_GITHUB_APP_ID": "42",
            "STEWARD_SANDBOX_UID": "12345",
            "STEWARD_CHECK_WALL_SECONDS": "60",
            "HOME": "/root",
        }
    )
    assert parsed.table_prefix == "prod-"
    assert parsed.capability_key_ids == ("new-key", "old-key")
    assert parsed.max_budget_usd == Decimal("25")
    assert parsed.runner_subnets == ("subnet-a", "subnet-b")
    assert parsed.github_app_id == 42
    assert parsed.heartbeat_queue_prefix == "prod-"
    # the runtime's own bounds pass through to local runtimes; nothing else does
    assert dict(parsed.runtime_env) == {"STEWARD_SANDBOX_UID": "12345", "STEWARD_CHECK_WALL_SECONDS": "60"}


BAD_VALUES = [
    ("STEWARD_TICK_SECONDS", "0"),
    ("STEWARD_TICK_SECONDS", "soon"),
    ("STEWARD_MAX_BUDGET_USD", "-1"),
    ("STEWARD_MAX_BUDGET_USD", "NaN"),
    ("STEWARD_DEFAULT_BUDGET_USD", "lots"),
    ("STEWARD_CAPABILITY_LIFETIME", "7201"),
    ("STEWARD_CAPABILITY_LIFETIME", "1.5"),
    ("STEWARD_LAUNCHER", "kubernetes"),
    ("STEWARD_GITHUB_APP_ID", "my-app"),
    ("STEWARD_SCRIPTED_SLOW_SECONDS", "-2"),
]


@pytest.mark.parametrize(("name", "value"), BAD_VALUES)
def test_a_malformed_value_is_refused_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_env({name: value})


def test_a_default_budget_above_the_maximum_is_refused() -> None:
    with pytest.raises(ValueError, match="STEWARD_DEFAULT_BUDGET_USD exceeds STEWARD_MAX_BUDGET_USD"):
        Settings.from_env({"STEWARD_MAX_BUDGET_USD": "1", "STEWARD_DEFAULT_BUDGET_USD": "2"})


def test_a_missing_required_setting_is_named_when_needed() -> None:
    with pytest.raises(RuntimeError, match="STEWARD_ECS_CLUSTER is not set"):
        Settings.from_env({}).require("ecs_cluster")


def test_secrets_stay_out_of_the_settings_repr() -> None:
    parsed = Settings.from_env(
        {"STEWARD_WEBHOOK_SECRET": "hunter2-webhook", "STEWARD_GITHUB_PRIVATE_KEY": "PEM!"}
    )
    assert "hunter2-webhook" not in repr(parsed)
    assert "PEM!" not in repr(parsed)
    assert {s.env for s in SETTINGS if s.secret} == {"STEWARD_WEBHOOK_SECRET", "STEWARD_GITHUB_PRIVATE_KEY"}


def test_the_settings_page_names_every_setting() -> None:
    page = (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    named = set(re.findall(r"STEWARD_[A-Z0-9_]+", page))
    missing = sorted(s.env for s in SETTINGS if s.env not in named)
    assert missing == []


def test_reset_forgets_every_part_the_composition_root_built() -> None:
    """A part left out of `wiring.reset` outlives its stack: a second local stack in the same
    process (a test worker) would reach the first one's stopped endpoints through it."""
    from steward import wiring  # noqa: PLC0415

    cached = {name for name, value in vars(wiring).items() if callable(getattr(value, "cache_clear", None))}
    assert cached == {builder.__name__ for builder in wiring._BUILDERS}
