"""Deliveries table adapter: which GitHub webhook deliveries were already processed.

A delivery's "processed" mark is never written on its own: `mark` is a transaction part
that the store applying the delivery's effect (a task transition, an installation sync)
commits together with that effect, so a mark exists exactly when its effect does. A failed
effect leaves no mark and the redelivery is processed afresh; a redelivery of an applied
one (GitHub keeps the `X-GitHub-Delivery` id) costs one read, `seen`. A record whose
`expires_epoch` passed counts as unseen even before TTL deletes it (TTL can lag for days).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from steward.adapters.dynamo import Tables
from steward.domain.models import iso
from steward.tables import DELIVERIES


class DeliveryStore:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._table = tables.table(DELIVERIES)

    def seen(self, delivery_id: str, *, now: datetime) -> bool:
        """Whether the delivery's effect was committed (and its mark has not expired)."""
        found = self._table.get_item(
            Key={"delivery_id": delivery_id}, ConsistentRead=True, ProjectionExpression="expires_epoch"
        )
        item = found.get("Item")
        return item is not None and int(str(item.get("expires_epoch", 0))) >= int(now.timestamp())

    def mark(self, delivery_id: str, *, event: str, now: datetime, ttl_days: int = 14) -> dict[str, Any]:
        """The delivery's "processed" mark as a TransactWriteItems part; its condition fails
        when a concurrent redelivery committed first (the caller then answers duplicate)."""
        return {
            "Put": {
                "TableName": self._tables.name(DELIVERIES),
                "Item": {
                    "delivery_id": delivery_id,
                    "event": event,
                    "received_at": iso(now),
                    "expires_epoch": int((now + timedelta(days=ttl_days)).timestamp()),
                },
                "ConditionExpression": "attribute_not_exists(delivery_id) OR expires_epoch < :now",
                "ExpressionAttributeValues": {":now": int(now.timestamp())},
            }
        }
