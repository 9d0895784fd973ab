"""The composition root: the one place that reads the deployment's settings and builds the
stores, services and clients each Lambda function uses, once per execution environment.

Handlers call the builder they need (`api_services()`, `relay()`, ...); each builder is
cached, so the first call is the cold start and later calls cost nothing. Builders import
the adapters they wire inside their bodies, so a function pays only for its own parts
(the relay never imports githubkit or httpx, the runtime routes load githubkit only for the
GitHub token route). `reset()` forgets everything, so a local stack or a test started later
in the same process binds to its own endpoints and settings.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.config import Settings

if TYPE_CHECKING:
    from steward.adapters.artifact_store import ArtifactStore
    from steward.adapters.capability_signer import CapabilityVerifier
    from steward.adapters.dynamo import Tables
    from steward.adapters.github import GitHubApp
    from steward.adapters.installation_store import InstallationStore
    from steward.adapters.liveness import LivenessIndex
    from steward.adapters.queue import HeartbeatQueue, TickNow
    from steward.adapters.user_store import UserStore
    from steward.domain.launch import Launcher
    from steward.domain.prices import PriceTable
    from steward.services.brake import CachedBrake, SpendBreaker
    from steward.services.github_tokens import GitHubTokens
    from steward.services.heartbeat import Heartbeat
    from steward.services.mint import Minter
    from steward.services.plans import PlanService
    from steward.services.reaper import Reaper
    from steward.services.relay import Relay
    from steward.services.replies import Replies
    from steward.services.resync import Resync
    from steward.services.runtime import RuntimeService
    from steward.services.status_comments import StatusComments
    from steward.services.tasks import TaskService
    from steward.services.webhooks import WebhookReceiver
    from steward.services.withdrawal import Withdrawals


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def tables() -> Tables:
    from steward.adapters.dynamo import Tables  # noqa: PLC0415 - builders import what they build

    return Tables.connect(settings().table_prefix)


@cache
def price_table() -> PriceTable:
    from steward.adapters.price_file import load_price_table  # noqa: PLC0415

    return load_price_table(settings().price_table)


@cache
def capability_verifier() -> CapabilityVerifier:
    """Holds only the public halves of the capability keys (every key id verifies, so a
    rotation keeps older capabilities valid until they expire)."""
    from steward.adapters.capability_signer import CapabilityVerifier, kms_client  # noqa: PLC0415

    return CapabilityVerifier.from_kms(kms_client(), list(settings().require("capability_key_ids")))


# ---- api


@dataclass
class Services:
    """What the client API's routes use."""

    settings: Settings
    tables: Tables
    plans: PlanService
    tasks: TaskService
    users: UserStore
    installations: InstallationStore

    @classmethod
    def build(
        cls,
        settings: Settings,
        tables: Tables,
        artifacts: ArtifactStore,
        *,
        publish_checks: bool = False,
        tick_now: Callable[[str], object] | None = None,
    ) -> Services:
        """The API's parts over the given tables and artifact store (tests build their own).
        `tick_now`: enqueues a tick for a user right after a person's confirm or retry
        (`tick_now()` for the API; None: the scheduler's next window ticks them).

        With `publish_checks` (the API's own `api_services`), publish also refuses a
        repository no live installation of the user holds, an unpriced model and a budget
        below one minimal call (the price table of `settings.price_table`, read at the first
        publish). Without, only the document itself is checked: a test's harness over the
        stores, which must be able to make what later guards (minting, the token route, the
        relay) refuse."""
        from steward.adapters.event_store import EventStore  # noqa: PLC0415
        from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
        from steward.adapters.plan_store import PlanStore  # noqa: PLC0415
        from steward.adapters.price_file import load_price_table  # noqa: PLC0415
        from steward.adapters.task_store import TaskStore  # noqa: PLC0415
        from steward.adapters.user_store import UserStore  # noqa: PLC0415
        from steward.services.plans import PlanService  # noqa: PLC0415
        from steward.services.tasks import TaskService  # noqa: PLC0415

        tasks = TaskStore(tables)
        installations = InstallationStore(tables)
        plans = PlanService(
            PlanStore(tables),
            settings.document_policy,
            tasks=tasks,
            installations=installations if publish_checks else None,
            prices=(lambda: load_price_table(settings.price_table)) if publish_checks else None,
            documents=artifacts,
            tick_now=tick_now,
        )
        return cls(
            settings=settings,
            tables=tables,
            plans=plans,
            tasks=TaskService(tasks, EventStore(tables), artifacts, tick_now=tick_now),
            users=UserStore(tables),
            installations=installations,
        )


@cache
def api_services() -> Services:
    from steward.adapters.artifact_store import ArtifactStore  # noqa: PLC0415

    s = settings()
    return Services.build(
        s, tables(), ArtifactStore(s.artifacts_bucket), publish_checks=True, tick_now=tick_now()
    )


# ---- relay


def provider_environment(table: PriceTable, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the provider adapters are configured from: the relay's provider settings, the
    region, and the API key variables the price table's entries name (their names are data,
    so they cannot be listed in `steward.config`)."""
    env = os.environ if environ is None else environ
    s = settings()
    values = {
        "STEWARD_BEDROCK_ENDPOINT_URL": s.bedrock_endpoint_url or "",
        "STEWARD_SCRIPTED_PLAYBOOK": s.scripted_playbook or "",
        "STEWARD_SCRIPTED_SLOW_SECONDS": ""
        if s.scripted_slow_seconds is None
        else str(s.scripted_slow_seconds),
        "AWS_REGION": s.region or "",
    }
    for entry in table.models.values():
        if entry.api_key_env:
            values[entry.api_key_env] = env.get(entry.api_key_env, "")
    return {k: v for k, v in values.items() if v}


@cache
def relay() -> Relay:
    from steward.adapters.budget_store import BudgetStore  # noqa: PLC0415
    from steward.adapters.providers import Provider, provider_for  # noqa: PLC0415
    from steward.domain.prices import PriceEntry  # noqa: PLC0415
    from steward.services.relay import Relay  # noqa: PLC0415

    table = price_table()
    environ = provider_environment(table)

    def provider(model_id: str, entry: PriceEntry) -> Provider:
        return provider_for(model_id, entry, environ=environ)

    def record_over_report(task_id: str, data: Mapping[str, Any], now: datetime) -> None:
        # Loaded on the first over-report only: a normal call never needs the task store.
        from steward.adapters.task_store import TaskStore  # noqa: PLC0415

        TaskStore(tables()).record_over_report(task_id, data, now=now)

    return Relay(
        verify=capability_verifier().verify,
        budget=BudgetStore(tables()),
        prices=table,
        provider_for=provider,
        record_over_report=record_over_report,
        capability_key_ids=frozenset(settings().capability_key_ids),
        brake=brake().engaged,
    )


@cache
def brake() -> CachedBrake:
    """The global brake as the relay and the heartbeat read it: at most 5 s stale."""
    from steward.adapters.brake_store import BrakeStore  # noqa: PLC0415
    from steward.services.brake import CachedBrake  # noqa: PLC0415

    return CachedBrake(BrakeStore(tables()).read)


@cache
def spend_breaker() -> SpendBreaker:
    from steward.adapters.brake_store import BrakeStore  # noqa: PLC0415
    from steward.adapters.budget_store import BudgetStore  # noqa: PLC0415
    from steward.services.brake import SpendBreaker  # noqa: PLC0415

    t = tables()
    return SpendBreaker(BrakeStore(t), BudgetStore(t), settings().spend_limit_usd_per_hour)


# ---- runtime routes (ticket exchange, GitHub tokens, claim, heartbeat, events, finish, uploads)


@cache
def minter() -> Minter:
    from steward.adapters.capability_signer import KmsCapabilitySigner, kms_client  # noqa: PLC0415
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.adapters.ticket_store import TicketStore  # noqa: PLC0415
    from steward.services.mint import Minter  # noqa: PLC0415

    s, t = settings(), tables()
    return Minter(
        tickets=TicketStore(t),
        tasks=TaskStore(t),
        installations=InstallationStore(t),
        signer=KmsCapabilitySigner(kms_client(), s.require("capability_key_ids")[0]),
        prices=price_table().entry,
        lifetime_seconds=s.capability_lifetime,
    )


@cache
def runtime_service() -> RuntimeService:
    from steward.adapters.artifact_store import ArtifactStore  # noqa: PLC0415
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.plan_store import PlanStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.services.runtime import RuntimeService  # noqa: PLC0415

    s, t = settings(), tables()
    return RuntimeService(
        TaskStore(t),
        ArtifactStore(s.artifacts_bucket),
        # a review ending's pull request is checked on GitHub (unset App: none is accepted)
        github=loop_github if s.github_app_id is not None else None,
        installations=InstallationStore(t),
        plans=PlanStore(t),  # the plan's related pull requests, for the body of the one a run opens
    )


def github_app(s: Settings) -> GitHubApp:
    """The GitHub App: its id, its private key (the variable, else the Secrets Manager
    secret) and its API URL (unset: api.github.com; locally the twin)."""
    from steward.adapters.github import GitHubApp  # noqa: PLC0415 - githubkit: only the token route

    app_id = s.require("github_app_id")
    pem = s.github_private_key
    if not pem:
        if not s.github_private_key_secret_id:
            raise RuntimeError("set STEWARD_GITHUB_PRIVATE_KEY or STEWARD_GITHUB_PRIVATE_KEY_SECRET_ID")
        from steward.adapters.secrets import secret_string  # noqa: PLC0415

        pem = secret_string(s.github_private_key_secret_id)
    return GitHubApp(app_id, pem, base_url=s.github_api_url)


@cache
def github_tokens() -> GitHubTokens:
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.services.github_tokens import GitHubTokens  # noqa: PLC0415

    t = tables()
    return GitHubTokens(
        verify=capability_verifier().verify,
        tasks=TaskStore(t),
        installations=InstallationStore(t),
        github=github_app(settings()),
    )


# ---- webhook


@cache
def webhook_receiver() -> WebhookReceiver:
    """With no secret configured every delivery is refused, never accepted unsigned."""
    from steward.adapters.delivery_store import DeliveryStore  # noqa: PLC0415
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.domain.webhooks import WebhookSecret  # noqa: PLC0415
    from steward.services.webhooks import WebhookReceiver  # noqa: PLC0415

    s, t = settings(), tables()
    value: str | None = s.webhook_secret
    if not value and s.webhook_secret_id:
        from steward.adapters.secrets import secret_string  # noqa: PLC0415

        value = secret_string(s.webhook_secret_id)
    return WebhookReceiver(
        secret=WebhookSecret(value),
        deliveries=DeliveryStore(t),
        tasks=TaskStore(t),
        installations=InstallationStore(t),
        app_slug=s.github_app_slug,
        # a conversation comment's pull request is read on GitHub (unset App: such comments are ignored)
        pulls=loop_github if s.github_app_id is not None else None,
        tick_now=tick_now(),
    )


# ---- the loop


@dataclass(frozen=True)
class SchedulerParts:
    index: LivenessIndex
    queue: HeartbeatQueue
    period_seconds: int


@cache
def scheduler() -> SchedulerParts:
    from steward.adapters.liveness import LivenessIndex  # noqa: PLC0415

    return SchedulerParts(
        index=LivenessIndex(tables()), queue=heartbeat_queue(), period_seconds=settings().tick_seconds
    )


@cache
def heartbeat_queue() -> HeartbeatQueue:
    """The heartbeat FIFO queue (one GetQueueUrl, then cached): the scheduler's fan-out and
    the ticks of people's actions (`tick_now`)."""
    from steward.adapters import aws  # noqa: PLC0415
    from steward.adapters.queue import HeartbeatQueue, queue_url  # noqa: PLC0415

    sqs = aws.client("sqs")
    return HeartbeatQueue(queue_url(sqs, settings().heartbeat_queue_prefix), client=sqs)


@cache
def tick_now() -> TickNow:
    """A tick for a user right after a person's action (a confirm, a retry: the API; a
    follow-up ask: the webhook receiver), so an approval starts work at once rather than at
    the scheduler's next period. The queue is looked up at the first such tick; a failure is
    logged, never raised (`steward.adapters.queue:TickNow`)."""
    from steward.adapters.queue import TickNow  # noqa: PLC0415

    return TickNow(heartbeat_queue)


@cache
def launcher() -> Launcher:
    """One launcher per process, shared by the heartbeat and the reaper (locally it owns the
    runtime subprocesses, so stopping must go through the one that started them)."""
    from steward.domain.launch import RuntimeEndpoints  # noqa: PLC0415

    s = settings()
    endpoints = RuntimeEndpoints(api_url=s.api_url, relay_url=s.relay_url)
    if s.launcher == "local":
        from steward.local.launcher import LocalLauncher  # noqa: PLC0415 - never loaded on Lambda

        # The deployment's runner bounds, as a Fargate task definition would carry them; no
        # table, bucket or AWS variable (the runtime writes only through the runtime routes).
        log_dir = Path(s.runtime_log_dir) if s.runtime_log_dir else None
        return LocalLauncher(endpoints, extra_env=dict(s.runtime_env), log_dir=log_dir)
    from steward.adapters import aws  # noqa: PLC0415
    from steward.adapters.fargate_launcher import FargateLauncher  # noqa: PLC0415

    return FargateLauncher(
        aws.client("ecs"),
        cluster=s.require("ecs_cluster"),
        task_definition=s.require("runner_task_definition"),
        container_name=s.runner_container,
        subnets=list(s.runner_subnets),
        security_groups=list(s.runner_security_groups),
        endpoints=endpoints,
        assign_public_ip=s.runner_public_ip,
    )


@cache
def heartbeat() -> Heartbeat:
    from steward.adapters.plan_store import PlanStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.adapters.ticket_store import TicketStore  # noqa: PLC0415
    from steward.adapters.user_store import UserStore  # noqa: PLC0415
    from steward.services.heartbeat import Heartbeat  # noqa: PLC0415

    t = tables()
    return Heartbeat(
        users=UserStore(t),
        plans=PlanStore(t),
        tasks=TaskStore(t),
        tickets=TicketStore(t),
        launcher=launcher(),
        resync=resync(),
        withdrawals=withdrawals(),
        replies=replies(),
        status_comments=status_comments(),
        brake=brake().engaged,
    )


@cache
def resync() -> Resync | None:
    """The loop's look at GitHub, or None (logged) where no GitHub App is configured."""
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.domain.resync import ResyncPolicy  # noqa: PLC0415
    from steward.services.resync import Resync  # noqa: PLC0415

    s, t = settings(), tables()
    if s.github_app_id is None:
        logging.getLogger(__name__).warning(
            "STEWARD_GITHUB_APP_ID is not set: pull requests are not resynced"
        )
        return None
    policy = ResyncPolicy(
        period=timedelta(seconds=s.github_resync_seconds), max_calls=s.github_resync_max_calls
    )
    return Resync(
        TaskStore(t), InstallationStore(t), github=loop_github, policy=policy, app_slug=s.github_app_slug
    )


@cache
def replies() -> Replies | None:
    """The loop's one-time replies on pull requests, or None where no GitHub App is configured."""
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.plan_store import PlanStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.services.replies import Replies  # noqa: PLC0415

    t = tables()
    if settings().github_app_id is None:
        return None
    return Replies(TaskStore(t), InstallationStore(t), github=loop_github, plans=PlanStore(t))


@cache
def status_comments() -> StatusComments:
    """The status comments on pull requests (none written where no GitHub App is configured)."""
    from steward.adapters.event_store import EventStore  # noqa: PLC0415
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.plan_store import PlanStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.services.status_comments import StatusComments  # noqa: PLC0415

    s, t = settings(), tables()
    return StatusComments(
        TaskStore(t),
        EventStore(t),
        PlanStore(t),
        InstallationStore(t),
        github=loop_github if s.github_app_id is not None else None,
        console_url=s.console_url,
        app_slug=s.github_app_slug,
    )


@cache
def withdrawals() -> Withdrawals | None:
    """The loop's closing of withdrawn pull requests, or None where no GitHub App is configured."""
    from steward.adapters.installation_store import InstallationStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.services.withdrawal import Withdrawals  # noqa: PLC0415

    t = tables()
    if settings().github_app_id is None:
        return None
    return Withdrawals(TaskStore(t), InstallationStore(t), github=loop_github)


@cache
def loop_github() -> GitHubApp:
    """The process's one GitHub App client for the loop (resync and withdrawals) and the
    runtime routes (a review ending's pull request), built on first use."""
    return github_app(settings())


@cache
def reaper() -> Reaper:
    from steward.adapters.budget_store import BudgetStore  # noqa: PLC0415
    from steward.adapters.task_store import TaskStore  # noqa: PLC0415
    from steward.services.reaper import Reaper  # noqa: PLC0415

    t = tables()
    return Reaper(TaskStore(t), launcher(), BudgetStore(t))


# ---- operators (the CLI's admin commands)


def operator_tables(state_file: Path, environ: Mapping[str, str] | None = None) -> Tables:
    """The deployment's tables for an operator: AWS credentials and STEWARD_TABLE_PREFIX
    from the environment, or the local stack's endpoint when its state file exists and no
    AWS endpoint is configured. With neither a region and credentials (as boto3 resolves
    them for this process) nor that state file, raises AwsNotConfigured (one line for the
    CLI, rather than botocore's traceback)."""
    import json  # noqa: PLC0415

    from steward.adapters.dynamo import Tables  # noqa: PLC0415

    env = os.environ if environ is None else environ
    prefix = env.get("STEWARD_TABLE_PREFIX")
    kwargs: dict[str, str] = {}
    if "AWS_ENDPOINT_URL" not in env and state_file.exists():
        state = json.loads(state_file.read_text())
        kwargs = {"endpoint_url": state["aws_endpoint_url"], "region_name": state["region"]}
        kwargs |= {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
        prefix = prefix or state["table_prefix"]
    else:
        from steward.adapters.operator_aws import require_configured  # noqa: PLC0415

        require_configured(
            "set AWS credentials and AWS_DEFAULT_REGION (or AWS_PROFILE) for the deployment's account, "
            f"or start the local stack (`steward local up`, which writes {state_file})",
            aws_region_set=bool(env.get("AWS_REGION")),
        )
    return Tables.connect(prefix or Settings.from_env(env).table_prefix, **kwargs)


_BUILDERS: tuple[Callable[..., Any], ...] = (
    settings,
    tables,
    price_table,
    capability_verifier,
    api_services,
    relay,
    brake,
    spend_breaker,
    minter,
    runtime_service,
    github_tokens,
    webhook_receiver,
    scheduler,
    heartbeat_queue,
    tick_now,
    launcher,
    heartbeat,
    resync,
    replies,
    status_comments,
    withdrawals,
    loop_github,
    reaper,
)


def reset() -> None:
    """Forget every built part and cached secret: the next call builds afresh from the
    current environment (a cold start). The local launcher's runtimes are not stopped here:
    `steward.local.stack` closes the launcher first."""
    for builder in _BUILDERS:
        builder.cache_clear()  # type: ignore[attr-defined]
    if "steward.adapters.secrets" in sys.modules:  # never imported: nothing cached, no boto3 to load
        from steward.adapters import secrets  # noqa: PLC0415

        secrets.reset()
