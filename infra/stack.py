"""The Stack: composes one Construct per capability and wires the functions' environments
(from `steward.config.SETTINGS`) and permissions (each role exactly what its code calls)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from aws_cdk import Acknowledgment, CfnOutput, CfnParameter, Duration, Stack, Token, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct
from steward.adapters.price_file import load_price_table
from steward.config import Function
from steward.domain.prices import PriceTable

from infra.api import Api
from infra.functions import TIMEOUTS, StewardFunction, build_layers
from infra.loop import TICK_SECONDS, HeartbeatQueue, Loop
from infra.monitoring import Monitoring
from infra.operators import Operators
from infra.permissions import INDEX_QUERIES, QUERY, TABLE_ACCESS
from infra.relay import Relay, bedrock_read_timeout, relay_timeout
from infra.runner import CONTAINER, Runner
from infra.storage import Storage
from infra.webhook import Webhook

# Lambda holds at most 4 KiB of environment per function, every variable together.
PRICE_TABLE_MAX_BYTES = 2048


def price_table_setting(value: object) -> str | None:
    """STEWARD_PRICE_TABLE for the functions from the `priceTable` context: a JSON object
    (cdk.json), its JSON text, or the path of a JSON file, in the packaged table's shape
    (`steward.domain.prices`). The functions get the JSON itself: they have no file of the
    deployer's to read. Checked at synth: a table the relay would refuse fails here, named."""
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        text = json.dumps(value)
    elif isinstance(value, str) and value.strip().startswith("{"):
        text = value
    elif isinstance(value, str):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"context priceTable: cannot read {value} ({exc.strerror})") from None
    else:
        raise ValueError("context priceTable: a JSON object, its text, or a JSON file's path")
    try:
        load_price_table(text.strip())
        compact = json.dumps(json.loads(text), separators=(",", ":"))
    except ValueError as exc:
        raise ValueError(f"context priceTable: {exc}") from None
    if len(compact.encode()) > PRICE_TABLE_MAX_BYTES:
        raise ValueError(
            f"context priceTable: {len(compact.encode())} bytes of JSON, more than the "
            f"{PRICE_TABLE_MAX_BYTES} a Lambda environment has room for: keep only your own entries"
        )
    return compact


# A cross-region inference profile's id: a geography before the model's own id
# (`us.anthropic.claude-...`). Many models take on-demand calls only through one.
INFERENCE_PROFILE = re.compile(r"^(us|us-gov|eu|apac|jp|au|ca|global)\.(.+)$")


def priced_bedrock_models(table: PriceTable) -> list[str]:
    """The Bedrock model ids the relay may invoke: every Bedrock entry of the table."""
    return sorted({e.provider_model_for(m) for m, e in table.models.items() if e.provider == "bedrock"})


def provider_key_secrets(table: PriceTable) -> list[str]:
    """Secrets Manager ids the table names for OpenAI-compatible providers' keys."""
    return sorted({e.api_key_secret for e in table.models.values() if e.api_key_secret})


class StewardStack(Stack):
    def __init__(self, scope: Construct, id: str, *, layer_dir: Path, **kwargs: object) -> None:
        super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
        ctx = self.node.try_get_context
        prefix = str(ctx("tablePrefix") or f"{id.lower()}-")
        deletion_protection = str(ctx("deletionProtection") or "true").lower() == "true"
        retention = logs.RetentionDays.ONE_MONTH

        app_id = CfnParameter(
            self,
            "GitHubAppId",
            type="String",
            default="",
            allowed_pattern="^[0-9]*$",
            description="The GitHub App's numeric id (empty until the App exists: see docs/guides/deploying.md)",
        )

        storage = Storage(self, "Storage", prefix=prefix, deletion_protection=deletion_protection)
        runner = Runner(self, "Runner", log_retention=retention, network=ctx("runnerNetwork"))
        api = Api(
            self,
            "Api",
            issuer=ctx("oidcIssuer"),
            audience=ctx("oidcAudience"),
            log_retention=retention,
            deletion_protection=deletion_protection,
            cognito_domain_prefix=ctx("cognitoDomainPrefix"),
            console_authorize_url=ctx("consoleAuthorizeUrl"),
            console_token_url=ctx("consoleTokenUrl"),
        )
        queue = HeartbeatQueue(
            self, "Heartbeat", prefix=prefix, heartbeat_timeout=Duration.seconds(TIMEOUTS["heartbeat"])
        )
        layers = build_layers(self, layer_dir)
        relay_seconds = relay_timeout(ctx("relayTimeoutSeconds"))

        env: dict[str, str] = {
            "STEWARD_TABLE_PREFIX": prefix,
            "STEWARD_ARTIFACTS_BUCKET": storage.artifacts.bucket_name,
            "STEWARD_CAPABILITY_KEY_ID": storage.capability_key.key_id,
            "STEWARD_GITHUB_APP_ID": app_id.value_as_string,
            "STEWARD_GITHUB_PRIVATE_KEY_SECRET_ID": storage.github_private_key.secret_arn,
            "STEWARD_WEBHOOK_SECRET_ID": storage.webhook_secret.secret_arn,
            "STEWARD_ECS_CLUSTER": runner.cluster.cluster_name,
            "STEWARD_RUNNER_TASK_DEFINITION": runner.task_definition.task_definition_arn,
            "STEWARD_RUNNER_CONTAINER": CONTAINER,
            "STEWARD_RUNNER_SUBNETS": ",".join(runner.subnets.subnet_ids),
            "STEWARD_RUNNER_SECURITY_GROUPS": runner.security_group.security_group_id,
            "STEWARD_RUNNER_PUBLIC_IP": "true" if runner.assign_public_ip else "false",
            "STEWARD_TICK_SECONDS": str(TICK_SECONDS),
            "STEWARD_LAUNCHER": "fargate",
            "STEWARD_API_URL": api.url,
            # The status comment on each pull request links the task's page in the console.
            "STEWARD_CONSOLE_URL": api.console_url,
            **api.console_settings,
            "STEWARD_BEDROCK_READ_TIMEOUT_SECONDS": str(bedrock_read_timeout(relay_seconds)),
        }
        prices = price_table_setting(ctx("priceTable"))
        if prices is not None:
            env["STEWARD_PRICE_TABLE"] = prices
        self.prices = load_price_table(prices)
        env |= self._context_settings()

        self.functions: dict[Function, StewardFunction] = {}

        def make(function: Function, timeout_seconds: int | None = None) -> StewardFunction:
            made = StewardFunction(
                self,
                f"{function.capitalize()}Function",
                function=function,
                layers=layers,
                environment=env,
                log_retention=retention,
                timeout_seconds=timeout_seconds,
            )
            for spec, actions in TABLE_ACCESS[function].items():
                made.role.add_to_policy(
                    iam.PolicyStatement(actions=list(actions), resources=[storage.tables[spec].table_arn])
                )
            # Query on exactly the indexes the code queries: an index ARN is no table's.
            for spec, indexes in INDEX_QUERIES.get(function, {}).items():
                assert set(indexes) <= {index.name for index in spec.indexes}, (function, indexes)
                arn = storage.tables[spec].table_arn
                made.role.add_to_policy(
                    iam.PolicyStatement(
                        actions=[QUERY], resources=[f"{arn}/index/{name}" for name in indexes]
                    )
                )
            self.functions[function] = made
            return made

        relay_fn = make("relay", relay_seconds)
        relay = Relay(
            self, "Relay", function=relay_fn.function, log_retention=retention, timeout_seconds=relay_seconds
        )
        env["STEWARD_RELAY_URL"] = relay.url
        for function in ("api", "runtime", "webhook", "scheduler", "reaper", "heartbeat"):
            make(function)  # type: ignore[arg-type]
        fns = {name: made.function for name, made in self.functions.items()}
        api.route(fns["api"], fns["runtime"])

        self._grant(storage, runner, queue)

        loop = Loop(
            self,
            "Loop",
            queue=queue,
            scheduler_function=fns["scheduler"],
            heartbeat_function=fns["heartbeat"],
            reaper_function=fns["reaper"],
        )
        webhook = Webhook(self, "Webhook", function=fns["webhook"])
        Monitoring(
            self,
            "Monitoring",
            functions=fns,
            dlqs={"Heartbeat": queue.dlq},
            relay_api=relay.api,
            alarm_topic_arn=ctx("alarmTopicArn"),
        )

        CfnOutput(self, "ApiUrl", value=api.url)
        CfnOutput(self, "ConsoleUrl", value=api.console_url, description="the web console")
        CfnOutput(self, "RelayUrl", value=relay.url)
        CfnOutput(self, "WebhookUrl", value=webhook.url.url, description="the GitHub App's webhook URL")
        CfnOutput(self, "GitHubPrivateKeySecret", value=storage.github_private_key.secret_arn)
        CfnOutput(self, "WebhookSecretArn", value=storage.webhook_secret.secret_arn)
        CfnOutput(self, "TablePrefix", value=prefix)
        # What operators attach to their own credentials for the operator commands.
        priced = priced_bedrock_models(self.prices)
        profiles = {m: found[2] for m in priced if (found := INFERENCE_PROFILE.match(m))}
        Operators(
            self,
            "Operators",
            storage=storage,
            functions=fns,
            schedules=[loop.tick, loop.reap],
            foundation_models=sorted({profiles.get(m, m) for m in priced}),
            inference_profiles=sorted(profiles),
        )
        if api.user_pool is not None and api.client is not None:
            CfnOutput(self, "UserPoolId", value=api.user_pool.user_pool_id)
            CfnOutput(self, "UserPoolClientId", value=api.client.user_pool_client_id)
        self.acknowledge()

    def _context_settings(self) -> dict[str, str]:
        """The settings the context gives (`make deploy CONTEXT=...`), where it gives them."""
        ctx = self.node.try_get_context
        given = {
            # No default model unless the deployment names one: a plan without `model:` is
            # refused rather than run on the local stack's scripted model in AWS.
            "STEWARD_DEFAULT_MODEL": ctx("defaultModel") or "none",
            "STEWARD_MAX_BUDGET_USD": ctx("maxBudgetUsd"),
            "STEWARD_SPEND_LIMIT_USD_PER_HOUR": ctx("spendLimitUsdPerHour"),
            # GitHub App names are unique on GitHub: a deployment's App is rarely `steward`.
            "STEWARD_GITHUB_APP_SLUG": ctx("githubAppSlug"),
        }
        return {name: str(value) for name, value in given.items() if value}

    def _grant(self, storage: Storage, runner: Runner, queue: HeartbeatQueue) -> None:
        """Each role's statements beyond its tables: exactly what its code calls."""
        key = storage.capability_key
        # Relay: verify capabilities, call the priced Bedrock models. Converse has no IAM
        # action of its own: it is authorized as InvokeModel. The relay never calls
        # ConverseStream (InvokeModelWithResponseStream): a client's stream is synthesized
        # from one Converse answer (steward.domain.eventstream).
        self.functions["relay"].role.add_to_policy(
            iam.PolicyStatement(actions=["kms:GetPublicKey"], resources=[key.key_arn])
        )
        models = priced_bedrock_models(self.prices)
        if models:
            self.functions["relay"].role.add_to_policy(
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModel"],
                    resources=[arn for m in models for arn in self._bedrock_arns(m)],
                )
            )
        secrets = provider_key_secrets(self.prices)
        if secrets:
            self.functions["relay"].role.add_to_policy(
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue"],
                    resources=[
                        self.format_arn(service="secretsmanager", resource="secret", resource_name=f"{s}-*")
                        for s in secrets
                    ],
                )
            )
            for secret in secrets:  # the deployer's own price table names them
                Validations.of(self.functions["relay"].role).acknowledge(
                    Acknowledgment(
                        id="AwsSolutions::AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:secretsmanager:"
                        f"<AWS::Region>:<AWS::AccountId>:secret/{secret}-*]",
                        reason="Secrets Manager appends six random characters to a secret's name: "
                        "its ARN needs the wildcard; the name is the price table's api_key_secret.",
                    )
                )
        # Runtime routes: mint (sign) and verify capabilities, presigned artifact uploads
        # (a presigned PUT is the signer's PutObject; the routes read no artifact), the App's
        # key for installation tokens.
        runtime = self.functions["runtime"].role
        runtime.add_to_policy(
            iam.PolicyStatement(actions=["kms:Sign", "kms:GetPublicKey"], resources=[key.key_arn])
        )
        runtime.add_to_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[storage.artifacts.arn_for_objects("*")])
        )
        # API: artifact reads (presigned GETs and the review's text).
        self.functions["api"].role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject"], resources=[storage.artifacts.arn_for_objects("*")])
        )
        # API: the kept documents of plans' content (`plans/{plan id}/{content hash}.md`,
        # written at publish and confirm, read by `GET /v1/plans/{slug}/diff`).
        self.functions["api"].role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:PutObject"], resources=[storage.artifacts.arn_for_objects("plans/*")]
            )
        )
        # API: which of a task's artifacts exist (`GET /v1/tasks/{id}/artifacts`), and a
        # missing object answered 404, not 403: S3 says "no such key" to a reader only if it
        # may list the bucket, and a GetObject or HeadObject carries no `s3:prefix`, so a
        # grant conditioned on one would turn every missing artifact or kept document (a
        # screen before its run ends, `plan diff`) into a 403 and a 500.
        self.functions["api"].role.add_to_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[storage.artifacts.bucket_arn])
        )
        # The App's key: tokens for the runtime routes, the loop's GitHub calls, and the
        # receiver's reading of a conversation comment's pull request.
        for function in ("runtime", "heartbeat", "webhook"):
            self.functions[function].role.add_to_policy(  # type: ignore[index]
                iam.PolicyStatement(
                    actions=["secretsmanager:GetSecretValue"],
                    resources=[storage.github_private_key.secret_arn],
                )
            )
        self.functions["webhook"].role.add_to_policy(
            iam.PolicyStatement(
                actions=["secretsmanager:GetSecretValue"], resources=[storage.webhook_secret.secret_arn]
            )
        )
        # Scheduler: send ticks; the API and the webhook receiver send one at a person's
        # confirm, retry or follow-up ask (it starts work at once). Heartbeat: its event
        # source mapping reads the queue.
        for sender in ("scheduler", "api", "webhook"):
            self.functions[sender].role.add_to_policy(
                iam.PolicyStatement(
                    actions=["sqs:GetQueueUrl", "sqs:SendMessage"], resources=[queue.queue.queue_arn]
                )
            )
        # Heartbeat runs runtimes; heartbeat and reaper list, describe and stop them: only
        # tasks of the runner's definition in the runner's cluster.
        cluster_arn = runner.cluster.cluster_arn
        task_arns = self.format_arn(
            service="ecs", resource="task", resource_name=f"{runner.cluster.cluster_name}/*"
        )
        on_cluster = {"ArnEquals": {"ecs:cluster": cluster_arn}}
        heartbeat = self.functions["heartbeat"].role
        heartbeat.add_to_policy(
            iam.PolicyStatement(
                actions=["ecs:RunTask"],
                resources=[runner.task_definition.task_definition_arn],
                conditions=on_cluster,
            )
        )
        heartbeat.add_to_policy(
            iam.PolicyStatement(
                actions=["ecs:TagResource"],
                resources=[task_arns],
                conditions={"StringEquals": {"ecs:CreateAction": "RunTask"}},
            )
        )
        pass_roles = [runner.execution_role.role_arn]  # the task definition has no task role
        heartbeat.add_to_policy(
            iam.PolicyStatement(
                actions=["iam:PassRole"],
                resources=pass_roles,
                conditions={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
            )
        )
        for function in ("heartbeat", "reaper"):
            role = self.functions[function].role  # type: ignore[index]
            role.add_to_policy(
                iam.PolicyStatement(
                    actions=["ecs:StopTask", "ecs:DescribeTasks"],
                    resources=[task_arns],
                    conditions=on_cluster,
                )
            )
            role.add_to_policy(
                iam.PolicyStatement(actions=["ecs:ListTasks"], resources=["*"], conditions=on_cluster)
            )

    def _bedrock_arns(self, model: str) -> list[str]:
        """What invoking `model` needs: its foundation model in this region; for an inference
        profile, the profile (this account and region) and its model in every region the
        profile may route to (Bedrock authorizes the call there too)."""
        profile = INFERENCE_PROFILE.match(model)
        if profile is None:
            return [
                self.format_arn(
                    service="bedrock", account="", resource="foundation-model", resource_name=model
                )
            ]
        return [
            self.format_arn(service="bedrock", resource="inference-profile", resource_name=model),
            self.format_arn(
                service="bedrock",
                region="*",
                account="",
                resource="foundation-model",
                resource_name=profile[2],
            ),
        ]

    def acknowledge(self) -> None:
        """cdk-nag findings accepted, each by its exact id on the construct it concerns."""
        names = {
            "partition": ("<AWS::Partition>", self.partition),
            "region": ("<AWS::Region>", self.region),
            "account": ("<AWS::AccountId>", self.account),
        }
        shown = {
            key: pseudo if Token.is_unresolved(value) else value for key, (pseudo, value) in names.items()
        }
        profiles = [m[2] for m in map(INFERENCE_PROFILE.match, priced_bedrock_models(self.prices)) if m]
        routed = [
            (
                "RelayFunction/Role/DefaultPolicy/Resource",
                f"AwsSolutions-IAM5[Resource::arn:{shown['partition']}:bedrock:*::foundation-model/{model}]",
                "a cross-region inference profile routes the call to this model in any region of "
                "its geography, and Bedrock authorizes it there: only this one model",
            )
            for model in profiles
        ]
        for path, template, reason in [*ACKNOWLEDGED, *routed]:
            finding = template.format(**shown) if template == _TASKS else template
            scope: IConstruct = self
            for part in path.split("/"):
                scope = scope.node.find_child(part)
            Validations.of(scope).acknowledge(Acknowledgment(id=f"AwsSolutions::{finding}", reason=reason))


_FUNCTIONS = ("Api", "Scheduler", "Heartbeat", "Reaper", "Relay", "Webhook", "Runtime")
_OBJECTS = "AwsSolutions-IAM5[Resource::<StorageArtifacts08431D1F.Arn>/*]"
# The runner tasks' ARN as cdk-nag names it: with pseudo parameters for an environment-agnostic
# stack, literals for one deployed with an account and a region (`cdk deploy` with credentials).
_TASKS = "AwsSolutions-IAM5[Resource::arn:{partition}:ecs:{region}:{account}:task/<RunnerCluster2ECE3DAD>/*]"
# (construct path under the stack, finding id, why it is accepted)
ACKNOWLEDGED: list[tuple[str, str, str]] = [
    *(
        (
            f"{name}Function/Function",
            "AwsSolutions-L1",
            "Python 3.12 on purpose: the dependency layers are built for it (tools/build_layers.py); "
            "a newer runtime means rebuilding and retesting them.",
        )
        for name in _FUNCTIONS
    ),
    *(
        (
            f"{name}Function/Role",
            _OBJECTS,
            "Artifacts are objects keyed by task id, created at run time: an object ARN needs the wildcard; "
            "the bucket is Steward's own.",
        )
        for name in ("Api", "Runtime")
    ),
    (
        "ApiFunction/Role",
        "AwsSolutions-IAM5[Resource::<StorageArtifacts08431D1F.Arn>/plans/*]",
        "A plan's kept documents are objects keyed by plan id and content hash, created at run time: "
        "the API writes only under plans/.",
    ),
    *(
        (
            f"{name}Function/Role",
            _TASKS,
            "ECS task ids exist only once RunTask made them: the runner cluster's tasks are the narrowest "
            "ARN, and the statement is conditioned on ecs:cluster.",
        )
        for name in ("Heartbeat", "Reaper")
    ),
    *(
        (
            f"{name}Function/Role",
            "AwsSolutions-IAM5[Resource::*]",
            "xray:PutTraceSegments and PutTelemetryRecords (active tracing, added by CDK) have no "
            "resource-level permission (AWS requires Resource *)"
            + (
                "; so has ecs:ListTasks, which is conditioned on the runner cluster (ecs:cluster)."
                if name in ("Heartbeat", "Reaper")
                else "."
            ),
        )
        for name in _FUNCTIONS
    ),
    (
        "Runner/TaskDefinition/ExecutionRole",
        "AwsSolutions-IAM5[Resource::*]",
        "ecr:GetAuthorizationToken has no resource-level permission (AWS requires Resource *); the "
        "execution role only pulls the runner image and writes its log stream.",
    ),
    (
        "Operators/DoctorPolicy/Resource",
        "AwsSolutions-IAM5[Resource::*]",
        "steward doctor's reads (bedrock:GetFoundationModelAvailability, ecs:DescribeTaskDefinition, ecr:DescribeImages, "
        "ec2:DescribeSubnets and DescribeRouteTables, cloudwatch:DescribeAlarms) have no narrower "
        "resource; they read, and the policy is attached to operators only.",
    ),
    (
        "Loop/TickRole",
        "AwsSolutions-IAM5[Resource::<SchedulerFunction730963DA.Arn>:*]",
        "CDK grants invoke on the function and its versions/aliases (arn:*); the role can invoke "
        "only the scheduler function.",
    ),
    (
        "Loop/ReapRole",
        "AwsSolutions-IAM5[Resource::<ReaperFunctionE4F4EFC3.Arn>:*]",
        "CDK grants invoke on the function and its versions/aliases (arn:*); the role can invoke "
        "only the reaper function.",
    ),
    (
        "Relay/RestApi/CloudWatchRole",
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
        "API Gateway's account-wide logging role; AWS's managed policy is the documented one for it.",
    ),
    (
        "Relay/RestApi",
        "AwsSolutions-APIG2",
        "The relay validates every request itself (capability, size, Unicode, screened body: "
        "docs/concepts/relay.md); a gateway model would duplicate it for OpenAI-, Anthropic- and Bedrock-shaped bodies.",
    ),
    (
        "Relay/RestApi",
        "AwsSolutions-APIG3",
        "No WAF by default (cost; every request needs a signed capability and is budget-bound); attach "
        "a web ACL to the stage if the account's policy wants one.",
    ),
    (
        "Relay/RestApi",
        "AwsSolutions-APIG4",
        "Allowlisted unauthorized entry: the relay's authentication is the KMS-signed capability, "
        "checked in the function (tests/infra asserts the allowlist).",
    ),
    (
        "Relay/RestApi",
        "AwsSolutions-COG4",
        "The relay is called by runtimes, not users: a capability, not a Cognito token, authorizes it.",
    ),
    (
        "Api/HttpApi",
        "AwsSolutions-APIG4",
        "Outside the JWT authorizer are only /v1/runtime/* (runtimes present a one-time ticket or a "
        "capability, checked by the runtime function) and GET /console, /console/{proxy+} (the web "
        "console's static files and sign-in settings, needed before sign-in; no data: the page calls "
        "/v1/* with the ID token). tests/infra asserts the allowlist.",
    ),
    *(
        (
            f"Storage/{name}",
            "AwsSolutions-SMG4",
            "Rotated where it is issued: the App's private key in GitHub's App settings, the webhook "
            "secret together with the App's webhook configuration (docs/guides/deploying.md); no Lambda can rotate either.",
        )
        for name in ("GitHubPrivateKey", "WebhookSecret")
    ),
]
