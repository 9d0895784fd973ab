"""Follow-up rounds as the loop and the runtimes leave them, written to the stores directly
(docs/concepts/follow-ups.md): an item's task whose pull request was merged after two rounds,
a review's that answered with a commit and a failing check's that failed. Every task is
terminal, so a running loop never acts on them, and a plan awaiting confirmation spawns
nothing of its own meanwhile."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from steward.adapters.dynamo import Tables
from steward.adapters.task_store import TaskStore, task_to_item
from steward.domain.models import Classification, Plan, Task, TaskStatus, utcnow
from steward.domain.tasks import round_for, task_for
from steward.tables import TASKS

ASKED_ON = "a1" * 20  # the head the task pushed, which the review asked about
PUSHED = "b2" * 20  # the commit round 1 pushed, which the check then failed on
REVIEWER = "octo-reviewer"
FAILING_CHECK = "tests (3.11)"
FAILED_BECAUSE = "the required checks still fail after the model's repairs"


@dataclass(frozen=True)
class Seeded:
    parent: Task
    answered: Task  # round 1: a review requesting changes, answered with PUSHED
    failed: Task  # round 2: a failing check on PUSHED, failed (no commit)


def seed_rounds(tables: Tables, plan: Plan, *, pr_base: str = "https://github.com") -> Seeded:
    """The first active item of `plan` (not confirmed: its loop spawns nothing) as a merged
    task with two rounds, their checks' events and what the parent recorded of them."""
    store, now = TaskStore(tables), utcnow()
    pr_url = f"{pr_base}/{plan.repo}/pull/7"
    item = plan.active_items[0]
    parent = task_for(plan, item, attempt=1, now=now - timedelta(minutes=10)).model_copy(
        update={"status": TaskStatus.REVIEW, "pr_url": pr_url, "pr_number": 7, "head_sha": ASKED_ON}
    )
    review = {
        "round_key": f"7:{ASKED_ON}:review",
        "kind": "review",
        "source": "review:11",
        "head_sha": ASKED_ON,
        "pull_number": 7,
        "author": REVIEWER,
        "author_association": "COLLABORATOR",
        "body": "Please name the arguments `a` and `b`.",
        "url": f"{pr_url}#pullrequestreview-11",
    }
    check = {
        "round_key": f"7:{PUSHED}:check",
        "kind": "check",
        "source": "check_run:21",
        "head_sha": PUSHED,
        "pull_number": 7,
        "check_name": FAILING_CHECK,
        "conclusion": "failure",
        "output": "1 failed",
    }
    answered = _ended(
        round_for(parent, plan, review, number=1, now=now - timedelta(minutes=8)),
        status=TaskStatus.ANSWERED,
        at=now - timedelta(minutes=6),
        cost="0.0123",
        head_sha=PUSHED,  # the pull request's head as its ending recorded it
    )
    failed = _ended(
        round_for(
            parent.model_copy(update={"head_sha": PUSHED}),
            plan,
            check,
            number=2,
            now=now - timedelta(minutes=5),
        ),
        status=TaskStatus.FAILED,
        at=now - timedelta(minutes=3),
        cost="0.0456",
        classification=Classification.FINAL,
        reason=FAILED_BECAUSE,
    )
    parent = parent.model_copy(
        update={
            "status": TaskStatus.MERGED,
            "head_sha": PUSHED,
            "rounds_used": 2,
            "follow_ups": 2,
            "deadline": None,
            "cost_usd": Decimal("0.1"),
            "updated_at": now,
        }
    )
    for task in (parent, answered, failed):
        tables.table(TASKS).put_item(Item=task_to_item(task))
    _checks(store, answered, [(False, "loop"), (True, "final")])  # repaired: its last verdict passed
    _checks(store, failed, [(False, "loop"), (False, "final")])
    for event, data in [
        ("follow_up_asked", review),
        ("follow_up_started", {"round_key": review["round_key"], "round": 1, "task_id": answered.id}),
        ("follow_up_answered", {"task_id": answered.id, "round": 1, "head_sha": PUSHED}),
        ("follow_up_asked", check),
        ("follow_up_started", {"round_key": check["round_key"], "round": 2, "task_id": failed.id}),
        ("follow_up_failed", {"task_id": failed.id, "round": 2, "reason": FAILED_BECAUSE}),
    ]:
        parent = store.append_event(parent, event, data, now=now)
    return Seeded(store.require(parent.id), store.require(answered.id), store.require(failed.id))


def _ended(
    task: Task,
    *,
    status: TaskStatus,
    at: datetime,
    cost: str,
    head_sha: str | None = None,
    classification: Classification | None = None,
    reason: str | None = None,
) -> Task:
    update: dict[str, Any] = {
        "status": status,
        "cost_usd": Decimal(cost),
        "deadline": None,
        "updated_at": at,
        "classification": classification,
        "reason": reason,
    }
    if head_sha is not None:
        update["head_sha"] = head_sha
    return task.model_copy(update=update)


def _checks(store: TaskStore, task: Task, verdicts: list[tuple[bool, str]]) -> None:
    """`check` events of the task's first required check, as its runtime appends them."""
    for passed, stage in verdicts:
        data = {"command": task.checks[0], "passed": passed, "exit_code": 0 if passed else 1, "stage": stage}
        task = store.append_event(task, "check", data, now=utcnow())
