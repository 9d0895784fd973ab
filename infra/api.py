"""Api: the client HTTP API behind a JWT authorizer, and its `/v1/runtime/*` routes outside
it (the runtime Lambda checks a ticket or capability itself)."""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

ACCESS_LOG_FORMAT = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "integrationError": "$context.integrationErrorMessage",
}
RUNTIME_PATH = "/v1/runtime/{proxy+}"
# The CLI's redirect for `steward login` (authorization code + PKCE on a loopback port).
CLI_CALLBACK = "http://localhost:8765/callback"


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        issuer: str | None,
        audience: str | None,
        log_retention: logs.RetentionDays,
        deletion_protection: bool,
    ) -> None:
        super().__init__(scope, id)
        self.user_pool: cognito.UserPool | None = None
        self.client: cognito.UserPoolClient | None = None
        if issuer:
            if not audience:
                raise ValueError("context oidcIssuer needs oidcAudience too")
            self.authorizer: apigw.IHttpRouteAuthorizer = authorizers.HttpJwtAuthorizer(
                "Jwt", issuer, jwt_audience=[audience]
            )
        else:
            self.user_pool = cognito.UserPool(
                self,
                "Users",
                self_sign_up_enabled=False,
                sign_in_aliases=cognito.SignInAliases(email=True),
                password_policy=cognito.PasswordPolicy(
                    min_length=12,
                    require_digits=True,
                    require_lowercase=True,
                    require_uppercase=True,
                    require_symbols=True,
                ),
                mfa=cognito.Mfa.REQUIRED,
                mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
                feature_plan=cognito.FeaturePlan.PLUS,
                standard_threat_protection_mode=cognito.StandardThreatProtectionMode.FULL_FUNCTION,
                account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
                removal_policy=RemovalPolicy.RETAIN if deletion_protection else RemovalPolicy.DESTROY,
                deletion_protection=deletion_protection,
            )
            self.client = self.user_pool.add_client(
                "Cli",
                generate_secret=False,
                auth_flows=cognito.AuthFlow(user_srp=False),
                o_auth=cognito.OAuthSettings(
                    flows=cognito.OAuthFlows(authorization_code_grant=True),
                    scopes=[cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL],
                    callback_urls=[CLI_CALLBACK],
                ),
            )
            self.authorizer = authorizers.HttpUserPoolAuthorizer(
                "Cognito", self.user_pool, user_pool_clients=[self.client]
            )
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            description="Steward client API (JWT) and runtime routes (capability)",
        )
        stage = self.http_api.default_stage
        assert stage is not None
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        cfn_stage.access_log_settings = apigw.CfnStage.AccessLogSettingsProperty(
            destination_arn=self.access_logs.log_group_arn, format=json.dumps(ACCESS_LOG_FORMAT)
        )
        self.url = self.http_api.api_endpoint

    def route(self, api_function: lambda_.IFunction, runtime_function: lambda_.IFunction) -> None:
        client = integrations.HttpLambdaIntegration("Client", api_function)
        runtime = integrations.HttpLambdaIntegration("Runtime", runtime_function)
        self.http_api.add_routes(path="/v1/{proxy+}", integration=client, authorizer=self.authorizer)
        self.http_api.add_routes(path=RUNTIME_PATH, integration=runtime)
