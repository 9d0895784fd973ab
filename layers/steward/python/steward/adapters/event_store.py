"""Events table adapter: durable per-task events in sequence order."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.conditions import Key

from steward.adapters.dynamo import Tables, plain
from steward.tables import EVENTS


class EventStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(EVENTS)

    def list(self, task_id: str, *, after: int, limit: int) -> list[dict[str, Any]]:
        page = self._table.query(
            KeyConditionExpression=Key("task_id").eq(task_id) & Key("seq").gt(after),
            Limit=limit,
            ConsistentRead=True,
        )
        return [
            {"seq": e["seq"], "type": e["type"], "at": e["at"], "data": _json_numbers(e.get("data", {}))}
            for e in (plain(i) for i in page["Items"])
        ]


def _json_numbers(value: Any) -> Any:
    """Event data is for JSON clients: fractional numbers (durations) as floats."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_numbers(v) for v in value]
    return value
