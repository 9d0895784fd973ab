"""The sample repository the local GitHub twin hosts for the demo plan."""

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
