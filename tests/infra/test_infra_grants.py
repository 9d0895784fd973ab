"""Granted = called, proven: every AWS call each Lambda function's code makes is allowed by
that function's role in the synthesized template, and every grant is used by some call.

One module-scoped run drives each function's code as the Lambda runs it (its handler, or the
`steward.wiring` builders its handler calls), on moto in-process, with the environment its
template gives it (each reference resolved to a moto resource created from the template:
the tables, the artifacts bucket, the capability key, the secrets, the queue, the cluster,
the runner's task definition and execution role). `tests.support.aws_calls` records each
call as IAM authorizes it, attributed to the function whose parts built the client. Then:

* each recorded call is evaluated against the function's role policies
  (`tests.support.iam_policy`, AWS's evaluation logic) and must be allowed;
* each granted (action, resource) no call exercised is printed, and fails the test unless
  it is one the code cannot exercise on moto (`NOT_CALLED_BY_CODE`, each with why);
* `infra.permissions.TABLE_ACCESS` and `INDEX_QUERIES` must equal the DynamoDB actions
  recorded per table and the indexes queried (the stack derives the grants from them);
* the operator's `steward admin brake` calls are evaluated against BrakeOperatorPolicy, and
  `steward admin link-installation`'s are recorded (that policy does not cover them);
* the runner's task definition has no task role (the runtime holds no AWS credential).

Why one driver here rather than the whole suite's record: the suite runs under xdist in
any order and most integration tests build their parts by hand (not through the composition
root with a function's environment), so attribution there would be partial; here every
scenario is explicit, attributed, and cheap (moto in-process, the cached template).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore import xform_name
from moto import mock_aws
from steward import wiring
from steward.adapters import aws
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.capability_signer import KmsCapabilitySigner
from steward.adapters.dynamo import Tables
from steward.adapters.github import GitHubApp
from steward.adapters.task_store import TaskStore
from steward.config import FUNCTIONS, Settings
from steward.domain.capability import capability_claims
from steward.domain.models import Task, utcnow
from steward.domain.tasks import task_for
from steward.local.converse_server import ConverseServer, ReceivedConverse, converse_response, echo_behaviour
from steward.local.github_twin import GitHubTwin
from steward.local.http_adapter import LambdaContext
from steward.queues import HEARTBEAT
from steward.wiring import Services

from infra.permissions import INDEX_QUERIES, QUERY, TABLE_ACCESS
from tests.infra.helpers import as_list, function_id, of_type, role_id, statements_of_role
from tests.support.aws_calls import ACCOUNT, Recorder
from tests.support.documents import document
from tests.support.fake_ecs import FakeEcs
from tests.support.github_payloads import aimed_at, delivery, installation_payload, real_payload
from tests.support.iam_policy import allowing, evaluate, statement_applies
from tests.support.installations import link_installation

REGION = "us-east-1"
USER = "alice"
OTHER_USER = "bob"
REPO = "octo/demo"
WEBHOOK_SECRET = "a-webhook-secret-of-the-stack"

# Grants no code of the function calls, by design; anything else unexercised fails.
# (principal, action) -> why; "*" is every function.
NOT_CALLED_BY_CODE: dict[tuple[str, str], str] = {
    ("*", "logs:CreateLogStream"): "the Lambda service writes the function's logs with its role",
    ("*", "logs:PutLogEvents"): "the Lambda service writes the function's logs with its role",
    ("*", "xray:PutTraceSegments"): "Lambda's X-Ray daemon sends the function's traces with its role",
    ("*", "xray:PutTelemetryRecords"): "Lambda's X-Ray daemon sends the function's traces with its role",
    **{
        ("heartbeat", f"sqs:{action}"): "the event source mapping polls the queue with the heartbeat's role"
        for action in (
            "ReceiveMessage",
            "ChangeMessageVisibility",
            "GetQueueUrl",
            "DeleteMessage",
            "GetQueueAttributes",
        )
    },
}


# ---- the template's resources, made on moto


@dataclass
class World:
    """Logical id -> its Ref and attributes, for the resources the functions' code reaches."""

    refs: dict[str, str] = field(default_factory=dict)
    attrs: dict[tuple[str, str], str] = field(default_factory=dict)
    partition_keys: dict[str, str] = field(default_factory=dict)
    task_roles: dict[str, list[str]] = field(default_factory=dict)

    def resolve(self, value: Any, *, strict: bool = True) -> Any:  # noqa: PLR0911 - one per intrinsic
        """A CloudFormation value with this world's names; an unknown reference raises when
        `strict` (a policy must not match by accident), else becomes a placeholder."""
        if isinstance(value, str | int | float | bool):
            return value
        if isinstance(value, list):
            return [self.resolve(v, strict=strict) for v in value]
        if "Ref" in value:
            name = value["Ref"]
            pseudo = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
            pseudo["AWS::URLSuffix"] = "amazonaws.com"
            found = pseudo.get(name, self.refs.get(name))
            if found is None:
                if strict:
                    raise KeyError(name)
                return f"ref-{name}"
            return found
        if "Fn::GetAtt" in value:
            logical, attr = value["Fn::GetAtt"]
            found = self.attrs.get((logical, attr))
            if found is None:
                if strict:
                    raise KeyError(f"{logical}.{attr}")
                return f"ref-{logical}-{attr}"
            return found
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            return str(sep).join(str(self.resolve(p, strict=strict)) for p in parts)
        if "Fn::Select" in value:
            index, items = value["Fn::Select"]
            return self.resolve(items, strict=strict)[int(index)]
        if any(k == "Ref" or k.startswith("Fn::") for k in value):
            raise ValueError(f"unsupported intrinsic {value}")
        return {k: self.resolve(v, strict=strict) for k, v in value.items()}


def build_world(resources: Mapping[str, Any], twin: GitHubTwin) -> World:
    """Each resource the code reaches, created on moto under a name from the template; the
    GitHub App is the twin's (its id, its key in the stack's secret)."""
    world = World(refs={"GitHubAppId": str(twin.app_id)})
    client = Tables.connect("steward-", region_name=REGION).client  # no principal: not recorded
    for logical, spec in of_type(dict(resources), "AWS::DynamoDB::Table").items():
        name = spec["Properties"]["TableName"]
        world.refs[logical] = name
        world.attrs[(logical, "Arn")] = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
        (hash_key,) = [k["AttributeName"] for k in spec["Properties"]["KeySchema"] if k["KeyType"] == "HASH"]
        world.partition_keys[name] = hash_key
    Tables(boto3.resource("dynamodb", region_name=REGION), "steward-").create_all()
    assert set(client.list_tables()["TableNames"]) == set(world.partition_keys)
    s3 = boto3.client("s3", region_name=REGION)
    for logical in of_type(dict(resources), "AWS::S3::Bucket"):
        s3.create_bucket(Bucket=logical.lower())
        world.refs[logical] = logical.lower()
        world.attrs[(logical, "Arn")] = f"arn:aws:s3:::{logical.lower()}"
    kms = boto3.client("kms", region_name=REGION)
    for logical in of_type(dict(resources), "AWS::KMS::Key"):
        meta = kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]
        world.refs[logical], world.attrs[(logical, "Arn")] = meta["KeyId"], meta["Arn"]
    secrets = boto3.client("secretsmanager", region_name=REGION)
    for logical in of_type(dict(resources), "AWS::SecretsManager::Secret"):
        value = twin.app_private_key_pem.decode() if "PrivateKey" in logical else WEBHOOK_SECRET
        world.refs[logical] = secrets.create_secret(Name=logical, SecretString=value)["ARN"]
    sqs = boto3.client("sqs", region_name=REGION)
    url = sqs.create_queue(**HEARTBEAT.create_queue_kwargs("steward-"))["QueueUrl"]
    for logical, spec in of_type(dict(resources), "AWS::SQS::Queue").items():
        name = spec["Properties"]["QueueName"]
        world.refs[logical] = url.rsplit("/", 1)[0] + "/" + name
        world.attrs[(logical, "Arn")] = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
        world.attrs[(logical, "QueueName")] = name
    iam = boto3.client("iam", region_name=REGION)
    for logical in of_type(dict(resources), "AWS::IAM::Role"):
        role = iam.create_role(RoleName=logical, AssumeRolePolicyDocument="{}")["Role"]
        world.refs[logical], world.attrs[(logical, "Arn")] = logical, role["Arn"]
    ecs = boto3.client("ecs", region_name=REGION)
    for logical in of_type(dict(resources), "AWS::ECS::Cluster"):
        arn = ecs.create_cluster(clusterName=logical)["cluster"]["clusterArn"]
        world.refs[logical], world.attrs[(logical, "Arn")] = logical, arn
    for logical, spec in of_type(dict(resources), "AWS::ECS::TaskDefinition").items():
        props = spec["Properties"]
        roles = [world.resolve(props[k]) for k in ("ExecutionRoleArn", "TaskRoleArn") if k in props]
        made = ecs.register_task_definition(
            family=props["Family"],
            executionRoleArn=world.resolve(props["ExecutionRoleArn"]),
            **({"taskRoleArn": world.resolve(props["TaskRoleArn"])} if "TaskRoleArn" in props else {}),
            networkMode="awsvpc",
            requiresCompatibilities=["FARGATE"],
            cpu=str(props["Cpu"]),
            memory=str(props["Memory"]),
            containerDefinitions=[{"name": "runner", "image": "runner:latest"}],
        )["taskDefinition"]
        world.refs[logical] = made["taskDefinitionArn"]
        world.task_roles[made["taskDefinitionArn"]] = roles
    for logical in of_type(dict(resources), "AWS::IAM::ManagedPolicy"):
        world.refs[logical] = f"arn:aws:iam::{ACCOUNT}:policy/{logical}"
    return world


# ---- ECS: moto's RunTask with awsvpc fails, so the clients the code builds answer from the
# tests' ECS fake (tests/support/fake_ecs.py), after the recorder has seen the call.


@dataclass
class _Answered:
    status_code: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def answering_ecs_from(fake: FakeEcs) -> Any:
    """A client hook: an ECS client's calls are answered by `fake` (botocore's `before-call`
    short-circuits the request when a handler returns (http response, parsed))."""

    def stash(params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["fake_params"] = dict(params)

    def answer(model: Any, context: dict[str, Any], **_: Any) -> tuple[_Answered, dict[str, Any]]:
        return _Answered(), getattr(fake, xform_name(model.name))(**context["fake_params"])

    def hook(client: Any) -> None:
        if client.meta.service_model.service_name == "ecs":
            client.meta.events.register_last("before-parameter-build.ecs", stash)
            client.meta.events.register("before-call.ecs", answer)

    return hook


# ---- driving each function


def api_event(
    method: str, path: str, body: Any = None, query: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """An HTTP API (payload 2.0) event with the JWT authorizer's claims for USER."""
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "&".join(f"{k}={v}" for k, v in (query or {}).items()),
        "headers": {"content-type": "application/json"},
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "api",
            "domainName": "api.example",
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "10.0.0.1",
                "userAgent": "t",
            },
            "requestId": "r",
            "routeKey": "$default",
            "stage": "$default",
            "time": "06/Dec/2026:00:00:00 +0000",
            "timeEpoch": int(time.time() * 1000),
            "authorizer": {"jwt": {"claims": {"sub": USER}, "scopes": None}},
        },
        "isBase64Encoded": False,
    }
    if query:
        event["queryStringParameters"] = dict(query)
    if body is not None:
        event["body"] = body if isinstance(body, str) else json.dumps(body)
    return event


@dataclass
class Run:
    """The run's record, the world it ran in and the template's resources."""

    recorder: Recorder
    world: World
    resources: dict[str, Any]
    seconds: float  # how long building the world and driving the functions took


class Driver:
    def __init__(
        self,
        resources: dict[str, Any],
        world: World,
        recorder: Recorder,
        mp: pytest.MonkeyPatch,
        twin: GitHubTwin,
    ) -> None:
        self.resources, self.world, self.recorder, self.mp, self.twin = resources, world, recorder, mp, twin
        self.outcomes: list[tuple[str, Any]] = []

    def environment(self, function: str, **extra: str) -> None:
        """The function's cold start: exactly its template's variables (plus `extra`)."""
        for name in list(os.environ):
            if name.startswith("STEWARD_"):
                self.mp.delenv(name)
        variables = self.resources[function_id(self.resources, function)]["Properties"]["Environment"][
            "Variables"
        ]
        for name, value in variables.items():
            self.mp.setenv(name, str(self.world.resolve(value, strict=False)))
        if "STEWARD_GITHUB_APP_ID" in variables:
            # The one variable beyond the template's: GitHub is the twin, not api.github.com.
            self.mp.setenv("STEWARD_GITHUB_API_URL", self.twin.url)
        for name, value in extra.items():
            self.mp.setenv(name, value)
        wiring.reset()

    def api(self, method: str, path: str, body: Any = None, **query: str) -> Any:
        from steward.api.handler import lambda_handler  # noqa: PLC0415 - the API's module builds its app

        answer = lambda_handler(api_event(method, path, body, query), lambda_context("api"))
        # A refusal is an answer the code chose (a 404 still read the table); a 5xx is not.
        assert answer["statusCode"] < 500, (method, path, answer)
        return json.loads(answer["body"]) if answer.get("body") else None


def lambda_context(function: str) -> Any:
    """The context Lambda hands a handler (the local adapter's, typed as Powertools' own)."""
    return LambdaContext(function)


def run_ticket(raw: list[tuple[str, str, dict[str, Any]]]) -> tuple[str, str]:
    """(task id, ticket) of the last runtime the heartbeat launched, as RunTask carried them."""
    (*_, (_, _, params)) = [r for r in raw if r[1] == "RunTask"]
    env = {e["name"]: e["value"] for e in params["overrides"]["containerOverrides"][0]["environment"]}
    return env["STEWARD_TASK_ID"], env["STEWARD_TICKET"]


def sqs_tick(world: World) -> dict[str, Any]:
    """One tick for USER as the event source mapping hands it to the heartbeat."""
    return {
        "messageId": "m1",
        "receiptHandle": "h",
        "body": json.dumps({"user": USER, "window": "w"}),
        "attributes": {"MessageGroupId": USER, "SequenceNumber": "1", "MessageDeduplicationId": "d"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:steward-heartbeat.fifo",
        "awsRegion": REGION,
    }


def over_reporting(call: ReceivedConverse) -> dict[str, Any]:
    """Bedrock answering honestly, except to "over": then it reports far more output than the
    call's bound (the relay's over-report). An honest call goes first, so the over-report
    settles onto a task that has spent before, as one would in a run."""
    if "over" in json.dumps(call.body.get("messages")):
        return converse_response(text="hi", input_tokens=10, output_tokens=1_000_000)
    return echo_behaviour(call)


def drive(d: Driver, installation: int) -> None:
    """Each function's code paths, in the order a plan's life calls them."""
    from steward import heartbeat_handler, reaper_handler, scheduler_handler  # noqa: PLC0415
    from steward.adapters.providers import bedrock  # noqa: PLC0415
    from steward.cli import main  # noqa: PLC0415
    from steward.services.runtime import ArtifactCall, Ending, EventCall, RuntimeCall  # noqa: PLC0415

    rec, raw = d.recorder, d.recorder.raw
    setup = Tables.connect("steward-", region_name=REGION)  # the test's own reads: not recorded
    tasks = TaskStore(setup)
    link_installation(setup, USER, REPO, installation_id=installation)
    items = ("First change", "Second change")
    plan = document(*items, repo=REPO).replace("checks:", 'model: scripted\nbudget_usd: "5.00"\nchecks:')

    def tick() -> None:
        heartbeat_handler.lambda_handler({"Records": [sqs_tick(d.world)]}, lambda_context("heartbeat"))

    # The API: loop settings, publish and confirm (a tick now), reads.
    d.environment("api")
    with rec.acting_as("api"):
        d.api("PUT", "/v1/loop", {"enabled": True, "interval_seconds": 1})
        d.api("GET", "/v1/loop")
        d.api("PUT", "/v1/plans/demo", {"markdown": plan})
        d.api("POST", "/v1/plans/demo/confirm")
        d.api("GET", "/v1/plans")
        d.api("GET", "/v1/plans/demo")
        d.api("GET", "/v1/plans/demo/diff")

    # The scheduler's fan-out, then the heartbeat's tick: spawn and launch both items.
    d.environment("scheduler")
    with rec.acting_as("scheduler"):
        scheduler_handler.lambda_handler(
            {"time": (utcnow() + timedelta(minutes=5)).isoformat()}, lambda_context("s")
        )
    d.environment("heartbeat")
    with rec.acting_as("heartbeat"):
        tick()
        wiring.loop_github()  # the App's key, read on the loop's first GitHub call
    task_id, ticket = run_ticket(raw)
    other = next(t.id for t in tasks.live_for_user(USER) if t.id != task_id)

    # The runtime routes: exchange the ticket, claim, heartbeat, an event, an upload.
    d.environment("runtime")
    with rec.acting_as("runtime"):
        minted = wiring.minter().exchange(ticket)
        capability = wiring.capability_verifier().verify(str(minted["capability"]))
        service = wiring.runtime_service()
        service.claim(capability, RuntimeCall(runtime_id="r1"))
        service.heartbeat(capability, RuntimeCall(runtime_id="r1"))
        service.append_event(capability, EventCall(runtime_id="r1", type="phase", data={"phase": "edit"}))
        service.artifact_upload(capability, "harness.json", ArtifactCall(runtime_id="r1", size=2))
        wiring.loop_github()

    # The relay: a scripted call, then each priced Bedrock model (the Converse stand-in
    # over-reports, so the relay records an over-report). The provider clients are cached
    # per process: dropped, so the relay's own are built (and recorded) here.
    with ConverseServer(over_reporting) as converse:
        d.environment("relay", STEWARD_BEDROCK_ENDPOINT_URL=converse.url)
        bedrock._CLIENTS.clear()
        (key,) = of_type(d.resources, "AWS::KMS::Key")
        signer = KmsCapabilitySigner(boto3.client("kms", region_name=REGION), d.world.refs[key])
        api_env = d.resources[function_id(d.resources, "api")]["Properties"]["Environment"]["Variables"]
        artifacts = str(d.world.resolve(api_env["STEWARD_ARTIFACTS_BUCKET"]))
        pinned = [running_task(setup, artifacts, model) for model in bedrock_models(d.resources)]
        with rec.acting_as("relay"):
            body = json.dumps(
                {
                    "messages": [{"role": "user", "content": [{"text": "hi"}]}],
                    "inferenceConfig": {"maxTokens": 16},
                }
            )
            wiring.relay().converse(f"Bearer {minted['capability']}", body)
            for task in pinned:
                claims = capability_claims(
                    sub=task.user,
                    task_id=task.id,
                    model_id=task.model,
                    max_budget_usd=task.budget_usd,
                    now=utcnow(),
                )
                wiring.relay().converse(f"Bearer {signer.mint(claims)}", body)
                wiring.relay().converse(f"Bearer {signer.mint(claims)}", body.replace("hi", "over"))
        bedrock._CLIENTS.clear()

    with rec.acting_as("runtime"):
        service.finish(
            capability,
            Ending.model_validate(
                {"runtime_id": "r1", "status": "failed", "classification": "final", "reason": "done"}
            ),
        )

    # The API again: the tasks, their events and artifacts, a retry of the failed one.
    d.environment("api")
    with rec.acting_as("api"):
        d.api("GET", "/v1/tasks")
        d.api("GET", f"/v1/tasks/{task_id}")
        d.api("GET", f"/v1/tasks/{task_id}/events")
        d.api("GET", f"/v1/tasks/{task_id}/artifacts")
        d.api("GET", f"/v1/tasks/{task_id}/artifacts/harness.json")
        d.api("GET", f"/v1/tasks/{task_id}/screen")
        d.api("POST", f"/v1/tasks/{task_id}/retry")

    # The heartbeat again: the retry spawns (checking the failed task in its transaction).
    d.environment("heartbeat")
    with rec.acting_as("heartbeat"):
        tick()
    retried, retry_ticket = run_ticket(raw)
    assert retried != task_id

    # The API cancels the other task; the heartbeat stops a runtime it holds no reference
    # for (a launch whose answer was lost): found by its tag (ListTasks, DescribeTasks).
    d.environment("api")
    with rec.acting_as("api"):
        d.api("POST", f"/v1/tasks/{other}/cancel")
    d.environment("heartbeat")
    with rec.acting_as("heartbeat"):
        wiring.launcher().stop(tasks.require(other), None)

    # The retry's runtime claims it.
    d.environment("runtime")
    with rec.acting_as("runtime"):
        minted = wiring.minter().exchange(retry_ticket)
        capability = wiring.capability_verifier().verify(str(minted["capability"]))
        wiring.runtime_service().claim(capability, RuntimeCall(runtime_id="r2"))

    # A revision of both items: the heartbeat cancels the running retry (its plan item moved
    # on: a transition with its event), stops its runtime and spawns and launches the revision.
    d.environment("api")
    with rec.acting_as("api"):
        revised = plan.replace("First change", "First change, revised").replace(
            "Second change", "Second change, revised"
        )
        d.api("PUT", "/v1/plans/demo", {"markdown": revised})
        d.api("POST", "/v1/plans/demo/confirm")
    d.environment("heartbeat")
    with rec.acting_as("heartbeat"):
        tick()
    revision, revision_ticket = run_ticket(raw)
    d.environment("runtime")
    with rec.acting_as("runtime"):
        minted = wiring.minter().exchange(revision_ticket)
        capability = wiring.capability_verifier().verify(str(minted["capability"]))
        wiring.runtime_service().claim(capability, RuntimeCall(runtime_id="r3"))

    # The webhook receiver: two installation deliveries stamped alike that disagree (the
    # loop must ask GitHub), the revision's pull request opened (the task moves to review),
    # and a review asking for changes (a follow-up: the owner's tick now).
    d.environment("webhook")
    with rec.acting_as("webhook"):
        receiver = wiring.webhook_receiver()
        at = utcnow()
        branch = tasks.require(revision).branch
        opened = aimed_at(
            real_payload("octokit.pull_request.opened.json"), branch=branch, installation_id=installation
        )
        review = aimed_at(
            real_payload("octokit.pull_request_review.submitted.json"),
            branch=branch,
            installation_id=installation,
        )
        with GitHubApp(
            d.twin.app_id, d.twin.app_private_key_pem, base_url=d.twin.url
        ) as app:  # the runtime's part
            token = app.installation_token(installation, REPO).token
            d.twin.push(token, REPO, branch, {"change.txt": "done\n"})
            pull = app.open_pull(installation, REPO, head=branch, base="main", title="Change", body="")
        opened["pull_request"]["number"] = review["pull_request"]["number"] = pull.number
        review["review"].update(
            state="changes_requested", body="Please also handle zero.", author_association="COLLABORATOR"
        )
        for event, payload in (
            (
                "installation",
                installation_payload("suspend", installation_id=installation, account="octo", at=at),
            ),
            (
                "installation",
                installation_payload("unsuspend", installation_id=installation, account="octo", at=at),
            ),
            ("pull_request", opened),
            ("pull_request_review", review),
        ):
            signed = delivery(event, payload, secret=WEBHOOK_SECRET)
            d.outcomes.append((event, receiver.receive(signed.body, signed.headers)))
        wiring.loop_github()

    # The heartbeat: the resync refreshes the disputed installation (GitHub's answer), the
    # status comment of the task in review (its plan, its events), and finds its pull request
    # merged (no webhook said so): the task moves, with its event.
    d.twin.merge(REPO, pull.number)
    time.sleep(1.1)  # a resync period (1 s here; the stack keeps the default) since the review
    d.environment("heartbeat", STEWARD_GITHUB_RESYNC_SECONDS="1")
    with rec.acting_as("heartbeat"):
        tick()

    # The reaper: the breaker (the stack sets a limit when spendLimitUsdPerHour is given),
    # its sweeps hours on (the launched revision is overdue; its runtime stopped), and a
    # runtime with no reference stopped by its tag.
    d.environment("reaper", STEWARD_SPEND_LIMIT_USD_PER_HOUR="0.000001")
    with rec.acting_as("reaper"):
        reaper_handler.lambda_handler({}, lambda_context("reaper"))
        later = utcnow() + timedelta(hours=6)
        reaper = wiring.reaper()
        # A GSI read is eventually consistent: the index may hand the reaper a task one write
        # behind, whose transition then fails its condition and re-reads the task (GetItem).
        # moto's indexes never lag, so the lag is made here.
        indexed = reaper.tasks.overdue
        d.mp.setattr(
            reaper.tasks,
            "overdue",
            lambda shard, now: [
                t.model_copy(update={"event_seq": t.event_seq - 1}) for t in indexed(shard, now)
            ],
        )
        d.outcomes.append(("reaper", (reaper.sweep(later), reaper.sweep_reservations(later))))
        wiring.launcher().stop(tasks.require(other), None)

    # The operator CLI: the brake on, its status, off.
    for name in list(os.environ):
        if name.startswith("STEWARD_"):
            d.mp.delenv(name)
    d.mp.setenv("STEWARD_TABLE_PREFIX", "steward-")
    with rec.acting_as("operator-brake"):
        assert main(["admin", "brake", "on", "--reason", "testing the grants"]) == 0
        assert main(["admin", "brake", "status"]) == 0
        assert main(["admin", "brake", "off"]) == 0
    with rec.acting_as("operator-link"):
        assert main(["admin", "link-installation", str(installation), "--owner", OTHER_USER, "--force"]) == 0


def running_task(tables: Tables, bucket: str, model: str) -> Task:
    """A claimed task pinned to `model`, made by the test itself (nothing recorded): the
    relay's calls are what is under test. Another user's, so USER's loop is not held up."""
    services = Services.build(
        Settings(table_prefix="steward-", artifacts_bucket=bucket),
        tables,
        ArtifactStore(bucket, client=boto3.client("s3", region_name=REGION)),
    )
    slug = "m-" + model.replace(".", "-").replace(":", "-")[:40]
    markdown = document("Use the model", repo=REPO).replace(
        "checks:", f'model: {model}\nbudget_usd: "5.00"\nchecks:'
    )
    services.plans.publish(OTHER_USER, slug, markdown)
    confirmed = services.plans.confirm(OTHER_USER, slug)
    now = utcnow()
    store = services.tasks.tasks
    task, _ = store.spawn(
        task_for(confirmed, confirmed.active_items[0], attempt=1, now=now), previous_task_id=None, now=now
    )
    return store.claim(task, runtime_id="relay-test", now=now, deadline=now + timedelta(hours=1))


def bedrock_models(resources: Mapping[str, Any]) -> list[str]:
    """The Bedrock models the relay may invoke: the priced ones of the packaged table, which
    the template is synthesized with (a profile's id as it is: the relay calls it so)."""
    from steward.adapters.price_file import load_price_table  # noqa: PLC0415

    from infra.stack import priced_bedrock_models  # noqa: PLC0415

    del resources  # synthesized from the same table
    return priced_bedrock_models(load_price_table())


@pytest.fixture(scope="module")
def run(resources: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Run:
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("STEWARD_", "AWS_")):
                mp.delenv(name)
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_ACCESS_KEY_ID", "testing")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        mp.setenv("HOME", str(tmp_path_factory.mktemp("home")))
        mp.chdir(tmp_path_factory.mktemp("cwd"))
        wiring.reset()
        with mock_aws(), GitHubTwin(tmp_path_factory.mktemp("twin")) as twin:
            twin.create_repo(REPO, {"README.md": "# demo\n"})
            installation = twin.create_installation(REPO.split("/", maxsplit=1)[0], [REPO])
            world = build_world(resources, twin)
            recorder = Recorder(world.partition_keys, lambda arn: world.task_roles.get(arn, []))
            aws.CLIENT_HOOKS.append(answering_ecs := answering_ecs_from(FakeEcs(region=REGION)))
            try:
                with recorder.installed():
                    drive(Driver(resources, world, recorder, mp, twin), installation)
            finally:
                aws.CLIENT_HOOKS.remove(answering_ecs)
        wiring.reset()
    return Run(recorder, world, resources, time.monotonic() - started)


# ---- the evaluation


def principals(run: Run) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """principal -> (what it is, its statements with this world's ARNs)."""
    found: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for function in FUNCTIONS:
        role = role_id(run.resources, function)
        found[function] = (
            f"role {role}",
            run.world.resolve(statements_of_role(run.resources, role), strict=False),
        )
    # The operator commands' managed policies (infra/operators.py); the doctor's actions are
    # checked against what it calls in tests/unit/test_doctor_aws.py.
    for principal, name in (
        ("operator-brake", "BrakeOperatorPolicy"),
        ("operator-link", "LinkOperatorPolicy"),
    ):
        (policy,) = [k for k in of_type(run.resources, "AWS::IAM::ManagedPolicy") if name in k]
        document = run.resources[policy]["Properties"]["PolicyDocument"]
        found[principal] = (
            f"managed policy {policy}",
            run.world.resolve(document["Statement"], strict=False),
        )
    return found


def granted(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (a, r)
        for s in statements
        if s["Effect"] == "Allow"
        for a in as_list(s["Action"])
        for r in as_list(s["Resource"])
    }


def exercised(run: Run) -> dict[str, set[tuple[str, str]]]:
    """principal -> the granted (action, resource) pairs some recorded call was allowed by:
    each statement taken apart into its (action, resource) pairs, each tried alone."""
    policies = principals(run)
    used: dict[str, set[tuple[str, str]]] = {p: set() for p in policies}
    for call in {c for c in run.recorder.calls if c.principal in policies}:
        for statement in allowing(policies[call.principal][1], call.request()):
            for action in as_list(statement["Action"]):
                for resource in as_list(statement["Resource"]):
                    single = {**statement, "Action": action, "Resource": resource}
                    if statement_applies(single, call.request()):
                        used[call.principal].add((action, resource))
    return used


def test_every_function_and_the_operator_made_calls(run: Run) -> None:
    assert set(run.recorder.by_principal()) == {*FUNCTIONS, "operator-brake", "operator-link"}
    assert run.recorder.misattributed == []  # each client served only the function that built it


def test_every_recorded_call_is_allowed(run: Run) -> None:
    policies = principals(run)
    denied = [
        f"{c.principal} ({policies[c.principal][0]}): {c.action} on {c.resource} ({c.operation}, context {dict(c.context)}): {decision}"
        for c in sorted(set(run.recorder.calls), key=lambda c: (c.principal, c.action, c.resource))
        if c.principal in policies
        and (decision := evaluate(policies[c.principal][1], c.request())) != "Allow"
    ]
    assert not denied, "calls the template does not allow:\n" + "\n".join(denied)


def test_every_grant_is_exercised(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    used = exercised(run)
    unused = [
        f"{principal} ({what}): {action} on {resource}"
        for principal, (what, statements) in principals(run).items()
        for action, resource in sorted(granted(statements) - used[principal])
        if ("*", action) not in NOT_CALLED_BY_CODE and (principal, action) not in NOT_CALLED_BY_CODE
    ]
    # The report: always the counts and every unexercised grant; the full list of recorded
    # (principal, action, resource) with GRANTS_REPORT=1.
    with capsys.disabled():
        calls = run.recorder.calls
        print(f"\n[grants] {len(calls)} calls recorded ({len(set(calls))} distinct) in {run.seconds:.1f} s")
        for principal, pairs in sorted(run.recorder.by_principal().items()):
            print(f"[grants] {principal}: {len(pairs)} (action, resource)")
            if os.environ.get("GRANTS_REPORT"):
                for action, resource in sorted(pairs):
                    print(f"[grants]   {action} {resource}")
        for line in unused:
            print(f"[grants] UNEXERCISED {line}")
    assert not unused, "grants no recorded call uses (exercise them or remove them):\n" + "\n".join(unused)


def test_table_access_is_what_the_code_calls(run: Run) -> None:
    """TABLE_ACCESS (actions on each table's own ARN) and INDEX_QUERIES (the indexes each
    function queries) are exactly the recorded DynamoDB calls: a grant the code does not use,
    or a call the table lacks, fails here (the template follows them: test_infra_security)."""
    from steward.tables import ALL_TABLES  # noqa: PLC0415

    by_name = {spec.physical_name("steward-"): spec.logical_name for spec in ALL_TABLES}
    actions: dict[str, dict[str, set[str]]] = {f: {} for f in FUNCTIONS}
    indexes: dict[str, dict[str, set[str]]] = {f: {} for f in FUNCTIONS}
    for call in run.recorder.calls:
        if call.principal in FUNCTIONS and call.action.startswith("dynamodb:"):
            table, _, index = call.resource.split(":table/", 1)[1].partition("/index/")
            if index:
                assert call.action == QUERY, call
                indexes[call.principal].setdefault(by_name[table], set()).add(index)
            else:
                actions[call.principal].setdefault(by_name[table], set()).add(call.action)

    def declared(source: Mapping[Any, Mapping[Any, tuple[str, ...]]]) -> dict[str, dict[str, set[str]]]:
        return {
            f: {spec.logical_name: set(v) for spec, v in source.get(f, {}).items() if v} for f in FUNCTIONS
        }

    recorded = {"TABLE_ACCESS": actions, "INDEX_QUERIES": indexes}
    written = {"TABLE_ACCESS": declared(TABLE_ACCESS), "INDEX_QUERIES": declared(INDEX_QUERIES)}
    assert written == recorded, "infra/permissions.py differs from what the code calls:\n" + "\n".join(
        f"{name} {f} {table}: written {sorted(written[name][f].get(table, ()))}, called {sorted(recorded[name][f].get(table, ()))}"
        for name in recorded
        for f in FUNCTIONS
        for table in sorted(set(written[name][f]) | set(recorded[name][f]))
        if written[name][f].get(table) != recorded[name][f].get(table)
    )


def test_each_operator_command_is_allowed_by_its_own_policy_only(run: Run) -> None:
    """`steward admin link-installation` reads and updates the installation's item, which
    LinkOperatorPolicy allows and the brake's policy does not (nor the link's the brake)."""
    policies = principals(run)
    calls = {
        (c.action, c.resource.rsplit("/", 1)[-1])
        for c in run.recorder.calls
        if c.principal == "operator-link"
    }
    assert calls == {
        ("dynamodb:GetItem", "steward-installations"),
        ("dynamodb:UpdateItem", "steward-installations"),
    }
    for principal, other in (("operator-link", "operator-brake"), ("operator-brake", "operator-link")):
        for call in (c for c in run.recorder.calls if c.principal == principal):
            assert evaluate(policies[principal][1], call.request()) == "Allow", call
            assert evaluate(policies[other][1], call.request()) == "ImplicitDeny", call


def test_the_runner_has_no_task_role_and_its_execution_role_only_pulls_and_logs(
    resources: dict[str, Any],
) -> None:
    (definition,) = of_type(resources, "AWS::ECS::TaskDefinition").values()
    assert "TaskRoleArn" not in definition["Properties"]
    role = definition["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]
    actions = {a for s in statements_of_role(resources, role) for a in as_list(s["Action"])}
    assert actions <= {
        "ecr:BatchCheckLayerAvailability",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchGetImage",
        "ecr:GetAuthorizationToken",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }, actions
