"""What `steward doctor` reads (`steward.domain.doctor.Probe`), from a deployment or from
the local stack. Reads only: nothing here changes the stack (the one write is a
capability signed for the relay check, which names no task and lives a minute).

`aws_deployment(stack, region)`: the operator's credentials (boto3's default chain), the
stack's CloudFormation outputs and parameters, and its resources (the functions'
environments name the capability key, the runner's task definition and network, the price
table and the default model). The operator's IAM actions: cloudformation:DescribeStacks and
ListStackResources; lambda:GetFunctionConfiguration (the api, relay, runtime and heartbeat
functions); kms:Sign on the capability key; secretsmanager:GetSecretValue on the two
secrets; dynamodb:GetItem on the controls table and Scan on the plans and installations
tables; bedrock:GetFoundationModel and GetInferenceProfile; ecs:DescribeTaskDefinition;
ecr:DescribeImages; ec2:DescribeSubnets and DescribeRouteTables; scheduler:GetSchedule;
cloudwatch:DescribeAlarms. A denied action fails the checks that need it, naming it.

`local_deployment(state_file)`: the running local stack, through the same calls against its
moto server, its GitHub twin and its relay process.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from botocore.exceptions import BotoCoreError, ClientError

from steward.adapters import aws
from steward.adapters.brake_store import BrakeStore
from steward.adapters.capability_signer import KmsCapabilitySigner
from steward.adapters.dynamo import Tables
from steward.adapters.github import GitHubApp, GitHubError
from steward.adapters.installation_store import _to_installation
from steward.adapters.operator_aws import AwsFailure, AwsNotConfigured
from steward.adapters.price_file import load_price_table
from steward.config import Settings
from steward.domain.brake import Brake
from steward.domain.capability import capability_claims
from steward.domain.doctor import REQUIRED_OUTPUTS, GitHubRefused, ProbeFailed, Relay, Runner, Subnet
from steward.domain.installations import Installation
from steward.domain.models import PlanStatus, utcnow
from steward.domain.prices import PriceEntry, PriceTable
from steward.tables import INSTALLATIONS, PLANS

HTTP_TIMEOUT = 10.0
# A capability minted for the relay check: no task has this id, so it admits no model call.
DOCTOR_TASK_ID = "t" + "0" * 24
DOCTOR_SUB = "steward-doctor"
ACTIVE_PLAN_STATUSES = (PlanStatus.CONFIRMED.value, PlanStatus.IN_PROGRESS.value)
# What the local stack's state file must hold for the checks (docs/getting-started/local-stack.md).
LOCAL_KEYS = (
    "api_url",
    "relay_http_url",
    "webhook_url",
    "github_url",
    "aws_endpoint_url",
    "table_prefix",
    "capability_key_id",
    "github_app_id",
    "github_private_key_secret",
)
_PROFILE_PREFIXES = ("us.", "eu.", "apac.", "global.", "jp.", "au.", "ca.", "us-gov.")


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    """botocore's and httpx's failures as one ProbeFailed sentence naming `what`."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise ProbeFailed(
            f"cannot read {what}: {error.get('Code', 'error')}: {error.get('Message', '')}"
        ) from None
    except BotoCoreError as exc:
        raise ProbeFailed(f"cannot read {what}: {exc}") from None
    except httpx.HTTPError as exc:
        raise ProbeFailed(f"{what} does not answer ({type(exc).__name__})") from None


class Deployment:
    """A deployment's or the local stack's reads. `settings` holds what the checks need:
    URLs, the App id, the secrets' ids, the capability key id, the table prefix; a value
    that is a callable is resolved on first use (reading it may fail: that check FAILs)."""

    def __init__(
        self,
        *,
        local: bool,
        outputs: Mapping[str, str | None],
        urls: Mapping[str, str | None],
        client_kwargs: Mapping[str, Any],
        settings: Mapping[str, Any],
    ) -> None:
        self.local = local
        self._outputs = dict(outputs)
        self._urls = dict(urls)
        self._client_kwargs = dict(client_kwargs)
        self._settings = dict(settings)
        # The local stack is on loopback: a proxy from the environment must not see it.
        self._http = httpx.Client(timeout=HTTP_TIMEOUT, trust_env=not local, follow_redirects=False)
        self._clients: dict[str, Any] = {}
        self._github: GitHubApp | None = None

    def close(self) -> None:
        self._http.close()
        if self._github is not None:
            self._github.close()

    # -- plumbing ------------------------------------------------------------------------

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = aws.client(service, **self._client_kwargs)
        return self._clients[service]

    def setting(self, key: str) -> Any:
        value = self._settings.get(key)
        if callable(value):
            value = value()
            self._settings[key] = value
        return value

    def _required(self, key: str, what: str) -> str:
        value = self.setting(key)
        if not value:
            raise ProbeFailed(f"{what} is not known")
        return str(value)

    def _tables(self) -> Tables:
        return Tables.connect(self._required("table_prefix", "the table prefix"), **self._client_kwargs)

    # -- outputs and endpoints --------------------------------------------------------------

    def outputs(self) -> Mapping[str, str | None]:
        return self._outputs

    def _url(self, key: str) -> str:
        value = self._urls.get(key)
        if not value:
            raise ProbeFailed(f"the {key} URL is not known")
        return value

    def anonymous_api_status(self) -> int:
        url = self._url("api").rstrip("/") + "/v1/plans"
        with _reading("the API"):
            return self._http.get(url).status_code

    def relay(self) -> Relay:
        key_id = self._required("capability_key_id", "the capability key id")
        claims = capability_claims(
            sub=DOCTOR_SUB,
            task_id=DOCTOR_TASK_ID,
            model_id="scripted",  # `GET /v1/models` verifies the capability, whatever its model
            max_budget_usd=Decimal("0.01"),
            now=utcnow(),
            lifetime_seconds=60,
        )
        with _reading("the capability signing key"):
            minted = KmsCapabilitySigner(self._client("kms"), key_id).mint(claims)
        url = self._url("relay").rstrip("/") + "/v1/models"
        with _reading("the relay"):
            good = self._http.get(url, headers={"Authorization": f"Bearer {minted}"}).status_code
            garbage = self._http.get(url, headers={"Authorization": "Bearer not.a.capability"}).status_code
        return Relay(good, garbage)

    # -- models -----------------------------------------------------------------------------

    def price_table(self) -> PriceTable:
        return load_price_table(self.setting("price_table"))

    def default_model(self) -> str | None:
        value = self.setting("default_model")
        return None if value in (None, "", "none") else str(value)

    def model_problem(self, model_id: str, entry: PriceEntry) -> str | None:
        if entry.provider == "scripted":
            return None
        if entry.provider == "openai":
            url = (entry.base_url or "").rstrip("/") + "/models"
            try:
                status = self._http.get(url).status_code
            except httpx.HTTPError as exc:
                return f"its base_url does not answer ({type(exc).__name__})"
            return f"its base_url answered {status}" if status >= 500 else None
        return self._bedrock_problem(entry.provider_model_for(model_id))

    def _bedrock_problem(self, model: str) -> str | None:
        try:
            return self._bedrock_state(model)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "error")
            if code in ("ResourceNotFoundException", "ValidationException"):
                return "not offered by Bedrock in this region"
            if code == "AccessDeniedException":
                return "access denied (let the operator bedrock:GetFoundationModel and GetInferenceProfile)"
            return f"Bedrock answered {code}"
        except BotoCoreError as exc:
            return f"Bedrock does not answer ({type(exc).__name__})"

    def _bedrock_state(self, model: str) -> str | None:
        """Why `model` (a model id or a cross-region inference profile id) cannot take
        on-demand calls in the region, or None."""
        bedrock = self._client("bedrock")
        if model.startswith(_PROFILE_PREFIXES):
            status = bedrock.get_inference_profile(inferenceProfileIdentifier=model).get("status")
            if status not in (None, "ACTIVE"):
                return f"its inference profile is {status}"
            return self._access_problem(model.split(".", 1)[1])
        details = bedrock.get_foundation_model(modelIdentifier=model).get("modelDetails", {})
        lifecycle = (details.get("modelLifecycle") or {}).get("status")
        if lifecycle not in (None, "ACTIVE"):
            return f"the model is {lifecycle}"
        kinds = details.get("inferenceTypesSupported") or []
        if kinds and "ON_DEMAND" not in kinds:
            return "no on-demand use: price an inference profile id instead (us., eu., ...)"
        return self._access_problem(model)

    def _access_problem(self, model: str) -> str | None:
        """Why this account may not call `model` yet: a third-party model's first call
        subscribes the account in AWS Marketplace (and Anthropic's ask a use-case form), which
        the relay's role may not do (it holds no Marketplace action): the operator enables it
        once, in the Bedrock console's model catalogue."""
        found = self._client("bedrock").get_foundation_model_availability(modelId=model)
        states = {
            "authorization": found.get("authorizationStatus"),
            "entitlement": found.get("entitlementAvailability"),
            "agreement": (found.get("agreementAvailability") or {}).get("status"),
            "region": found.get("regionAvailability"),
        }
        missing = [
            f"{name} {state}"
            for name, state in states.items()
            if state not in (None, "AUTHORIZED", "AVAILABLE", "NOT_REQUIRED")
        ]
        if missing:
            return (
                "not enabled for this account (" + ", ".join(missing) + "): enable it in the Bedrock console"
            )
        return None

    # -- webhook ----------------------------------------------------------------------------

    def webhook_url(self) -> str | None:
        return self._urls.get("webhook")

    def webhook_status(self, body: bytes, headers: Mapping[str, str]) -> int:
        with _reading("the webhook URL"):
            return self._http.post(self._url("webhook"), content=body, headers=dict(headers)).status_code

    def stored_webhook_secret(self) -> str | None:
        value = self.setting("webhook_secret")
        return str(value) if value else None

    def _secret(self, secret_id: str, what: str) -> str | None:
        with _reading(what):
            try:
                return str(
                    self._client("secretsmanager").get_secret_value(SecretId=secret_id).get("SecretString")
                    or ""
                )
            except ClientError as exc:
                # A secret created without a value has no version yet: unset, not unreadable.
                if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    return None
                raise

    # -- GitHub -----------------------------------------------------------------------------

    def github(self, path: str, params: Mapping[str, str | int] | None = None) -> object:
        if self._github is None:
            app_id = self.setting("github_app_id")
            if not app_id:
                raise ProbeFailed("the GitHub App id is not set (stack parameter GitHubAppId)")
            key = self._secret(
                self._required("github_private_key_secret", "the App key's secret"), "the App's private key"
            )
            if not key:
                raise ProbeFailed("the App's private key is not stored (secret GitHubPrivateKeySecret)")
            self._github = GitHubApp(
                int(app_id),
                key,
                base_url=self.setting("github_api_url"),
                max_attempts=2,
                timeout=HTTP_TIMEOUT,
            )
        try:
            return self._github.app_get(path, params)
        except GitHubError as exc:
            raise GitHubRefused(str(exc), status=exc.upstream_status) from None
        except ValueError as exc:  # a key that is no PEM at all
            raise GitHubRefused(f"the App's private key is unusable ({exc})", status=401) from None

    # -- tables -----------------------------------------------------------------------------

    def _scan(self, spec: Any, what: str, **kwargs: Any) -> list[dict[str, Any]]:
        table = self._tables().table(spec)
        items: list[dict[str, Any]] = []
        with _reading(what):
            page = table.scan(**kwargs)
            items += page.get("Items", [])
            while "LastEvaluatedKey" in page:
                page = table.scan(ExclusiveStartKey=page["LastEvaluatedKey"], **kwargs)
                items += page.get("Items", [])
        return items

    def linked_installations(self) -> list[Installation]:
        if "installations" not in self._settings:
            items = self._scan(
                INSTALLATIONS, "the installations table", FilterExpression="attribute_exists(owner_sub)"
            )
            self._settings["installations"] = [_to_installation(i) for i in items]
        return list(self._settings["installations"])

    def active_plans(self) -> list[tuple[str, str | None]]:
        if "active_plans" not in self._settings:
            items = self._scan(
                PLANS,
                "the plans table",
                ProjectionExpression="#u, #s, front_matter.#m",
                FilterExpression="#s IN (:a, :b)",
                ExpressionAttributeNames={"#u": "user", "#s": "status", "#m": "model"},
                ExpressionAttributeValues={":a": ACTIVE_PLAN_STATUSES[0], ":b": ACTIVE_PLAN_STATUSES[1]},
            )
            self._settings["active_plans"] = [
                (str(i["user"]), _model_of(i.get("front_matter"))) for i in items
            ]
        return list(self._settings["active_plans"])

    def brake(self) -> Brake:
        with _reading("the controls table"):
            return BrakeStore(self._tables()).read()

    # -- runner, schedules, alarms ------------------------------------------------------------

    def runner(self) -> Runner:
        if self.local:
            found = shutil.which("bwrap")
            return Runner(
                image=f"local launcher, bubblewrap at {found or '(missing)'}",
                image_found=bool(found),
                local=True,
            )
        cached = self._settings.get("_runner")
        if isinstance(cached, Runner):
            return cached
        environment = self._environment("heartbeat")
        definition = environment.get("STEWARD_RUNNER_TASK_DEFINITION")
        if not definition:
            raise ProbeFailed("the heartbeat names no runner task definition")
        with _reading("the runner's task definition"):
            described = self._client("ecs").describe_task_definition(taskDefinition=definition)[
                "taskDefinition"
            ]
        container = environment.get("STEWARD_RUNNER_CONTAINER")
        images = [
            c.get("image", "")
            for c in described.get("containerDefinitions", [])
            if not container or c.get("name") == container
        ]
        image = images[0] if images else ""
        runner = Runner(
            image=image or "(no image)",
            image_found=bool(image) and self._image_exists(image),
            subnets=self._subnets([s for s in environment.get("STEWARD_RUNNER_SUBNETS", "").split(",") if s]),
            public_ip=environment.get("STEWARD_RUNNER_PUBLIC_IP", "false").lower() == "true",
        )
        self._settings["_runner"] = runner
        return runner

    def _image_exists(self, image: str) -> bool:
        """An ECR image (`ACCOUNT.dkr.ecr.REGION.amazonaws.com/REPO:TAG` or `@sha256:...`)."""
        repository_part = image.split("/", 1)[1] if "/" in image else image
        if "@" in repository_part:
            repository, digest = repository_part.split("@", 1)
            image_id = {"imageDigest": digest}
        else:
            repository, _, tag = repository_part.partition(":")
            image_id = {"imageTag": tag or "latest"}
        try:
            found = self._client("ecr").describe_images(repositoryName=repository, imageIds=[image_id])
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in (
                "ImageNotFoundException",
                "RepositoryNotFoundException",
            ):
                return False
            raise ProbeFailed(
                f"cannot read the runner image: {exc.response.get('Error', {}).get('Code')}"
            ) from None
        return bool(found.get("imageDetails"))

    def _subnets(self, subnet_ids: list[str]) -> tuple[Subnet, ...]:
        if not subnet_ids:
            return ()
        ec2 = self._client("ec2")
        with _reading("the runner's subnets"):
            subnets = ec2.describe_subnets(SubnetIds=subnet_ids)["Subnets"]
            vpcs = sorted({s["VpcId"] for s in subnets})
            tables = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": vpcs}])["RouteTables"]
        made = []
        for subnet in subnets:
            table = _route_table_of(subnet, tables)
            routes = [
                r for r in (table or {}).get("Routes", []) if r.get("DestinationCidrBlock") == "0.0.0.0/0"
            ]
            made.append(
                Subnet(
                    subnet["SubnetId"],
                    nat=any(r.get("NatGatewayId") or r.get("InstanceId") for r in routes),
                    internet_gateway=any(str(r.get("GatewayId", "")).startswith("igw-") for r in routes),
                )
            )
        return tuple(made)

    def schedules(self) -> Mapping[str, str]:
        scheduler = self._client("scheduler")
        names = self.setting("schedules")
        states: dict[str, str] = {}
        with _reading("the loop's schedules"):
            if names is None:  # the local stack: every schedule of its moto account
                for page in scheduler.get_paginator("list_schedules").paginate():
                    states |= {s["Name"]: s.get("State", "?") for s in page.get("Schedules", [])}
                return states
            for group, name in names:
                states[name] = scheduler.get_schedule(Name=name, GroupName=group).get("State", "?")
        return states

    def alarms_in_alarm(self) -> list[str]:
        prefix = self.setting("alarm_prefix")
        kwargs = {"StateValue": "ALARM", **({"AlarmNamePrefix": prefix} if prefix else {})}
        names: list[str] = []
        with _reading("CloudWatch alarms"):
            for page in self._client("cloudwatch").get_paginator("describe_alarms").paginate(**kwargs):
                names += [
                    a["AlarmName"] for a in page.get("MetricAlarms", []) + page.get("CompositeAlarms", [])
                ]
        return names

    def _environment(self, function: str) -> dict[str, str]:
        key = f"_env_{function}"
        if key not in self._settings:
            name = self._required(f"{function}_function", f"the {function} function")
            with _reading(f"the {function} function's settings"):
                config = self._client("lambda").get_function_configuration(FunctionName=name)
            self._settings[key] = dict((config.get("Environment") or {}).get("Variables") or {})
        return dict(self._settings[key])


def _model_of(front_matter: Any) -> str | None:
    model = front_matter.get("model") if isinstance(front_matter, Mapping) else None
    return model if isinstance(model, str) and model else None


def _route_table_of(subnet: Mapping[str, Any], tables: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The subnet's route table: the one associated with it, else its VPC's main table."""
    for table in tables:
        if any(a.get("SubnetId") == subnet["SubnetId"] for a in table.get("Associations", [])):
            return table
    for table in tables:
        if table.get("VpcId") == subnet["VpcId"] and any(
            a.get("Main") for a in table.get("Associations", [])
        ):
            return table
    return None


# -- the two kinds of target ------------------------------------------------------------------


def local_deployment(state_file: Path, environ: Mapping[str, str]) -> Deployment:
    """The running local stack of `state_file`; `environ` is the environment `steward local
    up` ran in (the CLI's), whose price table and default model the stack's relay and API
    read. Every read is lazy: a failing one fails its check."""
    state = json.loads(state_file.read_text())
    client_kwargs = {
        "endpoint_url": state.get("aws_endpoint_url"),
        "region_name": state.get("region", "us-east-1"),
        "aws_access_key_id": "local",
        "aws_secret_access_key": "local",
    }
    # The state file's keys play the outputs' part (the webhook secret's presence is the
    # webhook_secret check's business).
    outputs = {key: state.get(key) for key in LOCAL_KEYS}
    urls = {
        "api": state.get("api_url"),
        # The runner's plain-http endpoint: the HTTPS one needs the stack's CA (both are the
        # same relay process).
        "relay": state.get("relay_http_url") or state.get("relay_url"),
        "webhook": state.get("webhook_url"),
    }
    settings = {
        "table_prefix": state.get("table_prefix"),
        "capability_key_id": state.get("capability_key_id"),
        "webhook_secret": state.get("webhook_secret"),
        "github_app_id": state.get("github_app_id"),
        "github_private_key_secret": state.get("github_private_key_secret"),
        "github_api_url": state.get("github_url"),
        # The relay and the API read these from the environment `steward local up` ran in.
        "price_table": environ.get("STEWARD_PRICE_TABLE"),
        "default_model": environ.get("STEWARD_DEFAULT_MODEL", Settings.default_model),
        "schedules": None,
        "alarm_prefix": None,
    }
    return Deployment(local=True, outputs=outputs, urls=urls, client_kwargs=client_kwargs, settings=settings)


def aws_deployment(stack: str, region: str | None) -> Deployment:
    """The stack `stack` in `region` (or the configured region), with the operator's
    credentials. AwsNotConfigured without credentials or a region; AwsFailure when the
    stack does not exist or cannot be read."""
    import boto3  # noqa: PLC0415 - the credentials check only

    try:
        session = boto3.session.Session(region_name=region)
        found = {"region": session.region_name, "credentials": session.get_credentials()}
    except BotoCoreError as exc:
        raise AwsNotConfigured(f"AWS settings unusable ({exc})") from None
    missing = [what for what, value in found.items() if not value]
    if missing:
        raise AwsNotConfigured(
            f"no AWS {' or '.join(missing)} configured: set AWS credentials (or AWS_PROFILE) and --region"
        )
    client_kwargs: dict[str, Any] = {"region_name": session.region_name}
    cloudformation = aws.client("cloudformation", **client_kwargs)
    try:
        described = cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if "does not exist" in str(error.get("Message", "")):
            raise AwsFailure(
                f"stack {stack} not found in {session.region_name}: check --stack and --region"
            ) from None
        raise AwsFailure(f"{error.get('Code', 'error')}: {error.get('Message', '')}") from None
    except BotoCoreError as exc:
        raise AwsFailure(str(exc)) from None
    declared = {o["OutputKey"]: o.get("OutputValue") for o in described.get("Outputs", [])}
    outputs = {key: declared.get(key) for key in REQUIRED_OUTPUTS}
    parameters = {p["ParameterKey"]: p.get("ParameterValue") for p in described.get("Parameters", [])}
    resources = _Resources(cloudformation, stack)
    deployment: Deployment

    def secret(output: str) -> Callable[[], str | None]:
        def read() -> str | None:
            arn = outputs.get(output)
            return deployment._secret(arn, f"the secret {output}") if arn else None

        return read

    def from_environment(function: str, variable: str, *, first: bool = False) -> Callable[[], str | None]:
        def read() -> str | None:
            value = deployment._environment(function).get(variable)
            return value.split(",")[0].strip() if value and first else value

        return read

    settings: dict[str, Any] = {
        "table_prefix": outputs.get("TablePrefix"),
        # The relay verifies with every key of the list; the runtime signs with the first.
        "capability_key_id": from_environment("runtime", "STEWARD_CAPABILITY_KEY_ID", first=True),
        "webhook_secret": secret("WebhookSecretArn"),
        "github_app_id": parameters.get("GitHubAppId"),
        "github_private_key_secret": outputs.get("GitHubPrivateKeySecret"),
        "github_api_url": from_environment("runtime", "STEWARD_GITHUB_API_URL"),
        "price_table": from_environment("relay", "STEWARD_PRICE_TABLE"),
        "default_model": from_environment("api", "STEWARD_DEFAULT_MODEL"),
        "schedules": resources.schedules,
        "alarm_prefix": stack,
        **{f"{f}_function": resources.function(f) for f in ("api", "relay", "runtime", "heartbeat")},
    }
    urls = {
        "api": outputs.get("ApiUrl"),
        "relay": outputs.get("RelayUrl"),
        "webhook": outputs.get("WebhookUrl"),
    }
    deployment = Deployment(
        local=False, outputs=outputs, urls=urls, client_kwargs=client_kwargs, settings=settings
    )
    return deployment


class _Resources:
    """The stack's resources, listed once on first use."""

    def __init__(self, cloudformation: Any, stack: str) -> None:
        self._cloudformation = cloudformation
        self._stack = stack
        self._listed: list[dict[str, Any]] | None = None

    def _all(self) -> list[dict[str, Any]]:
        if self._listed is None:
            listed: list[dict[str, Any]] = []
            with _reading("the stack's resources"):
                for page in self._cloudformation.get_paginator("list_stack_resources").paginate(
                    StackName=self._stack
                ):
                    listed += page.get("StackResourceSummaries", [])
            self._listed = listed
        return self._listed

    def function(self, name: str) -> Callable[[], str | None]:
        """The physical name of the function the CDK app builds as `<Name>Function`."""
        logical = f"{name.capitalize()}Function"

        def read() -> str | None:
            for resource in self._all():
                if resource.get("ResourceType") == "AWS::Lambda::Function" and str(
                    resource.get("LogicalResourceId", "")
                ).startswith(logical):
                    return str(resource.get("PhysicalResourceId"))
            return None

        return read

    def schedules(self) -> list[tuple[str, str]]:
        """(group, name) of each EventBridge Scheduler schedule of the stack."""
        return [
            ("default", str(r.get("PhysicalResourceId")).rpartition("/")[2])
            for r in self._all()
            if r.get("ResourceType") == "AWS::Scheduler::Schedule"
        ]
