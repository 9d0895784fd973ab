"""Who can reach what: the unauthenticated entries are an explicit allowlist, each role
holds exactly what its code calls, each function gets exactly its settings, cdk-nag and
cfn-lint raise nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from steward.config import FUNCTIONS, SETTINGS, settings_for

from infra.monitoring import METRICS
from infra.permissions import INDEX_QUERIES, TABLE_ACCESS
from tests.infra.helpers import (
    ROOT,
    actions_by_resource,
    as_list,
    function_id,
    of_type,
    role_id,
    statements_of_role,
)

# Entries that API Gateway does not authenticate, and what authenticates them instead.
UNAUTHENTICATED = {
    ("function-url", "webhook"),  # the delivery's HMAC, checked by the handler
    ("http-route", "ANY /v1/runtime/{proxy+}"),  # ticket or capability, checked by the runtime function
    ("rest-method", "ANY /"),  # the relay: capability, checked by the relay
    ("rest-method", "ANY /{proxy+}"),
    # the console's static files and sign-in settings, fetched before sign-in (no data: the page
    # calls /v1/* with the ID token it gets)
    ("http-route", "GET /console"),
    ("http-route", "GET /console/{proxy+}"),
}
# AWS requires Resource "*" for these actions (no resource-level permissions).
STAR_RESOURCE_ALLOWED = {
    "ecs:ListTasks",
    "ecr:GetAuthorizationToken",
    "xray:PutTraceSegments",  # active tracing's, which AWS authorizes on * only
    "xray:PutTelemetryRecords",
}
MANAGED_POLICY_ALLOWED = {
    "{'Fn::Join': ['', ['arn:', {'Ref': 'AWS::Partition'}, "
    "':iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs']]}": "RelayRestApiCloudWatchRole",
    "{'Fn::Sub': 'arn:${AWS::Partition}:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole'}": (
        "CustomVpcRestrictDefaultSGCustomResourceProviderRole"
    ),
}


def test_unauthenticated_entries_are_exactly_the_allowlist(resources: dict[str, Any]) -> None:
    found: set[tuple[str, str]] = set()
    for url in of_type(resources, "AWS::Lambda::Url").values():
        if url["Properties"]["AuthType"] == "NONE":
            target = url["Properties"]["TargetFunctionArn"]["Fn::GetAtt"][0]
            found.add(("function-url", next(f for f in FUNCTIONS if function_id(resources, f) == target)))
    for route in of_type(resources, "AWS::ApiGatewayV2::Route").values():
        if route["Properties"].get("AuthorizationType", "NONE") == "NONE":
            found.add(("http-route", route["Properties"]["RouteKey"]))
    paths = {
        k: v["Properties"]["PathPart"] for k, v in of_type(resources, "AWS::ApiGateway::Resource").items()
    }
    for method in of_type(resources, "AWS::ApiGateway::Method").values():
        props = method["Properties"]
        if props["AuthorizationType"] == "NONE":
            parent = props["ResourceId"]
            path = "/" if "Fn::GetAtt" in parent else "/" + paths[parent["Ref"]]
            found.add(("rest-method", f"{props['HttpMethod']} {path}"))
    assert found == UNAUTHENTICATED
    # Nothing else is public: every Lambda permission is for a known caller.
    for permission in of_type(resources, "AWS::Lambda::Permission").values():
        principal = permission["Properties"]["Principal"]
        if principal == "*":
            props = permission["Properties"]
            # Function URLs need both: InvokeFunctionUrl, and InvokeFunction via the URL only.
            assert props.get("FunctionUrlAuthType") == "NONE" or props.get("InvokedViaFunctionUrl") is True
            assert permission["Properties"]["FunctionName"] == {
                "Fn::GetAtt": [function_id(resources, "webhook"), "Arn"]
            }
        else:
            assert principal == "apigateway.amazonaws.com"


def test_no_wildcard_actions_and_no_star_resource_except_where_aws_requires_it(
    resources: dict[str, Any],
) -> None:
    documents = [
        (k, p["Properties"]["PolicyDocument"]) for k, p in of_type(resources, "AWS::IAM::Policy").items()
    ]
    for role_key, role in of_type(resources, "AWS::IAM::Role").items():
        documents += [
            (role_key, inline["PolicyDocument"]) for inline in role["Properties"].get("Policies", [])
        ]
        for managed in role["Properties"].get("ManagedPolicyArns", []):
            # Only CDK's own: API Gateway's logging role, the default-SG custom resource's logs.
            assert role_key.startswith(MANAGED_POLICY_ALLOWED[str(managed)]), (role_key, managed)
    assert documents
    for where, document in documents:
        for statement in document["Statement"]:
            actions = as_list(statement["Action"])
            assert all("*" not in a for a in actions), (where, actions)
            if "*" in as_list(statement["Resource"]):
                assert set(actions) <= STAR_RESOURCE_ALLOWED, (where, actions)
                if "ecs:ListTasks" in actions:
                    assert "ecs:cluster" in str(statement["Condition"])


def _table_pairs(resources: dict[str, Any], function: str) -> set[tuple[str, str]]:
    tables = {
        t["Properties"]["TableName"].removeprefix("steward-"): k
        for k, t in of_type(resources, "AWS::DynamoDB::Table").items()
    }
    pairs = set()
    for spec, actions in TABLE_ACCESS[function].items():  # type: ignore[index]
        pairs |= {(a, f"<{tables[spec.logical_name]}.Arn>") for a in actions}
    for spec, indexes in INDEX_QUERIES.get(function, {}).items():  # type: ignore[call-overload]
        pairs |= {("dynamodb:Query", f"<{tables[spec.logical_name]}.Arn>/index/{i}") for i in indexes}
    return pairs


def _log_pairs(resources: dict[str, Any], function: str) -> set[tuple[str, str]]:
    """The function's own log group, and its traces (active tracing: X-Ray takes `*` only)."""
    fn = resources[function_id(resources, function)]
    assert fn["Properties"]["TracingConfig"] == {"Mode": "Active"}
    group = fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    return {
        ("logs:CreateLogStream", f"<{group}.Arn>"),
        ("logs:PutLogEvents", f"<{group}.Arn>"),
        ("xray:PutTraceSegments", "*"),
        ("xray:PutTelemetryRecords", "*"),
    }


def test_relay_role_holds_exactly_what_the_relay_calls(resources: dict[str, Any]) -> None:
    pairs = actions_by_resource(statements_of_role(resources, role_id(resources, "relay")))
    (key_id,) = of_type(resources, "AWS::KMS::Key")
    bedrock = {(a, r) for a, r in pairs if a.startswith("bedrock:")}
    # Claude Haiku 4.5 through its global inference profile: the profile, and its model
    # wherever the profile routes; Nova Lite in this region.
    expected_models = {
        "global.anthropic.claude-haiku-4-5-20251001-v1:0",
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "amazon.nova-lite-v1:0",
    }
    assert {r.rsplit("/", 1)[1] for _, r in bedrock} == expected_models
    # Converse only: the relay synthesizes a client's stream from one answer.
    assert {a for a, _ in bedrock} == {"bedrock:InvokeModel"}
    assert pairs - bedrock == (
        _table_pairs(resources, "relay")
        | _log_pairs(resources, "relay")
        | {("kms:GetPublicKey", f"<{key_id}.Arn>")}
    )
    # tasks: GetItem and UpdateItem; events: PutItem (an over-report's transaction); no secret.
    assert not any(a.startswith("secretsmanager:") for a, _ in pairs)


def test_every_role_holds_its_tables_and_only_its_services(resources: dict[str, Any]) -> None:
    # the API and the webhook receiver send a tick at a person's confirm, retry or ask
    allowed_services = {
        "api": {"dynamodb", "logs", "s3", "sqs"},
        "scheduler": {"dynamodb", "logs", "sqs"},
        "heartbeat": {"dynamodb", "logs", "sqs", "ecs", "iam", "secretsmanager"},
        "reaper": {"dynamodb", "logs", "ecs"},
        "relay": {"dynamodb", "logs", "kms", "bedrock"},
        "webhook": {"dynamodb", "logs", "secretsmanager", "sqs"},
        "runtime": {"dynamodb", "logs", "kms", "s3", "secretsmanager"},
    }
    for function in FUNCTIONS:
        pairs = actions_by_resource(statements_of_role(resources, role_id(resources, function)))
        dynamo = {p for p in pairs if p[0].startswith("dynamodb:")}
        assert dynamo == _table_pairs(resources, function), function
        assert {a.split(":")[0] for a, _ in pairs} <= allowed_services[function] | {"xray"}, function
        assert _log_pairs(resources, function) <= pairs, function  # every function is traced


def test_only_heartbeat_and_reaper_touch_runner_tasks_of_its_definition(resources: dict[str, Any]) -> None:
    (task_def_id,) = of_type(resources, "AWS::ECS::TaskDefinition")
    task_def = resources[task_def_id]["Properties"]
    for function in FUNCTIONS:
        pairs = actions_by_resource(statements_of_role(resources, role_id(resources, function)))
        ecs = {a for a, _ in pairs if a.startswith(("ecs:", "iam:"))}
        if function == "heartbeat":
            assert ecs == {
                "ecs:RunTask",
                "ecs:TagResource",
                "ecs:StopTask",
                "ecs:DescribeTasks",
                "ecs:ListTasks",
                "iam:PassRole",
            }
            assert {r for a, r in pairs if a == "ecs:RunTask"} == {f"<{task_def_id}>"}
            assert {r for a, r in pairs if a == "iam:PassRole"} == {
                f"<{task_def['ExecutionRoleArn']['Fn::GetAtt'][0]}.Arn>"
            }
        elif function == "reaper":
            assert ecs == {"ecs:StopTask", "ecs:DescribeTasks", "ecs:ListTasks"}
        else:
            assert ecs == set(), function


def test_every_setting_is_tagged_and_each_function_gets_exactly_its_own(resources: dict[str, Any]) -> None:
    for setting in SETTINGS:
        assert setting.functions, setting.env
        assert setting.doc, setting.env
    for function in FUNCTIONS:
        env = resources[function_id(resources, function)]["Properties"]["Environment"]["Variables"]
        mine = {s.env for s in settings_for(function)}
        required = {s.env for s in settings_for(function) if s.required}
        assert required <= set(env) <= mine, function
        assert not any(s.secret and s.env in env for s in SETTINGS), function


def test_dashboard_shows_every_metric_the_handlers_emit(resources: dict[str, Any]) -> None:
    (dashboard,) = of_type(resources, "AWS::CloudWatch::Dashboard").values()
    body = str(dashboard["Properties"]["DashboardBody"])
    sources = Path(ROOT, "layers", "steward", "python", "steward")
    literal = set()
    for path in sources.rglob("*_handler.py"):
        literal |= set(re.findall(r'add_metric\(name="(\w+)"', path.read_text()))
    shown = {m for names in METRICS.values() for m in names}
    assert literal <= shown
    for name in shown:
        assert f'"{name}"' in body, name
    alarms = {
        a["Properties"]["AlarmDescription"] for a in of_type(resources, "AWS::CloudWatch::Alarm").values()
    }
    assert "messages in the Heartbeat dead-letter queue" in alarms
    assert "the relay answered 5xx" in alarms
    assert any("expired" in a for a in alarms)
    assert any("more usage" in a for a in alarms)
    assert sum("raised" in a for a in alarms) == len(FUNCTIONS)


def test_a_request_the_relay_refused_to_the_runner_raises_an_alarm(resources: dict[str, Any]) -> None:
    from steward.runtime_handler import REFUSED_METRIC  # noqa: PLC0415 - only this test needs the handler

    assert REFUSED_METRIC in METRICS["runtime"]  # on the dashboard under the name the handler emits
    (alarm,) = [
        a["Properties"]
        for a in of_type(resources, "AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("MetricName") == REFUSED_METRIC
    ]
    assert alarm["Namespace"] == "Steward"
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "runtime"}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert "harness.json" in alarm["AlarmDescription"]


def test_cfn_lint_finds_nothing(template_file: Path) -> None:
    """The synthesized template is clean (W3005: CDK's own DependsOn, see the Makefile).
    cdk-nag ran already: an unacknowledged finding fails the session's synth."""
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    result = subprocess.run(
        [str(cfn_lint), "--ignore-checks=W3005", "--", str(template_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_api_may_list_the_bucket_so_a_missing_object_is_a_404_not_a_403(
    resources: dict[str, Any],
) -> None:
    """A GetObject or HeadObject of a missing key is 404 only for a reader allowed to list the
    bucket with no condition (those requests carry no `s3:prefix`)."""
    listing = [
        s
        for s in statements_of_role(resources, role_id(resources, "api"))
        if "s3:ListBucket" in as_list(s["Action"])
    ]
    assert listing
    assert all("Condition" not in s for s in listing)


def test_the_operator_policies_are_the_brake_the_link_and_the_doctors_reads(
    template: Any, resources: dict[str, Any]
) -> None:
    """Three managed policies for operators' own credentials (infra/operators.py): the
    doctor's holds exactly DOCTOR_READS (tests/unit/test_doctor_aws.py checks them against
    what it calls), `*` only for the reads AWS scopes no narrower; none writes but the
    brake's and the link's single items."""
    from infra.operators import DOCTOR_READS, DOCTOR_UNSCOPED  # noqa: PLC0415

    policies = {
        name: [p for k, p in of_type(resources, "AWS::IAM::ManagedPolicy").items() if name in k]
        for name in ("BrakeOperatorPolicy", "LinkOperatorPolicy", "DoctorPolicy")
    }
    assert all(len(found) == 1 for found in policies.values()), policies
    statements = {
        name: found[0]["Properties"]["PolicyDocument"]["Statement"] for name, found in policies.items()
    }
    actions = {name: {a for s in st for a in as_list(s["Action"])} for name, st in statements.items()}
    assert (
        actions["BrakeOperatorPolicy"]
        == actions["LinkOperatorPolicy"]
        == {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    )
    assert actions["DoctorPolicy"] == set(DOCTOR_READS)
    for statement in statements["DoctorPolicy"]:
        if "*" in as_list(statement["Resource"]):
            assert set(as_list(statement["Action"])) == set(DOCTOR_UNSCOPED)
    outputs = set(template.to_json()["Outputs"])
    assert {"BrakeOperatorPolicyArn", "LinkOperatorPolicyArn", "DoctorPolicyArn"} <= outputs
