"""The relay's budget: reservations and settlements on the task item, one conditional
UpdateItem each (docs/concepts/relay.md, docs/testing.md).

Running totals live on the task item because conditions cannot do arithmetic:
`committed_usd` (settled spend + outstanding reservations) and `headroom_usd` (the task's
budget minus committed). Admission is one UpdateItem that checks owner, status `running`,
the pinned model, `headroom_usd >= cost` (the task cap) and `committed_usd <= token cap -
cost` (the capability's cap), and records the reservation under a fresh id with an expiry.
Settlement replaces the reservation by the actual cost, never by more than the reservation
(a provider's report above it is recorded in `over_reported_usd` instead, in the same
UpdateItem), on the condition that the reservation still exists, so a second settlement, or
one after the reaper expired it, changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import Tables, is_conditional_failure, old_item, plain
from steward.domain.brake import spend_attribute
from steward.domain.budget import Refusal, Settlement, charge_for
from steward.domain.ids import live_shard
from steward.domain.models import TaskStatus, iso
from steward.tables import TASKS


def _decimal(value: Any) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)


class BudgetStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(TASKS)

    def reserve(
        self,
        *,
        task_id: str,
        owner: str,
        model: str,
        token_cap: Decimal,
        cost: Decimal,
        reservation_id: str,
        expires_at: datetime,
        now: datetime,
    ) -> Refusal | None:
        """Reserve `cost` for one call; None on success, else why it was refused."""
        try:
            self._table.update_item(
                Key={"task_id": task_id},
                UpdateExpression="SET reservations.#r = :res, reservation_shard = :shard "
                "ADD committed_usd :cost, headroom_usd :neg",
                ConditionExpression="#u = :owner AND #s = :running AND model = :model "
                "AND headroom_usd >= :cost AND committed_usd <= :token_limit",
                ExpressionAttributeNames={"#r": reservation_id, "#u": "user", "#s": "status"},
                ExpressionAttributeValues={
                    ":res": {"amount": cost, "expires_at": iso(expires_at), "at": iso(now)},
                    ":shard": live_shard(task_id),
                    ":cost": cost,
                    ":neg": -cost,
                    ":owner": owner,
                    ":running": TaskStatus.RUNNING.value,
                    ":model": model,
                    ":token_limit": token_cap - cost,
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            return self._refusal(old_item(exc))
        return None

    @staticmethod
    def _refusal(item: dict[str, Any] | None) -> Refusal:
        if item is None:
            return Refusal(False, None, None, None, Decimal(0), Decimal(0), Decimal(0), None)
        data = plain(item)
        expiries = [
            datetime.fromisoformat(r["expires_at"].replace("Z", "+00:00"))
            for r in (data.get("reservations") or {}).values()
        ]
        return Refusal(
            found=True,
            owner=data.get("user"),
            status=data.get("status"),
            model=data.get("model"),
            budget_usd=_decimal(data.get("budget_usd")),
            cost_usd=_decimal(data.get("cost_usd")),
            committed_usd=_decimal(data.get("committed_usd")),
            earliest_expiry=min(expiries) if expiries else None,
        )

    def settle(
        self,
        *,
        task_id: str,
        reservation_id: str,
        reserved: Decimal,
        actual: Decimal,
        now: datetime | None = None,
        expired_before: datetime | None = None,
    ) -> Settlement:
        """Replace the reservation by `actual` (0 releases it), but never by more than
        `reserved`: a reported cost above the reservation is charged the reservation and the
        excess is added to `over_reported_usd` in the same UpdateItem (`charge_for`), so the
        ceiling holds with settlement included and an over-report costs no extra request
        here. With `expired_before`, only a reservation that expired before then is settled
        (the reaper's sweep). With `now`, a charge is also added to the five-minute spend bucket
        of `now` and the task enters the `spending` index, for the spend-velocity breaker
        (`steward.domain.brake`), in the same UpdateItem."""
        charge = charge_for(reserved, actual)
        condition = "attribute_exists(reservations.#r)"
        names = {"#r": reservation_id}
        values: dict[str, Any] = {
            ":delta": charge.charged - reserved,
            ":neg": reserved - charge.charged,
            ":actual": charge.charged,
        }
        adds = ["committed_usd :delta", "headroom_usd :neg", "cost_usd :actual"]
        sets = []
        if now is not None and charge.charged > 0:
            adds.append("#bucket :actual")
            sets += ["spend_shard = :spend_shard", "settled_at = :settled_at"]
            names["#bucket"] = spend_attribute(now)
            values[":spend_shard"] = live_shard(task_id)
            values[":settled_at"] = iso(now)
        if charge.over_reported > 0:
            adds.append("over_reported_usd :over")
            values[":over"] = charge.over_reported
        update = "REMOVE reservations.#r ADD " + ", ".join(adds) + (" SET " + ", ".join(sets) if sets else "")
        if expired_before is not None:
            condition += " AND reservations.#r.expires_at < :expired"
            values[":expired"] = iso(expired_before)
        try:
            result = self._table.update_item(
                Key={"task_id": task_id},
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
            data = plain(old_item(exc) or {})
            return Settlement(
                False,
                _decimal(data.get("cost_usd")),
                _decimal(data.get("committed_usd")),
                _decimal(data.get("headroom_usd")),
            )
        data = plain(result["Attributes"])
        return Settlement(
            True,
            _decimal(data.get("cost_usd")),
            _decimal(data.get("committed_usd")),
            _decimal(data.get("headroom_usd")),
            charged_usd=charge.charged,
            over_reported_usd=charge.over_reported,
        )

    def expired(self, shard: str, now: datetime) -> list[tuple[str, str, Decimal]]:
        """(task id, reservation id, amount) of the shard's reservations past expiry."""
        out: list[tuple[str, str, Decimal]] = []
        kwargs: dict[str, Any] = {
            "IndexName": "reserved",
            "KeyConditionExpression": "reservation_shard = :s",
            "ExpressionAttributeValues": {":s": shard},
        }
        while True:
            page = self._table.query(**kwargs)
            for raw in page["Items"]:
                item: dict[str, Any] = dict(raw)
                for rid, res in (item.get("reservations") or {}).items():
                    if str(res["expires_at"]) < iso(now):
                        out.append((str(item["task_id"]), str(rid), _decimal(res["amount"])))
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def settled_since(self, shard: str, since: datetime) -> list[dict[str, Any]]:
        """The shard's task items charged at or after `since` (the `spending` index)."""
        out: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "IndexName": "spending",
            "KeyConditionExpression": "spend_shard = :s AND settled_at >= :since",
            "ExpressionAttributeValues": {":s": shard, ":since": iso(since)},
        }
        while True:
            page = self._table.query(**kwargs)
            out += [dict(item) for item in page["Items"]]
            if "LastEvaluatedKey" not in page:
                return out
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def leave_index_if_empty(self, task_id: str) -> None:
        try:
            self._table.update_item(
                Key={"task_id": task_id},
                UpdateExpression="REMOVE reservation_shard",
                ConditionExpression="size(reservations) = :zero",
                ExpressionAttributeValues={":zero": 0},
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
