"""Withdrawing a task in review: what the loop writes on Steward's pull request (pure).

A person's cancel of a task in `review` closes it (reason `withdrawn`,
`steward.domain.lifecycle.cancel_target`) and marks it `pr_close_pending` in the same
conditional write; the loop then comments on the pull request and closes it
(`steward.services.withdrawal`). The comment carries a hidden marker naming the task, so a
retry after a crash between the comment and the close finds the comment it already wrote
instead of writing a second one.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[`\x00-\x1f\x7f]")
_USER_LIMIT = 100


def comment_marker(task_id: str) -> str:
    """Invisible in GitHub's rendering; how the loop recognizes its own comment."""
    return f"<!-- steward:withdrawn {task_id} -->"


def comment_body(task_id: str, user: str) -> str:
    """The comment on the withdrawn task's pull request. The user is shown as code, so a
    name such as `@someone` mentions nobody."""
    shown = _UNSAFE.sub("", user)[:_USER_LIMIT] or "a user"
    return (
        f"Withdrawn by `{shown}` through Steward: the task was cancelled while in review.\n\n"
        f"{comment_marker(task_id)}"
    )
