"""Operators: the managed policies a person's own credentials need for Steward's operator
commands, each exactly what that command calls (`tests/infra/test_infra_grants.py` records
the brake's and the link's calls; `tests/unit/test_doctor_aws.py` the doctor's actions).

* `BrakeOperatorPolicy` — `steward admin brake on|off|status`: the controls table's brake
  item, nothing else.
* `LinkOperatorPolicy` — `steward admin link-installation`: read and update an installation's
  item.
* `DoctorPolicy` — `steward doctor --stack`: read the stack, its functions' settings, the two
  secrets, the brake, the plans and installations, the priced models, the runner's task
  definition, image and network, the schedules and the alarms; and sign with the capability
  key, which is how it proves the relay verifies the current key (a capability it signs may
  call a model: the doctor's holder is trusted as an operator is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Aws, CfnOutput
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct
from steward.tables import CONTROLS, INSTALLATIONS, PLANS

from infra.storage import Storage

# What `steward doctor --stack` calls (steward.adapters.deployment), as IAM names them.
DOCTOR_READS = (
    "cloudformation:DescribeStacks",
    "cloudformation:ListStackResources",
    "lambda:GetFunctionConfiguration",
    "kms:Sign",
    "secretsmanager:GetSecretValue",
    "dynamodb:GetItem",
    "dynamodb:Scan",
    "bedrock:GetFoundationModel",
    "bedrock:GetInferenceProfile",
    "bedrock:GetFoundationModelAvailability",
    "ecs:DescribeTaskDefinition",
    "ecr:DescribeImages",
    "ec2:DescribeSubnets",
    "ec2:DescribeRouteTables",
    "scheduler:GetSchedule",
    "cloudwatch:DescribeAlarms",
)
# Reads AWS authorizes on no narrower resource than `*` (the Service Authorization Reference).
DOCTOR_UNSCOPED = (
    "bedrock:GetFoundationModelAvailability",
    "ecs:DescribeTaskDefinition",
    "ecr:DescribeImages",
    "ec2:DescribeSubnets",
    "ec2:DescribeRouteTables",
    "cloudwatch:DescribeAlarms",
)


class Operators(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        storage: Storage,
        functions: Mapping[str, lambda_.IFunction],
        schedules: Sequence[scheduler.Schedule],
        foundation_models: Sequence[str],
        inference_profiles: Sequence[str],
    ) -> None:
        super().__init__(scope, id)
        self.brake = iam.ManagedPolicy(
            self,
            "BrakeOperatorPolicy",
            description="Steward: read, engage and release the global brake",
            statements=[
                iam.PolicyStatement(
                    actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                    resources=[storage.tables[CONTROLS].table_arn],
                    conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["brake"]}},
                )
            ],
        )
        self.link = iam.ManagedPolicy(
            self,
            "LinkOperatorPolicy",
            description="Steward: link a GitHub App installation to its user",
            statements=[
                iam.PolicyStatement(
                    actions=["dynamodb:GetItem", "dynamodb:UpdateItem"],
                    resources=[storage.tables[INSTALLATIONS].table_arn],
                )
            ],
        )
        bedrock = f"arn:{Aws.PARTITION}:bedrock:{Aws.REGION}"
        models = [f"{bedrock}::foundation-model/{m}" for m in foundation_models]
        models += [f"{bedrock}:{Aws.ACCOUNT_ID}:inference-profile/{p}" for p in inference_profiles]
        statements = [
            iam.PolicyStatement(
                actions=["cloudformation:DescribeStacks", "cloudformation:ListStackResources"],
                resources=[Aws.STACK_ID],
            ),
            iam.PolicyStatement(
                actions=["lambda:GetFunctionConfiguration"],
                resources=[f.function_arn for f in functions.values()],
            ),
            iam.PolicyStatement(actions=["kms:Sign"], resources=[storage.capability_key.key_arn]),
            iam.PolicyStatement(
                actions=["secretsmanager:GetSecretValue"],
                resources=[storage.github_private_key.secret_arn, storage.webhook_secret.secret_arn],
            ),
            iam.PolicyStatement(
                actions=["dynamodb:GetItem"],
                resources=[storage.tables[CONTROLS].table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["brake"]}},
            ),
            iam.PolicyStatement(
                actions=["dynamodb:Scan"],
                resources=[storage.tables[PLANS].table_arn, storage.tables[INSTALLATIONS].table_arn],
            ),
            iam.PolicyStatement(
                actions=["scheduler:GetSchedule"], resources=[s.schedule_arn for s in schedules]
            ),
            iam.PolicyStatement(actions=list(DOCTOR_UNSCOPED), resources=["*"]),
        ]
        if models:
            statements.append(
                iam.PolicyStatement(
                    actions=["bedrock:GetFoundationModel", "bedrock:GetInferenceProfile"],
                    resources=models,
                )
            )
        self.doctor = iam.ManagedPolicy(
            self, "DoctorPolicy", description="Steward: steward doctor's reads", statements=statements
        )
        CfnOutput(scope, "BrakeOperatorPolicyArn", value=self.brake.managed_policy_arn)
        CfnOutput(scope, "LinkOperatorPolicyArn", value=self.link.managed_policy_arn)
        CfnOutput(scope, "DoctorPolicyArn", value=self.doctor.managed_policy_arn)
