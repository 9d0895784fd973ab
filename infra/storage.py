"""Storage: every table of `steward.tables`, the artifact bucket, the capability key and
the two secrets."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct
from steward.tables import ALL_TABLES, Key, TableSpec

ARTIFACT_DAYS = 90


def _attribute(key: Key) -> dynamodb.Attribute:
    kind = dynamodb.AttributeType.NUMBER if key.type == "N" else dynamodb.AttributeType.STRING
    return dynamodb.Attribute(name=key.name, type=kind)


class Storage(Construct):
    def __init__(self, scope: Construct, id: str, *, prefix: str, deletion_protection: bool) -> None:
        super().__init__(scope, id)
        removal = RemovalPolicy.RETAIN if deletion_protection else RemovalPolicy.DESTROY
        self.prefix = prefix
        self.tables: dict[TableSpec, dynamodb.Table] = {}
        for spec in ALL_TABLES:
            table = dynamodb.Table(
                self,
                spec.logical_name.capitalize(),
                table_name=spec.physical_name(prefix),
                partition_key=_attribute(spec.partition),
                sort_key=_attribute(spec.sort) if spec.sort else None,
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                time_to_live_attribute=spec.ttl_attribute,
                deletion_protection=deletion_protection,
                encryption=dynamodb.TableEncryption.AWS_MANAGED,
                removal_policy=removal,
            )
            for index in spec.indexes:
                table.add_global_secondary_index(
                    index_name=index.name,
                    partition_key=_attribute(index.partition),
                    sort_key=_attribute(index.sort) if index.sort else None,
                    projection_type=dynamodb.ProjectionType.ALL,
                )
            self.tables[spec] = table

        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_PREFERRED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(ARTIFACT_DAYS))],
            removal_policy=removal,
            auto_delete_objects=False,
        )
        self.artifacts = s3.Bucket(
            self,
            "Artifacts",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=False,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="artifacts/",
            # Task artifacts expire; the plans' kept documents (`plans/`, what a person
            # approved, which `GET /v1/plans/{slug}/diff` compares against) do not.
            lifecycle_rules=[
                s3.LifecycleRule(
                    prefix="artifacts/",
                    expiration=Duration.days(ARTIFACT_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            removal_policy=removal,
        )
        # Capabilities are ES256 (docs/concepts/lifecycle.md): KMS signs, every verifier holds only the
        # public half. Asymmetric keys cannot rotate automatically: rotation is a new key id
        # listed first in STEWARD_CAPABILITY_KEY_ID.
        self.capability_key = kms.Key(
            self,
            "CapabilityKey",
            key_spec=kms.KeySpec.ECC_NIST_P256,
            key_usage=kms.KeyUsage.SIGN_VERIFY,
            description="Steward capability signing key (ES256)",
            removal_policy=removal,
        )
        # Values are put after deploy (docs/guides/deploying.md): the App's key exists only once the App does.
        self.github_private_key = secretsmanager.Secret(
            self,
            "GitHubPrivateKey",
            description="Steward GitHub App private key (PEM); put its value after deploy",
            removal_policy=removal,
        )
        self.webhook_secret = secretsmanager.Secret(
            self,
            "WebhookSecret",
            description="Steward GitHub webhook secret",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                exclude_punctuation=True, password_length=40
            ),
            removal_policy=removal,
        )
