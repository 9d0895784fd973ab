"""Tasks table adapter. `spawn` is the only way a task comes to exist.

Spawn is one TransactWriteItems: put the task under its deterministic id
(attribute_not_exists) and link it to its plan item, conditional on the plan still
approving that exact item revision. A replayed spawn fails the put's condition and gets the
existing task back from the cancellation reason, creating nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import (
    Tables,
    cancellation_reasons,
    decode_cursor,
    deserialize,
    encode_cursor,
    error_code,
    is_conditional_failure,
    old_item,
    plain,
)
from steward.domain import lifecycle
from steward.domain.errors import Conflict, LifecycleError, NotFound
from steward.domain.models import (
    ItemStatus,
    PlanStatus,
    Task,
    TaskStatus,
    iso,
)
from steward.tables import PLANS, TASKS


def task_to_item(task: Task) -> dict[str, Any]:
    data = task.model_dump(mode="json", exclude={"id"}, exclude_none=True)
    data["task_id"] = task.id
    data["created_key"] = f"{iso(task.created_at)}#{task.id}"
    # Money stays decimal end to end (DynamoDB numbers), never float.
    data["budget_usd"] = task.budget_usd
    data["cost_usd"] = task.cost_usd
    return data


def item_to_task(item: dict[str, Any]) -> Task:
    data = dict(item)
    data.pop("created_key", None)
    return Task(id=data.pop("task_id"), **data)


class TaskStore:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._table = tables.table(TASKS)

    def get(self, task_id: str) -> Task | None:
        found = self._table.get_item(Key={"task_id": task_id}, ConsistentRead=True)
        return item_to_task(found["Item"]) if "Item" in found else None

    def require_owned(self, user: str, task_id: str) -> Task:
        """The caller's task; another user's task is indistinguishable from a missing one."""
        task = self.get(task_id)
        if task is None or task.user != user:
            raise NotFound(f"no task {task_id!r}", field="task_id")
        return task

    def list(
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
        start = decode_cursor(cursor, must_match={key_name: key_value})
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = self._table.query(**kwargs)
        tasks = [item_to_task(i) for i in page["Items"]]
        # plan ids embed the user, but a listing by plan still never shows another's task
        return [t for t in tasks if t.user == user], encode_cursor(page.get("LastEvaluatedKey"))

    def spawn(self, task: Task, *, previous_task_id: str | None, now: datetime) -> tuple[Task, bool]:
        """Create `task` and link it to its plan item in one atomic step.

        Returns (task, created). The plan must be confirmed or in progress with its current
        content approved, the item at this revision and not removed, and the item linked to
        `previous_task_id` (None: no task yet and still pending). Violations raise
        LifecycleError and write nothing."""
        names = {
            "#s": "status",
            "#v": "version",
            "#k": task.item_key,
            "#ist": "status",
            "#items": "items",
        }
        values: dict[str, Any] = {
            ":tid": task.id,
            ":running": ItemStatus.RUNNING.value,
            ":in_progress": PlanStatus.IN_PROGRESS.value,
            ":confirmed": PlanStatus.CONFIRMED.value,
            ":rev": task.revision,
            ":false": False,
            ":now": iso(now),
            ":one": 1,
        }
        if previous_task_id is None:
            link_condition = "attribute_not_exists(#items.#k.task_id) AND #items.#k.#ist = :pending"
            values[":pending"] = ItemStatus.PENDING.value
        else:
            link_condition = "#items.#k.task_id = :prev"
            values[":prev"] = previous_task_id
        plan_update = {
            "TableName": self._tables.name(PLANS),
            "Key": {"user": task.user, "slug": task.plan_slug},
            "UpdateExpression": "SET #items.#k.task_id = :tid, #items.#k.#ist = :running, "
            "#s = :in_progress, updated_at = :now ADD #v :one",
            "ConditionExpression": "#s IN (:confirmed, :in_progress) AND approved_hash = content_hash"
            " AND #items.#k.revision = :rev AND #items.#k.removed = :false AND " + link_condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        try:
            self._tables.client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._tables.name(TASKS),
                            "Item": task_to_item(task),
                            "ConditionExpression": "attribute_not_exists(task_id)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    },
                    {"Update": plan_update},  # type: ignore[typeddict-item]
                ]
            )
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            task_reason, plan_reason = cancellation_reasons(exc)[:2]
            if task_reason.get("Code") == "ConditionalCheckFailed":
                existing = task_reason.get("Item")
                found = item_to_task(plain(deserialize(existing))) if existing else self.get(task.id)
                if found is not None:
                    return found, False
            if plan_reason.get("Code") == "ConditionalCheckFailed":
                raise LifecycleError(
                    "the plan no longer approves this item revision for a new task",
                    field="item",
                ) from exc
            raise Conflict("a concurrent write touched the same plan; retry") from exc
        return task, True

    def cancel(self, user: str, task_id: str, *, now: datetime, reason: str) -> Task:
        """queued/running -> cancelled (final). Cancelling a cancelled task is a no-op."""
        try:
            result = self._table.update_item(
                Key={"task_id": task_id},
                UpdateExpression="SET #s = :cancelled, classification = :final, reason = :reason, "
                "updated_at = :now",
                ConditionExpression="#u = :u AND #s IN (:queued, :running)",
                ExpressionAttributeNames={"#s": "status", "#u": "user"},
                ExpressionAttributeValues={
                    ":cancelled": TaskStatus.CANCELLED.value,
                    ":final": "final",
                    ":reason": reason,
                    ":now": iso(now),
                    ":u": user,
                    ":queued": TaskStatus.QUEUED.value,
                    ":running": TaskStatus.RUNNING.value,
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            current = old_item(exc)
            if current is None or current.get("user") != user:
                raise NotFound(f"no task {task_id!r}", field="task_id") from exc
            task = item_to_task(plain(current))
            lifecycle.task_transition(task.status, TaskStatus.CANCELLED)
            return task
        return item_to_task(plain(result["Attributes"]))

    def request_retry(self, task: Task, *, now: datetime) -> None:
        """Ask the loop for another attempt of a finished task's item: the item goes back to
        pending while still linked to `task`, which the next spawn checks as its previous
        task (DESIGN section 4, explicit retry). Only the item's current task can be retried."""
        retryable = (TaskStatus.FAILED, TaskStatus.CLOSED, TaskStatus.CANCELLED)
        if task.status not in retryable:
            raise LifecycleError(f"a task that is {task.status.value} cannot be retried", field="status")
        try:
            self._tables.client.transact_write_items(
                TransactItems=[
                    {
                        "ConditionCheck": {
                            "TableName": self._tables.name(TASKS),
                            "Key": {"task_id": task.id},
                            "ConditionExpression": "#u = :u AND #s IN (:a, :b, :c)",
                            "ExpressionAttributeNames": {"#u": "user", "#s": "status"},
                            "ExpressionAttributeValues": {
                                ":u": task.user,
                                **{f":{n}": s.value for n, s in zip("abc", retryable, strict=True)},
                            },
                        }
                    },
                    {
                        "Update": {
                            "TableName": self._tables.name(PLANS),
                            "Key": {"user": task.user, "slug": task.plan_slug},
                            # A completed plan reopens: the retried item is work again.
                            "UpdateExpression": "SET #items.#k.#ist = :pending, #s = :in_progress, "
                            "updated_at = :now ADD #v :one",
                            "ConditionExpression": "#s IN (:confirmed, :in_progress, :completed) "
                            "AND approved_hash = content_hash "
                            "AND #items.#k.task_id = :tid AND #items.#k.revision = :rev",
                            "ExpressionAttributeNames": {
                                "#k": task.item_key,
                                "#items": "items",
                                "#ist": "status",
                                "#s": "status",
                                "#v": "version",
                            },
                            "ExpressionAttributeValues": {
                                ":pending": ItemStatus.PENDING.value,
                                ":now": iso(now),
                                ":one": 1,
                                ":confirmed": PlanStatus.CONFIRMED.value,
                                ":in_progress": PlanStatus.IN_PROGRESS.value,
                                ":completed": PlanStatus.COMPLETED.value,
                                ":tid": task.id,
                                ":rev": task.revision,
                            },
                        }
                    },
                ]
            )
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            raise LifecycleError(
                "only the current task of an item in an active plan can be retried", field="task_id"
            ) from exc
