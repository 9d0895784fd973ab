"""The GitHub twin against real clients: githubkit for REST and webhooks, real `git` over HTTP.

Real sockets on 127.0.0.1, real `git http-backend`, a real webhook receiver; no mocks.
githubkit parsing a body into its model is the proof that the body is shaped as GitHub's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import githubkit.webhooks
import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from githubkit import AppAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RequestError, RequestFailed, SecondaryRateLimitExceeded
from githubkit_schemas.latest.models import (
    AppPermissions,
    FullRepository,
    Installation,
    InstallationToken,
    IssueComment,
    PullRequest,
    PullRequestMergeResult,
    PullRequestSimple,
    SimpleInstallation,
)
from pydantic import TypeAdapter
from steward.domain.follow_ups import TriggerKind, author_problem, trigger_of
from steward.local.github_twin import GitHubTwin, admin
from steward.local.github_twin.state import TwinError
from steward.local.github_twin.twin import DRIVE_BY_LOGIN, REVIEWER_LOGIN

from tests.support.github_payloads import real_payload

pytestmark = pytest.mark.integration

APP_ID = 4242
SECRET = "webhook-secret-for-tests"


# -- fixtures and helpers ----------------------------------------------------------------------


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


class Receiver:
    """A webhook endpoint that keeps the exact bytes and headers of each POST."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.status = 200
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.received.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/webhook"

    def events(self) -> list[tuple[str, str | None]]:
        with self._lock:
            return [(r.headers["x-github-event"], json.loads(r.body).get("action")) for r in self.received]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def twin(tmp_path: Path, receiver: Receiver) -> Iterator[GitHubTwin]:
    with GitHubTwin(tmp_path / "twin", app_id=APP_ID, webhook_url=receiver.url, webhook_secret=SECRET) as t:
        yield t


@pytest.fixture
def seeded(twin: GitHubTwin) -> int:
    twin.create_repo("acme/widgets", {"README.md": "# widgets\n", "src/app.py": "print('hi')\n"})
    twin.create_repo("acme/gadgets", {"README.md": "# gadgets\n"})
    twin.create_repo("other/secret", {"README.md": "not yours\n"})
    installation_id = twin.create_installation("acme", ["widgets", "gadgets"])
    twin.create_installation("other", ["secret"])
    return installation_id


def app_client(twin: GitHubTwin, **options: Any) -> GitHub[Any]:
    """githubkit caches App JWTs and installation tokens process-wide by App id and
    installation id: every twin has a new key, so every client gets its own cache."""
    options.setdefault("cache_strategy", MemCacheStrategy())
    options.setdefault("http_cache", False)
    options.setdefault("auto_retry", False)
    return GitHub(
        AppAuthStrategy(APP_ID, twin.app_private_key_pem.decode()),
        base_url=twin.url + "/",
        **options,
    )


def token_client(twin: GitHubTwin, token: str, **options: Any) -> GitHub[Any]:
    options.setdefault("cache_strategy", MemCacheStrategy())
    options.setdefault("http_cache", False)
    options.setdefault("auto_retry", False)
    return GitHub(TokenAuthStrategy(token), base_url=twin.url + "/", **options)


def basic_header(token: str, user: str = "x-access-token") -> str:
    return "Authorization: Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()


def git(
    *args: str, cwd: Path | None = None, header: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Real git with no user config; the credential travels only in `http.extraHeader`
    given through the environment (GIT_CONFIG_COUNT), never in a URL or a config file."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd or Path.cwd()),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "Steward Test",
        "GIT_AUTHOR_EMAIL": "test@steward.invalid",
        "GIT_COMMITTER_NAME": "Steward Test",
        "GIT_COMMITTER_EMAIL": "test@steward.invalid",
    }
    if header is not None:
        env |= {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader", "GIT_CONFIG_VALUE_0": header}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args[0]} failed: {proc.stderr}")
    return proc


def push_branch(twin: GitHubTwin, tmp_path: Path, token: str, branch: str, files: dict[str, str]) -> str:
    """Clone acme/widgets, commit `files` on `branch`, push it; the pushed SHA."""
    work = tmp_path / f"work-{branch.replace('/', '-')}"
    git("clone", "--quiet", f"{twin.url}/acme/widgets.git", str(work), header=basic_header(token))
    git("checkout", "-q", "-b", branch, cwd=work)
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git("add", "-A", cwd=work)
    git("commit", "-qm", f"change on {branch}", cwd=work)
    git("push", "-q", "origin", branch, cwd=work, header=basic_header(token))
    return git("rev-parse", "HEAD", cwd=work).stdout.strip()


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


# -- App auth, tokens, look-ups ----------------------------------------------------------------


def test_installation_token_lookups_parse_as_githubkit_models(twin: GitHubTwin, seeded: int) -> None:
    gh = app_client(twin)
    minted = gh.rest.apps.create_installation_access_token(
        seeded,
        data={"repositories": ["widgets"], "permissions": {"contents": "write", "pull_requests": "write"}},
    )
    assert minted.status_code == 201
    token = minted.parsed_data
    assert isinstance(token, InstallationToken)
    assert token.token.startswith("ghs_")
    assert len(token.token) >= 40
    expires = datetime.strptime(token.expires_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)
    assert isinstance(token.permissions, AppPermissions)
    assert token.permissions.contents == "write"
    assert token.permissions.pull_requests == "write"
    assert token.permissions.metadata == "read"
    assert isinstance(token.repositories, list)
    assert [r.full_name for r in token.repositories] == ["acme/widgets"]

    installation = gh.rest.apps.get_installation(seeded).parsed_data
    assert isinstance(installation, Installation)
    assert installation.id == seeded
    assert installation.app_id == APP_ID
    assert installation.account is not None
    assert getattr(installation.account, "login", None) == "acme"
    assert gh.rest.apps.get_repo_installation("acme", "gadgets").parsed_data.id == seeded
    assert {i.id for i in gh.rest.apps.list_installations().parsed_data} >= {seeded}

    scoped = gh.with_auth(gh.auth.as_installation(seeded, repositories=["widgets"]))
    repo = scoped.rest.repos.get("acme", "widgets").parsed_data
    assert isinstance(repo, FullRepository)
    assert repo.full_name == "acme/widgets"
    assert repo.default_branch == "main"
    assert repo.private
    assert repo.clone_url == f"{twin.url}/acme/widgets.git"
    # the token is scoped: a repository of the installation that was not asked for is hidden
    with pytest.raises(RequestFailed) as hidden:
        scoped.rest.repos.get("acme", "gadgets")
    assert hidden.value.response.status_code == 404
    assert hidden.value.response.json()["message"] == "Not Found"
    everything = gh.with_auth(gh.auth.as_installation(seeded))
    assert everything.rest.repos.get("acme", "gadgets").parsed_data.name == "gadgets"
    listed = everything.rest.apps.list_repos_accessible_to_installation().parsed_data
    assert {r.full_name for r in listed.repositories} == {"acme/widgets", "acme/gadgets"}


def test_token_minting_refuses_what_github_refuses(twin: GitHubTwin, seeded: int) -> None:
    gh = app_client(twin)
    for data in (
        {"repositories": ["secret"]},  # another account's repository
        {"repositories": ["widgets", "nope"]},
        {"permissions": {"administration": "write"}},  # not granted to the installation
    ):
        with pytest.raises(RequestFailed) as refused:
            gh.rest.apps.create_installation_access_token(seeded, data=data)  # type: ignore[call-overload]
        assert refused.value.response.status_code == 422, data
    with pytest.raises(RequestFailed) as unknown:
        gh.rest.apps.create_installation_access_token(999999)
    assert unknown.value.response.status_code == 404

    url = f"{twin.url}/app/installations/{seeded}/access_tokens"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    bad_jwts = {
        "foreign key": jwt.encode(
            {"iss": str(APP_ID), "iat": now - 60, "exp": now + 500}, other_key, "RS256"
        ),
        "exp beyond 10 min": jwt.encode(
            {"iss": str(APP_ID), "iat": now - 60, "exp": now + 900}, twin.app_private_key_pem, "RS256"
        ),
        "expired": jwt.encode(
            {"iss": str(APP_ID), "iat": now - 700, "exp": now - 100}, twin.app_private_key_pem, "RS256"
        ),
        "other app": jwt.encode(
            {"iss": "1", "iat": now - 60, "exp": now + 500}, twin.app_private_key_pem, "RS256"
        ),
        "no iat": jwt.encode({"iss": str(APP_ID), "exp": now + 500}, twin.app_private_key_pem, "RS256"),
        "HS256": jwt.encode({"iss": str(APP_ID), "iat": now - 60, "exp": now + 500}, "x" * 32, "HS256"),
    }
    installation_token = twin.create_token(seeded)
    for label, value in [*bad_jwts.items(), ("installation token", installation_token), ("garbage", "x.y.z")]:
        response = httpx.post(url, headers={"Authorization": f"Bearer {value}"}, json={})
        assert response.status_code == 401, label
        assert set(response.json()) >= {"message", "documentation_url"}
    assert httpx.post(url, json={}).status_code == 401
    # GitHub's own examples put the App id in `iss` as a number; PyJWT only encodes strings
    claims = json.dumps({"iss": APP_ID, "iat": now - 60, "exp": now + 540}).encode()
    good = jwt.api_jws.encode(claims, twin.app_private_key_pem, algorithm="RS256")
    assert httpx.post(url, headers={"Authorization": f"Bearer {good}"}, json={}).status_code == 201
    for body in (
        {"permissions": {"contents": "admin"}},
        {"repositories": "widgets"},
        {"repository_ids": [1]},
    ):
        assert httpx.post(url, headers={"Authorization": f"Bearer {good}"}, json=body).status_code == 422, (
            body
        )

    twin.suspend(seeded)
    suspended = httpx.post(url, headers={"Authorization": f"Bearer {good}"}, json={})
    assert suspended.status_code == 403
    assert suspended.json()["message"] == "This installation has been suspended"
    installation_client = token_client(twin, installation_token)
    with pytest.raises(RequestFailed) as still_suspended:
        installation_client.rest.repos.get("acme", "widgets")
    assert still_suspended.value.response.status_code == 403
    twin.suspend(seeded, False)
    assert installation_client.rest.repos.get("acme", "widgets").status_code == 200


def test_rest_errors_are_github_shaped(twin: GitHubTwin, seeded: int) -> None:
    for headers in ({}, {"Authorization": "token ghs_" + "x" * 36}, {"Authorization": "Basic abc"}):
        response = httpx.get(f"{twin.url}/repos/acme/widgets", headers=headers)
        assert response.status_code == 401
        assert response.json()["documentation_url"].startswith("https://docs.github.com/")
    assert (
        httpx.get(
            f"{twin.url}/repos/acme/widgets", headers={"Authorization": "token ghs_" + "x" * 36}
        ).json()["message"]
        == "Bad credentials"
    )
    token = twin.create_token(seeded)
    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.get(f"{twin.url}/repos/other/secret", headers=auth).json()["message"] == "Not Found"
    assert httpx.get(f"{twin.url}/nothing/here", headers=auth).status_code == 404
    broken = httpx.post(f"{twin.url}/repos/acme/widgets/pulls", headers=auth, content=b"{not json")
    assert broken.status_code == 400
    assert broken.json()["message"] == "Problems parsing JSON"
    read_only = twin.create_token(seeded, permissions={"contents": "read"})
    refused = httpx.post(
        f"{twin.url}/repos/acme/widgets/pulls",
        headers={"Authorization": f"token {read_only}"},
        json={"title": "t", "head": "x", "base": "main"},
    )
    assert refused.status_code == 403
    assert refused.json()["message"] == "Resource not accessible by integration"
    twin.expire_token(token)
    assert httpx.get(f"{twin.url}/repos/acme/widgets", headers=auth).status_code == 401


def test_get_answers_carry_etags_and_githubkit_cache_revalidates(twin: GitHubTwin, seeded: int) -> None:
    token = twin.create_token(seeded)
    auth = {"Authorization": f"token {token}"}
    first = httpx.get(f"{twin.url}/repos/acme/widgets", headers=auth)
    assert first.headers["etag"]
    assert "max-age=60" in first.headers["cache-control"]
    assert first.headers["x-ratelimit-remaining"]
    assert first.headers["x-github-request-id"]
    again = httpx.get(
        f"{twin.url}/repos/acme/widgets", headers={**auth, "If-None-Match": first.headers["etag"]}
    )
    assert again.status_code == 304
    assert again.content == b""
    cached = token_client(twin, token, http_cache=True)  # githubkit's default: hishel revalidates
    assert cached.rest.repos.get("acme", "widgets").parsed_data.name == "widgets"
    assert cached.rest.repos.get("acme", "widgets").parsed_data.name == "widgets"


# -- pull requests -----------------------------------------------------------------------------


def test_pull_request_create_list_get_merge_close(twin: GitHubTwin, seeded: int, tmp_path: Path) -> None:
    gh = app_client(twin)
    inst = gh.with_auth(gh.auth.as_installation(seeded, repositories=["widgets"]))
    token = twin.create_token(seeded, repositories=["widgets"])
    sha = push_branch(twin, tmp_path, token, "steward/abc123", {"src/new.py": "x = 1\n"})
    assert twin.branch_sha("acme/widgets", "steward/abc123") == sha
    assert twin.branch_sha("acme/widgets", "missing") is None

    created = inst.rest.pulls.create(
        "acme", "widgets", title="Add x", body="Why: tests", head="steward/abc123", base="main"
    )
    assert created.status_code == 201
    pull = created.parsed_data
    assert isinstance(pull, PullRequest)
    assert pull.number == 1
    assert pull.state == "open"
    assert not pull.merged
    assert pull.html_url == f"{twin.url}/acme/widgets/pull/1"
    assert pull.head.ref == "steward/abc123"
    assert pull.head.sha == sha
    assert pull.head.label == "acme:steward/abc123"
    assert pull.base.ref == "main"
    assert pull.user.login == "steward[bot]"
    assert pull.user.type == "Bot"
    assert (pull.commits, pull.additions, pull.changed_files) == (1, 1, 1)
    assert created.headers["location"] == pull.url

    with pytest.raises(RequestFailed) as again:
        inst.rest.pulls.create("acme", "widgets", title="Add x", head="steward/abc123", base="main")
    assert again.value.response.status_code == 422
    assert (
        again.value.response.json()["errors"][0]["message"]
        == "A pull request already exists for acme:steward/abc123."
    )
    with pytest.raises(RequestFailed) as no_branch:
        inst.rest.pulls.create("acme", "widgets", title="t", head="steward/none", base="main")
    assert no_branch.value.response.status_code == 422
    assert no_branch.value.response.json()["errors"] == [
        {"resource": "PullRequest", "field": "head", "code": "invalid"}
    ]

    listed = inst.rest.pulls.list("acme", "widgets", head="acme:steward/abc123", state="open").parsed_data
    assert [type(p) for p in listed] == [PullRequestSimple]
    assert listed[0].number == 1
    assert (
        inst.rest.pulls.list("acme", "widgets", head="acme:steward/abc123", state="closed").parsed_data == []
    )
    assert inst.rest.pulls.list("acme", "widgets", head="acme:other", state="all").parsed_data == []
    fetched = inst.rest.pulls.get("acme", "widgets", 1).parsed_data
    assert isinstance(fetched, PullRequest)
    assert fetched.id == pull.id
    assert fetched.mergeable is True

    merged = inst.rest.pulls.merge("acme", "widgets", 1, data={"merge_method": "merge"}).parsed_data
    assert isinstance(merged, PullRequestMergeResult)
    assert merged.merged
    assert twin.branch_sha("acme/widgets", "main") == merged.sha
    parents = git("rev-list", "--parents", "-n", "1", merged.sha, cwd=twin.git_root / "acme" / "widgets.git")
    assert parents.stdout.split()[1:][-1] == sha  # a merge commit: base and head as parents
    after_response = inst.rest.pulls.get("acme", "widgets", 1)
    after = after_response.parsed_data
    assert after.state == "closed"
    assert after.merged
    assert json.loads(after_response.content)["merge_commit_sha"] == merged.sha  # not in githubkit's model
    assert after.merged_by is not None
    assert after.merged_at is not None
    with pytest.raises(RequestFailed) as twice:
        inst.rest.pulls.merge("acme", "widgets", 1)
    assert twice.value.response.status_code == 405

    second_sha = push_branch(twin, tmp_path, token, "steward/def456", {"docs.md": "doc\n"})
    second = inst.rest.pulls.create("acme", "widgets", title="Docs", head="acme:steward/def456", base="main")
    assert second.parsed_data.number == 2
    assert second.parsed_data.head.sha == second_sha
    closed = inst.rest.pulls.update("acme", "widgets", 2, state="closed").parsed_data
    assert closed.state == "closed"
    assert not closed.merged
    assert closed.closed_at is not None
    reopened = inst.rest.pulls.update("acme", "widgets", 2, state="open").parsed_data
    assert reopened.state == "open"
    with pytest.raises(RequestFailed) as merged_reopen:
        inst.rest.pulls.update("acme", "widgets", 1, state="open")
    assert merged_reopen.value.response.status_code == 422
    all_pulls = inst.rest.pulls.list("acme", "widgets", state="all").parsed_data
    assert [p.number for p in all_pulls] == [2, 1]  # newest first, as GitHub sorts


def test_pull_request_comments_and_a_close_by_the_app_as_github_answers_them(
    twin: GitHubTwin, receiver: Receiver, seeded: int, tmp_path: Path
) -> None:
    """What a withdrawal uses: comment on a pull request through the issues API, list the
    comments, close it with PATCH; the close is a `pull_request` `closed` delivery sent by the
    App's bot, unmerged."""
    token = twin.create_token(seeded)
    gh = token_client(twin, token)
    push_branch(twin, tmp_path, token, "steward/c0", {"c.txt": "c\n"})
    gh.rest.pulls.create("acme", "widgets", title="C", head="steward/c0", base="main")
    made = gh.rest.issues.create_comment("acme", "widgets", 1, body="Withdrawn.")
    assert made.status_code == 201
    comment = made.parsed_data
    assert isinstance(comment, IssueComment)
    assert made.headers["location"] == comment.url
    assert (comment.body, comment.user.login if comment.user else None) == ("Withdrawn.", "steward[bot]")
    assert comment.issue_url.endswith("/repos/acme/widgets/issues/1")
    gh.rest.issues.create_comment("acme", "widgets", 1, body="Second.")
    listed = gh.rest.issues.list_comments("acme", "widgets", 1, per_page=1).parsed_data
    assert [c.body for c in listed] == ["Withdrawn."]  # oldest first, paged
    assert [c["body"] for c in admin.comments(twin.url, "acme/widgets", 1)] == ["Withdrawn.", "Second."]
    with pytest.raises(RequestFailed) as empty:
        gh.rest.issues.create_comment("acme", "widgets", 1, body="")
    assert empty.value.response.status_code == 422
    with pytest.raises(RequestFailed) as missing:
        gh.rest.issues.create_comment("acme", "widgets", 99, body="x")
    assert missing.value.response.status_code == 404
    reader = token_client(twin, twin.create_token(seeded, permissions={"pull_requests": "read"}))
    with pytest.raises(RequestFailed) as read_only:
        reader.rest.issues.create_comment("acme", "widgets", 1, body="x")
    assert read_only.value.response.status_code == 403
    closed = gh.rest.pulls.update("acme", "widgets", 1, state="closed").parsed_data
    assert (closed.state, closed.merged, closed.comments) == ("closed", False, 2)
    gh.rest.pulls.update("acme", "widgets", 1, state="closed")  # closing it again sends nothing
    assert twin.wait_for_deliveries()
    assert receiver.events()[-2:] == [("pull_request", "opened"), ("pull_request", "closed")]
    event = githubkit.webhooks.parse("pull_request", receiver.received[-1].body)
    assert event.action == "closed"
    assert event.pull_request.merged is False
    assert event.sender is not None
    assert event.sender.login == "steward[bot]"


def test_pull_listing_pages_like_github(twin: GitHubTwin, seeded: int, tmp_path: Path) -> None:
    token = twin.create_token(seeded)
    for n in range(5):
        push_branch(twin, tmp_path, token, f"feature/{n}", {f"f{n}.txt": f"{n}\n"})
        twin_pull = httpx.post(
            f"{twin.url}/repos/acme/widgets/pulls",
            headers={"Authorization": f"token {token}"},
            json={"title": f"PR {n}", "head": f"feature/{n}", "base": "main"},
        )
        assert twin_pull.status_code == 201
    auth = {"Authorization": f"token {token}"}
    page1 = httpx.get(f"{twin.url}/repos/acme/widgets/pulls", params={"per_page": 2}, headers=auth)
    assert [p["number"] for p in page1.json()] == [5, 4]
    assert 'rel="next"' in page1.headers["link"]
    assert 'rel="last"' in page1.headers["link"]
    page3 = httpx.get(f"{twin.url}/repos/acme/widgets/pulls", params={"per_page": 2, "page": 3}, headers=auth)
    assert [p["number"] for p in page3.json()] == [1]
    assert 'rel="next"' not in page3.headers["link"]
    # GitHub ignores a head filter without its owner: the twin does too
    assert (
        len(
            httpx.get(
                f"{twin.url}/repos/acme/widgets/pulls", params={"head": "feature/1"}, headers=auth
            ).json()
        )
        == 5
    )
    gh = token_client(twin, token)
    everything = list(
        gh.rest.paginate(gh.rest.pulls.list, owner="acme", repo="widgets", state="all", per_page=2)
    )
    assert sorted(p.number for p in everything) == [1, 2, 3, 4, 5]


def test_reviewer_merges_and_closes_through_the_admin_api(
    twin: GitHubTwin, seeded: int, tmp_path: Path
) -> None:
    token = twin.create_token(seeded)
    gh = token_client(twin, token)
    for branch in ("steward/one", "steward/two"):
        push_branch(twin, tmp_path, token, branch, {f"{branch.split('/')[1]}.txt": "x\n"})
        gh.rest.pulls.create("acme", "widgets", title=branch, head=branch, base="main")
    assert admin.parse_pull_ref("acme/widgets#1") == ("acme/widgets", 1)
    merged = admin.merge(twin.url, "acme/widgets", 1)
    assert merged["merged"]
    assert merged["merged_by"]["login"] == "twin-reviewer"
    closed = admin.close(twin.url, "acme/widgets", 2)
    assert closed["state"] == "closed"
    assert not closed["merged"]
    with pytest.raises(admin.AdminError) as refused:
        admin.merge(twin.url, "acme/widgets", 2)
    assert refused.value.status == 405
    with pytest.raises(admin.AdminError) as missing:
        admin.close(twin.url, "acme/widgets", 99)
    assert missing.value.status == 404
    assert [p["state"] for p in twin.pulls("acme/widgets")] == ["closed", "closed"]
    assert TypeAdapter(list[PullRequest]).validate_python(admin.pulls(twin.url, "acme/widgets"))
    page = httpx.get(merged["html_url"])
    assert page.status_code == 200
    assert "merged" in page.text


# -- git over smart HTTP -----------------------------------------------------------------------


def test_git_clone_and_push_with_the_token_only_in_an_extra_header(
    twin: GitHubTwin, seeded: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = twin.create_token(seeded, repositories=["widgets"])
    clone = tmp_path / "clone"
    git("clone", f"{twin.url}/acme/widgets.git", str(clone), header=basic_header(token))
    assert (clone / "src" / "app.py").read_text() == "print('hi')\n"
    git_dir_text = "".join(p.read_text(errors="replace") for p in (clone / ".git").rglob("*") if p.is_file())
    encoded = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    assert token not in git_dir_text
    assert encoded not in git_dir_text
    assert token not in (clone / ".git" / "config").read_text()

    # a push of a new branch, large enough that git sends it chunked
    git("checkout", "-q", "-b", "steward/big", cwd=clone)
    (clone / "blob.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    git("add", "blob.bin", cwd=clone)
    git("commit", "-qm", "big", cwd=clone)
    git("push", "-q", "origin", "steward/big", cwd=clone, header=basic_header(token))
    local = git("rev-parse", "HEAD", cwd=clone).stdout.strip()
    assert twin.branch_sha("acme/widgets", "steward/big") == local
    pushes = [r for r in twin.git_requests if r.service == "git-receive-pack" and r.method == "POST"]
    assert pushes
    assert pushes[-1].chunked
    assert pushes[-1].status == 200

    # many refs make git gzip its fetch negotiation; a fresh clone must still work
    for n in range(40):
        git("branch", f"padding/branch-with-a-long-enough-name-{n:03d}", cwd=clone)
    git("push", "-q", "origin", "--all", cwd=clone, header=basic_header(token))
    git("clone", "-q", f"{twin.url}/acme/widgets.git", str(tmp_path / "again"), header=basic_header(token))
    assert any(r.content_encoding == "gzip" and r.status == 200 for r in twin.git_requests)
    assert token not in caplog.text
    assert encoded not in caplog.text


def test_git_refuses_every_other_credential(twin: GitHubTwin, seeded: int, tmp_path: Path) -> None:
    good = twin.create_token(seeded, repositories=["widgets"])
    other_repo = twin.create_token(seeded, repositories=["gadgets"])
    expired = twin.create_token(seeded, repositories=["widgets"])
    twin.expire_token(expired)
    foreign = twin.create_token(_other_installation(twin), repositories=["secret"])
    url = f"{twin.url}/acme/widgets.git"
    refused = {
        "no credential": None,
        "wrong token": basic_header("ghs_" + "A" * 36),
        "token for another repository": basic_header(other_repo),
        "token of another installation": basic_header(foreign),
        "expired token": basic_header(expired),
        "bearer form": f"Authorization: Bearer {good}",
        "token form": f"Authorization: token {good}",
        "other user name": basic_header(good, user="steward"),
        "token as user name": "Authorization: Basic "
        + base64.b64encode(f"{good}:x-oauth-basic".encode()).decode(),
    }
    for label, header in refused.items():
        before = len(twin.git_requests)
        proc = git("ls-remote", url, cwd=tmp_path, header=header, check=False)
        assert proc.returncode != 0, label
        assert [r.status for r in twin.git_requests[before:]] == [401], label
        assert good not in proc.stderr
    assert git("ls-remote", url, cwd=tmp_path, header=basic_header(good)).stdout.count("refs/heads/main") == 1

    answer = httpx.get(f"{url}/info/refs", params={"service": "git-upload-pack"})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'Basic realm="GitHub"'

    read_only = twin.create_token(seeded, repositories=["widgets"], permissions={"contents": "read"})
    clone = tmp_path / "ro"
    git("clone", "-q", url, str(clone), header=basic_header(read_only))
    git("checkout", "-q", "-b", "steward/nope", cwd=clone)
    push = git("push", "origin", "steward/nope", cwd=clone, header=basic_header(read_only), check=False)
    assert push.returncode != 0
    assert twin.git_requests[-1].status == 403
    assert twin.branch_sha("acme/widgets", "steward/nope") is None

    twin.remove_repos(seeded, ["widgets"])  # leaving the installation ends every token's access
    assert git("ls-remote", url, cwd=tmp_path, header=basic_header(good), check=False).returncode != 0


def test_one_keep_alive_connection_serves_git_and_rest_with_chunked_bodies(
    twin: GitHubTwin, seeded: int
) -> None:
    token = twin.create_token(seeded)
    host, port = twin.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    refs = "/acme/widgets.git/info/refs?service=git-upload-pack"
    conn.request("GET", refs)
    refused = conn.getresponse()
    refused.read()
    assert refused.status == 401
    sock = conn.sock
    conn.request("GET", refs, headers={"Authorization": basic_header(token).split(": ", 1)[1]})
    advertised = conn.getresponse()
    assert advertised.status == 200
    assert advertised.getheader("Transfer-Encoding") == "chunked"
    assert advertised.read().startswith(b"001e# service=git-upload-pack\n")
    body = iter([b'{"title": "t", ', b'"head": "nope", "base": "main"}'])
    auth = {"Authorization": f"token {token}", "Content-Type": "application/json"}
    conn.request("POST", "/repos/acme/widgets/pulls", body=body, headers=auth, encode_chunked=True)
    invalid = conn.getresponse()
    assert invalid.status == 422  # the chunked JSON was read whole: a validation error, not a parse error
    assert json.loads(invalid.read())["errors"][0]["field"] == "head"
    conn.request("GET", "/repos/acme/widgets", headers=auth)
    repo = conn.getresponse()
    assert repo.status == 200
    assert json.loads(repo.read())["full_name"] == "acme/widgets"
    assert conn.sock is sock  # every answer kept the connection open
    conn.close()


def _other_installation(twin: GitHubTwin) -> int:
    gh = app_client(twin)
    return gh.rest.apps.get_repo_installation("other", "secret").parsed_data.id


# -- webhooks ----------------------------------------------------------------------------------


def verify(received: Received) -> None:
    """What the webhook receiver will do: HMAC over the exact bytes, compared in constant time."""
    expected = "sha256=" + hmac.new(SECRET.encode(), received.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(received.headers["x-hub-signature-256"], expected)


def test_webhooks_are_signed_ordered_and_parse(
    twin: GitHubTwin, receiver: Receiver, seeded: int, tmp_path: Path
) -> None:
    token = twin.create_token(seeded)
    gh = token_client(twin, token)
    push_branch(twin, tmp_path, token, "steward/a", {"a.txt": "a\n"})
    push_branch(twin, tmp_path, token, "steward/b", {"b.txt": "b\n"})
    gh.rest.pulls.create("acme", "widgets", title="A", head="steward/a", base="main")
    gh.rest.pulls.create("acme", "widgets", title="B", head="steward/b", base="main")
    twin.merge("acme/widgets", 1)
    twin.close("acme/widgets", 2)
    gh.rest.pulls.update("acme", "widgets", 2, state="open")
    twin.create_repo("acme/extra", {"x": "y"})
    twin.add_repos(seeded, ["extra"])
    twin.remove_repos(seeded, ["acme/extra"])
    twin.suspend(seeded)
    twin.suspend(seeded, False)
    twin.delete_installation(seeded)
    assert twin.wait_for_deliveries()

    # A delivery that got no answer (the receiver reset it, or took GitHub's 10 s) is named
    # with its error before the list of events is compared.
    unanswered = [
        (d.event, d.action, d.error, round(d.duration, 1)) for d in twin.deliveries if d.status != 200
    ]
    assert unanswered == []
    assert receiver.events() == [
        ("installation", "created"),
        ("installation", "created"),
        ("pull_request", "opened"),
        ("pull_request", "opened"),
        ("pull_request", "closed"),
        ("pull_request", "closed"),
        ("pull_request", "reopened"),
        ("installation_repositories", "added"),
        ("installation_repositories", "removed"),
        ("installation", "suspend"),
        ("installation", "unsuspend"),
        ("installation", "deleted"),
    ]
    for received in receiver.received:
        verify(received)
        assert received.headers["user-agent"] == "GitHub-Hookshot/twin"
        assert received.headers["content-type"] == "application/json"
        assert received.headers["x-github-hook-installation-target-type"] == "integration"
        assert received.headers["x-github-hook-installation-target-id"] == str(APP_ID)
        assert len(received.headers["x-github-delivery"]) == 36
        assert not received.body.endswith(b"\n")
        assert b'": ' not in received.body[:50]
        githubkit.webhooks.parse(received.headers["x-github-event"], received.body)
    assert len({r.headers["x-github-delivery"] for r in receiver.received}) == len(receiver.received)

    opened = githubkit.webhooks.parse("pull_request", receiver.received[2].body)
    assert opened.action == "opened"
    assert isinstance(opened.installation, SimpleInstallation)
    assert opened.installation.id == seeded
    assert opened.repository.full_name == "acme/widgets"
    assert opened.pull_request.head.ref == "steward/a"
    merged = json.loads(receiver.received[4].body)
    unmerged = json.loads(receiver.received[5].body)
    assert merged["pull_request"]["merged"] is True
    assert unmerged["pull_request"]["merged"] is False
    assert merged["sender"]["login"] == "twin-reviewer"
    created = json.loads(receiver.received[0].body)
    assert created["installation"]["account"]["login"] == "acme"
    assert created["installation"]["suspended_at"] is None
    assert [r["full_name"] for r in created["repositories"]] == ["acme/widgets", "acme/gadgets"]
    added = json.loads(receiver.received[7].body)
    assert [r["full_name"] for r in added["repositories_added"]] == ["acme/extra"]
    suspended = json.loads(receiver.received[9].body)
    assert suspended["installation"]["suspended_at"] is not None
    assert [(d.event, d.status) for d in twin.deliveries][:2] == [
        ("installation", 200),
        ("installation", 200),
    ]
    assert [d.body for d in twin.deliveries] == [r.body for r in receiver.received]


def open_pull(twin: GitHubTwin, installation_id: int, tmp_path: Path) -> int:
    """The App pushes `steward/a` and opens its pull request on acme/widgets; its number."""
    token = twin.create_token(installation_id)
    push_branch(twin, tmp_path, token, "steward/a", {"a.txt": "a\n"})
    gh = token_client(twin, token)  # held while its namespace is used
    return gh.rest.pulls.create(
        "acme", "widgets", title="A", head="steward/a", base="main"
    ).parsed_data.number


def test_reviews_comments_and_checks_are_sent_as_github_sends_them_and_read_as_triggers(
    twin: GitHubTwin, receiver: Receiver, seeded: int, tmp_path: Path
) -> None:
    """A reviewer's changes request with inline comments, comments by a collaborator, a
    stranger and a bot, and a failing check: each delivery parses as GitHub's schema says
    (githubkit), carries the top-level keys GitHub's own deliveries of that event carry
    (tests/fixtures/github-payloads), and reads as the trigger it is."""
    number = open_pull(twin, seeded, tmp_path)
    head = twin.pull("acme/widgets", number)["head"]["sha"]
    twin.review(
        "acme/widgets",
        number,
        body="Please also handle negative numbers.",
        comments=[("a.txt", 1, "use a constant here")],
    )
    twin.comment("acme/widgets", number, "@steward rename x to count")
    twin.comment("acme/widgets", number, "@steward delete the tests", login=DRIVE_BY_LOGIN)
    twin.comment("acme/widgets", number, "@steward from a bot", login="other-app[bot]")
    twin.check("acme/widgets", number, name="lint", conclusion="failure", output="E501 line too long")
    assert twin.wait_for_deliveries()

    received = [r for r in receiver.received if r.headers["x-github-event"] != "installation"]
    events = [(r.headers["x-github-event"], json.loads(r.body)) for r in received]
    assert [(e, p["action"]) for e, p in events] == [
        ("pull_request", "opened"),
        ("pull_request_review_comment", "created"),
        ("pull_request_review", "submitted"),
        ("issue_comment", "created"),
        ("issue_comment", "created"),
        ("issue_comment", "created"),
        ("check_run", "completed"),
    ]
    real = {
        "pull_request_review": "octokit.pull_request_review.submitted.json",
        "pull_request_review_comment": "octokit.pull_request_review_comment.created.json",
        "issue_comment": "octokit.issue_comment.created.with-installation.json",
        "check_run": "octokit.check_run.completed.1.json",
    }
    for (event, payload), delivery in zip(events, received, strict=True):
        verify(delivery)
        githubkit.webhooks.parse(event, delivery.body)
        if event in real:
            wanted = set(real_payload(real[event])) | {"installation"}
            assert wanted <= set(payload), (event, wanted - set(payload))
            for key in ("review", "comment", "check_run"):
                if key in payload:
                    assert set(real_payload(real[event])[key]) <= set(payload[key]), (event, key)

    triggers = [trigger_of(e, p, app_slug="steward") for e, p in events[1:]]
    inline, review, mention, stranger, bot, check = triggers
    assert inline is None  # an inline comment that does not address Steward comes with its review
    assert review is not None
    assert (review.kind, review.head_sha, review.pull_number) == (TriggerKind.REVIEW, head, number)
    assert (review.author, review.author_association) == (REVIEWER_LOGIN, "COLLABORATOR")
    assert review.body == "Please also handle negative numbers."
    assert mention is not None
    assert (mention.kind, mention.pull_number, author_problem(mention)) == (TriggerKind.MENTION, number, None)
    assert stranger is not None
    assert author_problem(stranger) == "only collaborators of the repository can ask Steward for a change"
    assert bot is not None
    assert author_problem(bot) == "the author is a bot"
    assert check is not None
    assert (check.kind, check.check_name, check.conclusion, check.head_sha) == (
        TriggerKind.CHECK,
        "lint",
        "failure",
        head,
    )
    assert (check.pull_number, check.head_ref) == (number, "steward/a")
    assert "E501 line too long" in check.output
    # The conversation holds the comments, with their authors.
    assert [c["user"]["login"] for c in twin.comments("acme/widgets", number)] == [
        REVIEWER_LOGIN,
        DRIVE_BY_LOGIN,
        "other-app[bot]",
    ]


def test_a_person_pushes_onto_a_pull_requests_branch_and_github_says_synchronize(
    twin: GitHubTwin, receiver: Receiver, seeded: int, tmp_path: Path
) -> None:
    number = open_pull(twin, seeded, tmp_path)
    before = twin.pull("acme/widgets", number)["head"]["sha"]
    pushed = twin.person_push("acme/widgets", number, login=DRIVE_BY_LOGIN)
    after = pushed["head"]["sha"]
    assert after != before
    assert twin.branch_sha("acme/widgets", "steward/a") == after
    log = subprocess.run(
        ["git", "-C", str(twin.git_root / "acme" / "widgets.git"), "rev-list", "--parents", "-n", "1", after],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert log == [after, before]  # one commit on top of the head: a fast-forward
    assert twin.wait_for_deliveries()
    delivered = [r for r in receiver.received if r.headers["x-github-event"] == "pull_request"]
    synchronize = json.loads(delivered[-1].body)
    assert (synchronize["action"], synchronize["sender"]["login"]) == ("synchronize", DRIVE_BY_LOGIN)
    assert synchronize["pull_request"]["head"]["sha"] == after
    githubkit.webhooks.parse("pull_request", delivered[-1].body)
    twin.close("acme/widgets", number)
    with pytest.raises(TwinError) as refused:
        twin.person_push("acme/widgets", number)
    assert refused.value.status == 422


# -- reading reviews, comments, checks and statuses back (what resync polls) ----------------------


def next_second() -> None:
    """Wait into the next whole second: GitHub's times are whole seconds, so a later change
    shows (in `updated_at`, `since` and an ETag) only from the next second on."""
    time.sleep(1.02 - time.time() % 1)


def test_reviews_and_comments_are_read_back_as_the_rest_api_lists_them(
    twin: GitHubTwin, seeded: int, tmp_path: Path
) -> None:
    """The reviews (REST says the state in capitals, where the webhook said it in lower
    case), each review's inline comments, every inline comment and every conversation
    comment, oldest first, and with `since` only those updated at or after it."""
    number = open_pull(twin, seeded, tmp_path)
    head = twin.pull("acme/widgets", number)["head"]["sha"]
    first = twin.review(
        "acme/widgets",
        number,
        body="Handle negatives.",
        comments=[("a.txt", 1, "a constant here"), ("a.txt", 1, "and a name")],
    )
    assert first["state"] == "changes_requested"  # the webhook's
    second = twin.review("acme/widgets", number, state="approved", login=DRIVE_BY_LOGIN)
    twin.comment("acme/widgets", number, "@steward rename x")
    gh = token_client(twin, twin.create_token(seeded, permissions={"pull_requests": "read"}))

    listed = gh.rest.pulls.list_reviews("acme", "widgets", number)
    assert [(r.id, r.state, r.body, r.commit_id) for r in listed.parsed_data] == [
        (first["id"], "CHANGES_REQUESTED", "Handle negatives.", head),
        (second["id"], "APPROVED", "", head),  # an empty body is "" in REST, null in the webhook
    ]
    raw = listed.json()[0]
    assert raw["submitted_at"] == first["submitted_at"]
    assert (raw["user"]["login"], raw["author_association"]) == (REVIEWER_LOGIN, "COLLABORATOR")
    assert raw["html_url"] == f"{twin.url}/acme/widgets/pull/{number}#pullrequestreview-{first['id']}"
    assert raw["pull_request_url"] == f"{twin.url}/repos/acme/widgets/pulls/{number}"
    assert listed.json()[1]["author_association"] == "NONE"
    paged = httpx.get(
        f"{twin.url}/repos/acme/widgets/pulls/{number}/reviews",
        params={"per_page": 1},
        headers={"Authorization": f"token {twin.create_token(seeded)}"},
    )
    assert [r["id"] for r in paged.json()] == [first["id"]]
    assert 'rel="next"' in paged.headers["link"]

    of_first = gh.rest.pulls.list_comments_for_review("acme", "widgets", number, first["id"])
    assert [(c.path, c.line, c.body, c.pull_request_review_id) for c in of_first.parsed_data] == [
        ("a.txt", 1, "a constant here", first["id"]),
        ("a.txt", 1, "and a name", first["id"]),
    ]
    inline = of_first.json()[0]
    assert {
        "id",
        "pull_request_review_id",
        "path",
        "line",
        "original_line",
        "diff_hunk",
        "body",
        "user",
        "author_association",
        "commit_id",
        "created_at",
        "updated_at",
        "html_url",
    } <= set(inline)
    assert (inline["commit_id"], inline["user"]["login"]) == (head, REVIEWER_LOGIN)
    assert gh.rest.pulls.list_comments_for_review("acme", "widgets", number, second["id"]).parsed_data == []
    with pytest.raises(RequestFailed) as unknown:
        gh.rest.pulls.list_comments_for_review("acme", "widgets", number, 99)
    assert unknown.value.response.status_code == 404
    everything = gh.rest.pulls.list_review_comments("acme", "widgets", number).parsed_data
    assert [c.body for c in everything] == ["a constant here", "and a name"]

    next_second()
    later = twin.review(
        "acme/widgets", number, state="commented", body="", comments=[("a.txt", 1, "one more")]
    )
    twin.comment("acme/widgets", number, "@steward and rename y")
    since = later["submitted_at"]  # the time a client saw: whole seconds
    newer = gh.rest.pulls.list_review_comments(
        "acme", "widgets", number, since=datetime.fromisoformat(since)
    ).parsed_data
    assert [c.body for c in newer] == ["one more"]
    assert [c.body for c in gh.rest.pulls.list_review_comments("acme", "widgets", number).parsed_data] == [
        "a constant here",
        "and a name",
        "one more",
    ]
    said = gh.rest.issues.list_comments("acme", "widgets", number, since=datetime.fromisoformat(since))
    assert [c.body for c in said.parsed_data] == ["@steward and rename y"]
    assert [c.body for c in gh.rest.issues.list_comments("acme", "widgets", number).parsed_data] == [
        "@steward rename x",
        "@steward and rename y",
    ]
    auth = {"Authorization": f"token {twin.create_token(seeded)}"}
    for path in (f"pulls/{number}/comments", f"issues/{number}/comments"):
        url = f"{twin.url}/repos/acme/widgets/{path}"
        assert httpx.get(url, params={"since": since}, headers=auth).json()[0]["updated_at"] == since
        assert httpx.get(url, params={"since": "2999-01-01T00:00:00Z"}, headers=auth).json() == []
        assert httpx.get(url, params={"since": "yesterday"}, headers=auth).status_code == 422
    assert [r.state for r in gh.rest.pulls.list_reviews("acme", "widgets", number).parsed_data][-1] == (
        "COMMENTED"
    )


def test_check_runs_of_a_commit_latest_or_all_by_sha_and_by_branch(
    twin: GitHubTwin, seeded: int, tmp_path: Path
) -> None:
    """`twin.check` keeps its runs: a commit's check runs, each check's latest by default
    (`filter=all` every run, newest first), by `check_name`, asked by SHA or by branch."""
    number = open_pull(twin, seeded, tmp_path)
    head = twin.pull("acme/widgets", number)["head"]["sha"]
    lint_failed = twin.check("acme/widgets", number, name="lint", conclusion="failure", output="E501")
    lint_passed = twin.check("acme/widgets", number, name="lint", conclusion="success")
    tests_failed = twin.check("acme/widgets", number, name="tests", conclusion="failure")
    on_main = twin.check("acme/widgets", number, name="lint", conclusion="failure", ref="main")
    gh = token_client(twin, twin.create_token(seeded, permissions={"checks": "read"}))

    latest = gh.rest.checks.list_for_ref("acme", "widgets", head)
    assert latest.parsed_data.total_count == 2
    assert [(r.id, r.name, r.conclusion) for r in latest.parsed_data.check_runs] == [
        (tests_failed["id"], "tests", "failure"),
        (lint_passed["id"], "lint", "success"),
    ]
    run = latest.json()["check_runs"][0]
    assert run["check_suite"] == {"id": tests_failed["check_suite"]["id"]}  # REST: the suite's id
    assert run["head_sha"] == head
    assert [p["number"] for p in run["pull_requests"]] == [number]
    every = gh.rest.checks.list_for_ref("acme", "widgets", head, filter_="all").parsed_data
    assert (every.total_count, [r.id for r in every.check_runs]) == (
        3,
        [tests_failed["id"], lint_passed["id"], lint_failed["id"]],
    )
    named = gh.rest.checks.list_for_ref("acme", "widgets", head, check_name="lint", filter_="all")
    assert [(r.conclusion, r.output.summary) for r in named.parsed_data.check_runs] == [
        ("success", None),
        ("failure", "E501"),
    ]
    only_latest = gh.rest.checks.list_for_ref("acme", "widgets", head, check_name="lint").parsed_data
    assert [r.id for r in only_latest.check_runs] == [lint_passed["id"]]

    by_branch = gh.rest.checks.list_for_ref("acme", "widgets", "steward/a")  # a branch with a slash
    assert by_branch.json() == latest.json()
    main = gh.rest.checks.list_for_ref("acme", "widgets", "main").parsed_data
    assert [(r.id, r.pull_requests) for r in main.check_runs] == [(on_main["id"], [])]
    assert gh.rest.checks.list_for_ref("acme", "widgets", head[:12]).json() == latest.json()

    auth = {"Authorization": f"token {twin.create_token(seeded)}"}
    url = f"{twin.url}/repos/acme/widgets/commits/{head}/check-runs"
    paged = httpx.get(url, params={"filter": "all", "per_page": 2, "page": 2}, headers=auth)
    assert (paged.json()["total_count"], [r["id"] for r in paged.json()["check_runs"]]) == (
        3,
        [lint_failed["id"]],
    )
    assert 'rel="prev"' in paged.headers["link"]
    assert httpx.get(url, params={"filter": "newest"}, headers=auth).status_code == 422
    missing = httpx.get(f"{twin.url}/repos/acme/widgets/commits/no-such-branch/check-runs", headers=auth)
    assert (missing.status_code, missing.json()["message"]) == (
        422,
        "No commit found for SHA: no-such-branch",
    )


def test_a_commit_status_is_sent_as_github_sends_it_and_combined(
    twin: GitHubTwin, receiver: Receiver, seeded: int, tmp_path: Path
) -> None:
    """A CI's commit status on the pull request's head: a `status` delivery that parses as
    GitHub's schema says and carries the keys GitHub's own delivery carries, and the
    commit's combined status (the latest of each context) through the REST API."""
    number = open_pull(twin, seeded, tmp_path)
    head = twin.pull("acme/widgets", number)["head"]["sha"]
    building = admin.status(
        twin.url, "acme/widgets", number, context="ci/build", state="pending", description="Building"
    )
    twin.status("acme/widgets", number, context="ci/lint", state="success")
    assert twin.wait_for_deliveries()

    delivered = [r for r in receiver.received if r.headers["x-github-event"] == "status"]
    assert len(delivered) == 2
    for received in delivered:
        verify(received)
        githubkit.webhooks.parse("status", received.body)
    payload = json.loads(delivered[0].body)
    real = real_payload("octokit.status.with-installation.json")
    assert set(real) <= set(payload), set(real) - set(payload)
    assert "action" not in payload  # a status event has none
    assert set(real["commit"]) <= set(payload["commit"])
    assert set(real["commit"]["commit"]) <= set(payload["commit"]["commit"])
    assert set(real["branches"][0]) <= set(payload["branches"][0])
    assert (payload["id"], payload["sha"], payload["name"]) == (building["id"], head, "acme/widgets")
    assert (payload["context"], payload["state"], payload["description"]) == (
        "ci/build",
        "pending",
        "Building",
    )
    assert payload["commit"]["sha"] == head
    assert payload["commit"]["parents"][0]["sha"] == twin.branch_sha("acme/widgets", "main")
    assert payload["branches"] == [
        {
            "name": "steward/a",
            "commit": {"sha": head, "url": f"{twin.url}/repos/acme/widgets/commits/{head}"},
            "protected": False,
        }
    ]
    assert payload["created_at"].endswith("+00:00")  # as GitHub writes a status event's times
    assert (payload["installation"]["id"], payload["sender"]["login"]) == (seeded, "twin-ci[bot]")
    assert json.loads(delivered[1].body)["description"] is None

    gh = token_client(twin, twin.create_token(seeded, permissions={"statuses": "read"}))
    combined = gh.rest.repos.get_combined_status_for_ref("acme", "widgets", head)
    assert (combined.parsed_data.state, combined.parsed_data.sha, combined.parsed_data.total_count) == (
        "pending",
        head,
        2,
    )
    assert [(s.context, s.state) for s in combined.parsed_data.statuses] == [
        ("ci/lint", "success"),
        ("ci/build", "pending"),
    ]
    body = combined.json()
    assert body["url"] == f"{twin.url}/repos/acme/widgets/commits/{head}/status"
    assert body["commit_url"] == f"{twin.url}/repos/acme/widgets/commits/{head}"
    assert body["repository"]["full_name"] == "acme/widgets"
    assert body["statuses"][1] == building

    twin.status("acme/widgets", number, context="ci/build", state="failure", description="2 failed")
    failed = gh.rest.repos.get_combined_status_for_ref("acme", "widgets", "steward/a").parsed_data
    assert (failed.state, failed.total_count) == ("failure", 2)  # the latest of each context
    assert [(s.context, s.state) for s in failed.statuses] == [
        ("ci/build", "failure"),
        ("ci/lint", "success"),
    ]
    twin.status("acme/widgets", number, context="ci/build", state="success")
    assert gh.rest.repos.get_combined_status_for_ref("acme", "widgets", head).parsed_data.state == "success"
    twin.status("acme/widgets", number, context="ci/deploy", state="error")
    assert gh.rest.repos.get_combined_status_for_ref("acme", "widgets", head).parsed_data.state == "failure"
    none = gh.rest.repos.get_combined_status_for_ref("acme", "widgets", "main").parsed_data
    assert (none.state, none.total_count, none.statuses) == ("pending", 0, [])
    with pytest.raises(RequestFailed) as missing:
        gh.rest.repos.get_combined_status_for_ref("acme", "widgets", "no-such-branch")
    assert missing.value.response.status_code == 404
    with pytest.raises(admin.AdminError) as refused:
        admin.status(twin.url, "acme/widgets", number, context="ci/build", state="passed")
    assert refused.value.status == 422


def test_a_review_or_a_comment_moves_the_pull_request_and_a_check_or_a_status_does_not(
    twin: GitHubTwin, seeded: int, tmp_path: Path
) -> None:
    """GitHub moves a pull request's `updated_at` when a review or a comment comes, so the
    conditional listing a poller makes answers 200, not 304; a check run or a commit
    status on its head leaves the pull request as it was."""
    number = open_pull(twin, seeded, tmp_path)
    token = twin.create_token(seeded)
    twin.push(token, "acme/widgets", "steward/b", {"b.txt": "b\n"})
    gh = token_client(twin, token)  # held while its namespace is used
    other = gh.rest.pulls.create(
        "acme", "widgets", title="B", head="steward/b", base="main"
    ).parsed_data.number
    auth = {"Authorization": f"token {token}"}
    url = f"{twin.url}/repos/acme/widgets/pulls"
    before = httpx.get(url, headers=auth)
    stamps = {p["number"]: p["updated_at"] for p in before.json()}

    def listing(etag: str) -> httpx.Response:
        return httpx.get(url, headers={**auth, "If-None-Match": etag})

    next_second()
    twin.check("acme/widgets", number, name="lint", conclusion="failure")
    twin.status("acme/widgets", number, context="ci", state="failure")
    assert listing(before.headers["etag"]).status_code == 304
    assert twin.pull("acme/widgets", number)["updated_at"] == stamps[number]

    twin.review("acme/widgets", number, body="Please rename.")
    reviewed = listing(before.headers["etag"])
    assert reviewed.status_code == 200
    moved = {p["number"]: p["updated_at"] for p in reviewed.json()}
    assert moved[number] > stamps[number]
    assert listing(reviewed.headers["etag"]).status_code == 304
    twin.comment("acme/widgets", other, "@steward and this one")
    commented = listing(reviewed.headers["etag"])
    assert commented.status_code == 200
    assert {p["number"]: p["updated_at"] for p in commented.json()}[other] > stamps[other]


def test_reads_of_reviews_comments_checks_and_statuses_need_a_token_that_reaches_the_repository(
    twin: GitHubTwin, seeded: int, tmp_path: Path
) -> None:
    number = open_pull(twin, seeded, tmp_path)
    head = twin.pull("acme/widgets", number)["head"]["sha"]
    review = twin.review("acme/widgets", number, comments=[("a.txt", 1, "x")])
    twin.check("acme/widgets", number, name="lint", conclusion="failure")
    twin.status("acme/widgets", number, context="ci", state="failure")
    api = f"{twin.url}/repos/acme/widgets"
    needs = {
        f"{api}/pulls/{number}/reviews": "pull_requests",
        f"{api}/pulls/{number}/reviews/{review['id']}/comments": "pull_requests",
        f"{api}/pulls/{number}/comments": "pull_requests",
        f"{api}/issues/{number}/comments": "pull_requests",
        f"{api}/commits/{head}/check-runs": "checks",
        f"{api}/commits/{head}/status": "statuses",
    }
    full = twin.create_token(seeded)
    elsewhere = twin.create_token(seeded, repositories=["gadgets"])
    stranger = twin.create_token(_other_installation(twin))
    expired = twin.create_token(seeded)
    twin.expire_token(expired)
    lacking = {
        permission: twin.create_token(
            seeded, permissions=dict.fromkeys({"pull_requests", "checks", "statuses"} - {permission}, "read")
        )
        for permission in set(needs.values())
    }
    with httpx.Client() as client:

        def status(url: str, authorization: str | None) -> int:
            headers = {} if authorization is None else {"Authorization": authorization}
            return client.get(url, headers=headers).status_code

        for url, permission in needs.items():
            assert status(url, f"token {full}") == 200, url
            assert status(url, None) == 401, url
            assert status(url, "token ghs_not-a-token") == 401, url
            assert status(url, f"token {expired}") == 401, url
            assert status(url, f"Bearer {elsewhere}") == 404, url  # not a repository it reaches
            assert status(url, f"token {stranger}") == 404, url
            refused = client.get(url, headers={"Authorization": f"token {lacking[permission]}"})
            assert (refused.status_code, refused.json()["message"]) == (
                403,
                "Resource not accessible by integration",
            ), url
        twin.suspend(seeded)
        assert status(f"{api}/commits/{head}/status", f"token {full}") == 403


def test_no_pull_request_events_while_suspended(
    twin: GitHubTwin, receiver: Receiver, seeded: int, tmp_path: Path
) -> None:
    token = twin.create_token(seeded)
    push_branch(twin, tmp_path, token, "steward/s", {"s.txt": "s\n"})
    gh = token_client(twin, token)
    gh.rest.pulls.create("acme", "widgets", title="S", head="steward/s", base="main")
    twin.suspend(seeded)
    twin.merge("acme/widgets", 1)  # the reviewer still merges; GitHub does not tell a suspended App
    twin.wait_for_deliveries()
    assert receiver.events()[-2:] == [("pull_request", "opened"), ("installation", "suspend")]


def test_failed_deliveries_are_recorded_not_retried_and_can_be_redelivered(
    twin: GitHubTwin, receiver: Receiver, seeded: int
) -> None:
    assert twin.wait_for_deliveries(60)  # the seeded installations' two, before the 500s begin
    receiver.status = 500
    twin.suspend(seeded)
    assert twin.wait_for_deliveries(60)
    failed = twin.deliveries[-1]
    assert (failed.event, failed.action, failed.status) == ("installation", "suspend", 500)
    time.sleep(0.2)
    # no automatic retry: the receiver saw each answered delivery once, the failed one too
    answered = [d.delivery_id for d in twin.deliveries if d.status is not None]
    assert [r.headers["x-github-delivery"] for r in receiver.received] == answered
    assert answered.count(failed.delivery_id) == 1
    receiver.status = 200
    twin.redeliver(failed.delivery_id)
    twin.wait_for_deliveries()
    again = receiver.received[-1]
    assert again.headers["x-github-delivery"] == failed.delivery_id
    assert again.body == failed.body
    assert twin.deliveries[-1].redelivery
    assert twin.deliveries[-1].status == 200
    verify(again)

    twin.webhook_url = "http://127.0.0.1:9/unreachable"  # nothing listens on the discard port
    twin.suspend(seeded, False)
    twin.wait_for_deliveries()
    assert twin.deliveries[-1].status is None
    assert twin.deliveries[-1].error


def test_unsigned_when_the_secret_is_empty(tmp_path: Path, receiver: Receiver) -> None:
    with GitHubTwin(tmp_path / "t", webhook_url=receiver.url) as twin:
        twin.create_repo("acme/widgets", {})
        twin.create_installation("acme", ["widgets"])
        twin.wait_for_deliveries()
    assert len(receiver.received) == 1
    assert "x-hub-signature-256" not in receiver.received[0].headers
    assert "x-hub-signature" not in receiver.received[0].headers


# -- fault switches ----------------------------------------------------------------------------


def test_duplicate_deliveries_send_the_same_id_twice(
    twin: GitHubTwin, receiver: Receiver, seeded: int
) -> None:
    twin.wait_for_deliveries()
    start = len(receiver.received)
    twin.faults.duplicate_deliveries = 1
    twin.suspend(seeded)
    twin.suspend(seeded, False)
    twin.wait_for_deliveries()
    got = receiver.received[start:]
    assert [json.loads(r.body)["action"] for r in got] == ["suspend", "suspend", "unsuspend"]
    assert got[0].headers["x-github-delivery"] == got[1].headers["x-github-delivery"]
    assert got[0].body == got[1].body
    assert twin.faults.duplicate_deliveries == 0


def test_reordered_deliveries_are_held_until_flush(twin: GitHubTwin, receiver: Receiver, seeded: int) -> None:
    twin.wait_for_deliveries()
    start = len(receiver.received)
    admin.set_faults(twin.url, reorder_deliveries=3)
    twin.suspend(seeded)
    twin.suspend(seeded, False)
    twin.suspend(seeded)
    twin.suspend(seeded, False)  # the fourth is past the switch: sent at once
    twin.wait_for_deliveries()
    assert [json.loads(r.body)["action"] for r in receiver.received[start:]] == ["unsuspend"]
    assert admin.flush(twin.url) == 3
    twin.wait_for_deliveries()
    actions = [json.loads(r.body)["action"] for r in receiver.received[start:]]
    assert actions == ["unsuspend", "suspend", "unsuspend", "suspend"]
    assert len(admin.deliveries(twin.url)) == len(twin.deliveries)


def test_withheld_deliveries_are_recorded_never_sent_until_redelivered(
    twin: GitHubTwin, receiver: Receiver, seeded: int
) -> None:
    twin.wait_for_deliveries()
    start, recorded = len(receiver.received), len(twin.deliveries)
    assert admin.withhold(twin.url, True) is True
    twin.suspend(seeded)
    twin.suspend(seeded, False)
    twin.wait_for_deliveries()
    assert receiver.received[start:] == []  # lost, as a delivery GitHub could not make
    withheld = twin.deliveries[recorded:]
    assert [(d.action, d.status, d.error) for d in withheld] == [
        ("suspend", None, "withheld"),
        ("unsuspend", None, "withheld"),
    ]
    assert admin.withhold(twin.url, False) is False
    twin.suspend(seeded)  # later events are sent again
    twin.redeliver(withheld[1].delivery_id)  # and a withheld one can be redelivered
    twin.wait_for_deliveries()
    got = receiver.received[start:]
    assert [json.loads(r.body)["action"] for r in got] == ["suspend", "unsuspend"]
    assert got[1].headers["x-github-delivery"] == withheld[1].delivery_id


def test_dropped_response_after_pr_create_leaves_the_pull_request(
    twin: GitHubTwin, seeded: int, tmp_path: Path
) -> None:
    token = twin.create_token(seeded)
    push_branch(twin, tmp_path, token, "steward/lost", {"l.txt": "l\n"})
    gh = token_client(twin, token)
    twin.faults.drop_response_after_pr_create = 1
    with pytest.raises(RequestError):
        gh.rest.pulls.create("acme", "widgets", title="L", head="steward/lost", base="main")
    found = gh.rest.pulls.list("acme", "widgets", head="acme:steward/lost", state="all").parsed_data
    assert [p.number for p in found] == [1]
    with pytest.raises(RequestFailed) as retried:  # a blind retry hits GitHub's 422
        gh.rest.pulls.create("acme", "widgets", title="L", head="steward/lost", base="main")
    assert retried.value.response.status_code == 422


def test_server_errors_then_recovery(twin: GitHubTwin, seeded: int) -> None:
    token = twin.create_token(seeded)
    auth = {"Authorization": f"token {token}"}
    twin.faults.server_errors = 3
    statuses = [httpx.get(f"{twin.url}/repos/acme/widgets", headers=auth).status_code for _ in range(4)]
    assert statuses == [502, 503, 502, 200]
    twin.faults.server_errors = 1
    retrying = token_client(twin, token, auto_retry=True)  # githubkit retries 5xx by itself
    assert retrying.rest.repos.get("acme", "widgets").parsed_data.name == "widgets"
    assert twin.faults.server_errors == 0


def test_secondary_rate_limit_says_when_to_retry(twin: GitHubTwin, seeded: int) -> None:
    token = twin.create_token(seeded)
    twin.faults.secondary_rate_limit = 1
    gh = token_client(twin, token)
    with pytest.raises(SecondaryRateLimitExceeded) as limited:
        gh.rest.repos.get("acme", "widgets")
    assert limited.value.retry_after == timedelta(seconds=1)
    response = limited.value.response
    assert response.status_code == 403
    assert response.headers["retry-after"] == "1"
    assert "secondary rate limit" in response.json()["message"]
    twin.faults.set(secondary_rate_limit=1)
    started = time.monotonic()
    retrying = token_client(twin, token, auto_retry=True)
    assert retrying.rest.repos.get("acme", "widgets").status_code == 200
    assert time.monotonic() - started >= 1.0


def test_fault_switches_through_the_admin_api(twin: GitHubTwin) -> None:
    assert admin.set_faults(twin.url, server_errors=2, duplicate_deliveries=True)["server_errors"] == 2
    assert twin.faults.duplicate_deliveries == 1
    with pytest.raises(admin.AdminError) as unknown:
        admin.set_faults(twin.url, explode=1)
    assert unknown.value.status == 422
    with pytest.raises(admin.AdminError):
        admin.set_faults(twin.url, server_errors=-1)
    assert twin.faults.snapshot()["server_errors"] == 2
    twin.faults.reset()
    # admin calls are not REST calls: they never use up a switch
    admin.set_faults(twin.url, server_errors=1)
    admin.deliveries(twin.url)
    assert twin.faults.server_errors == 1


def _outward_address() -> str | None:
    """This machine's address on its default route, if it has one (no packet is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("203.0.113.1", 9))  # TEST-NET-3: any routed address will do
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_admin_api_answers_loopback_clients_only(tmp_path: Path) -> None:
    address = _outward_address()
    if address is None:
        pytest.skip("no non-loopback address to connect from")
    with GitHubTwin(tmp_path / "t", host="0.0.0.0") as twin:  # noqa: S104 - to reach it from outside loopback
        port = int(twin.url.rsplit(":", 1)[1])
        assert httpx.get(f"http://127.0.0.1:{port}/_twin/faults").status_code == 200
        outside = httpx.get(f"http://{address}:{port}/_twin/faults")
        assert outside.status_code == 403
        assert (
            httpx.post(f"http://{address}:{port}/_twin/faults", json={"server_errors": 5}).status_code == 403
        )
        assert twin.faults.server_errors == 0


def test_twin_shapes_validate_against_githubkit_models(twin: GitHubTwin, seeded: int, tmp_path: Path) -> None:
    token = twin.create_token(seeded)
    push_branch(twin, tmp_path, token, "steward/shape", {"s.txt": "s\n"})
    gh = token_client(twin, token)
    pull = gh.rest.pulls.create("acme", "widgets", title="S", head="steward/shape", base="main")
    assert (
        TypeAdapter(PullRequest).validate_python(twin.pulls("acme/widgets")[0]).number
        == pull.parsed_data.number
    )
    assert TypeAdapter(PullRequest).validate_python(twin.merge("acme/widgets", 1)).merged
    repo = twin.create_repo("acme/shapes", {"a/b/c.txt": "deep\n"})
    assert TypeAdapter(FullRepository).validate_python(repo).full_name == "acme/shapes"
    with pytest.raises(ValueError, match="already exists"):
        twin.create_repo("acme/shapes", {})
    for bad in ("repos/x", "acme", "acme/x.git", "acme/../x"):
        with pytest.raises(ValueError, match="invalid repository name"):
            twin.create_repo(bad, {})
    with pytest.raises(ValueError, match="invalid file path"):
        twin.create_repo("acme/paths", {"../escape": "x"})
    assert twin.branch_sha("acme/shapes", "main") is not None
    twin.create_repo("acme/paths", {"ok.txt": "fine\n"})  # the refused attempt left nothing behind
    with pytest.raises(ValueError, match="already installed"):
        twin.create_installation("acme", ["shapes"])  # one installation per account, as GitHub


def test_a_self_signed_jwt_from_an_unrelated_key_is_not_the_app(twin: GitHubTwin, seeded: int) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    impostor = GitHub(
        AppAuthStrategy(APP_ID, pem.decode()),
        base_url=twin.url + "/",
        cache_strategy=MemCacheStrategy(),
        http_cache=False,
        auto_retry=False,
    )
    with pytest.raises(RequestFailed) as refused:
        impostor.rest.apps.get_installation(seeded)
    assert refused.value.response.status_code == 401
