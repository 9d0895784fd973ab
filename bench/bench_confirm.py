"""An approval starts work at once: how soon a confirmed plan's task runs on the local stack.

On the local stack (real runtimes, the scripted demo model behind the relay), with the loop's
settings as a new user has them (`interval_seconds` 60 unless given), for each of `plans`
plans in turn, one item each, confirmed while the loop's last tick is recent (so the interval
gate would hold a confirm for up to a minute): the time from `plan confirm` (the API's
answer) to the item's task `running`, and to the task's first model call answered by the
relay (its cost first charged). Each task is cancelled once measured, so the next plan finds
the loop's slots free. Prints the medians and their ratio to the baseline.

    .venv/bin/python bench/bench_confirm.py [plans] [interval_seconds]

The baseline, in the same run: the same plans with an interval of 1 s (no gate holds them).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from steward.adapters.dynamo import Tables
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.user_store import UserStore
from steward.domain.models import Task, TaskStatus
from steward.local.sample_repo import SAMPLE_REPO
from steward.local.stack import LOCAL_REGION, LocalStack

STEP = 0.02  # seconds between two reads of the tables (moto, not the API: no invocation lock)
PLAYS = [
    {
        "match": f"BENCH-{n}",
        "summary": f"Notes {n}.",
        "steps": [
            {"tool": "write_file", "input": {"path": f"bench-{n}.md", "content": f"# {n}\n"}},
            {"text": "Done."},
            {"tool": "run_verification", "input": {"command": "python -m pytest -q"}},
        ],
    }
    for n in range(40)
]


def wait(check: Callable[[], Any], timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError("the local stack did not get there in time")
        time.sleep(STEP)
    return found


def started_task(task_of: Callable[[str], Task | None], slug: str) -> Task | None:
    """The slug's task once its runtime claimed it (running, or already further)."""
    task = task_of(slug)
    return task if task is not None and task.status is not TaskStatus.QUEUED else None


def charged_task(task_of: Callable[[str], Task | None], slug: str) -> Task | None:
    """The slug's task once the relay charged its first model call."""
    task = task_of(slug)
    return task if task is not None and task.cost_usd > Decimal(0) else None


def measure(plans: int, interval: int | None) -> tuple[list[float], list[float], int]:
    root = Path(tempfile.mkdtemp(prefix="bench-confirm-"))
    (root / "playbook.json").write_text(json.dumps({"plays": PLAYS}))
    os.environ.update(
        {"STEWARD_SCRIPTED_PLAYBOOK": str(root / "playbook.json"), "STEWARD_RUNNER_HEARTBEAT_SECONDS": "1"}
    )
    running: list[float] = []
    first_call: list[float] = []
    with LocalStack(state_file=root / "local.json") as stack:  # the default tick (2 s)
        os.environ["AWS_ENDPOINT_URL"] = stack.state["aws_endpoint_url"]  # this stack's, until it stops
        tables = Tables.connect(stack.state["table_prefix"], region_name=LOCAL_REGION)
        users, plan_store, tasks = UserStore(tables), PlanStore(tables), TaskStore(tables)
        token = stack.state["users"]["alice"]
        with httpx.Client(
            base_url=stack.state["api_url"], headers={"Authorization": f"Bearer {token}"}, timeout=30
        ) as api:
            if interval is not None:
                api.put("/v1/loop", json={"interval_seconds": interval}).raise_for_status()
            setting = api.get("/v1/loop").json()["interval_seconds"]
            # A settings write wakes the loop: its tick makes the interval gate hold from now on.
            api.put("/v1/loop", json={"interval_seconds": setting}).raise_for_status()
            wait(lambda: users.loop_state("alice").last_tick_at)

            def task_of(slug: str) -> Task | None:
                plan = plan_store.get("alice", slug)
                task_id = plan.items[0].task_id if plan is not None else None
                return tasks.get(task_id) if task_id else None

            for n in range(plans):
                slug = f"bench-{setting}s-{n}"  # distinct in each run of the process
                markdown = (
                    f"---\nrepo: {SAMPLE_REPO}\nbase: main\nmodel: scripted-coder\nmax_attempts: 1\n"
                    f"checks:\n  - python -m pytest -q\n---\n# Bench {n}\n\n- [ ] BENCH-{n}: note {n}\n"
                )
                published = api.put(f"/v1/plans/{slug}", json={"markdown": markdown})
                published.raise_for_status()
                started = time.monotonic()
                confirmed = api.post(
                    f"/v1/plans/{slug}/confirm", json={"content_hash": published.json()["content_hash"]}
                )
                confirmed.raise_for_status()
                found: Task = wait(partial(started_task, task_of, slug))
                running.append(time.monotonic() - started)
                wait(partial(charged_task, task_of, slug))
                first_call.append(time.monotonic() - started)
                api.post(f"/v1/tasks/{found.id}/cancel").raise_for_status()  # frees the loop's slot
    os.environ.pop("AWS_ENDPOINT_URL", None)
    return running, first_call, setting


def main(plans: int, interval: int | None) -> None:
    """The confirm under the given interval (60 s by default), then the baseline in the same
    run: the same plans with an interval of 1 s, which no gate would hold; the ratio of the
    medians says whether the interval still delays an approval (1.0: not at all)."""
    measured = measure(plans, interval)
    baseline = measure(plans, 1)
    print(f"\nlocal stack, {plans} plans of one item each (scheduler tick 2 s):")
    for n, label in enumerate(("confirm -> task running", "confirm -> first model call")):
        shown = []
        for values, setting in ((measured[n], measured[2]), (baseline[n], baseline[2])):
            shown.append(f"interval {setting:>3} s: median {statistics.median(values):5.2f} s")
        ratio = statistics.median(measured[n]) / statistics.median(baseline[n])
        print(f"  {label:28} {shown[0]}   baseline {shown[1]}   ratio {ratio:.2f}x")


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 5,
        int(sys.argv[2]) if len(sys.argv) > 2 else None,
    )
