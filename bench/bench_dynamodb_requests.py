"""DynamoDB requests per control-plane operation, counted with a botocore hook.

Runs against moto in-process (request counts do not depend on the backend). Aims (issue
"control plane core"): publish <= 3 requests whatever the item count, confirm <= 2, spawn 1;
confirming an edit of an item whose task is live adds 2 per such task (read it, cancel it);
and the runtime routes' calls (the service behind them, with a verified capability): the
heartbeat, made every few seconds by every runtime, one request.

    .venv/bin/python bench/bench_dynamodb_requests.py
"""

from __future__ import annotations

import os

import boto3
from moto import mock_aws
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.plan_store import PlanStore
from steward.config import Settings
from steward.domain.capability import Capability, capability_claims
from steward.domain.models import utcnow
from steward.domain.tasks import task_for
from steward.local.moto_serial import install_dynamodb_lock
from steward.services.runtime import ArtifactCall, Ending, EventCall, RuntimeCall, RuntimeService
from steward.wiring import Services


def document(count: int, detail_bytes: int) -> str:
    items = "".join(
        f"- [ ] Item {n}: change module {n}\n  {'d' * detail_bytes}\n" for n in range(1, count + 1)
    )
    return f"---\nrepo: octo/bench\nchecks:\n  - pytest -q\n---\n# Bench\n\n{items}"


def measure(services: Services, count: int, detail_bytes: int) -> dict[str, int]:
    slug = f"bench-{count}"
    markdown = document(count, detail_bytes)
    rows: dict[str, int] = {}
    with count_requests(services.tables) as c:
        services.plans.publish("alice", slug, markdown)
    rows["publish (new)"] = sum(c.values())
    with count_requests(services.tables) as c:
        services.plans.publish("alice", slug, markdown)
    rows["republish unchanged"] = sum(c.values())
    with count_requests(services.tables) as c:
        services.plans.publish("alice", slug, markdown.replace("Item 1:", "Item one:"))
    rows["republish one item edited"] = sum(c.values())
    with count_requests(services.tables) as c:
        plan = services.plans.confirm("alice", slug)
    rows["confirm"] = sum(c.values())
    with count_requests(services.tables) as c:
        services.plans.confirm("alice", slug)
    rows["confirm again (no-op)"] = sum(c.values())
    task = task_for(plan, plan.active_items[-1], attempt=1, now=utcnow())
    with count_requests(services.tables) as c:
        services.tasks.tasks.spawn(task, previous_task_id=None, now=utcnow())
    rows["spawn one task"] = sum(c.values())
    with count_requests(services.tables) as c:
        services.tasks.tasks.spawn(task, previous_task_id=None, now=utcnow())
    rows["spawn replayed"] = sum(c.values())
    first = task_for(plan, plan.active_items[0], attempt=1, now=utcnow())
    services.tasks.tasks.spawn(first, previous_task_id=None, now=utcnow())
    services.plans.publish("alice", slug, markdown.replace("Item 1:", "Item uno:"))
    with count_requests(services.tables) as c:
        services.plans.confirm("alice", slug)
    rows["confirm superseding one task"] = sum(c.values())
    return rows


def measure_runtime(services: Services) -> dict[str, int]:
    """One runtime's calls on a freshly spawned task, as the runtime routes make them."""
    services.plans.publish("alice", "bench-runtime", document(1, 10))
    plan = services.plans.confirm("alice", "bench-runtime")
    task, _ = services.tasks.tasks.spawn(
        task_for(plan, plan.active_items[0], attempt=1, now=utcnow()), previous_task_id=None, now=utcnow()
    )
    claims = capability_claims(
        sub=task.user, task_id=task.id, model_id=task.model, max_budget_usd=task.budget_usd, now=utcnow()
    )
    capability = Capability.model_validate(claims)
    # As wired (`steward.wiring.runtime_service`): the claim reads the plan for the related
    # pull requests of the task's item.
    runtime = RuntimeService(services.tasks.tasks, services.tasks.artifacts, plans=PlanStore(services.tables))
    me = RuntimeCall(runtime_id="r1")
    calls = {
        "runtime: claim": lambda: runtime.claim(capability, me),
        "runtime: heartbeat": lambda: runtime.heartbeat(capability, me),
        "runtime: progress event": lambda: runtime.append_event(
            capability, EventCall(runtime_id="r1", type="phase", data={"phase": "edit"})
        ),
        "runtime: artifact upload URL": lambda: runtime.artifact_upload(
            capability, "harness.json", ArtifactCall(runtime_id="r1", size=100)
        ),
        "runtime: finish (failed)": lambda: runtime.finish(
            capability, Ending(runtime_id="r1", status="failed", classification="final", reason="bench")
        ),
    }
    rows: dict[str, int] = {}
    for name, call in calls.items():
        with count_requests(services.tables) as c:
            call()
        rows[name] = sum(c.values())
    return rows


def main() -> None:
    # moto in-process: fake credentials, and never an endpoint from the caller's shell
    os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"})
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    os.environ.pop("AWS_ENDPOINT_URL", None)
    install_dynamodb_lock()
    with mock_aws():
        settings = Settings(table_prefix="bench-")
        tables = Tables.connect(settings.table_prefix, region_name="us-east-1")
        tables.create_all()
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="bench")  # publish keeps each content's document there
        services = Services.build(settings, tables, ArtifactStore("bench", client=s3))
        results = {20: measure(services, 20, 200), 100: measure(services, 100, 2400)}
        runtime = measure_runtime(services)
    print("DynamoDB requests per operation (aim: publish <= 3, confirm <= 2, spawn 1)")
    print(f"{'operation':30} {'20 items':>9} {'100 items':>10}")
    for name in results[20]:
        print(f"{name:30} {results[20][name]:>9} {results[100][name]:>10}")
    print()
    print("DynamoDB requests per runtime route call (aim: heartbeat 1)")
    for name, count in runtime.items():
        print(f"{name:30} {count:>9}")


if __name__ == "__main__":
    main()
