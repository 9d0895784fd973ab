"""Withdrawal: the loop closes the pull request of a task a person cancelled in review.

The withdrawal itself is one conditional write of the API's cancel (`TaskStore.cancel`):
the task becomes `closed`, reason `withdrawn` (final), and is marked `pr_close_pending`, so
the decision is durable before GitHub is touched. The loop's `ClosePull`
(`steward.domain.reconcile`) then comes here, every tick until the mark is cleared:

1. The task is read again; a cleared mark (a retried tick, a merge since) ends it.
2. The owner's live installation that holds the repository is the one asked.
3. The pull request is Steward's own: the open one whose head is the task's exact branch
   (`steward/<suffix>`) in the task's repository, correlated as publication and webhooks
   correlate it; no other pull request is ever touched.
4. When it is open: its comments are searched for the one this task's withdrawal writes
   (a hidden marker names the task), the comment is written only if absent, then the pull
   request is closed. Comment first, so a closed pull request says the work is done; a
   crash between the two finds the comment and writes no second one.
5. When GitHub says it was merged (a person merged it first), the task becomes `merged`
   exactly as a webhook would move it, which also ends the wait.
6. Otherwise the mark is cleared, with a `pr_closed` event, conditionally on the mark.

A GitHub failure raises (the tick is partial and the next one starts over at step 1). The
`pull_request` `closed` webhook GitHub sends for the close finds the task closed already
and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from steward.adapters.github import PullRef, PullState
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain.errors import Conflict
from steward.domain.models import Task, TaskStatus
from steward.domain.withdrawal import comment_body, comment_marker

logger = logging.getLogger(__name__)


class PullCloser(Protocol):
    """The part of the GitHub App a withdrawal uses (`steward.adapters.github.GitHubApp`)."""

    def find_pull(
        self, installation_id: int, repo: str, branch: str, state: PullState = "all"
    ) -> PullRef | None: ...

    def find_comment(self, installation_id: int, repo: str, number: int, marker: str) -> int | None: ...

    def comment(self, installation_id: int, repo: str, number: int, body: str) -> int: ...

    def close_pull(self, installation_id: int, repo: str, number: int) -> PullRef: ...


def installation_for(installations: InstallationStore, task: Task) -> int:
    """The owner's live installation that holds the task's repository: the one the loop asks."""
    holders = sorted(i.installation_id for i in installations.for_owner(task.user) if i.holds(task.repo))
    if not holders:
        raise Conflict(
            f"no live installation of the owner holds {task.repo}: its pull request is reached once one does"
        )
    return holders[0]


@dataclass
class Withdrawals:
    tasks: TaskStore
    installations: InstallationStore
    github: Callable[[], PullCloser]  # built on first use: the App's client is heavy

    def close(self, task_id: str, *, now: datetime) -> bool:
        """Carry out the withdrawal of `task_id` on GitHub (the steps above). True when this
        call ended the wait, False when there was nothing left to do."""
        task = self.tasks.get(task_id)
        if task is None or not task.pr_close_pending:
            return False
        installation = installation_for(self.installations, task)
        github = self.github()
        pull = github.find_pull(installation, task.repo, task.branch, state="all")
        commented = False
        if pull is not None and pull.state == "open":
            marker = comment_marker(task.id)
            if github.find_comment(installation, task.repo, pull.number, marker) is None:
                github.comment(
                    installation, task.repo, pull.number, comment_body(task.id, task.withdrawn_by or "")
                )
                commented = True
            pull = github.close_pull(installation, task.repo, pull.number)
        if pull is not None and pull.merged:
            return self._merged(task, pull, now=now)
        data: dict[str, object] = {"number": None, "url": None, "commented": commented}
        if pull is not None:
            data |= {"number": pull.number, "url": pull.url}
        done = self.tasks.finish_withdrawal(task, data, now=now)
        logger.info("withdrawn task's pull request closed", extra={"task_id": task.id, **data})
        return done

    def _merged(self, task: Task, pull: PullRef, *, now: datetime) -> bool:
        """A person merged the pull request after all: assigned as a webhook would."""
        moved, changed = self.tasks.transition(
            task,
            TaskStatus.MERGED,
            now=now,
            event="github_event",
            data={"source": "withdrawal", "number": pull.number, "url": pull.url, "merged": True},
            extra={"pr_url": pull.url, "pr_number": pull.number},
        )
        if changed:
            self.tasks.project_item(moved, now=now)
        logger.info("withdrawn task's pull request was merged", extra={"task_id": task.id})
        return changed
