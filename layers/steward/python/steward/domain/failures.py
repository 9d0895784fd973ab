"""Why a task failed, as the person reads it: one documented table of failure codes, each with
a remedy (one sentence) and who must act (docs/reference/codes.md).

The code is decided where the failure is known (the runner's ending, the reaper, the loop, a
person's cancel) and stored on the task (`Task.failure_code`); the remedy and who must act are
looked up here when the task is shown, so they read the same in the API, the CLI, the console
and the pull request's status comment. The free-text reason stays as the detail.

Who must act depends on more than the code: a retryable failure with attempts left is
nobody's to act on (Steward retries it); once the attempts are spent, the code's own `who`
applies. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from steward.domain.models import Task


class Who(StrEnum):
    """Who must act on a failure."""

    YOU = "you"
    REPOSITORY = "the repository"
    OPERATOR = "the operator"
    STEWARD = "nobody: Steward retries"


class FailureCode(StrEnum):
    """Every way a task fails or is cancelled (values are stable: clients and tests use them)."""

    CHECKS_FAIL_ON_BASE = "checks_fail_on_base"
    CHECKS_NEVER_PASSED = "checks_never_passed"
    BUDGET_SPENT = "budget_spent"
    MODEL_MADE_NO_CHANGE = "model_made_no_change"
    MODEL_DID_NOT_FINISH = "model_did_not_finish"
    MODEL_CANNOT_ANSWER = "model_cannot_answer"
    NESTED_REPOSITORY = "nested_repository"
    CREDENTIAL_IN_CHANGE = "credential_in_change"
    CHANGE_TOO_LARGE = "change_too_large"
    CONFLICT_UNRESOLVED = "conflict_unresolved"
    BRANCH_TAKEN_OVER = "branch_taken_over"
    SETUP_FAILED = "setup_failed"
    CLONE_FAILED = "clone_failed"
    PUBLISH_FAILED = "publish_failed"
    INSTALLATION_MISSING = "installation_missing"
    CANNOT_START = "cannot_start"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    RELAY_REFUSED = "relay_refused"
    RUNNER_ERROR = "runner_error"
    SANDBOX_TOO_WEAK = "sandbox_too_weak"
    DEADLINE = "deadline"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"
    UNRECORDED = "unrecorded"


@dataclass(frozen=True)
class Entry:
    remedy: str
    who: Who


_F = FailureCode
TABLE: dict[FailureCode, Entry] = {
    _F.CHECKS_FAIL_ON_BASE: Entry(
        "A required check already fails on the base branch: make it pass there (or fix the plan's "
        "`checks`, or set `baseline: false` if the item is meant to fix it), then retry.",
        Who.REPOSITORY,
    ),
    _F.CHECKS_NEVER_PASSED: Entry(
        "The model could not make the required checks pass: say more precisely what to change in "
        "the item, or split it, then retry.",
        Who.YOU,
    ),
    _F.BUDGET_SPENT: Entry(
        "The task spent its budget: raise the plan's `budget_usd` or split the item, then retry.",
        Who.YOU,
    ),
    _F.MODEL_MADE_NO_CHANGE: Entry(
        "The model changed no file: say what to change in the item's text, then retry.", Who.YOU
    ),
    _F.MODEL_DID_NOT_FINISH: Entry(
        "The model ran out of turns or time before finishing: make the item smaller or more "
        "precise, then retry.",
        Who.YOU,
    ),
    _F.MODEL_CANNOT_ANSWER: Entry(
        "The model cannot take this request (the detail says why): shorten or reword the item, or "
        "pick another `model`, then retry.",
        Who.YOU,
    ),
    _F.NESTED_REPOSITORY: Entry(
        "The change held a git repository inside the repository, which Steward never publishes: "
        "ask for the files instead, then retry.",
        Who.YOU,
    ),
    _F.CREDENTIAL_IN_CHANGE: Entry(
        "The change held a credential, which Steward never publishes: remove it from the "
        "repository or the item's text, then retry.",
        Who.YOU,
    ),
    _F.CHANGE_TOO_LARGE: Entry(
        "The change is larger than Steward scans for credentials: split the item, then retry.",
        Who.YOU,
    ),
    _F.CONFLICT_UNRESOLVED: Entry(
        "The merge with the base left conflicts the model did not resolve: resolve them on the "
        "branch yourself, or close the pull request and retry the item.",
        Who.YOU,
    ),
    _F.BRANCH_TAKEN_OVER: Entry(
        "Someone else pushed to Steward's branch, so Steward leaves it alone: carry on by hand, "
        "or delete the branch and retry.",
        Who.YOU,
    ),
    _F.SETUP_FAILED: Entry(
        "A `setup` command failed on a fresh clone: fix the command or the repository, then retry.",
        Who.REPOSITORY,
    ),
    _F.CLONE_FAILED: Entry(
        "The repository could not be cloned: check that it exists and the App can read it, then retry.",
        Who.OPERATOR,
    ),
    _F.PUBLISH_FAILED: Entry(
        "Pushing the branch or opening the pull request failed: check GitHub's status and the "
        "App's permissions, then retry.",
        Who.OPERATOR,
    ),
    _F.INSTALLATION_MISSING: Entry(
        "No installation of the GitHub App linked to you holds the repository: install the App "
        "on it (or ask the operator to link the installation), then retry.",
        Who.OPERATOR,
    ),
    _F.CANNOT_START: Entry(
        "The task could not start (the detail says why): fix what it names, then retry.", Who.YOU
    ),
    _F.PROVIDER_UNAVAILABLE: Entry(
        "The model provider kept failing: retry later, and tell the operator if it persists.",
        Who.OPERATOR,
    ),
    _F.RELAY_REFUSED: Entry(
        "Steward's relay refused Steward's own request (a Steward fault): tell the operator.",
        Who.OPERATOR,
    ),
    _F.RUNNER_ERROR: Entry(
        "The runner failed unexpectedly (a Steward fault): tell the operator, then retry.", Who.OPERATOR
    ),
    _F.SANDBOX_TOO_WEAK: Entry(
        "The runner's host cannot sandbox checks as strongly as Steward requires (bubblewrap, or "
        "seccomp for the confined mode; the detail says what it found): run runners where one works, "
        "or set STEWARD_RUNNER_ALLOW_WEAK_SANDBOX=1 to accept a weaker sandbox, then retry.",
        Who.OPERATOR,
    ),
    _F.DEADLINE: Entry(
        "The run stopped reporting before its deadline: retry, and tell the operator if it repeats.",
        Who.OPERATOR,
    ),
    _F.SUPERSEDED: Entry("The item's text changed: its new text runs as a new task.", Who.STEWARD),
    _F.CANCELLED: Entry("The task was stopped: retry it to run it again.", Who.YOU),
    _F.UNRECORDED: Entry("The task failed before failure codes were kept: read the detail.", Who.YOU),
}

RETRYING = "Steward retries it (attempt {attempt} of {max_attempts} failed)."


@dataclass(frozen=True)
class Failure:
    code: FailureCode
    remedy: str
    who: Who
    detail: str | None = None

    def to_api(self) -> dict[str, Any]:
        return {"code": self.code.value, "remedy": self.remedy, "who": self.who.value, "detail": self.detail}


def failure_of(task: Task) -> Failure | None:
    """The failure `task` ended with (failed or cancelled), or None: it did not fail."""
    # By value: models imports this module (a task's API form shows its failure).
    if task.status not in ("failed", "cancelled"):
        return None
    code = _code(task.failure_code, task.status == "cancelled")
    entry = TABLE[code]
    retrying = (
        task.status == "failed"
        and task.classification == "retryable"
        and not task.is_round
        and task.attempt < task.max_attempts
    )
    if retrying:
        remedy = RETRYING.format(attempt=task.attempt, max_attempts=task.max_attempts)
        return Failure(code, remedy, Who.STEWARD, task.reason)
    return Failure(code, entry.remedy, entry.who, task.reason)


def _code(stored: str | None, cancelled: bool) -> FailureCode:
    if stored is not None:
        try:
            return FailureCode(stored)
        except ValueError:
            pass  # a code a newer Steward wrote: shown as unrecorded, detail intact
    return FailureCode.CANCELLED if cancelled else FailureCode.UNRECORDED


def documented_table() -> list[dict[str, str]]:
    """The table as docs/reference/codes.md shows it (generated, so it cannot drift)."""
    return [{"code": c.value, "who": TABLE[c].who.value, "remedy": TABLE[c].remedy} for c in FailureCode]
