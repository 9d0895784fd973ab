"""Schedules the simulation shrank to, kept as regression tests: each ran the bug it found
before the fix (the message it failed with is in its docstring) and replays exactly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from tests.sim.machine import ControlPlane
from tests.sim.world import USER, Run


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


def test_a_cancel_repeated_after_the_retry_of_a_withdrawn_task_loses_no_retry(run: Run) -> None:
    """Was: `the acknowledged retry of t... (closed) spawned no attempt; its item is closed`: a
    task withdrawn in review, retried (202, its item pending), cancelled again (a no-op):
    the repeated cancel projected `closed` onto the retried item, the plan completed, and
    no attempt ever spawned."""

    def script(state: ControlPlane) -> None:
        for step in (
            lambda: state.first_plan(titles=["Add a greeting"], max_attempts=1),
            lambda: state.runtime_step(pick=0, stages=8, data=Outcomes({})),  # to review
            lambda: state.retry_or_cancel(action="cancel", pick=0),  # withdrawn
            lambda: state.retry_or_cancel(action="retry", pick=0),
            lambda: state.retry_or_cancel(action="cancel", pick=0),
        ):
            step()
            state.holds()
        assert state.checker.task_status(state.checker.retried[0]["task_id"]) == "closed"

    replay(script)


def test_a_confirm_in_another_session_during_a_stale_confirm_is_not_its_approval(run: Run) -> None:
    """Was (the simulation's own invariant, seed 20261202 worker 2): `a confirmation of
    content no longer displayed approved the current content`: the person's confirm of the
    current content in another session ran inside the stale confirm, before its conditional
    write; the write was refused (409, "the plan changed"), yet the rule compared the
    approval before and after the whole rule and blamed the stale confirm for the other's."""

    def script(state: ControlPlane) -> None:
        for step in (
            lambda: state.first_plan(titles=["Add a greeting"], max_attempts=1),
            lambda: state.arm_interleave(action="heartbeat_b", countdown=0),
            # before the stale confirm's TransactWriteItems (after the edit's publish)
            lambda: state.arm_interleave(action="confirm_awaiting", countdown=2),
            lambda: state.confirm(pick=0, stale=True),
        ):
            step()
            state.holds()
        first, current = state.hashes["p1"]
        assert state.refusals[-1].startswith("Conflict: the plan changed")
        plan = state.w.plans.get(USER, "p1")  # approved by the other session's confirm
        assert plan is not None
        assert plan.approved_hash == current != first

    replay(script)


def test_a_runtime_whose_claim_is_refused_for_good_exits_and_its_task_is_reaped(run: Run) -> None:
    """Was: `no convergence: ... tasks [(..., 'queued', None)]` (and `'running'` one stage
    later): a runtime that waited an hour kept retrying calls its expired capability could
    never make (the runner ends there), so the reaper never took its task. The simulation's
    runtime, not Steward, was wrong; kept so that it stays right."""

    def script(state: ControlPlane, stages: int) -> None:
        for step in (
            lambda: state.first_plan(titles=["Add a greeting"], max_attempts=1),
            lambda: state.advance(seconds=1),
            state.scheduler,
            lambda: state.runtime_step(pick=0, stages=stages, data=Outcomes({})),
            lambda: state.advance(seconds=3600),
        ):
            step()
            state.holds()

    for stages in (1, 3):  # ticket exchanged; claimed with a token
        replay(lambda state, stages=stages: script(state, stages))


def test_a_person_who_writes_the_same_mention_twice_is_not_steward_repeating_itself(run: Run) -> None:
    """Was (seed 7, worker 3): `pull request acme/sim765#1 has a comment of Steward's twice`:
    the check counted every comment on the pull request, and a person may well write the
    same mention twice. The simulation's check, not Steward, was wrong: it counts Steward's."""

    def script(state: ControlPlane) -> None:
        steps: tuple[Callable[[], None], ...] = (
            lambda: state.first_plan(titles=["Add a greeting"], max_attempts=1),
            lambda: state.runtime_step(pick=0, stages=8, data=Outcomes({})),  # to review
            lambda: state.ask(kind="mention", pick=0),
            lambda: state.ask(kind="mention", pick=0),
        )
        for step in steps:
            step()
            state.holds()

    replay(script)


def test_an_ask_the_loop_refuses_holds_no_pull_request_back_at_the_end(run: Run) -> None:
    """Was (seed 20261202, while the simulation gained a second repository): `no convergence:
    plans [('p1', 'in_progress', ...)]`: an item deleted while its task ran keeps the task
    as history, in review at the end; the end's reviewer asked it for a change, the loop
    rightly refused the ask (the item is gone: no round), and the end waited for that round
    to end before merging, for ever. The simulation's end, not Steward, was wrong."""

    def script(state: ControlPlane) -> None:
        steps: tuple[Callable[[], None], ...] = (
            lambda: state.first_plan(
                titles=["Log the errors", "Add a greeting"], max_attempts=2, places=["b", "", ""]
            ),
            lambda: state.edit(change="delete", pick=4),  # the first item, its task running
            lambda: state.confirm(pick=0, stale=False),
        )
        for step in steps:
            step()
            state.holds()
        plan = state.w.plans.get(USER, "p1")
        assert plan is not None
        assert [i.title for i in plan.items if i.removed] == ["Log the errors"]

    replay(script)


class Outcomes:
    """Stands in for Hypothesis's `data` in a replay: the outcome named for a stage, else ok."""

    def __init__(self, at: dict[str, str]) -> None:
        self.at = at

    def draw(self, _strategy: object, label: str = "") -> str:
        return self.at.get(label, "ok")
