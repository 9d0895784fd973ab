"""`GitHubTwin`: the state and the rules of the local stand-in for GitHub.

The HTTP layer (`server`) only parses and answers; every decision GitHub would make (who
may mint a token, which repositories a token reaches, when a pull request may be opened,
merged or reopened, which events are delivered) is made here, under one lock, so the
order of state changes is the order of webhook deliveries.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import string
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from steward.local.github_twin import shapes
from steward.local.github_twin.faults import Faults
from steward.local.github_twin.gitrepo import GitRepos, MergeConflict, RefMoved
from steward.local.github_twin.state import (
    DEFAULT_PERMISSIONS,
    LEVELS,
    TOKEN_TTL_SECONDS,
    Account,
    Comment,
    CommitStatus,
    Installation,
    Pull,
    Repo,
    Token,
    TwinError,
    iso,
    node_id,
)
from steward.local.github_twin.webhooks import Deliverer, Delivery
from steward.local.http_base import LocalHttpServer
from steward.local.running import Running

Json = dict[str, Any]

HUMAN_LOGIN = "twin-reviewer"  # the person who merges, closes and installs
REVIEWER_LOGIN = "octo-reviewer"  # a collaborator who reviews and comments
DRIVE_BY_LOGIN = "drive-by"  # a GitHub user with no standing in the repository
TEAM_WRITER_LOGIN = "team-writer"  # may write through a team, with no association GitHub shows
# `author_association` of the twin's people (a repository's owner is OWNER; anyone else NONE).
ASSOCIATIONS = {HUMAN_LOGIN: "MEMBER", REVIEWER_LOGIN: "COLLABORATOR", TEAM_WRITER_LOGIN: "CONTRIBUTOR"}
# Their permission on any repository (the owner's is admin; anyone else's read).
PERMISSIONS = {HUMAN_LOGIN: "write", REVIEWER_LOGIN: "write", TEAM_WRITER_LOGIN: "write"}
CHECKS_APP_SLUG = "twin-ci"  # the App that reports the twin's check runs
CHECK_CONCLUSIONS = ("success", "failure", "timed_out", "neutral", "cancelled")
STATUS_STATES = ("error", "failure", "pending", "success")
JWT_MAX_SECONDS = 600  # GitHub refuses an App JWT that expires more than 10 minutes ahead
# The events the twin's App subscribes to, as docs/guides/deploying.md's "The GitHub App" tells an operator to
# set them. `installation` and `installation_repositories` are not among them: GitHub sends
# those to every App whatever it subscribes to (and `GET /app` does not list them).
APP_EVENTS = (
    "check_run",
    "check_suite",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "status",
)
_TOKEN_ALPHABET = string.ascii_letters + string.digits
_OWNER = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_NOREPLY = re.compile(r"^([0-9]+)\+([^@]+)@users\.noreply\.localhost$")
_BRANCH = re.compile(r"^(?!/)(?!.*(?:\.\.|//|@\{|\.lock$|/$|\.$))[^\x00-\x20~^:?*\[\\\x7f]+$")
# names that would shadow the twin's own routes (GitHub reserves them as well)
_RESERVED_OWNERS = {
    "_twin",
    "app",
    "apps",
    "avatars",
    "installation",
    "orgs",
    "organizations",
    "repos",
    "users",
}
_DOCS = "https://docs.github.com/rest"
_DOCS_PULLS = "https://docs.github.com/rest/pulls/pulls"
_DOCS_COMMENTS = "https://docs.github.com/rest/issues/comments"
_DOCS_REVIEWS = "https://docs.github.com/rest/pulls/reviews"
_DOCS_REVIEW_COMMENTS = "https://docs.github.com/rest/pulls/comments"
_DOCS_CHECKS = "https://docs.github.com/rest/checks/runs#list-check-runs-for-a-git-reference"
_DOCS_STATUSES = (
    "https://docs.github.com/rest/commits/statuses#get-the-combined-status-for-a-specific-reference"
)
_DOCS_MINT = "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"
_NOT_ACCESSIBLE = "Resource not accessible by integration"


@dataclass(frozen=True)
class GitRequest:
    """One smart-HTTP request the twin answered (for tests: which path a client took)."""

    repository: str
    service: str  # git-upload-pack or git-receive-pack
    method: str
    status: int
    content_encoding: str | None
    chunked: bool


class GitHubTwin(Running):
    """A local GitHub: REST subset, smart-HTTP git, App auth, signed webhooks, faults.

    Mutating methods and `url` need a started twin (the URLs in every body name its port).
    """

    app_slug = "steward"

    def __init__(
        self,
        root: Path,
        *,
        app_id: int = 1,
        webhook_url: str | None = None,
        webhook_secret: str = "",
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.root = Path(root)
        self.app_id = app_id
        # The App's settings as its owner edits them on GitHub (a test changes them to make
        # the App disagree with the stack): webhook URL and secret, the subscribed events.
        self.webhook_url = webhook_url
        self.webhook_secret = webhook_secret
        self.app_events: list[str] = list(APP_EVENTS)
        self.faults = Faults()
        self._address = (host, port)
        self.app_private_key_pem: bytes = b""
        self._public_key: rsa.RSAPublicKey | None = None
        self.use_app_key()
        self._created_at = time.time()
        self._lock = threading.RLock()
        self._git = GitRepos(self.root / "git", self.root / "home")
        self._deliverer = Deliverer(
            self.faults, app_id=app_id, url=lambda: self.webhook_url, secret=lambda: self.webhook_secret
        )
        self._server: LocalHttpServer[GitHubTwin] | None = None
        self._accounts: dict[str, Account] = {}
        self._repos: dict[str, Repo] = {}  # by lower-case full name, as GitHub matches names
        self._repos_by_id: dict[int, Repo] = {}
        self._installations: dict[int, Installation] = {}
        self._tokens: dict[str, Token] = {}  # by SHA-256 of the token: the twin keeps no token
        self._pulls: dict[int, dict[int, Pull]] = {}  # repo id -> number -> pull
        self._comments: dict[tuple[int, int], list[Comment]] = {}  # (repo id, number) -> oldest first
        # (repo id, number) -> each review and its inline comments, as their events carried them
        self._reviews: dict[tuple[int, int], list[tuple[Json, list[Json]]]] = {}
        # (repo id, head SHA) -> each check run as its event carried it, oldest first
        self._check_runs: dict[tuple[int, str], list[Json]] = {}
        self._statuses: dict[tuple[int, str], list[CommitStatus]] = {}  # (repo id, SHA) -> oldest first
        self._git_requests: list[GitRequest] = []
        self._ids = {
            "account": 1000,
            "repo": 100000,
            "installation": 10,
            "pull": 5000000,
            "comment": 9000000,
            "review": 7000000,
            "check_run": 3000000,
            "check_suite": 2000000,
            "status": 4000000,
        }
        self._rest_errors_served = 0
        self._bot = self._account(f"{self.app_slug}[bot]", "Bot")
        self._human = self._account(HUMAN_LOGIN, "User")

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL; a wildcard bind address is named by its loopback address."""
        if self._server is None:
            raise RuntimeError("the GitHub twin is not started")
        return self._server.url

    def start(self) -> None:
        if self._server is not None:
            return
        from steward.local.github_twin import server as http  # noqa: PLC0415 - it imports this module

        self._server = http.http_server(self._address, self)
        self._deliverer.start()
        self._server.start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        self._deliverer.stop()

    # -- the App's settings -----------------------------------------------------------------

    def use_app_key(self, private_key_pem: bytes | None = None) -> bytes:
        """Make `private_key_pem` (PKCS#8 or PKCS#1 RSA) the App's one key, or a new key when
        None, as deleting and generating keys on GitHub does: JWTs signed with any other key
        are refused from now on. Returns the key's PEM."""
        if private_key_pem is None:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        else:
            loaded = serialization.load_pem_private_key(private_key_pem, password=None)
            if not isinstance(loaded, rsa.RSAPrivateKey):
                raise ValueError("a GitHub App key is an RSA key")
            key = loaded
        self.app_private_key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        self._public_key = key.public_key()
        return self.app_private_key_pem

    def configure_app(self, changes: Mapping[str, Any]) -> Json:
        """Change the App's settings as its owner would on GitHub (`PATCH /_twin/app`):
        `webhook_url` (a string, or None: no webhook), `webhook_secret` ("" unsets it),
        `events` (the subscribed events), `private_key` (a PEM, or "new" for a new key, which
        is returned). Checked whole before anything changes."""
        unknown = set(changes) - {"webhook_url", "webhook_secret", "events", "private_key"}
        if unknown:
            raise ValueError(f"unknown App settings: {', '.join(sorted(unknown))}")
        url = changes.get("webhook_url", self.webhook_url)
        secret = changes.get("webhook_secret", self.webhook_secret)
        events = changes.get("events", self.app_events)
        key = changes.get("private_key")
        if url is not None and not isinstance(url, str):
            raise ValueError("webhook_url must be a string or null")
        if (
            not isinstance(secret, str)
            or not _list_of(events, str)
            or not (key is None or isinstance(key, str))
        ):
            raise ValueError(
                "webhook_secret must be a string, events a list of strings, private_key a PEM or new"
            )
        with self._lock:
            settings: Json = {"webhook_url": url, "secret_set": bool(secret), "events": list(events)}
            if key is not None:  # first: a PEM that does not load changes nothing
                pem = self.use_app_key(None if key == "new" else key.encode())
                settings["private_key"] = pem.decode()
            self.webhook_url, self.webhook_secret, self.app_events = url, secret, list(events)
            return settings

    def api_app(self, authorization: str | None) -> Json:
        """`GET /app`: the authenticated App (App JWT)."""
        self.verify_app_jwt(authorization)
        with self._lock:
            live = sum(1 for i in self._installations.values() if not i.deleted)
            return shapes.app(
                self.url,
                self._human,
                app_id=self.app_id,
                slug=self.app_slug,
                events=sorted(set(self.app_events)),
                permissions=DEFAULT_PERMISSIONS,
                installations_count=live,
                created_at=self._created_at,
            )

    def api_hook_config(self, authorization: str | None) -> Json:
        """`GET /app/hook/config`: the App's webhook settings (App JWT). GitHub never shows
        the secret: `********` when one is set, no `secret` key when none is."""
        self.verify_app_jwt(authorization)
        config: Json = {"content_type": "json", "insecure_ssl": "0", "url": self.webhook_url or ""}
        if self.webhook_secret:
            config["secret"] = "********"  # noqa: S105 - the mask GitHub shows, no secret
        return config

    def api_hook_deliveries(
        self, authorization: str | None, query: Mapping[str, str]
    ) -> tuple[list[Json], str | None]:
        """`GET /app/hook/deliveries`: the App's deliveries, newest first, a page of
        `per_page` (30, at most 100) before the `cursor` (the next page's cursor, or None).
        `redelivery=true|false` filters, as on GitHub."""
        self.verify_app_jwt(authorization)
        per_page = min(max(_query_int(query.get("per_page"), 30), 1), 100)
        cursor = _query_int(query.get("cursor"), 0)
        items = [
            shapes.hook_delivery(number, delivery)
            for number, delivery in enumerate(self._deliverer.records, start=1)
            if not cursor or number < cursor
        ]
        wanted = query.get("redelivery")
        if wanted in ("true", "false"):
            items = [i for i in items if i["redelivery"] == (wanted == "true")]
        items.reverse()
        page = items[:per_page]
        more = len(items) > per_page
        return page, (str(page[-1]["id"]) if more and page else None)

    # -- seeding and acting as people ------------------------------------------------------

    def create_repo(self, full_name: str, files: Mapping[str, str], *, default_branch: str = "main") -> Json:
        """A private repository with one initial commit holding `files`; its JSON."""
        owner, name = _split_full_name(full_name)
        if not _BRANCH.match(default_branch):
            raise ValueError(f"invalid branch name {default_branch!r}")
        with self._lock:
            base = self.url
            if full_name.lower() in self._repos:
                raise ValueError(f"repository {full_name} already exists")
            owner_account = self._account(owner, "Organization")
            self._git.init(owner, name, default_branch, files, author="GitHub <noreply@github.com>")
            now = time.time()
            repo = Repo(self._next("repo"), owner_account.login, name, default_branch, True, now, now)
            self._repos[full_name.lower()] = repo
            self._repos_by_id[repo.id] = repo
            self._pulls[repo.id] = {}
            return shapes.repository(base, repo, owner_account, full=True)

    def create_installation(
        self, account: str, repos: Sequence[str], *, installation_id: int | None = None
    ) -> int:
        """Install the App on `account` for `repos` (names, or full names of its repositories)."""
        with self._lock:
            self.url  # noqa: B018 - fail early when not started
            owner = self._account(account, "Organization")
            if any(i.account == owner.login and not i.deleted for i in self._installations.values()):
                raise ValueError(f"the App is already installed on {account}")
            if installation_id is None:
                installation_id = self._next("installation")
                while installation_id in self._installations:
                    installation_id = self._next("installation")
            elif installation_id in self._installations:
                raise ValueError(f"installation {installation_id} exists")
            repo_ids = [r.id for r in self._resolve(owner.login, repos)]
            now = time.time()
            inst = Installation(installation_id, owner.login, repo_ids, dict(DEFAULT_PERMISSIONS), now, now)
            self._installations[installation_id] = inst
            self._emit_installation("created", inst)
            return installation_id

    def delete_installation(self, installation_id: int) -> None:
        """Uninstall the App: its tokens stop working; an `installation` `deleted` event."""
        with self._lock:
            inst = self._installation(installation_id)
            inst.deleted = True
            self._emit_installation("deleted", inst)

    def suspend(self, installation_id: int, suspended: bool = True) -> None:
        """Suspend (or unsuspend) an installation; a change sends `suspend`/`unsuspend`."""
        with self._lock:
            inst = self._installation(installation_id)
            if (inst.suspended_at is not None) == suspended:
                return
            inst.suspended_at = time.time() if suspended else None
            inst.updated_at = time.time()
            self._emit_installation("suspend" if suspended else "unsuspend", inst)

    def add_repos(self, installation_id: int, repos: Sequence[str]) -> None:
        self._change_repos(installation_id, repos, add=True)

    def remove_repos(self, installation_id: int, repos: Sequence[str]) -> None:
        self._change_repos(installation_id, repos, add=False)

    def merge(self, full_name: str, number: int) -> Json:
        """Merge a pull request as the reviewer would; the pull request's JSON."""
        with self._lock:
            repo = self._repo(full_name)
            pull = self._merge_pull(repo, number, self._human)
            return self._pull_json(repo, pull, full=True)

    def close(self, full_name: str, number: int) -> Json:
        """Close a pull request unmerged as the reviewer would; the pull request's JSON."""
        with self._lock:
            repo = self._repo(full_name)
            pull = self._set_state(repo, number, "closed", self._human)
            return self._pull_json(repo, pull, full=True)

    def reopen(self, full_name: str, number: int) -> Json:
        with self._lock:
            repo = self._repo(full_name)
            pull = self._set_state(repo, number, "open", self._human)
            return self._pull_json(repo, pull, full=True)

    def push(
        self, token: str, full_name: str, branch: str, files: Mapping[str, str], *, on_branch: bool = False
    ) -> str:
        """What a runtime's `git push` of one new commit on top of the default branch does
        (`on_branch`: on top of `branch` itself, as a follow-up round pushes), without a clone
        (a test's shortcut, for tests that do not exercise git itself): the token must be a
        live one of this twin that may write the repository, as smart HTTP demands; `branch`
        is created or moved. The new commit's SHA."""
        status, message = self.git_access(
            "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode(), full_name, write=True
        )
        if status != 200:
            raise TwinError(status, message)
        if not _BRANCH.match(branch):
            raise ValueError(f"invalid branch name {branch!r}")
        with self._lock:
            repo = self._repo(full_name)
            parent = self._git.ref_sha(repo.owner, repo.name, repo.default_branch)
            if on_branch:
                parent = self._git.ref_sha(repo.owner, repo.name, branch) or parent
            if parent is None:
                raise RuntimeError(f"{full_name} has no default branch")
            return self._git.commit(
                repo.owner,
                repo.name,
                branch,
                parent=parent,
                files=files,
                author=f"{self._bot.login} <bot@steward.invalid>",
                message=f"Change on {branch}",
            )

    def person_push(
        self,
        full_name: str,
        number: int,
        *,
        login: str = REVIEWER_LOGIN,
        files: Mapping[str, str] | None = None,
    ) -> Json:
        """`login` pushes one commit onto pull request `number`'s branch, on top of its head
        (a fast-forward), as a person taking over would: the pull request follows, and
        GitHub's `pull_request` `synchronize` event is sent. The pull request's JSON."""
        with self._lock:
            repo = self._repo(full_name)
            pull = self._pull(repo, number)
            if pull.state != "open":
                raise TwinError(422, "the pull request is not open")
            self._refresh(repo, pull)
            before = pull.head_sha
            author, _ = self._person(repo, login)
            account = self._accounts[author["login"].lower()]
            self._git.commit(
                repo.owner,
                repo.name,
                pull.head_ref,
                parent=pull.head_sha,
                files=files
                or {f"notes/{account.login.removesuffix('[bot]')}.md": f"A change by {account.login}.\n"},
                author=f"{account.login} <{account.id}+{account.login}@users.noreply.localhost>",
                message=f"A change by {account.login}",
            )
            self._refresh(repo, pull)
            self._emit_pull("synchronize", repo, pull, account, before=before, after=pull.head_sha)
            return self._pull_json(repo, pull, full=True)

    # -- looking -----------------------------------------------------------------------------

    def review(
        self,
        full_name: str,
        number: int,
        *,
        state: str = "changes_requested",
        body: str = "",
        comments: Sequence[tuple[str, int, str]] = (),
        login: str = REVIEWER_LOGIN,
    ) -> Json:
        """`login` submits a review of pull request `number` on its head (`state`:
        changes_requested, approved or commented) with inline `comments` (path, line, text):
        one `pull_request_review` event, and one `pull_request_review_comment` per inline
        comment, as GitHub sends them; the pull request's `updated_at` moves, as on GitHub.
        The review as the event carries it."""
        if state not in ("changes_requested", "approved", "commented"):
            raise ValueError(f"a review's state is changes_requested, approved or commented, not {state!r}")
        with self._lock:
            repo = self._repo(full_name)
            pull = self._pull(repo, number)
            self._refresh(repo, pull)
            author, association = self._person(repo, login)
            now = time.time()
            review_id = self._next("review")
            review = shapes.review(
                self.url,
                repo.full_name,
                number,
                review_id,
                author=author,
                association=association,
                state=state,
                body=body,
                commit_id=pull.head_sha,
                at=now,
            )
            inline = [
                shapes.review_comment(
                    self.url,
                    repo.full_name,
                    number,
                    self._next("comment"),
                    review_id=review_id,
                    author=author,
                    association=association,
                    path=path,
                    line=line,
                    body=text,
                    diff_hunk=f"@@ -{line} +{line} @@",
                    commit_id=pull.head_sha,
                    at=now,
                )
                for path, line, text in comments
            ]
            self._reviews.setdefault((repo.id, number), []).append((review, inline))
            pull.updated_at = now
            pull_json = self._pull_json(repo, pull, full=True)
            for comment in inline:
                self._emit(
                    repo,
                    "pull_request_review_comment",
                    author,
                    action="created",
                    comment=comment,
                    pull_request=pull_json,
                )
            self._emit(
                repo, "pull_request_review", author, action="submitted", review=review, pull_request=pull_json
            )
            return review

    def comment(self, full_name: str, number: int, body: str, *, login: str = REVIEWER_LOGIN) -> Json:
        """`login` comments on pull request `number`'s conversation: an `issue_comment`
        event whose issue links the pull request; the pull request's `updated_at` moves, as
        on GitHub. The comment as the event carries it."""
        with self._lock:
            repo = self._repo(full_name)
            pull = self._pull(repo, number)
            author, association = self._person(repo, login)
            now = time.time()
            record = Comment(self._next("comment"), repo.id, number, body, author["login"], now, now)
            self._comments.setdefault((repo.id, number), []).append(record)
            pull.updated_at = now
            comment = shapes.issue_comment(
                self.url, repo.full_name, record, author=author, association=association
            )
            issue = self._issue_json(repo, pull)
            self._emit(repo, "issue_comment", author, action="created", issue=issue, comment=comment)
            return comment

    def check(
        self,
        full_name: str,
        number: int,
        *,
        name: str,
        conclusion: str,
        output: str = "",
        ref: str | None = None,
    ) -> Json:
        """A check run `name` completes with `conclusion` on the head of pull request
        `number` (or of branch `ref`): a `check_run` event naming the pull requests whose
        head that commit is; the commit's check runs list it. The pull request does not
        change. The check run as the event carries it."""
        with self._lock:
            repo = self._repo(full_name)
            branch, sha = self._checked_commit(repo, number, ref)
            pulls = self._minimal_pulls(repo, sha)
            app = self._checks_app()
            run = shapes.check_run(
                self.url,
                repo.full_name,
                self._next("check_run"),
                self._next("check_suite"),
                name=name,
                conclusion=conclusion,
                output=output,
                head_sha=sha,
                head_branch=branch,
                pulls=pulls,
                app=app,
                at=time.time(),
            )
            self._check_runs.setdefault((repo.id, sha), []).append(run)
            self._emit(
                repo,
                "check_run",
                self._account(f"{CHECKS_APP_SLUG}[bot]", "Bot"),
                action="completed",
                check_run=run,
            )
            return run

    def _checked_commit(self, repo: Repo, number: int, ref: str | None) -> tuple[str, str]:
        """(branch, commit) a check or a status is on: pull request `number`'s head, or branch
        `ref`'s; ValueError for a branch the repository does not have."""
        pull = self._pull(repo, number)
        self._refresh(repo, pull)
        branch = ref or pull.head_ref
        sha = self._git.ref_sha(repo.owner, repo.name, branch) if ref else pull.head_sha
        if sha is None:
            raise ValueError(f"{repo.full_name} has no branch {branch!r}")
        return branch, sha

    def status(
        self,
        full_name: str,
        number: int,
        *,
        context: str,
        state: str,
        description: str = "",
        ref: str | None = None,
        target_url: str | None = None,
    ) -> Json:
        """The twin's CI posts a commit status `context` with `state` (error, failure,
        pending or success) on the head of pull request `number` (or of branch `ref`): a
        `status` event as GitHub sends it; the commit's combined status counts it. The pull
        request does not change. The status as the REST API shows it."""
        if state not in STATUS_STATES:
            raise ValueError(f"a status's state is one of {', '.join(STATUS_STATES)}, not {state!r}")
        if not context:
            raise ValueError("a status needs a context")
        with self._lock:
            repo = self._repo(full_name)
            _, sha = self._checked_commit(repo, number, ref)
            creator = self._account(f"{CHECKS_APP_SLUG}[bot]", "Bot")
            now = time.time()
            record = CommitStatus(
                self._next("status"),
                repo.id,
                sha,
                context,
                state,
                description or None,
                target_url or None,
                creator.login,
                now,
                now,
            )
            self._statuses.setdefault((repo.id, sha), []).append(record)
            creator_json = shapes.user(self.url, creator)
            api = f"{self.url}/repos/{repo.full_name}"
            branches = [
                {"name": name, "commit": {"sha": head, "url": f"{api}/commits/{head}"}, "protected": False}
                for name, head in sorted(self._git.branches_containing(repo.owner, repo.name, sha).items())
            ][:10]  # GitHub names at most 10
            fields = shapes.status_event(
                repo.full_name,
                record,
                creator=creator_json,
                commit_json=self._commit_json(repo, sha),
                branches=branches,
            )
            self._emit(repo, "status", creator_json, action=None, **fields)
            return shapes.commit_status(self.url, repo.full_name, record, creator=creator_json)

    def pulls(self, full_name: str) -> list[Json]:
        """Every pull request of the repository, oldest first, in the full shape."""
        with self._lock:
            repo = self._repo(full_name)
            return [self._pull_json(repo, p, full=True) for p in self._pulls[repo.id].values()]

    def pull_states(self, full_name: str) -> list[dict[str, Any]]:
        """Every pull request's number, head, state and merge, oldest first: what a test checks
        after each step, without the git work of the full shape."""
        with self._lock:
            repo = self._repo(full_name)
            return [
                {
                    "number": p.number,
                    "head_ref": p.head_ref,
                    "head_sha": p.head_sha,
                    "state": p.state,
                    "merged": p.merged,
                }
                for p in self._pulls[repo.id].values()
            ]

    def pull(self, full_name: str, number: int) -> Json:
        with self._lock:
            repo = self._repo(full_name)
            return self._pull_json(repo, self._pull(repo, number), full=True)

    def comments(self, full_name: str, number: int) -> list[Json]:
        """The comments of pull request `number`, oldest first, as the REST API lists them."""
        with self._lock:
            repo = self._repo(full_name)
            self._pull(repo, number)
            return [self._comment_json(repo, c) for c in self._comments.get((repo.id, number), [])]

    def branch_sha(self, full_name: str, branch: str) -> str | None:
        """The branch's commit, or None when the branch does not exist."""
        with self._lock:
            repo = self._repo(full_name)
        if not _BRANCH.match(branch):
            return None
        return self._git.ref_sha(repo.owner, repo.name, branch)

    @property
    def deliveries(self) -> list[Delivery]:
        """Every delivery attempt so far, in the order they were made (a copy)."""
        return self._deliverer.records

    @property
    def git_requests(self) -> list[GitRequest]:
        with self._lock:
            return list(self._git_requests)

    def flush(self) -> int:
        """Send the deliveries held by `reorder_deliveries`, newest first; how many."""
        return self._deliverer.flush()

    def withhold(self, on: bool) -> bool:
        """Record new deliveries without sending them while `on` (see `Deliverer.withhold`)."""
        self._deliverer.withhold(on)
        return self._deliverer.withholding

    def redeliver(self, delivery_id: str) -> None:
        """Send a past delivery again with the same body and delivery id."""
        self._deliverer.redeliver(delivery_id)

    def wait_for_deliveries(self, timeout: float = 10.0) -> bool:
        """Block until every queued delivery was attempted; False on timeout."""
        return self._deliverer.wait_idle(timeout)

    # -- tokens --------------------------------------------------------------------------------

    def create_token(
        self,
        installation_id: int,
        *,
        repositories: Sequence[str] | None = None,
        permissions: Mapping[str, str] | None = None,
    ) -> str:
        """Mint an installation token without an App JWT (a test's shortcut)."""
        token, _ = self._mint(installation_id, repositories, None, permissions)
        return token

    def expire_token(self, token: str) -> None:
        """Make a token expired now, as an hour passing would."""
        with self._lock:
            record = self._tokens.get(_token_key(token))
            if record is None:
                raise KeyError("unknown token")
            record.expires_at = time.time() - 1

    def verify_app_jwt(self, authorization: str | None) -> None:
        """Accept `Bearer <App JWT>` signed with the App key (RS256, iss, exp <= 10 min)."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise TwinError(401, "A JSON web token could not be decoded", documentation_url=_DOCS)
        try:
            claims = jwt.decode(
                value.strip(),
                self._public_key,  # type: ignore[arg-type]  # set by __init__
                algorithms=["RS256"],
                options={"require": ["exp", "iat", "iss"]},
            )
        except jwt.ExpiredSignatureError:
            raise TwinError(
                401,
                "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires",
                documentation_url=_DOCS,
            ) from None
        except jwt.PyJWTError:
            raise TwinError(401, "A JSON web token could not be decoded", documentation_url=_DOCS) from None
        if str(claims.get("iss")) != str(self.app_id):
            raise TwinError(401, "'Issuer' claim ('iss') must be an Integer", documentation_url=_DOCS)
        if float(claims["exp"]) - time.time() > JWT_MAX_SECONDS + 1:
            raise TwinError(
                401, "'Expiration time' claim ('exp') is too far in the future", documentation_url=_DOCS
            )

    def _mint(
        self,
        installation_id: int,
        repositories: Sequence[str] | None,
        repository_ids: Sequence[int] | None,
        permissions: Mapping[str, str] | None,
    ) -> tuple[str, Json]:
        with self._lock:
            base = self.url
            inst = self._installations.get(installation_id)
            if inst is None or inst.deleted:
                raise TwinError(404, "Not Found", documentation_url=_DOCS_MINT)
            if inst.suspended_at is not None:
                raise TwinError(403, "This installation has been suspended", documentation_url=_DOCS_MINT)
            scope: set[int] | None = None
            if repositories is not None or repository_ids is not None:
                scope = set()
                by_name = {self._repos_by_id[i].name.lower(): i for i in inst.repo_ids}
                for repo_name in repositories or ():
                    if repo_name.lower() not in by_name:
                        raise _inaccessible()
                    scope.add(by_name[repo_name.lower()])
                for repo_id in repository_ids or ():
                    if repo_id not in inst.repo_ids:
                        raise _inaccessible()
                    scope.add(repo_id)
            granted = dict(inst.permissions)
            if permissions:
                for perm, level in permissions.items():
                    have = inst.permissions.get(perm)
                    if have is None or level not in LEVELS or LEVELS[level] > LEVELS[have]:
                        raise TwinError(
                            422,
                            "The permissions requested are not granted to this installation.",
                            documentation_url=_DOCS_MINT,
                        )
                granted = {"metadata": "read", **permissions}
            token = "ghs_" + "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(36))
            expires_at = time.time() + TOKEN_TTL_SECONDS
            record = Token(inst.id, None if scope is None else frozenset(scope), granted, expires_at)
            self._tokens[_token_key(token)] = record
            repos = [self._repos_by_id[i] for i in inst.repo_ids if scope is None or i in scope]
            body: Json = {
                "token": token,
                "expires_at": iso(expires_at),
                "permissions": dict(sorted(granted.items())),
                "repository_selection": "selected",
                "repositories": [self._repo_json(base, r) for r in repos],
            }
            return token, body

    def _token(self, authorization: str | None) -> Token:
        """The live installation token of a REST `token X` / `Bearer X` header, or 401."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        if scheme.lower() not in ("token", "bearer") or not value.strip():
            raise TwinError(401, "Requires authentication", documentation_url=_DOCS)
        with self._lock:
            record = self._tokens.get(_token_key(value.strip()))
            if record is None or not record.live():
                raise TwinError(401, "Bad credentials", documentation_url=_DOCS)
            inst = self._installations.get(record.installation_id)
            if inst is None or inst.deleted:
                raise TwinError(401, "Bad credentials", documentation_url=_DOCS)
            if inst.suspended_at is not None:
                raise TwinError(403, "This installation has been suspended", documentation_url=_DOCS)
            return record

    def _reachable(self, token: Token, repo: Repo) -> bool:
        inst = self._installations.get(token.installation_id)
        if inst is None or inst.deleted or repo.id not in inst.repo_ids:
            return False
        return token.repo_ids is None or repo.id in token.repo_ids

    def git_access(self, authorization: str | None, full_name: str, *, write: bool) -> tuple[int, str]:
        """(status, message) for a smart-HTTP request: 200 only for the Basic x-access-token
        form with a live token of this twin that reaches the repository."""
        denied = (
            401,
            "Invalid username or token. Password authentication is not supported for Git operations.",
        )
        token = _basic_token(authorization)
        with self._lock:
            record = None if token is None else self._tokens.get(_token_key(token))
            repo = self._repos.get(full_name.lower())
            if record is None or repo is None or not record.live() or not self._reachable(record, repo):
                return denied
            level = LEVELS.get(record.permissions.get("contents", ""), 0)
            if self._installations[record.installation_id].suspended_at is not None or level < LEVELS["read"]:
                return denied
            if write and level < LEVELS["write"]:
                return 403, "Write access to repository not granted."
            return 200, ""

    @property
    def git_root(self) -> Path:
        """`GIT_PROJECT_ROOT`: the bare repositories live at `{owner}/{name}.git` below it."""
        return self._git.root

    @property
    def git_home(self) -> Path:
        return self._git.home

    def canonical_name(self, full_name: str) -> str | None:
        """The repository's full name as created (GitHub matches names without case)."""
        with self._lock:
            repo = self._repos.get(full_name.lower())
            return None if repo is None else repo.full_name

    def record_git_request(self, request: GitRequest) -> None:
        """Note a smart-HTTP request as its answer starts (a push's refs may still be moving)."""
        with self._lock:
            self._git_requests.append(request)
            repo = self._repos.get(request.repository.lower())
            if repo is not None and request.service == "git-receive-pack" and request.method == "POST":
                repo.pushed_at = time.time()

    # -- REST operations (the HTTP layer has parsed the request) ------------------------------

    def api_create_token(self, authorization: str | None, installation_id: int, body: Json) -> Json:
        self.verify_app_jwt(authorization)
        repositories = body.get("repositories")
        repository_ids = body.get("repository_ids")
        permissions = body.get("permissions")
        if (
            (repositories is not None and not _list_of(repositories, str))
            or (repository_ids is not None and not _list_of(repository_ids, int))
            or (permissions is not None and not _str_map(permissions))
        ):
            raise _validation_failed(_DOCS_MINT)
        _, response = self._mint(installation_id, repositories, repository_ids, permissions)
        return response

    def api_installation(self, authorization: str | None, installation_id: int) -> Json:
        self.verify_app_jwt(authorization)
        with self._lock:
            inst = self._installations.get(installation_id)
            if inst is None or inst.deleted:
                raise TwinError(404, "Not Found", documentation_url=_DOCS)
            return self._installation_json(inst)

    def api_installations(self, authorization: str | None) -> list[Json]:
        self.verify_app_jwt(authorization)
        with self._lock:
            return [self._installation_json(i) for i in self._installations.values() if not i.deleted]

    def api_repo_installation(self, authorization: str | None, full_name: str) -> Json:
        self.verify_app_jwt(authorization)
        with self._lock:
            repo = self._repos.get(full_name.lower())
            inst = None if repo is None else self._installation_of(repo)
            if inst is None:
                raise TwinError(404, "Not Found", documentation_url=_DOCS)
            return self._installation_json(inst)

    def api_repo(self, authorization: str | None, full_name: str) -> Json:
        with self._lock:
            repo = self._reachable_repo(self._token(authorization), full_name)
            return self._repo_json(self.url, repo, full=True)

    def api_permission(self, authorization: str | None, full_name: str, login: str) -> Json:
        """`GET /repos/{o}/{r}/collaborators/{login}/permission`: a user's permission."""
        with self._lock:
            repo = self._reachable_repo(self._token(authorization), full_name)
            account = self._accounts.get(login.lower())
            if account is None:
                raise TwinError(404, "Not Found", documentation_url=_DOCS)
            owner = account.login.lower() == repo.owner.lower()
            permission = "admin" if owner else PERMISSIONS.get(account.login, "read")
            return {"permission": permission, "role_name": permission, "user": shapes.user(self.url, account)}

    def api_installation_repos(self, authorization: str | None) -> tuple[str, list[Json]]:
        with self._lock:
            token = self._token(authorization)
            inst = self._installations[token.installation_id]
            repos = [
                self._repos_by_id[i] for i in inst.repo_ids if token.repo_ids is None or i in token.repo_ids
            ]
            return "selected", [self._repo_json(self.url, r) for r in repos]

    def api_revoke(self, authorization: str | None) -> None:
        with self._lock:
            self._token(authorization)
            _, _, value = (authorization or "").strip().partition(" ")
            self._tokens.pop(_token_key(value.strip()), None)

    def api_create_pull(self, authorization: str | None, full_name: str, body: Json) -> Json:
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "write")
            title, head, base = body.get("title"), body.get("head"), body.get("base")
            text, draft = body.get("body"), body.get("draft", False)
            if not isinstance(head, str) or not head:
                raise _validation_failed(
                    _DOCS_PULLS, {"resource": "PullRequest", "field": "head", "code": "missing_field"}
                )
            if not isinstance(base, str) or not base:
                raise _validation_failed(
                    _DOCS_PULLS, {"resource": "PullRequest", "field": "base", "code": "missing_field"}
                )
            if not isinstance(title, str) or not title:
                raise _validation_failed(
                    _DOCS_PULLS, {"resource": "Issue", "field": "title", "code": "missing_field"}
                )
            if text is not None and not isinstance(text, str):
                raise _validation_failed(_DOCS_PULLS)
            pull = self._create_pull(
                repo, title=title, body=text, head=head, base=base, draft=bool(draft), author=self._bot
            )
            return self._pull_json(repo, pull, full=True)

    def api_list_pulls(
        self, authorization: str | None, full_name: str, query: Mapping[str, str]
    ) -> list[Json]:
        """Pull requests filtered and sorted as GitHub does; every match (the caller pages)."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "read")
            state = query.get("state", "open")
            if state not in ("open", "closed", "all"):
                raise _validation_failed(
                    _DOCS_PULLS, {"resource": "PullRequest", "field": "state", "code": "invalid"}
                )
            head = query.get("head")
            pulls = list(self._pulls[repo.id].values())
            if state != "all":
                pulls = [p for p in pulls if p.state == state]
            if head and ":" in head:  # GitHub ignores a head filter without its `owner:` part
                owner, _, ref = head.partition(":")
                pulls = [p for p in pulls if owner.lower() == repo.owner.lower() and p.head_ref == ref]
            if query.get("base"):
                pulls = [p for p in pulls if p.base_ref == query["base"]]
            sort = query.get("sort", "created")
            key = (
                (lambda p: (p.updated_at, p.number))
                if sort == "updated"
                else (lambda p: (p.created_at, p.number))
            )
            pulls.sort(key=key, reverse=query.get("direction", "desc") != "asc")
            heads = self._git.branches(repo.owner, repo.name)
            return [self._pull_json(repo, p, full=False, heads=heads) for p in pulls]

    def api_get_pull(self, authorization: str | None, full_name: str, number: int) -> Json:
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "read")
            return self._pull_json(repo, self._pull(repo, number), full=True)

    def api_merge_pull(self, authorization: str | None, full_name: str, number: int, body: Json) -> Json:
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "contents", "write")
            method = body.get("merge_method", "merge")
            if method not in ("merge", "squash", "rebase"):
                raise _validation_failed(
                    _DOCS_PULLS, {"resource": "PullRequest", "field": "merge_method", "code": "invalid"}
                )
            if method == "rebase":
                raise TwinError(
                    405, "Rebase merges are not allowed on this repository.", documentation_url=_DOCS_PULLS
                )
            title, message, sha = body.get("commit_title"), body.get("commit_message"), body.get("sha")
            pull = self._merge_pull(
                repo,
                number,
                self._bot,
                sha=sha if isinstance(sha, str) else None,
                squash=method == "squash",
                title=title if isinstance(title, str) else None,
                message=message if isinstance(message, str) else None,
            )
            return {
                "sha": pull.merge_commit_sha,
                "merged": True,
                "message": "Pull Request successfully merged",
            }

    def api_update_pull(self, authorization: str | None, full_name: str, number: int, body: Json) -> Json:
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "write")
            pull = self._pull(repo, number)
            title, text, state = body.get("title"), body.get("body"), body.get("state")
            if state is not None and state not in ("open", "closed"):
                raise _validation_failed(
                    _DOCS_PULLS, {"resource": "PullRequest", "field": "state", "code": "invalid"}
                )
            if isinstance(title, str) and title:
                pull.title, pull.updated_at = title, time.time()
            if isinstance(text, str) or ("body" in body and text is None):
                pull.body, pull.updated_at = text, time.time()
            if state is not None:
                self._set_state(repo, number, state, self._bot)
            return self._pull_json(repo, pull, full=True)

    def api_create_comment(self, authorization: str | None, full_name: str, number: int, body: Json) -> Json:
        """`POST /repos/{o}/{r}/issues/{n}/comments`: the twin's issues are its pull requests,
        so `n` must be one (commenting on a pull request needs pull_requests: write)."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "write")
            self._pull(repo, number)
            text = body.get("body")
            if not isinstance(text, str) or not text:
                raise _validation_failed(
                    _DOCS_COMMENTS, {"resource": "IssueComment", "field": "body", "code": "missing_field"}
                )
            now = time.time()
            comment = Comment(self._next("comment"), repo.id, number, text, self._bot.login, now, now)
            self._comments.setdefault((repo.id, number), []).append(comment)
            self._pull(repo, number).updated_at = now  # as any comment does on GitHub
            return self._comment_json(repo, comment)

    def api_update_comment(
        self, authorization: str | None, full_name: str, comment_id: int, body: Json
    ) -> Json:
        """`PATCH /repos/{o}/{r}/issues/comments/{id}`: replace a comment's body (404: no such
        comment in the repository, as after a person deleted it)."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "write")
            text = body.get("body")
            if not isinstance(text, str) or not text:
                raise _validation_failed(
                    _DOCS_COMMENTS, {"resource": "IssueComment", "field": "body", "code": "missing_field"}
                )
            for (repo_id, _), comments in self._comments.items():
                for comment in comments:
                    if repo_id == repo.id and comment.id == comment_id:
                        comment.body, comment.updated_at = text, time.time()
                        return self._comment_json(repo, comment)
            raise TwinError(404, "Not Found", documentation_url=_DOCS_COMMENTS)

    def api_list_comments(
        self, authorization: str | None, full_name: str, number: int, query: Mapping[str, str] | None = None
    ) -> list[Json]:
        """`GET /repos/{o}/{r}/issues/{n}/comments`: oldest first, every one (the caller pages);
        `since` (ISO 8601): only those updated at or after it."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "read")
            self._pull(repo, number)
            since = _since(query or {}, _DOCS_COMMENTS, "IssueComment")
            return [
                self._comment_json(repo, c)
                for c in self._comments.get((repo.id, number), [])
                if since is None or int(c.updated_at) >= since
            ]

    def api_list_reviews(self, authorization: str | None, full_name: str, number: int) -> list[Json]:
        """`GET /repos/{o}/{r}/pulls/{n}/reviews`: oldest first (the caller pages), in the
        REST shape (`state` in capitals)."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "read")
            self._pull(repo, number)
            return [shapes.review_rest(review) for review, _ in self._reviews.get((repo.id, number), [])]

    def api_list_review_comments_of(
        self, authorization: str | None, full_name: str, number: int, review_id: int
    ) -> list[Json]:
        """`GET /repos/{o}/{r}/pulls/{n}/reviews/{id}/comments`: that review's inline
        comments, oldest first; 404 for a review that is not one of this pull request's."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "read")
            self._pull(repo, number)
            for review, inline in self._reviews.get((repo.id, number), []):
                if review["id"] == review_id:
                    return list(inline)
            raise TwinError(404, "Not Found", documentation_url=_DOCS_REVIEWS)

    def api_list_review_comments(
        self, authorization: str | None, full_name: str, number: int, query: Mapping[str, str]
    ) -> list[Json]:
        """`GET /repos/{o}/{r}/pulls/{n}/comments`: every review's inline comments, oldest
        first (the caller pages); `since` (ISO 8601): only those updated at or after it."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "pull_requests", "read")
            self._pull(repo, number)
            since = _since(query, _DOCS_REVIEW_COMMENTS, "PullRequestReviewComment")
            inline = [c for _, comments in self._reviews.get((repo.id, number), []) for c in comments]
            inline.sort(key=lambda c: int(c["id"]))
            return [c for c in inline if since is None or _epoch(c["updated_at"]) >= since]

    def api_check_runs(
        self, authorization: str | None, full_name: str, ref: str, query: Mapping[str, str]
    ) -> list[Json]:
        """`GET /repos/{o}/{r}/commits/{ref}/check-runs` (`ref` a SHA or a branch): the check
        runs on that commit, newest first (the caller pages and counts). `filter`: `latest`
        (the default: each check's most recent run) or `all`; `check_name`, `status` and
        `app_id` narrow it. Needs checks: read."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "checks", "read")
            which, status = query.get("filter", "latest"), query.get("status")
            if which not in ("latest", "all"):
                raise _validation_failed(
                    _DOCS_CHECKS, {"resource": "CheckRun", "field": "filter", "code": "invalid"}
                )
            if status is not None and status not in ("queued", "in_progress", "completed"):
                raise _validation_failed(
                    _DOCS_CHECKS, {"resource": "CheckRun", "field": "status", "code": "invalid"}
                )
            sha = self._commit_of(repo, ref)
            if sha is None:
                raise TwinError(422, f"No commit found for SHA: {ref}", documentation_url=_DOCS_CHECKS)
            runs = list(reversed(self._check_runs.get((repo.id, sha), [])))
            if which == "latest":
                seen: set[tuple[int, str]] = set()
                latest: list[Json] = []
                for run in runs:
                    key = (int(run["app"]["id"]), str(run["name"]))
                    if key not in seen:
                        seen.add(key)
                        latest.append(run)
                runs = latest
            if "check_name" in query:
                runs = [r for r in runs if r["name"] == query["check_name"]]
            if status is not None:
                runs = [r for r in runs if r["status"] == status]
            if "app_id" in query:
                runs = [r for r in runs if str(r["app"]["id"]) == query["app_id"]]
            pulls = self._minimal_pulls(repo, sha)
            return [shapes.check_run_rest(r, pulls) for r in runs]

    def api_combined_status(self, authorization: str | None, full_name: str, ref: str) -> Json:
        """`GET /repos/{o}/{r}/commits/{ref}/status` (`ref` a SHA or a branch): GitHub's
        combined status, with the latest status of each context, newest first (the caller
        pages `statuses`). Needs statuses: read."""
        with self._lock:
            token = self._token(authorization)
            repo = self._reachable_repo(token, full_name)
            _require(token, "statuses", "read")
            sha = self._commit_of(repo, ref)
            if sha is None:
                raise TwinError(404, f"No commit found for SHA: {ref}", documentation_url=_DOCS_STATUSES)
            latest: dict[str, CommitStatus] = {}
            for record in self._statuses.get((repo.id, sha), []):
                latest[record.context] = record
            chosen = sorted(latest.values(), key=lambda r: r.id, reverse=True)
            statuses = [
                shapes.commit_status(
                    self.url,
                    repo.full_name,
                    r,
                    creator=shapes.user(self.url, self._accounts[r.creator.lower()]),
                )
                for r in chosen
            ]
            return shapes.combined_status(self.url, self._repo_json(self.url, repo), sha, statuses)

    def admin_faults(self, values: Mapping[str, Any]) -> dict[str, int]:
        try:
            self.faults.set(**values)
        except ValueError as exc:
            raise TwinError(422, str(exc)) from None
        return self.faults.snapshot()

    # -- pull request rules --------------------------------------------------------------------

    def _create_pull(
        self, repo: Repo, *, title: str, body: str | None, head: str, base: str, draft: bool, author: Account
    ) -> Pull:
        head_owner, sep, head_ref = head.partition(":")
        if not sep:
            head_owner, head_ref = repo.owner, head
        invalid_head = {"resource": "PullRequest", "field": "head", "code": "invalid"}
        if head_owner.lower() != repo.owner.lower() or not _BRANCH.match(head_ref):
            raise _validation_failed(_DOCS_PULLS, invalid_head)
        head_sha = self._git.ref_sha(repo.owner, repo.name, head_ref)
        if head_sha is None:
            raise _validation_failed(_DOCS_PULLS, invalid_head)
        base_sha = self._git.ref_sha(repo.owner, repo.name, base) if _BRANCH.match(base) else None
        if base_sha is None:
            raise _validation_failed(
                _DOCS_PULLS, {"resource": "PullRequest", "field": "base", "code": "invalid"}
            )
        self._refuse_second_open(repo, head_ref)
        if self._git.is_ancestor(repo.owner, repo.name, head_sha, base_sha):
            raise _validation_failed(
                _DOCS_PULLS,
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"No commits between {base} and {head_ref}",
                },
            )
        now = time.time()
        pull = Pull(
            repo_id=repo.id,
            number=repo.next_number,
            id=self._next("pull"),
            title=title,
            body=body,
            head_ref=head_ref,
            head_sha=head_sha,
            base_ref=base,
            base_sha=base_sha,
            user=author.login,
            created_at=now,
            updated_at=now,
            draft=draft,
        )
        repo.next_number += 1
        self._pulls[repo.id][pull.number] = pull
        self._emit_pull("opened", repo, pull, author)
        return pull

    def _refuse_second_open(self, repo: Repo, head_ref: str, *, number: int | None = None) -> None:
        for other in self._pulls[repo.id].values():
            if other.state == "open" and other.head_ref == head_ref and other.number != number:
                raise _validation_failed(
                    _DOCS_PULLS,
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": f"A pull request already exists for {repo.owner}:{head_ref}.",
                    },
                )

    def _merge_pull(
        self,
        repo: Repo,
        number: int,
        actor: Account,
        *,
        sha: str | None = None,
        squash: bool = False,
        title: str | None = None,
        message: str | None = None,
    ) -> Pull:
        pull = self._pull(repo, number)
        if pull.state != "open":
            raise TwinError(405, "Pull Request is not mergeable", documentation_url=_DOCS_PULLS)
        self._refresh(repo, pull)
        if sha is not None and sha != pull.head_sha:
            raise TwinError(
                409,
                "Head branch was modified. Review and try the merge again.",
                documentation_url=_DOCS_PULLS,
            )
        if squash:
            subject = title or f"{pull.title} (#{pull.number})"
        else:
            subject = title or f"Merge pull request #{pull.number} from {repo.owner}/{pull.head_ref}"
        body = pull.title if message is None and not squash else (message or "")
        ident = f"{actor.login} <{actor.id}+{actor.login}@users.noreply.localhost>"
        try:
            new_sha, old_base = self._git.merge(
                repo.owner,
                repo.name,
                base_ref=pull.base_ref,
                head_sha=pull.head_sha,
                message=f"{subject}\n\n{body}".rstrip() + "\n",
                author=ident,
                committer="GitHub <noreply@github.com>",
                squash=squash,
            )
        except MergeConflict:
            raise TwinError(405, "Pull Request is not mergeable", documentation_url=_DOCS_PULLS) from None
        except RefMoved:
            raise TwinError(
                409,
                "Base branch was modified. Review and try the merge again.",
                documentation_url=_DOCS_PULLS,
            ) from None
        now = time.time()
        pull.base_sha = old_base
        pull.state, pull.closed_at, pull.merged_at, pull.updated_at = "closed", now, now, now
        pull.merged_by, pull.merge_commit_sha = actor.login, new_sha
        repo.pushed_at = now
        self._emit_pull("closed", repo, pull, actor)
        return pull

    def _set_state(self, repo: Repo, number: int, state: str, actor: Account) -> Pull:
        pull = self._pull(repo, number)
        if pull.state == state:
            return pull  # GitHub answers 200 and sends nothing
        if state == "open":
            if pull.merged:
                raise _validation_failed(
                    _DOCS_PULLS,
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": "state cannot be changed. The pull request cannot be reopened because it has been merged.",
                    },
                )
            if self._git.ref_sha(repo.owner, repo.name, pull.head_ref) is None:
                raise _validation_failed(
                    _DOCS_PULLS,
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": "state cannot be changed. The head branch was deleted.",
                    },
                )
            self._refuse_second_open(repo, pull.head_ref, number=number)
            pull.state, pull.closed_at, pull.updated_at = "open", None, time.time()
            self._refresh(repo, pull)
            self._emit_pull("reopened", repo, pull, actor)
            return pull
        self._refresh(repo, pull)
        now = time.time()
        pull.state, pull.closed_at, pull.updated_at = "closed", now, now
        self._emit_pull("closed", repo, pull, actor)
        return pull

    def _refresh(self, repo: Repo, pull: Pull, heads: Mapping[str, str] | None = None) -> None:
        """An open pull request follows its branches, as GitHub's does (`heads`: known
        branch commits, to save a git process per pull request in a listing)."""
        if pull.state != "open":
            return
        if heads is None:
            heads = {
                ref: sha
                for ref in {pull.head_ref, pull.base_ref}
                if (sha := self._git.ref_sha(repo.owner, repo.name, ref)) is not None
            }
        head, base = heads.get(pull.head_ref), heads.get(pull.base_ref)
        if head is not None and head != pull.head_sha:
            pull.head_sha, pull.updated_at = head, time.time()
        if base is not None:
            pull.base_sha = base

    # -- webhooks --------------------------------------------------------------------------

    def _emit_pull(self, action: str, repo: Repo, pull: Pull, sender: Account, **extra: Any) -> None:
        self._emit(
            repo,
            "pull_request",
            sender,
            action=action,
            number=pull.number,
            **extra,
            pull_request=self._pull_json(repo, pull, full=True),
        )

    def _emit(
        self, repo: Repo, event: str, sender: Account | Json, *, action: str | None, **fields: Any
    ) -> None:
        """A repository event, sent only when a live, unsuspended installation holds it
        (`action` None: an event without one, as `status`)."""
        inst = self._installation_of(repo)
        if inst is None or inst.suspended_at is not None:
            return
        if event not in self.app_events:  # GitHub sends only the events the App subscribes to
            return
        base = self.url
        payload: Json = {
            **({} if action is None else {"action": action}),
            **fields,
            "repository": self._repo_json(base, repo),
            "sender": sender if isinstance(sender, dict) else shapes.user(base, sender),
            "installation": {"id": inst.id, "node_id": _installation_node_id(inst.id)},
        }
        owner = self._accounts[repo.owner.lower()]
        if owner.type == "Organization":
            payload["organization"] = _organization(base, owner)
        self._deliverer.emit(event, payload)

    def _person(self, repo: Repo, login: str) -> tuple[Json, str]:
        """A person's (or a bot's) user JSON and their `author_association` in `repo`."""
        account = self._account(login, "Bot" if login.endswith("[bot]") else "User")
        if account.login.lower() == repo.owner.lower():
            association = "OWNER"
        else:
            association = ASSOCIATIONS.get(account.login, "NONE") if account.type != "Bot" else "NONE"
        return shapes.user(self.url, account), association

    def _issue_json(self, repo: Repo, pull: Pull) -> Json:
        """The pull request as an issue (its conversation): the shape issue events carry."""
        api = f"{self.url}/repos/{repo.full_name}/issues/{pull.number}"
        return {
            "url": api,
            "repository_url": f"{self.url}/repos/{repo.full_name}",
            "labels_url": api + "/labels{/name}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.url}/{repo.full_name}/pull/{pull.number}",
            "id": pull.id,
            "node_id": node_id("I", pull.id),
            "number": pull.number,
            "title": pull.title,
            "user": shapes.user(self.url, self._accounts[pull.user.lower()]),
            "labels": [],
            "state": pull.state,
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": len(self._comments.get((repo.id, pull.number), [])),
            "created_at": iso(pull.created_at),
            "updated_at": iso(pull.updated_at),
            "closed_at": None if pull.closed_at is None else iso(pull.closed_at),
            "author_association": "NONE",
            "active_lock_reason": None,
            "body": pull.body,
            "reactions": shapes.reactions(api),
            "timeline_url": f"{api}/timeline",
            "performed_via_github_app": None,
            "state_reason": None,
            "pull_request": {
                "url": f"{self.url}/repos/{repo.full_name}/pulls/{pull.number}",
                "html_url": f"{self.url}/{repo.full_name}/pull/{pull.number}",
                "diff_url": f"{self.url}/{repo.full_name}/pull/{pull.number}.diff",
                "patch_url": f"{self.url}/{repo.full_name}/pull/{pull.number}.patch",
                "merged_at": None if pull.merged_at is None else iso(pull.merged_at),
            },
        }

    def _checks_app(self) -> Json:
        """The App that reports check runs (not Steward: CI is another App)."""
        owner = shapes.user(self.url, self._human)
        return {
            "id": 1001,
            "slug": CHECKS_APP_SLUG,
            "node_id": node_id("A", 1001),
            "owner": owner,
            "name": CHECKS_APP_SLUG,
            "description": "the twin's CI",
            "external_url": f"{self.url}/apps/{CHECKS_APP_SLUG}",
            "html_url": f"{self.url}/apps/{CHECKS_APP_SLUG}",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
            "permissions": {"checks": "write"},
            "events": [],
        }

    def _minimal_pulls(self, repo: Repo, sha: str) -> list[Json]:
        """The open pull requests whose head is `sha`, as check runs name them."""
        minimal = {"id": repo.id, "url": f"{self.url}/repos/{repo.full_name}", "name": repo.name}
        return [
            {
                "id": p.id,
                "number": p.number,
                "url": f"{self.url}/repos/{repo.full_name}/pulls/{p.number}",
                "head": {"ref": p.head_ref, "sha": p.head_sha, "repo": minimal},
                "base": {"ref": p.base_ref, "sha": p.base_sha, "repo": minimal},
            }
            for p in self._pulls[repo.id].values()
            if p.state == "open" and p.head_sha == sha
        ]

    def _commit_of(self, repo: Repo, ref: str) -> str | None:
        """The commit a `commits/{ref}` route names: a branch (`heads/` optional) or a SHA."""
        if not _BRANCH.match(ref.removeprefix("heads/")):
            return None
        return self._git.resolve(repo.owner, repo.name, ref)

    def _commit_json(self, repo: Repo, sha: str) -> Json:
        info = self._git.commit_info(repo.owner, repo.name, sha)
        return shapes.commit(
            self.url,
            repo.full_name,
            info,
            author=self._user_of_email(info.author[1]),
            committer=self._user_of_email(info.committer[1]),
        )

    def _user_of_email(self, email: str) -> Json | None:
        """The GitHub user a commit email belongs to (the twin's `{id}+{login}@users.noreply`
        form), or None, as GitHub shows a commit by an unknown email."""
        match = _NOREPLY.match(email)
        account = None if match is None else self._accounts.get(match.group(2).lower())
        if account is None or match is None or str(account.id) != match.group(1):
            return None
        return shapes.user(self.url, account)

    def _emit_installation(self, action: str, inst: Installation) -> None:
        base = self.url
        payload: Json = {
            "action": action,
            "installation": self._installation_json(inst),
            "repositories": [shapes.repository_brief(self._repos_by_id[i]) for i in inst.repo_ids],
            "requester": None,
            "sender": shapes.user(base, self._human),
        }
        self._deliverer.emit("installation", payload)

    def _change_repos(self, installation_id: int, repos: Sequence[str], *, add: bool) -> None:
        with self._lock:
            inst = self._installation(installation_id)
            chosen = self._resolve(inst.account, repos)
            if add:
                changed = [r for r in chosen if r.id not in inst.repo_ids]
                inst.repo_ids.extend(r.id for r in changed)
            else:
                changed = [r for r in chosen if r.id in inst.repo_ids]
                inst.repo_ids[:] = [i for i in inst.repo_ids if i not in {r.id for r in changed}]
            if not changed:
                return
            inst.updated_at = time.time()
            briefs = [shapes.repository_brief(r) for r in changed]
            payload: Json = {
                "action": "added" if add else "removed",
                "installation": self._installation_json(inst),
                "repository_selection": "selected",
                "repositories_added": briefs if add else [],
                "repositories_removed": [] if add else briefs,
                "requester": None,
                "sender": shapes.user(self.url, self._human),
            }
            self._deliverer.emit("installation_repositories", payload)

    # -- records and JSON ----------------------------------------------------------------------

    def _next(self, kind: str) -> int:
        self._ids[kind] += 1
        return self._ids[kind]

    def _account(self, login: str, kind: str) -> Account:
        account = self._accounts.get(login.lower())
        if account is None:
            if kind != "Bot" and (not _OWNER.match(login) or login.lower() in _RESERVED_OWNERS):
                raise ValueError(f"invalid account name {login!r}")
            account = Account(login, self._next("account"), kind)
            self._accounts[login.lower()] = account
        return account

    def _resolve(self, account: str, names: Iterable[str]) -> list[Repo]:
        """Repositories of `account` by name or full name (ValueError for any other)."""
        if isinstance(names, str):
            raise TypeError("repos must be a sequence of names, not one string")
        found: list[Repo] = []
        for name in names:
            full = name if "/" in name else f"{account}/{name}"
            repo = self._repos.get(full.lower())
            if repo is None:
                raise ValueError(f"no repository {full}")
            if repo.owner.lower() != account.lower():
                raise ValueError(f"{full} does not belong to {account}")
            if repo not in found:
                found.append(repo)
        return found

    def _repo(self, full_name: str) -> Repo:
        repo = self._repos.get(full_name.lower())
        if repo is None:
            raise TwinError(404, "Not Found", documentation_url=_DOCS)
        return repo

    def _reachable_repo(self, token: Token, full_name: str) -> Repo:
        repo = self._repos.get(full_name.lower())
        if repo is None or not self._reachable(token, repo):
            raise TwinError(404, "Not Found", documentation_url=_DOCS)
        return repo

    def _pull(self, repo: Repo, number: int) -> Pull:
        pull = self._pulls[repo.id].get(number)
        if pull is None:
            raise TwinError(404, "Not Found", documentation_url=_DOCS_PULLS)
        return pull

    def _installation(self, installation_id: int) -> Installation:
        inst = self._installations.get(installation_id)
        if inst is None or inst.deleted:
            raise KeyError(f"no installation {installation_id}")
        return inst

    def _installation_of(self, repo: Repo) -> Installation | None:
        for inst in self._installations.values():
            if not inst.deleted and repo.id in inst.repo_ids:
                return inst
        return None

    def _installation_json(self, inst: Installation) -> Json:
        return shapes.installation(
            self.url,
            inst,
            self._accounts[inst.account.lower()],
            app_id=self.app_id,
            app_slug=self.app_slug,
            suspended_by=self._human if inst.suspended_at is not None else None,
        )

    def _repo_json(self, base: str, repo: Repo, *, full: bool = False) -> Json:
        open_pulls = sum(1 for p in self._pulls[repo.id].values() if p.state == "open")
        return shapes.repository(
            base, repo, self._accounts[repo.owner.lower()], open_issues=open_pulls, full=full
        )

    def _pull_json(
        self, repo: Repo, pull: Pull, *, full: bool, heads: Mapping[str, str] | None = None
    ) -> Json:
        base = self.url
        self._refresh(repo, pull, heads)
        owner = shapes.user(base, self._accounts[repo.owner.lower()])
        author = shapes.user(base, self._accounts[pull.user.lower()])
        merged_by = (
            None if pull.merged_by is None else shapes.user(base, self._accounts[pull.merged_by.lower()])
        )
        stats = self._git.stats(repo.owner, repo.name, pull.base_sha, pull.head_sha) if full else None
        if stats is not None:
            stats = replace(
                stats,
                comments=len(self._comments.get((repo.id, pull.number), [])),
                review_comments=sum(len(c) for _, c in self._reviews.get((repo.id, pull.number), [])),
            )
        return shapes.pull_request(
            base,
            self._repo_json(base, repo),
            pull,
            author=author,
            owner=owner,
            merged_by=merged_by,
            stats=stats,
        )

    def _comment_json(self, repo: Repo, comment: Comment) -> Json:
        author, association = self._person(repo, comment.user)
        return shapes.issue_comment(self.url, repo.full_name, comment, author=author, association=association)

    def next_server_error(self) -> int:
        """502, 503, 502, ...: the status of the next injected server error."""
        with self._lock:
            self._rest_errors_served += 1
            return 502 if self._rest_errors_served % 2 else 503


def _split_full_name(full_name: str) -> tuple[str, str]:
    owner, sep, name = full_name.partition("/")
    if (
        not sep
        or not _OWNER.match(owner)
        or owner.lower() in _RESERVED_OWNERS
        or not _REPO.match(name)
        or name in (".", "..")
        or name.lower().endswith(".git")
    ):
        raise ValueError(f"invalid repository name {full_name!r}")
    return owner, name


def _query_int(raw: str | None, default: int) -> int:
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def _basic_token(authorization: str | None) -> str | None:
    """The token of `Basic base64("x-access-token:<token>")`, the only form git may use."""
    scheme, _, value = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, token = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    if not sep or user != "x-access-token" or not token:
        return None
    return token


def _token_key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _require(token: Token, permission: str, level: str) -> None:
    if LEVELS.get(token.permissions.get(permission, ""), 0) < LEVELS[level]:
        raise TwinError(403, _NOT_ACCESSIBLE, documentation_url=_DOCS)


def _inaccessible() -> TwinError:
    return TwinError(
        422,
        "There is at least one repository that does not exist or is not accessible to the parent installation.",
        documentation_url=_DOCS_MINT,
    )


def _validation_failed(documentation_url: str, *errors: dict[str, str]) -> TwinError:
    return TwinError(422, "Validation Failed", errors=list(errors), documentation_url=documentation_url)


def _epoch(stamp: str) -> int:
    """Seconds since the epoch of an ISO 8601 time (one without a zone is UTC)."""
    moment = datetime.fromisoformat(stamp)
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


def _since(query: Mapping[str, str], documentation_url: str, resource: str) -> int | None:
    """GitHub's `since` parameter in seconds (times are compared in whole seconds, as shown)."""
    raw = query.get("since")
    if raw is None:
        return None
    try:
        return _epoch(raw)
    except ValueError:
        raise _validation_failed(
            documentation_url, {"resource": resource, "field": "since", "code": "invalid"}
        ) from None


def _list_of(value: Any, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) and not isinstance(v, bool) for v in value)


def _str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def _installation_node_id(installation_id: int) -> str:
    """GitHub's legacy node id of an installation, as its webhooks carry it."""
    return base64.b64encode(f"023:IntegrationInstallation{installation_id}".encode()).decode()


def _organization(base: str, account: Account) -> Json:
    api = f"{base}/orgs/{account.login}"
    return {
        "login": account.login,
        "id": account.id,
        "node_id": shapes.node_id("O", account.id),
        "url": api,
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events",
        "hooks_url": f"{api}/hooks",
        "issues_url": f"{api}/issues",
        "members_url": api + "/members{/member}",
        "public_members_url": api + "/public_members{/member}",
        "avatar_url": f"{base}/avatars/u/{account.id}?v=4",
        "description": None,
    }
