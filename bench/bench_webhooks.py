"""Webhook receiver figures on the moto server (the local stack's AWS endpoint), printed,
not asserted:

* DynamoDB requests per delivery: a new pull_request delivery that moves a running task to
  review, a duplicate (aim 1), an installation delivery, ignored ones, and a review that asks
  for a follow-up round (new, duplicate, the same ask again);
* deliveries processed per second through the service (`WebhookReceiver.receive`) and
  through the HTTP adapter (`LambdaHttpServer(kind="function_url")` in front of the real
  Lambda handler), for new pull_request deliveries, duplicates and installation deliveries.

Payloads are GitHub-shaped and signed (the builders of tests/support/github_payloads.py).

    .venv/bin/python bench/bench_webhooks.py [deliveries]
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steward import webhook_handler, wiring
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.config import Settings
from steward.domain.installations import Installation
from steward.domain.models import Task, utcnow
from steward.domain.webhooks import WebhookSecret
from steward.local.http_adapter import LambdaHttpServer
from steward.local.moto_server import MotoServer
from steward.services.webhooks import WebhookReceiver
from steward.wiring import Services

from bench.bench_cold_imports import import_ratio
from tests.support.documents import document
from tests.support.github_payloads import (
    REPO,
    SECRET,
    T0,
    Delivery,
    delivery,
    github_user,
    installation_repositories_payload,
    pull_request_payload,
)

PREFIX = "benchhook-"


def running_tasks(services: Services, slug: str, count: int) -> list[Task]:
    """`count` running tasks of alice's in octo/demo (one plan, one item each)."""
    services.plans.publish("alice", slug, document(*(f"Change module {n}" for n in range(count))))
    plan = services.plans.confirm("alice", slug)
    from steward.domain.tasks import task_for

    tasks: list[Task] = []
    store = services.tasks.tasks
    for item in plan.active_items:
        now = utcnow()
        task, _ = store.spawn(task_for(plan, item, attempt=1, now=now), previous_task_id=None, now=now)
        tasks.append(store.claim(task, runtime_id="bench", now=now, deadline=now + timedelta(hours=2)))
    return tasks


def opened(task: Task, number: int) -> Delivery:
    return delivery("pull_request", pull_request_payload("opened", branch=task.branch, number=number))


def repos_added(step: int, installation_id: int = 7) -> Delivery:
    payload = installation_repositories_payload(
        "added",
        installation_id=installation_id,
        at=T0 + timedelta(seconds=step),
        added=(f"octo/repo-{step}",),
    )
    return delivery("installation_repositories", payload)


def requests_per_delivery(receiver: WebhookReceiver, tables: Tables, tasks: list[Task]) -> None:
    def count(label: str, item: Delivery, aim: str = "") -> None:
        with count_requests(tables) as requests:
            status = receiver.receive(item.body, item.headers).status
        detail = ", ".join(f"{k} {v}" for k, v in sorted(requests.items()))
        print(f"  {label:46} {sum(requests.values()):2d}  ({status}: {detail or 'none'}){aim}")

    print("DynamoDB requests per delivery")
    first = opened(tasks[0], 1)
    count("new pull_request (running -> review)", first)
    count("duplicate of it", first, "  aim 1")
    merged = pull_request_payload("closed", merged=True, branch=tasks[0].branch, number=1)
    count("pull_request closed merged (review -> merged)", delivery("pull_request", merged))
    count("late pull_request opened (merged: no-op)", opened(tasks[0], 1))
    added = repos_added(10_000)
    count("installation_repositories added", added)
    count("duplicate of it", added, "  aim 1")
    count("the same event under a new delivery id", repos_added(10_000))
    unknown = pull_request_payload("opened", branch=tasks[1].branch, installation_id=999)
    count("pull_request for an unknown installation", delivery("pull_request", unknown))
    foreign = pull_request_payload("opened", branch="steward/" + "0" * 23)
    count("pull_request on a non-canonical branch", delivery("pull_request", foreign))
    count("unknown event (push)", delivery("push", {"ref": "refs/heads/main"}))
    receiver.receive(*_parts(opened(tasks[1], 2)))  # the second task in review
    review = review_requesting_changes(tasks[1], 2)
    ask = delivery("pull_request_review", review)
    count("review requesting changes (a follow-up asked)", ask)
    count("duplicate of it", ask, "  aim 1")
    count("the same ask under a new delivery id", delivery("pull_request_review", review))


def _parts(item: Delivery) -> tuple[bytes, dict[str, str]]:
    return item.body, item.headers


def review_requesting_changes(task: Task, number: int) -> dict[str, Any]:
    """A `pull_request_review` payload: changes requested by a collaborator."""
    payload = pull_request_payload("opened", branch=task.branch, number=number)
    head = payload["pull_request"]["head"]["sha"]
    payload.update(
        action="submitted",
        review={
            "id": 1,
            "user": github_user("octo-reviewer"),
            "body": "Please also handle negative numbers.",
            "commit_id": head,
            "state": "changes_requested",
            "author_association": "COLLABORATOR",
            "html_url": f"https://github.com/{REPO}/pull/{number}#pullrequestreview-1",
        },
    )
    del payload["number"]
    return payload


def rate(label: str, items: list[Delivery], send: Callable[[Delivery], object]) -> None:
    start = time.perf_counter()
    for item in items:
        send(item)
    elapsed = time.perf_counter() - start
    webhook_handler.metrics.clear_metrics()  # disabled here; keep them from piling up
    print(f"  {label:44} {len(items) / elapsed:7.1f} deliveries/s  ({len(items)} in {elapsed:.2f} s)")


def adapter_baseline(count: int) -> float:
    """Requests per second of the HTTP adapter around a handler that does nothing: what the
    loopback front door costs by itself, to read the figures above against."""

    def noop(event: dict[str, object], context: object) -> dict[str, object]:
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}

    item = repos_added(0)
    with LambdaHttpServer(noop, kind="function_url") as server, httpx.Client(base_url=server.url) as client:
        client.post("/", content=item.body, headers=item.headers)
        start = time.perf_counter()
        for _ in range(count):
            client.post("/", content=item.body, headers=item.headers)
        return count / (time.perf_counter() - start)


def main(count: int) -> None:
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    with MotoServer() as moto:
        endpoint = {"endpoint_url": moto.url, "region_name": "us-east-1"}
        tables = Tables.connect(PREFIX, **endpoint)
        tables.create_all()
        s3 = boto3.client("s3", **endpoint)
        s3.create_bucket(Bucket="bench-artifacts")
        services = Services.build(
            Settings(table_prefix=PREFIX), tables, ArtifactStore("bench-artifacts", client=s3)
        )
        installations = InstallationStore(tables)
        installations.put(Installation(installation_id=7, account="octo", repositories=(REPO,)), now=utcnow())
        installations.link(7, "alice", now=utcnow())
        receiver = WebhookReceiver(
            secret=WebhookSecret(SECRET),
            deliveries=DeliveryStore(tables),
            tasks=TaskStore(tables),
            installations=installations,
        )
        requests_per_delivery(receiver, tables, running_tasks(services, "counts", 2))

        def direct(item: Delivery) -> object:
            return receiver.receive(item.body, item.headers)

        print(f"Through the service (moto server at {moto.url})")
        fresh = running_tasks(services, "service", count)
        rate("new pull_request deliveries", [opened(t, n) for n, t in enumerate(fresh, 100)], direct)
        seen = opened(fresh[0], 100)
        rate("duplicate deliveries", [seen] * count, direct)
        rate("installation deliveries", [repos_added(n) for n in range(count)], direct)

        os.environ.update(
            {
                "AWS_ENDPOINT_URL": moto.url,
                "STEWARD_TABLE_PREFIX": PREFIX,
                "STEWARD_WEBHOOK_SECRET": SECRET,
                "POWERTOOLS_METRICS_DISABLED": "true",
                "POWERTOOLS_LOG_LEVEL": "WARNING",
            }
        )
        wiring.reset()
        print("Through the HTTP adapter (Function URL event, real Lambda handler)")
        fresh = running_tasks(services, "http", count)
        with (
            LambdaHttpServer(webhook_handler.lambda_handler, kind="function_url") as server,
            httpx.Client(base_url=server.url) as client,
        ):

            def over_http(item: Delivery) -> object:
                response = client.post("/", content=item.body, headers=item.headers)
                response.raise_for_status()
                return response

            over_http(repos_added(-1, installation_id=8))  # warm: the cold start builds the service
            print(f"  {'(the adapter alone, no-op handler)':44} {adapter_baseline(count):7.1f} requests/s")
            rate("new pull_request deliveries", [opened(t, n) for n, t in enumerate(fresh, 500)], over_http)
            seen = opened(fresh[0], 500)
            rate("duplicate deliveries", [seen] * count, over_http)
            rate("installation deliveries", [repos_added(n, 9) for n in range(count)], over_http)
        wiring.reset()


def cold_import() -> None:
    print(import_ratio("steward.webhook_handler"))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
    cold_import()
