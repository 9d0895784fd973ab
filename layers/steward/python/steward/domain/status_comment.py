"""The status comment on Steward's pull request (docs/concepts/github.md): one per pull
request, found by a hidden marker and edited in place as the task moves.

`render` is a pure function of durable state: the task (with what it records of its rounds),
the last results of its required checks, the rounds its approval allows and, when configured,
the console's address. `shown_key` is the part of the task the comment depends on: the loop
updates the comment when it differs from the key stored after the last write (`status_due`),
so each status change costs one edit and a repeated tick none.

Everything taken from people, the model or a repository (titles, reasons, check commands) is
made inert: one line, Markdown punctuation escaped, no HTML, no mention or reference that
pings (`@name`, `#12`), no image.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from steward.domain.failures import failure_of
from steward.domain.models import PlanKind, Task, TaskStatus

MAX_TEXT_CHARS = 300  # a title or reason shown inline
MAX_CHECKS_SHOWN = 20


def marker(task_id: str) -> str:
    return f"<!-- steward-status: {task_id} -->"


def status_due(task: Task) -> bool:
    """`task` has a pull request of its own and its status comment does not show it as it is."""
    return (
        task.kind is PlanKind.WORK
        and not task.is_round
        and task.pr_number is not None
        and task.status_shown != shown_key(task)
    )


def shown_key(task: Task) -> str:
    """What of `task` the comment shows, as a short digest (checks are fixed by then)."""
    parts = (
        task.status.value,
        task.reason or "",
        task.failure_code or "",
        str(task.rounds_used),
        str(task.rounds_settled),
        str(task.cost_usd),
        str(task.pr_number),
        str(bool(task.pr_close_pending)),
    )
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StatusView:
    task: Task
    rounds_allowed: int
    checks: Sequence[Mapping[str, Any]] = ()  # the last result of each required check
    console_url: str | None = None
    app_slug: str = "steward"


_HEADLINES = {
    TaskStatus.REVIEW: "In review: this pull request waits for a person.",
    TaskStatus.MERGED: "Merged. Steward's work on this item is done.",
    TaskStatus.CLOSED: "Closed without merging.",
    TaskStatus.FAILED: "Failed.",
    TaskStatus.CANCELLED: "Cancelled.",
}


def render(view: StatusView) -> str:
    task = view.task
    headline = _HEADLINES.get(task.status, f"{task.status.value.capitalize()}.")
    if task.status is TaskStatus.CLOSED and task.reason == "withdrawn":
        headline = "Withdrawn: a person cancelled the task, so Steward closes this pull request."
    running_round = task.rounds_used > task.rounds_settled and task.status is TaskStatus.REVIEW
    if running_round:
        headline = f"Follow-up round {task.rounds_used} is at work on this pull request."
    item = f"item {task.ordinal} of plan `{_code(task.plan_slug)}`: {inert(task.title)}"
    lines = [marker(task.id), f"**Steward** · {headline}", "", f"- **Work:** {item}"]
    if view.console_url:
        lines.append(
            f"- **Watch:** [task `{task.id}` in the console]({_task_link(view.console_url, task.id)})"
        )
    else:
        lines.append(f"- **Task:** `{task.id}` (attempt {task.attempt})")
    remaining = max(task.budget_usd - task.cost_usd, Decimal("0"))
    lines.append(f"- **Cost:** ${task.cost_usd:.4f} of ${task.budget_usd:.2f}; ${remaining:.4f} left")
    lines.append(_rounds_line(view, running_round))
    failure = failure_of(task)
    if failure is not None:
        lines += [
            f"- **Why:** `{failure.code.value}`: {inert(failure.detail or '')}",
            f"- **What to do** ({failure.who.value}): {inert(failure.remedy)}",
        ]
    lines += ["", *_checks_table(view.checks)]
    return "\n".join(lines) + "\n"


def _rounds_line(view: StatusView, running: bool) -> str:
    task = view.task
    used = f"{task.rounds_used} of {view.rounds_allowed} used"
    if task.status is not TaskStatus.REVIEW:
        return f"- **Follow-up rounds:** {used}."
    if running:
        return f"- **Follow-up rounds:** {used}; the next request waits for this one."
    if task.rounds_used >= view.rounds_allowed:
        return f"- **Follow-up rounds:** {used}; none left: push a fix yourself or close and retry."
    return (
        f"- **Follow-up rounds:** {used}. To ask for a change, request changes in a review, or "
        f"comment with a line starting `/steward` (or mention `{_code('@' + view.app_slug)}`)."
    )


def _checks_table(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    if not checks:
        return ["No required check has run in the sandbox yet."]
    lines = ["| Required check | Last result in the sandbox |", "| --- | --- |"]
    for check in list(checks)[:MAX_CHECKS_SHOWN]:
        passed = check.get("passed")
        result = "passed" if passed else f"failed (exit {inert(str(check.get('exit_code', '?')))})"
        lines.append(f"| `{_code(str(check.get('command', '')))}` | {result} |")
    return lines


def _task_link(console_url: str, task_id: str) -> str:
    base = console_url if console_url.endswith("/") else console_url + "/"
    return f"{base}#/tasks/{task_id}"


_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
_PINGS = re.compile(r"([@#])(?=[\w-])")


def inert(text: str) -> str:
    """`text` as one line that renders as itself: no HTML, no link, image, mention or
    reference (a zero-width space after `@` and `#` keeps GitHub from linking them)."""
    line = " ".join(text.split())
    if len(line) > MAX_TEXT_CHARS:
        line = line[: MAX_TEXT_CHARS - 1] + "…"
    line = line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    line = _PUNCTUATION.sub(r"\\\1", line)
    return _PINGS.sub("\\1\u200b", line)


_IMAGE = re.compile(r"!(?=\[)")


def tame(text: str) -> str:
    """Markdown from the model (a summary) kept readable but made harmless: no HTML, no image,
    no mention or reference that pings."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _PINGS.sub("\\1\u200b", _IMAGE.sub("\\\\!", text))


def _code(text: str) -> str:
    """`text` for inside a one-backtick code span: inert by itself (no backtick to end it)."""
    line = " ".join(text.split()).replace("`", "'")
    return line[: MAX_TEXT_CHARS - 1] + "…" if len(line) > MAX_TEXT_CHARS else line
