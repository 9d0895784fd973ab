"""Deliveries table adapter: which GitHub webhook deliveries were already processed.

`record` is one conditional PutItem, so a redelivery (GitHub keeps the `X-GitHub-Delivery`
id when it redelivers) costs exactly one request and has no second effect. A record whose
`expires_epoch` passed counts as unseen even before TTL deletes it (TTL can lag for days).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from steward.adapters.dynamo import Tables, is_conditional_failure
from steward.domain.models import iso
from steward.tables import DELIVERIES


class DeliveryStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(DELIVERIES)

    def record(self, delivery_id: str, *, event: str, now: datetime, ttl_days: int = 14) -> bool:
        """Record a delivery as processed; False when it was recorded before (a duplicate)."""
        try:
            self._table.put_item(
                Item={
                    "delivery_id": delivery_id,
                    "event": event,
                    "received_at": iso(now),
                    "expires_epoch": int((now + timedelta(days=ttl_days)).timestamp()),
                },
                ConditionExpression="attribute_not_exists(delivery_id) OR expires_epoch < :now",
                ExpressionAttributeValues={":now": int(now.timestamp())},
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def forget(self, delivery_id: str) -> None:
        """Remove a record: its delivery changed nothing (ignored) or its processing failed,
        so a redelivery must be processed afresh rather than answered as a duplicate."""
        self._table.delete_item(Key={"delivery_id": delivery_id})
