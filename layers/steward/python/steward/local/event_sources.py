"""What AWS does between services, done locally with the same events: an EventBridge
Scheduler rate that invokes a Lambda, and an SQS event source mapping that feeds a Lambda
batches from a queue and deletes what it handled (honouring `batchItemFailures`).

Each invokes its handler under `invocation_lock` when given one: the local stack passes the
lock of every function it serves in its process (one invocation at a time per process)."""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from steward.local.http_adapter import LambdaContext

logger = logging.getLogger(__name__)
Handler = Callable[[dict[str, Any], Any], Any]


class _Loop:
    def __init__(self, name: str, invocation_lock: AbstractContextManager[Any] | None = None) -> None:
        self._invocation_lock = invocation_lock if invocation_lock is not None else contextlib.nullcontext()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.name = name

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
            except Exception:  # a failing invocation is logged; the schedule goes on
                logger.exception("%s: invocation failed", self.name)
            self._stop.wait(self.pause())

    def once(self) -> None:
        raise NotImplementedError

    def pause(self) -> float:
        return 0.0


class Schedule(_Loop):
    """Invoke `handler` every `seconds` with a Scheduler-like event."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        seconds: float,
        *,
        invocation_lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        super().__init__(name, invocation_lock)
        self._handler = handler
        self._seconds = seconds

    def once(self) -> None:
        event = {
            "source": "local.scheduler",
            "detail-type": "Scheduled Event",
            "id": str(uuid.uuid4()),
            "time": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "resources": [f"arn:aws:scheduler:local:000000000000:schedule/default/{self.name}"],
            "detail": {},
        }
        with self._invocation_lock:
            self._handler(event, LambdaContext(self.name))

    def pause(self) -> float:
        return self._seconds


class SqsSource(_Loop):
    """Long-poll a queue and invoke `handler` with SQS events of up to 10 records."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        *,
        invocation_lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        super().__init__(name, invocation_lock)
        self._handler = handler
        self._sqs = sqs
        self._url = queue_url
        self._arn = queue_arn

    def once(self) -> None:
        received = self._sqs.receive_message(
            QueueUrl=self._url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        if not received:
            return
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": self._arn,
                "awsRegion": self._arn.split(":")[3],
            }
            for m in received
        ]
        with self._invocation_lock:
            result = self._handler({"Records": records}, LambdaContext(self.name)) or {}
        failed = {f["itemIdentifier"] for f in result.get("batchItemFailures", [])}
        done = [
            {"Id": str(n), "ReceiptHandle": r["receiptHandle"]}
            for n, r in enumerate(records)
            if r["messageId"] not in failed
        ]
        if done:
            self._sqs.delete_message_batch(QueueUrl=self._url, Entries=done)
        for record in records:
            if record["messageId"] in failed:
                # Redelivered after a short visibility timeout instead of the queue's minutes.
                self._sqs.change_message_visibility(
                    QueueUrl=self._url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=2
                )
