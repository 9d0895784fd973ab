"""Resync: the heartbeat asks GitHub what became of pull requests whose webhooks may never
have come (the rules: `steward.domain.resync`).

Per tick and user, at most `policy.max_calls` GitHub calls: first the checks that gate a
retry (a retryable failure whose runtime opened a pull request before it died is revived
to that pull request's state, never retried on a new branch; a closed task whose pull
request a person reopened is back in review, and no second pull request is opened), then
the review tasks whose last observation is oldest, then the tasks whose pull request a
person closed within `policy.closed_window` (`recently_closed`: a reopen or a merge whose
delivery was lost is found). Each is asked with the ETag of its previous answer, so an
unchanged pull request is a 304 that costs no rate limit. A state found is
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

from steward.adapters.github import GitHubError, InstallationRead, PullObservation
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain import resync
from steward.domain.errors import LifecycleError
from steward.domain.installations import Installation
from steward.domain.models import ItemStatus, Plan, PlanStatus, Task, TaskStatus, iso
from steward.domain.webhooks import Reopened, refresh_change, reopened, sync_from_map, target_status
from steward.services.installations import sync_installation

logger = logging.getLogger(__name__)

BACKOFF_AFTER_FAILURE = timedelta(seconds=60)


class PullObserver(Protocol):
    """The part of the GitHub App resync uses (`steward.adapters.github.GitHubApp`)."""

    def observe_pull(
        self, installation_id: int, repo: str, branch: str, *, etag: str | None = None
    ) -> PullObservation: ...

    def read_installation(self, installation_id: int) -> InstallationRead: ...


@dataclass
class Sweep:
    """One tick's use of GitHub for one user."""

    budget: int
    calls: int = 0
    moved: list[str] = field(default_factory=list)
    owned: list[Installation] | None = None  # the user's installations, read once per tick
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
        that moves it (a failed task's runtime opened one; a closed task's was reopened, or
        merged after all; a withdrawn task's reopened one is to be closed again first): do
        not retry now. False when there is none, or it stays closed (retry); None when
        GitHub could not be asked this tick (wait)."""
        task = self.tasks.get(previous_task_id)
        if task is None or task.status not in (TaskStatus.FAILED, TaskStatus.CLOSED):
            return False
        observation = self._observe(sweep, task, etag=None, now=now)
        if observation is None:
            return None
        if observation.pull is None:
            return False
        return self._assign(sweep, task, observation, now=now)

    def recently_closed(self, plans: list[Plan], *, now: datetime) -> list[Task]:
        """The tasks whose pull request a person closed within the window
        (`domain.resync.watched_closed`), found from what the plans' items say (no request
        when no item of a plan changed within the window is closed), then read in one batch."""
        since = now - self.policy.closed_window
        ids = [
            item.task_id
            for plan in plans
            if plan.status is not PlanStatus.ARCHIVED and plan.updated_at > since
            for item in plan.items
            if item.status is ItemStatus.CLOSED and item.task_id and not item.removed
        ]
        return [t for t in self.tasks.get_many(ids) if resync.watched_closed(t, now, self.policy)]

    def sweep_review(
        self, sweep: Sweep, user: str, live: list[Task], *, now: datetime, closed: list[Task] | None = None
    ) -> None:
        """Re-read installations whose deliveries disagreed, then observe the review tasks
        that fall due, then the `closed` ones still watched, oldest observation first,
        within budget."""
        self._refresh_disputed(sweep, user, now=now)
        observed = [*live, *(closed or ())]
        for task in resync.due(observed, now, self.policy, budget=sweep.budget - sweep.calls):
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
        """When the loop must tick again for resync (the user's `due_at`); `live` with the
        closed tasks still watched."""
        if sweep.failed_at is not None:
            return sweep.failed_at + BACKOFF_AFTER_FAILURE
        upcoming = resync.next_due([t for t in live if t.id not in sweep.moved], self.policy, now)
        if upcoming is not None and upcoming <= now:  # more fell due than the budget allowed
            return now
        return upcoming

    # ---- steps

    def _observe(
        self, sweep: Sweep, task: Task, *, etag: str | None, now: datetime
    ) -> PullObservation | None:
        if not sweep.open:
            return None
        if task.repo not in sweep.holders:
            owned = self._owned(sweep, task.user)
            sweep.holders[task.repo] = sorted(i.installation_id for i in owned if i.holds(task.repo))
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

    def _owned(self, sweep: Sweep, user: str) -> list[Installation]:
        if sweep.owned is None:  # one read of the user's installations per tick
            sweep.owned = self.installations.for_owner(user)
        return sweep.owned

    def _refresh_disputed(self, sweep: Sweep, user: str, *, now: datetime) -> None:
        """Deliveries stamped alike disagreed about an installation: ask GitHub's API rather
        than guess (`steward.domain.webhooks.refresh_change`)."""
        for installation in self._owned(sweep, user):
            if not installation.needs_refresh or not sweep.open:
                continue
            sweep.calls += 1
            try:
                read = self.github().read_installation(installation.installation_id)
            except GitHubError as exc:
                logger.warning("installation refresh stopped for this tick: %s", exc.message)
                sweep.failed_at = now
                return
            _, raw, _ = self.installations.get_synced(installation.installation_id)
            change = refresh_change(
                sync_from_map(raw, installation),
                installation_id=read.installation_id,
                updated_at=read.updated_at,
                account=read.account,
                suspended=read.suspended,
                repositories=read.repositories,
            )
            sync_installation(self.installations, change, now=now)
            sweep.holders.clear()  # what the installations hold may have changed
            sweep.owned = None

    def _assign(self, sweep: Sweep, task: Task, observation: PullObservation, *, now: datetime) -> bool:
        pull = observation.pull
        assert pull is not None
        target = target_status(state=pull.state, merged=pull.merged)
        seen = {"github_observed_at": iso(now), "pr_url": pull.url, "pr_number": pull.number}
        if observation.etag:
            seen["github_etag"] = observation.etag
        if reopened(task, target, action=None) is Reopened.CLOSE_AGAIN:
            data = {"source": "resync", "number": pull.number, "url": pull.url, "merged": pull.merged}
            again = self.tasks.close_again(task, data, now=now)
            logger.info(
                "resync: a withdrawn task's pull request is open; the loop closes it again",
                extra={"task_id": task.id},
            )
            return again
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
