"""`GET /v1/tasks/{id}/rounds`: a task's follow-up rounds as the console's task page lists
them (docs/concepts/follow-ups.md). Each round says what asked for it (the kind, and who or
which check: never the ask's text, which the task's `follow_up_asked` event holds), where it
is, the commit it pushed once answered, its required checks with their last verdicts, and
what it cost. 404 for another user's task, as every task route; a round has no rounds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from steward.domain.models import Task, TaskStatus, iso


class RoundTrigger(BaseModel):
    """The ask a round answers, as the webhook receiver recorded it
    (`steward.domain.follow_ups:trigger_record`), without its texts."""

    model_config = ConfigDict(frozen=True)

    kind: str  # review, mention, check, conflict
    source: str | None = None  # "review:<id>", "check_run:<id>", ...
    author: str | None = None  # who asked (a review or a mention)
    check_name: str | None = None  # which check failed (a check)
    conclusion: str | None = None
    url: str | None = None  # the ask on GitHub
    head_sha: str | None = None  # the commit it was asked on


class RoundCheck(BaseModel):
    model_config = ConfigDict(frozen=True)

    command: str
    passed: bool | None  # the last `check` event's verdict; None: not run


class RoundView(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    round: int
    attempt: int  # a round failing retryably is tried again, as a task is
    status: str
    classification: str | None
    reason: str | None
    trigger: RoundTrigger | None
    commit: str | None  # the commit it pushed: the pull request's head once it answered
    checks: list[RoundCheck]
    cost_usd: str
    budget_usd: str
    created_at: str
    updated_at: str


class RoundsAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    task_id: str
    rounds_used: int
    follow_ups: int | None
    rounds: list[RoundView]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def round_trigger(ask: Mapping[str, Any] | None) -> RoundTrigger | None:
    if not ask or not _text(ask.get("kind")):
        return None
    fields = ("source", "author", "check_name", "conclusion", "url", "head_sha")
    return RoundTrigger(kind=str(ask["kind"]), **{name: _text(ask.get(name)) for name in fields})


def round_checks(task: Task, check_events: Sequence[Mapping[str, Any]]) -> list[RoundCheck]:
    """As the task page shows a task's checks: its required commands (what the approved plan
    said when it spawned), each with its last `check` event's verdict, or the commands it ran
    when it requires none."""
    verdicts: dict[str, bool] = {}
    for event in check_events:
        data = event.get("data") or {}
        if isinstance(data.get("command"), str):
            verdicts[data["command"]] = data.get("passed") is True
    commands = list(task.checks) or list(verdicts)
    return [RoundCheck(command=c, passed=verdicts.get(c)) for c in commands]


def round_commit(task: Task) -> str | None:
    """The commit an answered round pushed. A round starts with its parent's head (the commit
    asked on); its ending records the pull request's new head: any other is not its own."""
    if task.status is not TaskStatus.ANSWERED or not task.head_sha:
        return None
    asked_on = (task.trigger or {}).get("head_sha")
    return None if task.head_sha == asked_on else task.head_sha


def round_view(task: Task, check_events: Sequence[Mapping[str, Any]]) -> RoundView:
    return RoundView(
        id=task.id,
        round=task.round,
        attempt=task.attempt,
        status=task.status.value,
        classification=task.classification.value if task.classification else None,
        reason=task.reason,
        trigger=round_trigger(task.trigger),
        commit=round_commit(task),
        checks=round_checks(task, check_events),
        cost_usd=str(task.cost_usd),
        budget_usd=str(task.budget_usd),
        created_at=iso(task.created_at),
        updated_at=iso(task.updated_at),
    )


def rounds_answer(parent: Task, rounds: Sequence[tuple[Task, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """{"task_id", "rounds_used", "follow_ups", "rounds": [RoundView, ...]}, oldest first."""
    answer = RoundsAnswer(
        task_id=parent.id,
        rounds_used=parent.rounds_used,
        follow_ups=parent.follow_ups,
        rounds=[round_view(task, events) for task, events in rounds],
    )
    return answer.model_dump(mode="json")
