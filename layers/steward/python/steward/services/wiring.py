"""Builds the loop's collaborators from the environment, once per process.

`STEWARD_LAUNCHER` picks the launcher: `fargate` (default, in AWS) or `local` (the local
stack: runtimes are subprocesses on this machine).
"""

from __future__ import annotations

import logging
import os
from functools import cache
from pathlib import Path

import boto3

from steward.adapters.budget_store import BudgetStore
from steward.adapters.dynamo import BOTO_CONFIG, Tables
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.adapters.user_store import UserStore
from steward.config import Settings
from steward.domain.launch import Launcher, RuntimeEndpoints
from steward.services.heartbeat import Heartbeat
from steward.services.reaper import Reaper


def _endpoints() -> RuntimeEndpoints:
    return RuntimeEndpoints(
        api_url=os.environ.get("STEWARD_API_URL", ""),
        relay_url=os.environ.get("STEWARD_RELAY_URL", ""),
        aws_endpoint_url=os.environ.get("AWS_ENDPOINT_URL"),
    )


# botocore logs request parameters at DEBUG, and RunTask's parameters carry the runtime's
# one-time ticket: whatever level the function logs at, these never go below INFO.
for _name in ("botocore", "boto3", "urllib3"):
    logging.getLogger(_name).setLevel(max(logging.INFO, logging.getLogger(_name).getEffectiveLevel()))


@cache
def launcher_from_env() -> Launcher:
    """One launcher per process, shared by the heartbeat and the reaper (locally it owns the
    runtime subprocesses, so stopping must go through the one that started them)."""
    kind = os.environ.get("STEWARD_LAUNCHER", "fargate")
    if kind == "local":
        from steward.local.launcher import LocalLauncher  # noqa: PLC0415 - never loaded on Lambda

        # The deployment's fixed settings, as a Fargate task definition would carry them.
        passed = (
            "STEWARD_TABLE_PREFIX",
            "STEWARD_ARTIFACTS_BUCKET",
            "STEWARD_STREAM_URL",
            "STEWARD_SANDBOX_UID",
        )
        prefixes = ("STEWARD_RUNNER_", "STEWARD_CHECK_")
        log_dir = os.environ.get("STEWARD_RUNTIME_LOG_DIR")
        return LocalLauncher(
            _endpoints(),
            extra_env={k: v for k, v in os.environ.items() if k in passed or k.startswith(prefixes)},
            log_dir=Path(log_dir) if log_dir else None,
        )
    if kind != "fargate":
        raise ValueError(f"STEWARD_LAUNCHER must be 'fargate' or 'local', got {kind!r}")
    from steward.adapters.fargate_launcher import FargateLauncher  # noqa: PLC0415

    def csv(name: str) -> list[str]:
        return [v for v in os.environ.get(name, "").split(",") if v]

    return FargateLauncher(
        boto3.client("ecs", config=BOTO_CONFIG),
        cluster=os.environ["STEWARD_ECS_CLUSTER"],
        task_definition=os.environ["STEWARD_RUNNER_TASK_DEFINITION"],
        container_name=os.environ.get("STEWARD_RUNNER_CONTAINER", "runner"),
        subnets=csv("STEWARD_RUNNER_SUBNETS"),
        security_groups=csv("STEWARD_RUNNER_SECURITY_GROUPS"),
        endpoints=_endpoints(),
    )


def heartbeat_from_env() -> Heartbeat:
    tables = Tables.connect(Settings.from_env().table_prefix)
    return Heartbeat(
        users=UserStore(tables),
        plans=PlanStore(tables),
        tasks=TaskStore(tables),
        tickets=TicketStore(tables),
        launcher=launcher_from_env(),
    )


def reaper_from_env() -> Reaper:
    tables = Tables.connect(Settings.from_env().table_prefix)
    return Reaper(TaskStore(tables), launcher_from_env(), BudgetStore(tables))
