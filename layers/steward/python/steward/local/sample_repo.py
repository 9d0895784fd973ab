"""The sample repositories the local GitHub twin hosts: the demo plan's, and a second one of
the same account (a plan's items may each name their repository)."""

from __future__ import annotations

SAMPLE_REPO = "steward-demo/calculator"

FILES = {
    "README.md": "# calculator\n\nA tiny library the Steward demo improves, one reviewed pull request at a time.\n",
    "calculator.py": (
        '"""Arithmetic helpers."""\n\n\n'
        "def add(a: float, b: float) -> float:\n    return a + b\n\n\n"
        "def divide(a: float, b: float) -> float:\n    return a / b\n"
    ),
    "test_calculator.py": (
        "from calculator import add, divide\n\n\n"
        "def test_add() -> None:\n    assert add(2, 3) == 5\n\n\n"
        "def test_divide() -> None:\n    assert divide(6, 3) == 2\n"
    ),
}

# A second repository in alice's installation: a page that shows the calculator's results.
SECOND_REPO = "steward-demo/web"

SECOND_FILES = {
    "README.md": "# web\n\nThe page that shows the calculator's results.\n",
    "page.py": (
        '"""What the page shows."""\n\n\n'
        'def sum_line(a: float, b: float) -> str:\n    return f"{a} + {b} = {a + b}"\n'
    ),
    "test_page.py": (
        "from page import sum_line\n\n\n"
        'def test_sum_line() -> None:\n    assert sum_line(2, 3) == "2 + 3 = 5"\n'
    ),
}

SAMPLE_REPOS = {SAMPLE_REPO: FILES, SECOND_REPO: SECOND_FILES}
