"""DynamoDB table definitions, written once.

The CDK app, the local stack and the tests all build their tables from these specs, so a
key or an index cannot drift between them. Pure data: no boto3 here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

AttrType = Literal["S", "N"]


@dataclass(frozen=True)
class Key:
    name: str
    type: AttrType = "S"


@dataclass(frozen=True)
class Index:
    name: str
    partition: Key
    sort: Key | None = None


@dataclass(frozen=True)
class TableSpec:
    logical_name: str  # also the suffix of the physical name: f"{prefix}{logical_name}"
    partition: Key
    sort: Key | None = None
    indexes: tuple[Index, ...] = ()
    ttl_attribute: str | None = None
    doc: str = ""

    def physical_name(self, prefix: str) -> str:
        return f"{prefix}{self.logical_name}"

    def page_key(self, index: str | None = None) -> dict[str, AttrType]:
        """The attributes, with their types, of the key a query of the table (or of `index`)
        ends a page with: the table's own key, plus the index's."""
        keys = [self.partition, *([self.sort] if self.sort else [])]
        if index is not None:
            found = next(i for i in self.indexes if i.name == index)
            keys += [found.partition, *([found.sort] if found.sort else [])]
        return {key.name: key.type for key in keys}

    def create_table_kwargs(self, prefix: str) -> dict[str, Any]:
        """Arguments for boto3 `create_table` (on-demand, like the CDK tables)."""
        keys = [self.partition, *([self.sort] if self.sort else [])]
        attributes = {k.name: k.type for k in keys}
        schema = [{"AttributeName": self.partition.name, "KeyType": "HASH"}]
        if self.sort:
            schema.append({"AttributeName": self.sort.name, "KeyType": "RANGE"})
        kwargs: dict[str, Any] = {
            "TableName": self.physical_name(prefix),
            "KeySchema": schema,
            "BillingMode": "PAY_PER_REQUEST",
        }
        gsis = []
        for index in self.indexes:
            index_schema = [{"AttributeName": index.partition.name, "KeyType": "HASH"}]
            attributes[index.partition.name] = index.partition.type
            if index.sort:
                index_schema.append({"AttributeName": index.sort.name, "KeyType": "RANGE"})
                attributes[index.sort.name] = index.sort.type
            gsis.append(
                {
                    "IndexName": index.name,
                    "KeySchema": index_schema,
                    "Projection": {"ProjectionType": "ALL"},
                }
            )
        if gsis:
            kwargs["GlobalSecondaryIndexes"] = gsis
        kwargs["AttributeDefinitions"] = [
            {"AttributeName": name, "AttributeType": kind} for name, kind in attributes.items()
        ]
        return kwargs


PLANS = TableSpec(
    "plans",
    partition=Key("user"),
    sort=Key("slug"),
    doc="One item per plan holding its items (a 256 KiB document fits the 400 KB item limit); "
    "a `version` attribute makes every write conditional on what was read.",
)
TASKS = TableSpec(
    "tasks",
    partition=Key("task_id"),
    indexes=(
        Index("by_user", Key("user"), Key("created_key")),
        Index("by_plan", Key("plan_id"), Key("created_key")),
        # Sparse: only non-terminal tasks carry live_user/live_shard/deadline, so the
        # heartbeat reads a user's live tasks and the reaper the overdue ones, never history.
        Index("live_by_user", Key("live_user"), Key("created_key")),
        Index("live_deadline", Key("live_shard"), Key("deadline")),
        # Sparse: tasks with relay reservations outstanding, for the reaper's expiry sweep.
        Index("reserved", Key("reservation_shard"), Key("task_id")),
        # Sparse: tasks the relay has charged, by their last settlement, for the reaper's
        # spend-velocity breaker (the spend of the last hour, never all history).
        Index("spending", Key("spend_shard"), Key("settled_at")),
    ),
    doc="One item per task attempt, created only by spawn (attribute_not_exists).",
)
EVENTS = TableSpec(
    "events",
    partition=Key("task_id"),
    sort=Key("seq", "N"),
    doc="Append-only, gapless per task: each event is a conditional put of the next seq.",
)
USERS = TableSpec(
    "users",
    partition=Key("user"),
    # Sparse: live_shard is present only while the user's loop is enabled and may have live
    # work, so the scheduler's cost grows with active users, not all users.
    indexes=(Index("live", Key("live_shard"), Key("user")),),
    doc="Per-user loop settings, event watermark, heartbeat lease and spawn counters.",
)
INSTALLATIONS = TableSpec(
    "installations",
    partition=Key("installation_id", "N"),
    indexes=(Index("by_owner", Key("owner_sub"), Key("installation_id", "N")),),
    doc="GitHub App installations: owner sub, account, repositories, suspended.",
)

TICKETS = TableSpec(
    "tickets",
    partition=Key("ticket_hash"),
    ttl_attribute="expires_epoch",
    doc="One-time runtime tickets, stored as hashes; consumed by a conditional delete. TTL only "
    "cleans up: expiry is checked on use.",
)

DELIVERIES = TableSpec(
    "deliveries",
    partition=Key("delivery_id"),
    ttl_attribute="expires_epoch",
    doc="GitHub webhook deliveries seen (X-GitHub-Delivery), recorded by a conditional put so a "
    "redelivery has no second effect; TTL cleans up.",
)

CONTROLS = TableSpec(
    "controls",
    partition=Key("name"),
    doc="Operator controls of the whole deployment: the global brake (`name = brake`). Written by "
    "the operator's `steward admin brake` and by the reaper's spend-velocity breaker, read by the "
    "relay and the heartbeat through a cache at most 5 s stale.",
)

ALL_TABLES: tuple[TableSpec, ...] = (
    PLANS,
    TASKS,
    EVENTS,
    USERS,
    INSTALLATIONS,
    TICKETS,
    DELIVERIES,
    CONTROLS,
)
