"""GitHub's webhook deliveries for tests and benchmarks: payload builders with GitHub's
shapes, signing, and the real deliveries GitHub produced (`tests/fixtures/github-payloads`,
origins and licences in its SOURCES.md).

The builders make full payloads, as GitHub sends them, although the receiver reads only a
few fields: a test then says nothing about which fields matter.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

SECRET = "It's a Secret to Everybody"
REPO = "octo/demo"
REPO_ID = 1296269
INSTALLATION_ID = 7
APP_ID = 4242
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

# ---- GitHub-shaped payloads


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def github_user(login: str, user_id: int = 583231, kind: str = "User") -> dict[str, Any]:
    api = f"https://api.github.com/users/{login}"
    return {
        "login": login,
        "id": user_id,
        "node_id": base64.b64encode(f"04:User{user_id}".encode()).decode(),
        "avatar_url": f"https://avatars.githubusercontent.com/u/{user_id}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{api}/followers",
        "following_url": f"{api}/following{{/other_user}}",
        "gists_url": f"{api}/gists{{/gist_id}}",
        "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": f"{api}/events{{/privacy}}",
        "received_events_url": f"{api}/received_events",
        "type": kind,
        "user_view_type": "public",
        "site_admin": False,
    }


def github_repository(full_name: str = REPO, repo_id: int = REPO_ID) -> dict[str, Any]:
    owner, name = full_name.split("/")
    api = f"https://api.github.com/repos/{full_name}"
    templated = {
        "archive_url": f"{api}/{{archive_format}}{{/ref}}",
        "assignees_url": f"{api}/assignees{{/user}}",
        "blobs_url": f"{api}/git/blobs{{/sha}}",
        "branches_url": f"{api}/branches{{/branch}}",
        "collaborators_url": f"{api}/collaborators{{/collaborator}}",
        "comments_url": f"{api}/comments{{/number}}",
        "commits_url": f"{api}/commits{{/sha}}",
        "compare_url": f"{api}/compare/{{base}}...{{head}}",
        "contents_url": f"{api}/contents/{{+path}}",
        "contributors_url": f"{api}/contributors",
        "deployments_url": f"{api}/deployments",
        "downloads_url": f"{api}/downloads",
        "events_url": f"{api}/events",
        "forks_url": f"{api}/forks",
        "git_commits_url": f"{api}/git/commits{{/sha}}",
        "git_refs_url": f"{api}/git/refs{{/sha}}",
        "git_tags_url": f"{api}/git/tags{{/sha}}",
        "hooks_url": f"{api}/hooks",
        "issue_comment_url": f"{api}/issues/comments{{/number}}",
        "issue_events_url": f"{api}/issues/events{{/number}}",
        "issues_url": f"{api}/issues{{/number}}",
        "keys_url": f"{api}/keys{{/key_id}}",
        "labels_url": f"{api}/labels{{/name}}",
        "languages_url": f"{api}/languages",
        "merges_url": f"{api}/merges",
        "milestones_url": f"{api}/milestones{{/number}}",
        "notifications_url": f"{api}/notifications{{?since,all,participating}}",
        "pulls_url": f"{api}/pulls{{/number}}",
        "releases_url": f"{api}/releases{{/id}}",
        "stargazers_url": f"{api}/stargazers",
        "statuses_url": f"{api}/statuses/{{sha}}",
        "subscribers_url": f"{api}/subscribers",
        "subscription_url": f"{api}/subscription",
        "tags_url": f"{api}/tags",
        "teams_url": f"{api}/teams",
        "trees_url": f"{api}/git/trees{{/sha}}",
    }
    return {
        "id": repo_id,
        "node_id": base64.b64encode(f"010:Repository{repo_id}".encode()).decode(),
        "name": name,
        "full_name": full_name,
        "private": True,
        "owner": github_user(owner, 583231 + len(owner), "Organization"),
        "html_url": f"https://github.com/{full_name}",
        "description": "A repository Steward works on",
        "fork": False,
        "url": api,
        **templated,
        "created_at": "2024-01-26T19:01:12Z",
        "updated_at": "2025-02-28T10:00:00Z",
        "pushed_at": "2025-03-01T11:59:00Z",
        "git_url": f"git://github.com/{full_name}.git",
        "ssh_url": f"git@github.com:{full_name}.git",
        "clone_url": f"https://github.com/{full_name}.git",
        "svn_url": f"https://github.com/{full_name}",
        "homepage": None,
        "size": 108,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": "Python",
        "has_issues": True,
        "has_projects": True,
        "has_downloads": True,
        "has_wiki": False,
        "has_pages": False,
        "has_discussions": False,
        "forks_count": 0,
        "mirror_url": None,
        "archived": False,
        "disabled": False,
        "open_issues_count": 1,
        "license": None,
        "allow_forking": False,
        "is_template": False,
        "web_commit_signoff_required": False,
        "topics": [],
        "visibility": "private",
        "forks": 0,
        "open_issues": 1,
        "watchers": 0,
        "default_branch": "main",
    }


def pull_request_payload(
    action: str,
    *,
    branch: str,
    number: int = 17,
    merged: bool = False,
    state: str | None = None,
    repo: str = REPO,
    repo_id: int = REPO_ID,
    installation_id: int | None = INSTALLATION_ID,
    head_repo: str | None = None,
    head_repo_id: int | None = None,
) -> dict[str, Any]:
    """A pull_request event as GitHub sends it for a Steward branch of `repo`."""
    state = state or ("closed" if action == "closed" else "open")
    repository = github_repository(repo, repo_id)
    head_repository = github_repository(head_repo or repo, head_repo_id or repo_id)
    bot = github_user("steward-app[bot]", 9919, "Bot")
    reviewer = github_user("octocat", 1)
    html = f"https://github.com/{repo}/pull/{number}"
    api = f"https://api.github.com/repos/{repo}"
    closed_at = _stamp(T0 + timedelta(hours=1)) if state == "closed" else None
    pull_request = {
        "url": f"{api}/pulls/{number}",
        "id": 1_000_000 + number,
        "node_id": f"PR_kwDOABCD{number:05d}",
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "issue_url": f"{api}/issues/{number}",
        "number": number,
        "state": state,
        "locked": False,
        "title": "Steward: change module 1",
        "user": bot,
        "body": "Opened by Steward for an approved plan item.",
        "created_at": _stamp(T0),
        "updated_at": _stamp(T0 + timedelta(hours=1)),
        "closed_at": closed_at,
        "merged_at": closed_at if merged else None,
        "merge_commit_sha": "e5bd3914e2e596debea16f433f57875b5b90bcd6" if merged else None,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "labels": [],
        "milestone": None,
        "draft": False,
        "commits_url": f"{api}/pulls/{number}/commits",
        "review_comments_url": f"{api}/pulls/{number}/comments",
        "review_comment_url": f"{api}/pulls/comments{{/number}}",
        "comments_url": f"{api}/issues/{number}/comments",
        "statuses_url": f"{api}/statuses/6dcb09b5b57875f334f61aebed695e2e4193db5e",
        "head": {
            "label": f"{(head_repo or repo).split('/')[0]}:{branch}",
            "ref": branch,
            "sha": "6dcb09b5b57875f334f61aebed695e2e4193db5e",
            "user": head_repository["owner"],
            "repo": head_repository,
        },
        "base": {
            "label": f"{repo.split('/', maxsplit=1)[0]}:main",
            "ref": "main",
            "sha": "9049f1265b7d61be4a8904a9a27120d2064dab3b",
            "user": repository["owner"],
            "repo": repository,
        },
        "_links": {
            name: {"href": href}
            for name, href in {
                "self": f"{api}/pulls/{number}",
                "html": html,
                "issue": f"{api}/issues/{number}",
                "comments": f"{api}/issues/{number}/comments",
                "review_comments": f"{api}/pulls/{number}/comments",
                "review_comment": f"{api}/pulls/comments{{/number}}",
                "commits": f"{api}/pulls/{number}/commits",
                "statuses": f"{api}/statuses/6dcb09b5b57875f334f61aebed695e2e4193db5e",
            }.items()
        },
        "author_association": "NONE",
        "auto_merge": None,
        "active_lock_reason": None,
        "merged": merged,
        "mergeable": None if state == "closed" else True,
        "rebaseable": None,
        "mergeable_state": "unknown" if state == "closed" else "clean",
        "merged_by": reviewer if merged else None,
        "comments": 0,
        "review_comments": 0,
        "maintainer_can_modify": False,
        "commits": 1,
        "additions": 12,
        "deletions": 3,
        "changed_files": 2,
    }
    payload: dict[str, Any] = {
        "action": action,
        "number": number,
        "pull_request": pull_request,
        "repository": repository,
        "sender": reviewer if action == "closed" else bot,
    }
    if action == "edited":
        payload["changes"] = {"title": {"from": "Steward: change module one"}}
    if action == "synchronize":
        payload["before"] = "9049f1265b7d61be4a8904a9a27120d2064dab3b"
        payload["after"] = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
    if action == "labeled":
        payload["label"] = {
            "id": 208045946,
            "node_id": "MDU6TGFiZWwyMDgwNDU5NDY=",
            "url": f"{api}/labels/bug",
            "name": "bug",
            "color": "f29513",
            "default": True,
            "description": "Something isn't working",
        }
    if installation_id is not None:
        payload["installation"] = {"id": installation_id, "node_id": f"MDIzOkludGVncmF0aW9u{installation_id}"}
    return payload


def github_installation(
    installation_id: int = INSTALLATION_ID,
    *,
    account: str = "octo",
    updated_at: datetime = T0,
    suspended: bool = False,
) -> dict[str, Any]:
    api = "https://api.github.com"
    return {
        "id": installation_id,
        "client_id": "Iv1.8a61f9b3a7aba766",
        "account": github_user(account, 583300, "Organization"),
        "repository_selection": "selected",
        "access_tokens_url": f"{api}/app/installations/{installation_id}/access_tokens",
        "repositories_url": f"{api}/installation/repositories",
        "html_url": f"https://github.com/organizations/{account}/settings/installations/{installation_id}",
        "app_id": APP_ID,
        "app_slug": "steward-app",
        "target_id": 583300,
        "target_type": "Organization",
        "permissions": {"contents": "write", "metadata": "read", "pull_requests": "write"},
        "events": ["pull_request"],
        "created_at": _stamp(T0 - timedelta(days=30)),
        "updated_at": _stamp(updated_at),
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": github_user("octocat", 1) if suspended else None,
        "suspended_at": _stamp(updated_at) if suspended else None,
    }


def _listed(full_name: str) -> dict[str, Any]:
    digest = int(hashlib.sha256(full_name.encode()).hexdigest()[:6], 16)
    return {
        "id": digest,
        "node_id": f"R_kgDO{digest:08d}",
        "name": full_name.split("/")[1],
        "full_name": full_name,
        "private": True,
    }


def installation_payload(
    action: str,
    *,
    installation_id: int = INSTALLATION_ID,
    account: str = "octo",
    at: datetime = T0,
    repositories: tuple[str, ...] | None = None,
    suspended: bool = False,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action": action,
        "installation": github_installation(
            installation_id, account=account, updated_at=at, suspended=suspended
        ),
        "sender": github_user("octocat", 1),
    }
    if repositories is not None:
        payload["repositories"] = [_listed(r) for r in repositories]
    if action == "created":
        payload["requester"] = None
    return payload


def installation_repositories_payload(
    action: str,
    *,
    installation_id: int = INSTALLATION_ID,
    account: str = "octo",
    at: datetime = T0,
    added: tuple[str, ...] = (),
    removed: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "action": action,
        "installation": github_installation(installation_id, account=account, updated_at=at),
        "repository_selection": "selected",
        "repositories_added": [_listed(r) for r in added],
        "repositories_removed": [_listed(r) for r in removed],
        "requester": None,
        "sender": github_user("octocat", 1),
    }


@dataclass(frozen=True)
class Delivery:
    """One signed HTTP delivery: what GitHub would POST."""

    event: str
    body: bytes
    headers: dict[str, str]


def signature(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def delivery(event: str, payload: Any, *, delivery_id: str | None = None, secret: str = SECRET) -> Delivery:
    """`payload` as GitHub serializes it (compact JSON), signed, with hookshot's headers."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    return _signed(event, body, delivery_id=delivery_id, secret=secret)


def _signed(event: str, body: bytes, *, delivery_id: str | None, secret: str) -> Delivery:
    return Delivery(
        event,
        body,
        {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/a1b2c3d",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
            "X-GitHub-Hook-ID": "292430182",
            "X-GitHub-Hook-Installation-Target-ID": str(APP_ID),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            "X-Hub-Signature-256": signature(body, secret),
        },
    )


# ---- real deliveries

REPO_ROOT = Path(__file__).resolve().parents[2]


def payloads_dir() -> Path:
    """`tests/fixtures/github-payloads`: real deliveries kept in the repository (origins and
    licences in its SOURCES.md). Missing is an error, never a skip: these deliveries are what
    proves real payloads pass."""
    found = REPO_ROOT / "tests" / "fixtures" / "github-payloads"
    if not found.is_dir():
        raise FileNotFoundError(f"the real GitHub payloads are missing (looked in {found})")
    return found


def real_payload_files() -> list[Path]:
    """Every real delivery, `<source>.<event>.<action...>.json`."""
    files = sorted(payloads_dir().glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no payloads in {payloads_dir()}")
    return files


def event_of(file: str | Path) -> str:
    """The X-GitHub-Event a payload file was delivered under (the second part of its name)."""
    return Path(file).name.split(".")[1]


def real_payload(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((payloads_dir() / name).read_bytes())
    return payload


def signed_file(path: Path, *, secret: str = SECRET) -> Delivery:
    """The file's bytes exactly as they are, signed: GitHub's delivery, replayed."""
    body = path.read_bytes()
    return _signed(event_of(path), body, delivery_id=None, secret=secret)


def aimed_at(
    payload: dict[str, Any],
    *,
    branch: str | None = None,
    repo: str = REPO,
    repo_id: int = REPO_ID,
    installation_id: int = INSTALLATION_ID,
) -> dict[str, Any]:
    """A real payload pointed at the test's world, nothing else changed: its installation,
    its repository (and, for a pull request, head and base in it, head on `branch`)."""
    out = copy.deepcopy(payload)
    out.setdefault("installation", {})["id"] = installation_id
    if "repository" in out:
        out["repository"].update(id=repo_id, full_name=repo)
    pull_request = out.get("pull_request")
    if pull_request is not None:
        if branch is not None:
            pull_request["head"]["ref"] = branch
        pull_request["head"]["repo"].update(id=repo_id, full_name=repo)
        pull_request["base"]["repo"].update(id=repo_id, full_name=repo)
    return out
