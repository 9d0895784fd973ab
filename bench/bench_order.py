"""Plans with structure: what order costs the loop, and how soon a merge starts what waits.

1. DynamoDB requests per heartbeat tick (moto in-process, requests counted with a botocore
   hook, by operation) for a plan of 20 items in a chain (`order: sequential`) and, as the
   baseline, today's flat plan of 20 items, at the same moments: the tick after confirming,
   the tick after the first item reached review, and the tick after it merged. Order lives
   in the plan's item, so the reads are the same; what order adds is one condition per
   predecessor inside the spawn's transaction (no request).
2. On the local stack (real runtimes, the twin's webhooks): the time from the merge of a
   predecessor's pull request (the twin's merge call, which sends the signed webhook) to its
   dependent's task `running`, against the baseline measured in the same run: from a
   confirm to the first item's task `running`.

    .venv/bin/python bench/bench_order.py [merges]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from moto import mock_aws
from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.adapters.user_store import UserStore
from steward.config import Settings
from steward.domain.loop import LoopSettingsUpdate
from steward.domain.models import Task, TaskStatus, utcnow
from steward.local.github_twin import admin
from steward.local.moto_serial import install_dynamodb_lock
from steward.local.sample_repo import SAMPLE_REPO
from steward.local.stack import LocalStack
from steward.services.heartbeat import Heartbeat
from steward.services.plans import PlanService

READS = frozenset({"GetItem", "Query", "BatchGetItem", "Scan"})


class RecordingLauncher:
    def launch(self, task: Task, ticket: str) -> str:
        return f"bench:{task.id}"

    def stop(self, task: Task, launch_ref: str | None) -> None:
        pass


def twenty(sequential: bool) -> str:
    order = "order: sequential\n" if sequential else ""
    items = "".join(f"- [ ] Item {n}: change module {n}\n" for n in range(1, 21))
    return f"---\nrepo: octo/bench\n{order}checks:\n  - pytest -q\n---\n# Bench\n\n{items}"


def ticks(sequential: bool) -> dict[str, Counter[str]]:
    """Requests of the three ticks of one user's plan (its own tables)."""
    tables = Tables.connect("order-" + ("chain-" if sequential else "flat-"), region_name="us-east-1")
    tables.create_all()
    users, plans, tasks = UserStore(tables), PlanStore(tables), TaskStore(tables)
    now = {"at": utcnow()}
    beat = Heartbeat(users, plans, tasks, TicketStore(tables), RecordingLauncher(), clock=lambda: now["at"])
    users.update_loop_settings(
        "alice", LoopSettingsUpdate(interval_seconds=1), now=now["at"], clear_quiet_hours=False
    )
    service = PlanService(plans, Settings().document_policy, tasks=tasks)
    service.publish("alice", "bench", twenty(sequential))
    service.confirm("alice", "bench")
    seen: dict[str, Counter[str]] = {}

    def tick(label: str) -> None:
        now["at"] += timedelta(seconds=2)
        with count_requests(tables) as counted:
            beat.tick("alice")
        seen[label] = counted

    def move(*statuses: TaskStatus) -> None:
        task = tasks.get(plans.require("alice", "bench").active_items[0].task_id or "")
        assert task is not None
        for status in statuses:
            task, _ = tasks.transition(task, status, now=now["at"], event=status.value)
            tasks.project_item(task, now=now["at"])

    tick("after confirm")
    move(TaskStatus.RUNNING, TaskStatus.REVIEW)
    tick("first item in review")
    move(TaskStatus.MERGED)
    tick("first item merged")
    return seen


def requests_per_tick() -> None:
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    install_dynamodb_lock()
    with mock_aws():
        flat, chain = ticks(sequential=False), ticks(sequential=True)
    print("DynamoDB requests per heartbeat tick, a plan of 20 items (reads / all, by operation)")
    print(f"{'tick':24} {'flat (baseline)':>22} {'chain':>22}")
    for label in flat:
        cells = [f"{sum(c[o] for o in READS)} / {sum(c.values())}" for c in (flat[label], chain[label])]
        print(f"{label:24} {cells[0]:>22} {cells[1]:>22}")
        for name, counts in (("flat", flat[label]), ("chain", chain[label])):
            print(f"    {name:6} {dict(sorted(counts.items()))}")
    print("  (flat spawns max_parallel = 3 at once; the chain one at a time)")


# ---- the local stack


PLAYS = [
    {
        "match": f"NOTE-{n}",
        "summary": f"Notes {n}.",
        "steps": [
            {"tool": "write_file", "input": {"path": f"note-{n}.md", "content": f"# {n}\n"}},
            {"text": "Done."},
            {"tool": "run_verification", "input": {"command": "python -m pytest -q"}},
        ],
    }
    for n in range(40)
]


def wait(check: Callable[[], Any], timeout: float = 120.0, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError("the local stack did not get there in time")
        time.sleep(step)
    return found


def merge_to_running(merges: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-order-"))
    (root / "playbook.json").write_text(json.dumps({"plays": PLAYS}))
    os.environ.update(
        {
            "STEWARD_SCRIPTED_PLAYBOOK": str(root / "playbook.json"),
            "STEWARD_RUNNER_HEARTBEAT_SECONDS": "1",
        }
    )
    with LocalStack(state_file=root / "local.json", tick_seconds=1, reaper_seconds=2) as stack:
        os.environ["AWS_ENDPOINT_URL"] = stack.state["aws_endpoint_url"]
        github = stack.state["github_url"]
        token = stack.state["users"]["alice"]
        with httpx.Client(
            base_url=stack.state["api_url"], headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as api:
            api.put("/v1/loop", json={"interval_seconds": 1}).raise_for_status()
            items = "".join(f"- [ ] NOTE-{n}: note {n}\n" for n in range(merges + 1))
            markdown = (
                f"---\nrepo: {SAMPLE_REPO}\nbase: main\nmodel: scripted-coder\norder: sequential\n"
                f"checks:\n  - python -m pytest -q\n---\n# Chain\n\n{items}"
            )
            published = api.put("/v1/plans/chain", json={"markdown": markdown}).json()

            def task_of(ordinal: int) -> dict[str, Any] | None:
                item = api.get("/v1/plans/chain").json()["items"][ordinal - 1]
                return api.get(f"/v1/tasks/{item['task_id']}").json() if item["task_id"] else None

            def reached(ordinal: int, *statuses: str) -> Callable[[], dict[str, Any] | None]:
                return lambda: ((t := task_of(ordinal)) is not None and t["status"] in statuses and t) or None

            confirmed = time.monotonic()
            api.post("/v1/plans/chain/confirm", json={"content_hash": published["content_hash"]})
            wait(reached(1, "running", "review"))
            baseline = time.monotonic() - confirmed
            delays = []
            for ordinal in range(1, merges + 1):
                task = wait(reached(ordinal, "review"))
                number = int(str(task["pr_url"]).rsplit("/", 1)[-1])
                merged = time.monotonic()
                admin.merge(github, SAMPLE_REPO, number)
                wait(reached(ordinal + 1, "running", "review"))
                delays.append(time.monotonic() - merged)
    median = statistics.median(delays)
    print(f"\nlocal stack, {merges} merges of a sequential chain (a tick a second):")
    print(f"  baseline: confirm -> first item running         {baseline:6.2f} s")
    print(
        f"  merge (webhook) -> dependent running: median {median:.2f} s, "
        f"min {min(delays):.2f} s, max {max(delays):.2f} s  ({median / baseline:.2f}x the baseline)"
    )


def main(merges: int) -> None:
    requests_per_tick()
    merge_to_running(merges)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
