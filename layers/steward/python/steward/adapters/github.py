"""GitHub App adapter: the only place Steward calls GitHub's REST API (docs/concepts/runner.md, docs/concepts/github.md).

One githubkit sync client per `GitHubApp`, reused across calls. It authenticates as the App
(a JWT signed with the App's private key) for the App routes, and every repository call
carries an installation token this adapter created itself, scoped to that one repository
with only `contents: write` and `pull_requests: write`. githubkit's own retry is off: the
loop here retries 5xx, transport errors and 403/429 rate limits, waiting what `retry-after`
says (bounded by `max_retry_after`), for at most `max_attempts` attempts in all.

GitHub is an eventually consistent peer, so every effect must be safe to repeat: opening a
pull request whose head already has one (GitHub answers 422 "already exists", typically
after a lost response made us retry) returns the existing pull request; closing a closed
pull request changes nothing. A comment is the one effect GitHub cannot tell apart from a
second one, so it is never retried after a 5xx or a lost answer (it may have been made):
the caller looks for it (`find_comment`, by a marker in its body) before writing it again.

Errors are `GitHubError` (502) naming the operation and GitHub's status; a message never
holds a token (tokens are redacted from anything GitHub said, and the githubkit exception,
whose request carries the Authorization header, is not chained).
"""

from __future__ import annotations

import functools
import json
import random
import ssl
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, cast
from urllib.parse import quote

import httpx
import jwt
from githubkit import GitHub
from githubkit.auth import UnauthAuthStrategy
from githubkit.auth.app import AppAuth, AppAuthStrategy
from githubkit.cache import MemCacheStrategy
from githubkit.exception import GitHubException, RateLimitExceeded, RequestError, RequestFailed

from steward.domain.documents import is_repo_name
from steward.domain.errors import BadRequest, StewardError
from steward.domain.redaction import Redactor

if TYPE_CHECKING:
    from githubkit.core import GitHubCore

T = TypeVar("T")
PullState = Literal["open", "closed", "all"]

TOKEN_PERMISSIONS: dict[str, str] = {"contents": "write", "pull_requests": "write"}  # a runtime's
# The App's own calls also read a pull request's checks and commit statuses (resync finds a
# failing check whose delivery was lost); a runtime's token never carries them.
APP_TOKEN_PERMISSIONS: dict[str, str] = TOKEN_PERMISSIONS | {"checks": "read", "statuses": "read"}
# GitHub adds metadata:read to every installation token; nothing else may come back.
_IMPLIED_PERMISSIONS = {"metadata": "read"}
_TOKEN_REUSE_MARGIN = timedelta(minutes=5)  # a cached API token is renewed this long before expiry
_BACKOFF_BASE_SECONDS = 0.5
_BACKOFF_CAP_SECONDS = 8.0
_DETAIL_LIMIT = 300
_COMMENT_PAGES = 30  # of 100 comments: how far `find_comment` looks
_READ_PAGES = 3  # of 100: how far a listing of reviews, comments or checks reads


@functools.cache
def _tls() -> ssl.SSLContext:
    """One verifying TLS context for every client of the process: httpx builds a new one per
    client otherwise, loading the whole CA bundle each time (about 30 ms). Built as httpx
    would build it (its CA bundle, or `SSL_CERT_FILE`/`SSL_CERT_DIR` when set)."""
    return httpx.create_ssl_context(trust_env=True)


class GitHubError(StewardError):
    """A GitHub call failed (after retries where they apply). `upstream_status` is GitHub's
    HTTP status when it answered; `detail` is its redacted message."""

    status = 502
    code = "github_error"

    def __init__(
        self, message: str, *, operation: str, upstream_status: int | None = None, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.upstream_status = upstream_status
        self.detail = detail


@dataclass(frozen=True)
class InstallationToken:
    """An installation token for one repository. `token` is kept out of repr."""

    token: str = field(repr=False)
    expires_at: datetime
    repository: str


@dataclass(frozen=True)
class PullRef:
    number: int
    url: str  # html_url
    state: str  # "open" or "closed"
    merged: bool
    head_sha: str | None = None  # the commit its head branch points at


def _head_sha(pull: Mapping[str, Any]) -> str | None:
    head = pull.get("head")
    sha = head.get("sha") if isinstance(head, Mapping) else None
    return sha if isinstance(sha, str) else None


@dataclass(frozen=True)
class PullObservation:
    """What GitHub says of a branch's pull request now. `changed` False: GitHub answered 304
    to the `etag` we sent (nothing changed, and it cost no rate limit); `pull` is then None
    and the caller keeps what it knew. `etag` is the one to send next time."""

    changed: bool
    pull: PullRef | None
    etag: str | None


@dataclass(frozen=True)
class PullMergeability:
    mergeable: bool | None  # None: GitHub has not computed it yet
    state: str  # GitHub's mergeable_state: clean, dirty (conflicts), blocked, unknown, ...
    base_ref: str
    base_sha: str


@dataclass(frozen=True)
class ConditionalRead:
    """A listing asked with the ETag of its previous answer: `changed` False is GitHub's 304
    (nothing new; it cost no rate limit) and `items` is then empty."""

    changed: bool
    items: tuple[dict[str, Any], ...]
    etag: str | None


@dataclass(frozen=True)
class InstallationRead:
    """An installation as GitHub's API shows it now. `repositories` is None when it cannot
    be listed (a suspended installation grants no token to list them with)."""

    installation_id: int
    account: str | None
    suspended: bool
    updated_at: datetime
    repositories: tuple[str, ...] | None


def split_repo(repo: str) -> tuple[str, str]:
    """("owner", "name") of "owner/name", or BadRequest."""
    if not is_repo_name(repo):
        raise BadRequest(f"repository must be OWNER/NAME, got {repo[:120]!r}", field="repo")
    owner, name = repo.split("/")
    return owner, name


@functools.lru_cache(maxsize=8)
def _signing_key(pem: str) -> Any:
    """The App's private key, parsed once: pyjwt given the PEM parses and checks the RSA key
    on every JWT (about 50 ms of CPU); the parsed key signs in under a millisecond."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key  # noqa: PLC0415

    return load_pem_private_key(pem.encode("ascii"), password=None)


class _AppAuth(AppAuth):
    """The App JWT on App routes; a request that already carries an installation token (this
    adapter sets it per call) is sent as it is."""

    def _create_jwt(self) -> str:
        # githubkit's claims (issued a minute back for clock drift, ten minutes' life), signed
        # with the parsed key instead of the PEM.
        issued = datetime.now(UTC) - timedelta(minutes=1)
        claims = {"iss": self.issuer, "iat": issued, "exp": issued + timedelta(minutes=10)}
        return jwt.encode(claims, _signing_key(self.private_key), algorithm="RS256")

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if "Authorization" in request.headers:
            yield request
            return
        yield from super().sync_auth_flow(request)


@dataclass
class _AppAuthStrategy(AppAuthStrategy):
    def get_auth_flow(self, github: GitHubCore[Any]) -> httpx.Auth:
        return _AppAuth(github, self.app_id, self.private_key, self.client_id, self.client_secret)


class RepositoryClient:
    """Pull-request calls and their retries, shared by the App (which mints its own
    installation tokens) and a runtime (which holds only the token it was issued)."""

    def __init__(
        self,
        gh: GitHub[Any],
        *,
        base_url: str | None,
        max_attempts: int,
        max_retry_after: float,
        sleep: Callable[[float], None],
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.base_url = base_url.rstrip("/") if base_url else None
        self.max_attempts = max_attempts
        self.max_retry_after = max_retry_after
        self._sleep = sleep
        self._tokens: dict[tuple[int, str], InstallationToken] = {}
        self._lock = threading.Lock()
        self._gh = gh
        # Keeps one httpx client (and its connections) for calls from this context; calls
        # from other threads get a client of their own for the call.
        self._gh.__enter__()  # type: ignore[no-untyped-call]  # githubkit leaves it unannotated

    def close(self) -> None:
        self._gh.__exit__()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _fresh_token(self, installation_id: int, repo: str) -> InstallationToken:
        raise NotImplementedError

    def _api_headers(self, installation_id: int, repo: str) -> dict[str, str]:
        """Authorization for repository calls: a cached token for (installation, repo),
        renewed shortly before it expires."""
        key = (installation_id, repo.lower())
        with self._lock:
            cached = self._tokens.get(key)
        if cached is None or cached.expires_at - _TOKEN_REUSE_MARGIN <= datetime.now(UTC):
            cached = self._fresh_token(installation_id, repo)
            with self._lock:
                self._tokens[key] = cached
        return {"Authorization": f"token {cached.token}"}

    def web_url(self) -> str:
        """The web host of this deployment's GitHub, from its API URL: github.com (API unset
        or api.github.com), a GHES host (API at /api/v3) or, for the twin, the API's own URL."""
        if self.base_url is None or self.base_url == "https://api.github.com":
            return "https://github.com"
        return self.base_url.removesuffix("/api/v3")

    def git_url(self, repo: str) -> str:
        """The smart-HTTP URL of `repo` (no credentials)."""
        split_repo(repo)
        return f"{self.web_url()}/{repo}.git"

    def pull_url(self, repo: str, number: int) -> str:
        """The web link of pull request `number` of `repo`, built here and never taken from
        a caller: what Steward shows as a task's pull request."""
        split_repo(repo)
        return f"{self.web_url()}/{repo}/pull/{number}"

    # ---- pull requests

    def find_pull(
        self, installation_id: int, repo: str, branch: str, state: PullState = "all"
    ) -> PullRef | None:
        """The pull request whose head is `branch` of `repo` (an open one first, then the
        oldest), or None."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> PullRef | None:
            response = self._gh.rest.pulls.list(
                owner, name, head=f"{owner}:{branch}", state=state, per_page=100, headers=headers
            )
            found = [
                PullRef(p.number, p.html_url, p.state, p.merged_at is not None, p.head.sha)
                for p in response.parsed_data
                # only the branch of this repository (a deleted fork's has no repository),
                # whatever the filter let through
                if p.head.ref == branch
                and p.head.repo is not None
                and p.head.repo.full_name.lower() == repo.lower()
            ]
            found.sort(key=lambda p: (p.state != "open", p.number))
            return found[0] if found else None

        return self._call(f"list pull requests of {repo} for {branch}", call)

    def pull_head(self, installation_id: int, repo: str, number: int) -> tuple[str, str] | None:
        """(head branch, head SHA) of pull request `number` of `repo` when its head is a branch
        of `repo` itself; None when there is no such pull request (an issue, say) or its head
        is a fork's."""
        pull = self._own_pull(installation_id, repo, number)
        return None if pull is None else (pull.head.ref, pull.head.sha)

    def can_write(self, installation_id: int, repo: str, login: str) -> bool:
        """Whether `login` may write to `repo` (admin, maintain or write: through a team too,
        which `author_association` does not show)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> bool:
            body = self._gh.request(
                "GET",
                f"/repos/{owner}/{name}/collaborators/{quote(login, safe='')}/permission",
                headers=headers,
            ).json()
            return isinstance(body, dict) and body.get("permission") in ("admin", "maintain", "write")

        try:
            return self._call(f"read the permission of {login} on {repo}", call)
        except GitHubError as exc:
            if exc.upstream_status == 404:
                return False
            raise

    def pull_base(self, installation_id: int, repo: str, number: int) -> str | None:
        """The base branch of pull request `number` of `repo` (None: no such pull request)."""
        pull = self._own_pull(installation_id, repo, number)
        return None if pull is None else pull.base.ref

    def mergeability(self, installation_id: int, repo: str, number: int) -> PullMergeability | None:
        """Whether pull request `number` merges into its base now (GitHub computes it after
        the base moves: None until it has), and that base; None: no such pull request."""
        pull = self._own_pull(installation_id, repo, number)
        if pull is None:
            return None
        mergeable = pull.mergeable if isinstance(pull.mergeable, bool) else None
        return PullMergeability(mergeable, str(pull.mergeable_state or ""), pull.base.ref, pull.base.sha)

    def branch_pull(self, installation_id: int, repo: str, number: int, branch: str) -> PullRef | None:
        """Pull request `number` of `repo` when its head is `branch` of `repo` itself; None
        when `repo` has no such pull request, or its head is another branch or a fork's."""
        pull = self._own_pull(installation_id, repo, number)
        if pull is None or pull.head.ref != branch:
            return None
        return PullRef(pull.number, pull.html_url, pull.state, pull.merged_at is not None, pull.head.sha)

    def _own_pull(self, installation_id: int, repo: str, number: int) -> Any | None:
        """Pull request `number` of `repo` as GitHub shows it, when its head is in `repo`."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> Any | None:
            pull = self._gh.rest.pulls.get(owner, name, number, headers=headers).parsed_data
            head_repo = pull.head.repo
            if head_repo is None or head_repo.full_name.lower() != repo.lower():
                return None
            return pull

        try:
            return self._call(f"read pull request {number} of {repo}", call)
        except GitHubError as exc:
            if exc.upstream_status == 404:
                return None
            raise

    def observe_pull(
        self, installation_id: int, repo: str, branch: str, *, etag: str | None = None
    ) -> PullObservation:
        """The pull request of `branch` as `find_pull` picks it, asked conditionally: with
        the `etag` of the previous answer, an unchanged listing is a 304 (resync polls many
        branches; unchanged answers must not spend the rate limit)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)
        if etag:
            headers["If-None-Match"] = etag
        params: dict[str, str | int] = {"head": f"{owner}:{branch}", "state": "all", "per_page": 100}

        def call() -> PullObservation:
            response = self._gh.request("GET", f"/repos/{owner}/{name}/pulls", params=params, headers=headers)
            tag = response.headers.get("ETag") or etag
            if response.status_code == 304:
                return PullObservation(False, None, tag)
            found = [
                PullRef(
                    int(p["number"]),
                    str(p["html_url"]),
                    str(p["state"]),
                    p.get("merged_at") is not None,
                    _head_sha(p),
                )
                for p in response.json()
                if isinstance(p, dict)
            ]
            found.sort(key=lambda p: (p.state != "open", p.number))
            return PullObservation(True, found[0] if found else None, tag)

        return self._call(f"observe the pull request of {repo} for {branch}", call)

    def open_pull(
        self, installation_id: int, repo: str, *, head: str, base: str, title: str, body: str
    ) -> PullRef:
        """Open a pull request from `head` into `base`, or return the one `head` already has
        (GitHub's 422 "already exists", e.g. after a lost response was retried)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)
        operation = f"open a pull request on {repo} from {head}"

        def call() -> PullRef:
            response = self._gh.rest.pulls.create(
                owner, name, head=head, base=base, title=title, body=body, headers=headers
            )
            pull = response.parsed_data
            return PullRef(pull.number, pull.html_url, pull.state, pull.merged_at is not None, pull.head.sha)

        try:
            return self._call(operation, call)
        except GitHubError as exc:
            if exc.upstream_status != 422 or "already exists" not in exc.detail.lower():
                raise
        # Listing may lag the create that made the 422 (eventual consistency): look again,
        # within the same bound of attempts.
        for attempt in range(1, self.max_attempts + 1):
            existing = self.find_pull(installation_id, repo, head, state="open")
            if existing is not None:
                return existing
            if attempt < self.max_attempts:
                self._sleep(_backoff(attempt))
        raise GitHubError(
            f"GitHub {operation} failed: it says one exists for the head, but none is listed",
            operation=operation,
            upstream_status=422,
        )

    def close_pull(self, installation_id: int, repo: str, number: int) -> PullRef:
        """Close pull request `number` unmerged (closing a closed one changes nothing); the
        pull request as GitHub answers after it (`merged` if a person merged it first)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> PullRef:
            pull = self._gh.rest.pulls.update(
                owner, name, number, state="closed", headers=headers
            ).parsed_data
            return PullRef(pull.number, pull.html_url, pull.state, pull.merged_at is not None, pull.head.sha)

        return self._call(f"close pull request #{number} of {repo}", call)

    def pull_body(self, installation_id: int, repo: str, number: int) -> str:
        """The body of pull request `number` ("" when it has none)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> str:
            return self._gh.rest.pulls.get(owner, name, number, headers=headers).parsed_data.body or ""

        return self._call(f"read pull request #{number} of {repo}", call)

    def edit_pull_body(self, installation_id: int, repo: str, number: int, body: str) -> None:
        """Replace the body of pull request `number` (the same body again changes nothing)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> None:
            self._gh.rest.pulls.update(owner, name, number, body=body, headers=headers)

        self._call(f"edit pull request #{number} of {repo}", call)

    def find_comment(self, installation_id: int, repo: str, number: int, marker: str) -> int | None:
        """The id of the first comment on issue or pull request `number` whose body holds
        `marker`, or None (every page is read, at most `_COMMENT_PAGES` of 100)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> int | None:
            for page in range(1, _COMMENT_PAGES + 1):
                comments = self._gh.request(
                    "GET",
                    f"/repos/{owner}/{name}/issues/{number}/comments",
                    params={"per_page": 100, "page": page},
                    headers=headers,
                ).json()
                for comment in comments:
                    if isinstance(comment, dict) and marker in str(comment.get("body") or ""):
                        return int(comment["id"])
                if len(comments) < 100:
                    return None
            return None

        return self._call(f"list the comments of #{number} of {repo}", call)

    def comment(self, installation_id: int, repo: str, number: int, body: str) -> int:
        """Comment on issue or pull request `number`; the comment's id. Not retried after a
        5xx or a lost answer (see the module docstring)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> int:
            return int(
                self._gh.rest.issues.create_comment(
                    owner, name, number, body=body, headers=headers
                ).parsed_data.id
            )

        return self._call(f"comment on #{number} of {repo}", call, repeatable=False)

    def edit_comment(self, installation_id: int, repo: str, comment_id: int, body: str) -> bool:
        """Replace the body of comment `comment_id` (the same body again changes nothing);
        False when it no longer exists (a person deleted it)."""
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> None:
            self._gh.rest.issues.update_comment(owner, name, comment_id, body=body, headers=headers)

        try:
            self._call(f"edit comment {comment_id} of {repo}", call)
        except GitHubError as exc:
            if exc.upstream_status == 404:
                return False
            raise
        return True

    # ---- what was said and run on a pull request (resync reads the asks a lost delivery
    # carried; each method is one call as resync counts them, at most `_READ_PAGES` pages)

    def reviews(self, installation_id: int, repo: str, number: int) -> list[dict[str, Any]]:
        """The reviews of pull request `number`, oldest first (GitHub's REST shape)."""
        return self._listing(
            installation_id, repo, f"pulls/{number}/reviews", {}, f"the reviews of #{number}"
        )

    def review_comments(
        self,
        installation_id: int,
        repo: str,
        number: int,
        *,
        review_id: int | None = None,
        since: str | None = None,
    ) -> list[dict[str, Any]]:
        """The inline comments of pull request `number` (updated at or after `since`), or of
        its review `review_id` only."""
        path = (
            f"pulls/{number}/reviews/{review_id}/comments"
            if review_id is not None
            else f"pulls/{number}/comments"
        )
        params = {"since": since} if since and review_id is None else {}
        return self._listing(installation_id, repo, path, params, f"the review comments of #{number}")

    def issue_comments(
        self, installation_id: int, repo: str, number: int, *, since: str | None = None
    ) -> list[dict[str, Any]]:
        """The conversation comments of pull request `number` updated at or after `since`."""
        params = {"since": since} if since else {}
        return self._listing(
            installation_id, repo, f"issues/{number}/comments", params, f"the comments of #{number}"
        )

    def check_runs(
        self, installation_id: int, repo: str, ref: str, *, etag: str | None = None, name: str | None = None
    ) -> ConditionalRead:
        """The latest check run of each check on commit (or branch) `ref`, asked with the
        ETag of the previous answer; only the check `name` when given."""
        params = {"check_name": name} if name else {}
        return self._conditional(
            installation_id, repo, f"commits/{ref}/check-runs", params, etag=etag, field_name="check_runs"
        )

    def commit_statuses(
        self, installation_id: int, repo: str, ref: str, *, etag: str | None = None
    ) -> ConditionalRead:
        """The latest commit status of each context on `ref` (GitHub's combined status)."""
        return self._conditional(
            installation_id, repo, f"commits/{ref}/status", {}, etag=etag, field_name="statuses"
        )

    def _listing(
        self, installation_id: int, repo: str, path: str, params: Mapping[str, str], what: str
    ) -> list[dict[str, Any]]:
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)

        def call() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            for page in range(1, _READ_PAGES + 1):
                items = self._gh.request(
                    "GET",
                    f"/repos/{owner}/{name}/{path}",
                    params={**params, "per_page": 100, "page": page},
                    headers=headers,
                ).json()
                found += [item for item in items if isinstance(item, dict)]
                if len(items) < 100:
                    break
            return found

        return self._call(f"read {what} of {repo}", call)

    def _conditional(
        self,
        installation_id: int,
        repo: str,
        path: str,
        params: Mapping[str, str],
        *,
        etag: str | None,
        field_name: str,
    ) -> ConditionalRead:
        owner, name = split_repo(repo)
        headers = self._api_headers(installation_id, repo)
        if etag:
            headers["If-None-Match"] = etag

        def call() -> ConditionalRead:
            response = self._gh.request(
                "GET", f"/repos/{owner}/{name}/{path}", params={**params, "per_page": 100}, headers=headers
            )
            tag = response.headers.get("ETag") or etag
            if response.status_code == 304:
                return ConditionalRead(False, (), tag)
            body = response.json()
            items = body.get(field_name) if isinstance(body, dict) else None
            return ConditionalRead(True, tuple(i for i in items or () if isinstance(i, dict)), tag)

        return self._call(f"read {path} of {repo}", call)

    # ---- retries

    def _call(self, operation: str, call: Callable[[], T], *, repeatable: bool = True) -> T:
        """`call` with retries; when it is not `repeatable`, only refusals that say GitHub
        did nothing (rate limits) are retried."""
        last = ""
        status: int | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                return call()
            except RateLimitExceeded as exc:
                status = exc.response.status_code
                wait = float(exc.retry_after.total_seconds())
                last = f"rate limited (HTTP {status}, retry after {wait:g} s)"
                if wait > self.max_retry_after:
                    raise GitHubError(
                        f"GitHub {operation} failed: {last}, longer than we wait",
                        operation=operation,
                        upstream_status=status,
                    ) from None
            except RequestFailed as exc:
                status = exc.response.status_code
                detail = self._detail(exc.response.raw_response)
                if status < 500:
                    raise GitHubError(
                        f"GitHub {operation} failed: HTTP {status}" + (f": {detail}" if detail else ""),
                        operation=operation,
                        upstream_status=status,
                        detail=detail,
                    ) from None
                wait = _backoff(attempt)
                last = f"HTTP {status}"
                if not repeatable:
                    break
            except RequestError as exc:  # transport: refused, reset, timed out, no answer
                status = None
                wait = _backoff(attempt)
                last = f"no answer ({type(exc.exc).__name__})"
                if not repeatable:
                    break
            except GitHubException as exc:  # e.g. App credentials unusable
                raise GitHubError(
                    f"GitHub {operation} failed: {type(exc).__name__}", operation=operation
                ) from None
            if attempt < self.max_attempts:
                self._sleep(wait)
        raise GitHubError(
            f"GitHub {operation} failed after {attempt} attempts: {last}",
            operation=operation,
            upstream_status=status,
        )

    def _detail(self, response: httpx.Response) -> str:
        """GitHub's message and validation errors, redacted and bounded."""
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return ""
        if not isinstance(body, dict):
            return ""
        parts = [str(body.get("message", ""))]
        for error in body.get("errors") or []:
            if isinstance(error, dict) and error.get("message"):
                parts.append(str(error["message"]))
        with self._lock:
            held = [t.token for t in self._tokens.values()]
        return Redactor(held).bounded("; ".join(p for p in parts if p), _DETAIL_LIMIT)


class GitHubApp(RepositoryClient):
    """A GitHub App as Steward uses it: installation tokens and pull requests."""

    def __init__(
        self,
        app_id: int,
        private_key_pem: bytes | str,
        *,
        base_url: str | None = None,
        max_attempts: int = 4,
        max_retry_after: float = 60.0,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        pem = private_key_pem.decode("ascii") if isinstance(private_key_pem, bytes) else private_key_pem
        self.app_id = app_id
        gh: GitHub[_AppAuthStrategy] = GitHub(
            _AppAuthStrategy(app_id, pem),
            base_url=base_url.rstrip("/") if base_url else None,
            timeout=timeout,
            auto_retry=False,  # retried here, with our bounds and without double waits
            http_cache=False,  # pull request listings must never come from a cache
            ssl_verify=_tls(),
            # Per instance: githubkit's default cache is process-wide and keys the App JWT by
            # app id only, so two Apps with one id (twins in tests) would share a JWT.
            cache_strategy=MemCacheStrategy(),
        )
        super().__init__(
            gh, base_url=base_url, max_attempts=max_attempts, max_retry_after=max_retry_after, sleep=sleep
        )

    # ---- installation tokens

    def installation_token(
        self, installation_id: int, repo: str, *, permissions: Mapping[str, str] = TOKEN_PERMISSIONS
    ) -> InstallationToken:
        """A fresh token of installation `installation_id` for `repo` only, with exactly
        `permissions` (a runtime's: contents:write and pull_requests:write). Refuses a token
        GitHub made broader."""
        owner, name = split_repo(repo)
        operation = f"create an installation token for {repo}"

        def call() -> InstallationToken:
            response = self._gh.rest.apps.create_installation_access_token(
                installation_id,
                repositories=[name],
                permissions=cast("Any", dict(permissions)),  # githubkit types it as a TypedDict
            )
            parsed = response.parsed_data
            token = InstallationToken(parsed.token, _parse_time(parsed.expires_at), f"{owner}/{name}")
            _check_scope(response.json(), repo, operation, permissions)
            return token

        return self._call(operation, call)

    def _fresh_token(self, installation_id: int, repo: str) -> InstallationToken:
        return self.installation_token(installation_id, repo, permissions=APP_TOKEN_PERMISSIONS)

    def app_get(self, path: str, params: Mapping[str, str | int] | None = None) -> Any:
        """The JSON of an App route read with the App JWT (`/app`, `/app/hook/config`,
        `/app/hook/deliveries`: `steward doctor` checks the App's settings with them)."""
        if not path.startswith("/app"):
            raise ValueError("app_get reads App routes only")

        def call() -> Any:
            return self._gh.request("GET", path, params=dict(params or {})).json()

        return self._call(f"read {path}", call)

    def read_installation(self, installation_id: int) -> InstallationRead:
        """The installation's account, suspension and repositories as GitHub has them now
        (to settle deliveries that disagree; the listing uses a token that can only read
        metadata, so it grants nothing else)."""
        operation = f"read installation {installation_id}"

        def installation() -> Any:
            return self._gh.request("GET", f"/app/installations/{installation_id}").json()

        body = self._call(operation, installation)
        account = body.get("account") or {}
        handle = account.get("login") or account.get("slug") or account.get("name")
        suspended = body.get("suspended_at") is not None
        repositories: tuple[str, ...] | None = None
        if not suspended:

            def listing() -> tuple[str, ...]:
                token = self._gh.rest.apps.create_installation_access_token(
                    installation_id, permissions={"metadata": "read"}
                ).parsed_data.token
                names: list[str] = []
                page = 1
                while True:
                    answer = self._gh.request(
                        "GET",
                        "/installation/repositories",
                        params={"per_page": 100, "page": page},
                        headers={"Authorization": f"token {token}"},
                    ).json()
                    batch = [
                        str(r["full_name"]) for r in answer.get("repositories", []) if isinstance(r, dict)
                    ]
                    names += batch
                    if len(batch) < 100:
                        return tuple(sorted(names, key=str.lower))
                    page += 1

            repositories = self._call(f"list the repositories of installation {installation_id}", listing)
        return InstallationRead(
            installation_id,
            str(handle) if handle else None,
            suspended,
            _parse_time(str(body.get("updated_at") or "1970-01-01T00:00:00Z")),
            repositories,
        )


class InstallationClient(RepositoryClient):
    """A runtime's GitHub: pull-request calls with the installation token it was issued
    (`token_provider`, asked again shortly before the token expires). It holds no App key."""

    def __init__(
        self,
        token_provider: Callable[[], InstallationToken],
        *,
        base_url: str | None = None,
        max_attempts: int = 4,
        max_retry_after: float = 60.0,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        gh: GitHub[Any] = GitHub(
            UnauthAuthStrategy(),
            base_url=base_url.rstrip("/") if base_url else None,
            timeout=timeout,
            auto_retry=False,
            http_cache=False,
            ssl_verify=_tls(),
        )
        super().__init__(
            gh, base_url=base_url, max_attempts=max_attempts, max_retry_after=max_retry_after, sleep=sleep
        )
        self._token_provider = token_provider

    def _fresh_token(self, installation_id: int, repo: str) -> InstallationToken:
        return self._token_provider()


def _backoff(attempt: int) -> float:
    """Exponential with full jitter in its upper half: 0.5 s, 1 s, 2 s, ... capped at 8 s."""
    ceiling = min(_BACKOFF_CAP_SECONDS, _BACKOFF_BASE_SECONDS * 2.0 ** (attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not security


def _parse_time(value: str) -> datetime:
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _check_scope(body: Any, repo: str, operation: str, asked: Mapping[str, str]) -> None:
    """Refuse a token that can do more than asked: all repositories, another repository, or
    a permission beyond `asked` (and GitHub's metadata:read)."""
    problem = ""
    if not isinstance(body, dict):
        problem = "an unreadable answer"
    else:
        if body.get("repository_selection") == "all":
            problem = "access to all repositories"
        repositories = body.get("repositories")
        if isinstance(repositories, list):
            names = sorted(str(r.get("full_name", "")).lower() for r in repositories if isinstance(r, dict))
            if names != [repo.lower()]:
                problem = "access to other repositories"
        permissions = body.get("permissions")
        if isinstance(permissions, dict):
            extra = {k: v for k, v in permissions.items() if _IMPLIED_PERMISSIONS.get(k) != v}
            if extra != dict(asked):
                problem = "permissions other than " + ", ".join(f"{k}:{v}" for k, v in sorted(asked.items()))
    if problem:
        raise GitHubError(f"GitHub {operation}: the token has {problem}; refused", operation=operation)
