"""`steward doctor`: what is wrong with a deployment or the local stack, one check at a time.

Each check is a function of a `Probe` (the reads, `steward.adapters.deployment` for AWS and
for the local stack) returning a `Result`: ok, or FAIL with one sentence saying what was
found and one saying what to do. The checks decide; probes only read, so the same rules
judge a deployment and the local stack, and a test can judge any facts it makes up.

A probe's read that fails raises `ProbeFailed` (a sentence, no traceback): its check FAILs
with that sentence. Anything else a check raises is a FAIL too ("unexpected ..."), so one
broken read never hides the checks after it. Checks run in `CHECKS` order and each result
is handed to `on_result` as it completes, so the CLI streams them.

Decisions (the documentation has no word on them; they are written here):

* The events the App must subscribe to are the events the webhook receiver processes
  (`steward.domain.webhooks.HANDLED`) except `installation` and
  `installation_repositories`, which GitHub sends to every App and never lists in `GET /app`.
* "Recent deliveries" are the App's last `RECENT_DELIVERIES`; a delivery that was answered
  2xx succeeded, and a failure followed by a later success of the same delivery id (a
  redelivery) is not counted.
* An installation is required for each user with a plan `confirmed` or `in_progress` (the
  plans the loop acts on); drafts and finished plans need none. The models "in use" are the
  default model and those such plans name: each must be priced.
* Locally, the price table is the one this process loads (STEWARD_PRICE_TABLE as the
  stack's shell gives it), and a model is servable when the local relay can reach its
  provider: scripted ones always, OpenAI-compatible ones when their `base_url` answers (in
  AWS too, from the operator's machine: one that does not and that nothing uses is noted,
  not failed, since the packaged table prices an Ollama model on a developer's machine),
  Bedrock ones are listed as not checked (the local relay reaches Bedrock only with real
  credentials or STEWARD_BEDROCK_ENDPOINT_URL). In AWS, each Bedrock model (or inference
  profile) must exist, be ACTIVE in the region and be enabled for the account (its
  Marketplace subscription and agreement), and the default model must be priced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from steward.domain.brake import Brake
from steward.domain.installations import Installation
from steward.domain.prices import PriceEntry, PriceTable
from steward.domain.webhooks import HANDLED, WebhookSecret

# GitHub delivers these to every App, subscribed or not (docs/guides/deploying.md, "The GitHub App").
ALWAYS_DELIVERED = frozenset({"installation", "installation_repositories"})
SUBSCRIBED_EVENTS = frozenset(HANDLED) - ALWAYS_DELIVERED
RECENT_DELIVERIES = 20


class ProbeFailed(Exception):
    """A read the probe could not make; the message is one sentence for the operator."""


class GitHubRefused(ProbeFailed):
    """GitHub answered a read with an error status (401: the App JWT was refused)."""

    def __init__(self, message: str, *, status: int | None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Result:
    check: str
    ok: bool
    detail: str
    remedy: str = ""

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Subnet:
    """A runner subnet and how it reaches the internet (the control plane's public endpoints)."""

    subnet_id: str
    nat: bool  # a default route to a NAT gateway (or instance)
    internet_gateway: bool  # a default route to an internet gateway (needs a public IP)


@dataclass(frozen=True)
class Runner:
    """Where runtimes run. `subnets` is empty for the local launcher (local processes)."""

    image: str
    image_found: bool
    subnets: tuple[Subnet, ...] = ()
    public_ip: bool = False
    local: bool = False


@dataclass(frozen=True)
class Relay:
    """The relay's answers to a capability minted now with the current key and to garbage."""

    minted_status: int
    garbage_status: int


class Probe(Protocol):
    """What the checks read. Every method may raise `ProbeFailed`."""

    local: bool

    def outputs(self) -> Mapping[str, str | None]:
        """Each output the checks need, None when the stack does not have it."""

    def anonymous_api_status(self) -> int:
        """The status of an unauthenticated `GET /v1/plans`."""

    def relay(self) -> Relay: ...

    def price_table(self) -> PriceTable:
        """The table the relay serves (ValueError when it does not load)."""

    def default_model(self) -> str | None:
        """The API's default model (None: a plan must name one)."""

    def model_problem(self, model_id: str, entry: PriceEntry) -> str | None:
        """Why the relay could not serve `model_id` (one sentence), or None."""

    def stored_webhook_secret(self) -> str | None:
        """The webhook secret the receiver verifies with, as stored (None or "": unset)."""

    def webhook_status(self, body: bytes, headers: Mapping[str, str]) -> int:
        """POST `body` to the webhook URL; the answer's status."""

    def webhook_url(self) -> str | None: ...

    def github(self, path: str, params: Mapping[str, str | int] | None = None) -> object:
        """The JSON of a GitHub App route read with the App JWT (`GitHubRefused`)."""

    def linked_installations(self) -> list[Installation]:
        """Installations linked to a user (`steward admin link-installation`)."""

    def active_plans(self) -> list[tuple[str, str | None]]:
        """(user, model named in its front matter) of each plan the loop acts on
        (confirmed or in progress)."""

    def runner(self) -> Runner: ...

    def schedules(self) -> Mapping[str, str]:
        """Each schedule of the loop and its state (ENABLED, DISABLED)."""

    def brake(self) -> Brake: ...

    def alarms_in_alarm(self) -> list[str]: ...


@dataclass
class _Shared:
    """Reads several checks use, made once per run."""

    app: object = None
    app_error: GitHubRefused | None = None
    seen: dict[str, object] = field(default_factory=dict)


def _ok(name: str, detail: str) -> Result:
    return Result(name, True, detail)


def _fail(name: str, detail: str, remedy: str) -> Result:
    return Result(name, False, detail, remedy)


# -- the checks ------------------------------------------------------------------------------

REQUIRED_OUTPUTS = (
    "ApiUrl",
    "RelayUrl",
    "WebhookUrl",
    "GitHubPrivateKeySecret",
    "WebhookSecretArn",
    "TablePrefix",
)


def check_outputs(probe: Probe, name: str) -> Result:
    outputs = probe.outputs()
    missing = [key for key, value in outputs.items() if not value]
    if missing:
        return _fail(
            name,
            f"missing: {', '.join(missing)}",
            "deploy the stack again (`make deploy`) or point --stack at the Steward stack"
            if not probe.local
            else "restart the local stack (`steward local up`): its state file is incomplete",
        )
    return _ok(name, f"{len(outputs)} present")


def check_api(probe: Probe, name: str) -> Result:
    status = probe.anonymous_api_status()
    if status == 401:
        return _ok(name, "answers, and refuses an anonymous request (401)")
    return _fail(
        name,
        f"an anonymous GET /v1/plans answered {status}, not 401",
        "check the API's JWT authorizer (a deploy restores it) and that ApiUrl is this stack's API",
    )


def check_relay(probe: Probe, name: str) -> Result:
    relay = probe.relay()
    if relay.minted_status == 200 and relay.garbage_status == 401:
        return _ok(name, "accepts a capability signed with the current key (200) and refuses garbage (401)")
    if relay.minted_status != 200:
        return _fail(
            name,
            f"refused a capability signed with the current key ({relay.minted_status})",
            "give the relay the signing key's id first in STEWARD_CAPABILITY_KEY_ID (deploy again) "
            "and let it kms:GetPublicKey on it",
        )
    return _fail(
        name,
        f"answered a garbage capability with {relay.garbage_status}, not 401",
        "deploy the relay again: it must verify every capability",
    )


def check_models(probe: Probe, name: str) -> Result:
    try:
        table = probe.price_table()
    except ValueError as exc:
        return _fail(
            name, f"the price table does not load: {exc}", "fix STEWARD_PRICE_TABLE (the priceTable context)"
        )
    # The models work may use now: the default, and each model an active plan names.
    in_use = {model for _, model in probe.active_plans() if model}
    default = probe.default_model()
    if default is not None:
        in_use.add(default)
    problems = [f"{model!r} is used but not priced" for model in sorted(in_use - set(table.models))]
    idle: list[str] = []
    skipped: list[str] = []
    for model_id, entry in sorted(table.models.items()):
        if probe.local and entry.provider == "bedrock":
            skipped.append(model_id)
            continue
        problem = probe.model_problem(model_id, entry)
        if not problem:
            continue
        # The packaged table prices a model of a server a developer may run on their own
        # machine (Ollama): an OpenAI-compatible model nothing uses is noted, not a failure.
        # Every priced Bedrock model must be usable: that is what the relay's role grants.
        if entry.provider != "bedrock" and model_id not in in_use:
            idle.append(model_id)
        else:
            problems.append(f"{model_id}: {problem}")
    if problems:
        return _fail(
            name,
            "; ".join(problems),
            "price every model in use and make each priced model reachable "
            "(Bedrock: model access in the region; OpenAI-compatible: its base_url must answer)",
        )
    served = len(table.models) - len(skipped) - len(idle)
    notes = [f"unused and not answering: {', '.join(idle)}"] if idle else []
    notes += [f"Bedrock models not checked locally: {len(skipped)}"] if skipped else []
    note = f" ({'; '.join(notes)})" if notes else ""
    return _ok(name, f"price table {table.version} loads; {served} models servable{note}")


def check_webhook_url(probe: Probe, name: str) -> Result:
    status = probe.webhook_status(b"{}", {"Content-Type": "application/json", "X-GitHub-Event": "ping"})
    if status == 401:
        return _ok(name, "answers, and refuses an unsigned delivery (401)")
    return _fail(
        name,
        f"an unsigned delivery answered {status}, not 401",
        "point WebhookUrl at the webhook function's URL (deploy again)",
    )


def ping_delivery(secret: str) -> tuple[bytes, dict[str, str]]:
    """A `ping` as GitHub sends it when a hook is set up, signed with `secret` as the
    receiver verifies it (`WebhookSecret.sign`)."""
    import uuid  # noqa: PLC0415 - this one use

    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 0}, separators=(",", ":")).encode()
    signature = WebhookSecret(secret).sign(body)
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": signature,
    }
    return body, headers


def check_webhook_secret(probe: Probe, name: str, shared: _Shared) -> Result:
    secret = probe.stored_webhook_secret()
    if not secret:
        return _fail(
            name,
            "the webhook secret is not set",
            "restart the local stack: its state file lacks webhook_secret"
            if probe.local
            else "put a value in the secret WebhookSecretArn and the same one in the GitHub App's webhook settings",
        )
    status = probe.webhook_status(*ping_delivery(secret))
    if status != 200:
        return _fail(
            name,
            f"the receiver refused a ping signed with the stored secret ({status})",
            "give the webhook function the stored secret (STEWARD_WEBHOOK_SECRET_ID; deploy again)",
        )
    config = _app_read(probe, shared, "/app/hook/config")
    if isinstance(config, Mapping) and not config.get("secret"):
        return _fail(
            name,
            "the GitHub App's webhook has no secret: GitHub sends unsigned deliveries, which are refused",
            "set the App's webhook secret to the value of the secret WebhookSecretArn",
        )
    return _ok(name, "set; the receiver accepts a ping signed with it and the App's webhook has one")


def _app_read(probe: Probe, shared: _Shared, path: str) -> object:
    if path not in shared.seen:
        shared.seen[path] = probe.github(path)
    return shared.seen[path]


def _app(probe: Probe, shared: _Shared) -> object:
    if shared.app is None and shared.app_error is None:
        try:
            shared.app = probe.github("/app")
        except GitHubRefused as exc:
            shared.app_error = exc
    if shared.app_error is not None:
        raise shared.app_error
    return shared.app


def check_app_key(probe: Probe, name: str, shared: _Shared) -> Result:
    try:
        app = _app(probe, shared)
    except GitHubRefused as exc:
        if exc.status == 401:
            return _fail(
                name,
                "GitHub refused the App JWT (401): the stored private key is not one of the App's",
                "restart the local stack: the twin's App key changed"
                if probe.local
                else "generate a private key in the App's settings and store it in the secret GitHubPrivateKeySecret",
            )
        raise
    slug = app.get("slug") if isinstance(app, Mapping) else None
    return _ok(name, f"the App JWT is accepted (App {slug or '?'})")


def check_app_webhook(probe: Probe, name: str, shared: _Shared) -> Result:
    config = _app_read(probe, shared, "/app/hook/config")
    url = str(config.get("url") or "") if isinstance(config, Mapping) else ""
    expected = probe.webhook_url() or ""
    if url.rstrip("/") != expected.rstrip("/"):
        return _fail(
            name,
            f"the App delivers to {url or 'nowhere'}, not {expected}",
            "set the App's webhook URL to the stack's WebhookUrl output",
        )
    if isinstance(config, Mapping) and config.get("content_type") not in (None, "json"):
        return _fail(
            name,
            f"the App's webhook sends {config.get('content_type')}, not json",
            "set the App's webhook content type to application/json",
        )
    return _ok(name, f"the App delivers to {url}")


def check_app_events(probe: Probe, name: str, shared: _Shared) -> Result:
    app = _app(probe, shared)
    events = app.get("events") if isinstance(app, Mapping) else None
    have = {str(e) for e in events} if isinstance(events, list) else set()
    missing = sorted(SUBSCRIBED_EVENTS - have)
    if missing:
        return _fail(
            name,
            f"the App does not subscribe to {', '.join(missing)}",
            "subscribe the App to every event Steward processes (docs/guides/deploying.md: The GitHub App)",
        )
    return _ok(name, f"subscribes to the {len(SUBSCRIBED_EVENTS)} events Steward processes")


def check_app_deliveries(probe: Probe, name: str, shared: _Shared) -> Result:
    listing = probe.github("/app/hook/deliveries", {"per_page": RECENT_DELIVERIES})
    items = [d for d in listing if isinstance(d, Mapping)] if isinstance(listing, list) else []
    if not items:
        return _ok(name, "no deliveries yet")
    succeeded = {str(d.get("guid")) for d in items if _delivered(d)}
    failed = [d for d in items if not _delivered(d) and str(d.get("guid")) not in succeeded]
    if failed:
        codes = sorted({str(d.get("status_code")) for d in failed})
        return _fail(
            name,
            f"{len(failed)} of the last {len(items)} deliveries failed (status {', '.join(codes)})",
            "fix what the other webhook checks report, then redeliver the failed ones from the App's "
            "Advanced settings (the loop's resync catches up meanwhile)",
        )
    return _ok(name, f"{len(items)} recent deliveries, all succeeded")


def _delivered(delivery: Mapping[str, object]) -> bool:
    code = delivery.get("status_code")
    return isinstance(code, int) and 200 <= code < 300


def check_installations(probe: Probe, name: str, shared: _Shared) -> Result:
    linked = probe.linked_installations()
    problems: list[str] = []
    for installation in linked:
        try:
            found = probe.github(f"/app/installations/{installation.installation_id}")
        except GitHubRefused as exc:
            if exc.status != 404:
                raise
            problems.append(f"{installation.installation_id} ({installation.owner_sub}) is not installed")
            continue
        if isinstance(found, Mapping) and found.get("suspended_at"):
            problems.append(f"{installation.installation_id} ({installation.owner_sub}) is suspended")
    if problems:
        return _fail(
            name,
            "; ".join(problems),
            "install (or unsuspend) the App on the account, then `steward admin link-installation ID --owner SUB`",
        )
    return _ok(name, f"{len(linked)} linked, each installed and live")


def check_plan_installations(probe: Probe, name: str) -> Result:
    users = {user for user, _ in probe.active_plans()}
    owners = {i.owner_sub for i in probe.linked_installations() if not i.suspended}
    missing = sorted(users - owners)
    if missing:
        return _fail(
            name,
            f"active plans but no live installation linked: {', '.join(missing)}",
            "link an installation holding the plan's repository: `steward admin link-installation ID --owner SUB`",
        )
    return _ok(name, f"{len(users)} users with active plans, each with an installation")


def check_runner_image(probe: Probe, name: str) -> Result:
    runner = probe.runner()
    if runner.image_found:
        return _ok(name, runner.image)
    return _fail(
        name,
        f"{runner.image} not found",
        "install bubblewrap (`apt-get install bubblewrap`)"
        if runner.local
        else "deploy again (`make deploy` builds and pushes the runner image)",
    )


def check_runner_network(probe: Probe, name: str) -> Result:
    runner = probe.runner()
    if runner.local:
        return _ok(name, "runtimes run on this machine and reach the stack over loopback")
    if not runner.subnets:
        return _fail(
            name, "the heartbeat names no runner subnets", "deploy again: STEWARD_RUNNER_SUBNETS is empty"
        )
    stranded = [
        s.subnet_id for s in runner.subnets if not (s.nat or (s.internet_gateway and runner.public_ip))
    ]
    if stranded:
        why = "an internet gateway but no public IP" if runner.public_ip is False else "no route out"
        return _fail(
            name,
            f"subnets without a way to the control plane: {', '.join(stranded)} ({why})",
            "deploy with runnerNetwork private (a NAT gateway) or public (a public IP per task)",
        )
    how = "a public IP" if runner.public_ip else "a NAT gateway"
    return _ok(name, f"{len(runner.subnets)} subnets reach the control plane through {how}")


def check_schedules(probe: Probe, name: str) -> Result:
    schedules = probe.schedules()
    if not schedules:
        return _fail(
            name, "no schedule found", "deploy again: the scheduler and reaper schedules are missing"
        )
    off = sorted(n for n, state in schedules.items() if state != "ENABLED")
    if off:
        return _fail(
            name,
            f"not enabled: {', '.join(off)}",
            "enable them: `aws scheduler update-schedule` with --state ENABLED (or deploy again)",
        )
    return _ok(name, f"{len(schedules)} enabled")


def check_brake(probe: Probe, name: str) -> Result:
    brake = probe.brake()
    if brake.engaged:
        return _fail(
            name,
            f"engaged: {brake.describe()}",
            "release it when the reason is dealt with: `steward admin brake off`",
        )
    return _ok(name, "off")


def check_alarms(probe: Probe, name: str) -> Result:
    alarms = probe.alarms_in_alarm()
    if alarms:
        return _fail(
            name,
            f"in ALARM: {', '.join(sorted(alarms))}",
            "look at the alarms' metrics on the Steward dashboard and the functions' logs",
        )
    return _ok(name, "none in ALARM")


def _plain(check: Callable[[Probe, str], Result]) -> Callable[[Probe, str, _Shared], Result]:
    return lambda probe, name, _shared: check(probe, name)


SharedCheck = Callable[[Probe, str, _Shared], Result]

# (name, check, remedy when a read it needs fails), in the order they run and print.
CHECKS: tuple[tuple[str, SharedCheck, str], ...] = (
    ("outputs", _plain(check_outputs), "check --stack and --region name the Steward stack"),
    ("api", _plain(check_api), "check ApiUrl answers (the API Gateway stage and its function)"),
    (
        "relay",
        _plain(check_relay),
        "check RelayUrl answers and the operator may kms:Sign with the capability key",
    ),
    ("models", _plain(check_models), "check the operator may read Bedrock's models in the region"),
    ("webhook_url", _plain(check_webhook_url), "check WebhookUrl answers (the webhook function's URL)"),
    ("webhook_secret", check_webhook_secret, "check the operator may read the secret WebhookSecretArn"),
    ("app_key", check_app_key, "check the GitHub App id and the secret GitHubPrivateKeySecret"),
    ("app_webhook", check_app_webhook, "check the App's id and that GitHub's API answers"),
    ("app_events", check_app_events, "check the App's id and that GitHub's API answers"),
    ("app_deliveries", check_app_deliveries, "check the App's id and that GitHub's API answers"),
    (
        "installations",
        check_installations,
        "check the installations table is readable and GitHub's API answers",
    ),
    (
        "plan_installations",
        _plain(check_plan_installations),
        "check the plans and installations tables are readable",
    ),
    (
        "runner_image",
        _plain(check_runner_image),
        "check the operator may read the task definition and its image",
    ),
    ("runner_network", _plain(check_runner_network), "check the operator may describe the runner's subnets"),
    ("schedules", _plain(check_schedules), "check the operator may read the loop's schedules"),
    ("brake", _plain(check_brake), "check the controls table is readable (TablePrefix)"),
    ("alarms", _plain(check_alarms), "check the operator may describe CloudWatch alarms"),
)
CHECK_NAMES = tuple(name for name, _, _ in CHECKS)


def run_checks(
    probe: Probe, on_result: Callable[[Result], None] | None = None, *, only: Iterable[str] | None = None
) -> list[Result]:
    """Every check (or those named in `only`) in order; each result goes to `on_result` as
    it completes. Never raises for a check: a failed read is that check's FAIL."""
    wanted = set(only) if only is not None else None
    shared = _Shared()
    results: list[Result] = []
    for name, check, remedy in CHECKS:
        if wanted is not None and name not in wanted:
            continue
        try:
            result = check(probe, name, shared)
        except GitHubRefused as exc:
            if exc.status == 401 and name != "app_key":
                detail = f"not checked: GitHub refused the App JWT ({exc})"
                result = _fail(name, detail, "repair app_key first: every App read is signed with its key")
            else:
                result = _fail(name, str(exc), remedy)
        except ProbeFailed as exc:
            result = _fail(name, str(exc), remedy)
        except Exception as exc:  # a check must never hide the ones after it
            result = _fail(name, f"unexpected {type(exc).__name__}: {str(exc)[:300]}", remedy)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def exit_code(results: Sequence[Result]) -> int:
    """1 when any check failed, else 0."""
    return 0 if all(r.ok for r in results) else 1
