"""Which tasks the loop asks GitHub about (in review; closed by a person lately), and when it
must tick again for them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from steward.domain.models import Task, TaskStatus
from steward.domain.resync import ResyncPolicy, due, next_due

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
POLICY = ResyncPolicy(period=timedelta(minutes=15), max_calls=3)


def task(
    n: int,
    status: TaskStatus = TaskStatus.REVIEW,
    *,
    changed: int = 0,
    observed: int | None = None,
    reason: str | None = None,
) -> Task:
    return Task(
        id=f"t{n:03d}",
        user="alice",
        plan_id="p",
        plan_slug="demo",
        item_key=f"k{n}",
        ordinal=n,
        revision=1,
        attempt=1,
        status=status,
        branch=f"steward/{n:024d}",
        repo="octo/demo",
        model="scripted",
        budget_usd=Decimal("1"),
        title="x",
        created_at=T0,
        updated_at=T0 + timedelta(minutes=changed),
        github_observed_at=None if observed is None else T0 + timedelta(minutes=observed),
        reason=reason,
        pr_number=None if status in (TaskStatus.RUNNING, TaskStatus.QUEUED) else n,
    )


def test_only_review_tasks_a_period_old_are_due_oldest_first_within_the_budget() -> None:
    tasks = [
        task(1, changed=10),  # entered review at +10: due from +25
        task(2, changed=0, observed=20),  # looked at +20: due from +35
        task(3, changed=0),  # due from +15
        task(4, TaskStatus.RUNNING),  # not waiting on GitHub
        task(5, changed=0, observed=1),  # due from +16
        task(6, changed=0),
    ]
    now = T0 + timedelta(minutes=30)
    assert [t.id for t in due(tasks, now, POLICY, budget=3)] == ["t003", "t006", "t005"]
    assert [t.id for t in due(tasks, now, POLICY, budget=10)] == ["t003", "t006", "t005", "t001"]
    assert due(tasks, now, POLICY, budget=0) == []
    assert due(tasks, T0 + timedelta(minutes=14), POLICY, budget=10) == []


def test_the_next_resync_is_when_the_oldest_review_task_falls_due() -> None:
    now = T0 + timedelta(minutes=1)
    assert next_due(
        [task(1, changed=5), task(2, observed=2), task(3, TaskStatus.RUNNING)], POLICY, now
    ) == T0 + timedelta(minutes=17)
    assert next_due([task(3, TaskStatus.RUNNING), task(4, TaskStatus.MERGED)], POLICY, now) is None


def test_pull_requests_a_person_closed_are_watched_for_a_window_after_the_review_tasks() -> None:
    """A reopen (or a merge after it) whose delivery was lost is found: a task a person closed
    is observed like a review task, after them, until `closed_window` has passed; one that
    Steward withdrew is not (its reopen is closed again by the loop)."""
    closed, withdrawn = task(1, TaskStatus.CLOSED), task(2, TaskStatus.CLOSED, reason="withdrawn")
    review = task(3, changed=5)
    now = T0 + timedelta(minutes=30)
    assert [t.id for t in due([closed, withdrawn, review], now, POLICY, budget=3)] == ["t003", "t001"]
    assert [t.id for t in due([closed, review], now, POLICY, budget=1)] == ["t003"]
    assert next_due([closed, withdrawn], POLICY, now) == T0 + timedelta(minutes=15)
    later = T0 + POLICY.closed_window + timedelta(minutes=1)
    assert due([closed], later, POLICY, budget=3) == []
    assert next_due([closed, withdrawn], POLICY, later) is None


def test_a_review_task_whose_base_took_a_merge_since_its_last_look_is_due_at_once_and_first() -> None:
    """GitHub sends no event when a pull request stops merging: after another of Steward's pull
    requests merged into the repository, its review tasks are looked at without waiting."""
    other = task(6, observed=-10).model_copy(update={"repo": "octo/other"})  # due by its period
    tasks = [task(1, observed=5), task(2, observed=1), task(3, changed=0), other]
    now = T0 + timedelta(minutes=15, seconds=30)
    assert [t.id for t in due(tasks, now, POLICY, budget=10)] == ["t006", "t003"]
    merged = {"octo/demo": T0 + timedelta(minutes=3)}  # after t002's look and t003's change, before t001's
    assert [t.id for t in due(tasks, now, POLICY, budget=10, moved=merged)] == ["t003", "t002", "t006"]
    assert [t.id for t in due(tasks, now, POLICY, budget=2, moved=merged)] == ["t003", "t002"]
