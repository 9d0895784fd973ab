"""Schedules the simulation shrank to, kept as regression tests: each ran the bug it found
before the fix (the message it failed with is in its docstring) and replays exactly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from tests.sim.machine import ControlPlane
from tests.sim.world import Run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    with pytest.MonkeyPatch.context() as env:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            env.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            env.delenv(name, raising=False)
        with mock_aws():
            simulated = Run(Path(tmp_path_factory.mktemp("sim-regressions")))
            try:
                with simulated.wired():
                    ControlPlane.run = simulated
                    yield simulated
            finally:
                simulated.close()


def replay(script: Callable[[ControlPlane], None]) -> None:
    """Run `script` as Hypothesis runs a schedule: invariants after every step, then the end."""
    state = ControlPlane()
    state.holds()
    try:
        script(state)
    finally:
        state.teardown()


def test_a_cancel_repeated_after_a_retry_does_not_reopen_the_items_failure(run: Run) -> None:
    """Was: `item p1/... went pending -> failed`: cancelling the already cancelled task again
    projected its failure onto the item the person had just retried, dropping the retry."""

    def script(state: ControlPlane) -> None:
        for step in (
            lambda: state.first_plan(titles=["Add a greeting"], max_attempts=1),
            lambda: state.runtime_step(pick=0, stages=8, data=Outcomes({"push": "lose_stream"})),
            lambda: state.retry_or_cancel(action="cancel", pick=0),
            lambda: state.retry_or_cancel(action="retry", pick=0),
            lambda: state.retry_or_cancel(action="cancel", pick=0),
        ):
            step()
            state.holds()

    replay(script)


class Outcomes:
    """Stands in for Hypothesis's `data` in a replay: the outcome named for a stage, else ok."""

    def __init__(self, at: dict[str, str]) -> None:
        self.at = at

    def draw(self, _strategy: object, label: str = "") -> str:
        return self.at.get(label, "ok")
