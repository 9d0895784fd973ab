"""The plan and task lifecycles of DESIGN section 3, as pure functions."""

from __future__ import annotations

import pytest
from steward.domain import lifecycle
from steward.domain.errors import LifecycleError
from steward.domain.models import PlanStatus as P
from steward.domain.models import TaskStatus as T


@pytest.mark.parametrize(
    ("status", "expected"),
    [(P.DRAFT, P.CONFIRMED), (P.AWAITING_CONFIRMATION, P.CONFIRMED), (P.CONFIRMED, P.CONFIRMED)],
)
def test_confirm_allowed(status: P, expected: P) -> None:
    assert lifecycle.confirm(status) is expected


@pytest.mark.parametrize("status", [P.IN_PROGRESS, P.COMPLETED, P.ARCHIVED])
def test_confirm_refused(status: P) -> None:
    with pytest.raises(LifecycleError) as caught:
        lifecycle.confirm(status)
    assert caught.value.status == 409


def test_submit() -> None:
    assert lifecycle.submit(P.DRAFT) is P.AWAITING_CONFIRMATION
    assert lifecycle.submit(P.AWAITING_CONFIRMATION) is P.AWAITING_CONFIRMATION
    for status in (P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED, P.ARCHIVED):
        with pytest.raises(LifecycleError):
            lifecycle.submit(status)


def test_archive_from_any_non_terminal_state() -> None:
    for status in (P.DRAFT, P.AWAITING_CONFIRMATION, P.CONFIRMED, P.IN_PROGRESS, P.ARCHIVED):
        assert lifecycle.archive(status) is P.ARCHIVED
    with pytest.raises(LifecycleError):
        lifecycle.archive(P.COMPLETED)


def test_publish_status() -> None:
    assert lifecycle.after_publish(None, content_changed=True) is P.DRAFT
    for status in P:
        if status is P.ARCHIVED:
            with pytest.raises(LifecycleError):
                lifecycle.after_publish(status, content_changed=False)
            continue
        assert lifecycle.after_publish(status, content_changed=False) is status
    assert lifecycle.after_publish(P.DRAFT, content_changed=True) is P.DRAFT
    for status in (P.AWAITING_CONFIRMATION, P.CONFIRMED, P.IN_PROGRESS, P.COMPLETED):
        assert lifecycle.after_publish(status, content_changed=True) is P.AWAITING_CONFIRMATION


def test_loop_transitions() -> None:
    assert lifecycle.start_work(P.CONFIRMED) is P.IN_PROGRESS
    assert lifecycle.complete(P.IN_PROGRESS) is P.COMPLETED
    for status in (P.DRAFT, P.AWAITING_CONFIRMATION, P.ARCHIVED):
        with pytest.raises(LifecycleError):
            lifecycle.start_work(status)
        with pytest.raises(LifecycleError):
            lifecycle.complete(status)


ALLOWED = {
    (T.QUEUED, T.RUNNING),
    (T.QUEUED, T.FAILED),
    (T.QUEUED, T.CANCELLED),
    (T.RUNNING, T.REVIEW),
    (T.RUNNING, T.MERGED),
    (T.RUNNING, T.CLOSED),
    (T.RUNNING, T.FAILED),
    (T.RUNNING, T.CANCELLED),
    (T.REVIEW, T.MERGED),
    (T.REVIEW, T.CLOSED),
    (T.FAILED, T.REVIEW),
    (T.FAILED, T.MERGED),
    (T.FAILED, T.CLOSED),
    (T.CLOSED, T.MERGED),
}


@pytest.mark.parametrize("current", list(T))
@pytest.mark.parametrize("target", list(T))
def test_task_transitions(current: T, target: T) -> None:
    if current is target or (current, target) in ALLOWED:
        assert lifecycle.task_transition(current, target) is target
    else:
        with pytest.raises(LifecycleError):
            lifecycle.task_transition(current, target)


def test_merged_and_cancelled_are_final() -> None:
    for target in T:
        if target is not T.MERGED:
            with pytest.raises(LifecycleError):
                lifecycle.task_transition(T.MERGED, target)
        if target is not T.CANCELLED:
            with pytest.raises(LifecycleError):
                lifecycle.task_transition(T.CANCELLED, target)
