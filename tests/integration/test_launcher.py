"""The launcher in AWS shape (FargateLauncher against FakeEcs, since moto's ECS ignores
clientToken), one-time tickets on moto's DynamoDB (serialized, docs/testing.md), and the
launch use case that combines them."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from botocore.exceptions import ClientError
from steward.adapters.dynamo import Tables
from steward.adapters.fargate_launcher import TASK_ID_TAG, FargateLauncher, LaunchError, client_token
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore, ticket_hash
from steward.domain.launch import RuntimeEndpoints
from steward.domain.models import Task, TaskStatus, utcnow
from steward.services.launching import launch_task
from steward.tables import TASKS, TICKETS
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.fake_ecs import FakeEcs
from tests.support.plans import spawn_item

R = TypeVar("R")
CONTAINER = "runner"
ENDPOINTS = RuntimeEndpoints(api_url="https://api.example.test", relay_url="https://relay.example.test")


def all_at_once(count: int, action: Callable[[int], R]) -> list[R | BaseException]:
    """Run `action(i)` on `count` threads released together; return results or exceptions."""
    barrier = threading.Barrier(count)

    def run(i: int) -> R | BaseException:
        barrier.wait()
        try:
            return action(i)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def launcher_for(ecs: FakeEcs) -> FargateLauncher:
    return FargateLauncher(
        ecs,
        cluster="steward",
        task_definition="steward-runner:3",
        container_name=CONTAINER,
        subnets=["subnet-a", "subnet-b"],
        security_groups=["sg-runner"],
        endpoints=ENDPOINTS,
    )


@pytest.fixture
def task(services: Services) -> Task:
    services.plans.publish("alice", "demo", document(*numbered(2)))
    plan = services.plans.confirm("alice", "demo")
    spawned, _ = spawn_item(services, plan, 1)
    return spawned


@pytest.fixture
def other_task(services: Services, task: Task) -> Task:
    spawned, _ = spawn_item(services, services.plans.get("alice", "demo"), 2)
    return spawned


# ---- FargateLauncher


def test_launch_runs_one_fargate_task_with_exactly_the_runtime_variables(task: Task) -> None:
    ecs = FakeEcs()
    arn = launcher_for(ecs).launch(task, "ticket-1")
    assert arn.startswith("arn:aws:ecs:")
    assert [t["taskArn"] for t in ecs.running()] == [arn]
    (call,) = ecs.runs
    assert call["launchType"] == "FARGATE"
    assert call["count"] == 1
    assert call["startedBy"] == "steward"
    assert call["tags"] == [{"key": TASK_ID_TAG, "value": task.id}]
    vpc = call["networkConfiguration"]["awsvpcConfiguration"]
    assert vpc == {
        "subnets": ["subnet-a", "subnet-b"],
        "securityGroups": ["sg-runner"],
        "assignPublicIp": "DISABLED",
    }
    assert ecs.environment_of(arn, CONTAINER) == {
        "STEWARD_TASK_ID": task.id,
        "STEWARD_TICKET": "ticket-1",
        "STEWARD_API_URL": ENDPOINTS.api_url,
        "STEWARD_RELAY_URL": ENDPOINTS.relay_url,
    }


def test_client_token_is_valid_for_ecs_and_deterministic_per_task_id(task: Task, other_task: Task) -> None:
    ecs = FakeEcs()
    launcher = launcher_for(ecs)
    launcher.launch(task, "ticket-1")
    launcher.launch(other_task, "ticket-2")
    tokens = [call["clientToken"] for call in ecs.runs]
    for token in tokens:
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token), token
    assert tokens == [client_token(task.id), client_token(other_task.id)]
    assert tokens[0] == client_token(task.id) != tokens[1]
    assert len(ecs.running()) == 2


def test_five_launches_of_one_task_start_one_ecs_task(task: Task) -> None:
    ecs = FakeEcs()
    launcher = launcher_for(ecs)
    # the same ticket (a retried request) and fresh tickets (a replayed launch) alike
    refs = {launcher.launch(task, "ticket-same") for _ in range(2)}
    refs |= {launcher.launch(task, f"ticket-{n}") for n in range(3)}
    assert len(refs) == 1
    assert len(ecs.runs) == 1
    assert len(ecs.run_calls) == 5
    assert len(ecs.running()) == 1


def test_ten_concurrent_launches_of_one_task_start_one_ecs_task(task: Task) -> None:
    ecs = FakeEcs()
    launcher = launcher_for(ecs)
    results = all_at_once(10, lambda i: launcher.launch(task, f"ticket-{i}"))
    refs = [r for r in results if isinstance(r, str)]
    assert len(refs) == 10, [r for r in results if isinstance(r, BaseException)]
    assert len(set(refs)) == 1
    assert len(ecs.runs) == 1
    assert [t["taskArn"] for t in ecs.running()] == refs[:1]


def test_throttling_is_a_launch_error_that_never_shows_the_ticket(task: Task) -> None:
    ecs = FakeEcs()
    ecs.throttle_next()
    ticket = "tk_" + "s3cr3t" * 6
    with pytest.raises(LaunchError) as caught:
        launcher_for(ecs).launch(task, ticket)
    error = caught.value
    assert error.status == 502
    assert error.reason == "ThrottlingException"
    assert "ThrottlingException" in str(error)
    for text in (str(error), repr(error), error.message, str(error.to_body())):
        assert ticket not in text
    assert error.__cause__ is None
    assert error.__context__ is None
    assert ecs.running() == []
    # the next tick succeeds
    assert launcher_for(ecs).launch(task, ticket)
    assert len(ecs.running()) == 1


def test_a_failures_entry_is_a_launch_error_and_the_token_stays_usable(task: Task) -> None:
    ecs = FakeEcs()
    ecs.fail_next_run("RESOURCE:MEMORY")
    launcher = launcher_for(ecs)
    with pytest.raises(LaunchError) as caught:
        launcher.launch(task, "ticket-secret-1")
    assert caught.value.reason == "RESOURCE:MEMORY"
    assert "ticket-secret-1" not in str(caught.value)
    assert ecs.running() == []
    arn = launcher.launch(task, "ticket-secret-2")
    assert [t["taskArn"] for t in ecs.running()] == [arn]


def test_a_refused_request_is_a_launch_error_without_the_ticket(task: Task) -> None:
    launcher = FargateLauncher(
        FakeEcs(),
        cluster="steward",
        task_definition="",  # ECS refuses it
        container_name=CONTAINER,
        subnets=["subnet-a"],
        security_groups=[],
        endpoints=ENDPOINTS,
    )
    with pytest.raises(LaunchError) as caught:
        launcher.launch(task, "ticket-secret")
    assert caught.value.reason == "InvalidParameterException"
    assert "ticket-secret" not in repr(caught.value)


def test_stop_stops_the_task_and_is_idempotent(task: Task, other_task: Task) -> None:
    ecs = FakeEcs()
    launcher = launcher_for(ecs)
    arn = launcher.launch(task, "ticket-1")
    other = launcher.launch(other_task, "ticket-2")
    launcher.stop(task, arn)
    launcher.stop(task, arn)  # already stopped
    launcher.stop(task, arn.rsplit("/", 1)[0] + "/" + "0" * 32)  # never existed
    launcher.stop(task, None)  # nothing of it runs any more
    assert [t["taskArn"] for t in ecs.running()] == [other]
    assert {s["reason"] for s in ecs.stops} == {"steward: task cancelled"}
    assert {s["cluster"] for s in ecs.stops} == {"steward"}
    # without a reference, the running task is found by its tag
    launcher.stop(other_task, None)
    assert ecs.running() == []
    # a relaunch after a stop does not start a second runtime under the same token
    assert launcher.launch(task, "ticket-3") == arn
    assert len(ecs.runs) == 2


def test_a_throttled_stop_is_a_launch_error(task: Task) -> None:
    ecs = FakeEcs()
    launcher = launcher_for(ecs)
    arn = launcher.launch(task, "ticket-1")
    ecs.throttle_next()
    with pytest.raises(LaunchError):
        launcher.stop(task, arn)
    launcher.stop(task, arn)
    assert ecs.running() == []


# ---- FakeEcs keeps ECS's rules (the launcher's tests are only as good as the fake)


def test_fake_ecs_keeps_the_client_token_rules() -> None:
    ecs = FakeEcs()
    base: dict[str, Any] = {
        "cluster": "c",
        "taskDefinition": "td:1",
        "launchType": "FARGATE",
        "networkConfiguration": {"awsvpcConfiguration": {"subnets": ["s"]}},
    }
    first = ecs.run_task(clientToken="tok", **base)
    assert ecs.run_task(clientToken="tok", **base) == first
    with pytest.raises(ClientError) as mismatch:
        ecs.run_task(clientToken="tok", startedBy="other", **base)
    assert mismatch.value.response["Error"]["Code"] == "ConflictException"
    for bad in ("x" * 65, "with space", "", "naïve"):
        with pytest.raises(ClientError) as invalid:
            ecs.run_task(clientToken=bad, **base)
        assert invalid.value.response["Error"]["Code"] == "InvalidParameterException"
    ecs.run_task(clientToken="tok", **{**base, "cluster": "other"})  # tokens are per cluster
    assert len(ecs.runs) == 2


# ---- TicketStore


def test_a_ticket_is_consumed_once(tables: Tables) -> None:
    tickets = TicketStore(tables)
    now = utcnow()
    ticket = tickets.issue("t123", now=now)
    assert len(ticket) >= 43
    assert tickets.consume(ticket, now=now + timedelta(seconds=5)) == "t123"
    assert tickets.consume(ticket, now=now + timedelta(seconds=6)) is None
    assert tickets.consume("never-issued", now=now) is None
    assert tickets.consume("", now=now) is None


def test_an_expired_ticket_is_refused(tables: Tables) -> None:
    tickets = TicketStore(tables)
    now = utcnow()
    ticket = tickets.issue("t123", now=now, ttl_seconds=60)
    assert tickets.consume(ticket, now=now + timedelta(seconds=60)) is None
    assert tickets.consume(ticket, now=now + timedelta(seconds=61)) is None
    # an expired use deletes nothing (the item waits for TTL): with a clock before expiry it works
    assert tickets.consume(ticket, now=now) == "t123"


def test_only_the_hash_of_a_ticket_is_stored(tables: Tables) -> None:
    tickets = TicketStore(tables)
    now = utcnow()
    ticket = tickets.issue("t123", now=now, ttl_seconds=900)
    (item,) = tables.table(TICKETS).scan(ConsistentRead=True)["Items"]
    assert ticket not in repr(item)
    assert item["ticket_hash"] == ticket_hash(ticket)
    assert set(item) == {"ticket_hash", "task_id", "expires_epoch", "issued_at"}
    assert int(str(item["expires_epoch"])) == int(now.timestamp()) + 900
    raw = tables.client.scan(TableName=tables.name(TICKETS))["Items"]
    assert ticket not in repr(raw)


def test_twenty_concurrent_consumers_of_one_ticket_one_wins(tables: Tables) -> None:
    tickets = TicketStore(tables)
    now = utcnow()
    ticket = tickets.issue("t123", now=now)
    results = all_at_once(20, lambda _: tickets.consume(ticket, now=now))
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert results.count("t123") == 1
    assert results.count(None) == 19


# ---- launch_task


def test_launch_task_issues_a_ticket_launches_and_marks_launched(
    services: Services, tables: Tables, task: Task
) -> None:
    ecs = FakeEcs()
    store = TaskStore(tables)
    tickets = TicketStore(tables)
    now = utcnow()
    ref = launch_task(task, launcher=launcher_for(ecs), tickets=tickets, tasks=store, now=now)
    assert ref is not None
    assert [t["taskArn"] for t in ecs.running()] == [ref]
    stored = store.require(task.id)
    assert stored.launched_at == now
    assert stored.launch_ref == ref
    assert stored.status is TaskStatus.QUEUED
    (raw,) = [i for i in tables.table(TASKS).scan(ConsistentRead=True)["Items"] if i["task_id"] == task.id]
    assert raw["launch_ref"] == ref
    # the ticket in the runtime's environment is the one issued for this task, usable once
    ticket = ecs.environment_of(ref, CONTAINER)["STEWARD_TICKET"]
    assert tickets.consume(ticket, now=now) == task.id

    # a second call (with the task as first read) returns the same runtime, issues nothing
    # and launches nothing
    again = launch_task(task, launcher=launcher_for(ecs), tickets=tickets, tasks=store, now=now)
    assert again == ref
    assert len(ecs.run_calls) == 1
    assert tables.table(TICKETS).scan(ConsistentRead=True)["Items"] == []


def test_launch_task_after_a_crash_before_the_record_finds_the_same_runtime(
    tables: Tables, task: Task
) -> None:
    ecs = FakeEcs()
    launcher = launcher_for(ecs)
    store = TaskStore(tables)
    earlier = launcher.launch(task, "ticket-of-the-lost-launch")  # launched, never recorded
    ref = launch_task(task, launcher=launcher, tickets=TicketStore(tables), tasks=store, now=utcnow())
    assert ref == earlier
    assert len(ecs.runs) == 1
    assert store.require(task.id).launched_at is not None


def test_launch_task_leaves_the_task_queued_when_the_launch_fails(tables: Tables, task: Task) -> None:
    ecs = FakeEcs()
    ecs.fail_next_run()
    store = TaskStore(tables)
    with pytest.raises(LaunchError):
        launch_task(task, launcher=launcher_for(ecs), tickets=TicketStore(tables), tasks=store, now=utcnow())
    assert store.require(task.id).launched_at is None
    assert launch_task(
        task, launcher=launcher_for(ecs), tickets=TicketStore(tables), tasks=store, now=utcnow()
    )


def test_launch_task_launches_nothing_for_a_task_no_longer_queued(
    services: Services, tables: Tables, task: Task
) -> None:
    services.tasks.cancel("alice", task.id)
    ecs = FakeEcs()
    tickets = TicketStore(tables)
    assert (
        launch_task(task, launcher=launcher_for(ecs), tickets=tickets, tasks=TaskStore(tables), now=utcnow())
        is None
    )
    assert ecs.run_calls == []
    assert tables.table(TICKETS).scan(ConsistentRead=True)["Items"] == []
