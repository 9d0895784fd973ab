"""The loop's one-time replies on Steward's pull request to a follow-up ask that starts no
round (docs/concepts/follow-ups.md): only collaborators can ask, the rounds are used up or
turned off, or a person's push took the branch over; and to a round that failed (why, and
that the branch is as it was).

The decision to reply is durable first: the receiver or the loop's refusal adds the reply's
kind to the task's `pending_replies` (once per task and kind: `replied` keeps what was
sent). The loop's `Reply` then comes here: the comment carries a hidden marker naming the
task and the kind, so a retried tick finds the comment it wrote instead of writing a second;
then the kind moves from pending to replied with a `follow_up_replied` event.

One kind is no comment: `related` (`steward.domain.order.RELATED`), decided by the loop
from state alone (a task in review whose item waits for others, not yet in `replied`),
rewrites the related section of those others' pull requests to link this one
(`steward.services.publication.with_related`): each body is read and edited only when its
section differs, so a repeat writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from steward.adapters.installation_store import InstallationStore
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.domain import order
from steward.domain.follow_ups import failed_round_of, reply_body, reply_marker
from steward.domain.models import Task, TaskStatus
from steward.domain.order import RELATED
from steward.domain.redaction import Redactor
from steward.services.publication import related_section, with_related
from steward.services.withdrawal import PullCloser, installation_for

logger = logging.getLogger(__name__)


class PullLinker(PullCloser, Protocol):
    """What replies use of the GitHub App: comments, and pull request bodies."""

    def pull_body(self, installation_id: int, repo: str, number: int) -> str: ...

    def edit_pull_body(self, installation_id: int, repo: str, number: int, body: str) -> None: ...


@dataclass
class Replies:
    tasks: TaskStore
    installations: InstallationStore
    github: Callable[[], PullLinker]  # built on first use: the App's client is heavy
    plans: PlanStore | None = None  # None: no related pull requests are linked

    def reply(self, task_id: str, kind: str, *, now: datetime) -> bool:
        """Write reply `kind` on the task's pull request once (nothing when the task left
        review meanwhile: nobody is waiting for it); True when this call recorded it."""
        task = self.tasks.get(task_id)
        if task is not None and kind == RELATED and kind not in task.replied:
            written = task.status is TaskStatus.REVIEW and self._link_related(task)
            return self.tasks.clear_reply(task, kind, written=written, now=now)
        if task is None or kind not in task.pending_replies:
            return False
        written = False
        if task.status is TaskStatus.REVIEW and task.pr_number is not None:
            installation = installation_for(self.installations, task)
            github = self.github()
            marker = reply_marker(task.id, kind)
            if github.find_comment(installation, task.repo, task.pr_number, marker) is None:
                failed = failed_round_of(kind)
                body = reply_body(task, kind, failed_round=self.tasks.get(failed) if failed else None)
                github.comment(installation, task.repo, task.pr_number, Redactor().redact(body))
                written = True
        done = self.tasks.clear_reply(task, kind, written=written, now=now)
        logger.info("follow-up reply", extra={"task_id": task.id, "kind": kind, "written": written})
        return done

    def _link_related(self, task: Task) -> bool:
        """Link `task`'s pull request from those of the items its item waits for; True when
        a body changed."""
        plan = self.plans.get(task.user, task.plan_slug) if self.plans is not None else None
        item = plan.item(task.item_key) if plan is not None else None
        if plan is None or item is None:
            return False
        befores = plan.predecessors(item)
        around = {i for b in befores for i in (b, *plan.predecessors(b), *order.dependents(plan, b))}
        tasks = {t.id: t for t in self.tasks.get_many([i.task_id for i in around if i.task_id])}
        changed = False
        for before in befores:
            other = tasks.get(before.task_id or "")
            if other is None or other.pr_number is None:
                continue
            section = Redactor().redact(related_section(plan.slug, order.related(plan, before, tasks)))
            github = self.github()
            installation = installation_for(self.installations, other)
            body = github.pull_body(installation, other.repo, other.pr_number)
            rewritten = with_related(body, section)
            if rewritten != body:
                github.edit_pull_body(installation, other.repo, other.pr_number, rewritten)
                changed = True
        return changed
