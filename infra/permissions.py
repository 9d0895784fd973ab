"""What each Lambda function may do to each table: the DynamoDB actions its code calls.

Read from the stores each builder in `steward.wiring` constructs (a transaction is
authorized per item: Put -> PutItem, Update -> UpdateItem, ConditionCheck ->
ConditionCheckItem, Delete -> DeleteItem). `TABLE_ACCESS` holds the actions on each table's
own ARN (`Query` there: a query of the table itself); `INDEX_QUERIES` the indexes each
function queries (`Query` on exactly those index ARNs). Both are checked against every
call the functions' code makes (tests/infra/test_infra_grants.py): an action or index the
code does not use, or one it uses and these lack, fails that test.
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
    # Plans (put, update, transact with the owner's wake-up; the list is a query of the
    # owner's plans), tasks (cancel, retry's condition check) and their events (a query of
    # the task's events), the user's loop settings and wake-ups. Spawning is the heartbeat's.
    # Installations are only queried (below); linking is the operator CLI's.
    "api": {
        PLANS: (GET, QUERY, PUT, UPDATE),
        TASKS: (GET, UPDATE, CHECK),
        EVENTS: (QUERY, PUT),
        USERS: (GET, UPDATE),
    },
    # The live users' index only (below).
    "scheduler": {},
    # Lease and watermark, plans' items (a query of the user's plans), spawn (task put + plan
    # item + user charge; a retry's spawn checks the previous task in the same transaction),
    # tickets for the launched runtimes, the resync's installations (get_synced; and
    # put_synced, an update, when it re-reads an installation whose deliveries disagreed),
    # the global brake before a spawn; a status comment reads the task's events (its last
    # checks: a query) and a resync's or a cancel's transition writes one.
    "heartbeat": {
        USERS: (GET, UPDATE),
        PLANS: (GET, QUERY, UPDATE),
        TASKS: (GET, PUT, UPDATE, CHECK),
        EVENTS: (QUERY, PUT),
        TICKETS: (PUT,),
        INSTALLATIONS: (GET, UPDATE),
        CONTROLS: (GET,),
    },
    # Overdue tasks, expired reservations and the last hour's spend are index queries
    # (below); the failure events and the owners' wake-ups; the spend-velocity breaker reads
    # and engages the global brake.
    "reaper": {
        TASKS: (GET, UPDATE),
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
    # plan (its related pull requests, for the body of the pull request a run opens).
    "runtime": {
        TICKETS: (DELETE,),
        TASKS: (GET, UPDATE),
        EVENTS: (PUT,),
        USERS: (UPDATE,),
        PLANS: (GET, UPDATE),
    },
}

INDEX_QUERIES: dict[Function, dict[TableSpec, tuple[str, ...]]] = {
    # The caller's tasks (by_user), a plan's tasks (by_plan), the live ones (live_by_user);
    # the owner's installations, for why an item waits (a suspended one).
    "api": {TASKS: ("by_user", "by_plan", "live_by_user"), INSTALLATIONS: ("by_owner",)},
    "scheduler": {USERS: ("live",)},
    # The user's live tasks; the owner's installations (resync's for_owner).
    "heartbeat": {TASKS: ("live_by_user",), INSTALLATIONS: ("by_owner",)},
    # Overdue tasks, expired reservations, the last hour's spend.
    "reaper": {TASKS: ("live_deadline", "reserved", "spending")},
    # The owner's installations (for_owner) for a mint or a GitHub token.
    "runtime": {INSTALLATIONS: ("by_owner",)},
}
