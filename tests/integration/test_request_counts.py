"""Request budgets of the control plane, counted on the wire (botocore hook), not estimated:
publish does not grow with the item count, confirm takes two requests, spawn one."""

from __future__ import annotations

import pytest
from steward.adapters.dynamo import count_requests
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.plans import spawn_item


@pytest.mark.parametrize("count", [20, 100])
def test_publish_confirm_spawn_request_counts(services: Services, count: int) -> None:
    markdown = document(*numbered(count))
    with count_requests(services.tables) as first:
        services.plans.publish("alice", "counted", markdown)
    with count_requests(services.tables) as unchanged:
        services.plans.publish("alice", "counted", markdown)
    with count_requests(services.tables) as confirm:
        plan = services.plans.confirm("alice", "counted")
    with count_requests(services.tables) as spawn:
        spawn_item(services, plan, count)
    with count_requests(services.tables) as replay:
        spawn_item(services, plan, count)
    assert sum(first.values()) <= 3
    assert sum(unchanged.values()) == 1
    # the approval and the loop's wake-up are one transaction; then the plan is read back
    assert dict(confirm) == {"TransactWriteItems": 1, "GetItem": 1}
    assert dict(spawn) == {"TransactWriteItems": 1}
    assert dict(replay) == {"TransactWriteItems": 1}
