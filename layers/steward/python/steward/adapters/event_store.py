"""Events table adapter: durable per-task events in sequence order."""

from __future__ import annotations

from typing import Any

from steward.adapters.dynamo import Tables, key, plain
from steward.tables import EVENTS


class EventStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(EVENTS)

    def list(self, task_id: str, *, after: int, limit: int) -> list[dict[str, Any]]:
        page = self._table.query(
            KeyConditionExpression=key("task_id").eq(task_id) & key("seq").gt(after),
            Limit=limit,
            ConsistentRead=True,
        )
        return [_shown(i) for i in page["Items"]]

    def of_type(self, task_id: str, event_type: str) -> tuple[dict[str, Any], ...]:
        """Every event of one type the task has, in order (a round's `check` events, for its
        parent's page): the task's events read page by page, only that type answered."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "task_id = :task",
            "FilterExpression": "#type = :type",
            "ExpressionAttributeNames": {"#type": "type"},  # a reserved word
            "ExpressionAttributeValues": {":task": task_id, ":type": event_type},
            "ConsistentRead": True,
        }
        found: list[dict[str, Any]] = []
        while True:
            page = self._table.query(**kwargs)
            found += [_shown(i) for i in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return tuple(found)
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _shown(item: dict[str, Any]) -> dict[str, Any]:
    e = plain(item, floats=True)
    return {"seq": e["seq"], "type": e["type"], "at": e["at"], "data": e.get("data", {})}
