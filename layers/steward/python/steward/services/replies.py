"""The loop's one-time replies on Steward's pull request to a follow-up ask that starts no
round (README: "Follow-up rounds"): only collaborators can ask, the rounds are used up or
turned off, or a person's push took the branch over; and to a round that failed (why, and
that the branch is as it was).

The decision to reply is durable first: the receiver or the loop's refusal adds the reply's
kind to the task's `pending_replies` (once per task and kind: `replied` keeps what was
sent). The loop's `Reply` then comes here: the comment carries a hidden marker naming the
task and the kind, so a retried tick finds the comment it wrote instead of writing a second;
then the kind moves from pending to replied with a `follow_up_replied` event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain.follow_ups import failed_round_of, reply_body, reply_marker
from steward.domain.models import TaskStatus
from steward.domain.redaction import Redactor
from steward.services.withdrawal import PullCloser, installation_for

logger = logging.getLogger(__name__)


@dataclass
class Replies:
    tasks: TaskStore
    installations: InstallationStore
    github: Callable[[], PullCloser]  # built on first use: the App's client is heavy

    def reply(self, task_id: str, kind: str, *, now: datetime) -> bool:
        """Write reply `kind` on the task's pull request once (nothing when the task left
        review meanwhile: nobody is waiting for it); True when this call recorded it."""
        task = self.tasks.get(task_id)
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
