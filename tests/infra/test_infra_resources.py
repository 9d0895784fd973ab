"""Each resource family of the stack is present and configured as docs/architecture.md says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from steward.domain.routes import CONSOLE_PREFIX, RELAY_BINARY_MEDIA_TYPES
from steward.queues import HEARTBEAT
from steward.tables import ALL_TABLES, TableSpec

from infra.api import CLI_CALLBACK
from infra.functions import TIMEOUTS
from infra.relay import DEFAULT_QUOTA_SECONDS, RELAY_TIMEOUT_SECONDS, bedrock_read_timeout, relay_timeout
from infra.runner import CPU, EPHEMERAL_GIB, MEMORY_MIB
from tests.infra.helpers import ROOT, function_id, of_type, render, statements_of_role

PREFIX = "steward-"


def _expected_table(spec: TableSpec) -> dict[str, Any]:
    """`spec` in CloudFormation's shape, from the same boto3 arguments the local stack uses."""
    kwargs = spec.create_table_kwargs(PREFIX)
    return {
        "TableName": kwargs["TableName"],
        "KeySchema": kwargs["KeySchema"],
        "AttributeDefinitions": sorted(kwargs["AttributeDefinitions"], key=lambda a: a["AttributeName"]),
        "GlobalSecondaryIndexes": sorted(
            kwargs.get("GlobalSecondaryIndexes", []), key=lambda i: i["IndexName"]
        ),
        "TimeToLiveSpecification": {"AttributeName": spec.ttl_attribute, "Enabled": True}
        if spec.ttl_attribute
        else None,
    }


def test_tables_equal_the_definitions_in_steward_tables(resources: dict[str, Any]) -> None:
    tables = {t["Properties"]["TableName"]: t for t in of_type(resources, "AWS::DynamoDB::Table").values()}
    assert set(tables) == {spec.physical_name(PREFIX) for spec in ALL_TABLES}
    for spec in ALL_TABLES:
        table = tables[spec.physical_name(PREFIX)]
        props = table["Properties"]
        actual = {
            "TableName": props["TableName"],
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]),
            "GlobalSecondaryIndexes": sorted(
                props.get("GlobalSecondaryIndexes", []), key=lambda i: i["IndexName"]
            ),
            "TimeToLiveSpecification": props.get("TimeToLiveSpecification"),
        }
        assert actual == _expected_table(spec), spec.logical_name
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["DeletionProtectionEnabled"] is True  # the context default
        assert table["DeletionPolicy"] == "Retain"


def test_artifact_bucket_is_encrypted_private_tls_only_with_a_lifecycle(resources: dict[str, Any]) -> None:
    buckets = of_type(resources, "AWS::S3::Bucket")
    (artifacts_id,) = [k for k in buckets if k.startswith("StorageArtifacts")]
    props = buckets[artifacts_id]["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"
    ] == {"SSEAlgorithm": "AES256"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    (rule,) = props["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled"
    assert rule["ExpirationInDays"] > 0
    assert rule["Prefix"] == "artifacts/"  # the plans' kept documents (`plans/`) stay
    policies = [
        p
        for p in of_type(resources, "AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": artifacts_id}
    ]
    (policy,) = policies
    (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_capability_key_is_an_asymmetric_p256_signing_key(resources: dict[str, Any]) -> None:
    (key,) = of_type(resources, "AWS::KMS::Key").values()
    assert key["Properties"]["KeySpec"] == "ECC_NIST_P256"
    assert key["Properties"]["KeyUsage"] == "SIGN_VERIFY"


def test_secrets_for_the_app_key_and_the_webhook_secret(resources: dict[str, Any]) -> None:
    secrets = of_type(resources, "AWS::SecretsManager::Secret")
    assert len(secrets) == 2
    assert any(k.startswith("StorageGitHubPrivateKey") for k in secrets)
    assert any(k.startswith("StorageWebhookSecret") for k in secrets)


def test_http_api_routes_the_client_api_behind_jwt_and_runtime_routes_outside(
    resources: dict[str, Any],
) -> None:
    (authorizer,) = of_type(resources, "AWS::ApiGatewayV2::Authorizer").values()
    assert authorizer["Properties"]["AuthorizerType"] == "JWT"
    assert "cognito-idp" in json.dumps(authorizer["Properties"]["JwtConfiguration"]["Issuer"])
    integrations = of_type(resources, "AWS::ApiGatewayV2::Integration")
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in of_type(resources, "AWS::ApiGatewayV2::Route").values()
    }
    assert set(routes) == {
        "ANY /v1/{proxy+}",
        "ANY /v1/runtime/{proxy+}",
        f"GET {CONSOLE_PREFIX}",
        f"GET {CONSOLE_PREFIX}/{{proxy+}}",
    }
    assert routes["ANY /v1/{proxy+}"]["AuthorizationType"] == "JWT"
    for key in ("ANY /v1/runtime/{proxy+}", f"GET {CONSOLE_PREFIX}", f"GET {CONSOLE_PREFIX}/{{proxy+}}"):
        assert routes[key]["AuthorizationType"] == "NONE", key
        assert "AuthorizerId" not in routes[key], key
    # No default authorizer on the API that could apply to a route naming none.
    (http_api,) = of_type(resources, "AWS::ApiGatewayV2::Api").values()
    assert not {"AuthorizerId", "AuthorizationType"} & set(http_api["Properties"])

    def target(route: dict[str, Any]) -> str:
        integration_id = route["Target"]["Fn::Join"][1][1]["Ref"]
        return render(integrations[integration_id]["Properties"]["IntegrationUri"])

    assert function_id(resources, "api") in target(routes["ANY /v1/{proxy+}"])
    assert function_id(resources, "runtime") in target(routes["ANY /v1/runtime/{proxy+}"])
    # The console is served by the API function (steward.api.console).
    assert function_id(resources, "api") in target(routes[f"GET {CONSOLE_PREFIX}"])
    assert function_id(resources, "api") in target(routes[f"GET {CONSOLE_PREFIX}/{{proxy+}}"])
    # and API Gateway may invoke it for each of its routes.
    source_arns = {
        render(p["Properties"]["SourceArn"]).rsplit("/*/*", 1)[1]
        for p in of_type(resources, "AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id(resources, "api"), "Arn"]}
    }
    assert source_arns == {"/v1/{proxy+}", CONSOLE_PREFIX, f"{CONSOLE_PREFIX}/{{proxy+}}"}


def _console_url(resources: dict[str, Any]) -> dict[str, Any]:
    (api_id,) = of_type(resources, "AWS::ApiGatewayV2::Api")
    return {"Fn::Join": ["", [{"Fn::GetAtt": [api_id, "ApiEndpoint"]}, f"{CONSOLE_PREFIX}/"]]}


def test_cognito_has_a_hosted_ui_domain_and_a_console_client_for_code_and_pkce(
    resources: dict[str, Any],
) -> None:
    (pool_id,) = of_type(resources, "AWS::Cognito::UserPool")
    (domain,) = of_type(resources, "AWS::Cognito::UserPoolDomain").values()
    assert domain["Properties"]["UserPoolId"] == {"Ref": pool_id}
    # The default prefix: the stack's name and its stack id's UUID (no context given).
    assert domain["Properties"]["Domain"] == {
        "Fn::Join": ["-", ["steward", {"Fn::Select": [2, {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]}]]
    }
    clients = of_type(resources, "AWS::Cognito::UserPoolClient")
    (console_id,) = [k for k in clients if k.startswith("ApiUsersConsole")]
    (cli_id,) = [k for k in clients if k.startswith("ApiUsersCli")]
    console = clients[console_id]["Properties"]
    assert console["GenerateSecret"] is False
    assert console["AllowedOAuthFlows"] == ["code"]
    assert console["AllowedOAuthFlowsUserPoolClient"] is True
    assert console["AllowedOAuthScopes"] == ["openid", "email"]
    assert console["ExplicitAuthFlows"] == ["ALLOW_REFRESH_TOKEN_AUTH"]  # no password flows
    assert console["CallbackURLs"] == [_console_url(resources)]
    assert console["LogoutURLs"] == [_console_url(resources)]
    assert clients[cli_id]["Properties"]["CallbackURLs"] == [CLI_CALLBACK]
    # Both clients' ID tokens pass the authorizer.
    (authorizer,) = of_type(resources, "AWS::ApiGatewayV2::Authorizer").values()
    assert authorizer["Properties"]["JwtConfiguration"]["Audience"] == [{"Ref": cli_id}, {"Ref": console_id}]
    hosted_ui = ["https://", {"Ref": next(iter(of_type(resources, "AWS::Cognito::UserPoolDomain")))}]
    region = [".auth.", {"Ref": "AWS::Region"}]
    env = resources[function_id(resources, "api")]["Properties"]["Environment"]["Variables"]
    assert {k: v for k, v in env.items() if k.startswith("STEWARD_CONSOLE_")} == {
        "STEWARD_CONSOLE_SIGN_IN": "oidc",
        "STEWARD_CONSOLE_CLIENT_ID": {"Ref": console_id},
        "STEWARD_CONSOLE_AUTHORIZE_URL": {
            "Fn::Join": ["", [*hosted_ui, *region, ".amazoncognito.com/oauth2/authorize"]]
        },
        "STEWARD_CONSOLE_TOKEN_URL": {
            "Fn::Join": ["", [*hosted_ui, *region, ".amazoncognito.com/oauth2/token"]]
        },
    }
    # Only the API function serves the console; the heartbeat links to it (the status comment).
    for name in ("runtime", "relay", "webhook", "scheduler", "heartbeat", "reaper"):
        variables = resources[function_id(resources, name)]["Properties"]["Environment"]["Variables"]
        console = {k for k in variables if k.startswith("STEWARD_CONSOLE_")}
        assert console == ({"STEWARD_CONSOLE_URL"} if name == "heartbeat" else set()), name


def test_console_url_is_an_output(template: Any, resources: dict[str, Any]) -> None:
    assert template.to_json()["Outputs"]["ConsoleUrl"]["Value"] == _console_url(resources)


def test_relay_rest_api_streams_event_streams_with_a_raised_timeout(resources: dict[str, Any]) -> None:
    (api,) = of_type(resources, "AWS::ApiGateway::RestApi").values()
    assert api["Properties"]["BinaryMediaTypes"] == list(RELAY_BINARY_MEDIA_TYPES) == ["*/*"]
    methods = of_type(resources, "AWS::ApiGateway::Method").values()
    assert methods
    for method in methods:
        integration = method["Properties"]["Integration"]
        assert integration["TimeoutInMillis"] == RELAY_TIMEOUT_SECONDS * 1000
        assert function_id(resources, "relay") in render(integration["Uri"])
    assert TIMEOUTS["relay"] >= RELAY_TIMEOUT_SECONDS


def test_loop_schedules_queue_dlq_and_partial_batch_responses(resources: dict[str, Any]) -> None:
    schedules = of_type(resources, "AWS::Scheduler::Schedule").values()
    targets = {render(s["Properties"]["Target"]["Arn"]) for s in schedules}
    assert targets == {f"<{function_id(resources, n)}.Arn>" for n in ("scheduler", "reaper")}
    queues = {
        q["Properties"]["QueueName"]: q["Properties"] for q in of_type(resources, "AWS::SQS::Queue").values()
    }
    queue = queues[HEARTBEAT.physical_name(PREFIX)]
    assert queue["FifoQueue"] is True
    assert queue["ContentBasedDeduplication"] is HEARTBEAT.content_based_deduplication
    assert queue["VisibilityTimeout"] >= 6 * TIMEOUTS["heartbeat"]
    assert queue["MessageRetentionPeriod"] == HEARTBEAT.message_retention
    assert queue["RedrivePolicy"]["maxReceiveCount"] >= 1
    (mapping,) = of_type(resources, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["FunctionName"] == {"Ref": function_id(resources, "heartbeat")}
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_webhook_function_url_is_auth_none(resources: dict[str, Any]) -> None:
    (url,) = of_type(resources, "AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "NONE"
    assert url["Properties"]["TargetFunctionArn"] == {
        "Fn::GetAtt": [function_id(resources, "webhook"), "Arn"]
    }


def test_runner_task_definition_size_roles_egress_and_logs(resources: dict[str, Any]) -> None:
    (task,) = of_type(resources, "AWS::ECS::TaskDefinition").values()
    props = task["Properties"]
    assert props["RequiresCompatibilities"] == ["FARGATE"]
    assert (props["Cpu"], props["Memory"]) == (str(CPU), str(MEMORY_MIB))
    assert props["EphemeralStorage"] == {"SizeInGiB": EPHEMERAL_GIB}
    (container,) = props["ContainerDefinitions"]
    assert container["LogConfiguration"]["LogDriver"] == "awslogs"
    # No task role: the runtime holds no AWS credential (it works through /v1/runtime/*).
    assert "TaskRoleArn" not in props
    roles = of_type(resources, "AWS::IAM::Role")
    ecs_roles = [
        k
        for k, r in roles.items()
        if "ecs-tasks.amazonaws.com" in str(r["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert ecs_roles == [props["ExecutionRoleArn"]["Fn::GetAtt"][0]]
    execution = {
        a
        for s in statements_of_role(resources, ecs_roles[0])
        for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    }
    assert execution <= {
        "ecr:BatchCheckLayerAvailability",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchGetImage",
        "ecr:GetAuthorizationToken",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    }
    (group,) = of_type(resources, "AWS::EC2::SecurityGroup").values()
    assert group["Properties"]["SecurityGroupEgress"] == [
        {"CidrIp": "0.0.0.0/0", "Description": "HTTPS", "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}
    ]
    assert "SecurityGroupIngress" not in group["Properties"]
    for log_group in of_type(resources, "AWS::Logs::LogGroup").values():
        assert log_group["Properties"]["RetentionInDays"] > 0


def test_context_oidc_issuer_replaces_the_user_pool_the_console_follows_it_and_deletion_protection_can_be_off(
    fake_layers: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from aws_cdk import App  # noqa: PLC0415 - jsii was started by the conftest
    from aws_cdk.assertions import Template  # noqa: PLC0415

    from infra.app import build  # noqa: PLC0415

    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context |= {
        "oidcIssuer": "https://issuer.example.com",
        "oidcAudience": "steward",
        "consoleAuthorizeUrl": "https://issuer.example.com/authorize",
        "consoleTokenUrl": "https://issuer.example.com/token",
        "deletionProtection": "false",
    }
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out-oidc")), context=context)
    resources = Template.from_stack(build(app, fake_layers)).to_json()["Resources"]
    assert not of_type(resources, "AWS::Cognito::UserPool")
    assert not of_type(resources, "AWS::Cognito::UserPoolDomain")
    assert not of_type(resources, "AWS::Cognito::UserPoolClient")
    env = resources[function_id(resources, "api")]["Properties"]["Environment"]["Variables"]
    assert {k: v for k, v in env.items() if k.startswith("STEWARD_CONSOLE_")} == {
        "STEWARD_CONSOLE_SIGN_IN": "oidc",
        "STEWARD_CONSOLE_CLIENT_ID": "steward",
        "STEWARD_CONSOLE_AUTHORIZE_URL": "https://issuer.example.com/authorize",
        "STEWARD_CONSOLE_TOKEN_URL": "https://issuer.example.com/token",
    }
    (authorizer,) = of_type(resources, "AWS::ApiGatewayV2::Authorizer").values()
    assert authorizer["Properties"]["JwtConfiguration"] == {
        "Issuer": "https://issuer.example.com",
        "Audience": ["steward"],
    }
    for table in of_type(resources, "AWS::DynamoDB::Table").values():
        assert table["Properties"]["DeletionProtectionEnabled"] is False
        assert table["DeletionPolicy"] == "Delete"


OWN_PRICES = {
    "version": "mine-1",
    "models": {
        "my-ollama/coder": {
            "provider": "openai",
            "provider_model": "coder-7b",
            "base_url": "https://llm.example.com/v1",
            "api_key_secret": "my-llm-key",
            "input_per_mtok": 3,
            "output_per_mtok": 15,
            "max_output_tokens": 4096,
        },
        "amazon.nova-pro-v1:0": {
            "provider": "bedrock",
            "input_per_mtok": 0.8,
            "output_per_mtok": 3.2,
            "max_output_tokens": 5000,
        },
        # a cross-region inference profile (on-demand calls of many models need one)
        "us.amazon.nova-lite-v1:0": {
            "provider": "bedrock",
            "input_per_mtok": 0.06,
            "output_per_mtok": 0.24,
            "max_output_tokens": 5000,
        },
    },
}


def test_context_price_table_reaches_the_functions_that_read_it_and_the_relays_grants(
    fake_layers: Path, tmp_path_factory: pytest.TempPathFactory, resources: dict[str, Any]
) -> None:
    from aws_cdk import App  # noqa: PLC0415 - jsii was started by the conftest
    from aws_cdk.assertions import Template  # noqa: PLC0415

    from infra.app import build  # noqa: PLC0415

    def env(of: dict[str, Any], function: str) -> dict[str, Any]:
        return dict(of[function_id(of, function)]["Properties"]["Environment"]["Variables"])

    for function in ("relay", "runtime", "api"):  # without the context: the packaged table only
        assert "STEWARD_PRICE_TABLE" not in env(resources, function)
    context = json.loads((ROOT / "cdk.json").read_text())["context"] | {"priceTable": OWN_PRICES}
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out-prices")), context=context)
    stack = build(app, fake_layers)
    app.synth()  # cdk-nag's findings without an acknowledgment fail here
    priced = Template.from_stack(stack).to_json()["Resources"]
    for function in ("relay", "runtime", "api"):
        assert json.loads(env(priced, function)["STEWARD_PRICE_TABLE"]) == OWN_PRICES, function
        # Lambda's whole environment of a function fits in 4 KiB.
        assert len(json.dumps(env(priced, function), separators=(",", ":")).encode()) < 4096, function
    for function in ("scheduler", "heartbeat", "reaper", "webhook"):
        assert "STEWARD_PRICE_TABLE" not in env(priced, function)
    statements = statements_of_role(
        priced, str(priced[function_id(priced, "relay")]["Properties"]["Role"]["Fn::GetAtt"][0])
    )
    text = json.dumps(statements)
    assert "foundation-model/amazon.nova-pro-v1:0" in text  # a Bedrock model of one's own
    # an inference profile: the profile in the stack's region and account, and its model in
    # whichever region of its geography it routes the call to (cdk-nag acknowledges just that)
    assert "inference-profile/us.amazon.nova-lite-v1:0" in text
    assert ":bedrock:*::foundation-model/amazon.nova-lite-v1:0" in text
    assert "secretsmanager:GetSecretValue" in text
    assert "my-llm-key-*" in text


# (the priceTable context, what the synth's error names)
BAD_PRICE_CONTEXTS: list[tuple[object, str]] = [
    ("{not json", "not valid JSON"),
    ({"version": "x"}, "models"),
    ({"version": "x", "models": {"m": {"provider": "openai", "input_per_mtok": 1}}}, "models.m"),
    (
        {
            "version": "x",
            "models": {
                "m": {"provider": "openai", "input_per_mtok": 1, "output_per_mtok": 1, "max_output_tokens": 8}
            },
        },
        "base_url",
    ),
    (
        {
            "version": "x",
            "models": {
                "m": {
                    "provider": "scripted",
                    "provider_model": "rm -rf",
                    "input_per_mtok": 1,
                    "output_per_mtok": 1,
                    "max_output_tokens": 8,
                }
            },
        },
        "unknown scripted policy",
    ),
    ("/nonexistent/prices.json", "cannot read"),
    (["a", "list"], "a JSON object"),
    (
        {"version": "x", "models": {f"m{i}": OWN_PRICES["models"]["my-ollama/coder"] for i in range(20)}},
        "bytes",
    ),
]


def test_a_context_price_table_that_cannot_work_fails_the_synth_naming_it() -> None:
    from infra.stack import price_table_setting  # noqa: PLC0415 - imports aws_cdk

    for value, words in BAD_PRICE_CONTEXTS:
        with pytest.raises(ValueError, match=r"^context priceTable: ") as refused:
            price_table_setting(value)
        assert words in str(refused.value), (value, str(refused.value))
    assert price_table_setting(None) is None
    assert json.loads(price_table_setting(json.dumps(OWN_PRICES)) or "") == OWN_PRICES


def test_the_stack_synthesizes_for_a_concrete_account_and_region(
    fake_layers: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cdk deploy` with credentials gives the app an account and a region: ARNs render as
    literals there, and every cdk-nag acknowledgment must still match (else synthesis fails)."""
    from aws_cdk import App  # noqa: PLC0415
    from aws_cdk.assertions import Template  # noqa: PLC0415

    from infra.app import build  # noqa: PLC0415

    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
    monkeypatch.setenv("CDK_DEFAULT_REGION", "eu-west-1")
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    context["availability-zones:account=123456789012:region=eu-west-1"] = [
        "eu-west-1a",
        "eu-west-1b",
        "eu-west-1c",
    ]
    # and with the runtimes in public subnets (no NAT gateway), the other network it offers;
    # as a second stack of its own name, for a GitHub App of its own name
    # and before the relay's timeout quota is raised
    context |= {
        "runnerNetwork": "public",
        "stackName": "StewardTwo",
        "githubAppSlug": "acme-steward",
        "relayTimeoutSeconds": "29",
    }
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out.env")), context=context)
    stack = build(app, fake_layers)
    app.synth()  # cdk-nag's findings without an acknowledgment fail here
    assert stack.stack_name == "StewardTwo"
    resources = dict(Template.from_stack(stack).to_json()["Resources"])
    assert len(of_type(resources, "AWS::Lambda::Function")) >= 7
    assert not of_type(resources, "AWS::EC2::NatGateway")
    assert not of_type(resources, "AWS::EC2::EIP")
    tables = [r["Properties"]["TableName"] for r in of_type(resources, "AWS::DynamoDB::Table").values()]
    assert tables
    assert all(name.startswith("stewardtwo-") for name in tables), tables
    for function in ("heartbeat", "reaper"):
        variables = resources[function_id(resources, function)]["Properties"]["Environment"]["Variables"]
        assert variables["STEWARD_RUNNER_PUBLIC_IP"] == "true"
    heartbeat = resources[function_id(resources, "heartbeat")]["Properties"]["Environment"]["Variables"]
    assert heartbeat["STEWARD_GITHUB_APP_SLUG"] == "acme-steward"  # `@acme-steward` asks for a round
    assert "/console/" in json.dumps(heartbeat["STEWARD_CONSOLE_URL"])  # the status comment's link
    # The relay's deadlines under API Gateway's default 29 s, still ordered from the provider out.
    relay = resources[function_id(resources, "relay")]["Properties"]
    integrations = {
        m["Properties"]["Integration"].get("TimeoutInMillis")
        for m in of_type(resources, "AWS::ApiGateway::Method").values()
        if m["Properties"].get("Integration", {}).get("Type") == "AWS_PROXY"
    }
    assert integrations == {29000}
    assert relay["Timeout"] == 29
    assert relay["Environment"]["Variables"]["STEWARD_BEDROCK_READ_TIMEOUT_SECONDS"] == "23"  # under 29


def test_by_default_the_runtimes_run_in_private_subnets_behind_one_nat_gateway(
    resources: dict[str, Any],
) -> None:
    assert len(of_type(resources, "AWS::EC2::NatGateway")) == 1
    variables = resources[function_id(resources, "heartbeat")]["Properties"]["Environment"]["Variables"]
    assert variables["STEWARD_RUNNER_PUBLIC_IP"] == "false"


def test_the_account_wide_api_gateway_logging_role_survives_a_destroy(resources: dict[str, Any]) -> None:
    """API Gateway's CloudWatch role and account setting are shared by every REST API of the
    account and region: `cdk destroy` retains them."""
    shared = {
        **of_type(resources, "AWS::ApiGateway::Account"),
        **{k: v for k, v in of_type(resources, "AWS::IAM::Role").items() if "CloudWatchRole" in k},
    }
    assert len(shared) == 2
    assert {k: v.get("DeletionPolicy") for k, v in shared.items()} == dict.fromkeys(shared, "Retain")


def test_the_deadlines_of_a_model_call_are_ordered_from_the_provider_out() -> None:
    """Bedrock's read < the relay function's timeout <= the route's integration timeout < the
    runner's wait: each layer answers (an error included) before the one around it gives up.
    (The OpenAI-compatible provider serves local models, whose answers may take longer.)"""
    from steward.adapters.providers import bedrock  # noqa: PLC0415
    from steward.adapters.runtime_api import MODEL_TIMEOUT_SECONDS  # noqa: PLC0415

    assert bedrock.READ_TIMEOUT_SECONDS < TIMEOUTS["relay"] <= RELAY_TIMEOUT_SECONDS < MODEL_TIMEOUT_SECONDS
    assert bedrock_read_timeout(RELAY_TIMEOUT_SECONDS) == bedrock.READ_TIMEOUT_SECONDS  # the default's
    for seconds in range(DEFAULT_QUOTA_SECONDS, RELAY_TIMEOUT_SECONDS + 1):  # every context value
        assert bedrock_read_timeout(relay_timeout(str(seconds))) < seconds < MODEL_TIMEOUT_SECONDS
    for bad in ("28", "301", "ten", "29.5"):
        with pytest.raises(ValueError, match="context relayTimeoutSeconds"):
            relay_timeout(bad)


def test_the_runner_images_build_context_is_what_its_dockerfile_copies(
    template: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The staged image asset holds the files the Dockerfile copies and nothing else (no
    virtualenv, cache, test or build output): small, and unchanged unless the runner's own
    files change."""
    del template  # synthesized, its assets staged
    staged = [
        path.parent.parent.parent
        for path in tmp_path_factory.getbasetemp().glob("cdk.out*/asset.*/containers/runner/Dockerfile")
    ]
    assert staged
    for asset in staged:
        top = sorted(p.name for p in asset.iterdir())
        assert top == ["README.md", "containers", "layers", "pyproject.toml", "requirements.lock"], top
        assert not list(asset.rglob("__pycache__"))
        copied = (ROOT / "containers" / "runner" / "Dockerfile").read_text()
        for line in (line for line in copied.splitlines() if line.startswith("COPY ")):
            for source in line.split()[1:-1]:
                assert (asset / source).exists(), source


def test_the_dashboard_charts_the_refusals_the_api_counts() -> None:
    """The API counts its refusals (`Refused<status>`), and each name it emits is on the
    dashboard: an unknown route and a request without a user, through the API's own app."""
    from steward.api.app import create_app  # noqa: PLC0415

    from infra.monitoring import METRICS  # noqa: PLC0415

    emitted: list[str] = []

    class Recorder:
        def add_metric(self, name: str, unit: Any, value: float, resolution: Any = None) -> None:
            emitted.append(name)

    app = create_app(lambda: pytest.fail("no route here reaches the services"), Recorder())  # type: ignore[arg-type]
    for path in ("/v1/no-such-route", "/v1/plans"):
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": path,
            "rawQueryString": "",
            "headers": {},
            "requestContext": {
                "http": {"method": "GET", "path": path, "sourceIp": "192.0.2.1"},
                "stage": "$default",
                "requestId": "r",
            },
            "isBase64Encoded": False,
        }
        app.resolve(event, None)  # type: ignore[arg-type]
    assert emitted == ["Refused404", "Refused401"]
    assert set(emitted) <= set(METRICS["api"])
    assert {"Refused401", "Refused404"} <= set(METRICS["relay"]) & set(METRICS["webhook"])
