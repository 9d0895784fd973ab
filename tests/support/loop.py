"""A heartbeat wired to real stores on moto and the Fargate launcher on the ECS fake."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from steward.adapters.fargate_launcher import FargateLauncher
from steward.adapters.github import GitHubApp
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.adapters.user_store import UserStore
from steward.domain.launch import RuntimeEndpoints
from steward.domain.loop import LoopSettingsUpdate
from steward.domain.models import Task, TaskStatus, utcnow
from steward.local.github_twin import GitHubTwin
from steward.services.heartbeat import Heartbeat
from steward.services.reaper import Reaper
from steward.wiring import Services

from tests.support.documents import document
from tests.support.fake_ecs import FakeEcs


@dataclass
class Clock:
    now: datetime = field(default_factory=utcnow)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Loop:
    services: Services
    clock: Clock
    ecs: FakeEcs
    heartbeat: Heartbeat
    reaper: Reaper

    @property
    def tasks(self) -> TaskStore:
        return self.heartbeat.tasks

    def settings(self, user: str, **changes: object) -> None:
        self.heartbeat.users.update_loop_settings(
            user, LoopSettingsUpdate.model_validate(changes), now=self.clock(), clear_quiet_hours=False
        )

    def new_heartbeat(self) -> Heartbeat:
        """A second heartbeat (another Lambda instance) sharing stores, clock and ECS."""
        return Heartbeat(
            users=self.heartbeat.users,
            plans=self.heartbeat.plans,
            tasks=self.heartbeat.tasks,
            tickets=self.heartbeat.tickets,
            launcher=self.heartbeat.launcher,
            clock=self.clock,
            resync=self.heartbeat.resync,
            withdrawals=self.heartbeat.withdrawals,
        )


def build_loop(services: Services) -> Loop:
    tables = services.tables
    clock = Clock()
    ecs = FakeEcs()
    launcher = FargateLauncher(
        ecs,
        cluster="steward",
        task_definition="steward-runner:1",
        container_name="runner",
        subnets=["subnet-1"],
        security_groups=["sg-1"],
        endpoints=RuntimeEndpoints(api_url="https://api.example", relay_url="https://relay.example"),
    )
    tasks = TaskStore(tables)
    heartbeat = Heartbeat(
        users=UserStore(tables),
        plans=PlanStore(tables),
        tasks=tasks,
        tickets=TicketStore(tables),
        launcher=launcher,
        clock=clock,
    )
    return Loop(services, clock, ecs, heartbeat, Reaper(tasks, launcher))


def open_reviews(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, titles: Sequence[str], *, repo: str
) -> list[Task]:
    """A confirmed plan `demo` of alice's whose tasks each pushed their branch, opened their
    pull request on the twin and finished in review (the opening deliveries are not handed to
    anyone: the finish already said so)."""
    loop.services.plans.publish("alice", "demo", document(*titles, repo=repo))
    loop.services.plans.confirm("alice", "demo")
    loop.clock.advance(2)
    loop.heartbeat.tick("alice")
    reviewed = []
    for queued in sorted(loop.tasks.live_for_user("alice"), key=lambda t: t.ordinal):
        now = loop.clock()
        running = loop.tasks.claim(
            queued, runtime_id=f"r-{queued.id}", now=now, deadline=now + timedelta(hours=1)
        )
        token = app.installation_token(installation, repo).token
        twin.push(token, repo, running.branch, {f"{running.branch}.txt": "done\n"})  # merges apart
        pull = app.open_pull(
            installation, repo, head=running.branch, base="main", title=running.title, body=""
        )
        task, _ = loop.tasks.transition(
            running,
            TaskStatus.REVIEW,
            now=now,
            event="finished",
            extra={"pr_number": pull.number, "pr_url": pull.url},
        )
        loop.tasks.project_item(task, now=now)
        reviewed.append(task)
    return reviewed
