"""Wiring: builds the stores and services once per process (Lambda cold start)."""

from __future__ import annotations

from dataclasses import dataclass

from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.adapters.event_store import EventStore
from steward.adapters.installation_store import InstallationStore
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.user_store import UserStore
from steward.config import Settings
from steward.services.plans import PlanService
from steward.services.tasks import TaskService


@dataclass
class Services:
    settings: Settings
    tables: Tables
    plans: PlanService
    tasks: TaskService
    users: UserStore
    installations: InstallationStore

    @classmethod
    def build(cls, settings: Settings, tables: Tables, artifacts: ArtifactStore) -> Services:
        task_store = TaskStore(tables)
        return cls(
            settings=settings,
            tables=tables,
            plans=PlanService(PlanStore(tables), settings.document_policy),
            tasks=TaskService(task_store, EventStore(tables), artifacts),
            users=UserStore(tables),
            installations=InstallationStore(tables),
        )

    @classmethod
    def from_env(cls) -> Services:
        settings = Settings.from_env()
        return cls.build(
            settings, Tables.connect(settings.table_prefix), ArtifactStore(settings.artifacts_bucket)
        )
