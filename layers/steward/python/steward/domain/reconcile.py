"""`reconcile(desired, observed, now, policy) -> Decision`: the loop's brain, pure.

Desired state is the user's plans (what people approved); observed state is the user's live
tasks plus what the plans' items record of their tasks. The result is the list of actions
that move observed toward desired. Every action is idempotent in `apply` (conditional
writes), so a decision computed from stale state is harmless: its writes fail their
conditions and the next tick decides again from fresh state.

Supersession (docs/concepts/lifecycle.md): a queued or running task whose item the approved plan now
holds at a later revision is cancelled (`superseded`). Confirming the new revision already
cancels it (`steward.services.plans`); this rule is the backstop that makes a crash between
that confirm and its cancel converge, because the approval, not the cancel, is the durable
decision. Only queued and running tasks are touched: a task in review keeps its pull
request (the person may close it), and the new revision spawns whatever became of the old
task; its spawn names the task it supersedes (`Spawn.supersedes`), which the loop fences
(cancelled if still live, runtime stopped) before the new task exists. A deleted checkbox
is not an edit: its task runs on.

Local fixtures (`PlanKind.FIXTURE`, made by `steward local capability`) are no work of the
loop's: their plans and tasks are left out before anything is decided, so a fixture's task
never holds a `max_parallel` slot and is never launched, retried or repaired; the reaper
ends it at its deadline. What the loop still does for a fixture: cancel its live task when
its plan is archived (what archiving any plan asks), and keep its owner in the liveness
index while the task is in review (someone opened a pull request with its GitHub token):
that pull request is GitHub's like any other, and the heartbeat's resync observes it.

Withdrawal: a task a person cancelled in review is closed at once (reason `withdrawn`) and
marked `pr_close_pending`; it stays among the observed live tasks until its pull request is
closed. The desired state of its pull request is closed, so each such task gets a
`ClosePull` until the mark is cleared, whatever became of its plan (archived, completed).
Finished tasks are otherwise not live work: they hold no slot, are not cancelled again, and
keep no plan from completing. A retry of a withdrawn task waits until its pull request is
closed, so an item never has two open pull requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from steward.domain.failures import FailureCode
from steward.domain.follow_ups import RoundContext, follow_ups_of, round_refusal
from steward.domain.models import (
    ItemStatus,
    Plan,
    PlanItem,
    PlanKind,
    PlanStatus,
    Task,
    TaskStatus,
)
from steward.domain.order import RELATED, RETRYABLE, order_state
from steward.domain.status_comment import status_due

SUPERSEDED = "superseded"  # the reason of a task cancelled because its item's text changed
PLAN_ARCHIVED = "plan archived"  # the reason of a task cancelled because its plan was archived


def cancel_code(reason: str) -> str:
    """The failure code of a task cancelled for `reason` (`steward.domain.failures`)."""
    return FailureCode.SUPERSEDED if reason == SUPERSEDED else FailureCode.CANCELLED


@dataclass(frozen=True)
class Spawn:
    plan_slug: str
    item_key: str
    revision: int
    attempt: int
    previous_task_id: str | None
    supersedes: str | None = None  # the older revision's task, fenced before this spawn
    # The items it waits for (keys), each merged or done when decided: the spawn's write
    # holds only while they still are (`steward.adapters.plan_store:item_link_update`).
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    task_id: str


@dataclass(frozen=True)
class Cancel:
    task_id: str
    reason: str


@dataclass(frozen=True)
class MarkInProgress:
    plan_slug: str


@dataclass(frozen=True)
class CompletePlan:
    plan_slug: str
    version: int  # completes only the plan exactly as it was judged complete


@dataclass(frozen=True)
class RepairItem:
    """The item says its task runs or is in review, but the task is not live: copy the
    task's final status onto the item (the projection write after the task finished was
    lost: a runtime's failure, a merge or close from a webhook or resync)."""

    plan_slug: str
    task_id: str


@dataclass(frozen=True)
class ClosePull:
    """The task was withdrawn in review and its pull request is still to be closed (with a
    comment saying why); applied through the GitHub adapter, which clears the mark."""

    task_id: str


@dataclass(frozen=True)
class StartRound:
    """A follow-up round for the oldest ask waiting on a task in review (`round_key`): the
    round's task spawns with the ask and the task records the round, in one transaction
    that holds only while the ask still waits and the rounds used are still `round - 1`."""

    task_id: str
    round_key: str
    round: int


@dataclass(frozen=True)
class RefuseAsk:
    """The oldest ask waiting on a task in review starts no round (`reason`,
    `steward.domain.follow_ups.RoundRefusal`): it leaves the waiting asks with an event."""

    task_id: str
    round_key: str
    reason: str


@dataclass(frozen=True)
class Reply:
    """A one-time reply decided on a task in review (`steward.services.replies`)."""

    task_id: str
    kind: str


@dataclass(frozen=True)
class ShowStatus:
    """The status comment on the task's pull request does not show the task as it is
    (`steward.domain.status_comment.status_due`): a finished task too, kept in the live
    index until it does."""

    task_id: str


@dataclass(frozen=True)
class SettleRound:
    """Round `round` of a task in review ended, and the task has not taken account of it yet
    (`steward.domain.follow_ups.settlement`: its head, a retry, or a reply that it failed)."""

    task_id: str
    round: int


Action = (
    Spawn
    | Launch
    | Cancel
    | MarkInProgress
    | CompletePlan
    | RepairItem
    | ClosePull
    | StartRound
    | RefuseAsk
    | Reply
    | SettleRound
    | ShowStatus
)


@dataclass(frozen=True)
class Policy:
    max_parallel: int
    spawns_left: int  # of today's daily cap
    max_open_prs: int = 5  # the user's pull requests awaiting review (or being written) at most
    spawning_stopped: bool = False  # the operators' global brake: no spawn at all


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    blocked_by_cap: bool = False  # work waits for tomorrow's cap, not for any event
    # Repairs change what the next decision sees without any event: the next tick must
    # not take the no-progress shortcut.
    settles: bool = True
    live_work: bool = False  # the user belongs in the scheduler's liveness index
    # spawns and rounds held back by max_parallel or the cap
    waiting: tuple[Spawn | StartRound, ...] = field(default=())


def next_spawn(item: PlanItem, max_attempts: int) -> Spawn | None:
    """The spawn an approved item needs now, if any (without its plan slug filled in)."""
    if item.removed:
        return None
    if item.status is ItemStatus.PENDING and item.task_id is None:
        return Spawn("", item.key, item.revision, 1, None, item.supersedes)
    if item.status is ItemStatus.PENDING and item.retry_requested and item.task_id:
        # A person asked for another attempt: not limited by max_attempts.
        return Spawn("", item.key, item.revision, item.attempt + 1, item.task_id)
    if (
        item.status is ItemStatus.FAILED
        and item.last_classification == RETRYABLE
        and item.task_id
        and item.attempt < max_attempts
    ):
        return Spawn("", item.key, item.revision, item.attempt + 1, item.task_id)
    return None


def item_finished(item: PlanItem, max_attempts: int) -> bool:
    if item.removed:
        return True
    if item.status in (ItemStatus.MERGED, ItemStatus.CLOSED, ItemStatus.DONE):
        return True
    return item.status is ItemStatus.FAILED and next_spawn(item, max_attempts) is None


def superseded(plan: Plan, task: Task) -> bool:
    """`task` is queued or running for a revision of its item older than the one `plan`
    approves now: its work is no longer what the person approved."""
    if task.plan_id != plan.id or task.status not in _RUNS:
        return False
    if (
        plan.status not in (PlanStatus.CONFIRMED, PlanStatus.IN_PROGRESS)
        or plan.approved_hash != plan.content_hash
    ):
        return False
    item = plan.item(task.item_key)
    return item is not None and not item.removed and item.revision > task.revision


def allowed_rounds(task: Task, plan: Plan | None) -> int:
    """The rounds `task`'s approval allows: its own copy of the plan's `follow_ups`, or (a task
    stored before it had one) the plan's."""
    if task.follow_ups is not None:
        return task.follow_ups
    return follow_ups_of(plan.front_matter) if plan is not None else 0


ROUND_ENDED = "its pull request is no longer in review"  # a round cancelled as its parent left review


def next_round(
    task: Task, plan: Plan | None, live: Sequence[Task]
) -> StartRound | RefuseAsk | SettleRound | None:
    """What `task` (in review) needs for its rounds now: a round that ended settled first;
    then its oldest waiting ask gets its round or a refusal. Nothing while a round of the task
    is live (the next ask waits for its answer) or while the head Steward pushed is not known
    yet (a webhook moved the task to review before its runtime's ending was recorded)."""
    if task.status is not TaskStatus.REVIEW or any(t.parent == task.id and t.status in _RUNS for t in live):
        return None
    if task.rounds_settled < task.rounds_used:
        return SettleRound(task.id, task.rounds_settled + 1)
    if not task.pending_asks or task.head_sha is None:
        return None  # no ask; or its runtime's ending, which records Steward's head, comes first
    ask = task.pending_asks[0]
    key = str(ask.get("round_key"))
    item = plan.item(task.item_key) if plan is not None else None
    refusal = round_refusal(
        RoundContext(
            task_in_review=True,
            pull_open=True,  # a task in review has its pull request open, as far as Steward knows
            head_is_stewards=ask.get("head_sha") == task.head_sha,
            plan_archived=plan is None or plan.status is PlanStatus.ARCHIVED,
            superseded=item is None or item.removed or item.revision > task.revision,
            rounds_used=task.rounds_used,
            follow_ups=allowed_rounds(task, plan),
            fails_on_base=bool(ask.get("fails_on_base")),
        )
    )
    if refusal is not None:
        return RefuseAsk(task.id, key, refusal)
    return StartRound(task.id, key, task.rounds_used + 1)


def reconcile(plans: Sequence[Plan], live_tasks: Sequence[Task], now: datetime, policy: Policy) -> Decision:
    del now  # part of the contract; today's rules need no clock beyond the policy's cap
    closing = [ClosePull(t.id) for t in live_tasks if t.pr_close_pending]
    # first among the GitHub writes: a withdrawn task's comment says so before its close
    showing_tasks = [t for t in live_tasks if status_due(t)]
    showing = [ShowStatus(t.id) for t in showing_tasks]
    archived_fixtures = {
        p.id for p in plans if p.kind is PlanKind.FIXTURE and p.status is PlanStatus.ARCHIVED
    }
    actions: list[Action] = [
        Cancel(t.id, PLAN_ARCHIVED)
        for t in live_tasks
        if t.kind is PlanKind.FIXTURE and t.plan_id in archived_fixtures and t.status in _RUNS
    ]
    fixture_in_review = any(t.kind is PlanKind.FIXTURE and t.status is TaskStatus.REVIEW for t in live_tasks)
    plans = [p for p in plans if p.kind is PlanKind.WORK]
    live_tasks = [t for t in live_tasks if t.kind is PlanKind.WORK and not t.terminal]
    closing_ids = {c.task_id for c in closing}
    live_by_id = {t.id: t for t in live_tasks}
    # A round runs only while the task it answers for is in review (merged, closed or
    # withdrawn meanwhile: nothing is left to answer).
    actions += [
        Cancel(t.id, ROUND_ENDED)
        for t in live_tasks
        if t.is_round
        and t.status in _RUNS
        and not (t.parent in live_by_id and live_by_id[t.parent].status is TaskStatus.REVIEW)
    ]
    plans_by_id = {p.id: p for p in plans}
    rounds = [r for t in live_tasks if (r := next_round(t, plans_by_id.get(t.plan_id), live_tasks))]
    actions += [r for r in rounds if isinstance(r, RefuseAsk | SettleRound)]
    actions += [
        Reply(t.id, kind) for t in live_tasks if t.status is TaskStatus.REVIEW for kind in t.pending_replies
    ]
    actions += [Reply(t.id, RELATED) for t in live_tasks if _links_related(t, plans_by_id.get(t.plan_id))]
    candidates: list[Spawn | StartRound] = [r for r in rounds if isinstance(r, StartRound)]
    # actions so far: the fixtures' cancels
    live_work = bool(live_tasks or closing or showing) or fixture_in_review or bool(actions)

    for plan in sorted(plans, key=lambda p: (p.created_at, p.slug)):
        plan_tasks = [t for t in live_tasks if t.plan_id == plan.id]
        if plan.status is PlanStatus.ARCHIVED:
            actions += [Cancel(t.id, PLAN_ARCHIVED) for t in plan_tasks]
            continue
        if plan.status not in (PlanStatus.CONFIRMED, PlanStatus.IN_PROGRESS):
            continue
        if plan.approved_hash != plan.content_hash:
            continue  # an edit awaits approval: no new work (the loop never sees this state
            # from a well-behaved publish, which also changes the status; kept as a guard)
        max_attempts = plan.max_attempts
        actions += [Cancel(t.id, SUPERSEDED) for t in plan_tasks if superseded(plan, t)]
        repairs = [
            RepairItem(plan.slug, i.task_id)
            for i in plan.items
            if i.status in _SHOWN_LIVE and i.task_id and i.task_id not in live_by_id
        ]
        spawns = [
            replace(s, plan_slug=plan.slug, after=tuple(p.key for p in plan.predecessors(i)))
            for i in plan.active_items
            if (s := next_spawn(i, max_attempts)) is not None
            and s.previous_task_id not in closing_ids
            and order_state(plan, i).ready
        ]
        actions += repairs
        candidates += spawns
        if (
            not repairs
            and not spawns
            and not plan_tasks
            and all(item_finished(i, max_attempts) for i in plan.items)
        ):
            actions.append(CompletePlan(plan.slug, plan.version))
            continue  # completing it ends its claim on the loop
        live_work = True
        if plan.status is PlanStatus.CONFIRMED and plan_tasks:
            actions.append(MarkInProgress(plan.slug))

    slots = max(0, policy.max_parallel - sum(1 for t in live_tasks if t.status in _RUNS))
    allowed = 0 if policy.spawning_stopped else min(slots, policy.spawns_left)
    room = max(0, policy.max_open_prs - len(pull_request_load(live_tasks)))
    starting, held = _admitted(candidates, allowed, room)
    actions += starting
    actions += [Launch(t.id) for t in live_tasks if t.status is TaskStatus.QUEUED and t.launched_at is None]
    actions += showing
    actions += closing
    waiting = tuple(held)
    return Decision(
        actions=tuple(actions),
        # held by the cap itself: all it allows started (not by max_open_prs, which a merge frees)
        blocked_by_cap=bool(waiting)
        and not policy.spawning_stopped
        and policy.spawns_left <= slots
        and len(starting) == policy.spawns_left,
        live_work=live_work,
        waiting=waiting,
        # Nothing advances a watermark when the brake is released: spawns it held keep the
        # loop looking. A closed pull request changes the next decision without a lifecycle
        # event too (the task leaves the live index): the next tick looks again. So do a
        # refused ask (its reply, or the next waiting ask), a reply (one that failed), a
        # settled round (its retry, its reply, or the next waiting ask), and a finished task's
        # status comment (shown, it left the live index: the next tick may find no work).
        settles=not any(
            isinstance(a, RepairItem | ClosePull | Reply | RefuseAsk | SettleRound) for a in actions
        )
        and not (policy.spawning_stopped and waiting)
        and not any(t.terminal for t in showing_tasks),
    )


def _links_related(task: Task, plan: Plan | None) -> bool:
    """`task` is in review and the pull requests of the items its item waits for do not link
    its own yet (`steward.services.replies`)."""
    if task.status is not TaskStatus.REVIEW or task.is_round or RELATED in task.replied or plan is None:
        return False
    item = plan.item(task.item_key)
    return item is not None and bool(plan.predecessors(item))


# Tasks that occupy a parallel slot.
_RUNS = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING})


def _admitted(
    candidates: Sequence[Spawn | StartRound], allowed: int, room: int
) -> tuple[list[Spawn | StartRound], list[Spawn | StartRound]]:
    """(those that start now, those that wait): at most `allowed`, in order, a new task
    (`Spawn`) only while there is `room` under max_open_prs (a round is never held by it)."""
    starting: list[Spawn | StartRound] = []
    held: list[Spawn | StartRound] = []
    for candidate in candidates:
        if len(starting) == allowed or (isinstance(candidate, Spawn) and room == 0):
            held.append(candidate)
            continue
        room -= isinstance(candidate, Spawn)
        starting.append(candidate)
    return starting, held


def pull_request_load(live: Sequence[Task]) -> list[Task]:
    """The user's tasks whose pull request awaits review, or will (queued or running work,
    not a follow-up round, which answers on an open one): what `max_open_prs` bounds."""
    return [
        t
        for t in live
        if t.kind is PlanKind.WORK and not t.is_round and (t.status is TaskStatus.REVIEW or t.status in _RUNS)
    ]


# The item statuses that say its task is live (the task is queued, running or in review).
_SHOWN_LIVE = frozenset({ItemStatus.RUNNING, ItemStatus.REVIEW})
