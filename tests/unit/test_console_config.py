"""The console's static routes and sign-in settings, and the local stack's one-time login
codes: pure parts, no browser (tests/e2e/test_console.py drives a real one)."""

from __future__ import annotations

import pytest
from steward.api.console import content_security_policy, sign_in_config
from steward.config import Settings
from steward.local.console_login import LoginCodes

OIDC = {
    "STEWARD_CONSOLE_SIGN_IN": "oidc",
    "STEWARD_CONSOLE_CLIENT_ID": "console-client",
    "STEWARD_CONSOLE_AUTHORIZE_URL": "https://steward.auth.eu-west-1.amazoncognito.com/oauth2/authorize",
    "STEWARD_CONSOLE_TOKEN_URL": "https://steward.auth.eu-west-1.amazoncognito.com/oauth2/token",
}


def test_oidc_sign_in_hands_the_page_its_endpoints_and_lets_it_reach_only_the_token_origin() -> None:
    settings = Settings.from_env(OIDC)
    assert sign_in_config(settings) == {
        "sign_in": "oidc",
        "live_output": "poll",
        "client_id": "console-client",
        "authorize_url": OIDC["STEWARD_CONSOLE_AUTHORIZE_URL"],
        "token_url": OIDC["STEWARD_CONSOLE_TOKEN_URL"],
        "scopes": "openid email",
    }
    policy = content_security_policy(settings)
    assert "connect-src 'self' https://steward.auth.eu-west-1.amazoncognito.com;" in policy
    assert "script-src 'self';" in policy


@pytest.mark.parametrize(
    "token_url",
    [
        "http://plain.example/oauth2/token",
        "javascript:alert(1)",
        "https://",
        "",
        "https://a.example x;",
        "https://a.example;script-src *",
    ],
)
def test_the_policy_never_widens_to_an_origin_that_is_not_plain_https(token_url: str) -> None:
    policy = content_security_policy(Settings.from_env({**OIDC, "STEWARD_CONSOLE_TOKEN_URL": token_url}))
    connect = policy.split("connect-src ", 1)[1].split(";", 1)[0]
    assert connect == "'self'"  # a host only: never a space, a `;` or another scheme


def test_oidc_sign_in_without_its_endpoints_is_named() -> None:
    with pytest.raises(RuntimeError, match="STEWARD_CONSOLE_TOKEN_URL is not set"):
        sign_in_config(Settings.from_env({**OIDC, "STEWARD_CONSOLE_TOKEN_URL": ""}))


def test_an_unknown_sign_in_kind_is_refused_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="STEWARD_CONSOLE_SIGN_IN must be one of oidc, local, none"):
        Settings.from_env({"STEWARD_CONSOLE_SIGN_IN": "password"})


def test_a_login_code_signs_in_once_and_only_before_it_expires() -> None:
    now = [100.0]
    codes = LoginCodes(lambda _: {}, lambda sub: f"token-{sub}", ttl_seconds=120, clock=lambda: now[0])
    code = codes.issue("erin")
    assert codes.redeem(code) == "erin"
    assert codes.redeem(code) is None  # spent
    late = codes.issue("erin")
    now[0] += 120
    assert codes.redeem(late) is None  # expired
    assert codes.redeem("") is None
    assert len({codes.issue("erin") for _ in range(50)}) == 50  # unguessable, never repeated
