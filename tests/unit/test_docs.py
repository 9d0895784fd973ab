"""The documentation says what the code does: its generated pages are current, every test a
guarantee names exists, every code name and link resolves, and the README stays short."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUARANTEES = yaml.safe_load((DOCS / "guarantees.yaml").read_text(encoding="utf-8"))
PAGES = sorted([*DOCS.rglob("*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md"])
TEST_REF = re.compile(r"`((?:tests/[\w/]+/)?test_\w+\.py(?:::[\w\[\]\-.]+)?|tests/[\w/]+/)`")


def test_the_generated_pages_are_current() -> None:
    """The CLI, settings, HTTP API, codes and guarantees pages are written from the code and
    the data file by tools/docs_reference.py; a change to either without it fails here."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "docs_reference.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@cache
def _tests_in(path: Path) -> frozenset[str]:
    """`name` and `Class::name` of every test function the module defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            found.add(node.name)
        if isinstance(node, ast.ClassDef):
            found |= {f"{node.name}::{f.name}" for f in node.body if isinstance(f, ast.FunctionDef)}
    return frozenset(found)


def _resolve(ref: str) -> str:
    """The full node id of a reference as the text writes it (`test_x.py::...` names the one
    module of that name)."""
    path, _, name = ref.partition("::")
    if not path.startswith("tests/"):
        matches = sorted((ROOT / "tests").rglob(path))
        assert len(matches) == 1, f"{ref}: {len(matches)} modules are named {path}"
        path = str(matches[0].relative_to(ROOT))
    return f"{path}::{name}" if name else path


GUARANTEE_IDS = [entry["guarantee"][:60] for entry in GUARANTEES["guarantees"]]


@pytest.mark.parametrize("entry", GUARANTEES["guarantees"], ids=GUARANTEE_IDS)
def test_every_guarantee_names_tests_that_exist(entry: dict[str, object]) -> None:
    tests = entry["tests"]
    assert isinstance(tests, list)
    assert tests, "a guarantee names the tests that prove it"
    for node in tests:
        path, _, name = str(node).partition("::")
        module = ROOT / path
        assert module.exists(), f"{node}: no such test module or directory"
        if name:
            assert module.is_file()
            assert name.split("[")[0] in _tests_in(module), f"{node}: no such test"
        elif module.is_file():
            assert _tests_in(module), f"{node}: the module holds no test"


@pytest.mark.parametrize("entry", GUARANTEES["guarantees"], ids=GUARANTEE_IDS)
def test_the_tests_a_guarantee_cites_are_the_ones_it_lists(entry: dict[str, object]) -> None:
    cited = {_resolve(ref) for ref in TEST_REF.findall(str(entry["detail"]))}
    assert cited == set(map(str, entry["tests"]))  # type: ignore[call-overload]


TEST_NAMES = sorted(
    {ref for page in PAGES for ref in TEST_REF.findall(page.read_text("utf-8")) if "::" in ref}
)


@pytest.mark.parametrize("ref", TEST_NAMES)
def test_every_test_the_documentation_names_exists(ref: str) -> None:
    """Decision records, concept pages and guides cite the tests that prove what they say."""
    path, _, name = _resolve(ref).partition("::")
    assert name.split("[")[0] in _tests_in(ROOT / path), f"{ref}: no such test"


def test_the_non_guarantees_are_said_too() -> None:
    assert len(GUARANTEES["not_guaranteed"]) >= 10


# A module (`steward.domain.reconcile`), or an object in one (`steward.domain.gates:check`,
# `steward.domain.follow_ups.settlement`), as any page of the documentation names it.
NAME = re.compile(r"`(steward(?:\.[A-Za-z_]+)+)(?::([A-Za-z_][A-Za-z0-9_.]*))?`")
NAMES = sorted({"{}:{}".format(*found) for page in PAGES for found in NAME.findall(page.read_text("utf-8"))})


def test_where_things_live_names_code() -> None:
    named = NAME.findall((DOCS / "where-things-live.md").read_text(encoding="utf-8"))
    assert len(set(named)) >= 30


def _resolves(dotted: str, attribute: str) -> bool:
    """The longest importable prefix of `dotted`, then the rest (and `attribute`) as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in [*parts[cut:], *filter(None, attribute.split("."))]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


@pytest.mark.parametrize("name", NAMES)
def test_every_code_name_the_documentation_gives_exists(name: str) -> None:
    dotted, _, attribute = name.partition(":")
    assert _resolves(dotted, attribute), f"{name.rstrip(':')} does not exist"


def test_the_readme_is_short_and_every_link_in_it_resolves() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10, "the README leads into the documentation"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert missing == []


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    suffixes = {".py", ".ts", ".js", ".html", ".md", ".toml", ".yml", ".yaml", ".sh", ""}
    return [
        ROOT / name
        for name in listed.stdout.splitlines()
        if Path(name).suffix in suffixes
        and not name.startswith("tests/fixtures/")
        and (ROOT / name).is_file()
    ]


# Files of the sample repositories tests publish to, not pages of this documentation.
SAMPLE_FILES = {"docs/greeting.md"}


def test_every_documentation_page_the_code_cites_exists() -> None:
    """Code and tests cite the page that explains them (`docs/concepts/runner.md`): a page
    moved or renamed without its citations fails here."""
    cited = {
        (path.relative_to(ROOT), page)
        for path in _tracked_text_files()
        for page in re.findall(r"\bdocs/[\w/-]+\.md\b", path.read_text(encoding="utf-8", errors="replace"))
    }
    assert cited, "the code cites its documentation"
    missing = sorted(
        f"{where}: {page}" for where, page in cited if page not in SAMPLE_FILES and not (ROOT / page).exists()
    )
    assert missing == []
