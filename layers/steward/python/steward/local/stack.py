"""`steward local up`: the embedded local stack (docs/getting-started/local-stack.md).

Everything runs on loopback in this process: a moto server as the AWS endpoint (tables and
bucket created from the same specs as the CDK app) and the real API Lambda handler behind an
adapter that verifies dev bearer tokens as API Gateway's JWT authorizer would. Later
capabilities add the relay, the webhook receiver, the GitHub twin, the scheduler tick and
the local launcher here.

One invocation at a time per process, as in a Lambda environment (handlers rely on it:
Powertools keeps the current request in class state): the functions served here share one
invocation lock, and the relay, whose model calls may take a minute, runs in a process of its
own (`steward.local.relay_process` says why).

One stack per state directory: `StackLock` holds `stack.lock` there from before the first
part starts until the last one stopped, so a second `steward local up` or `steward demo` on
the same directory refuses instead of overwriting the first one's state and repositories.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from steward.adapters import aws
from steward.adapters.capability_signer import CapabilityVerifier
from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.config import Settings
from steward.domain.capability import Capability
from steward.domain.errors import StewardError
from steward.domain.installations import Installation
from steward.domain.models import utcnow
from steward.domain.routes import CONSOLE_PREFIX, RUNTIME_PREFIX
from steward.local.console_login import LoginCodes
from steward.local.dev_auth import DevIssuer
from steward.local.event_sources import Schedule, SqsSource
from steward.local.github_twin import GitHubTwin
from steward.local.http_adapter import LambdaHttpServer
from steward.local.http_base import LocalHandler
from steward.local.moto_server import MotoServer
from steward.local.relay_process import RelayProcess
from steward.local.sample_repo import SAMPLE_REPOS
from steward.local.stream_hub import StreamHub, serve_watch
from steward.queues import HEARTBEAT

DEV_USERS = ("alice", "bob")
LOCAL_REGION = "us-east-1"
DEFAULT_TICK_SECONDS = 2.0
DEFAULT_REAPER_SECONDS = 5.0

SEED_INSTALLATION = 1
LOCK_FILE = "stack.lock"


class StackAlreadyRunning(StewardError):
    """Another live process holds the state directory's stack lock."""

    status = 409
    code = "stack_running"

    def __init__(self, message: str, *, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


class StackLock:
    """An exclusive `flock` on `<state dir>/stack.lock`, which holds the owner's pid.

    The kernel drops the lock when its process ends, however it ends (SIGKILL included), so
    a file left by a killed stack blocks nothing: the next stack takes the lock and writes its
    own pid. The descriptor is not inherited by the runtimes the stack spawns (close-on-exec),
    so none of them can keep the directory locked after the stack is gone.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise StackAlreadyRunning naming the holder's pid."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            shown = str(pid) if pid is not None else "unknown"
            raise StackAlreadyRunning(
                f"a stack is already running (pid {shown}) with its state in {self.path.parent}; "
                "stop it first, or give this one another --state-file directory",
                pid=pid,
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Empty the file (no pid of a stopped stack stays behind) and drop the lock."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the only descriptor of the open file releases the flock


def _holder(fd: int, wait_seconds: float = 1.0) -> int | None:
    """The pid the lock's holder wrote (it writes it right after taking the lock: wait for
    it briefly), or None."""
    deadline = time.monotonic() + wait_seconds
    while True:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return int(text)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


@dataclass
class LocalStack:
    state_file: Path = Path(".steward/local.json")
    host: str = "127.0.0.1"
    api_port: int = 0
    moto_port: int = 0
    tick_seconds: float = DEFAULT_TICK_SECONDS
    reaper_seconds: float = DEFAULT_REAPER_SECONDS
    # How stale a review task's view of GitHub may get (STEWARD_GITHUB_RESYNC_SECONDS); None
    # keeps whatever the environment says (default 900).
    resync_seconds: int | None = None
    log_dir: Path | None = None
    _moto: MotoServer | None = field(default=None, init=False)
    _api: LambdaHttpServer | None = field(default=None, init=False)
    _relay: RelayProcess | None = field(default=None, init=False)
    # The invocation lock of every function served in this process (the relay has its own).
    _invocations: threading.Lock = field(default_factory=threading.Lock, init=False)
    _hub: StreamHub | None = field(default=None, init=False)
    _webhook: LambdaHttpServer | None = field(default=None, init=False)
    _twin: GitHubTwin | None = field(default=None, init=False)
    _sources: list[Schedule | SqsSource] = field(default_factory=list, init=False)
    _saved_env: dict[str, str | None] = field(default_factory=dict, init=False)
    _lock: StackLock | None = field(default=None, init=False)
    state: dict[str, Any] = field(default_factory=dict, init=False)

    @property
    def twin(self) -> GitHubTwin:
        """The GitHub twin (the demo merges pull requests with it, as a reviewer would)."""
        if self._twin is None:
            raise RuntimeError("the stack is not running")
        return self._twin

    @property
    def state_dir(self) -> Path:
        return self.state_file.parent

    def start(self) -> dict[str, Any]:
        """Take the state directory's lock (StackAlreadyRunning when another stack holds
        it: nothing is started and nothing of the other stack's is touched), start every
        part, then write the state file (only once everything answers)."""
        lock = StackLock(self.state_dir)
        lock.acquire()
        self._lock = lock
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> dict[str, Any]:
        self._moto = MotoServer(port=self.moto_port)
        self._moto.start()
        settings = Settings.from_env()
        # The handlers read their configuration from the environment, as on Lambda; stop()
        # puts the environment back.
        self._set_env(
            {
                "AWS_ENDPOINT_URL": self._moto.url,
                "AWS_ACCESS_KEY_ID": "local",
                "AWS_SECRET_ACCESS_KEY": "local",  # moto accepts any key
                "AWS_DEFAULT_REGION": LOCAL_REGION,
                "AWS_REGION": LOCAL_REGION,
                "STEWARD_TABLE_PREFIX": settings.table_prefix,
                "STEWARD_ARTIFACTS_BUCKET": settings.artifacts_bucket,
                "STEWARD_CONSOLE_SIGN_IN": "local",
                "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
                # CloudWatch EMF lines on stdout mean nothing without CloudWatch.
                "POWERTOOLS_METRICS_DISABLED": os.environ.get("POWERTOOLS_METRICS_DISABLED", "true"),
                "AWS_PROFILE": None,
            }
        )
        Tables.connect(settings.table_prefix, region_name=LOCAL_REGION).create_all()
        aws.client("s3", region_name=LOCAL_REGION).create_bucket(Bucket=settings.artifacts_bucket)
        key_id = self._seed(settings.table_prefix)
        github = self._start_github()
        # Every setting the relay reads is in the environment now: it starts (and imports)
        # in its own process while this one starts the rest.
        self._relay = RelayProcess(self.state_dir, self.host)
        self._relay.start()

        issuer = DevIssuer.load_or_create(self.state_dir / "dev-jwt-key.pem")
        api_url, relay_http_url, relay_url, ca_bundle = self._start_http(issuer)
        stream_url = self._start_stream_hub(issuer, settings.table_prefix, key_id)
        self._start_loop(settings.table_prefix, api_url, relay_http_url)
        self.state = {
            "api_url": api_url,
            "relay_url": relay_url,
            "relay_http_url": relay_http_url,
            "ca_bundle": ca_bundle,
            "stream_url": stream_url,
            "console_url": f"{api_url}{CONSOLE_PREFIX}/",
            "aws_endpoint_url": self._moto.url,
            "region": LOCAL_REGION,
            "table_prefix": settings.table_prefix,
            "capability_key_id": key_id,
            "users": {name: issuer.mint(name) for name in DEV_USERS},
            **github,
        }
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.state_file.with_suffix(".tmp")
        # The file holds bearer tokens: readable by its owner only, replaced atomically.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.state, handle, indent=2)
        tmp.replace(self.state_file)
        return self.state

    def _seed(self, prefix: str) -> str:
        """The capability signing key, and the installation that holds the sample
        repositories, linked to alice as an operator would (`steward admin link-installation`).
        Returns the key id."""
        kms = aws.client("kms", region_name=LOCAL_REGION)
        created = kms.create_key(
            KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256", Description="steward capability"
        )
        key_id = str(created["KeyMetadata"]["KeyId"])
        self._set_env({"STEWARD_CAPABILITY_KEY_ID": key_id})
        installations = InstallationStore(Tables.connect(prefix, region_name=LOCAL_REGION))
        seeded = Installation(
            installation_id=SEED_INSTALLATION, account="steward-demo", repositories=tuple(SAMPLE_REPOS)
        )
        installations.put(seeded, now=utcnow())
        installations.link(SEED_INSTALLATION, "alice", now=utcnow(), force=True)
        return key_id

    def _start_github(self) -> dict[str, Any]:
        """The webhook receiver (a Function URL) and the GitHub twin delivering to it; the
        twin hosts the sample repositories in the installation seeded for alice."""
        from steward import webhook_handler  # noqa: PLC0415 - configured by the environment

        secret = secrets.token_hex(20)
        self._set_env({"STEWARD_WEBHOOK_SECRET": secret})
        self._webhook = LambdaHttpServer(
            webhook_handler.lambda_handler,
            kind="function_url",
            host=self.host,
            function_name="steward-webhook",
            invocation_lock=self._invocations,
        )
        self._webhook.start()
        root = self.state_dir / "github"
        self._twin = GitHubTwin(root, webhook_url=self._webhook.url, webhook_secret=secret, host=self.host)
        self._twin.start()
        for repo, files in SAMPLE_REPOS.items():
            self._twin.create_repo(repo, files)
        self._twin.create_installation("steward-demo", list(SAMPLE_REPOS), installation_id=SEED_INSTALLATION)
        self._set_env(
            {
                "STEWARD_GITHUB_APP_ID": str(self._twin.app_id),
                "STEWARD_GITHUB_PRIVATE_KEY": self._twin.app_private_key_pem.decode(),
                "STEWARD_GITHUB_API_URL": self._twin.url,
            }
        )
        # The App key also lives where a deployment keeps it (the GitHubPrivateKeySecret
        # output's secret), so `steward doctor --local` reads it as it does in AWS.
        key_secret = _put_secret("steward/github-app-private-key", self._twin.app_private_key_pem.decode())
        return {
            "github_app_id": self._twin.app_id,
            "github_private_key_secret": key_secret,
            "github_url": self._twin.url,
            "webhook_url": self._webhook.url,
            "webhook_secret": secret,
            "repos": {
                repo: {"installation_id": SEED_INSTALLATION, "clone_url": f"{self._twin.url}/{repo}.git"}
                for repo in SAMPLE_REPOS
            },
        }

    def _start_http(self, issuer: DevIssuer) -> tuple[str, str, str, str]:
        """The HTTP API (user routes behind the JWT authorizer, runtime routes outside it, as
        two API Gateway routes to two functions) and the relay's REST API, served over plain
        http for the runner and over HTTPS (a CA made now) for stock clients: (API URL,
        relay http URL, relay HTTPS URL, CA bundle path)."""
        from steward import runtime_handler  # noqa: PLC0415 - configured by the environment
        from steward.api import handler  # noqa: PLC0415

        _forget_clients()

        def gateway(event: dict[str, Any], context: Any) -> Any:
            if str(event.get("rawPath", "")).startswith(RUNTIME_PREFIX):
                return runtime_handler.lambda_handler(event, context)
            return handler.lambda_handler(event, context)

        codes = LoginCodes(issuer.verify, issuer.mint)

        def front(request: LocalHandler) -> bool:
            """The local stack's own routes on the API origin: the console's login codes and
            the live output (the hub's stream, so the console's page needs no other origin)."""
            return codes.serve(request) or (self._hub is not None and serve_watch(request, self._hub))

        self._api = LambdaHttpServer(
            gateway,
            kind="http_api",
            authorizer=issuer.verify,
            public_path_prefixes=(RUNTIME_PREFIX, CONSOLE_PREFIX),
            front=front,
            host=self.host,
            port=self.api_port,
            function_name="steward-api",
            invocation_lock=self._invocations,
        )
        self._api.start()
        if self._relay is None:
            raise RuntimeError("the relay process is not started")
        relay = self._relay.urls()
        return self._api.url, relay["http_url"], relay["https_url"], relay["ca_bundle"]

    def _start_stream_hub(self, issuer: DevIssuer, prefix: str, key_id: str) -> str:
        """The live terminal view: runtimes post output with their capability, owners watch
        `GET <stream_url>/v1/tasks/{id}/stream` as Server-Sent Events."""
        verifier = CapabilityVerifier.from_kms(aws.client("kms", region_name=LOCAL_REGION), [key_id])
        tasks = TaskStore(Tables.connect(prefix, region_name=LOCAL_REGION))

        def owner(task_id: str) -> str | None:
            task = tasks.get(task_id)
            return task.user if task is not None else None

        from steward import wiring  # noqa: PLC0415 - configured by the environment

        def admit(capability: Capability) -> None:
            """As the runtime routes admit a record: not once its task failed, was cancelled
            or reaped (the service of the moment: the loop's start rebuilds them)."""
            wiring.runtime_service().admit_output(capability)

        self._hub = StreamHub(verifier.verify, issuer.verify, owner, host=self.host, admit=admit)
        self._hub.start()
        self._set_env({"STEWARD_STREAM_URL": f"{self._hub.url}/v1/runtime/stream"})
        return self._hub.url

    def _start_loop(self, prefix: str, api_url: str, relay_url: str) -> None:
        """The loop as in AWS: a scheduler rate, the heartbeat fed by the SQS FIFO queue,
        the reaper rate, and runtimes started as local subprocesses."""
        sqs = aws.client("sqs", region_name=LOCAL_REGION)
        url = sqs.create_queue(**HEARTBEAT.create_queue_kwargs(prefix))["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self._set_env(
            {
                "STEWARD_QUEUE_PREFIX": prefix,
                "STEWARD_TICK_SECONDS": str(max(1, int(self.tick_seconds))),
                **(
                    {"STEWARD_GITHUB_RESYNC_SECONDS": str(self.resync_seconds)} if self.resync_seconds else {}
                ),
                "STEWARD_LAUNCHER": "local",
                "STEWARD_API_URL": api_url,
                "STEWARD_RELAY_URL": relay_url,
                "STEWARD_CONSOLE_URL": f"{api_url}{CONSOLE_PREFIX}/",
                "STEWARD_RUNTIME_LOG_DIR": str(self.log_dir or self.state_dir / "runs"),
            }
        )
        from steward import heartbeat_handler, reaper_handler, scheduler_handler, wiring  # noqa: PLC0415

        # Every setting is in the environment now: build the parts afresh (a cold start) and
        # bind them to this stack, so a later change of the process environment cannot
        # redirect them.
        _forget_clients()
        wiring.api_services()

        lock = self._invocations

        def scheduled(name: str, handler: Any, seconds: float) -> Schedule:
            return Schedule(name, _while_enabled(name, handler, seconds), seconds, invocation_lock=lock)

        self._sources = [
            scheduled("steward-scheduler", scheduler_handler.lambda_handler, self.tick_seconds),
            SqsSource(
                "steward-heartbeat", heartbeat_handler.lambda_handler, sqs, url, arn, invocation_lock=lock
            ),
            scheduled("steward-reaper", reaper_handler.lambda_handler, self.reaper_seconds),
        ]
        for source in self._sources:
            source.start()

    def stop(self) -> None:
        """Stop every part this stack started; remove the state file (its URLs are dead).

        A shutdown is not an error: the loop and the runtimes stop first, while every part
        they talk to still answers, so no request of theirs fails on a part already gone."""
        for source in self._sources:
            source.stop()
        if self._sources:
            from steward import wiring  # noqa: PLC0415

            launcher = wiring.launcher()
            close = getattr(launcher, "close", None)
            if close is not None:
                close()  # no runtime outlives the stack
            _forget_clients()
            self._sources = []
        if self._api is not None:
            self._api.stop()
            self._api = None
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        if self._hub is not None:
            self._hub.stop()
            self._hub = None
        if self._twin is not None:
            self._twin.stop()
            self._twin = None
        if self._webhook is not None:
            self._webhook.stop()
            self._webhook = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self.state:
            self.state_file.unlink(missing_ok=True)
            self.state = {}
        self._set_env(self._saved_env, save=False)
        self._saved_env = {}
        if self._lock is not None:  # last: the directory is free once every part is down
            self._lock.release()
            self._lock = None

    def _set_env(self, values: dict[str, str | None], *, save: bool = True) -> None:
        for key, value in values.items():
            if save:
                self._saved_env.setdefault(key, os.environ.get(key))
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _put_secret(name: str, value: str) -> str:
    """The ARN of secret `name` holding `value` (moto servers of one process share their
    state, so an earlier stack's secret of that name is given the new value)."""
    from botocore.exceptions import ClientError  # noqa: PLC0415 - with the first client

    secrets_manager = aws.client("secretsmanager", region_name=LOCAL_REGION)
    try:
        return str(secrets_manager.create_secret(Name=name, SecretString=value)["ARN"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ResourceExistsException":
            raise
        return str(secrets_manager.put_secret_value(SecretId=name, SecretString=value)["ARN"])


def _while_enabled(name: str, handler: Any, seconds: float) -> Any:
    """`handler`, invoked only while its EventBridge Scheduler schedule (created here on the
    moto server, as the CDK app creates `Loop`'s) is ENABLED: disabling it stops the local
    tick as it stops AWS's, and `steward doctor` reads its state as it does in AWS."""
    from botocore.exceptions import ClientError  # noqa: PLC0415 - with the first client

    scheduler = aws.client("scheduler", region_name=LOCAL_REGION)
    schedule: dict[str, Any] = {
        "Name": name,
        "ScheduleExpression": f"rate({max(1, round(seconds / 60))} minute)",
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {
            "Arn": f"arn:aws:lambda:{LOCAL_REGION}:123456789012:function:{name}",
            "RoleArn": "arn:aws:iam::123456789012:role/steward-local-scheduler",
        },
        "Description": f"local: every {seconds:g} s",
        "State": "ENABLED",
    }
    try:
        scheduler.create_schedule(**schedule)
    except ClientError as exc:
        # moto servers of one process share their state: an earlier stack's schedule is
        # this one's, enabled afresh.
        if exc.response.get("Error", {}).get("Code") != "ConflictException":
            raise
        scheduler.update_schedule(**schedule)

    def run(event: dict[str, Any], context: Any) -> Any:
        if scheduler.get_schedule(Name=name).get("State") != "ENABLED":
            return None
        return handler(event, context)

    return run


def _forget_clients() -> None:
    """Drop the handlers' per-process parts (their cold-start state), so a stack started
    later in this process binds them to its own endpoints."""
    from steward import (  # noqa: PLC0415
        heartbeat_handler,
        reaper_handler,
        relay_handler,
        scheduler_handler,
        webhook_handler,
        wiring,
    )

    wiring.reset()
    for module in (heartbeat_handler, reaper_handler, scheduler_handler, relay_handler, webhook_handler):
        module.metrics.clear_metrics()  # disabled metrics are buffered, never flushed
