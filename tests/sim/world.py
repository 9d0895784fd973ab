"""The simulated world a schedule runs in: the real stores on moto, the real services and
handlers, the GitHub twin, and fakes only for ECS, the model provider and time.

Built once per run (`Run`): moto in-process with its DynamoDB serialized (docs/testing.md), the artifact bucket, the capability key, the twin (its webhooks withheld: the schedule
delivers them itself, in the order and as often as it chooses) and its one installation.
Built per schedule (`World`): fresh tables under a prefix of their own, two fresh
repositories on the twin (both held by the installation, which is linked to the user: a
plan's items may work in either), the App's client, the clocks, the ECS fake, every service wired to them, and the runtimes the launcher
started, each walked through the runner's stages by the schedule over the real
`/v1/runtime/*` routes and relay.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer
from moto.dynamodb.models import dynamodb_backends
from steward import relay_handler, runtime_handler, wiring
from steward.adapters import liveness
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.budget_store import BudgetStore
from steward.adapters.capability_signer import CapabilityVerifier, KmsCapabilitySigner
from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.dynamo import Tables
from steward.adapters.event_store import EventStore
from steward.adapters.fargate_launcher import FargateLauncher
from steward.adapters.github import GitHubApp, InstallationClient, InstallationToken, PullRef
from steward.adapters.installation_store import InstallationStore
from steward.adapters.plan_store import PlanStore
from steward.adapters.price_file import load_price_table
from steward.adapters.providers.base import ProviderResult, converse_usage
from steward.adapters.runtime_api import RuntimeApi
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.adapters.user_store import UserStore
from steward.config import Settings
from steward.domain.budget import Usage
from steward.domain.converse import ConverseRequest
from steward.domain.errors import ProviderError, ProviderOutcomeUnknown
from steward.domain.ids import live_shard
from steward.domain.installations import Installation
from steward.domain.launch import RuntimeEndpoints
from steward.domain.loop import LoopSettingsUpdate
from steward.domain.resync import ResyncPolicy
from steward.domain.webhooks import WebhookSecret
from steward.local.github_twin import GitHubTwin
from steward.local.moto_serial import install_dynamodb_lock
from steward.local.moto_speed import install_moto_shortcuts
from steward.services import reaper
from steward.services.github_tokens import GitHubTokens
from steward.services.heartbeat import Heartbeat
from steward.services.mint import Minter
from steward.services.plans import PlanService
from steward.services.reaper import Reaper
from steward.services.relay import Relay
from steward.services.resync import Resync
from steward.services.runtime import RuntimeService
from steward.services.tasks import TaskService
from steward.services.webhooks import WebhookReceiver
from steward.services.withdrawal import Withdrawals
from steward.tables import ALL_TABLES

from tests.sim.faults import WRITES, FaultBoard
from tests.sim.transport import LambdaTransport
from tests.support.fake_ecs import FakeEcs

REGION = "us-east-1"
USER = "alice"
OWNER = "acme"
BUCKET = "sim-artifacts"
SECRET = "sim-webhook-secret"
MODEL = "scripted-pricey"  # $100/$500 per million tokens: a few calls reach a small budget
BUDGET = "0.10"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # fixed: a schedule replays to the microsecond
RESYNC_PERIOD = timedelta(seconds=60)
COMPONENTS = (
    "api",
    "heartbeat",
    "heartbeat_b",
    "reaper",
    "runtime",
    "relay",
    "webhook",
)  # each its own clock
API_HOST, RELAY_HOST = "runtime.sim", "relay.sim"


@dataclass
class Clocks:
    """One simulated time with a skew per component (each Lambda host has its own clock)."""

    now: datetime = T0
    skew: dict[str, timedelta] = field(default_factory=dict)

    def of(self, component: str) -> Callable[[], datetime]:
        return lambda: self.now + self.skew.get(component, timedelta(0))

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class LogCapture(logging.Handler):
    """Every log record of the run, rendered with its extras (checked for secrets)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        extras = {k: v for k, v in record.__dict__.items() if k not in _STANDARD_RECORD_KEYS}
        self.lines.append(f"{record.getMessage()} {extras!r} {record.exc_text or ''}")


_STANDARD_RECORD_KEYS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


@dataclass
class SimProvider:
    """The model: answers with reported usage, or over-reports, fails, or leaves its outcome
    unknown, as the schedule sets it for the next call; `during` runs while the call is in
    flight (other calls of the same task reserving at the same time)."""

    mode: str = "ok"
    during: Callable[[], None] | None = None

    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        mode, self.mode = self.mode, "ok"
        during, self.during = self.during, None
        if during is not None:
            during()
        if mode == "error":
            raise ProviderError("the simulated provider failed")
        if mode == "unknown":
            raise ProviderOutcomeUnknown("the simulated provider's answer was lost")
        sent = len(request.model_dump_json().encode())
        usage = Usage(input_tokens=sent // 4, output_tokens=min(max_tokens, 16))
        if mode == "over_report":
            usage = Usage(input_tokens=sent * 3, output_tokens=max_tokens * 4)
        response = {
            "output": {"message": {"role": "assistant", "content": [{"text": "done"}]}},
            "stopReason": "end_turn",
            "usage": converse_usage(usage),
            "metrics": {"latencyMs": 1},
        }
        return ProviderResult(response, usage)


@dataclass
class Runtime:
    """One runtime the launcher started: where it is in the runner's stages, what it holds."""

    arn: str
    task_id: str
    ticket: str = field(repr=False)
    runtime_id: str
    stage: str = "exchange"
    alive: bool = True
    capability: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    installation_id: int | None = None
    head: str | None = None
    pull: PullRef | None = None


class Run:
    """What every schedule of one pytest run shares (expensive to build, stateless between
    schedules, or keyed so that schedules never meet)."""

    def __init__(self, root: Path) -> None:
        install_dynamodb_lock()
        install_moto_shortcuts()
        self.board = FaultBoard()
        self.logs = LogCapture()
        self.count = 0
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        self.s3 = s3
        kms = boto3.client("kms", region_name=REGION)
        self.key_id = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"]
        self.signer = KmsCapabilitySigner(kms, self.key_id)
        self.verifier = CapabilityVerifier.from_kms(kms, [self.key_id])
        self.prices = load_price_table()
        self.twin = GitHubTwin(root / "twin", webhook_url="http://127.0.0.1:9/hook", webhook_secret=SECRET)
        self.twin.start()
        self.twin.withhold(True)  # the schedule delivers every webhook itself
        self.installation_id = self.twin.create_installation(OWNER, [])
        for name in (
            "",
            *(f"steward-{f}" for f in ("api", "relay", "runtime", "webhook", "heartbeat", "reaper")),
        ):
            logging.getLogger(name).addHandler(self.logs)
        # One set of tables for the run, emptied for each schedule (creating ten tables per
        # schedule would cost more than most schedules do).
        self.tables = Tables.connect("sim-", region_name=REGION)
        self.tables.create_all()
        # Looked up at each use: a failed transaction in moto restores a deep copy of every
        # table, so a table object held from before would be a stale one.
        self._backend = dynamodb_backends[next(iter(dynamodb_backends))][REGION]
        self.table_names = {spec.logical_name: spec.physical_name("sim-") for spec in ALL_TABLES}
        # Registered before the faults' hooks, so a write whose response a fault then loses
        # is still observed.
        self.tables.client.meta.events.register_first("after-call.dynamodb", self._written)
        self.board.install(self.tables.client)
        self.world: World | None = None

    def backend_table(self, logical: str) -> Any:
        return self._backend.tables[self.table_names[logical]]

    def _written(self, http_response: Any, model: Any, **_: Any) -> None:
        if self.world is not None and model.name in WRITES and http_response.status_code < 300:
            for observe in self.world.on_write:
                observe()

    def close(self) -> None:
        for name in (
            "",
            *(f"steward-{f}" for f in ("api", "relay", "runtime", "webhook", "heartbeat", "reaper")),
        ):
            logging.getLogger(name).removeHandler(self.logs)
        if self.world is not None:
            self.world.app.close()
        self.twin.stop()

    @contextmanager
    def wired(self) -> Iterator[None]:
        """The handlers' composition root bound to the running schedule's parts."""
        saved = {
            n: getattr(wiring, n)
            for n in ("runtime_service", "minter", "github_tokens", "relay", "capability_verifier")
        }
        saved_clock = runtime_handler.utcnow
        # One user lives in one shard of the sparse indexes: the sweeps read only that one (the
        # other shards are empty here, and sixteen empty queries per sweep would be most of
        # a schedule's requests). The shard count spreads write load; it is not a rule.
        saved_shards = (liveness.SHARDS, reaper._SHARDS)
        liveness.SHARDS = reaper._SHARDS = (live_shard(USER),)

        def current() -> World:
            assert self.world is not None
            return self.world

        wiring.runtime_service = lambda: current().runtime_service  # type: ignore[assignment]
        wiring.minter = lambda: current().minter  # type: ignore[assignment]
        wiring.github_tokens = lambda: current().github_tokens  # type: ignore[assignment]
        wiring.relay = lambda: current().relay  # type: ignore[assignment]
        wiring.capability_verifier = lambda: self.verifier  # type: ignore[assignment]
        runtime_handler.utcnow = lambda: current().clocks.of("runtime")()  # type: ignore[assignment]  # noqa: PLW0108 - the current schedule at call time
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(wiring, name, value)
            runtime_handler.utcnow = saved_clock  # type: ignore[assignment]
            liveness.SHARDS, reaper._SHARDS = saved_shards

    def new_world(self) -> World:
        self.count += 1
        self.board.reset()
        if self.world is not None:
            self.world.app.close()
        self.world = World(self, self.count)
        return self.world


def _no_sleep(_: float) -> None:
    return None


def _new_repo(twin: GitHubTwin, full_name: str) -> None:
    """`full_name` on the twin as a new repository (one commit on main), whatever an earlier
    schedule left under that name. The twin has no call to delete a repository: the earlier
    one's records are dropped from its tables here (it leaves the installation with them;
    `create_repo` replaces its git directory)."""
    with twin._lock:
        old = twin._repos.pop(full_name.lower(), None)
        if old is not None:
            twin._repos_by_id.pop(old.id, None)
            twin._pulls.pop(old.id, None)
            for installation in twin._installations.values():
                if old.id in installation.repo_ids:
                    installation.repo_ids.remove(old.id)
            keyed: tuple[dict[Any, Any], ...] = (
                twin._comments,
                twin._reviews,
                twin._check_runs,
                twin._statuses,
            )
            for table in keyed:  # by (repository id, number or commit)
                for key in [k for k in table if k[0] == old.id]:
                    del table[key]
    twin.create_repo(full_name, {"README.md": "# sim\n", "app.py": "print('hi')\n"})


class World:
    """One schedule's Steward: stores, services, handlers, clocks, ECS, runtimes, GitHub."""

    def __init__(self, run: Run, number: int) -> None:
        self.run = run
        self.board = run.board
        self.clocks = Clocks()
        # The same names in every schedule, each repository new (`_new_repo`): an item's
        # `repo:` line is part of its text, so of its key and its tasks' ids, which a replay
        # of a schedule (shrinking, a regression test) must meet again.
        self.number = number
        self.repo = f"{OWNER}/sim"  # the plans' front matter repository
        self.repo_b = f"{OWNER}/simb"  # an item's own (`repo:` in its details)
        self.repos = (self.repo, self.repo_b)
        # Held by no installation of the user: an item naming it is refused at publish (422).
        self.unheld = f"{OWNER}/simx"
        for logical in run.table_names:
            run.backend_table(logical).items = defaultdict(dict)
        tables = run.tables
        self.on_write: list[Callable[[], None]] = []
        self.logs_from = len(run.logs.lines)
        self.tables = tables
        self.twin = run.twin
        for repo in self.repos:
            _new_repo(self.twin, repo)
        # Its own App client: the App caches installation tokens by repository name, and a
        # token of an earlier schedule's repository of the same name is not good for this one.
        self.app = GitHubApp(
            self.twin.app_id,
            self.twin.app_private_key_pem,
            base_url=self.twin.url,
            max_attempts=2,
            sleep=_no_sleep,
        )
        # Earlier deliveries are other schedules'; this one's start with the repositories'
        # `installation_repositories` events, one each: the App was installed on the second
        # after the first (their effect is what the store already holds).
        self.delivered_from = len(self.twin.deliveries)
        for repo in self.repos:
            self.twin.add_repos(run.installation_id, [repo])
        installations = InstallationStore(tables)
        installations.put(
            Installation(installation_id=run.installation_id, account=OWNER, repositories=self.repos),
            now=T0,
        )
        installations.link(run.installation_id, USER, now=T0, force=True)
        settings = Settings(table_prefix=tables.prefix, artifacts_bucket=BUCKET)
        clock = self.clocks.of
        self.ecs = FakeEcs()
        self.launcher = FargateLauncher(
            self.ecs,
            cluster="steward",
            task_definition="steward-runner:1",
            container_name="runner",
            subnets=["subnet-1"],
            security_groups=["sg-1"],
            endpoints=RuntimeEndpoints(api_url=f"http://{API_HOST}", relay_url=f"http://{RELAY_HOST}"),
        )
        self.users = UserStore(tables)
        self.plans = PlanStore(tables)
        self.tasks = TaskStore(tables)
        self.budget = BudgetStore(tables)
        artifacts = ArtifactStore(BUCKET, client=run.s3)
        # With the installations, as the API wires it: publish refuses a repository (the front
        # matter's or an item's) that no live installation of the user holds.
        self.plan_service = PlanService(
            self.plans,
            settings.document_policy,
            tasks=self.tasks,
            clock=clock("api"),
            installations=installations,
        )
        self.task_service = TaskService(self.tasks, EventStore(tables), artifacts, clock=clock("api"))
        self.resync = Resync(
            self.tasks,
            installations,
            github=lambda: self.app,
            policy=ResyncPolicy(period=RESYNC_PERIOD, max_calls=10),
        )
        self.withdrawals = Withdrawals(self.tasks, installations, github=lambda: self.app)
        tickets = TicketStore(tables)

        def heartbeat(component: str) -> Heartbeat:
            return Heartbeat(
                users=self.users,
                plans=self.plans,
                tasks=self.tasks,
                tickets=tickets,
                launcher=self.launcher,
                clock=clock(component),
                owner=f"hb-{component}",
                resync=self.resync,
                withdrawals=self.withdrawals,
            )

        self.heartbeats = {"a": heartbeat("heartbeat"), "b": heartbeat("heartbeat_b")}
        self.reaper = Reaper(self.tasks, self.launcher, self.budget)
        self.receiver = WebhookReceiver(
            secret=WebhookSecret(SECRET),
            deliveries=DeliveryStore(tables),
            tasks=self.tasks,
            installations=installations,
            clock=clock("webhook"),
        )
        self.runtime_service = RuntimeService(
            self.tasks,
            artifacts,
            clock=clock("runtime"),
            github=lambda: self.app,
            installations=installations,
            plans=self.plans,  # a claim answers with the plan's related pull requests
        )
        self.minter = Minter(
            tickets,
            self.tasks,
            installations,
            run.signer,
            run.prices.entry,
            clock=clock("runtime"),
            lifetime_seconds=3600,
        )
        self.github_tokens = GitHubTokens(
            verify=run.verifier.verify,
            tasks=self.tasks,
            installations=installations,
            github=self.app,
            clock=clock("runtime"),
        )
        self.provider = SimProvider()

        def over_report(task_id: str, data: Any, now: datetime) -> None:
            self.tasks.record_over_report(task_id, data, now=now)

        self.relay = Relay(
            verify=run.verifier.verify,
            budget=self.budget,
            prices=run.prices,
            provider_for=lambda _model, _entry: self.provider,
            record_over_report=over_report,
            capability_key_ids=frozenset({run.key_id}),
            clock=clock("relay"),
        )
        transport = LambdaTransport(
            {
                API_HOST: ("http_api", runtime_handler.lambda_handler),
                RELAY_HOST: ("rest_api", relay_handler.lambda_handler),
            }
        )
        self.api = RuntimeApi(
            f"http://{API_HOST}", f"http://{RELAY_HOST}", attempts=2, sleep=_no_sleep, transport=transport
        )
        self.runtimes: dict[str, Runtime] = {}  # by ECS task ARN
        self.secrets: set[str] = set()  # every credential the run issued
        self.delivered: list[str] = []  # delivery ids sent at least once, in order
        self.dropped: set[str] = set()  # deliveries GitHub never managed to send
        self._snapshot: dict[str, list[dict[str, Any]]] | None = None
        self.users.update_loop_settings(
            USER,
            LoopSettingsUpdate(interval_seconds=1, max_parallel=3, daily_spawn_cap=20),
            now=T0,
            clear_quiet_hours=False,
        )

    # ---- the world as stored (read from moto's backend: no request, no hook, no fault)
    def rows(self, logical: str) -> list[dict[str, Any]]:
        if self._snapshot is not None and logical in self._snapshot:
            return self._snapshot[logical]
        rows = [_plain(item.to_json()["Attributes"]) for item in self.run.backend_table(logical).all_items()]
        if self._snapshot is not None:
            self._snapshot[logical] = rows
        return rows

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Read each table once for a block that makes no request (an invariant check)."""
        self._snapshot = {}
        try:
            yield
        finally:
            self._snapshot = None

    # ---- runtimes
    def adopt_launched(self) -> None:
        """Runtimes for the ECS tasks the launcher started since the last look."""
        for arn in self.ecs.tasks:
            if arn in self.runtimes:
                continue
            env = self.ecs.environment_of(arn, "runner")
            self.runtimes[arn] = Runtime(
                arn, env["STEWARD_TASK_ID"], env["STEWARD_TICKET"], f"rt-{len(self.runtimes) + 1}"
            )
            self.secrets.add(env["STEWARD_TICKET"])
        for stop in self.ecs.stops:  # a stopped Fargate task's runtime is gone
            runtime = self.runtimes.get(stop.get("task", ""))
            if runtime is not None:
                runtime.alive = False

    def task_repo(self, task_id: str) -> str:
        """The repository of the task (its row's `repo`): where its runtime pushes and opens
        its pull request, and where its rounds answer."""
        row = next(r for r in self.rows("tasks") if r["task_id"] == task_id)
        return str(row["repo"])

    def runtime_github(self, runtime: Runtime) -> InstallationClient:
        """The runtime's GitHub client: its token, for its task's repository."""
        assert runtime.token is not None
        repo = self.task_repo(runtime.task_id)
        token = InstallationToken(runtime.token, datetime.now(UTC) + timedelta(hours=1), repo)
        return InstallationClient(lambda: token, base_url=self.twin.url, max_attempts=2, sleep=_no_sleep)

    def pulls(self) -> list[tuple[str, dict[str, Any]]]:
        """Every pull request of both repositories as (repository, its state), oldest first
        within each."""
        return [(repo, pull) for repo in self.repos for pull in self.twin.pull_states(repo)]

    # ---- webhooks
    def pending_deliveries(self) -> list[Any]:
        """Deliveries GitHub made for this schedule and has not yet sent or dropped."""
        sent = set(self.delivered) | self.dropped
        return [
            d
            for d in self.twin.deliveries[self.delivered_from :]
            if d.delivery_id not in sent and not d.redelivery
        ]

    def delivery(self, delivery_id: str) -> Any:
        return next(d for d in self.twin.deliveries[self.delivered_from :] if d.delivery_id == delivery_id)

    def send(self, delivery: Any) -> None:
        """POST it to the receiver as hookshot would; returning is acknowledging (a 2xx), an
        exception is the receiver's error answer (GitHub does not retry it)."""
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": delivery.event,
            "X-GitHub-Delivery": delivery.delivery_id,
            "X-Hub-Signature-256": "sha256="
            + hmac.new(SECRET.encode(), delivery.body, hashlib.sha256).hexdigest(),
        }
        if delivery.delivery_id not in self.delivered:
            self.delivered.append(delivery.delivery_id)
        self.receiver.receive(delivery.body, headers)


_DESERIALIZER = TypeDeserializer()


def _plain(attributes: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB JSON item as Python values (numbers as Decimal)."""
    return {k: _DESERIALIZER.deserialize(v) for k, v in attributes.items()}
