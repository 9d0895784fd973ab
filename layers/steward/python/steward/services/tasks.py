"""Task use cases for clients: read, events, screen, artifacts, explicit retry and cancel."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from steward.adapters.artifact_store import ARTIFACT_NAMES, SCREEN_NAME, ArtifactStore
from steward.adapters.event_store import EventStore
from steward.adapters.task_store import TaskStore
from steward.domain.errors import LifecycleError, NotFound
from steward.domain.ids import plan_id, validate_slug
from steward.domain.models import PlanKind, Task, utcnow

# A follow-up round and its `check` events, in order.
RoundRecord = tuple[Task, tuple[dict[str, Any], ...]]


class TaskService:
    def __init__(
        self,
        tasks: TaskStore,
        events: EventStore,
        artifacts: ArtifactStore,
        clock: Callable[[], datetime] = utcnow,
        tick_now: Callable[[str], object] | None = None,
    ) -> None:
        self.tasks = tasks
        self.events = events
        self.artifacts = artifacts
        self.clock = clock
        # A tick for the user right after a retry (`steward.adapters.queue:TickNow`, which
        # never raises); None: the scheduler's next window ticks them.
        self.tick_now = tick_now

    def get(self, user: str, task_id: str) -> Task:
        return self.tasks.require_owned(user, task_id)

    def list(
        self, user: str, *, plan_slug: str | None, limit: int, cursor: str | None
    ) -> tuple[list[Task], str | None]:
        plan = plan_id(user, validate_slug(plan_slug)) if plan_slug else None
        return self.tasks.page(user, plan_id=plan, limit=limit, cursor=cursor)

    def live(self, user: str) -> tuple[Task, ...]:
        """The user's queued, running and review tasks (what holds the loop's slots)."""
        return tuple(self.tasks.live_for_user(user))

    def plan_cost(self, user: str, plan_slug: str) -> Decimal:
        """What every task of the plan (every attempt) was charged, in all."""
        total, cursor = Decimal(0), None
        while True:
            tasks, cursor = self.list(user, plan_slug=plan_slug, limit=100, cursor=cursor)
            total += sum((task.cost_usd for task in tasks), Decimal(0))
            if cursor is None:
                return total

    def artifact_list(self, user: str, task_id: str) -> tuple[dict[str, Any], ...]:
        """The task's artifacts that exist, with their sizes in bytes."""
        self.tasks.require_owned(user, task_id)
        return tuple({"name": name, "size": size} for name, size in self.artifacts.sizes(task_id))

    def events_after(self, user: str, task_id: str, *, after: int, limit: int) -> dict[str, Any]:
        self.tasks.require_owned(user, task_id)
        events = self.events.list(task_id, after=after, limit=limit)
        return {"events": events, "next": events[-1]["seq"] if events else after}

    def rounds(self, user: str, task_id: str) -> tuple[Task, tuple[RoundRecord, ...]]:
        """The caller's task and its follow-up rounds, in order, each with its `check` events.
        A round's id follows from its parent, number and attempt (`round_task_id`), and the
        parent's `rounds_used` counts them (written with each round): one read per attempt and
        one more per round, none for a task without rounds."""
        task = self.tasks.require_owned(user, task_id)
        rounds: list[RoundRecord] = []
        for number in range(1, task.rounds_used + 1):
            rounds += [
                (found, self.events.of_type(found.id, "check"))
                for found in self.tasks.round_attempts(task.id, number)
                if found.user == user
            ]
        return task, tuple(rounds)

    def screen(self, user: str, task_id: str) -> dict[str, Any]:
        self.tasks.require_owned(user, task_id)
        text = self.artifacts.read_text(task_id, SCREEN_NAME) or ""
        return {"task_id": task_id, "screen": text}

    def artifact_url(self, user: str, task_id: str, name: str) -> str:
        self.tasks.require_owned(user, task_id)
        if name not in ARTIFACT_NAMES:
            raise NotFound(f"no artifact {name!r}; artifacts are {', '.join(ARTIFACT_NAMES)}", field="name")
        if not self.artifacts.exists(task_id, name):
            raise NotFound(f"task {task_id} has no {name} yet", field="name")
        return self.artifacts.presigned_url(task_id, name)

    def cancel(self, user: str, task_id: str) -> Task:
        return self.tasks.cancel(user, task_id, now=self.clock(), reason="cancelled by user")

    def retry(self, user: str, task_id: str) -> Task:
        """Ask for another attempt of the task's item (409 for a local fixture's task: the
        loop never spawns for a fixture, so the attempt would never come). A person's retry
        starts work at once: the interval gate does not hold it back, and a tick is enqueued."""
        task = self.tasks.require_owned(user, task_id)
        if task.kind is PlanKind.FIXTURE:
            raise LifecycleError(
                "a local fixture's task (made by `steward local capability`) is not retried: "
                "make another one",
                field="task_id",
            )
        self.tasks.request_retry(task, now=self.clock())
        if self.tick_now is not None:
            self.tick_now(user)
        return task
