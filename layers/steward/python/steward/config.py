"""Deployment settings: every `STEWARD_*` variable a Lambda function reads, in one list.

`SETTINGS` names each variable, the functions that read it and whether a deployment must
set it; the CDK app gives each function exactly its variables from this list, and the
settings page (docs/reference/settings.md) is generated from it. `Settings.from_env` is the one parser:
it reads the environment once (the composition root, `steward.wiring`, calls it) and
answers a clear `ValueError` naming the variable for a malformed value. Required variables
have local defaults where the local stack can supply one; `Settings.require` names a
missing one when the part that needs it is built.

The runtime (`steward.runner`) is not a Lambda function: its own variables are read by
`steward.runner.config`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from steward.domain.documents import DocumentPolicy

Function = Literal["api", "scheduler", "heartbeat", "reaper", "relay", "webhook", "runtime"]
FUNCTIONS: tuple[Function, ...] = ("api", "scheduler", "heartbeat", "reaper", "relay", "webhook", "runtime")
ALL: frozenset[Function] = frozenset(FUNCTIONS)
LAUNCHING: frozenset[Function] = frozenset({"heartbeat", "reaper"})


@dataclass(frozen=True)
class Setting:
    """One environment variable: who reads it, whether a deployment must set it, and (as
    `Settings` field `attr`) how it is parsed. `secret` values are never logged or shown."""

    env: str
    attr: str
    functions: frozenset[Function]
    required: bool
    doc: str
    secret: bool = False


def _decimal_usd(name: str, raw: str) -> Decimal:
    try:
        value = Decimal(raw)
    except InvalidOperation as exc:
        raise ValueError(f"{name} must be a decimal number, got {raw!r}") from exc
    if not value.is_finite() or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {raw!r}")
    return value


def _optional_usd(name: str, raw: str) -> Decimal | None:
    return _decimal_usd(name, raw) if raw else None


def _positive_int(name: str, raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name} must be a positive integer, got {raw!r}")
    return int(raw)


def _optional_int(name: str, raw: str) -> int | None:
    return _positive_int(name, raw) if raw else None


def _csv(_: str, raw: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in raw.split(",") if v.strip())


def _text(_: str, raw: str) -> str:
    return raw


def _default_model(_: str, raw: str) -> str | None:
    return None if raw == "none" else raw


def _yes_no(name: str, raw: str) -> bool:
    if raw not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, got {raw!r}")
    return raw == "true"


def _optional(_: str, raw: str) -> str | None:
    return raw or None


def _launcher(name: str, raw: str) -> str:
    if raw not in ("fargate", "local"):
        raise ValueError(f"{name} must be 'fargate' or 'local', got {raw!r}")
    return raw


def _lifetime(name: str, raw: str) -> int:
    value = _positive_int(name, raw)
    if value > 7200:
        raise ValueError(f"{name} must be at most 7200 seconds (a capability lives at most 2 h), got {raw!r}")
    return value


def _non_negative_float(name: str, raw: str) -> float | None:
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from exc
    if not value >= 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {raw!r}")
    return value


def _price_table(name: str, raw: str) -> str | None:
    """The value as given, once the table it names (a file, or inline JSON) reads and
    validates: a bad table fails at start with the variable named, not at a model call."""
    if not raw:
        return None
    from steward.adapters.price_file import load_price_table  # noqa: PLC0415 - only when set

    try:
        load_price_table(raw)
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if name in message else f"{name}: {message}") from None
    return raw


SIGN_IN_KINDS = ("oidc", "local", "none")


def _sign_in(name: str, raw: str) -> str:
    if raw not in SIGN_IN_KINDS:
        raise ValueError(f"{name} must be one of {', '.join(SIGN_IN_KINDS)}, got {raw!r}")
    return raw


_PARSERS: dict[str, Callable[[str, str], Any]] = {}


def _setting(
    env: str,
    attr: str,
    functions: frozenset[Function] | set[Function],
    *,
    required: bool = False,
    parse: Callable[[str, str], Any] = _optional,
    doc: str,
    secret: bool = False,
) -> Setting:
    _PARSERS[attr] = parse
    return Setting(env, attr, frozenset(functions), required, doc, secret)


SETTINGS: tuple[Setting, ...] = (
    _setting(
        "STEWARD_TABLE_PREFIX",
        "table_prefix",
        ALL,
        required=True,
        parse=_text,
        doc="name prefix of the DynamoDB tables",
    ),
    _setting(
        "STEWARD_ARTIFACTS_BUCKET",
        "artifacts_bucket",
        {"api", "runtime"},
        required=True,
        parse=_text,
        doc="S3 bucket of the runs' artifacts",
    ),
    _setting(
        "STEWARD_MAX_BUDGET_USD",
        "max_budget_usd",
        {"api"},
        parse=_decimal_usd,
        doc="largest budget_usd a plan may ask for per task",
    ),
    _setting(
        "STEWARD_DEFAULT_BUDGET_USD",
        "default_budget_usd",
        {"api"},
        parse=_decimal_usd,
        doc="budget_usd of a plan that names none",
    ),
    _setting(
        "STEWARD_DEFAULT_MODEL",
        "default_model",
        {"api"},
        parse=_default_model,
        doc="model of a plan that names none; `none`: a plan must name its model (a deployment "
        "without a `defaultModel` context)",
    ),
    _setting(
        "STEWARD_QUEUE_PREFIX",
        "queue_prefix",
        {"scheduler", "api", "webhook"},
        doc="name prefix of the heartbeat queue (default: the table prefix)",
    ),
    _setting(
        "STEWARD_TICK_SECONDS",
        "tick_seconds",
        {"scheduler"},
        parse=_positive_int,
        doc="the scheduler's tick window, normally its schedule's rate",
    ),
    _setting(
        "STEWARD_CAPABILITY_KEY_ID",
        "capability_key_ids",
        {"relay", "runtime"},
        required=True,
        parse=_csv,
        doc="KMS key id(s) of capabilities, comma-separated: the first signs, all verify (rotation)",
    ),
    _setting(
        "STEWARD_CAPABILITY_LIFETIME",
        "capability_lifetime",
        {"runtime"},
        parse=_lifetime,
        doc="capability lifetime in seconds (at most 7200)",
    ),
    _setting(
        "STEWARD_PRICE_TABLE",
        "price_table",
        {"relay", "runtime", "api"},
        parse=_price_table,
        doc="your own price table extending the packaged one: a JSON file's path, or the JSON itself "
        "(the CDK app's `priceTable` context); the API's publish checks read it too",
    ),
    _setting(
        "STEWARD_BEDROCK_ENDPOINT_URL",
        "bedrock_endpoint_url",
        {"relay"},
        doc="Bedrock Runtime endpoint (unset: the region's)",
    ),
    _setting(
        "STEWARD_BEDROCK_READ_TIMEOUT_SECONDS",
        "bedrock_read_timeout_seconds",
        {"relay"},
        parse=_positive_int,
        doc="how long a Bedrock call may take to answer, under the relay's own timeout (the CDK "
        "app sets four fifths of `relayTimeoutSeconds`; default 240)",
    ),
    _setting(
        "STEWARD_SCRIPTED_PLAYBOOK",
        "scripted_playbook",
        {"relay"},
        doc="playbook file of the scripted model (unset: the packaged one)",
    ),
    _setting(
        "STEWARD_SCRIPTED_SLOW_SECONDS",
        "scripted_slow_seconds",
        {"relay"},
        parse=_non_negative_float,
        doc="delay of the scripted 'slow' policy",
    ),
    _setting(
        "STEWARD_GITHUB_APP_ID",
        "github_app_id",
        {"runtime", "heartbeat", "webhook"},
        required=True,
        parse=_optional_int,
        doc="the GitHub App's numeric id",
    ),
    _setting(
        "STEWARD_GITHUB_PRIVATE_KEY_SECRET_ID",
        "github_private_key_secret_id",
        {"runtime", "heartbeat", "webhook"},
        required=True,
        doc="Secrets Manager secret holding the App's private key (PEM)",
    ),
    _setting(
        "STEWARD_GITHUB_PRIVATE_KEY",
        "github_private_key",
        {"runtime", "heartbeat", "webhook"},
        secret=True,
        doc="the App's private key itself (local stack; in AWS use the secret id)",
    ),
    _setting(
        "STEWARD_GITHUB_API_URL",
        "github_api_url",
        {"runtime", "heartbeat", "webhook"},
        doc="GitHub's REST API (unset: api.github.com; locally the twin)",
    ),
    _setting(
        "STEWARD_GITHUB_RESYNC_SECONDS",
        "github_resync_seconds",
        {"heartbeat"},
        parse=_positive_int,
        doc="how old a review task's last look at GitHub may get before the loop looks again",
    ),
    _setting(
        "STEWARD_SPEND_LIMIT_USD_PER_HOUR",
        "spend_limit_usd_per_hour",
        {"reaper"},
        parse=_optional_usd,
        doc="the spend-velocity breaker: when the relay's settled spend across all tasks in the last "
        "hour passes this, the reaper engages the global brake (unset: no breaker)",
    ),
    _setting(
        "STEWARD_GITHUB_RESYNC_MAX_CALLS",
        "github_resync_max_calls",
        {"heartbeat"},
        parse=_positive_int,
        doc="GitHub calls the loop's resync may make per user per tick",
    ),
    _setting(
        "STEWARD_GITHUB_APP_SLUG",
        "github_app_slug",
        {"webhook", "heartbeat"},
        parse=_text,
        doc="the GitHub App's slug: `@<slug>` in a pull request comment addresses Steward (default steward)",
    ),
    _setting(
        "STEWARD_WEBHOOK_SECRET_ID",
        "webhook_secret_id",
        {"webhook"},
        required=True,
        doc="Secrets Manager secret holding the webhook secret",
    ),
    _setting(
        "STEWARD_WEBHOOK_SECRET",
        "webhook_secret",
        {"webhook"},
        secret=True,
        doc="the webhook secret itself (local stack; in AWS use the secret id)",
    ),
    _setting(
        "STEWARD_LAUNCHER",
        "launcher",
        LAUNCHING,
        parse=_launcher,
        doc="'fargate' (AWS) or 'local' (runtimes as local processes)",
    ),
    _setting(
        "STEWARD_ECS_CLUSTER", "ecs_cluster", LAUNCHING, required=True, doc="ECS cluster the runtimes run in"
    ),
    _setting(
        "STEWARD_RUNNER_TASK_DEFINITION",
        "runner_task_definition",
        LAUNCHING,
        required=True,
        doc="task definition of the runtime",
    ),
    _setting(
        "STEWARD_RUNNER_CONTAINER",
        "runner_container",
        LAUNCHING,
        parse=_text,
        doc="the runtime's container name in its task definition",
    ),
    _setting(
        "STEWARD_RUNNER_SUBNETS",
        "runner_subnets",
        LAUNCHING,  # the reaper builds the same launcher (it stops runtimes)
        required=True,
        parse=_csv,
        doc="subnets of the runtime's tasks, comma-separated",
    ),
    _setting(
        "STEWARD_RUNNER_SECURITY_GROUPS",
        "runner_security_groups",
        LAUNCHING,
        required=True,
        parse=_csv,
        doc="security groups of the runtime's tasks, comma-separated",
    ),
    _setting(
        "STEWARD_RUNNER_PUBLIC_IP",
        "runner_public_ip",
        LAUNCHING,
        parse=_yes_no,
        doc="`true`: each runtime's task gets a public IP (its subnets are public: no NAT gateway)",
    ),
    _setting(
        "STEWARD_API_URL",
        "api_url",
        {"heartbeat"},
        required=True,
        parse=_text,
        doc="the control plane's URL, handed to each runtime",
    ),
    _setting(
        "STEWARD_RELAY_URL",
        "relay_url",
        {"heartbeat"},
        required=True,
        parse=_text,
        doc="the relay's URL, handed to each runtime",
    ),
    _setting(
        "STEWARD_CONSOLE_SIGN_IN",
        "console_sign_in",
        {"api"},
        parse=_sign_in,
        doc="how the web console signs people in: `oidc` (authorization code + PKCE), `local` "
        "(the local stack's login links) or `none`",
    ),
    _setting(
        "STEWARD_CONSOLE_CLIENT_ID",
        "console_client_id",
        {"api"},
        doc="the OIDC app client id of the web console (sign-in `oidc`)",
    ),
    _setting(
        "STEWARD_CONSOLE_AUTHORIZE_URL",
        "console_authorize_url",
        {"api"},
        doc="the OIDC authorization endpoint the console sends people to (sign-in `oidc`)",
    ),
    _setting(
        "STEWARD_CONSOLE_TOKEN_URL",
        "console_token_url",
        {"api"},
        doc="the OIDC token endpoint the console exchanges its code at (sign-in `oidc`)",
    ),
    _setting(
        "STEWARD_CONSOLE_URL",
        "console_url",
        {"heartbeat"},
        doc="the web console's address: the pull request's status comment links the task's page there",
    ),
    _setting(
        "STEWARD_RUNTIME_LOG_DIR",
        "runtime_log_dir",
        LAUNCHING,
        doc="local launcher only: directory of the runtimes' logs",
    ),
)

_DEFAULTS: dict[str, str] = {
    "STEWARD_TABLE_PREFIX": "steward-",
    "STEWARD_ARTIFACTS_BUCKET": "steward-artifacts",
    "STEWARD_MAX_BUDGET_USD": "10.00",
    "STEWARD_DEFAULT_BUDGET_USD": "2.00",
    "STEWARD_DEFAULT_MODEL": "scripted",
    "STEWARD_TICK_SECONDS": "60",
    "STEWARD_CAPABILITY_LIFETIME": "3600",
    "STEWARD_LAUNCHER": "fargate",
    "STEWARD_RUNNER_CONTAINER": "runner",
    "STEWARD_RUNNER_PUBLIC_IP": "false",
    "STEWARD_GITHUB_RESYNC_SECONDS": "900",
    "STEWARD_GITHUB_RESYNC_MAX_CALLS": "45",
    "STEWARD_GITHUB_APP_SLUG": "steward",
    "STEWARD_CONSOLE_SIGN_IN": "none",
    "STEWARD_BEDROCK_READ_TIMEOUT_SECONDS": "240",
}

# What the local launcher hands its runtimes besides their own four variables, as a Fargate
# task definition would carry them (docs/concepts/runner.md): the runner's bounds, never a setting
# of the control plane (STEWARD_RUNNER_SUBNETS and the like are the launcher's own).
RUNTIME_PASSED = ("STEWARD_STREAM_URL", "STEWARD_SANDBOX_UID", "STEWARD_WORK_DIR", "STEWARD_KEEP_WORK")
RUNTIME_PASSED_PREFIXES = ("STEWARD_RUNNER_", "STEWARD_CHECK_")


def is_runtime_setting(name: str) -> bool:
    """A variable the deployment hands every runtime (a runner bound), as opposed to one of
    the control plane's settings or anything else."""
    passed = name in RUNTIME_PASSED or name.startswith(RUNTIME_PASSED_PREFIXES)
    return passed and name not in {s.env for s in SETTINGS}


@dataclass(frozen=True)
class Settings:
    """The parsed settings (see `SETTINGS` for what each means). Secrets are kept out of repr."""

    table_prefix: str = "steward-"
    artifacts_bucket: str = "steward-artifacts"
    max_budget_usd: Decimal = Decimal("10.00")
    default_budget_usd: Decimal = Decimal("2.00")
    default_model: str | None = "scripted"
    queue_prefix: str | None = None
    tick_seconds: int = 60
    capability_key_ids: tuple[str, ...] = ()
    capability_lifetime: int = 3600
    price_table: str | None = None
    bedrock_endpoint_url: str | None = None
    bedrock_read_timeout_seconds: int = 240
    scripted_playbook: str | None = None
    scripted_slow_seconds: float | None = None
    github_app_id: int | None = None
    github_private_key_secret_id: str | None = None
    github_private_key: str | None = field(default=None, repr=False)
    github_api_url: str | None = None
    github_resync_seconds: int = 900
    github_resync_max_calls: int = 45
    github_app_slug: str = "steward"
    spend_limit_usd_per_hour: Decimal | None = None
    webhook_secret_id: str | None = None
    webhook_secret: str | None = field(default=None, repr=False)
    launcher: str = "fargate"
    ecs_cluster: str | None = None
    runner_task_definition: str | None = None
    runner_container: str = "runner"
    runner_subnets: tuple[str, ...] = ()
    runner_security_groups: tuple[str, ...] = ()
    runner_public_ip: bool = False
    api_url: str = ""
    relay_url: str = ""
    console_sign_in: str = "none"
    console_client_id: str | None = None
    console_authorize_url: str | None = None
    console_token_url: str | None = None
    console_url: str | None = None
    runtime_log_dir: str | None = None
    region: str | None = None
    runtime_env: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Parse every setting; ValueError naming the variable for a malformed one."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for setting in SETTINGS:
            raw = env.get(setting.env, "").strip() or _DEFAULTS.get(setting.env, "")
            values[setting.attr] = _PARSERS[setting.attr](setting.env, raw)
        # The runtime's bounds pass through unparsed: the runtime validates its own settings.
        passed = sorted((k, v) for k, v in env.items() if is_runtime_setting(k))
        settings = cls(
            **values,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            runtime_env=tuple(passed),
        )
        if settings.default_budget_usd > settings.max_budget_usd:
            raise ValueError("STEWARD_DEFAULT_BUDGET_USD exceeds STEWARD_MAX_BUDGET_USD")
        return settings

    def require(self, attr: str) -> Any:
        """The value of `attr`; RuntimeError naming its variable when it is not set."""
        value = getattr(self, attr)
        if value in (None, "", ()):
            env = next(s.env for s in SETTINGS if s.attr == attr)
            raise RuntimeError(f"{env} is not set")
        return value

    @property
    def document_policy(self) -> DocumentPolicy:
        # Imported here: only the API parses documents, and the parser's import is heavy.
        from steward.domain.documents import DocumentPolicy  # noqa: PLC0415

        return DocumentPolicy(
            max_budget_usd=self.max_budget_usd,
            default_budget_usd=self.default_budget_usd,
            default_model=self.default_model,
        )

    @property
    def heartbeat_queue_prefix(self) -> str:
        return self.queue_prefix or self.table_prefix


def settings_for(function: Function) -> tuple[Setting, ...]:
    """The variables `function` reads (the CDK app sets exactly these)."""
    return tuple(s for s in SETTINGS if function in s.functions)
