"""SQS adapter of the heartbeat FIFO queue: the scheduler's fan-out (docs/architecture.md).

One message per user per tick window. The group is the user, so one user's heartbeats never
overlap; the deduplication id is a hash of user and window, so a replayed or retried
scheduler run in the same window (within SQS's 5-minute deduplication interval) adds
nothing. Users are JWT subjects, which fit SQS's group id alphabet and 128-character limit.

A person's action (a confirm, a retry, a follow-up ask) also sends one tick for its user at
once (`TickNow`), in a window of its own, so no deduplication swallows it and the work need
not wait for the scheduler's next period (docs/concepts/loop.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from itertools import islice
from typing import TYPE_CHECKING, Any

from steward.adapters import aws
from steward.adapters.dynamo import count_client_requests
from steward.queues import HEARTBEAT

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

BATCH_SIZE = 10  # SendMessageBatch's limit
PERSON_WINDOW = "person-"  # the window prefix of a tick a person's action asked for

logger = logging.getLogger(__name__)


class TickSendError(RuntimeError):
    """Some ticks were still refused after every attempt (the others were sent)."""

    def __init__(self, failed: dict[str, str], *, sent: int, attempts: int) -> None:
        self.failed = failed  # user -> last error code
        self.sent = sent
        codes = ", ".join(sorted(set(failed.values())))
        super().__init__(
            f"{len(failed)} heartbeat tick(s) failed after {attempts} attempts "
            f"({sent} sent); last error codes: {codes}"
        )


def dedup_id(user: str, window: str) -> str:
    return hashlib.sha256(f"{user}:{window}".encode()).hexdigest()[:64]


def queue_url(sqs_client: SQSClient, prefix: str) -> str:
    """The heartbeat queue's URL under a name prefix (one lookup; callers cache it)."""
    return sqs_client.get_queue_url(QueueName=HEARTBEAT.physical_name(prefix))["QueueUrl"]


class HeartbeatQueue:
    def __init__(
        self,
        url: str,
        client: SQSClient | None = None,
        *,
        max_attempts: int = 4,
        backoff_seconds: float = 0.05,
        **client_kwargs: Any,
    ) -> None:
        self.url = url
        self.client: SQSClient = client or aws.client("sqs", **client_kwargs)
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds

    def send_ticks(self, users: Iterable[str], *, window: str) -> int:
        """Enqueue one tick per distinct user for `window`, in batches of 10; returns how
        many SQS accepted (a duplicate it drops counts as accepted, so a replay reports the
        same number). Entries SQS reports as `Failed` are retried (with backoff) after all
        batches went out, so one bad entry delays no other user; any still failing after
        `max_attempts` attempts raise `TickSendError`."""
        sent = 0
        failed: dict[str, str] = {}
        for batch in _batches(_distinct(users)):
            ok, errors = self._send(batch, window)
            sent += ok
            failed.update(errors)
        attempt = 1
        while failed and attempt < self._max_attempts:
            time.sleep(self._backoff * 2 ** (attempt - 1))
            attempt += 1
            retry, failed = list(failed), {}
            for start in range(0, len(retry), BATCH_SIZE):
                ok, errors = self._send(retry[start : start + BATCH_SIZE], window)
                sent += ok
                failed.update(errors)
        if failed:
            raise TickSendError(failed, sent=sent, attempts=attempt)
        return sent

    def _send(self, users: list[str], window: str) -> tuple[int, dict[str, str]]:
        """One SendMessageBatch; returns the count sent and user -> error code of failures."""
        entries: list[SendMessageBatchRequestEntryTypeDef] = [
            {
                "Id": str(n),
                "MessageBody": json.dumps({"user": user, "window": window}, separators=(",", ":")),
                "MessageGroupId": user,
                "MessageDeduplicationId": dedup_id(user, window),
            }
            for n, user in enumerate(users)
        ]
        response = self.client.send_message_batch(QueueUrl=self.url, Entries=entries)
        failures = {users[int(f["Id"])]: f.get("Code", "unknown") for f in response.get("Failed", [])}
        return len(response.get("Successful", [])), failures


class TickNow:
    """Enqueue one tick for a user right after a person's action, in a window unique to the
    action (`person-<uuid>`): the scheduler's own ticks come once per period (a minute or
    more in AWS). Best effort: the action is durable already (its write bumped the user's
    `person_mark`, so the next tick, this one or the scheduler's, skips the interval gate);
    a failure to enqueue is logged and never fails the person's request. `queue` is called
    at the first tick, so a process that never needs the queue never looks it up."""

    def __init__(self, queue: Callable[[], HeartbeatQueue]) -> None:
        self._queue = queue

    def __call__(self, user: str) -> bool:
        """True when SQS accepted the tick."""
        try:
            self._queue().send_ticks([user], window=f"{PERSON_WINDOW}{uuid.uuid4().hex}")
        except Exception:  # the scheduler's next window ticks the user all the same
            logger.exception("a tick for a person's action could not be enqueued", extra={"user": user})
            return False
        return True


def _distinct(users: Iterable[str]) -> Iterator[str]:
    """Each user once, in first-seen order: one tick per user per call."""
    seen: set[str] = set()
    for user in users:
        if user not in seen:
            seen.add(user)
            yield user


def _batches(users: Iterable[str]) -> Iterator[list[str]]:
    iterator = iter(users)
    while batch := list(islice(iterator, BATCH_SIZE)):
        yield batch


def count_sqs_requests(queue: HeartbeatQueue) -> AbstractContextManager[Counter[str]]:
    """Count the SQS requests sent through `queue`, by operation, like `dynamo.count_requests`."""
    return count_client_requests(queue.client, "sqs")
