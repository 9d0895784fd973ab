"""The loop's status comment on each of Steward's pull requests (docs/concepts/github.md).

The loop decides from state alone (`steward.domain.status_comment.status_due`: the task's
shown key differs from the one stored after the last write) and comes here with `ShowStatus`.
The comment is rendered from the task, its required checks' last results (its `check` events,
or those of its last answered round) and the plan's rounds; then:

* with the comment's id known, one edit (a comment a person deleted is written anew);
* otherwise the hidden marker is looked for first, so a lost answer to an earlier creation or
  a retried tick never writes a second comment;
* then the key (and the id) is stored on the task, conditional on the task being as it was
  rendered; a finished task then leaves the live index, which kept it in the loop's sight
  until its comment showed how it ended.

A failure (rate limit, 5xx) fails only this action: the task's state moved already, and the
next tick tries again within the loop's GitHub bound. Without a GitHub App, nothing is
written and the key is stored all the same, so no finished task lingers in the index.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from steward.adapters.event_store import EventStore
from steward.adapters.installation_store import InstallationStore
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.domain.models import Task, TaskStatus
from steward.domain.reconcile import allowed_rounds
from steward.domain.redaction import Redactor
from steward.domain.status_comment import StatusView, marker, render, shown_key, status_due
from steward.services.withdrawal import installation_for

logger = logging.getLogger(__name__)


class CommentWriter(Protocol):
    """What the status comment uses of the GitHub App."""

    def find_comment(self, installation_id: int, repo: str, number: int, marker: str) -> int | None: ...

    def comment(self, installation_id: int, repo: str, number: int, body: str) -> int: ...

    def edit_comment(self, installation_id: int, repo: str, comment_id: int, body: str) -> bool: ...


@dataclass
class StatusComments:
    tasks: TaskStore
    events: EventStore
    plans: PlanStore
    installations: InstallationStore
    github: Callable[[], CommentWriter] | None  # None: no GitHub App (nothing is written)
    console_url: str | None = None
    app_slug: str = "steward"

    def show(self, task_id: str, *, now: datetime) -> bool:
        """Bring the task's status comment up to date; True when this call stored its key."""
        task = self.tasks.get(task_id)
        if task is None or not status_due(task):
            return False
        comment_id = task.status_comment_id
        if self.github is not None:
            assert task.pr_number is not None  # status_due
            body = Redactor().redact(render(self.view(task)))
            github = self.github()
            installation = installation_for(self.installations, task)
            if comment_id is None or not github.edit_comment(installation, task.repo, comment_id, body):
                comment_id = github.find_comment(installation, task.repo, task.pr_number, marker(task.id))
                if comment_id is None or not github.edit_comment(installation, task.repo, comment_id, body):
                    comment_id = github.comment(installation, task.repo, task.pr_number, body)
        stored = self.tasks.record_status_shown(task, key=shown_key(task), comment_id=comment_id)
        logger.info("status comment", extra={"task_id": task.id, "comment_id": comment_id, "stored": stored})
        return stored

    def view(self, task: Task) -> StatusView:
        plan = self.plans.get(task.user, task.plan_slug)
        return StatusView(
            task=task,
            rounds_allowed=allowed_rounds(task, plan),
            checks=self._last_checks(task),
            console_url=self.console_url,
            app_slug=self.app_slug,
        )

    def _last_checks(self, task: Task) -> list[Mapping[str, Any]]:
        """The last result of each required check: of the last round that answered (its
        commit is the head), else of the task's own run."""
        source = task.id
        for number in range(task.rounds_settled, 0, -1):
            answered = [
                t for t in self.tasks.round_attempts(task.id, number) if t.status is TaskStatus.ANSWERED
            ]
            if answered:
                source = answered[-1].id
                break
        return last_results(task.checks, [e.get("data") or {} for e in self.events.of_type(source, "check")])


def last_results(required: Sequence[str], checks: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Of `checks` (in the order they ran), the last result of each `required` command, in the
    plan's order; a required check that never ran is left out."""
    last = {str(c.get("command")): c for c in checks}
    return [last[command] for command in required if command in last]
