"""What the model and the records are told about a check that ended early: each way a
check can be stopped is named, never shown as a bare exit code."""

from __future__ import annotations

import pytest
from steward.runner.harness import _describe
from steward.runner.sandbox import CommandResult


def result(**flags: bool) -> CommandResult:
    return CommandResult(
        command="python -m pytest -q",
        argv=("python", "-m", "pytest", "-q"),
        exit_code=None,
        timed_out=flags.get("timed_out", False),
        output_truncated=flags.get("output_truncated", False),
        duration_s=1.0,
        output="",
        signal=9,
        write_limit_exceeded=flags.get("write_limit_exceeded", False),
    )


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("timed_out", "timed out"),
        ("output_truncated", "output exceeded the bound"),
        ("write_limit_exceeded", "wrote more into the repository than the bound allows"),
    ],
)
def test_a_stopped_check_says_why(flag: str, said: str) -> None:
    text = _describe(result(**{flag: True}))
    assert said in text
    assert "exit code None" not in text
    assert not result(**{flag: True}).passed
