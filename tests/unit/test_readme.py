"""The README's "Where things live" names real code: every `module:object` in it resolves."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
NAME = re.compile(r"`(steward(?:\.[a-z_]+)*):([A-Za-z_][A-Za-z0-9_.]*)`")


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    return text.split("## Where things live", 1)[1].split("\n## ", 1)[0]


NAMES = sorted(set(NAME.findall(_section())))


def test_the_section_names_code() -> None:
    assert len(NAMES) >= 30


@pytest.mark.parametrize(("module", "attribute"), NAMES, ids=[f"{m}:{a}" for m, a in NAMES])
def test_every_name_exists(module: str, attribute: str) -> None:
    found: object = importlib.import_module(module)
    for part in attribute.split("."):
        assert hasattr(found, part), f"{module}:{attribute} does not exist"
        found = getattr(found, part)


def test_the_failure_table_is_the_codes() -> None:
    """README: "The view on GitHub" shows `steward.domain.failures`' table as the code has it."""
    tool = README.parent / "tools" / "failure_table.py"
    done = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
