"""The GitHub App adapter against the GitHub twin: installation tokens scoped to one
repository, pull requests found and reused, and retries that honour `retry-after` within a
bounded number of attempts (docs/concepts/runner.md, docs/testing.md)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from steward.adapters.git import GitError, remote_git
from steward.adapters.github import GitHubApp, GitHubError, split_repo
from steward.config import Settings
from steward.domain.errors import BadRequest
from steward.local.github_twin import GitHubTwin
from steward.wiring import github_app

from tests.conftest import REGION
from tests.support.git_push import push_branch

REPO = "octo/demo"
TOKEN_SHAPE = re.compile(r"gh[pousr]_[A-Za-z0-9._-]{20,}")


class Sleeps:
    """The waits the adapter asked for, really waited (so the twin sees real time pass)."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        time.sleep(seconds)


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[GitHubTwin]:
    with GitHubTwin(tmp_path / "twin") as twin:
        twin.create_repo(REPO, {"README.md": "# demo\n"})
        twin.create_repo("octo/other", {"README.md": "# other\n"})
        yield twin


@pytest.fixture
def installation(twin: GitHubTwin) -> int:
    return twin.create_installation("octo", [REPO, "octo/other"])


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def app(twin: GitHubTwin, sleeps: Sleeps) -> Iterator[GitHubApp]:
    with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, sleep=sleeps) as app:
        yield app


def assert_no_token(exc: BaseException, *tokens: str) -> None:
    texts = [str(exc), repr(exc), getattr(exc, "detail", ""), getattr(exc, "message", "")]
    for text in texts:
        assert not TOKEN_SHAPE.search(text)
        for token in tokens:
            assert token not in text


# ---- installation tokens


def test_token_is_parsed_and_scoped_to_the_one_repository(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path
) -> None:
    before = datetime.now(UTC)
    issued = app.installation_token(installation, REPO)

    assert issued.repository == REPO
    assert TOKEN_SHAPE.fullmatch(issued.token)
    assert issued.expires_at.tzinfo is not None
    assert before + timedelta(minutes=58) < issued.expires_at <= before + timedelta(minutes=61)
    assert issued.token not in repr(issued)

    # It reaches its repository over git, and not the installation's other repository.
    url = app.git_url(REPO)
    heads = remote_git(["ls-remote", url], token=issued.token, token_url=url).stdout
    assert "refs/heads/main" in heads
    other = app.git_url("octo/other")
    with pytest.raises(GitError) as refused:
        remote_git(["ls-remote", other], token=issued.token, token_url=other)
    assert_no_token(refused.value, issued.token)

    # Each call is a fresh token (the runtime asks again at push time).
    assert app.installation_token(installation, REPO).token != issued.token


def test_token_for_a_repository_the_installation_lacks_is_refused(
    twin: GitHubTwin, app: GitHubApp, tmp_path: Path
) -> None:
    only_demo = twin.create_installation("octo", [REPO])
    twin.create_repo("octo/private", {"a.txt": "a\n"})
    with pytest.raises(GitHubError) as caught:
        app.installation_token(only_demo, "octo/private")
    assert caught.value.status == 502
    assert caught.value.upstream_status == 422
    assert "create an installation token for octo/private" in caught.value.message
    assert_no_token(caught.value)


def test_unknown_installation_and_bad_names(app: GitHubApp) -> None:
    with pytest.raises(GitHubError) as caught:
        app.installation_token(987654, REPO)
    assert caught.value.upstream_status == 404
    with pytest.raises(BadRequest):
        app.installation_token(1, "not a repo")
    with pytest.raises(BadRequest):
        app.find_pull(1, "octo/demo/extra", "x")


def test_a_wrong_app_key_is_refused_without_leaking(twin: GitHubTwin, installation: int) -> None:
    other = GitHubTwin(twin.root.parent / "other-twin")  # never started: only its key is used
    with (
        GitHubApp(twin.app_id, other.app_private_key_pem, base_url=twin.url) as wrong,
        pytest.raises(GitHubError) as caught,
    ):
        wrong.installation_token(installation, REPO)
    assert caught.value.upstream_status == 401
    assert_no_token(caught.value)
    assert "BEGIN" not in str(caught.value)


# ---- pull requests


def test_observing_a_pull_request_is_conditional(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path
) -> None:
    branch = "steward/bbbbbbbbbbbbbbbbbbbbbbbb"
    none = app.observe_pull(installation, REPO, branch)
    assert (none.changed, none.pull) == (True, None)
    assert none.etag
    push_branch(app, installation, REPO, tmp_path, branch)
    opened = app.open_pull(installation, REPO, head=branch, base="main", title="Change", body="Body")
    seen = app.observe_pull(installation, REPO, branch, etag=none.etag)
    assert (seen.changed, seen.pull) == (True, opened)
    unchanged = app.observe_pull(installation, REPO, branch, etag=seen.etag)
    assert (unchanged.changed, unchanged.pull, unchanged.etag) == (False, None, seen.etag)  # a 304
    twin.merge(REPO, opened.number)
    merged = app.observe_pull(installation, REPO, branch, etag=seen.etag)
    assert merged.changed
    assert merged.pull is not None
    assert (merged.pull.state, merged.pull.merged) == ("closed", True)


def test_open_find_and_reuse_on_422(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path
) -> None:
    branch = "steward/aaaaaaaaaaaaaaaaaaaaaaaa"
    assert app.find_pull(installation, REPO, branch) is None
    push_branch(app, installation, REPO, tmp_path, branch)

    opened = app.open_pull(installation, REPO, head=branch, base="main", title="Change", body="Body")
    assert opened.state == "open"
    assert not opened.merged
    assert opened.url.endswith(f"/{REPO}/pull/{opened.number}")

    # GitHub answers a second create for the head with 422 "already exists": reused.
    again = app.open_pull(installation, REPO, head=branch, base="main", title="Other", body="Other")
    assert again == opened
    assert app.find_pull(installation, REPO, branch) == opened
    assert [p["number"] for p in twin.pulls(REPO)] == [opened.number]

    twin.close(REPO, opened.number)
    closed = app.find_pull(installation, REPO, branch, state="all")
    assert closed is not None
    assert (closed.number, closed.state, closed.merged) == (opened.number, "closed", False)
    assert app.find_pull(installation, REPO, branch, state="open") is None
    twin.reopen(REPO, opened.number)
    twin.merge(REPO, opened.number)
    merged = app.find_pull(installation, REPO, branch)
    assert merged is not None
    assert (merged.state, merged.merged) == ("closed", True)


def test_other_422s_are_errors(app: GitHubApp, installation: int) -> None:
    with pytest.raises(GitHubError) as caught:
        app.open_pull(installation, REPO, head="no-such-branch", base="main", title="T", body="B")
    assert caught.value.upstream_status == 422
    assert "open a pull request on octo/demo from no-such-branch" in caught.value.message
    assert_no_token(caught.value)


def test_a_lost_create_response_still_yields_one_pull_request(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path, sleeps: Sleeps
) -> None:
    branch = "steward/bbbbbbbbbbbbbbbbbbbbbbbb"
    push_branch(app, installation, REPO, tmp_path, branch)
    app.find_pull(installation, REPO, branch)  # the API token is cached before the fault is armed
    twin.faults.drop_response_after_pr_create = 1
    pull = app.open_pull(installation, REPO, head=branch, base="main", title="T", body="B")
    assert [p["number"] for p in twin.pulls(REPO)] == [pull.number]
    assert len(sleeps.waits) == 1  # one retry, answered 422 "already exists", then listed


def test_a_lost_create_response_with_no_retry_left_fails_and_a_replay_finds_it(
    twin: GitHubTwin, installation: int, tmp_path: Path
) -> None:
    branch = "steward/cccccccccccccccccccccccc"
    with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_attempts=1) as app:
        push_branch(app, installation, REPO, tmp_path, branch)
        app.find_pull(installation, REPO, branch)
        twin.faults.drop_response_after_pr_create = 1
        with pytest.raises(GitHubError) as caught:
            app.open_pull(installation, REPO, head=branch, base="main", title="T", body="B")
        assert "after 1 attempts" in caught.value.message
        assert caught.value.upstream_status is None  # no answer at all
        found = app.find_pull(installation, REPO, branch)
        assert found is not None
        assert app.open_pull(installation, REPO, head=branch, base="main", title="T", body="B") == found
    assert len(twin.pulls(REPO)) == 1


# ---- retries


def test_comment_find_it_by_its_marker_and_close_a_pull_request(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path
) -> None:
    branch = "steward/eeeeeeeeeeeeeeeeeeeeeeee"
    push_branch(app, installation, REPO, tmp_path, branch)
    pull = app.open_pull(installation, REPO, head=branch, base="main", title="T", body="B")
    assert app.find_comment(installation, REPO, pull.number, "<!-- m -->") is None
    made = app.comment(installation, REPO, pull.number, "Withdrawn.\n\n<!-- m -->")
    assert app.find_comment(installation, REPO, pull.number, "<!-- m -->") == made
    assert app.find_comment(installation, REPO, pull.number, "<!-- other -->") is None
    [shown] = twin.comments(REPO, pull.number)
    assert (shown["id"], shown["user"]["login"], shown["body"]) == (
        made,
        "steward[bot]",
        "Withdrawn.\n\n<!-- m -->",
    )
    closed = app.close_pull(installation, REPO, pull.number)
    assert (closed.number, closed.state, closed.merged) == (pull.number, "closed", False)
    assert app.close_pull(installation, REPO, pull.number) == closed  # closing it again changes nothing
    assert app.find_pull(installation, REPO, branch, state="open") is None
    assert twin.pull(REPO, pull.number)["comments"] == 1


def test_a_comment_is_never_retried_after_a_server_error(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path, sleeps: Sleeps
) -> None:
    """A 5xx may come after GitHub made the comment: a retry could make a second one, so the
    caller gets the error and looks for the comment by its marker before writing it again."""
    branch = "steward/ffffffffffffffffffffffff"
    push_branch(app, installation, REPO, tmp_path, branch)
    pull = app.open_pull(installation, REPO, head=branch, base="main", title="T", body="B")
    twin.faults.server_errors = 3
    with pytest.raises(GitHubError, match="after 1 attempts: HTTP 502"):
        app.comment(installation, REPO, pull.number, "once")
    assert twin.faults.server_errors == 2  # one request
    twin.faults.reset()
    twin.faults.secondary_rate_limit = 1  # a refusal that says GitHub did nothing is retried
    app.comment(installation, REPO, pull.number, "once")
    assert [c["body"] for c in twin.comments(REPO, pull.number)] == ["once"]


def test_a_pull_request_of_another_branch_is_never_found_for_a_task(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path
) -> None:
    ours, theirs = "steward/aaaaaaaaaaaaaaaaaaaaaaaa", "steward/aaaaaaaaaaaaaaaaaaaaaaaa-x"
    push_branch(app, installation, REPO, tmp_path, theirs)
    app.open_pull(installation, REPO, head=theirs, base="main", title="T", body="B")
    assert app.find_pull(installation, REPO, ours) is None


def test_secondary_rate_limit_waits_what_retry_after_says(
    twin: GitHubTwin, app: GitHubApp, installation: int, sleeps: Sleeps
) -> None:
    twin.faults.secondary_rate_limit = 2
    started = time.monotonic()
    issued = app.installation_token(installation, REPO)
    assert issued.repository == REPO
    assert sleeps.waits == [1.0, 1.0]  # the twin answers `retry-after: 1`
    assert time.monotonic() - started >= 2.0
    assert twin.faults.secondary_rate_limit == 0


def test_a_retry_after_beyond_the_bound_fails_at_once(twin: GitHubTwin, installation: int) -> None:
    waits: list[float] = []
    with GitHubApp(
        twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_retry_after=0.5, sleep=waits.append
    ) as app:
        twin.faults.secondary_rate_limit = 3
        with pytest.raises(GitHubError) as caught:
            app.installation_token(installation, REPO)
    assert waits == []
    assert caught.value.upstream_status == 403
    assert "rate limited" in caught.value.message
    assert twin.faults.secondary_rate_limit == 2  # one request, no retry


def test_server_errors_are_retried_with_backoff(
    twin: GitHubTwin, app: GitHubApp, installation: int, sleeps: Sleeps
) -> None:
    twin.faults.server_errors = 2
    app.installation_token(installation, REPO)
    assert len(sleeps.waits) == 2
    assert 0.25 <= sleeps.waits[0] <= 0.5
    assert 0.5 <= sleeps.waits[1] <= 1.0


def test_attempts_are_bounded(twin: GitHubTwin, installation: int) -> None:
    waits: list[float] = []
    with GitHubApp(
        twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_attempts=3, sleep=waits.append
    ) as app:
        issued = app.installation_token(installation, REPO)
        twin.faults.server_errors = 10
        with pytest.raises(GitHubError) as caught:
            app.installation_token(installation, REPO)
        assert twin.faults.server_errors == 7  # exactly three requests
        assert len(waits) == 2  # no wait after the last attempt
        assert caught.value.status == 502
        assert caught.value.message.startswith("GitHub create an installation token for octo/demo failed")
        assert "after 3 attempts: HTTP 50" in caught.value.message
        assert_no_token(caught.value, issued.token)

        # A repository call carrying a cached token fails the same way, without it.
        twin.faults.reset()
        app.find_pull(installation, REPO, "steward/x")
        twin.faults.server_errors = 10
        with pytest.raises(GitHubError) as listing:
            app.find_pull(installation, REPO, "steward/x")
        assert "list pull requests of octo/demo" in listing.value.message
        assert_no_token(listing.value, issued.token)
        twin.faults.reset()


def test_rate_limits_and_errors_on_pull_calls(
    twin: GitHubTwin, app: GitHubApp, installation: int, tmp_path: Path, sleeps: Sleeps
) -> None:
    branch = "steward/dddddddddddddddddddddddd"
    push_branch(app, installation, REPO, tmp_path, branch)
    app.find_pull(installation, REPO, branch)
    twin.faults.set(secondary_rate_limit=1, server_errors=1)
    pull = app.open_pull(installation, REPO, head=branch, base="main", title="T", body="B")
    assert len(twin.pulls(REPO)) == 1
    assert app.find_pull(installation, REPO, branch) == pull
    assert len(sleeps.waits) == 2


# ---- configuration


def test_git_url_and_pull_url_for_github_ghes_and_the_twin(twin: GitHubTwin) -> None:
    key = twin.app_private_key_pem
    with GitHubApp(1, key) as public, GitHubApp(1, key, base_url="https://api.github.com") as named:
        assert public.git_url(REPO) == named.git_url(REPO) == "https://github.com/octo/demo.git"
        assert public.pull_url(REPO, 7) == named.pull_url(REPO, 7) == "https://github.com/octo/demo/pull/7"
    with GitHubApp(1, key, base_url="https://ghe.example.com/api/v3/") as ghes:
        assert ghes.git_url(REPO) == "https://ghe.example.com/octo/demo.git"
        assert ghes.pull_url(REPO, 7) == "https://ghe.example.com/octo/demo/pull/7"
    with GitHubApp(1, key, base_url=twin.url) as local:
        assert local.git_url(REPO) == f"{twin.url}/octo/demo.git"
        assert local.pull_url(REPO, 7) == f"{twin.url}/octo/demo/pull/7"


def test_app_from_env_reads_the_key_from_secrets_manager(
    aws: None, twin: GitHubTwin, installation: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    arn = secrets.create_secret(Name="steward/github-app", SecretString=twin.app_private_key_pem.decode())[
        "ARN"
    ]
    env = {
        "STEWARD_GITHUB_APP_ID": str(twin.app_id),
        "STEWARD_GITHUB_PRIVATE_KEY_SECRET_ID": arn,
        "STEWARD_GITHUB_API_URL": twin.url,
    }
    with github_app(Settings.from_env(env)) as app:
        assert app.installation_token(installation, REPO).repository == REPO
    with pytest.raises(RuntimeError, match="STEWARD_GITHUB_APP_ID"):
        github_app(Settings.from_env({}))
    with pytest.raises(RuntimeError, match="PRIVATE_KEY"):
        github_app(Settings.from_env({"STEWARD_GITHUB_APP_ID": "1"}))


@pytest.mark.parametrize("repo", ["octo/..", "octo/.", "octo", "octo/a/b", "-octo/a", ""])
def test_a_repository_name_that_is_not_owner_name_is_refused_before_any_call(repo: str) -> None:
    with pytest.raises(BadRequest, match="OWNER/NAME"):
        split_repo(repo)
