"""Resync: the heartbeat asks GitHub what became of pull requests whose webhooks may never
have come (the rules: `steward.domain.resync`).

Per tick and user, at most `policy.max_calls` GitHub calls: first the checks that gate a
retry (a retryable failure whose runtime opened a pull request before it died is revived
to that pull request's state, never retried on a new branch; a closed task whose pull
request a person reopened is back in review, and no second pull request is opened), then
the review tasks whose last observation is oldest, then the tasks whose pull request a
person closed within `policy.closed_window` (`recently_closed`: a reopen or a merge whose
delivery was lost is found). Each is asked with the ETag of its previous answer, so an
unchanged pull request is a 304 that costs no rate limit. A task in review also has its
asks read (docs/concepts/follow-ups.md): the check runs and commit statuses of its head
(conditional too, so 3 calls, all 304s, for a pull request with nothing new), and, when the
pull request changed (GitHub moves its `updated_at` on a review or a comment; its base
moving changes it too), whether it still merges (a conflict is an ask) and its reviews and
comments newer than the last read (`asks_read_at`). A review task whose repository took a
merge of another of Steward's pull requests since its last look is looked at at once. What they ask is recorded exactly
as a delivery's would be (`steward.services.asks`: once per GitHub object and round key),
so a lost delivery still starts its round. A state found is
assigned exactly as a webhook would assign it: the same idempotent transition, a
`github_event` event with `source: resync`, the watermark advanced. A rate limit or a
GitHub failure stops the sweep for this tick and moves the next attempt out; it never
fails the tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

from steward.adapters.github import GitHubError, InstallationRead, PullMergeability, PullObservation
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain import resync
from steward.domain.errors import LifecycleError
from steward.domain.follow_ups import PullAt, conflict_trigger, rest_triggers
from steward.domain.installations import Installation
from steward.domain.models import ItemStatus, Plan, PlanStatus, Task, TaskStatus, iso
from steward.domain.webhooks import Reopened, refresh_change, reopened, sync_from_map, target_status
from steward.services.asks import AskReader, Asks
from steward.services.installations import sync_installation

logger = logging.getLogger(__name__)
T = TypeVar("T")

BACKOFF_AFTER_FAILURE = timedelta(seconds=60)
# At most, new asks aside: the listing, mergeability, 3 conversation reads, checks, statuses.
CALLS_PER_REVIEW = 7


class PullObserver(AskReader, Protocol):
    """The part of the GitHub App resync uses (`steward.adapters.github.GitHubApp`)."""

    def observe_pull(
        self, installation_id: int, repo: str, branch: str, *, etag: str | None = None
    ) -> PullObservation: ...

    def read_installation(self, installation_id: int) -> InstallationRead: ...

    def mergeability(self, installation_id: int, repo: str, number: int) -> PullMergeability | None: ...

    def reviews(self, installation_id: int, repo: str, number: int) -> list[dict[str, Any]]: ...

    def issue_comments(
        self, installation_id: int, repo: str, number: int, *, since: str | None = None
    ) -> list[dict[str, Any]]: ...


@dataclass
class Sweep:
    """One tick's use of GitHub for one user."""

    budget: int
    calls: int = 0
    moved: list[str] = field(default_factory=list)
    owned: list[Installation] | None = None  # the user's installations, read once per tick
    holders: dict[str, list[int]] = field(default_factory=dict)  # repo -> installation ids
    failed_at: datetime | None = None  # GitHub refused or failed: no more calls this tick
    bases: dict[str, datetime] = field(default_factory=dict)  # repo -> when a merge moved its base

    @property
    def open(self) -> bool:
        return self.failed_at is None and self.calls < self.budget


@dataclass
class Resync:
    tasks: TaskStore
    installations: InstallationStore
    github: Callable[[], PullObserver]  # built on first use: the App's client is heavy
    policy: resync.ResyncPolicy = field(default_factory=resync.ResyncPolicy)
    app_slug: str = "steward"

    def __post_init__(self) -> None:
        self.asks = Asks(self.tasks, self.github)

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
        self,
        sweep: Sweep,
        user: str,
        live: list[Task],
        *,
        now: datetime,
        closed: list[Task] | None = None,
        plans: Sequence[Plan] = (),
    ) -> None:
        """Re-read installations whose deliveries disagreed, then observe the review tasks
        that fall due, then the `closed` ones still watched, oldest observation first,
        within budget."""
        self._refresh_disputed(sweep, user, now=now)
        observed = [*live, *(closed or ())]
        sweep.bases = merged_into(plans)
        for task in resync.due(
            observed, now, self.policy, budget=sweep.budget - sweep.calls, moved=sweep.bases
        ):
            in_review = task.status is TaskStatus.REVIEW and task.pr_number is not None
            if not sweep.open or (in_review and sweep.budget - sweep.calls < CALLS_PER_REVIEW):
                return
            observation = self._observe(sweep, task, etag=task.github_etag, now=now)
            if observation is None:
                return
            read: dict[str, Any] = {}
            if in_review and _stays_in_review(observation):
                heard = self._read_asks(sweep, task, observation, now=now)
                if heard is None:  # out of calls, or GitHub failed: the task is due again
                    return
                read, unsure = heard
                if unsure:  # mergeability not computed yet: keep the old ETag, read in full again
                    observation = replace(observation, etag=None)
            if observation.changed and observation.pull is not None:
                self._assign(sweep, task, observation, now=now, read=read)
            else:  # unchanged (304), or no pull request listed: look again next period
                self.tasks.record_observation(task, now=now, etag=observation.etag, also=read)

    def next_due(self, sweep: Sweep, live: list[Task], *, now: datetime) -> datetime | None:
        """When the loop must tick again for resync (the user's `due_at`); `live` with the
        closed tasks still watched."""
        if sweep.failed_at is not None:
            return sweep.failed_at + BACKOFF_AFTER_FAILURE
        waiting = [t for t in live if t.id not in sweep.moved]
        upcoming = resync.next_due(waiting, self.policy, now)
        if any(resync.base_moved(t, sweep.bases) for t in waiting):
            return now  # a merge moved its base: looked at without waiting (a conflict sends nothing)
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
        return self._ask(
            sweep,
            task,
            lambda: self.github().observe_pull(holders[0], task.repo, task.branch, etag=etag),
            now=now,
        )

    def _read_asks(
        self, sweep: Sweep, task: Task, observation: PullObservation, *, now: datetime
    ) -> tuple[dict[str, Any], bool] | None:
        """Record what the pull request of `task` (in review) asks that no delivery brought:
        its head's failing checks, and (the pull request changed) whether it still merges and
        the reviews and comments newer than the last read. (What the task records of the
        reading: the ETags, the newest time read; whether GitHub had yet to compute
        mergeability), or None when this tick cannot finish it."""
        pull = observation.pull
        head = pull.head_sha if pull is not None and pull.head_sha else task.head_sha
        holders = sweep.holders.get(task.repo) or []
        if head is None or task.pr_number is None or not holders:
            return {}, False
        at = PullAt(task.repo, holders[0], task.pr_number, task.branch, head)
        github = self.github()
        conversation: dict[str, list[dict[str, Any]]] = {}
        since = task.asks_read_at
        triggers = []
        unsure = False  # GitHub has not computed whether it merges: ask again next period
        if observation.changed:
            merge = self._ask(
                sweep,
                task,
                lambda: github.mergeability(at.installation_id, at.repository, at.number),
                now=now,
            )
            if merge is None and not sweep.open:
                return None
            if merge is not None and merge.mergeable is False and merge.state == "dirty":
                triggers.append(conflict_trigger(at, base_ref=merge.base_ref, base_sha=merge.base_sha))
            unsure = merge is not None and merge.mergeable is None
            for name, read_list in (
                ("reviews", lambda: github.reviews(at.installation_id, at.repository, at.number)),
                (
                    "review_comments",
                    lambda: github.review_comments(at.installation_id, at.repository, at.number, since=since),
                ),
                (
                    "issue_comments",
                    lambda: github.issue_comments(at.installation_id, at.repository, at.number, since=since),
                ),
            ):
                items = self._ask(sweep, task, read_list, now=now)
                if items is None:
                    return None
                conversation[name] = [i for i in items if _said_at(i) >= (since or "")]
        etags = task.github_etags
        runs = self._ask(
            sweep,
            task,
            lambda: github.check_runs(at.installation_id, at.repository, head, etag=etags.get("check_runs")),
            now=now,
        )
        statuses = self._ask(
            sweep,
            task,
            lambda: github.commit_statuses(
                at.installation_id, at.repository, head, etag=etags.get("statuses")
            ),
            now=now,
        )
        if runs is None or statuses is None:
            return None
        triggers += rest_triggers(
            at, self.app_slug, check_runs=runs.items, statuses=statuses.items, **conversation
        )
        calls = self.asks.calls
        for trigger in triggers:
            if trigger.source not in task.ask_sources:
                self.asks.record(task, trigger, now=now, origin={"found_by": "resync"})
        # a new ask's own reads (its review's comments, its author's access, the base's check)
        sweep.calls += self.asks.calls - calls
        said = [_said_at(i) for items in conversation.values() for i in items]
        read: dict[str, Any] = {
            "github_etags": {
                k: v for k, v in (("check_runs", runs.etag), ("statuses", statuses.etag)) if v is not None
            }
        }
        if said:
            read["asks_read_at"] = max([*said, since or ""])
        return read, unsure

    def _ask(self, sweep: Sweep, task: Task, call: Callable[[], T], *, now: datetime) -> T | None:
        """One counted GitHub call of this tick's sweep; None when none is left or it failed."""
        if not sweep.open:
            return None
        sweep.calls += 1
        try:
            return call()
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

    def _assign(
        self,
        sweep: Sweep,
        task: Task,
        observation: PullObservation,
        *,
        now: datetime,
        read: Mapping[str, Any] | None = None,
    ) -> bool:
        pull = observation.pull
        assert pull is not None
        target = target_status(state=pull.state, merged=pull.merged)
        seen = {"github_observed_at": iso(now), "pr_url": pull.url, "pr_number": pull.number, **(read or {})}
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
            self.tasks.record_observation(task, now=now, etag=observation.etag, also=read)
            return False
        if not changed:
            self.tasks.record_observation(task, now=now, etag=observation.etag, also=read)
            return False
        self.tasks.project_item(moved, now=now)
        sweep.moved.append(task.id)
        logger.info("resync moved task to %s", moved.status.value, extra={"task_id": task.id})
        return True


def _stays_in_review(observation: PullObservation) -> bool:
    """The pull request of a task in review is open as far as this observation tells."""
    pull = observation.pull
    return not observation.changed or (pull is not None and pull.state == "open" and not pull.merged)


def _said_at(item: Mapping[str, Any]) -> str:
    """When a review was submitted or a comment last changed (GitHub's ISO form sorts)."""
    return str(item.get("submitted_at") or item.get("updated_at") or "")


def merged_into(plans: Sequence[Plan]) -> dict[str, datetime]:
    """repository -> the latest change of a plan of it with a merged item (when another of
    Steward's pull requests may have moved the base: `domain.resync.base_moved`)."""
    moved: dict[str, datetime] = {}
    for plan in plans:
        if plan.status is PlanStatus.ARCHIVED:
            continue
        for repo in {plan.item_repo(i) for i in plan.items if i.status is ItemStatus.MERGED}:
            moved[repo] = max(moved.get(repo, plan.updated_at), plan.updated_at)
    return moved
