"""Relay: the REST API in front of the relay Lambda, streaming model responses.

The integration timeout is raised above API Gateway's default 29 s for model calls: it
needs the account's quota "Maximum integration timeout in milliseconds" (Service Quotas,
API Gateway) raised to at least RELAY_TIMEOUT_SECONDS for REST APIs; without it deploy
fails, unless the context `relayTimeoutSeconds` keeps it at API Gateway's default 29 s.

Binary media types are `*/*`: API Gateway returns a Lambda's base64 body as binary only when
the request's first Accept header matches a binary media type, and boto3's `converse_stream`
sends no Accept header, so only `*/*` lets Bedrock's event stream (base64 from the Lambda)
reach it as bytes. The price is that every request body arrives base64-encoded; the relay
decodes it (`steward.relay_handler`). A text answer (JSON, SSE) is not base64 and passes as
it is.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct
from steward.domain.routes import RELAY_BINARY_MEDIA_TYPES

RELAY_TIMEOUT_SECONDS = 300
# API Gateway's default integration timeout: what an account has before the quota is raised.
DEFAULT_QUOTA_SECONDS = 29


def relay_timeout(value: object) -> int:
    """The context `relayTimeoutSeconds` (default 300), checked at synth: 29 deploys before
    the quota is raised, 300 after."""
    if value is None or value == "":
        return RELAY_TIMEOUT_SECONDS
    try:
        seconds = int(str(value))
    except ValueError:
        seconds = 0
    if not DEFAULT_QUOTA_SECONDS <= seconds <= RELAY_TIMEOUT_SECONDS:
        raise ValueError(
            f"context relayTimeoutSeconds: {value!r} is not a whole number of seconds from "
            f"{DEFAULT_QUOTA_SECONDS} to {RELAY_TIMEOUT_SECONDS}"
        )
    return seconds


def bedrock_read_timeout(relay_seconds: int) -> int:
    """Bedrock's read deadline under the relay's: four fifths of it, so the relay answers the
    provider's error (and settles the call's reservation) before its function is killed."""
    return relay_seconds * 4 // 5


class Relay(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        function: lambda_.IFunction,
        log_retention: logs.RetentionDays,
        timeout_seconds: int = RELAY_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(scope, id)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.api = apigateway.LambdaRestApi(
            self,
            "RestApi",
            handler=function,
            proxy=True,
            binary_media_types=list(RELAY_BINARY_MEDIA_TYPES),
            description="Steward relay: model calls under a capability (checked by the relay)",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            # The role API Gateway logs with is one per account and region, shared by every
            # REST API there: a destroy of this stack must not take it (and the account's
            # logging setting) from the others.
            cloud_watch_role=True,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigateway.StageOptions(
                stage_name="v1",
                access_log_destination=apigateway.LogGroupLogDestination(self.access_logs),
                access_log_format=apigateway.AccessLogFormat.json_with_standard_fields(
                    caller=False,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=False,
                ),
                logging_level=apigateway.MethodLoggingLevel.ERROR,
                tracing_enabled=True,
            ),
            integration_options=apigateway.LambdaIntegrationOptions(
                timeout=Duration.seconds(timeout_seconds)
            ),
        )
        self.url = self.api.url
