"""Tasks table adapter. `spawn` is the only way a task comes to exist.

Spawn is one TransactWriteItems: put the task under its deterministic id
(attribute_not_exists), link it to its plan item on the condition that the plan still
approves that exact item revision, and (for the loop) charge the user's daily spawn cap
under the heartbeat's lease epoch. A replayed spawn fails the put's condition and gets the
existing task back from the cancellation reason, creating nothing.

Status changes go through `transition`: one TransactWriteItems that moves the task
(conditional on the status and event sequence it was read with), appends its durable event
with the next gapless sequence number, and, for lifecycle events, wakes the owner's loop
(docs/concepts/loop.md; why a wake and not a bare watermark bump: `_write_transition`).
Non-terminal tasks carry the attributes of the sparse `live_*` indexes; a terminal
transition removes them.

This store writes only task and event items. Each part of its transactions that touches a
plan comes from `steward.adapters.plan_store`, each that touches a user from
`steward.adapters.user_store`; this module assembles them and reads the cancellation
reasons in that order.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import (
    IncludedWriteRefused,
    Tables,
    cancellation_reasons,
    decode_cursor,
    deserialize,
    encode_cursor,
    error_code,
    is_conditional_failure,
    key,
    plain,
    refused_included,
    storable,
)
from steward.adapters.plan_store import PlanStore, item_link_update, item_reopen_update
from steward.adapters.user_store import spawn_charge_update, wake_update
from steward.domain import lifecycle
from steward.domain.document_limits import MAX_ATTEMPTS
from steward.domain.errors import Conflict, LifecycleError, NotFound
from steward.domain.failures import FailureCode
from steward.domain.follow_ups import REPLY_KINDS, Settlement, reply_added
from steward.domain.ids import live_shard, round_task_id
from steward.domain.models import (
    TERMINAL_TASK_STATUSES,
    PlanKind,
    Task,
    TaskStatus,
    iso,
)
from steward.domain.order import RELATED
from steward.domain.status_comment import status_due
from steward.domain.tasks import SpawnCharge, SpawnRefused
from steward.tables import EVENTS, TASKS

TRANSITION_ATTEMPTS = 5
TRANSITION_PARTS = 2  # the task's update and its event; then the wake, then included parts
# Concurrent appends to one task each take the next seq or lose and retry; one always wins,
# so N writers need at most N attempts.
APPEND_ATTEMPTS = 64
OVER_REPORT_EVENT = "over_report"


def task_to_item(task: Task) -> dict[str, Any]:
    data = task.model_dump(mode="json", exclude={"id"}, exclude_none=True)
    data["task_id"] = task.id
    if task.kind is PlanKind.WORK:
        del data["kind"]  # absent is work, as for plans (`steward.adapters.plan_store:plan_to_item`)
    data["created_key"] = f"{iso(task.created_at)}#{task.id}"
    # Money stays decimal end to end (DynamoDB numbers), never float.
    data["budget_usd"] = task.budget_usd
    data["cost_usd"] = task.cost_usd
    if data.pop("pr_close_pending", False):
        data["pr_close_pending"] = True  # present only while set
    # Absent until a settlement ADDs to it (a number, never the JSON dump's string).
    data.pop("over_reported_usd", None)
    if task.over_reported_usd:
        data["over_reported_usd"] = task.over_reported_usd
    for name in ("created_at", "updated_at", "last_seen", "deadline", "launched_at", "github_observed_at"):
        moment = getattr(task, name)
        if moment is not None:
            data[name] = iso(moment)
    if not task.terminal:
        data["live_user"] = task.user
        data["live_shard"] = live_shard(task.user)
    # The relay's running totals (steward.adapters.budget_store): committed = settled spend
    # plus outstanding reservations; headroom = budget - committed.
    data["committed_usd"] = task.cost_usd
    data["headroom_usd"] = task.budget_usd - task.cost_usd
    data["reservations"] = {}
    return data


def item_to_task(item: Mapping[str, Any]) -> Task:
    data = plain(dict(item))
    for name in ("created_key", "live_user", "live_shard", "reservation_shard"):
        data.pop(name, None)
    return Task(id=data.pop("task_id"), **data)


class _AlreadyClear(Exception):
    """A withdrawal's close was recorded already."""


BATCH_GET_KEYS = 100  # BatchGetItem's limit
BATCH_TRIES = 3


class TaskStore:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._table = tables.table(TASKS)
        self._plans = PlanStore(tables)

    # ---- reads
    def get(self, task_id: str) -> Task | None:
        found = self._table.get_item(Key={"task_id": task_id}, ConsistentRead=True)
        return item_to_task(found["Item"]) if "Item" in found else None

    def get_many(self, task_ids: Sequence[str]) -> list[Task]:
        """The tasks of `task_ids` that exist, read consistently in one BatchGetItem per 100
        ids (never a GetItem each). Keys DynamoDB leaves unprocessed are asked again, up to
        BATCH_TRIES times; what is still unread then is left out (for callers that look again
        at their next tick)."""
        name = self._tables.name(TASKS)
        wanted = list(dict.fromkeys(task_ids))
        found: list[Task] = []
        for start in range(0, len(wanted), BATCH_GET_KEYS):
            request: Any = {
                name: {
                    "Keys": [{"task_id": i} for i in wanted[start : start + BATCH_GET_KEYS]],
                    "ConsistentRead": True,
                }
            }
            for _ in range(BATCH_TRIES):
                answer = self._tables.client.batch_get_item(RequestItems=request)
                found += [item_to_task(item) for item in answer["Responses"].get(name, [])]
                request = answer.get("UnprocessedKeys")
                if not request:
                    break
        return found

    def require(self, task_id: str) -> Task:
        task = self.get(task_id)
        if task is None:
            raise NotFound(f"no task {task_id!r}", field="task_id")
        return task

    def require_owned(self, user: str, task_id: str) -> Task:
        """The caller's task; another user's task is indistinguishable from a missing one."""
        task = self.get(task_id)
        if task is None or task.user != user:
            raise NotFound(f"no task {task_id!r}", field="task_id")
        return task

    def page(
        self, user: str, *, plan_id: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Task], str | None]:
        if plan_id is None:
            index, key_name, key_value = "by_user", "user", user
        else:
            index, key_name, key_value = "by_plan", "plan_id", plan_id
        kwargs: dict[str, Any] = {
            "IndexName": index,
            "KeyConditionExpression": "#k = :k",
            "ExpressionAttributeNames": {"#k": key_name},
            "ExpressionAttributeValues": {":k": key_value},
            "Limit": limit,
        }
        start = decode_cursor(cursor, TASKS.page_key(index), must_match={key_name: key_value})
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = self._table.query(**kwargs)
        tasks = [item_to_task(i) for i in page["Items"]]
        # plan ids embed the user, but a listing by plan still never shows another's task
        return [t for t in tasks if t.user == user], encode_cursor(page.get("LastEvaluatedKey"))

    def live_for_user(self, user: str) -> list[Task]:
        """The user's non-terminal tasks (sparse index; eventually consistent, so callers
        re-check with conditional writes)."""
        return self._query_all(IndexName="live_by_user", KeyConditionExpression=key("live_user").eq(user))

    def overdue(self, shard: str, now: datetime) -> list[Task]:
        """Non-terminal tasks of one shard whose deadline passed."""
        return self._query_all(
            IndexName="live_deadline",
            KeyConditionExpression=key("live_shard").eq(shard) & key("deadline").lt(iso(now)),
        )

    def _query_all(self, **kwargs: Any) -> list[Task]:
        out: list[Task] = []
        while True:
            page = self._table.query(**kwargs)
            out += [item_to_task(i) for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # ---- spawn
    def spawn(
        self,
        task: Task,
        *,
        previous_task_id: str | None,
        now: datetime,
        charge: SpawnCharge | None = None,
        after: tuple[str, ...] = (),
        content_hash: str | None = None,
    ) -> tuple[Task, bool]:
        """Create `task` and link it to its plan item in one atomic step.

        Returns (task, created). The plan must be confirmed or in progress with its current
        content approved, the item at this revision and not removed, and the item linked to
        `previous_task_id` (None: no task yet and still pending), the items in `after` merged
        or done, and (given) the plan's content still `content_hash`. With a `charge`, the user's
        loop must be enabled, not paused, under the daily cap, and still leased to the caller.
        Violations raise SpawnRefused and write nothing."""
        actions: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._tables.name(TASKS),
                    "Item": task_to_item(task),
                    "ConditionExpression": "attribute_not_exists(task_id)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": item_link_update(
                    self._tables,
                    task,
                    previous_task_id=previous_task_id,
                    now=now,
                    after=after,
                    content_hash=content_hash,
                )
            },
        ]
        if charge is not None:
            actions.append({"Update": spawn_charge_update(self._tables, task.user, charge, now=now)})
        if previous_task_id is not None:
            # The item's status is only a projection, which may have been lost: the previous
            # task itself must still be finished without a pull request under review (nor one
            # withdrawn and not closed yet: an item never has two open pull requests).
            actions.append({"ConditionCheck": self._retryable_condition(previous_task_id, settled=True)})
        try:
            self._tables.client.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            task_reason = reasons[0]
            if task_reason.get("Code") == "ConditionalCheckFailed":
                existing = task_reason.get("Item")
                found = item_to_task(deserialize(existing)) if existing else self.get(task.id)
                if found is not None:
                    return found, False
            if reasons[1].get("Code") == "ConditionalCheckFailed":
                raise SpawnRefused(
                    "the plan no longer approves this item revision for a new task, or an item "
                    "it waits for is no longer merged",
                    reason="plan",
                ) from exc
            if charge is not None and reasons[2].get("Code") == "ConditionalCheckFailed":
                raise SpawnRefused(
                    "the loop is paused or disabled, the daily spawn cap is reached, or the lease moved",
                    reason="loop",
                ) from exc
            if previous_task_id is not None and reasons[-1].get("Code") == "ConditionalCheckFailed":
                raise SpawnRefused(
                    "the item's previous task is no longer finished (a pull request revived it), "
                    "or its withdrawn pull request is not closed yet",
                    reason="plan",
                ) from exc
            raise Conflict("a concurrent write touched the same items; retry") from exc
        return task, True

    def start_round(
        self, parent: Task, round_task: Task, *, now: datetime, charge: SpawnCharge
    ) -> tuple[Task, bool]:
        """Spawn follow-up round `round_task.round` of `parent` for the ask it carries, in one
        transaction: the round's task, the parent's `follow_up_started` event with the ask
        taken from its waiting asks and its rounds counted, and one spawn of the day's cap.
        Holds only while the parent is in review, the ask still waits first, the rounds used
        are one fewer and the round is within the task's approved `follow_ups`; SpawnRefused (nothing written) otherwise. Returns (round, created):
        a replay finds the round."""
        key = (round_task.trigger or {}).get("round_key")

        def admit(current: Task) -> None:
            if (
                current.status is not TaskStatus.REVIEW
                or not current.pending_asks
                or current.pending_asks[0].get("round_key") != key
                or current.rounds_used != round_task.round - 1
                or (current.follow_ups is not None and round_task.round > current.follow_ups)
            ):
                raise SpawnRefused("the ask was answered, or the task left review", reason="plan")

        put = {
            "Put": {
                "TableName": self._tables.name(TASKS),
                "Item": task_to_item(round_task),
                "ConditionExpression": "attribute_not_exists(task_id)",
            }
        }
        try:
            self.append_event(
                parent,
                "follow_up_started",
                {"round_key": key, "round": round_task.round, "task_id": round_task.id},
                now=now,
                admit=admit,
                sets=lambda current: {
                    "pending_asks": [dict(a) for a in current.pending_asks[1:]],
                    "rounds_used": round_task.round,
                },
                include=[put, {"Update": spawn_charge_update(self._tables, parent.user, charge, now=now)}],
            )
        except IncludedWriteRefused:
            found = self.get(round_task.id)
            if found is not None:
                return found, False
            raise SpawnRefused(
                "the loop is paused or disabled, the daily spawn cap is reached, or the lease moved",
                reason="loop",
            ) from None
        except SpawnRefused:
            found = self.get(round_task.id)
            if found is not None:
                return found, False  # a replay: the round was spawned
            raise
        return round_task, True

    def round_attempts(self, parent_id: str, number: int) -> list[Task]:
        """The attempts of follow-up round `number` of `parent_id`, oldest first (their ids
        follow from the round and the attempt: one read each, and one more)."""
        found: list[Task] = []
        for attempt in range(1, MAX_ATTEMPTS + 1):
            task = self.get(round_task_id(parent_id, number, attempt))
            if task is None or task.parent != parent_id:
                break
            found.append(task)
        return found

    def settle_round(self, parent: Task, number: int, settled: Settlement, *, now: datetime) -> Task:
        """`parent` takes account of round `number`'s ending (`steward.domain.follow_ups.
        settlement`), conditional on its rounds as read: a retry puts the round's ask first
        among the waiting asks again with the round uncounted (its next attempt takes the same
        number); otherwise the round is settled, with the head it pushed and the reply
        decided. A no-op when the round was settled already."""

        def admit(current: Task) -> None:
            if (
                current.status is not TaskStatus.REVIEW
                or current.rounds_used != number
                or current.rounds_settled != number - 1
            ):
                raise _AlreadyClear

        def sets(current: Task) -> dict[str, Any]:
            if settled.retry is not None:
                return {
                    "rounds_used": number - 1,
                    "pending_asks": [settled.retry, *map(dict, current.pending_asks)],
                }
            changes: dict[str, Any] = {"rounds_settled": number}
            if settled.head_sha:
                changes["head_sha"] = settled.head_sha
            return changes | (reply_added(current, settled.reply) if settled.reply else {})

        data: dict[str, Any] = {"round": number}
        if settled.retry is not None:
            data["attempt"] = settled.retry["attempt"]
        try:
            return self.append_event(
                parent,
                "follow_up_retried" if settled.retry is not None else "follow_up_settled",
                data,
                now=now,
                admit=admit,
                sets=sets,
            )
        except _AlreadyClear:
            return self.require(parent.id)

    def refuse_ask(self, parent: Task, key: str, reason: str, *, now: datetime) -> Task:
        """The waiting ask `key` of `parent` starts no round: it leaves the waiting asks with a
        `follow_up_refused` event (`reason`). A no-op when it waits no longer."""

        def admit(current: Task) -> None:
            if not any(a.get("round_key") == key for a in current.pending_asks):
                raise _AlreadyClear

        def sets(current: Task) -> dict[str, Any]:
            changes: dict[str, Any] = {
                "pending_asks": [dict(a) for a in current.pending_asks if a.get("round_key") != key]
            }
            return changes | (reply_added(current, reason) if reason in REPLY_KINDS else {})

        try:
            return self.append_event(
                parent,
                "follow_up_refused",
                {"round_key": key, "reason": reason},
                now=now,
                admit=admit,
                sets=sets,
            )
        except _AlreadyClear:
            return self.require(parent.id)

    def clear_reply(self, task: Task, kind: str, *, written: bool, now: datetime) -> bool:
        """Reply `kind` of `task` was written on its pull request (or, `written` False, is not
        needed any more): from pending to replied, with a `follow_up_replied` event. False when
        it was no longer pending."""

        def admit(current: Task) -> None:
            # `related` is decided from state, never pending first: once replied it is done.
            if kind not in current.pending_replies and (kind != RELATED or kind in current.replied):
                raise _AlreadyClear

        try:
            self.append_event(
                task,
                "follow_up_replied",
                {"kind": kind, "written": written},
                now=now,
                admit=admit,
                sets=lambda current: {
                    "pending_replies": [k for k in current.pending_replies if k != kind],
                    "replied": [*current.replied, kind],
                },
            )
        except _AlreadyClear:
            return False
        return True

    def record_status_shown(self, task: Task, *, key: str, comment_id: int | None) -> bool:
        """The status comment shows `task` as read (`key`, `steward.domain.status_comment`);
        a finished task, its pull request closed by now, leaves the live index with it.
        Conditional on the task being as read (status and event sequence): a task that moved
        meanwhile is shown again by the next tick. False when it had moved. Not `updated_at`:
        resync reads it as when GitHub's view of the task was last known
        (`steward.domain.resync:last_observed`), and Steward's own comment is no news."""
        sets = "SET status_shown = :key" + (", status_comment_id = :cid" if comment_id else "")
        values: dict[str, Any] = {":key": key, ":s": task.status.value, ":seq": task.event_seq}
        if comment_id:
            values[":cid"] = comment_id
        leaves = task.terminal and not task.pr_close_pending
        try:
            self._table.update_item(
                Key={"task_id": task.id},
                UpdateExpression=sets + (" REMOVE live_user" if leaves else ""),
                ConditionExpression="#s = :s AND event_seq = :seq",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def _retryable_condition(
        self, task_id: str, *, user: str | None = None, settled: bool = False
    ) -> dict[str, Any]:
        """The task (of `user`, when given) is failed, cancelled or closed: what may be retried;
        `settled`: and no withdrawn pull request of it waits to be closed."""
        values = {f":r{n}": s.value for n, s in enumerate(sorted(lifecycle.RETRYABLE_TASK_STATUSES))}
        condition = f"#s IN ({', '.join(values)})"
        if settled:
            condition += " AND attribute_not_exists(pr_close_pending)"
        names = {"#s": "status"}
        if user is not None:
            condition = "#u = :u AND " + condition
            names["#u"] = "user"
            values[":u"] = user
        return {
            "TableName": self._tables.name(TASKS),
            "Key": {"task_id": task_id},
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    # ---- status changes with durable events
    def transition(
        self,
        task: Task,
        target: TaskStatus,
        *,
        now: datetime,
        event: str,
        data: Mapping[str, Any] | None = None,
        classification: str | None = None,
        reason: str | None = None,
        extra: Mapping[str, Any] | None = None,
        lifecycle_event: bool = True,
        overdue_at: datetime | None = None,
        include: Sequence[Mapping[str, Any]] = (),
    ) -> tuple[Task, bool]:
        """Move `task` (as read) to `target`, append its event, wake the owner's loop, and
        commit the `include`d parts of other stores in the same transaction (a webhook's
        delivery mark: its effect and its "processed" record commit together).

        Returns (task as stored, changed). Assigning the status a task already has is a
        no-op, so replays and redeliveries are harmless; a transition the lifecycle forbids
        raises LifecycleError. A concurrent change re-reads and decides again. With
        `overdue_at`, the task moves only while its deadline is before that instant (the
        reaper: a runtime that renewed in between keeps its task). An included part whose
        condition fails raises IncludedWriteRefused and nothing is written."""
        current = task
        for _ in range(TRANSITION_ATTEMPTS):
            if current.status is target:
                return current, False
            if overdue_at is not None and (current.deadline is None or current.deadline >= overdue_at):
                return current, False
            lifecycle.task_transition(current.status, target)
            try:
                return self._write_transition(
                    current,
                    target,
                    now=now,
                    event=event,
                    data=data,
                    classification=classification,
                    reason=reason,
                    extra=extra,
                    lifecycle_event=lifecycle_event,
                    overdue_at=overdue_at,
                    include=include,
                ), True
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                if include and refused_included(exc, TRANSITION_PARTS + lifecycle_event):
                    raise IncludedWriteRefused from None
                current = self.require(task.id)
        raise Conflict(f"task {task.id} kept changing; retry")

    def _write_transition(
        self,
        task: Task,
        target: TaskStatus,
        *,
        now: datetime,
        event: str,
        data: Mapping[str, Any] | None,
        classification: str | None,
        reason: str | None,
        extra: Mapping[str, Any] | None,
        lifecycle_event: bool,
        overdue_at: datetime | None = None,
        include: Sequence[Mapping[str, Any]] = (),
    ) -> Task:
        """One transaction: the task, its event, and for a lifecycle event the owner's wake.

        A lifecycle event wakes the loop (watermark, liveness index and `live_mark`) rather
        than only advancing the watermark. The watermark contract (docs/concepts/loop.md) says
        the loop acts on every advance, but a tick that holds the lease records as processed
        the watermark it read and, finding no live work, takes the user out of the liveness
        index unless `live_mark` moved: an advance without the mark made during that tick is
        never acted on, because the scheduler no longer sends the user. Most status changes
        would survive it (a task the tick read as live is live work, so the tick keeps the
        user: a webhook moving it to review, a runtime failing it), but not a revival: a
        verified webhook moving a failed task to review after the tick read it as failed
        also bumps the plan's version, so the tick's completion of the plan fails, the user
        leaves the index, and the plan never completes. The wake costs no request (it is the
        same user-item part) and at most one tick that finds nothing to do."""
        seq = task.event_seq + 1
        sets: dict[str, Any] = {"status": target.value, "updated_at": iso(now), "event_seq": seq}
        if task.terminal and target not in TERMINAL_TASK_STATUSES:
            # Revived (a failed task whose pull request a verified webhook reports): live again.
            sets |= {"live_user": task.user, "live_shard": live_shard(task.user)}
        if classification is not None:
            sets["classification"] = classification
        if reason is not None:
            sets["reason"] = reason
        sets.update(extra or {})
        closing = bool(sets.get("pr_close_pending"))
        # Withdrawn: finished, but the loop has yet to close its pull request; or finished with
        # a pull request whose status comment has yet to say so: it stays in the user's live
        # index (not in the reaper's) until the loop has done that.
        kept = closing or status_due(task.model_copy(update={"status": target}))
        if target in TERMINAL_TASK_STATUSES and kept:
            sets["live_user"] = task.user
        names = {f"#a{i}": k for i, k in enumerate(sets)}
        values = {f":a{i}": v for i, v in enumerate(sets.values())}
        expression = "SET " + ", ".join(f"#a{i} = :a{i}" for i in range(len(sets)))
        if target in TERMINAL_TASK_STATUSES and closing:
            expression += " REMOVE live_shard, deadline"
        elif target in TERMINAL_TASK_STATUSES and kept:
            expression += " REMOVE live_shard, deadline, pr_close_pending"
        elif target in TERMINAL_TASK_STATUSES:
            # A merge after a withdrawal also ends the wait to close its pull request.
            expression += " REMOVE live_user, live_shard, deadline, pr_close_pending"
        elif target not in (TaskStatus.QUEUED, TaskStatus.RUNNING) and "deadline" not in sets:
            expression += " REMOVE deadline"  # waits for people now, not for a runtime
        names |= {"#s": "status", "#q": "event_seq"}
        values |= {":from": task.status.value, ":seq": task.event_seq}
        condition = "#s = :from AND #q = :seq"
        if overdue_at is not None:
            condition += " AND deadline < :overdue"
            values[":overdue"] = iso(overdue_at)
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._tables.name(TASKS),
                    "Key": {"task_id": task.id},
                    "UpdateExpression": expression,
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ExpressionAttributeValues": values,
                }
            },
            self._event_put(task, seq, event, {"status": target.value, **(data or {})}, now),
        ]
        if lifecycle_event:
            actions.append({"Update": wake_update(self._tables, task.user)})
        actions += [dict(part) for part in include]
        self._tables.client.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
        merged = task.model_dump()
        merged.update({k: v for k, v in sets.items() if k in Task.model_fields})
        if target in TERMINAL_TASK_STATUSES and not closing:
            merged["pr_close_pending"] = False
        if target not in (TaskStatus.QUEUED, TaskStatus.RUNNING) and "deadline" not in sets:
            merged["deadline"] = None
        return Task.model_validate(merged)

    def _event_put(
        self, task: Task, seq: int, event: str, data: dict[str, Any], now: datetime
    ) -> dict[str, Any]:
        """The durable event `seq` of `task`: a put that fails if that seq exists (gapless)."""
        return {
            "Put": {
                "TableName": self._tables.name(EVENTS),
                "Item": {
                    "task_id": task.id,
                    "seq": seq,
                    "type": event,
                    "at": iso(now),
                    "user": task.user,
                    "data": storable(data),
                },
                "ConditionExpression": "attribute_not_exists(seq)",
            }
        }

    def append_event(
        self,
        task: Task,
        event: str,
        data: Mapping[str, Any],
        *,
        now: datetime,
        admit: Callable[[Task], None] | None = None,
        sets: Mapping[str, Any] | Callable[[Task], Mapping[str, Any]] | None = None,
        removes: Sequence[str] = (),
        include: Sequence[Mapping[str, Any]] = (),
        wake: bool = False,
    ) -> Task:
        """A progress event (phase, check, tool): durable, ordered, gapless, but it does not
        advance the watermark (docs/concepts/loop.md). `admit(current)` runs before every attempt,
        on the task as read for it, and raises to refuse the event: every status change moves
        the event sequence too, so an event admitted for a status is written only while the
        task still has it. `sets`: attributes of the task written with the event (or a
        function of the task as read for the attempt); `removes`: attributes it removes;
        `include`: writes of other stores in the same transaction (a webhook delivery's
        mark): one whose condition fails raises IncludedWriteRefused and nothing is written.
        `wake`: the event asks the loop to act (a follow-up ask): it wakes the owner's loop as
        a lifecycle event does, in the same transaction. A recorded follow-up ask
        (`follow_up_asked`, from a webhook or resync) is a person's action that starts work at
        once: its wake also lets the next tick through the interval gate; the runtime's
        events (`finished`, `follow_up_answered`) and a refused ask's reply do not."""
        current = task
        for attempt in range(APPEND_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0, 0.002 * attempt))  # noqa: S311 - jitter, not crypto
            if admit is not None:
                admit(current)
            seq = current.event_seq + 1
            also = dict((sets(current) if callable(sets) else sets) or {})
            expression = "SET event_seq = :seq" + "".join(f", #x{i} = :x{i}" for i in range(len(also)))
            if removes:
                expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(removes)))
            update: dict[str, Any] = {
                "TableName": self._tables.name(TASKS),
                "Key": {"task_id": task.id},
                "UpdateExpression": expression,
                "ConditionExpression": "event_seq = :prev",
                "ExpressionAttributeValues": {
                    ":seq": seq,
                    ":prev": current.event_seq,
                    **{f":x{i}": v for i, v in enumerate(also.values())},
                },
            }
            names = {f"#x{i}": k for i, k in enumerate(also)} | {f"#r{i}": k for i, k in enumerate(removes)}
            if names:
                update["ExpressionAttributeNames"] = names
            actions: list[Any] = [
                {"Update": update},
                self._event_put(task, seq, event, dict(data), now),
                *(dict(part) for part in include),
            ]
            if wake:
                person = event == "follow_up_asked"  # a follow-up trigger, not a runtime report
                actions.append({"Update": wake_update(self._tables, task.user, person=person)})
            try:
                self._tables.client.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                if include and refused_included(exc, 2):
                    raise IncludedWriteRefused from None
                current = self.require(task.id)
                continue
            return current.model_copy(update={"event_seq": seq, **also})
        raise Conflict(f"task {task.id} kept changing; retry")

    def record_over_report(self, task_id: str, data: Mapping[str, Any], *, now: datetime) -> Task:
        """The durable `over_report` event of a call whose provider reported more than the
        relay reserved for it (the settlement already charged the reservation and added the
        excess to the item's `over_reported_usd`). One consistent read and one transaction:
        only an over-report pays for them, never a normal settlement."""
        return self.append_event(self.require(task_id), OVER_REPORT_EVENT, data, now=now)

    # ---- runtime
    def claim(self, task: Task, *, runtime_id: str, now: datetime, deadline: datetime) -> Task:
        """queued -> running for exactly one runtime; a second runtime gets LifecycleError
        (or, if it is the same runtime replaying, the task back)."""
        if task.status is TaskStatus.RUNNING and task.runtime_id == runtime_id:
            return task
        claimed, changed = self.transition(
            task,
            TaskStatus.RUNNING,
            now=now,
            event="started",
            data={"runtime_id": runtime_id},
            extra={"runtime_id": runtime_id, "last_seen": iso(now), "deadline": iso(deadline)},
        )
        if not changed and claimed.runtime_id != runtime_id:
            raise LifecycleError("another runtime already claimed this task", field="task_id")
        return claimed.model_copy(update={"runtime_id": runtime_id, "last_seen": now, "deadline": deadline})

    def touch(self, task_id: str, *, runtime_id: str, now: datetime, deadline: datetime) -> bool:
        """Renew last_seen; False once the task is no longer this runtime's running task
        (cancelled, reaped, finished): the runtime should stop."""
        return self.renew(task_id, runtime_id=runtime_id, now=now, deadline=deadline) is not None

    def renew(
        self, task_id: str, *, runtime_id: str, now: datetime, deadline: datetime, user: str | None = None
    ) -> Task | None:
        """`touch` in one conditional write that also answers the task as renewed (None: not
        this runtime's running task, or, with `user`, not that user's). No read."""
        condition = "#s = :running AND runtime_id = :rid"
        names = {"#s": "status"}
        values = {
            ":now": iso(now),
            ":deadline": iso(deadline),
            ":running": TaskStatus.RUNNING.value,
            ":rid": runtime_id,
        }
        if user is not None:
            condition += " AND #u = :user"
            names["#u"] = "user"
            values[":user"] = user
        try:
            renewed = self._table.update_item(
                Key={"task_id": task_id},
                UpdateExpression="SET last_seen = :now, deadline = :deadline",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return None
            raise
        return item_to_task(renewed["Attributes"])

    def record_observation(
        self, task: Task, *, now: datetime, etag: str | None, also: Mapping[str, Any] | None = None
    ) -> bool:
        """Note that GitHub was asked about the task's pull request and said nothing new
        (not a lifecycle event: no durable event, no wake); `also`: what resync's reading of
        its asks keeps (`github_etags`, `asks_read_at`). False when the task moved on since it
        was read (the next resync reads it again)."""
        values: dict[str, Any] = {":now": iso(now), ":status": task.status.value}
        names = {"#s": "status"}
        update = "SET github_observed_at = :now"
        if etag:
            update += ", github_etag = :etag"
            values[":etag"] = etag
        for i, (name, value) in enumerate((also or {}).items()):
            update += f", #a{i} = :a{i}"
            names[f"#a{i}"], values[f":a{i}"] = name, value
        try:
            self._table.update_item(
                Key={"task_id": task.id},
                UpdateExpression=update,
                ConditionExpression="#s = :status",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def mark_launched(self, task_id: str, *, launch_ref: str, now: datetime) -> None:
        """Record that the launcher started a runtime (idempotent: the first record stays)."""
        try:
            self._table.update_item(
                Key={"task_id": task_id},
                UpdateExpression="SET launched_at = :now, launch_ref = :ref",
                ConditionExpression="attribute_exists(task_id) AND attribute_not_exists(launched_at)",
                ExpressionAttributeValues={":now": iso(now), ":ref": launch_ref},
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise

    # ---- plan item projection
    def project_item(self, task: Task, *, now: datetime) -> bool:
        """Copy a task's status onto its plan item (the plan store's write; see there). A
        follow-up round never does: its item is the task's it answers for."""
        return False if task.is_round else self._plans.project_item(task, now=now)

    # ---- client actions
    def cancel(self, user: str, task_id: str, *, now: datetime, reason: str) -> Task:
        """A person's cancel (`lifecycle.cancel_target`): queued/running -> cancelled
        (final, `reason`); review -> closed, reason `withdrawn` (final), marked
        `pr_close_pending` in the same conditional write, so the loop closes its pull request
        (`steward.services.withdrawal`). Repeating either is a no-op that writes nothing: not
        even the item's projection, which a person's retry may have moved on since (pending
        for the next attempt: projecting `closed` onto it again would lose that retry).

        The write is conditional on the status (and event sequence) it was decided from: a
        merge webhook that lands first makes the withdrawal a LifecycleError (409) saying
        the pull request was merged; one that lands after moves the withdrawn task to merged,
        as the lifecycle allows. A task that moved meanwhile (running -> review) is decided
        again from what it is now."""
        for _ in range(TRANSITION_ATTEMPTS):
            task = self.require_owned(user, task_id)
            target = lifecycle.cancel_target(task.status, reason=task.reason)
            try:
                if target is TaskStatus.CANCELLED:
                    moved, changed = self.transition(
                        task,
                        target,
                        now=now,
                        event="cancelled",
                        classification="final",
                        reason=reason,
                        extra={"failure_code": FailureCode.CANCELLED},
                    )
                else:
                    moved, changed = self._withdraw(task, user, now=now)
            except LifecycleError:
                continue  # it moved after it was read: decide again from what it is now
            if changed:  # a lost projection of the first cancel is the loop's to repair
                self.project_item(moved, now=now)
            return moved
        raise Conflict(f"task {task_id} kept changing; retry")

    def _withdraw(self, task: Task, user: str, *, now: datetime) -> tuple[Task, bool]:
        """review -> closed (withdrawn, final, `pr_close_pending`); a withdrawn task as it is.
        Returns (task, changed)."""
        moved, changed = self.transition(
            task,
            TaskStatus.CLOSED,
            now=now,
            event="withdrawn",
            data={"by": user, "number": task.pr_number, "url": task.pr_url},
            classification="final",
            reason=lifecycle.WITHDRAWN,
            extra={"pr_close_pending": True, "withdrawn_by": user},
        )
        if not changed and moved.reason != lifecycle.WITHDRAWN:
            # GitHub closed it first (a webhook between the read and the write)
            raise LifecycleError(
                "a task that is closed cannot be cancelled: its pull request was closed on GitHub "
                "meanwhile; there is nothing left to withdraw",
                field="status",
            )
        return moved, changed

    def finish_withdrawal(self, task: Task, data: Mapping[str, Any], *, now: datetime) -> bool:
        """The loop closed the withdrawn task's pull request (or found nothing to close): clear
        `pr_close_pending`, take the task out of the live index and record a `pr_closed` event,
        in one write admitted only while the marker is set. False when it was already clear (a
        retried tick, or a merge that ended the wait meanwhile)."""

        def pending(current: Task) -> None:
            if not current.pr_close_pending:
                raise _AlreadyClear

        try:
            self.append_event(
                task,
                "pr_closed",
                data,
                now=now,
                admit=pending,
                sets={"updated_at": iso(now)},
                # in sight of the loop until its status comment shows it closed
                removes=("pr_close_pending",) if status_due(task) else ("pr_close_pending", "live_user"),
            )
        except _AlreadyClear:
            return False
        return True

    def close_again(
        self,
        task: Task,
        data: Mapping[str, Any],
        *,
        now: datetime,
        include: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """A person reopened the pull request of a task Steward withdrew: the withdrawal
        stands, so the task (still closed, withdrawn) is marked `pr_close_pending` again with a
        `pr_reopened` event and the loop woken, which closes the pull request again (its
        withdrawal comment is written once: `steward.services.withdrawal`). False when the
        mark is set already (nothing written). An `include`d part whose condition fails
        raises IncludedWriteRefused."""
        current = task
        for _ in range(TRANSITION_ATTEMPTS):
            if current.pr_close_pending:
                return False
            seq = current.event_seq + 1
            actions: list[dict[str, Any]] = [
                {
                    "Update": {
                        "TableName": self._tables.name(TASKS),
                        "Key": {"task_id": task.id},
                        # back in the owner's live index until the loop has closed it again
                        "UpdateExpression": "SET pr_close_pending = :t, live_user = :u, "
                        "event_seq = :seq, updated_at = :now",
                        "ConditionExpression": "#s = :closed AND reason = :withdrawn AND event_seq = :prev",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": {
                            ":t": True,
                            ":u": task.user,
                            ":seq": seq,
                            ":now": iso(now),
                            ":closed": TaskStatus.CLOSED.value,
                            ":withdrawn": lifecycle.WITHDRAWN,
                            ":prev": current.event_seq,
                        },
                    }
                },
                self._event_put(task, seq, "pr_reopened", dict(data), now),
                {"Update": wake_update(self._tables, task.user)},
                *(dict(part) for part in include),
            ]
            try:
                self._tables.client.transact_write_items(TransactItems=actions)  # type: ignore[arg-type]
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                if include and refused_included(exc, 3):
                    raise IncludedWriteRefused from None
                current = self.require(task.id)
                if current.status is not TaskStatus.CLOSED or current.reason != lifecycle.WITHDRAWN:
                    return False  # merged meanwhile: nothing is left to close
                continue
            return True
        raise Conflict(f"task {task.id} kept changing; retry")

    def request_retry(self, task: Task, *, now: datetime) -> None:
        """Ask the loop for another attempt of a finished task's item: the item goes back to
        pending while still linked to `task`, which the next spawn checks as its previous
        task (docs/concepts/identity.md, explicit retry). Only the item's current task can be retried."""
        if task.status is TaskStatus.REVIEW and task.pr_number is not None:
            # one open pull request per item revision: its own (reopened, perhaps) comes first
            raise LifecycleError(
                f"a task in review cannot be retried: its pull request #{task.pr_number} is open "
                f"({task.pr_url}); merge or close it first",
                field="status",
            )
        if task.status not in lifecycle.RETRYABLE_TASK_STATUSES:
            raise LifecycleError(f"a task that is {task.status.value} cannot be retried", field="status")
        actions: list[Any] = [
            {"ConditionCheck": self._retryable_condition(task.id, user=task.user)},
            {"Update": item_reopen_update(self._tables, task, now=now)},
            # The wake, not a bare watermark bump: a heartbeat may hold the lease now, and the
            # tick it is finishing must not take the user out of the liveness index. A person's
            # retry starts work at once: the interval gate does not hold it back.
            {"Update": wake_update(self._tables, task.user, person=True)},
        ]
        try:
            self._tables.client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            raise LifecycleError(
                "only the current task of an item still in an active plan can be retried", field="task_id"
            ) from exc
