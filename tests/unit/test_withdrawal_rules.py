"""The comment a withdrawal writes on Steward's pull request (`steward.domain.withdrawal`)."""

from __future__ import annotations

from steward.domain.withdrawal import comment_body, comment_marker


def test_the_comment_names_the_user_and_carries_the_tasks_marker() -> None:
    body = comment_body("t123", "alice")
    assert body.startswith("Withdrawn by `alice` through Steward: the task was cancelled while in review.")
    assert comment_marker("t123") in body
    assert comment_marker("t1234") not in body  # one task's marker is not another's
    assert comment_marker("t123").startswith("<!--")  # hidden when GitHub renders it


def test_a_hostile_user_name_mentions_nobody_and_stays_one_bounded_code_span() -> None:
    body = comment_body("t1", "@octocat`\n@everyone " + "x" * 500)
    first = body.splitlines()[0]
    assert first.count("`") == 2  # the name cannot close its code span
    assert "\n@everyone" not in body
    assert len(first) < 200
    assert "`a user`" in comment_body("t1", "\n")
