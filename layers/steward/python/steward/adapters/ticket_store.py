"""Tickets table adapter: the one-time secret a runtime exchanges for its capability
(docs/concepts/runner.md).

Only the sha256 of a ticket is stored, so a read of the table (a backup, a console, a
scan) yields nothing a runtime could present. A ticket is used up by one conditional
DeleteItem (it must exist and not be expired) that returns the deleted item: of any number
of concurrent uses exactly one gets the task id. An expired ticket is refused and left in
place for the table's TTL to remove (one request per use, and an expired ticket is useless
whether or not it is still stored). Nothing here logs a ticket or puts one in a message.

A ticket is `stwt_` + 43 base64url characters (`steward.domain.credentials`): the prefix
lets the relay refuse, and the runner redact, a ticket in text bound for a model without
mistaking any random-looking string for one.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from botocore.exceptions import ClientError

from steward.adapters.dynamo import Tables, is_conditional_failure
from steward.domain.credentials import new_ticket
from steward.domain.errors import Conflict
from steward.domain.models import iso
from steward.tables import TICKETS

DEFAULT_TTL_SECONDS = 900
_ISSUE_ATTEMPTS = 3
_MAX_TICKET_LENGTH = 256  # issued tickets are 48 characters; anything much longer is not one


def ticket_hash(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


class TicketStore:
    def __init__(self, tables: Tables) -> None:
        self._table = tables.table(TICKETS)

    def issue(self, task_id: str, *, now: datetime, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> str:
        """A fresh ticket for `task_id`, valid for `ttl_seconds` from `now`."""
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        for _ in range(_ISSUE_ATTEMPTS):
            ticket = new_ticket()
            try:
                self._table.put_item(
                    Item={
                        "ticket_hash": ticket_hash(ticket),
                        "task_id": task_id,
                        "expires_epoch": _epoch(now) + ttl_seconds,
                        "issued_at": iso(now),
                    },
                    ConditionExpression="attribute_not_exists(ticket_hash)",
                )
            except ClientError as exc:
                if is_conditional_failure(exc):
                    continue  # 256 random bits collided: draw again
                raise
            return ticket
        raise Conflict("could not store a fresh ticket; retry")

    def consume(self, ticket: str, *, now: datetime) -> str | None:
        """The task id of `ticket`, exactly once; None for a ticket that was used, expired,
        or never issued."""
        if not ticket or len(ticket) > _MAX_TICKET_LENGTH:
            return None
        try:
            deleted = self._table.delete_item(
                Key={"ticket_hash": ticket_hash(ticket)},
                ConditionExpression="attribute_exists(ticket_hash) AND expires_epoch > :now",
                ExpressionAttributeValues={":now": _epoch(now)},
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return None
            raise
        task_id = deleted.get("Attributes", {}).get("task_id")
        return task_id if isinstance(task_id, str) else None
