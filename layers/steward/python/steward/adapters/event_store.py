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
        return [
            {"seq": e["seq"], "type": e["type"], "at": e["at"], "data": e.get("data", {})}
            for e in (plain(i, floats=True) for i in page["Items"])
        ]
