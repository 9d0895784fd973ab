"""Helpers that observe AWS traffic the way a caller would: by counting real requests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from steward.adapters.dynamo import Tables


@contextmanager
def count_dynamodb_requests(tables: Tables) -> Iterator[Counter[str]]:
    """Count DynamoDB API calls made through `tables`' client, by operation name, using a
    botocore event hook (each call is one HTTP request; retries would show as extra calls
    in `before-send`, which is what is counted)."""
    counts: Counter[str] = Counter()

    def on_send(request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        name = target.decode() if isinstance(target, bytes) else str(target)
        counts[name.rsplit(".", 1)[-1]] += 1

    events = tables.client.meta.events
    events.register("before-send.dynamodb", on_send)
    try:
        yield counts
    finally:
        events.unregister("before-send.dynamodb", on_send)
