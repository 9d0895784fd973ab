"""The users table's sparse `live` index: which users the scheduler ticks.

Only users whose loop is enabled and may have live work carry `live_shard`, so a scheduler
run reads those users and nothing else: its cost grows with active users, not all users
(docs/architecture.md). The partition is spread over `LIVE_SHARDS` shards so no index key runs
hot; a run queries every shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from steward.adapters.dynamo import Tables, key
from steward.domain.ids import LIVE_SHARDS
from steward.tables import USERS

INDEX = "live"
# The names `steward.domain.ids.live_shard` assigns; tests check the two agree.
SHARDS: tuple[str, ...] = tuple(f"s{n:02d}" for n in range(LIVE_SHARDS))


class LivenessIndex:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(USERS)

    def live_users(
        self, shard: str, *, cursor: dict[str, Any] | None = None, limit: int = 500
    ) -> tuple[list[str], dict[str, Any] | None]:
        """One page of a shard's live users (sorted by user) and the cursor of the next page,
        or None after the last. Reads only the key attributes the index stores."""
        kwargs: dict[str, Any] = {
            "IndexName": INDEX,
            "KeyConditionExpression": key("live_shard").eq(shard),
            # `user` is a DynamoDB reserved word.
            "ProjectionExpression": "#user, #shard",
            "ExpressionAttributeNames": {"#user": "user", "#shard": "live_shard"},
            "Limit": limit,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = cursor
        page = self._table.query(**kwargs)
        users = [str(item["user"]) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        return users, dict(last) if last else None

    def all_live_users(self) -> Iterator[str]:
        """Every live user, shard after shard, page after page (lazily)."""
        for shard in SHARDS:
            cursor: dict[str, Any] | None = None
            while True:
                users, cursor = self.live_users(shard, cursor=cursor)
                yield from users
                if cursor is None:
                    break
