"""Resync figures for pull requests in review, printed, not asserted: GitHub calls per tick
(and how GitHub answered them) and DynamoDB requests per tick, for N pull requests open on
the GitHub twin with every delivery lost, over a first period (everything is new) and a
second one in which nothing changed.

Real parts: the heartbeat and its stores on the moto server, the App (githubkit over HTTP)
against the twin, the pull requests real branches and pull requests there.

    [MAX_CALLS=45] .venv/bin/python bench/bench_resync.py [pull requests]
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections import Counter
from datetime import timedelta
from pathlib import Path

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.github import GitHubApp
from steward.adapters.installation_store import InstallationStore
from steward.config import Settings
from steward.domain.installations import Installation
from steward.domain.models import TaskStatus, utcnow
from steward.domain.resync import ResyncPolicy
from steward.local.github_twin import GitHubTwin
from steward.local.moto_server import MotoServer
from steward.services.resync import Resync
from steward.wiring import Services

from tests.integration.test_resync import CountingGitHub
from tests.support.documents import document, numbered
from tests.support.loop import Loop, build_loop
from tests.support.plans import spawn_item

PREFIX = "benchresync-"
REPO = "octo/demo"
PERIOD = timedelta(seconds=900)
SECRET = "bench-resync"  # noqa: S105 - signs deliveries that are never sent (all withheld)


def in_review(loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, count: int) -> None:
    """`count` tasks in review, each with its branch pushed and its pull request open."""
    loop.services.plans.publish("alice", "bench", document(*numbered(count), repo=REPO))
    plan = loop.services.plans.confirm("alice", "bench")
    token = twin.create_token(installation, repositories=["demo"])
    now = loop.clock()
    for ordinal in range(1, count + 1):
        queued, _ = spawn_item(loop.services, plan, ordinal)
        running = loop.tasks.claim(queued, runtime_id="r", now=now, deadline=now + timedelta(hours=1))
        head = twin.push(token, REPO, running.branch, {f"module_{ordinal}.py": "x = 1\n"})
        pull = app.open_pull(
            installation, REPO, head=running.branch, base="main", title=running.title, body=""
        )
        extra = {"pr_number": pull.number, "head_sha": head}
        loop.tasks.transition(running, TaskStatus.REVIEW, now=now, event="finished", extra=extra)


def period(loop: Loop, github: CountingGitHub, label: str) -> None:
    loop.clock.advance(PERIOD.total_seconds())
    github.answers.clear()
    per_tick: list[int] = []
    dynamo: Counter[str] = Counter()
    while True:
        before = github.calls
        loop.clock.advance(2)
        with count_requests(loop.services.tables) as requests:
            loop.heartbeat.tick("alice")
        dynamo.update(requests)
        per_tick.append(github.calls - before)
        if per_tick[-1] == 0:
            break
    ticks = len(per_tick) - 1
    print(f"{label}: {sum(per_tick)} GitHub calls in {ticks} ticks, per tick {per_tick[:-1]}")
    print(f"  answers: {dict(sorted(github.answers.items()))}")
    print(f"  DynamoDB requests: {sum(dynamo.values())} ({dict(sorted(dynamo.items()))})")


def main(count: int) -> None:
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    with (
        MotoServer() as moto,
        tempfile.TemporaryDirectory() as scratch,
        GitHubTwin(Path(scratch), webhook_url="http://127.0.0.1:9/webhook", webhook_secret=SECRET) as twin,
    ):
        endpoint = {"endpoint_url": moto.url, "region_name": "us-east-1"}
        tables = Tables.connect(PREFIX, **endpoint)
        tables.create_all()
        s3 = boto3.client("s3", **endpoint)
        s3.create_bucket(Bucket="bench-artifacts")
        services = Services.build(
            Settings(table_prefix=PREFIX), tables, ArtifactStore("bench-artifacts", client=s3)
        )
        twin.create_repo(REPO, {"README.md": "# demo\n"})
        twin.withhold(True)  # every delivery is lost: only resync tells the loop
        installation = twin.create_installation("octo", [REPO])
        installations = InstallationStore(tables)
        installations.put(
            Installation(installation_id=installation, account="octo", repositories=(REPO,)), now=utcnow()
        )
        installations.link(installation, "alice", now=utcnow(), force=True)
        loop = build_loop(services)
        policy = ResyncPolicy(period=PERIOD, max_calls=int(os.environ.get("MAX_CALLS", "45")))
        with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_attempts=1) as app:
            github = CountingGitHub(app)
            loop.heartbeat.resync = Resync(loop.tasks, installations, github=lambda: github, policy=policy)
            loop.settings("alice", interval_seconds=1, max_parallel=count, daily_spawn_cap=count)
            in_review(loop, twin, app, installation, count)
            print(f"{count} pull requests in review, at most {policy.max_calls} GitHub calls per tick")
            period(loop, github, "first period (all new)")
            period(loop, github, "next period, nothing new")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
