"""`steward login` / `steward logout` and the stored login's use by the API client, against a
fake OIDC issuer and a fake API on loopback (real HTTP, httpx unmocked; only the browser is
replaced, by one that fetches the authorization URL and follows its redirect)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import webbrowser
from collections.abc import Callable, Iterator
from pathlib import Path

import jwt
import pytest
from steward import cli
from steward.adapters import login
from steward.adapters.api_client import Endpoint, resolve_endpoint

from tests.support.oidc import CLIENT_ID, FakeApi, FakeIssuer, browser, replace_param, s256

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("STEWARD_API_URL", "STEWARD_TOKEN", "STEWARD_STATE_FILE", "STEWARD_USER"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no .steward/local.json here


@pytest.fixture
def issuer() -> Iterator[FakeIssuer]:
    with FakeIssuer() as fake:
        yield fake


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as fake:
        yield fake


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], issuer: FakeIssuer) -> Run:
    """`steward ARGS...` in process: (exit code, stdout, stderr), which never hold a token."""

    def call(*args: str) -> tuple[int, str, str]:
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        for token in issuer.issued:
            assert token not in out, "a token was printed on stdout"
            assert token not in err, "a token was printed on stderr"
        assert "Traceback" not in err
        return code, out, err

    return call


def _login(run: Run, issuer: FakeIssuer, api: FakeApi, *extra: str) -> tuple[int, str, str]:
    flags = ["--api-url", api.url, "--issuer", issuer.url, "--client-id", CLIENT_ID, "--port", "0"]
    return run("--json", "login", *flags, *extra)


def _use(monkeypatch: pytest.MonkeyPatch, fake_browser: Callable[[str], bool]) -> None:
    monkeypatch.setattr(webbrowser, "open", fake_browser)


def test_login_stores_tokens_privately_and_the_api_gets_the_id_token(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, browser())
    code, out, err = _login(run, issuer, api)
    assert code == 0, err
    summary = json.loads(out)
    assert summary["api_url"] == api.url
    assert summary["sub"] == "user-123"
    assert "/authorize?" in err  # the sign-in URL is shown, for when no browser opens

    path = login.credentials_file()
    assert summary["credentials_file"] == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    stored = json.loads(path.read_text())
    assert stored["api_url"] == api.url
    assert stored["refresh_token"]
    assert jwt.decode(stored["id_token"], options={"verify_signature": False})["aud"] == CLIENT_ID
    assert stored["expires_at"] > time.time()
    assert issuer.grants == ["authorization_code"]

    code, out, err = run("--json", "loop", "show")
    assert code == 0, err
    assert api.authorizations == [f"Bearer {stored['id_token']}"]

    # The flags were saved once: a second login needs none.
    code, _, err = run("login")
    assert code == 0, err
    assert json.loads(login.config_file().read_text())["client_id"] == CLIENT_ID


def test_access_token_when_asked(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, browser())
    assert _login(run, issuer, api, "--token", "access")[0] == 0
    assert run("--json", "loop", "show")[0] == 0
    stored = json.loads(login.credentials_file().read_text())
    assert api.authorizations == [f"Bearer {stored['access_token']}"]


def test_a_wrong_state_is_refused_and_nothing_stored(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, browser(tamper_callback=lambda url: replace_param(url, "state", "forged")))
    code, out, _ = _login(run, issuer, api)
    assert code == 1
    error = json.loads(out)["error"]  # under --json, errors are JSON on stdout
    assert error["code"] == "login_state"
    assert error["message"].startswith("the sign-in answer carried the wrong state")
    assert not login.credentials_file().exists()
    assert not login.config_file().exists()
    assert issuer.grants == []  # the code was never exchanged


def test_an_access_denied_callback_is_a_clear_error(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    issuer.deny = True
    _use(monkeypatch, browser())
    code, out, _ = _login(run, issuer, api)
    assert code == 1
    assert json.loads(out)["error"] == {
        "code": "login_refused",
        "message": "the issuer refused the sign-in: access_denied (User denied the request)",
    }
    assert not login.credentials_file().exists()


def test_a_bad_pkce_verifier_is_refused_by_the_token_endpoint(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The authorization request carries another challenge, so the CLI's verifier does not match.
    forged = s256("some-other-verifier-" * 3)
    _use(monkeypatch, browser(tamper_authorize=lambda url: replace_param(url, "code_challenge", forged)))
    code, out, _ = _login(run, issuer, api)
    assert code == 1
    assert json.loads(out)["error"] == {
        "code": "token_refused",
        "message": "the token endpoint refused the code: invalid_grant (PKCE verification failed)",
    }
    assert issuer.grants == ["authorization_code"]
    assert not login.credentials_file().exists()


def test_an_expired_token_is_refreshed_transparently(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, browser())
    issuer.ttl = -120  # the first tokens are expired when they arrive
    assert _login(run, issuer, api)[0] == 0
    old = json.loads(login.credentials_file().read_text())
    assert old["expires_at"] < time.time()

    issuer.ttl = 3600
    code, _, err = run("--json", "loop", "show")
    assert code == 0, err
    new = json.loads(login.credentials_file().read_text())
    assert issuer.grants == ["authorization_code", "refresh_token"]
    assert new["id_token"] != old["id_token"]
    assert new["refresh_token"] == old["refresh_token"]  # Cognito returns none; the old one is kept
    assert new["expires_at"] > time.time()
    assert stat.S_IMODE(login.credentials_file().stat().st_mode) == 0o600
    assert api.authorizations == [f"Bearer {new['id_token']}"]

    assert run("--json", "loop", "show")[0] == 0  # still fresh: no second refresh
    assert issuer.grants == ["authorization_code", "refresh_token"]


def test_a_failed_refresh_says_to_log_in_again(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, browser())
    issuer.ttl = -120
    assert _login(run, issuer, api)[0] == 0
    issuer.revoke_refresh_tokens()
    code, out, _ = run("--json", "loop", "show")
    assert code == 1
    assert json.loads(out)["error"] == {
        "code": "login_expired",
        "message": "the stored sign-in has expired and its renewal was refused: "
        "invalid_grant (Refresh Token has expired); run `steward login` again",
    }
    code, out, err = run("loop", "show")  # without --json, the same error is one line on stderr
    assert (code, out) == (1, "")
    assert err.splitlines()[-1].startswith("error: login_expired: the stored sign-in has expired")
    assert api.authorizations == []


def test_logout_removes_the_stored_tokens(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use(monkeypatch, browser())
    assert _login(run, issuer, api)[0] == 0
    code, out, _ = run("logout")
    assert code == 0
    assert out.startswith("signed out")
    assert not login.credentials_file().exists()
    assert login.config_file().exists()  # the settings stay, so `steward login` alone signs in again
    code, _, err = run("loop", "show")
    assert code == 1
    assert "steward login" in err
    assert run("logout")[1] == "not signed in\n"


def test_env_and_the_local_state_file_come_before_the_stored_login(
    run: Run, issuer: FakeIssuer, api: FakeApi, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _use(monkeypatch, browser())
    assert _login(run, issuer, api)[0] == 0
    stored = json.loads(login.credentials_file().read_text())
    assert resolve_endpoint(None).token == stored["id_token"]

    state = tmp_path / ".steward" / "local.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"api_url": "http://127.0.0.1:1", "users": {"alice": "dev-alice"}}))
    assert resolve_endpoint(None) == Endpoint("http://127.0.0.1:1", "dev-alice")

    monkeypatch.setenv("STEWARD_API_URL", "http://127.0.0.1:2")
    monkeypatch.setenv("STEWARD_TOKEN", "from-env")
    assert resolve_endpoint(None).token == "from-env"

    state.unlink()
    monkeypatch.delenv("STEWARD_TOKEN")
    assert resolve_endpoint(None).api_url == "http://127.0.0.1:2"  # the URL alone overrides the login's
    assert resolve_endpoint(None).token == stored["id_token"]


def test_missing_settings_and_plain_http_issuers_are_one_line_errors(run: Run) -> None:
    code, _, err = run("login", "--api-url", "https://api.example.com")
    assert code == 1
    assert err.splitlines() == [
        f"error: login_settings: missing --issuer, --client-id (give them once; they are saved in "
        f"{login.config_file()})"
    ]
    code, _, err = run(
        "login",
        "--api-url",
        "https://api.example.com",
        "--issuer",
        "http://idp.example.com",
        "--client-id",
        "x",
    )
    assert code == 1
    assert "must be an https URL" in err


def test_no_browser_prints_the_url_and_a_separate_process_signs_in(
    issuer: FakeIssuer, api: FakeApi, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEWARD_")}
    flags = ["--api-url", api.url, "--issuer", issuer.url, "--client-id", CLIENT_ID, "--port", "0"]
    process = subprocess.Popen(
        [sys.executable, "-m", "steward.cli", "login", *flags, "--no-browser", "--timeout", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert process.stderr is not None
    url = ""
    while not url:
        line = process.stderr.readline()
        assert line, "the CLI ended without printing the sign-in URL"
        url = line.strip() if "/authorize?" in line else ""
    browser()(url)  # the person opens the printed URL
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert out.startswith(f"signed in to {api.url} as user@example.com")
    for token in issuer.issued:
        assert token not in out
        assert token not in err
    assert login.credentials_file().exists()
