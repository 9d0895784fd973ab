"""SQS queue definitions, written once (like `steward.tables`).

The CDK app, the local stack and the tests create their queues from these specs, so a name
or a FIFO setting cannot drift between them. Pure data: no boto3 here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class QueueSpec:
    logical_name: str  # the physical name is f"{prefix}{logical_name}", plus ".fifo" for FIFO
    fifo: bool = False
    content_based_deduplication: bool = False
    visibility_timeout: int = 30
    message_retention: int = 4 * 24 * 3600
    doc: str = ""

    def physical_name(self, prefix: str) -> str:
        return f"{prefix}{self.logical_name}{'.fifo' if self.fifo else ''}"

    def create_queue_kwargs(self, prefix: str) -> dict[str, Any]:
        """Arguments for boto3 `create_queue` (SQS takes every attribute as a string)."""
        attributes = {
            "VisibilityTimeout": str(self.visibility_timeout),
            "MessageRetentionPeriod": str(self.message_retention),
        }
        if self.fifo:
            attributes["FifoQueue"] = "true"
            attributes["ContentBasedDeduplication"] = str(self.content_based_deduplication).lower()
        return {"QueueName": self.physical_name(prefix), "Attributes": attributes}


HEARTBEAT = QueueSpec(
    logical_name="heartbeat",
    fifo=True,
    # Explicit deduplication ids (user + tick window): a replayed scheduler run in the same
    # window is dropped by SQS, while content-based dedup would also need identical bodies.
    content_based_deduplication=False,
    # Longer than one heartbeat run, so a message is not redelivered while it is handled.
    visibility_timeout=120,
    # A tick older than an hour is superseded by newer ones; stale ones need not linger.
    message_retention=3600,
    doc="One message per live user per tick window; group = user, so one user's heartbeats "
    "never run concurrently while different users' run in parallel.",
)
