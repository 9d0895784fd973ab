"""What each Lambda function may do to each table: the DynamoDB actions its code calls.

Read from the stores each builder in `steward.wiring` constructs (a transaction is
authorized per item: Put -> PutItem, Update -> UpdateItem, ConditionCheck ->
ConditionCheckItem, Delete -> DeleteItem). Queries of a table's indexes need the index
ARNs too, granted with `Query`.
"""

from __future__ import annotations

from steward.config import Function
from steward.tables import (
    CONTROLS,
    DELIVERIES,
    EVENTS,
    INSTALLATIONS,
    PLANS,
    TASKS,
    TICKETS,
    USERS,
    TableSpec,
)

GET, QUERY, PUT, UPDATE, DELETE, CHECK = (
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
)

TABLE_ACCESS: dict[Function, dict[TableSpec, tuple[str, ...]]] = {
    # Plans (put, update, transact with the owner's wake-up), tasks (pages, cancel, retry's
    # condition check) and their events, the user's loop settings and wake-ups. Spawning is
    # the heartbeat's. Installations are read, never written (linking is the operator CLI's).
    "api": {
        PLANS: (GET, QUERY, PUT, UPDATE),
        TASKS: (GET, QUERY, UPDATE, CHECK),
        EVENTS: (QUERY, PUT),
        USERS: (GET, UPDATE),
        # The owner's installations (by_owner), for why an item waits (a suspended one).
        INSTALLATIONS: (QUERY,),
    },
    # The live users' index only.
    "scheduler": {USERS: (QUERY,)},
    # Lease and watermark, plans' items, spawn (task put + plan item + user charge; a retry's
    # spawn checks the previous task in the same transaction), tickets for the launched
    # runtimes, the resync's installations (for_owner: the by_owner index; get_synced; and
    # put_synced, an update, when it re-reads an installation whose deliveries disagreed),
    # the global brake before a spawn.
    "heartbeat": {
        USERS: (GET, UPDATE),
        PLANS: (GET, QUERY, UPDATE),
        TASKS: (GET, QUERY, PUT, UPDATE, CHECK),
        EVENTS: (PUT,),
        TICKETS: (PUT,),
        INSTALLATIONS: (GET, QUERY, UPDATE),
        CONTROLS: (GET,),
    },
    # Overdue tasks (live_deadline), expired reservations (reserved), the last hour's spend
    # (spending), the failure events and the owners' wake-ups; the spend-velocity breaker
    # reads and engages the global brake.
    "reaper": {
        TASKS: (GET, QUERY, UPDATE),
        EVENTS: (PUT,),
        USERS: (UPDATE,),
        PLANS: (UPDATE,),
        CONTROLS: (GET, UPDATE),
    },
    # Reserve and settle on the task item; an over-report appends one event (a consistent
    # read of the task, then a transaction: Update of the task, Put of the event); the
    # global brake (read at most every 5 s).
    "relay": {TASKS: (GET, UPDATE), EVENTS: (PUT,), CONTROLS: (GET,)},
    # Deliveries (seen: get; mark: a Put in the effect's transaction), the tasks a delivery
    # moves, installations (get, get_synced, put_synced: an update).
    "webhook": {
        DELIVERIES: (GET, PUT),
        TASKS: (GET, UPDATE),
        EVENTS: (PUT,),
        USERS: (UPDATE,),
        PLANS: (UPDATE,),
        INSTALLATIONS: (GET, UPDATE),
    },
    # Ticket exchange (conditional delete), claim/heartbeat/events/finish on the task, the
    # owner's installations (for_owner: the by_owner index) for a mint or a GitHub token.
    "runtime": {
        TICKETS: (DELETE,),
        TASKS: (GET, UPDATE),
        EVENTS: (PUT,),
        USERS: (UPDATE,),
        PLANS: (UPDATE,),
        INSTALLATIONS: (QUERY,),
    },
}
