"""Resync: the heartbeat asks GitHub what became of pull requests whose webhooks may never
have come (the rules: `steward.domain.resync`).

Per tick and user, at most `policy.max_calls` GitHub calls: first the checks that gate a
retry (a retryable failure whose runtime opened a pull request before it died is revived
to that pull request's state, never retried on a new branch), then the review tasks whose
last observation is oldest. Each review task is asked with the ETag of its previous
answer, so an unchanged pull request is a 304 that costs no rate limit. A state found is
assigned exactly as a webhook would assign it: the same idempotent transition, a
`github_event` event with `source: resync`, the watermark advanced. A rate limit or a
GitHub failure stops the sweep for this tick and moves the next attempt out; it never
fails the tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from steward.adapters.github import GitHubError, PullObservation
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain import resync
from steward.domain.errors import LifecycleError
from steward.domain.models import Task, TaskStatus, iso
from steward.domain.webhooks import target_status

logger = logging.getLogger(__name__)

BACKOFF_AFTER_FAILURE = timedelta(seconds=60)


class PullObserver(Protocol):
    """The part of the GitHub App resync uses (`steward.adapters.github.GitHubApp`)."""

    def observe_pull(
        self, installation_id: int, repo: str, branch: str, *, etag: str | None = None
    ) -> PullObservation: ...


@dataclass
class Sweep:
    """One tick's use of GitHub for one user."""

    budget: int
    calls: int = 0
    moved: list[str] = field(default_factory=list)
    holders: dict[str, list[int]] = field(default_factory=dict)  # repo -> installation ids
    failed_at: datetime | None = None  # GitHub refused or failed: no more calls this tick

    @property
    def open(self) -> bool:
        return self.failed_at is None and self.calls < self.budget


@dataclass
class Resync:
    tasks: TaskStore
    installations: InstallationStore
    github: Callable[[], PullObserver]  # built on first use: the App's client is heavy
    policy: resync.ResyncPolicy = field(default_factory=resync.ResyncPolicy)

    def start(self) -> Sweep:
        return Sweep(budget=self.policy.max_calls)

    def revived(self, sweep: Sweep, previous_task_id: str, *, now: datetime) -> bool | None:
        """Before a retry of `previous_task_id`: True when its branch has a pull request
        (the task was moved to that pull request's state: do not retry), False when it has
        none (retry), None when GitHub could not be asked this tick (wait)."""
        task = self.tasks.get(previous_task_id)
        if task is None or task.status is not TaskStatus.FAILED:
            return False
        observation = self._observe(sweep, task, etag=None, now=now)
        if observation is None:
            return None
        if observation.pull is None:
            return False
        return self._assign(sweep, task, observation, now=now)

    def sweep_review(self, sweep: Sweep, live: list[Task], *, now: datetime) -> None:
        """Observe the review tasks that fall due, oldest observation first, within budget."""
        for task in resync.due(live, now, self.policy, budget=sweep.budget - sweep.calls):
            if not sweep.open:
                return
            observation = self._observe(sweep, task, etag=task.github_etag, now=now)
            if observation is None:
                return
            if observation.changed and observation.pull is not None:
                self._assign(sweep, task, observation, now=now)
            else:  # unchanged (304), or no pull request listed: look again next period
                self.tasks.record_observation(task, now=now, etag=observation.etag)

    def next_due(self, sweep: Sweep, live: list[Task], *, now: datetime) -> datetime | None:
        """When the loop must tick again for resync (the user's `due_at`)."""
        if sweep.failed_at is not None:
            return sweep.failed_at + BACKOFF_AFTER_FAILURE
        upcoming = resync.next_due([t for t in live if t.id not in sweep.moved], self.policy)
        if upcoming is not None and upcoming <= now:  # more fell due than the budget allowed
            return now
        return upcoming

    # ---- steps

    def _observe(
        self, sweep: Sweep, task: Task, *, etag: str | None, now: datetime
    ) -> PullObservation | None:
        if not sweep.open:
            return None
        if task.repo not in sweep.holders:  # one read of the user's installations per tick
            owned = self.installations.for_owner(task.user)
            for repo in {t for i in owned for t in i.repositories} | {task.repo}:
                sweep.holders[repo] = sorted(i.installation_id for i in owned if i.holds(repo))
        holders = sweep.holders[task.repo]
        if not holders:  # suspended or gone: nothing to ask; the installation's events tell
            return PullObservation(False, None, etag)
        sweep.calls += 1
        try:
            return self.github().observe_pull(holders[0], task.repo, task.branch, etag=etag)
        except GitHubError as exc:
            logger.warning(
                "resync stopped for this tick: %s", exc.message, extra={"task_id": task.id, "user": task.user}
            )
            sweep.failed_at = now
            return None

    def _assign(self, sweep: Sweep, task: Task, observation: PullObservation, *, now: datetime) -> bool:
        pull = observation.pull
        assert pull is not None
        target = target_status(state=pull.state, merged=pull.merged)
        seen = {"github_observed_at": iso(now), "pr_url": pull.url, "pr_number": pull.number}
        if observation.etag:
            seen["github_etag"] = observation.etag
        try:
            moved, changed = self.tasks.transition(
                task,
                target,
                now=now,
                event="github_event",
                data={"source": "resync", "number": pull.number, "url": pull.url, "merged": pull.merged},
                extra=seen,
                lifecycle_event=True,
            )
        except LifecycleError as exc:  # e.g. GitHub says open again after Steward saw it closed
            logger.info("resync changed nothing: %s", exc.message, extra={"task_id": task.id})
            self.tasks.record_observation(task, now=now, etag=observation.etag)
            return False
        if not changed:
            self.tasks.record_observation(task, now=now, etag=observation.etag)
            return False
        self.tasks.project_item(moved, now=now)
        sweep.moved.append(task.id)
        logger.info("resync moved task to %s", moved.status.value, extra={"task_id": task.id})
        return True
