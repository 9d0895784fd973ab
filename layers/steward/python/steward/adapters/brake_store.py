"""The global brake's durable state: one item of the controls table (`name = brake`).

The one writer of the controls table. Engaging and releasing are single conditional
UpdateItems, so two operators (or an operator and the breaker) racing each other leave one
consistent item: the first to engage names the reason; a release records when, which starts
the breaker's window afresh (`steward.domain.brake`).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import Tables, is_conditional_failure, old_item, plain
from steward.domain.brake import Brake
from steward.domain.models import iso
from steward.tables import CONTROLS

_KEY = {"name": "brake"}


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None


def _brake(item: dict[str, Any] | None) -> Brake:
    if not item:
        return Brake()
    data = plain(item)
    spend = data.get("spend_usd")
    return Brake(
        engaged=bool(data.get("engaged")),
        reason=data.get("reason"),
        by=data.get("by"),
        since=_time(data.get("since")),
        released_at=_time(data.get("released_at")),
        spend_usd=Decimal(str(spend)) if spend is not None else None,
    )


class BrakeStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(CONTROLS)

    def read(self) -> Brake:
        return _brake(self._table.get_item(Key=_KEY, ConsistentRead=True).get("Item"))

    def engage(
        self,
        *,
        reason: str,
        by: str,
        now: datetime,
        spend_usd: Decimal | None = None,
        unless_released_since: Brake | None = None,
    ) -> tuple[Brake, bool]:
        """Engage unless already engaged; (the brake as stored, whether this call engaged it).
        With `unless_released_since` (the brake the caller read), also not when it was
        released after that read: the breaker never overrules a release it did not see."""
        values: dict[str, Any] = {":on": True, ":reason": reason, ":by": by, ":now": iso(now)}
        condition = "(attribute_not_exists(engaged) OR engaged <> :on)"
        if unless_released_since is not None:
            seen = unless_released_since.released_at
            if seen is None:
                condition += " AND attribute_not_exists(released_at)"
            else:
                condition += " AND released_at = :seen"
                values[":seen"] = iso(seen)
        update = "SET engaged = :on, reason = :reason, #by = :by, since = :now"
        if spend_usd is not None:
            update += ", spend_usd = :spend"
            values[":spend"] = spend_usd
        else:
            update += " REMOVE spend_usd"
        return self._write(update, condition, values)

    def release(self, *, by: str, now: datetime) -> tuple[Brake, bool]:
        """Release if engaged; (the brake as stored, whether this call released it)."""
        return self._write(
            "SET engaged = :off, released_at = :now, released_by = :by REMOVE reason, #by, since, spend_usd",
            "engaged = :on",
            {":off": False, ":on": True, ":by": by, ":now": iso(now)},
        )

    def _write(self, update: str, condition: str, values: dict[str, Any]) -> tuple[Brake, bool]:
        try:
            result = self._table.update_item(
                Key=_KEY,
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ExpressionAttributeNames={"#by": "by"},  # both writes name it: `by` is reserved
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return _brake(old_item(exc)), False
        return _brake(result["Attributes"]), True
