"""Heartbeat figures on the moto server (the local stack's AWS endpoint):

* DynamoDB requests of a no-progress tick (aim: at most 2, zero launches);
* heartbeat throughput in users per second, for ticks that spawn (2 tasks per user) and for
  no-progress ticks, sequentially and on 2 threads.

Launches go to a launcher that only records them: ECS cannot run here, and the figure of
interest is the control plane's cost, not a runtime's start.

    .venv/bin/python bench/bench_heartbeat.py [users]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from steward.adapters.dynamo import Tables, count_requests
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.adapters.user_store import UserStore
from steward.domain.loop import LoopSettingsUpdate
from steward.domain.models import Task, utcnow
from steward.local.moto_server import MotoServer
from steward.services.heartbeat import Heartbeat, Outcome
from steward.services.plans import PlanService

PLAN = (
    "---\nrepo: octo/bench\nchecks:\n  - pytest -q\n---\n# Bench\n\n- [ ] first change\n- [ ] second change\n"
)


class RecordingLauncher:
    def __init__(self) -> None:
        self.launched: list[str] = []

    def launch(self, task: Task, ticket: str) -> str:
        self.launched.append(task.id)
        return f"bench:{task.id}"

    def stop(self, task: Task, launch_ref: str | None) -> None:
        pass


def rate(label: str, users: list[str], tick: Callable[[str], object], threads: int) -> None:
    start = time.perf_counter()
    if threads == 1:
        for user in users:
            tick(user)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(tick, users))
    elapsed = time.perf_counter() - start
    print(f"{label:44} {len(users) / elapsed:8.1f} users/s  ({len(users)} users, {elapsed:.2f} s)")


def main(count: int) -> None:
    os.environ.update(
        {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    )
    with MotoServer() as moto:
        tables = Tables.connect("bench-", endpoint_url=moto.url, region_name="us-east-1")
        tables.create_all()
        users_store, plans, tasks = UserStore(tables), PlanStore(tables), TaskStore(tables)
        service = PlanService(
            plans, __import__("steward.config", fromlist=["Settings"]).Settings().document_policy, tasks=tasks
        )
        launcher = RecordingLauncher()
        clock = {"now": utcnow()}
        beat = Heartbeat(users_store, plans, tasks, TicketStore(tables), launcher, clock=lambda: clock["now"])
        groups = {n: [f"user-{n}-{i:04d}" for i in range(count)] for n in (1, 2)}
        for user in groups[1] + groups[2]:
            users_store.update_loop_settings(
                user, LoopSettingsUpdate(interval_seconds=1), now=utcnow(), clear_quiet_hours=False
            )
            service.publish(user, "bench", PLAN)
            service.confirm(user, "bench")
        clock["now"] += timedelta(seconds=5)

        print(f"heartbeat on the moto server ({moto.url}), {count} users per run")
        for threads in (1, 2):
            rate(f"spawning ticks (2 tasks/user), {threads} thread(s)", groups[threads], beat.tick, threads)
        clock["now"] += timedelta(seconds=5)
        for threads in (1, 2):
            rate(f"no-progress ticks, {threads} thread(s)", groups[threads], beat.tick, threads)

        launches = len(launcher.launched)
        with count_requests(tables) as requests:
            outcome = beat.tick(groups[1][0]).outcome
        assert outcome is Outcome.NO_PROGRESS
        print(
            f"no-progress tick: {sum(requests.values())} DynamoDB request(s) {dict(requests)}, "
            f"{len(launcher.launched) - launches} launches"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
