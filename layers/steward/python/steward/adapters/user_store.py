"""Users table adapter: one item per user holding loop settings (and, as the loop grows,
its watermark, lease and spawn counters)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from steward.adapters.dynamo import Tables, plain
from steward.domain.loop import LoopSettings, LoopSettingsUpdate
from steward.domain.models import iso
from steward.tables import USERS

_SETTINGS_FIELDS = tuple(LoopSettings.model_fields)


class UserStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(USERS)

    def loop_settings(self, user: str) -> LoopSettings:
        found = self._table.get_item(
            Key={"user": user},
            ConsistentRead=True,
            ProjectionExpression=", ".join(f"#{f}" for f in _SETTINGS_FIELDS),
            ExpressionAttributeNames={f"#{f}": f for f in _SETTINGS_FIELDS},
        )
        stored = plain(found.get("Item", {}))
        return LoopSettings(**{k: v for k, v in stored.items() if v is not None})

    def update_loop_settings(
        self, user: str, update: LoopSettingsUpdate, *, now: datetime, clear_quiet_hours: bool
    ) -> LoopSettings:
        """Set only the fields given, in one UpdateItem (no read-modify-write)."""
        changes: dict[str, Any] = update.model_dump(mode="json", exclude_none=True)
        sets = [f"#{k} = :{k}" for k in changes]
        names = {f"#{k}": k for k in changes}
        values = {f":{k}": v for k, v in changes.items()}
        sets.append("updated_at = :now")
        values[":now"] = iso(now)
        expression = "SET " + ", ".join(sets)
        if clear_quiet_hours:
            expression += " REMOVE #quiet_hours"
            names["#quiet_hours"] = "quiet_hours"
        kwargs: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        result = self._table.update_item(
            Key={"user": user},
            UpdateExpression=expression,
            ExpressionAttributeValues=values,
            ReturnValues="ALL_NEW",
            **kwargs,
        )
        stored = plain(result["Attributes"])
        return LoopSettings(**{k: stored[k] for k in _SETTINGS_FIELDS if stored.get(k) is not None})
