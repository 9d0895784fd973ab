"""`steward doctor --stack`'s reads (`steward.adapters.deployment.aws_deployment`) against
moto in-process: a CloudFormation stack's outputs and parameters, the secrets, the tables,
the runner's task definition, image and network, the schedules and the alarms. moto has no
Bedrock model catalogue, so Bedrock's answers are stubbed (botocore's Stubber).

moto's CloudFormation does not build Lambda functions or Scheduler schedules from a
template, so the functions' and schedules' names, which a real stack's resources give, are
handed to the deployment directly (`_settings`)."""

from __future__ import annotations

import inspect
import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from steward.adapters import aws as aws_adapter
from steward.adapters.brake_store import BrakeStore
from steward.adapters.deployment import Deployment, aws_deployment
from steward.adapters.dynamo import Tables
from steward.adapters.operator_aws import AwsFailure
from steward.domain.doctor import REQUIRED_OUTPUTS, run_checks
from steward.domain.models import utcnow

from tests.conftest import REGION

STACK = "Steward"
PREFIX = "steward-"


def _template(outputs: dict[str, str]) -> str:
    return json.dumps(
        {
            "Parameters": {"GitHubAppId": {"Type": "String", "Default": "42"}},
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {key: {"Value": value} for key, value in outputs.items()},
        }
    )


@pytest.fixture
def deployment(aws: None) -> Iterator[Deployment]:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    webhook = secrets.create_secret(Name="webhook", SecretString="hook-secret")["ARN"]
    key = secrets.create_secret(Name="app-key")["ARN"]  # created without a value, as the stack does
    outputs = {name: f"https://{name.lower()}.example/" for name in REQUIRED_OUTPUTS}
    outputs |= {"WebhookSecretArn": webhook, "GitHubPrivateKeySecret": key, "TablePrefix": PREFIX}
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName=STACK, TemplateBody=_template(outputs)
    )
    Tables.connect(PREFIX, region_name=REGION).create_all()
    made = aws_deployment(STACK, REGION)
    yield made
    made.close()


def _runner(public: bool, *, image_pushed: bool = True) -> str:
    """A VPC with one runner subnet (behind a NAT gateway, or public), the runner image, its
    task definition and the heartbeat function naming them; the function's name."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    if public:
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    else:
        allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
        nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)["NatGateway"]["NatGatewayId"]
        ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    ecr = boto3.client("ecr", region_name=REGION)
    repository = ecr.create_repository(repositoryName="runner")["repository"]["repositoryUri"]
    if image_pushed:
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"digest": "sha256:" + "a" * 64},
            "layers": [],
        }
        ecr.put_image(repositoryName="runner", imageManifest=json.dumps(manifest), imageTag="v1")
    definition = boto3.client("ecs", region_name=REGION).register_task_definition(
        family="runner",
        containerDefinitions=[{"name": "runner", "image": f"{repository}:v1", "memory": 512}],
    )["taskDefinition"]["taskDefinitionArn"]
    role = boto3.client("iam", region_name=REGION).create_role(
        RoleName="heartbeat", AssumeRolePolicyDocument="{}"
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
    environment = {
        "STEWARD_RUNNER_TASK_DEFINITION": definition,
        "STEWARD_RUNNER_CONTAINER": "runner",
        "STEWARD_RUNNER_SUBNETS": subnet,
        "STEWARD_RUNNER_PUBLIC_IP": "true" if public else "false",
    }
    boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="steward-heartbeat",
        Runtime="python3.12",
        Role=role,
        Handler="handler.handler",
        Code={"ZipFile": code.getvalue()},
        Environment={"Variables": environment},
    )
    return "steward-heartbeat"


def test_outputs_parameters_and_secrets_are_the_stacks(deployment: Deployment) -> None:
    assert set(deployment.outputs()) == set(REQUIRED_OUTPUTS)
    assert all(deployment.outputs().values())
    assert deployment.setting("github_app_id") == "42"
    assert deployment.stored_webhook_secret() == "hook-secret"
    # The App key's secret has no value yet (a first deploy): the App reads say so.
    with pytest.raises(Exception, match="private key is not stored"):
        deployment.github("/app")


def test_a_stack_that_does_not_exist_is_one_line(aws: None) -> None:
    with pytest.raises(AwsFailure, match="stack Nowhere not found in us-east-1: check --stack and --region"):
        aws_deployment("Nowhere", REGION)


@pytest.mark.parametrize("public", [False, True])
def test_the_runners_image_and_network(deployment: Deployment, public: bool) -> None:
    deployment._settings["heartbeat_function"] = _runner(public)
    runner = deployment.runner()
    assert runner.image.endswith("/runner:v1")
    assert runner.image_found
    assert runner.public_ip is public
    assert [(s.nat, s.internet_gateway) for s in runner.subnets] == [(not public, public)]
    results = {r.check: r for r in run_checks(deployment, only={"runner_image", "runner_network"})}
    assert all(r.ok for r in results.values()), results


def test_a_runner_image_never_pushed_fails(deployment: Deployment) -> None:
    deployment._settings["heartbeat_function"] = _runner(False, image_pushed=False)
    [result] = run_checks(deployment, only={"runner_image"})
    assert not result.ok
    assert "not found" in result.detail


def test_schedules_alarms_and_the_brake(deployment: Deployment) -> None:
    scheduler = boto3.client("scheduler", region_name=REGION)
    for name, state in (("Steward-Tick", "ENABLED"), ("Steward-Reap", "DISABLED")):
        scheduler.create_schedule(
            Name=name,
            ScheduleExpression="rate(1 minute)",
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={
                "Arn": "arn:aws:lambda:us-east-1:123456789012:function:f",
                "RoleArn": "arn:aws:iam::1:role/r",
            },
            State=state,
        )
    deployment._settings["schedules"] = [("default", "Steward-Tick"), ("default", "Steward-Reap")]
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    for name in ("Steward-HeartbeatErrors-1", "Other-Errors-1"):
        cloudwatch.put_metric_alarm(
            AlarmName=name,
            MetricName="Errors",
            Namespace="AWS/Lambda",
            Statistic="Sum",
            Period=300,
            EvaluationPeriods=1,
            Threshold=1,
            ComparisonOperator="GreaterThanOrEqualToThreshold",
        )
        cloudwatch.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason="test")
    BrakeStore(Tables.connect(PREFIX, region_name=REGION)).engage(reason="test", by="operator", now=utcnow())
    results = {r.check: r for r in run_checks(deployment, only={"schedules", "alarms", "brake"})}
    assert results["schedules"].detail == "not enabled: Steward-Reap"
    assert results["alarms"].detail == "in ALARM: Steward-HeartbeatErrors-1"  # the stack's only
    assert results["brake"].detail.startswith("engaged: on since")


AVAILABLE = {
    "modelId": "m",
    "agreementAvailability": {"status": "AVAILABLE"},
    "authorizationStatus": "AUTHORIZED",
    "entitlementAvailability": "AVAILABLE",
    "regionAvailability": "AVAILABLE",
}
REFUSED = AVAILABLE | {"authorizationStatus": "NOT_AUTHORIZED", "entitlementAvailability": "NOT_AVAILABLE"}
ACTIVE = {"status": "ACTIVE"}


@pytest.mark.parametrize(
    ("answers", "detail"),
    [
        # the packaged table's two, in order: Nova Lite, then Claude Haiku 4.5 through its
        # global inference profile
        (
            [
                ("model", "ACTIVE"),
                ("availability", AVAILABLE),
                ("profile", ACTIVE),
                ("availability", AVAILABLE),
            ],
            None,
        ),
        (
            [("model", None), ("profile", ACTIVE), ("availability", AVAILABLE)],
            "amazon.nova-lite-v1:0: not offered by Bedrock in this region",
        ),
        (
            [
                ("model", "ACTIVE"),
                ("availability", AVAILABLE),
                ("profile", ACTIVE),
                ("availability", REFUSED),
            ],
            "global.anthropic.claude-haiku-4-5-20251001-v1:0: not enabled for this account "
            "(authorization NOT_AUTHORIZED, entitlement NOT_AVAILABLE): enable it in the Bedrock console",
        ),
        (
            [("model", "LEGACY"), ("profile", ACTIVE), ("availability", AVAILABLE)],
            "amazon.nova-lite-v1:0: the model is LEGACY",
        ),
    ],
    ids=["both callable", "not offered", "not enabled", "legacy"],
)
def test_bedrock_models_must_exist_take_on_demand_calls_and_be_enabled(
    deployment: Deployment, answers: list[tuple[str, Any]], detail: str | None
) -> None:
    bedrock: Any = boto3.client("bedrock", region_name=REGION)
    deployment._clients["bedrock"] = bedrock
    deployment._settings["price_table"] = None  # the packaged table: two Bedrock models
    deployment._settings["default_model"] = "none"
    stub = Stubber(bedrock)
    for kind, answer in answers:
        if kind == "profile":
            stub.add_response(
                "get_inference_profile",
                {
                    "inferenceProfileName": "p",
                    "inferenceProfileArn": "arn:aws:bedrock:us-east-1:123456789012:inference-profile/p",
                    "models": [{"modelArn": "arn:aws:bedrock:us-east-1::foundation-model/m"}],
                    "inferenceProfileId": "p",
                    "type": "SYSTEM_DEFINED",
                    **answer,
                },
            )
        elif kind == "availability":
            stub.add_response("get_foundation_model_availability", answer)
        elif answer is None:
            stub.add_client_error("get_foundation_model", "ResourceNotFoundException", "no such model")
        else:
            stub.add_response(
                "get_foundation_model",
                {
                    "modelDetails": {
                        "modelArn": "arn:aws:bedrock:us-east-1::foundation-model/m",
                        "modelId": "m",
                        "modelLifecycle": {"status": answer},
                        "inferenceTypesSupported": ["ON_DEMAND"],
                    }
                },
            )
    with stub:
        [result] = run_checks(deployment, only={"models"})
    stub.assert_no_pending_responses()
    assert result.ok is (detail is None), result
    if detail is not None:
        assert result.detail == detail


# ---- the doctor's policy (infra/operators.py): granted = called, by action

# Endpoint prefixes whose IAM service prefix differs.
_IAM_PREFIX = {"monitoring": "cloudwatch", "api.ecr": "ecr"}
CALLED: set[str] = set()


@pytest.fixture(autouse=True)
def _recorded() -> Iterator[None]:
    """Every call the doctor's own clients make (steward.adapters.aws builds them), as IAM
    names its action; the module's last test compares them with the policy."""

    def hook(client: Any) -> None:
        # Only the clients the doctor's adapter builds, not the test's own set-up's.
        if not any(frame.filename.endswith("adapters/deployment.py") for frame in inspect.stack()):
            return
        prefix = client.meta.service_model.endpoint_prefix

        def record(model: Any, **_: Any) -> None:
            CALLED.add(f"{_IAM_PREFIX.get(prefix, prefix)}:{model.name}")

        client.meta.events.register("before-call.*.*", record)

    aws_adapter.CLIENT_HOOKS.append(hook)
    yield
    aws_adapter.CLIENT_HOOKS.remove(hook)


def test_the_doctor_policy_grants_the_actions_its_reads_call() -> None:
    """Runs last in this module: every action the tests above saw the doctor call is in
    DoctorPolicy, and every action of the policy was called but for those moto cannot serve
    here (Bedrock's catalogue is stubbed on a client of the test's own; the relay's check,
    which signs with the capability key, runs against the local stack in test_doctor.py; the
    stack's resources name its functions and schedules, which moto's CloudFormation does not
    build, so the tests give their names)."""
    from infra.operators import DOCTOR_READS  # noqa: PLC0415

    assert CALLED, "no doctor call was recorded"
    assert set(DOCTOR_READS) >= CALLED, sorted(CALLED - set(DOCTOR_READS))
    not_here = {
        "bedrock:GetFoundationModel",
        "bedrock:GetInferenceProfile",
        "bedrock:GetFoundationModelAvailability",
        "kms:Sign",
        "cloudformation:ListStackResources",
    }
    assert set(DOCTOR_READS) - CALLED == not_here, sorted(set(DOCTOR_READS) - CALLED)
