"""Fixture tasks made by `steward local capability` (`steward.local.fixtures`) stay out of
the owner's way: no `max_parallel` slot, no daily-cap charge, no place in the plan list, no
launch or retry by the loop, and the reaper ends them when their capability expires. Only
that code path makes a fixture: no Task Document, slug or request body can. On moto, with
the loop's heartbeat over the ECS fake and a clock the test advances."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from steward.adapters.capability_signer import CapabilityVerifier, KmsCapabilitySigner, kms_client
from steward.api.requests import PublishBody, parse_body
from steward.domain import waiting
from steward.domain.errors import BadRequest, InvalidDocument, LifecycleError, Unauthorized
from steward.domain.models import ItemStatus, PlanKind, TaskStatus
from steward.local.fixtures import make_fixture
from steward.services.reaper import FIXTURE_REASON
from steward.tables import PLANS, TASKS
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.documents import document
from tests.support.loop import Loop, build_loop
from tests.support.runtime_routes import new_capability_key

LIFETIME = timedelta(minutes=10)


@pytest.fixture
def loop(services: Services) -> Loop:
    loop = build_loop(services)
    loop.settings("alice", interval_seconds=1, max_parallel=1, daily_spawn_cap=1)
    return loop


@pytest.fixture
def key_id(services: Services) -> str:
    return new_capability_key()


def fixture_of(loop: Loop, key_id: str, user: str = "alice") -> dict[str, Any]:
    signer = KmsCapabilitySigner(kms_client(region_name=REGION), key_id)
    return make_fixture(
        loop.services.tables,
        signer,
        user=user,
        budget_usd=Decimal("0.50"),
        model="scripted",
        now=loop.clock(),
        lifetime=LIFETIME,
    )


def launched_task_ids(loop: Loop) -> list[str]:
    return [tag["value"] for run in loop.ecs.runs for tag in run["tags"] if tag["key"] == "steward:task_id"]


def test_a_fixture_holds_no_slot_and_its_owners_real_plan_spawns_past_it(loop: Loop, key_id: str) -> None:
    made = fixture_of(loop, key_id)
    assert (made["kind"], made["lifetime_seconds"]) == ("fixture", 600)
    services = loop.services
    listed, _ = services.plans.list("alice", limit=50, cursor=None)
    assert listed == []  # not in `plan list` ...
    shown = services.plans.get("alice", made["plan_slug"])  # ... but reachable by its slug
    assert shown.kind is PlanKind.FIXTURE
    assert shown.to_api()["kind"] == "fixture"
    task = loop.tasks.require(made["task_id"])
    assert (task.kind, task.status) == (PlanKind.FIXTURE, TaskStatus.RUNNING)
    assert loop.heartbeat.users.loop_state("alice").spawn_count == 0  # no daily-cap charge

    # Alice's real plan, max_parallel 1 and a daily cap of 1: its item waits for the next
    # tick (not for a slot the fixture holds), and the tick spawns and launches it.
    services.plans.publish("alice", "real", document("A real change", "Another one"))
    plan = services.plans.confirm("alice", "real")
    state = loop.heartbeat.users.loop_state("alice")
    live = services.tasks.live("alice")
    assert made["task_id"] in [t.id for t in live]
    waits = waiting.for_item(plan, plan.active_items[0], state, live, loop.clock())
    assert waits is not None
    assert waits.reason == "next_tick"
    loop.clock.advance(2)
    report = loop.heartbeat.tick("alice")
    plan = services.plans.get("alice", "real")
    first = plan.active_items[0]
    assert report.spawned == (first.task_id,)
    assert launched_task_ids(loop) == [first.task_id]  # never a runtime for the fixture
    assert [p.slug for p in services.plans.list("alice", limit=50, cursor=None)[0]] == ["real"]
    # The slot the real task holds is named, the fixture's never.
    state = loop.heartbeat.users.loop_state("alice")
    held = waiting.for_item(plan, plan.active_items[1], state, services.tasks.live("alice"), loop.clock())
    assert held is not None
    assert held.reason in ("max_parallel", "daily_cap")
    assert made["task_id"] not in held.detail


def test_the_reaper_cancels_a_fixture_when_its_capability_expires_and_nothing_retries_it(
    loop: Loop, key_id: str
) -> None:
    made = fixture_of(loop, key_id)
    start = loop.clock()
    verifier = CapabilityVerifier.from_kms(kms_client(region_name=REGION), [key_id])
    capability = verifier.verify(made["capability"], now=start + LIFETIME - timedelta(seconds=1))
    task = loop.tasks.require(made["task_id"])
    assert task.deadline is not None
    assert abs(task.deadline.timestamp() - capability.exp) < 1  # the task lives as long as its capability

    assert loop.reaper.sweep(start + LIFETIME - timedelta(seconds=1)) == []
    assert loop.reaper.sweep(start + LIFETIME + timedelta(seconds=1)) == [made["task_id"]]
    ended = loop.tasks.require(made["task_id"])
    assert (ended.status, ended.classification, ended.reason) == (
        TaskStatus.CANCELLED,
        "final",
        FIXTURE_REASON,
    )
    assert loop.ecs.stops == []  # it has no runtime to stop
    assert loop.reaper.sweep(start + LIFETIME * 2) == []
    with pytest.raises(Unauthorized):
        verifier.verify(made["capability"], now=start + LIFETIME + timedelta(seconds=31))
    item = loop.services.plans.get("alice", made["plan_slug"]).active_items[0]
    assert item.status is ItemStatus.FAILED

    # The loop neither retries nor relaunches it; a person's retry is refused, not queued.
    loop.clock.advance(LIFETIME.total_seconds() + 2)
    report = loop.heartbeat.tick("alice")
    assert (report.spawned, loop.ecs.runs) == ((), [])
    with pytest.raises(LifecycleError, match="not retried"):
        loop.services.tasks.retry("alice", made["task_id"])


def test_archiving_a_fixture_plan_cancels_its_task_without_a_runtime(loop: Loop, key_id: str) -> None:
    made = fixture_of(loop, key_id)
    loop.services.plans.archive("alice", made["plan_slug"])
    loop.clock.advance(2)
    loop.heartbeat.tick("alice")
    assert loop.tasks.require(made["task_id"]).status is TaskStatus.CANCELLED
    assert loop.ecs.runs == []


def test_a_task_document_cannot_make_itself_a_fixture(loop: Loop, key_id: str) -> None:
    services = loop.services
    with pytest.raises(InvalidDocument) as refused:
        services.plans.publish("alice", "sneaky", document("X").replace("checks:", "kind: fixture\nchecks:"))
    assert refused.value.field is not None
    assert "kind" in refused.value.field
    with pytest.raises(BadRequest):  # nor a field of the request body
        parse_body('{"markdown": "x", "kind": "fixture"}', PublishBody)

    # The fixture's slug prefix is just a slug: a person's plan under it is work, listed,
    # spawned and launched (and counted) like any other.
    services.plans.publish("alice", "capability-deadbeef", document("Looks like a fixture"))
    plan = services.plans.confirm("alice", "capability-deadbeef")
    assert plan.kind is PlanKind.WORK
    loop.clock.advance(2)
    [spawned] = loop.heartbeat.tick("alice").spawned
    assert loop.tasks.require(spawned).kind is PlanKind.WORK
    assert launched_task_ids(loop) == [spawned]
    assert [p.slug for p in services.plans.list("alice", limit=50, cursor=None)[0]] == ["capability-deadbeef"]

    # Publishing over a fixture is refused (its tasks would be ignored by the loop), and
    # the fixture is left as it was.
    made = fixture_of(loop, key_id)
    before = services.plans.get("alice", made["plan_slug"])
    with pytest.raises(LifecycleError, match="local fixture"):
        services.plans.publish("alice", made["plan_slug"], document("Ten items of real work"))
    assert services.plans.get("alice", made["plan_slug"]) == before

    # Stored: a work plan or task has no `kind` attribute (absent is work, as before kinds).
    plans, tasks = services.tables.table(PLANS), services.tables.table(TASKS)
    assert "kind" not in plans.get_item(Key={"user": "alice", "slug": "capability-deadbeef"})["Item"]
    assert "kind" not in tasks.get_item(Key={"task_id": spawned})["Item"]
    assert plans.get_item(Key={"user": "alice", "slug": made["plan_slug"]})["Item"]["kind"] == "fixture"
    assert tasks.get_item(Key={"task_id": made["task_id"]})["Item"]["kind"] == "fixture"
