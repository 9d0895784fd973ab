"""Users table adapter: one item per user holding loop settings and the loop's bookkeeping.

Attributes besides the settings: `watermark` (advanced by lifecycle events and approvals),
`processed_watermark` and `due_at` (written by a complete tick), `lease_until`/`lease_epoch`
(the heartbeat's in-flight lease; the epoch fences late writes), `spawn_day`/`spawn_count`
(the daily cap, charged by spawn itself), `live_shard`/`live_mark` (membership of the
scheduler's sparse liveness index), and `person_mark`/`person_seen` (a person's action
since the last working tick, which the interval gate lets through: `LoopState.nudged`).

This module writes every user item, including the user-item parts of the other stores'
transactions (`wake_update`, `spawn_charge_update`), so the loop's bookkeeping has one
writer and a new write cannot forget half of it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import Tables, is_conditional_failure, plain
from steward.domain.ids import live_shard
from steward.domain.loop import LoopSettings, LoopSettingsUpdate, LoopState
from steward.domain.models import iso
from steward.domain.tasks import SpawnCharge
from steward.tables import USERS

_SETTINGS_FIELDS = tuple(LoopSettings.model_fields)


# ---- the user-item parts of other stores' transactions
def wake_update(tables: Tables, user: str, *, person: bool = False) -> dict[str, Any]:
    """The user-item part of every write that should make the loop act (docs/concepts/loop.md):
    a plan's confirmation or archival, an explicit retry, a task's lifecycle event. It
    advances the watermark, joins the liveness index, and bumps `live_mark`.

    `person`: the write is a person's action that starts work (a confirm, an explicit retry,
    a follow-up ask): it also bumps `person_mark`, so the next tick is not held back by the
    interval gate (`LoopState.nudged`; the other gates still hold). A task's own lifecycle
    events and the runtime's reports are not: the interval bounds the ticks they cause.

    The three go together. A tick records as processed the watermark it read, and a tick
    that found no live work leaves the index unless `live_mark` moved since its read
    (`UserStore.finish_tick`); an advance without the mark, made while a heartbeat holds
    the lease, would be unprocessed and unscheduled at once: the scheduler would never
    send the tick that acts on it."""
    marks = "watermark :one, live_mark :one" + (", person_mark :one" if person else "")
    return {
        "TableName": tables.name(USERS),
        "Key": {"user": user},
        "UpdateExpression": f"SET live_shard = :shard ADD {marks}",
        "ExpressionAttributeValues": {":shard": live_shard(user), ":one": 1},
    }


def spawn_charge_update(tables: Tables, user: str, charge: SpawnCharge, *, now: datetime) -> dict[str, Any]:
    """The user-item part of the loop's spawn: charge one spawn of the day's cap, on the
    condition that the loop is enabled, not paused, under the cap and still leased at
    `charge.lease_epoch`. It joins the liveness index without bumping `live_mark`: only
    the lease holder can charge, and its own tick reports the spawn as live work."""
    values: dict[str, Any] = {
        ":day": charge.day,
        ":one": 1,
        ":epoch": charge.lease_epoch,
        ":true": True,
        ":false": False,
        ":shard": live_shard(user),
        ":now": iso(now),
    }
    gate = "lease_epoch = :epoch AND (attribute_not_exists(paused) OR paused = :false) AND (attribute_not_exists(enabled) OR enabled = :true)"
    if charge.same_day:
        values[":cap"] = charge.cap
        update = "SET live_shard = :shard, last_spawn_at = :now ADD spawn_count :one"
        condition = f"spawn_day = :day AND spawn_count < :cap AND {gate}"
    else:
        if charge.cap < 1:
            values[":never"] = "never"  # a zero cap refuses every spawn
            condition = f"spawn_day = :never AND {gate}"
        else:
            condition = f"(attribute_not_exists(spawn_day) OR spawn_day <> :day) AND {gate}"
        update = "SET live_shard = :shard, last_spawn_at = :now, spawn_day = :day, spawn_count = :one"
    return {
        "TableName": tables.name(USERS),
        "Key": {"user": user},
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": values,
    }


def _settings_of(stored: dict[str, Any]) -> LoopSettings:
    return LoopSettings(**{k: stored[k] for k in _SETTINGS_FIELDS if stored.get(k) is not None})


def _state_of(user: str, stored: dict[str, Any]) -> LoopState:
    data = plain(stored)
    known = set(LoopState.model_fields) - {"user", "settings", "live"}
    return LoopState(
        user=user,
        settings=_settings_of(data),
        live="live_shard" in data,
        **{k: data[k] for k in known if data.get(k) is not None},
    )


class UserStore:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._table = tables.table(USERS)

    # ---- settings (client API)
    def loop_settings(self, user: str) -> LoopSettings:
        found = self._table.get_item(
            Key={"user": user},
            ConsistentRead=True,
            ProjectionExpression=", ".join(f"#{f}" for f in _SETTINGS_FIELDS),
            ExpressionAttributeNames={f"#{f}": f for f in _SETTINGS_FIELDS},
        )
        return _settings_of(plain(found.get("Item", {})))

    def update_loop_settings(
        self, user: str, update: LoopSettingsUpdate, *, now: datetime, clear_quiet_hours: bool
    ) -> LoopSettings:
        """Set only the fields given, in one UpdateItem (no read-modify-write). Any change
        wakes the loop (a resumed loop must not wait for unrelated progress); disabling the
        loop takes the user out of the liveness index."""
        changes: dict[str, Any] = update.model_dump(mode="json", exclude_none=True)
        sets = [f"#{k} = :{k}" for k in changes]
        names = {f"#{k}": k for k in changes}
        values: dict[str, Any] = {f":{k}": v for k, v in changes.items()}
        sets.append("updated_at = :now")
        values |= {":now": iso(now), ":one": 1}
        removes = []
        if update.enabled is False:
            removes.append("live_shard")
        else:
            sets.append("live_shard = :shard")
            values[":shard"] = live_shard(user)
        if clear_quiet_hours:
            removes.append("#quiet_hours")
            names["#quiet_hours"] = "quiet_hours"
        expression = "SET " + ", ".join(sets) + " ADD watermark :one, live_mark :one"
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        result = self._table.update_item(
            Key={"user": user},
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            **kwargs,
        )
        return _settings_of(plain(result["Attributes"]))

    # ---- loop bookkeeping (heartbeat)
    def loop_state(self, user: str) -> LoopState:
        found = self._table.get_item(Key={"user": user}, ConsistentRead=True)
        return _state_of(user, found.get("Item", {}))

    def acquire_lease(self, user: str, *, owner: str, now: datetime, ttl: timedelta) -> LoopState | None:
        """Take the user's in-flight lease unless another holder's lease is still valid.
        Returns the state with the new fencing epoch, or None when someone holds it."""
        try:
            result = self._table.update_item(
                Key={"user": user},
                UpdateExpression="SET lease_until = :until, lease_owner = :owner ADD lease_epoch :one",
                ConditionExpression="attribute_not_exists(lease_until) OR lease_until <= :now",
                ExpressionAttributeValues={
                    ":until": iso(now + ttl),
                    ":owner": owner,
                    ":now": iso(now),
                    ":one": 1,
                },
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return None
            raise
        return _state_of(user, result["Attributes"])

    def finish_tick(
        self,
        state: LoopState,
        *,
        now: datetime,
        processed_watermark: int | None,
        due_at: datetime | None,
        still_live: bool,
        acted: bool = True,
    ) -> bool:
        """Record a tick and release the lease, only if the lease is still ours (epoch).
        `processed_watermark` None means the tick did not finish its work: the next tick
        must not take the shortcut. A user with no live work leaves the liveness index,
        unless a write marked them live since `state` was read. The tick took account of
        the person's actions up to `state.person_mark` (`person_seen`): one made since
        `state` was read still lets the next tick through the interval gate. `acted` False (the
        tick raised before it could act) leaves `person_seen`: their redelivery is let through."""
        values: dict[str, Any] = {":now": iso(now), ":epoch": state.lease_epoch}
        sets = ["last_tick_at = :now"]
        if acted:
            sets.append("person_seen = :seen")
            values[":seen"] = state.person_mark
        removes = ["lease_until", "lease_owner"]
        if processed_watermark is not None:
            sets.append("processed_watermark = :pw")
            values[":pw"] = processed_watermark
        if due_at is not None:
            sets.append("due_at = :due")
            values[":due"] = iso(due_at)
        else:
            removes.append("due_at")
        released = self._fenced(
            state.user,
            "SET " + ", ".join(sets) + " REMOVE " + ", ".join(removes),
            "lease_epoch = :epoch",
            values,
        )
        if still_live:
            return released
        # A write that marked the user live after `state` was read bumped live_mark: keep them.
        left = self._fenced(
            state.user,
            "REMOVE live_shard",
            "lease_epoch = :epoch AND (attribute_not_exists(live_mark) OR live_mark = :mark)",
            {":epoch": state.lease_epoch, ":mark": state.live_mark},
        )
        return released and left

    def _fenced(self, user: str, update: str, condition: str, values: dict[str, Any]) -> bool:
        kwargs: dict[str, Any] = {
            "Key": {"user": user},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
        try:
            self._table.update_item(**kwargs)
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    def leave_index(self, user: str) -> None:
        """A disabled loop has no place in the liveness index."""
        try:
            self._table.update_item(
                Key={"user": user},
                UpdateExpression="REMOVE live_shard",
                ConditionExpression="enabled = :false",
                ExpressionAttributeValues={":false": False},
            )
        except ClientError as exc:
            if not is_conditional_failure(exc):
                raise
