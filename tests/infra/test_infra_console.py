"""The console's sign-in settings for each identity choice, on the Api construct alone (no
stack synth: the full stack is synthesized once per session in conftest)."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack, Token
from aws_cdk import aws_logs as logs

from infra.api import Api, domain_prefix

ISSUER = "https://issuer.example.com"


def _api(**kwargs: Any) -> Api:
    options: dict[str, Any] = {
        "issuer": None,
        "audience": None,
        "log_retention": logs.RetentionDays.ONE_DAY,
        "deletion_protection": False,
    }
    return Api(Stack(App(), "Steward"), "Api", **(options | kwargs))


def test_an_external_issuer_without_console_endpoints_turns_the_console_sign_in_off() -> None:
    api = _api(issuer=ISSUER, audience="steward")
    assert api.console_settings == {"STEWARD_CONSOLE_SIGN_IN": "none"}
    assert api.user_pool is None
    assert api.console_client is None
    assert api.domain is None


def test_an_external_issuer_with_console_endpoints_signs_in_with_its_audience_as_client() -> None:
    api = _api(
        issuer=ISSUER,
        audience="steward",
        console_authorize_url=f"{ISSUER}/authorize",
        console_token_url=f"{ISSUER}/token",
    )
    assert api.console_settings == {
        "STEWARD_CONSOLE_SIGN_IN": "oidc",
        "STEWARD_CONSOLE_CLIENT_ID": "steward",
        "STEWARD_CONSOLE_AUTHORIZE_URL": f"{ISSUER}/authorize",
        "STEWARD_CONSOLE_TOKEN_URL": f"{ISSUER}/token",
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"issuer": ISSUER, "audience": "s", "console_authorize_url": f"{ISSUER}/a"}, "go together"),
        ({"issuer": ISSUER, "audience": "s", "console_token_url": f"{ISSUER}/t"}, "go together"),
        (
            {
                "issuer": ISSUER,
                "audience": "s",
                "console_authorize_url": "http://issuer.example.com/a",
                "console_token_url": f"{ISSUER}/t",
            },
            "consoleAuthorizeUrl must be an https URL",
        ),
        (
            {"console_authorize_url": f"{ISSUER}/a", "console_token_url": f"{ISSUER}/t"},
            "only with oidcIssuer",
        ),
        ({"cognito_domain_prefix": "Steward"}, "cognitoDomainPrefix"),
        ({"cognito_domain_prefix": "my-cognito-login"}, "cognitoDomainPrefix"),
        ({"cognito_domain_prefix": "-steward"}, "cognitoDomainPrefix"),
    ],
)
def test_console_context_that_cannot_work_fails_the_synth(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _api(**kwargs)


def test_a_given_domain_prefix_is_used_as_is_and_the_default_names_the_stack() -> None:
    api = _api(cognito_domain_prefix="acme-steward")
    assert api.domain is not None
    assert api.console_settings["STEWARD_CONSOLE_SIGN_IN"] == "oidc"
    assert domain_prefix("acme-steward", "Steward") == "acme-steward"
    assert Token.is_unresolved(domain_prefix(None, "Steward"))
    with pytest.raises(ValueError, match="cognitoDomainPrefix"):
        domain_prefix(None, "AwsSteward")
