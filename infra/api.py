"""Api: the client HTTP API behind a JWT authorizer; outside it, its `/v1/runtime/*` routes
(the runtime Lambda checks a ticket or capability itself) and the web console's static files
(`/console`, served by the API function: the page loads before anyone has signed in).

The console signs people in with the issuer's authorization code + PKCE flow (a public client,
no secret), its redirect URI the console's own URL. With the stack's Cognito pool: a hosted UI
domain on the pool (which also serves `steward login`) and a second app client, `Console`,
whose callback is `<api endpoint>/console/`. With an external OIDC issuer: the console uses
`oidcAudience` as its client id and the `consoleAuthorizeUrl` and `consoleTokenUrl` context,
or is off (sign-in `none`) without them."""

from __future__ import annotations

import json
import re

from aws_cdk import Aws, Fn, RemovalPolicy, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct
from steward.domain.routes import CONSOLE_PREFIX

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
# Cognito's rules for a hosted UI domain prefix (checked here when it is a literal).
DOMAIN_PREFIX = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DOMAIN_RESERVED = ("aws", "amazon", "cognito")
_UUID_LENGTH = 36


def domain_prefix(given: str | None, stack_name: str) -> str:
    """The hosted UI domain prefix: `given` (context `cognitoDomainPrefix`) if set, checked
    against Cognito's rules; else `<stack name, lower case>-<the stack id's UUID>`, a token
    CloudFormation resolves at deploy: unique by construction, fixed for the stack's life,
    and, unlike an account id, nothing about the account in a public URL."""
    if given:
        if not DOMAIN_PREFIX.match(given) or any(word in given for word in DOMAIN_RESERVED):
            raise ValueError(
                f"context cognitoDomainPrefix {given!r}: 1 to 63 lower-case letters, digits and "
                f"inner hyphens, without {', '.join(DOMAIN_RESERVED)}"
            )
        return given
    name = stack_name.lower()[: 63 - 1 - _UUID_LENGTH].rstrip("-")
    if not DOMAIN_PREFIX.match(name) or any(word in name for word in DOMAIN_RESERVED):
        raise ValueError(
            f"stack name {stack_name!r} makes no valid Cognito domain prefix: give context cognitoDomainPrefix"
        )
    stack_uuid = Fn.select(2, Fn.split("/", Aws.STACK_ID))
    return Fn.join("-", [name, stack_uuid])


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
        cognito_domain_prefix: str | None = None,
        console_authorize_url: str | None = None,
        console_token_url: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        # No default authorizer: each route names its own (or none).
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            description="Steward client API (JWT), runtime routes (capability) and web console (static)",
        )
        stage = self.http_api.default_stage
        assert stage is not None
        cfn_stage = stage.node.default_child
        assert isinstance(cfn_stage, apigw.CfnStage)
        cfn_stage.access_log_settings = apigw.CfnStage.AccessLogSettingsProperty(
            destination_arn=self.access_logs.log_group_arn, format=json.dumps(ACCESS_LOG_FORMAT)
        )
        self.url = self.http_api.api_endpoint
        # The console's own URL: where it is opened, and its OIDC redirect URI (app.js sends
        # location.origin + location.pathname).
        self.console_url = f"{self.url}{CONSOLE_PREFIX}/"

        self.user_pool: cognito.UserPool | None = None
        self.client: cognito.UserPoolClient | None = None
        self.console_client: cognito.UserPoolClient | None = None
        self.domain: cognito.UserPoolDomain | None = None
        # The API function's STEWARD_CONSOLE_* settings (steward.api.console).
        self.console_settings: dict[str, str] = {"STEWARD_CONSOLE_SIGN_IN": "none"}
        if issuer:
            if not audience:
                raise ValueError("context oidcIssuer needs oidcAudience too")
            self.authorizer: apigw.IHttpRouteAuthorizer = authorizers.HttpJwtAuthorizer(
                "Jwt", issuer, jwt_audience=[audience]
            )
            if bool(console_authorize_url) != bool(console_token_url):
                raise ValueError("context consoleAuthorizeUrl and consoleTokenUrl go together")
            if console_authorize_url and console_token_url:
                for key, url in (
                    ("consoleAuthorizeUrl", console_authorize_url),
                    ("consoleTokenUrl", console_token_url),
                ):
                    if not url.startswith("https://"):
                        raise ValueError(f"context {key} must be an https URL")
                self.console_settings = {
                    "STEWARD_CONSOLE_SIGN_IN": "oidc",
                    "STEWARD_CONSOLE_CLIENT_ID": audience,
                    "STEWARD_CONSOLE_AUTHORIZE_URL": console_authorize_url,
                    "STEWARD_CONSOLE_TOKEN_URL": console_token_url,
                }
            return
        if console_authorize_url or console_token_url:
            raise ValueError("context consoleAuthorizeUrl and consoleTokenUrl apply only with oidcIssuer")
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
        # The hosted UI: the pool's discovery document names its /oauth2/authorize and
        # /oauth2/token, which `steward login` and the console both use.
        self.domain = self.user_pool.add_domain(
            "Domain",
            cognito_domain=cognito.CognitoDomainOptions(
                domain_prefix=domain_prefix(cognito_domain_prefix, Stack.of(self).stack_name)
            ),
        )
        self.client = _public_client(self.user_pool, "Cli", callback_urls=[CLI_CALLBACK])
        self.console_client = _public_client(
            self.user_pool, "Console", callback_urls=[self.console_url], logout_urls=[self.console_url]
        )
        # Both clients' ID tokens are accepted (their `aud` is the client id).
        self.authorizer = authorizers.HttpUserPoolAuthorizer(
            "Cognito", self.user_pool, user_pool_clients=[self.client, self.console_client]
        )
        hosted_ui = self.domain.base_url()
        self.console_settings = {
            "STEWARD_CONSOLE_SIGN_IN": "oidc",
            "STEWARD_CONSOLE_CLIENT_ID": self.console_client.user_pool_client_id,
            "STEWARD_CONSOLE_AUTHORIZE_URL": f"{hosted_ui}/oauth2/authorize",
            "STEWARD_CONSOLE_TOKEN_URL": f"{hosted_ui}/oauth2/token",
        }

    def route(self, api_function: lambda_.IFunction, runtime_function: lambda_.IFunction) -> None:
        client = integrations.HttpLambdaIntegration("Client", api_function)
        runtime = integrations.HttpLambdaIntegration("Runtime", runtime_function)
        self.http_api.add_routes(path="/v1/{proxy+}", integration=client, authorizer=self.authorizer)
        self.http_api.add_routes(path=RUNTIME_PATH, integration=runtime)
        # The console's static files and sign-in settings, before sign-in: no authorizer.
        for path in (CONSOLE_PREFIX, f"{CONSOLE_PREFIX}/{{proxy+}}"):
            self.http_api.add_routes(
                path=path,
                methods=[apigw.HttpMethod.GET],
                integration=client,
                authorizer=apigw.HttpNoneAuthorizer(),
            )


def _public_client(pool: cognito.UserPool, id: str, **urls: list[str]) -> cognito.UserPoolClient:
    """A public app client (no secret) with the authorization code grant only (PKCE), scopes
    openid and email: the CLI's and the console's."""
    return pool.add_client(
        id,
        generate_secret=False,
        auth_flows=cognito.AuthFlow(user_srp=False),
        o_auth=cognito.OAuthSettings(
            flows=cognito.OAuthFlows(authorization_code_grant=True),
            scopes=[cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL],
            **urls,
        ),
    )
