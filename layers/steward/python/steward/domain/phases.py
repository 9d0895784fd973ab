"""The runner's phase machine (docs/concepts/runner.md): which tools a turn offers, and what each
model move does to the run. Pure: the harness feeds it moves and obeys what it answers.

    edit (inspect and change) --model ends its turn--> verify
    verify --every required check passed since the last edit--> summary
    verify --a check failed--> edit (a repair round; too many end the run)
    summary --the model's text--> done

A call to a tool the phase does not offer, or to no tool at all, or with arguments that are
not valid text, is answered as a recoverable error and never executed; too many of them end
the run. The turn limit bounds
everything else. Authority stays here, in code: the model cannot widen what a phase offers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Phase(StrEnum):
    EDIT = "edit"
    VERIFY = "verify"
    SUMMARY = "summary"
    DONE = "done"


READ_TOOLS = ("list_files", "search_text", "read_file")
WRITE_TOOLS = ("write_file", "replace_in_file")
VERIFY_TOOL = "run_verification"
ALL_TOOLS = (*READ_TOOLS, *WRITE_TOOLS, VERIFY_TOOL)
PHASE_TOOLS: dict[Phase, tuple[str, ...]] = {
    Phase.EDIT: (*READ_TOOLS, *WRITE_TOOLS),
    Phase.VERIFY: (*READ_TOOLS, VERIFY_TOOL),
    Phase.SUMMARY: (),
    Phase.DONE: (),
}


class EndReason(StrEnum):
    """Why a run ended without reaching `done`; each is a final failure."""

    TURN_LIMIT = "turn_limit"
    TIME_LIMIT = "time_limit"
    INVALID_CALLS = "invalid_calls"
    CHECKS_FAILED = "checks_failed"


class HarnessLimits(BaseModel):
    """Bounds of one run (configuration; `STEWARD_RUNNER_*` variables override them)."""

    model_config = ConfigDict(frozen=True)

    max_turns: int = Field(default=40, ge=1, le=500)
    max_invalid_calls: int = Field(default=6, ge=1, le=100)
    max_repair_rounds: int = Field(default=3, ge=0, le=50)
    max_seconds: float = Field(default=1800.0, gt=0, le=6 * 3600)
    max_output_tokens: int = Field(default=4096, ge=256, le=64_000)
    max_result_chars: int = Field(default=12_000, ge=1000, le=200_000)
    max_conversation_bytes: int = Field(default=600_000, ge=50_000, le=1_000_000)


@dataclass(frozen=True)
class Verdict:
    """Whether a tool call may run; `error` is the recoverable message otherwise."""

    allowed: bool
    error: str = ""


@dataclass(frozen=True)
class RunState:
    phase: Phase = Phase.EDIT
    turns: int = 0
    invalid_calls: int = 0
    repair_rounds: int = 0
    edits: int = 0
    passed: frozenset[str] = field(default_factory=frozenset)  # checks passed since the last edit
    ended: EndReason | None = None
    note: str = ""  # guidance for the model's next turn, set by the last move

    @property
    def finished(self) -> bool:
        return self.phase is Phase.DONE or self.ended is not None

    @property
    def offered(self) -> tuple[str, ...]:
        return () if self.finished else PHASE_TOOLS[self.phase]


def _enter(state: RunState, phase: Phase, note: str) -> RunState:
    return replace(state, phase=phase, note=note)


def begin_turn(state: RunState, limits: HarnessLimits) -> RunState:
    """Count a model turn; past the limit the run ends."""
    turns = state.turns + 1
    if turns > limits.max_turns:
        return replace(state, ended=EndReason.TURN_LIMIT, note=f"the run used its {limits.max_turns} turns")
    return replace(state, turns=turns, note="")


def _invalid(state: RunState, limits: HarnessLimits, error: str) -> tuple[RunState, Verdict]:
    count = state.invalid_calls + 1
    ended = EndReason.INVALID_CALLS if count >= limits.max_invalid_calls else None
    return replace(state, invalid_calls=count, ended=ended or state.ended), Verdict(False, error)


def admit(state: RunState, name: str, limits: HarnessLimits) -> tuple[RunState, Verdict]:
    """May the model's call to `name` run in this phase? A refusal counts as an invalid call."""
    if name not in ALL_TOOLS:
        return _invalid(state, limits, f"there is no tool named {name[:64]!r}; use one of: {_list(state)}")
    if name not in state.offered:
        hint = {
            Phase.EDIT: "end your turn without a tool call when the change is complete, to verify it",
            Phase.VERIFY: "files cannot change while verifying; a failing check returns you to editing",
            Phase.SUMMARY: "answer with the summary text only",
        }.get(state.phase, "")
        return _invalid(
            state,
            limits,
            f"{name} is not offered in the {state.phase.value} phase ({hint}); offered: {_list(state)}",
        )
    return state, Verdict(True)


def refuse_arguments(state: RunState, limits: HarnessLimits, error: str) -> tuple[RunState, Verdict]:
    """A call to an offered tool whose arguments cannot be used at all (text that is not
    valid Unicode): a model fault, answered like a call that is not offered, counted as an
    invalid call, never run."""
    return _invalid(state, limits, error)


def _list(state: RunState) -> str:
    return ", ".join(state.offered) or "none"


def after_edit(state: RunState) -> RunState:
    """A successful write: earlier passes no longer vouch for the tree."""
    return replace(state, edits=state.edits + 1, passed=frozenset())


def after_check(
    state: RunState, command: str, passed: bool, required: frozenset[str], limits: HarnessLimits
) -> RunState:
    """A verification command ran. All required checks passed since the last edit ->
    summary; a failure -> back to edit for a repair round, or the end of the run."""
    if passed:
        done = state.passed | {command}
        if required <= done:
            return _enter(
                replace(state, passed=done),
                Phase.SUMMARY,
                "every required check passed; now summarize the change for the pull request",
            )
        missing = ", ".join(sorted(required - done))
        return replace(state, passed=done, note=f"passed; still to run: {missing}")
    rounds = state.repair_rounds + 1
    if rounds > limits.max_repair_rounds:
        return replace(
            state,
            repair_rounds=rounds,
            ended=EndReason.CHECKS_FAILED,
            note=f"{command} still fails after {limits.max_repair_rounds} repair rounds",
        )
    return _enter(
        replace(state, repair_rounds=rounds, passed=frozenset()),
        Phase.EDIT,
        f"{command} failed: fix the cause (repair round {rounds} of {limits.max_repair_rounds}), "
        "then end your turn to verify again",
    )


def after_text(state: RunState, required: frozenset[str], limits: HarnessLimits) -> RunState:
    """The model ended its turn without a tool call."""
    if state.phase is Phase.EDIT:
        return _enter(state, Phase.VERIFY, "run every required check with run_verification: " + _q(required))
    if state.phase is Phase.VERIFY:
        missing = required - state.passed
        new, _ = _invalid(state, limits, "")
        return replace(new, note="the change is not verified yet; run: " + _q(missing))
    if state.phase is Phase.SUMMARY:
        return _enter(state, Phase.DONE, "")
    return state


def _q(commands: frozenset[str]) -> str:
    return ", ".join(f"`{c}`" for c in sorted(commands))
