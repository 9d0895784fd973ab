"""One heartbeat for one user: gates, no-progress shortcut, lease, reconcile, apply.

Order (issue "reconciliation loop"): disabled/pause gate, interval gate (skipped when a person
acted since the last working tick: `LoopState.nudged`), quiet hours, then
the no-progress shortcut (one GetItem in all when nothing happened), then the in-flight
lease (conditional, with a fencing epoch), a fresh reload of plans and live tasks,
`reconcile`, and `apply`. The lease epoch fences the only non-idempotent write (spawn,
which also charges the daily cap); every other action is a conditional write that is
harmless when late or repeated.

Cancelling stops the runtime through the launcher (the one that started it). A spawn of a
new revision first fences the task it supersedes (`Spawn.supersedes`, recorded on the plan
item by publish and removed by the spawn itself): that task is cancelled if it is still
queued or running (the confirm's own cancel was lost), and a cancelled one has its runtime
stopped, so a runtime cancelled by the confirm in the API, which has no launcher, is
stopped before its successor starts. A task that reached review is left alone.

A task a person withdrew in review (`pr_close_pending`) has its pull request commented on
and closed through the GitHub App (`ClosePull`, `steward.services.withdrawal`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.adapters.user_store import UserStore
from steward.domain import gates
from steward.domain.errors import Conflict, LifecycleError
from steward.domain.follow_ups import settlement
from steward.domain.launch import Launcher
from steward.domain.loop import LoopState
from steward.domain.models import Plan, PlanStatus, Task, TaskStatus, utcnow
from steward.domain.reconcile import (
    SUPERSEDED,
    Action,
    Cancel,
    ClosePull,
    CompletePlan,
    Launch,
    MarkInProgress,
    Policy,
    RefuseAsk,
    RepairItem,
    Reply,
    SettleRound,
    ShowStatus,
    Spawn,
    StartRound,
    cancel_code,
    reconcile,
)
from steward.domain.status_comment import shown_key
from steward.domain.tasks import SpawnCharge, SpawnRefused, round_for, task_for
from steward.services.launching import launch_task
from steward.services.replies import Replies
from steward.services.resync import Resync, Sweep
from steward.services.status_comments import StatusComments
from steward.services.withdrawal import Withdrawals

logger = logging.getLogger(__name__)

LEASE_TTL = timedelta(seconds=90)


class Outcome(StrEnum):
    DISABLED = "disabled"
    PAUSED = "paused"
    INTERVAL = "interval"
    QUIET_HOURS = "quiet_hours"
    NO_PROGRESS = "no_progress"
    BUSY = "busy"  # another heartbeat holds the lease
    WORKED = "worked"
    PARTIAL = "partial"  # some action failed; the next tick will not take the shortcut


@dataclass(frozen=True)
class TickReport:
    user: str
    outcome: Outcome
    actions: tuple[Action, ...] = ()
    spawned: tuple[str, ...] = ()


@dataclass
class Heartbeat:
    users: UserStore
    plans: PlanStore
    tasks: TaskStore
    tickets: TicketStore
    launcher: Launcher
    clock: Callable[[], datetime] = utcnow
    owner: str = ""
    resync: Resync | None = None  # None: GitHub is not observed (no App configured)
    withdrawals: Withdrawals | None = None  # None: no App to close withdrawn pull requests with
    replies: Replies | None = None  # None: no App to reply on pull requests with
    status_comments: StatusComments | None = None  # None: no comment (the key is stored all the same)
    # The operators' global brake (`steward.services.brake.CachedBrake.engaged`): no spawns.
    brake: Callable[[], bool] = field(default=lambda: False)

    def __post_init__(self) -> None:
        self.owner = self.owner or f"hb-{uuid.uuid4().hex[:12]}"

    def tick(self, user: str) -> TickReport:
        now = self.clock()
        state = self.users.loop_state(user)
        # A person's action since the last working tick (confirm, retry, follow-up ask) is
        # not held back by the interval gate; the other gates hold (docs/concepts/loop.md).
        gate = gates.check(state.settings, last_tick_at=state.last_tick_at, now=now, nudged=state.nudged)
        if gate is not gates.Gate.OPEN:
            if gate is gates.Gate.DISABLED and state.live:
                self.users.leave_index(user)
            return TickReport(user, Outcome(gate.value))
        if not state.progressed(now):
            return TickReport(user, Outcome.NO_PROGRESS)
        leased = self.users.acquire_lease(user, owner=self.owner, now=now, ttl=LEASE_TTL)
        if leased is None:
            return TickReport(user, Outcome.BUSY)
        try:
            return self._work(leased, now)
        except Exception:
            # Release early so the redelivery need not wait for the lease to expire; the
            # watermark stays unprocessed, so the next tick does the work again.
            self.users.finish_tick(
                leased, now=self.clock(), processed_watermark=None, due_at=None, still_live=True, acted=False
            )
            raise

    def _work(self, state: LoopState, now: datetime) -> TickReport:
        plans = self.plans.all_for_user(state.user)
        live = self.tasks.live_for_user(state.user)
        day = gates.local_day(state.settings, now)
        policy = Policy(
            max_parallel=state.settings.max_parallel,
            spawns_left=state.spawns_left(day),
            max_open_prs=state.settings.max_open_prs,
        )
        decision = reconcile(plans, live, now, policy)
        # The brake is read only when there is a spawn to hold back (cached, at most 5 s stale).
        if any(isinstance(action, Spawn | StartRound) for action in decision.actions) and self.brake():
            logger.warning("spawns held by the operators' global brake", extra={"user": state.user})
            decision = reconcile(plans, live, now, replace(policy, spawning_stopped=True))
        sweep = self.resync.start() if self.resync is not None else None
        applier = _Apply(self, state, {p.slug: p for p in plans}, {t.id: t for t in live}, now, day, sweep)
        complete = applier.run(decision.actions)
        due = gates.next_local_midnight(state.settings, now) if decision.blocked_by_cap else None
        watched: list[Task] = []  # closed by a person lately: a lost reopen or merge is found
        if self.resync is not None and sweep is not None:
            # one a finished task's status comment keeps among the live ones is not read twice
            watched = [t for t in self.resync.recently_closed(plans, now=now) if t.id not in applier.live]
            self.resync.sweep_review(sweep, state.user, live, now=now, closed=watched, plans=plans)
            due = _earliest(due, self.resync.next_due(sweep, [*live, *watched], now=now))
        self.users.finish_tick(
            state,
            now=self.clock(),
            processed_watermark=state.watermark if complete and decision.settles else None,
            due_at=due,
            # the user stays scheduled while resync still watches a closed pull request
            still_live=decision.live_work or bool(applier.spawned) or bool(watched),
        )
        return TickReport(
            state.user,
            Outcome.WORKED if complete else Outcome.PARTIAL,
            decision.actions,
            tuple(applier.spawned),
        )


@dataclass
class _Apply:
    """Carries out one decision. Each action is safe to apply twice; a failed action is
    logged and makes the tick partial instead of aborting the rest."""

    beat: Heartbeat
    state: LoopState
    plans: dict[str, Plan]
    live: dict[str, Task]
    now: datetime
    day: str
    sweep: Sweep | None = None

    def __post_init__(self) -> None:
        self.spawned: list[str] = []
        self.spawn_blocked = False
        self.stopped: set[str] = set()  # tasks whose runtime this tick stopped

    def run(self, actions: tuple[Action, ...]) -> bool:
        complete = True
        for action in actions:
            try:
                self.apply(action)
            except (Conflict, LifecycleError) as exc:
                logger.info("action %s skipped: %s", type(action).__name__, exc.message)
                complete = False
            except Exception:  # one bad action must not stop the others; next tick retries
                logger.exception("action %s failed", type(action).__name__)
                complete = False
        return complete

    def apply(self, action: Action) -> None:
        beat = self.beat
        if isinstance(action, Spawn):
            self._spawn(action)
        elif isinstance(action, Launch):
            launch_task(
                self.live[action.task_id],
                launcher=beat.launcher,
                tickets=beat.tickets,
                tasks=beat.tasks,
                now=self.now,
            )
        elif isinstance(action, Cancel):
            cancelled = self._cancel(self.live[action.task_id], action.reason)
            plan = self.plans.get(cancelled.plan_slug)
            item = plan.item(cancelled.item_key) if plan else None
            if item is None or item.task_id == cancelled.id:  # a superseded item has moved on
                beat.tasks.project_item(cancelled, now=self.now)
        elif isinstance(action, MarkInProgress):
            beat.plans.mark_in_progress(self.state.user, action.plan_slug, now=self.now)
        elif isinstance(action, CompletePlan):
            beat.plans.complete(self.state.user, action.plan_slug, version=action.version, now=self.now)
        elif isinstance(action, RepairItem):
            found = beat.tasks.get(action.task_id)
            if found is not None:
                beat.tasks.project_item(found, now=self.now)
        elif isinstance(action, StartRound | RefuseAsk):
            self._answer_ask(action)
        elif isinstance(action, SettleRound):
            self._settle(action)
        elif isinstance(action, Reply | ClosePull | ShowStatus):
            self._on_github(action)

    def _answer_ask(self, action: StartRound | RefuseAsk) -> None:
        if isinstance(action, StartRound):
            self._start_round(action)
        else:
            self.beat.tasks.refuse_ask(
                self.live[action.task_id], action.round_key, action.reason, now=self.now
            )

    def _settle(self, action: SettleRound) -> None:
        """Read round `action.round`'s last attempt and have its task take account of it."""
        parent = self.live[action.task_id]
        plan = next((p for p in self.plans.values() if p.id == parent.plan_id), None)
        attempts = self.beat.tasks.round_attempts(parent.id, action.round)
        settled = settlement(
            attempts[-1] if attempts else None,
            retries=plan is not None and plan.status is not PlanStatus.ARCHIVED,
        )
        self.beat.tasks.settle_round(parent, action.round, settled, now=self.now)

    def _on_github(self, action: Reply | ClosePull | ShowStatus) -> None:
        beat = self.beat
        if isinstance(action, ShowStatus):
            if beat.status_comments is not None:
                beat.status_comments.show(action.task_id, now=self.now)
            elif (found := beat.tasks.get(action.task_id)) is not None:  # nothing to write it with
                beat.tasks.record_status_shown(found, key=shown_key(found), comment_id=None)
            return
        if isinstance(action, Reply):
            if beat.replies is None:
                raise Conflict("no GitHub App is configured: a reply cannot be written")
            beat.replies.reply(action.task_id, action.kind, now=self.now)
            return
        if beat.withdrawals is None:
            raise Conflict("no GitHub App is configured: a withdrawn pull request cannot be closed")
        beat.withdrawals.close(action.task_id, now=self.now)

    def _cancel(self, task: Task, reason: str) -> Task:
        """Cancel `task` (a no-op if it already is) and stop its runtime."""
        cancelled, _ = self.beat.tasks.transition(
            task,
            TaskStatus.CANCELLED,
            now=self.now,
            event="cancelled",
            classification="final",
            reason=reason,
            extra={"failure_code": cancel_code(reason)},
        )
        self.beat.launcher.stop(cancelled, cancelled.launch_ref)
        self.stopped.add(cancelled.id)
        return cancelled

    def _fence(self, task_id: str) -> None:
        """Before a new revision spawns: the task it supersedes is cancelled if still queued
        or running, and a cancelled one has its runtime stopped. One that reached review
        keeps its pull request; raises LifecycleError if it got there just now (the spawn
        waits for the next tick, which sees it in review)."""
        if task_id in self.stopped:
            return
        old = self.beat.tasks.get(task_id)
        if old is None:
            return
        if old.status in (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.CANCELLED):
            self._cancel(old, SUPERSEDED)

    def _charge(self) -> SpawnCharge:
        """One spawn of the day's cap under this tick's lease: the first of the day resets the
        counter, later ones of the same tick add to it."""
        same_day = self.state.spawn_day == self.day or bool(self.spawned)
        return SpawnCharge(self.day, self.state.settings.daily_spawn_cap, same_day, self.state.lease_epoch)

    def _charged(self, spawn: Callable[[SpawnCharge], tuple[Task, bool]]) -> None:
        """Run one spawn with its charge, then launch what it created."""
        if self.spawn_blocked:
            raise Conflict("an earlier spawn of this tick was refused by the loop state")
        try:
            created, is_new = spawn(self._charge())
        except SpawnRefused as exc:
            if exc.reason == "loop":
                self.spawn_blocked = True
            raise
        if is_new:
            self.spawned.append(created.id)
        if created.status is TaskStatus.QUEUED and created.launched_at is None:
            launch_task(
                created,
                launcher=self.beat.launcher,
                tickets=self.beat.tickets,
                tasks=self.beat.tasks,
                now=self.now,
            )

    def _start_round(self, action: StartRound) -> None:
        parent = self.live[action.task_id]
        plan = next((p for p in self.plans.values() if p.id == parent.plan_id), None)
        ask = next((a for a in parent.pending_asks if a.get("round_key") == action.round_key), None)
        if plan is None or ask is None:
            return
        round_task = round_for(parent, plan, ask, number=action.round, now=self.now)
        self._charged(
            lambda charge: self.beat.tasks.start_round(parent, round_task, now=self.now, charge=charge)
        )

    def _spawn(self, action: Spawn) -> None:
        if self.spawn_blocked:
            raise Conflict("an earlier spawn of this tick was refused by the loop state")
        plan = self.plans[action.plan_slug]
        item = plan.item(action.item_key)
        if item is None:
            return
        if action.supersedes is not None:
            self._fence(action.supersedes)
        resync, sweep = self.beat.resync, self.sweep
        if action.previous_task_id is not None and resync is not None and sweep is not None:
            # The failed runtime may have opened a pull request before it died: then the
            # item is that pull request's, and a retry would open a second one.
            revived = resync.revived(sweep, action.previous_task_id, now=self.now)
            if revived is None:
                raise Conflict("GitHub could not be asked about the previous attempt; the retry waits")
            if revived:
                return
        task = task_for(plan, item, attempt=action.attempt, now=self.now)
        self._charged(
            lambda charge: self.beat.tasks.spawn(
                task,
                previous_task_id=action.previous_task_id,
                now=self.now,
                charge=charge,
                after=action.after,
                content_hash=plan.content_hash,
            )
        )


def _earliest(*moments: datetime | None) -> datetime | None:
    given = [m for m in moments if m is not None]
    return min(given) if given else None
