"""The web console's OIDC sign-in in a real browser: authorization code with PKCE (S256) and a
state check, against a fake issuer served over HTTPS (the console's policy reaches only an
https token origin), with the real API handler behind a JWT authorizer that trusts that issuer.

This is the sign-in a deployment uses (the Cognito hosted UI or the configured issuer); the
local stack's login links are tested in tests/e2e/test_console.py. The browser accepts the
issuer's certificate (`ignore_https_errors`), made for this test by `steward.local.tls`.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, expect
from steward import wiring
from steward.api.handler import lambda_handler
from steward.domain.routes import CONSOLE_PREFIX
from steward.local import tls as local_tls
from steward.local.http_adapter import LambdaHttpServer
from steward.local.sample_repo import SAMPLE_REPO
from steward.wiring import Services

from tests.support.documents import document
from tests.support.installations import link_installation
from tests.support.oidc import FakeIssuer, first_values, replace_param

CLIENT_ID = "steward-console-test"
SUB = "user-123"  # whom the fake issuer signs everyone in as


class Deployment:
    """The console and the API on one origin, signing people in at `issuer`."""

    def __init__(self, issuer: FakeIssuer, api: LambdaHttpServer) -> None:
        self.issuer = issuer
        self.api = api
        self.console_url = f"{api.url}{CONSOLE_PREFIX}/"


@contextmanager
def deployed(
    services: Services, monkeypatch: pytest.MonkeyPatch, tls: ssl.SSLContext | None
) -> Iterator[Deployment]:
    link_installation(services.tables, SUB, SAMPLE_REPO)
    with FakeIssuer(client_id=CLIENT_ID, tls=tls) as issuer:
        for name, value in {
            "STEWARD_TABLE_PREFIX": services.tables.prefix,
            "STEWARD_ARTIFACTS_BUCKET": services.settings.artifacts_bucket,
            "STEWARD_CONSOLE_SIGN_IN": "oidc",
            "STEWARD_CONSOLE_CLIENT_ID": CLIENT_ID,
            "STEWARD_CONSOLE_AUTHORIZE_URL": f"{issuer.url}/authorize",
            "STEWARD_CONSOLE_TOKEN_URL": f"{issuer.url}/token",
        }.items():
            monkeypatch.setenv(name, value)
        wiring.reset()
        with LambdaHttpServer(
            lambda_handler,
            kind="http_api",
            authorizer=issuer.verify,
            public_path_prefixes=(CONSOLE_PREFIX,),
            function_name="steward-api",
        ) as api:
            yield Deployment(issuer, api)
        wiring.reset()


@pytest.fixture
def deployment(services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    with deployed(services, monkeypatch, local_tls.create(tmp_path).context) as made:
        yield made


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(ignore_https_errors=True)  # the issuer's certificate is this test's own
    yield made
    made.close()


def watched(context: BrowserContext) -> tuple[Page, list[str]]:
    """A page, and every URL it requested (top-level and fetches)."""
    page = context.new_page()
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url))
    return page, seen


def storage(page: Page) -> dict[str, dict[str, str]]:
    return dict(
        page.evaluate(
            "() => ({session: Object.fromEntries(Object.entries(sessionStorage)),"
            " local: Object.fromEntries(Object.entries(localStorage))})"
        )
    )


def publish(deployment: Deployment, token: str, slug: str) -> None:
    markdown = document("Add a `subtract(a, b)` function.", repo=SAMPLE_REPO, checks=("python -m pytest -q",))
    answer = httpx.put(
        f"{deployment.api.url}/v1/plans/{slug}",
        json={"markdown": markdown},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert answer.status_code == 200, answer.text


def sign_in(page: Page, deployment: Deployment) -> None:
    page.goto(deployment.console_url)
    page.get_by_role("button", name="Sign in").click()


def signed_in(context: BrowserContext, deployment: Deployment) -> tuple[Page, list[str]]:
    """A page signed in through the issuer, and every URL it requested."""
    page, seen = watched(context)
    sign_in(page, deployment)
    expect(page.locator("#who")).to_have_text("user@example.com")
    return page, seen


def test_sign_in_is_an_authorization_code_with_pkce_and_keeps_every_token_out_of_urls(
    context: BrowserContext, deployment: Deployment
) -> None:
    page, seen = signed_in(context, deployment)
    expect(page.get_by_role("heading", name="Plans")).to_be_visible()

    # The page asked for a code with an S256 challenge and a fresh state, and redeemed it
    # with the verifier (the fake refuses a verifier that does not hash to the challenge).
    (asked,) = deployment.issuer.authorizations
    assert asked["response_type"] == "code"
    assert asked["code_challenge_method"] == "S256"
    assert asked["client_id"] == CLIENT_ID
    assert asked["redirect_uri"] == deployment.console_url
    assert len(asked["state"]) >= 16
    assert deployment.issuer.grants == ["authorization_code"]

    # Its token is the issuer's ID token, kept in this tab's session storage and nowhere else.
    kept = storage(page)
    id_tokens = [t for t in deployment.issuer.issued if t in kept["session"].values()]
    assert len(id_tokens) == 1
    assert kept["local"] == {}
    assert "steward.pkce" not in kept["session"]  # the verifier is gone once used
    assert urlsplit(page.url).query == ""  # the code and state left the address bar
    for url in seen:
        assert not any(token in url for token in deployment.issuer.issued)

    # What the page signs in as is what the API scopes to: a plan published with the same
    # identity shows in its list.
    publish(deployment, id_tokens[0], "oidc-plan")
    page.reload()
    expect(page.get_by_role("link", name="oidc-plan")).to_be_visible()


def test_a_callback_whose_state_this_page_did_not_make_redeems_nothing(
    context: BrowserContext, deployment: Deployment
) -> None:
    page, _ = watched(context)

    def forged_state(route: Route) -> None:  # an attacker's redirect back, with a code of theirs
        location = deployment.issuer.authorize(first_values(urlsplit(route.request.url).query))[1]
        route.fulfill(
            status=302, headers={"Location": replace_param(location, "state", "forged-state-value")}
        )

    page.route(f"{deployment.issuer.url}/authorize*", forged_state)
    sign_in(page, deployment)
    expect(page.get_by_role("alert")).to_contain_text("sign-in answered a request this page did not make")
    assert deployment.issuer.grants == []  # the code was never sent to the token endpoint
    assert "steward.token" not in json.dumps(storage(page))
    assert urlsplit(page.url).query == ""


def test_a_callback_replayed_after_sign_in_is_refused(
    context: BrowserContext, deployment: Deployment
) -> None:
    _, seen = signed_in(context, deployment)
    (callback,) = [u for u in seen if u.startswith(deployment.console_url + "?")]

    # The same redirect again in a new tab: no verifier or state of its own, so nothing is redeemed.
    other, _ = watched(context)
    other.goto(callback)
    expect(other.get_by_role("alert")).to_contain_text("sign-in answered a request this page did not make")
    assert deployment.issuer.grants == ["authorization_code"]


def test_a_denied_sign_in_is_shown_and_keeps_no_token(
    context: BrowserContext, deployment: Deployment
) -> None:
    deployment.issuer.deny = True
    page, _ = watched(context)
    sign_in(page, deployment)
    expect(page.get_by_role("alert")).to_contain_text("sign-in refused: access_denied")
    assert deployment.issuer.grants == []
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()


def test_the_policy_lets_the_page_reach_the_token_origin_and_nothing_else(
    context: BrowserContext, deployment: Deployment
) -> None:
    answer = httpx.get(deployment.console_url)
    policy = answer.headers["content-security-policy"]
    token_origin = deployment.issuer.url
    assert f"connect-src 'self' {token_origin};" in policy
    assert "script-src 'self';" in policy
    assert "unsafe" not in policy

    page, _ = watched(context)
    page.goto(deployment.console_url)
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    reach = "async (url) => { try { await fetch(url, {method: 'POST'}); return 'reached'; } catch (e) { return 'blocked'; } }"
    assert page.evaluate(reach, f"{token_origin}/token") == "reached"
    # Same host, another port or scheme: another origin, outside the policy.
    other_port = f"https://127.0.0.1:{urlsplit(token_origin).port + 1}/"
    plain = token_origin.replace("https://", "http://") + "/token"
    for url in (other_port, plain, "https://example.com/"):
        assert page.evaluate(reach, url) == "blocked", url


def test_an_issuer_whose_token_endpoint_is_not_https_cannot_finish_a_sign_in(
    context: BrowserContext, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    with deployed(services, monkeypatch, tls=None) as plain:
        assert "connect-src 'self';" in httpx.get(plain.console_url).headers["content-security-policy"]
        page, _ = watched(context)
        sign_in(page, plain)
        expect(page.get_by_role("alert")).to_contain_text("cannot reach the sign-in's token endpoint")
        assert len(plain.issuer.authorizations) == 1
        assert plain.issuer.grants == []  # the policy stopped the exchange before it left the page
        assert "steward.token" not in json.dumps(storage(page))
