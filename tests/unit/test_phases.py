"""The runner's phase machine: what each phase offers and how each move changes the run."""

from __future__ import annotations

import pytest
from steward.domain.phases import (
    ALL_TOOLS,
    PHASE_TOOLS,
    EndReason,
    HarnessLimits,
    Phase,
    RunState,
    admit,
    after_check,
    after_edit,
    after_text,
    begin_turn,
)

LIMITS = HarnessLimits(max_turns=10, max_invalid_calls=3, max_repair_rounds=2)
REQUIRED = frozenset({"pytest -q", "ruff check ."})


def verifying() -> RunState:
    return after_text(after_edit(RunState()), REQUIRED, LIMITS)


def test_a_run_starts_in_edit_offering_inspection_and_edits_but_not_verification() -> None:
    state = RunState()
    assert state.phase is Phase.EDIT
    assert set(state.offered) == {"list_files", "search_text", "read_file", "write_file", "replace_in_file"}


def test_verify_offers_the_checks_and_reads_but_no_writes() -> None:
    assert set(verifying().offered) == {"run_verification", "list_files", "search_text", "read_file"}


def test_summary_offers_no_tool_at_all() -> None:
    state = verifying()
    for command in REQUIRED:
        state = after_check(state, command, True, REQUIRED, LIMITS)
    assert state.phase is Phase.SUMMARY
    assert state.offered == ()


def test_every_tool_belongs_to_some_phase_and_writes_never_to_verify() -> None:
    offered = {name for tools in PHASE_TOOLS.values() for name in tools}
    assert offered == set(ALL_TOOLS)
    assert not {"write_file", "replace_in_file"} & set(PHASE_TOOLS[Phase.VERIFY])


@pytest.mark.parametrize(
    ("state", "tool"),
    [
        (RunState(), "run_verification"),
        (verifying(), "write_file"),
        (verifying(), "replace_in_file"),
    ],
)
def test_a_tool_the_phase_does_not_offer_is_refused_and_counted(state: RunState, tool: str) -> None:
    new, verdict = admit(state, tool, LIMITS)
    assert not verdict.allowed
    assert f"{tool} is not offered in the {state.phase.value} phase" in verdict.error
    assert new.invalid_calls == state.invalid_calls + 1
    assert new.phase is state.phase


def test_an_unknown_tool_is_refused_naming_the_offered_ones() -> None:
    new, verdict = admit(RunState(), "delete_repository", LIMITS)
    assert not verdict.allowed
    assert "no tool named 'delete_repository'" in verdict.error
    assert "read_file" in verdict.error
    assert new.invalid_calls == 1


def test_an_offered_tool_is_admitted_without_cost() -> None:
    new, verdict = admit(RunState(), "read_file", LIMITS)
    assert verdict.allowed
    assert new == RunState()


def test_repeated_invalid_calls_end_the_run_with_the_reason() -> None:
    state = RunState()
    for _ in range(LIMITS.max_invalid_calls):
        state, _ = admit(state, "rm_rf", LIMITS)
    assert state.ended is EndReason.INVALID_CALLS
    assert state.finished
    assert state.offered == ()


def test_ending_the_edit_turn_moves_to_verify_and_names_the_checks() -> None:
    state = verifying()
    assert state.phase is Phase.VERIFY
    assert "`pytest -q`" in state.note
    assert "`ruff check .`" in state.note


def test_summary_needs_every_required_check_passed_since_the_last_edit() -> None:
    state = after_check(verifying(), "pytest -q", True, REQUIRED, LIMITS)
    assert state.phase is Phase.VERIFY
    assert "ruff check ." in state.note
    state = after_check(state, "ruff check .", True, REQUIRED, LIMITS)
    assert state.phase is Phase.SUMMARY


def test_an_edit_forgets_earlier_passes() -> None:
    state = after_check(verifying(), "pytest -q", True, REQUIRED, LIMITS)
    assert after_edit(state).passed == frozenset()


def test_a_failed_check_returns_to_edit_for_a_repair_round() -> None:
    state = after_check(verifying(), "pytest -q", False, REQUIRED, LIMITS)
    assert state.phase is Phase.EDIT
    assert state.repair_rounds == 1
    assert "repair round 1 of 2" in state.note
    assert "write_file" in state.offered


def test_a_check_that_never_passes_ends_the_run_after_the_repair_rounds() -> None:
    state = verifying()
    for _ in range(LIMITS.max_repair_rounds):
        state = after_check(state, "pytest -q", False, REQUIRED, LIMITS)
        assert not state.finished
        state = after_text(state, REQUIRED, LIMITS)
    state = after_check(state, "pytest -q", False, REQUIRED, LIMITS)
    assert state.ended is EndReason.CHECKS_FAILED
    assert "still fails" in state.note


def test_claiming_done_in_verify_without_the_checks_is_an_invalid_move() -> None:
    state = after_text(verifying(), REQUIRED, LIMITS)
    assert state.phase is Phase.VERIFY
    assert state.invalid_calls == 1
    assert "not verified yet" in state.note


def test_the_summary_text_finishes_the_run() -> None:
    state = verifying()
    for command in REQUIRED:
        state = after_check(state, command, True, REQUIRED, LIMITS)
    done = after_text(state, REQUIRED, LIMITS)
    assert done.phase is Phase.DONE
    assert done.finished
    assert done.ended is None


def test_the_turn_limit_ends_the_run() -> None:
    state = RunState()
    for _ in range(LIMITS.max_turns):
        state = begin_turn(state, LIMITS)
        assert state.ended is None
    state = begin_turn(state, LIMITS)
    assert state.ended is EndReason.TURN_LIMIT


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_turns"):
        HarnessLimits(max_turns=0)
