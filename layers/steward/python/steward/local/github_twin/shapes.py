"""JSON bodies shaped as GitHub's REST API v3 sends them, built from the twin's records.

Every field githubkit's models require is present (a test validates each shape against
githubkit), and the URL fields point at the twin: REST at its root as for
`api.github.com`, pages and git at `{url}/{owner}/{repo}` as for `github.com`.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from steward.local.github_twin.state import (
    Account,
    Comment,
    CommitStatus,
    Installation,
    Pull,
    Repo,
    iso,
    node_id,
)
from steward.local.github_twin.webhooks import Delivery

__all__ = [
    "CommitInfo",
    "PullStats",
    "app",
    "check_run",
    "check_run_rest",
    "combined_status",
    "commit",
    "commit_status",
    "error",
    "hook_delivery",
    "installation",
    "issue_comment",
    "node_id",
    "pull_request",
    "reactions",
    "repository",
    "repository_brief",
    "review",
    "review_comment",
    "review_rest",
    "status_event",
    "user",
]

Json = dict[str, Any]

_NODE_PREFIX = {"User": "U", "Organization": "O", "Bot": "BOT"}


@dataclass(frozen=True)
class PullStats:
    """What GitHub computes from the branches: commits ahead and the diff's size."""

    commits: int = 0
    additions: int = 0
    deletions: int = 0
    changed_files: int = 0
    mergeable: bool | None = True
    comments: int = 0  # issue comments (not a branch figure, but counted with them)
    review_comments: int = 0  # inline comments of reviews (likewise)


@dataclass(frozen=True)
class CommitInfo:
    """A commit as git stores it; the people are (name, email, epoch seconds)."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    author: tuple[str, str, float]
    committer: tuple[str, str, float]
    message: str


def user(base: str, account: Account) -> Json:
    login = account.login
    api = f"{base}/users/{login}"
    return {
        "login": login,
        "id": account.id,
        "node_id": node_id(_NODE_PREFIX.get(account.type, "U"), account.id),
        "avatar_url": f"{base}/avatars/u/{account.id}?v=4",
        "gravatar_id": "",
        "url": api,
        "html_url": f"{base}/apps/{login.removesuffix('[bot]')}"
        if account.type == "Bot"
        else f"{base}/{login}",
        "followers_url": f"{api}/followers",
        "following_url": api + "/following{/other_user}",
        "gists_url": api + "/gists{/gist_id}",
        "starred_url": api + "/starred{/owner}{/repo}",
        "subscriptions_url": f"{api}/subscriptions",
        "organizations_url": f"{api}/orgs",
        "repos_url": f"{api}/repos",
        "events_url": api + "/events{/privacy}",
        "received_events_url": f"{api}/received_events",
        "type": account.type,
        "user_view_type": "public",
        "site_admin": False,
    }


def repository(base: str, repo: Repo, owner: Account, *, open_issues: int = 0, full: bool = False) -> Json:
    """A repository: the `Repository` shape, or with `full` the `FullRepository` one."""
    api = f"{base}/repos/{repo.full_name}"
    host = urlsplit(base).netloc
    body: Json = {
        "id": repo.id,
        "node_id": node_id("R", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
        "owner": user(base, owner),
        "html_url": f"{base}/{repo.full_name}",
        "description": None,
        "fork": False,
        "url": api,
        "forks_url": f"{api}/forks",
        "keys_url": api + "/keys{/key_id}",
        "collaborators_url": api + "/collaborators{/collaborator}",
        "teams_url": f"{api}/teams",
        "hooks_url": f"{api}/hooks",
        "issue_events_url": api + "/issues/events{/number}",
        "events_url": f"{api}/events",
        "assignees_url": api + "/assignees{/user}",
        "branches_url": api + "/branches{/branch}",
        "tags_url": f"{api}/tags",
        "blobs_url": api + "/git/blobs{/sha}",
        "git_tags_url": api + "/git/tags{/sha}",
        "git_refs_url": api + "/git/refs{/sha}",
        "trees_url": api + "/git/trees{/sha}",
        "statuses_url": api + "/statuses/{sha}",
        "languages_url": f"{api}/languages",
        "stargazers_url": f"{api}/stargazers",
        "contributors_url": f"{api}/contributors",
        "subscribers_url": f"{api}/subscribers",
        "subscription_url": f"{api}/subscription",
        "commits_url": api + "/commits{/sha}",
        "git_commits_url": api + "/git/commits{/sha}",
        "comments_url": api + "/comments{/number}",
        "issue_comment_url": api + "/issues/comments{/number}",
        "contents_url": api + "/contents/{+path}",
        "compare_url": api + "/compare/{base}...{head}",
        "merges_url": f"{api}/merges",
        "archive_url": api + "/{archive_format}{/ref}",
        "downloads_url": f"{api}/downloads",
        "issues_url": api + "/issues{/number}",
        "pulls_url": api + "/pulls{/number}",
        "milestones_url": api + "/milestones{/number}",
        "notifications_url": api + "/notifications{?since,all,participating}",
        "labels_url": api + "/labels{/name}",
        "releases_url": api + "/releases{/id}",
        "deployments_url": f"{api}/deployments",
        "created_at": iso(repo.created_at),
        "updated_at": iso(repo.pushed_at),
        "pushed_at": iso(repo.pushed_at),
        "git_url": f"git://{host}/{repo.full_name}.git",
        "ssh_url": f"git@{host}:{repo.full_name}.git",
        "clone_url": f"{base}/{repo.full_name}.git",
        "svn_url": f"{base}/{repo.full_name}",
        "homepage": None,
        "size": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "language": None,
        "has_issues": True,
        "has_projects": True,
        "has_downloads": True,
        "has_wiki": True,
        "has_pages": False,
        "has_discussions": False,
        "forks_count": 0,
        "mirror_url": None,
        "archived": False,
        "disabled": False,
        "open_issues_count": open_issues,
        "license": None,
        "allow_forking": True,
        "is_template": False,
        "web_commit_signoff_required": False,
        "topics": [],
        "visibility": "private" if repo.private else "public",
        "forks": 0,
        "open_issues": open_issues,
        "watchers": 0,
        "default_branch": repo.default_branch,
    }
    if full:
        body.update(
            {
                "allow_squash_merge": True,
                "allow_merge_commit": True,
                "allow_rebase_merge": True,
                "allow_auto_merge": False,
                "delete_branch_on_merge": False,
                "allow_update_branch": False,
                "use_squash_pr_title_as_default": False,
                "squash_merge_commit_title": "COMMIT_OR_PR_TITLE",
                "squash_merge_commit_message": "COMMIT_MESSAGES",
                "merge_commit_title": "MERGE_MESSAGE",
                "merge_commit_message": "PR_TITLE",
                "network_count": 0,
                "subscribers_count": 0,
            }
        )
    return body


def repository_brief(repo: Repo) -> Json:
    """The short repository form of installation webhooks."""
    return {
        "id": repo.id,
        "node_id": node_id("R", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
    }


def app(
    base: str,
    owner: Account,
    *,
    app_id: int,
    slug: str,
    events: list[str],
    permissions: dict[str, str],
    installations_count: int,
    created_at: float,
) -> Json:
    """`GET /app`: the authenticated App (githubkit's `Integration`)."""
    return {
        "id": app_id,
        "slug": slug,
        "node_id": node_id("A", app_id),
        "client_id": f"Iv1.twin{app_id:08d}",
        "owner": user(base, owner),
        "name": slug.capitalize(),
        "description": "",
        "external_url": f"{base}/apps/{slug}",
        "html_url": f"{base}/apps/{slug}",
        "created_at": iso(created_at),
        "updated_at": iso(created_at),
        "permissions": dict(sorted(permissions.items())),
        "events": list(events),
        "installations_count": installations_count,
    }


def hook_delivery(number: int, delivery: Delivery) -> Json:
    """One item of `GET /app/hook/deliveries` (githubkit's `HookDeliveryItem`): GitHub says
    `OK` for a 2xx answer, the answer's status otherwise, and status code 0 when the
    receiver never answered."""
    code = delivery.status or 0
    if delivery.status is None:
        status = "failed to connect to host" if delivery.error != "withheld" else "delivery not attempted"
    elif 200 <= code < 300:
        status = "OK"
    else:
        status = f"Invalid HTTP Response: {code}"
    body: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        loaded = json.loads(delivery.body)
        body = loaded if isinstance(loaded, dict) else {}
    installation_id = (body.get("installation") or {}).get("id")
    repository_id = (body.get("repository") or {}).get("id")
    return {
        "id": number,
        "guid": delivery.delivery_id,
        "delivered_at": iso(delivery.delivered_at),
        "redelivery": delivery.redelivery,
        "duration": round(delivery.duration, 3),
        "status": status,
        "status_code": code,
        "event": delivery.event,
        "action": delivery.action,
        "installation_id": installation_id if isinstance(installation_id, int) else None,
        "repository_id": repository_id if isinstance(repository_id, int) else None,
        "throttled_at": None,
    }


def installation(
    base: str,
    inst: Installation,
    account: Account,
    *,
    app_id: int,
    app_slug: str,
    suspended_by: Account | None,
) -> Json:
    settings = "organizations/" + account.login + "/" if account.type == "Organization" else ""
    return {
        "id": inst.id,
        "client_id": f"Iv1.twin{app_id:08d}",
        "account": user(base, account),
        "repository_selection": "selected",
        "access_tokens_url": f"{base}/app/installations/{inst.id}/access_tokens",
        "repositories_url": f"{base}/installation/repositories",
        "html_url": f"{base}/{settings}settings/installations/{inst.id}",
        "app_id": app_id,
        "app_slug": app_slug,
        "target_id": account.id,
        "target_type": account.type,
        "permissions": dict(sorted(inst.permissions.items())),
        "events": ["pull_request"],
        "created_at": iso(inst.created_at),
        "updated_at": iso(inst.updated_at),
        "single_file_name": None,
        "has_multiple_single_files": False,
        "single_file_paths": [],
        "suspended_by": None if suspended_by is None else user(base, suspended_by),
        "suspended_at": None if inst.suspended_at is None else iso(inst.suspended_at),
    }


def pull_request(
    base: str,
    repo: Json,
    pull: Pull,
    *,
    author: Json,
    owner: Json,
    merged_by: Json | None = None,
    stats: PullStats | None = None,
) -> Json:
    """A pull request: the `PullRequestSimple` shape of a list, or with `stats` the full one.

    `repo` is the repository JSON used for both `head.repo` and `base.repo` (no forks).
    """
    full_name = repo["full_name"]
    api = f"{base}/repos/{full_name}/pulls/{pull.number}"
    html = f"{base}/{full_name}/pull/{pull.number}"
    issue = f"{base}/repos/{full_name}/issues/{pull.number}"
    statuses = f"{base}/repos/{full_name}/statuses/{pull.head_sha}"
    login = owner["login"]
    body: Json = {
        "url": api,
        "id": pull.id,
        "node_id": node_id("PR", pull.id),
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "issue_url": issue,
        "number": pull.number,
        "state": pull.state,
        "locked": False,
        "title": pull.title,
        "user": author,
        "body": pull.body,
        "created_at": iso(pull.created_at),
        "updated_at": iso(pull.updated_at),
        "closed_at": None if pull.closed_at is None else iso(pull.closed_at),
        "merged_at": None if pull.merged_at is None else iso(pull.merged_at),
        "merge_commit_sha": pull.merge_commit_sha,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
        "labels": [],
        "milestone": None,
        "draft": pull.draft,
        "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": f"{base}/repos/{full_name}/pulls/comments" + "{/number}",
        "comments_url": f"{issue}/comments",
        "statuses_url": statuses,
        "head": {
            "label": f"{login}:{pull.head_ref}",
            "ref": pull.head_ref,
            "sha": pull.head_sha,
            "user": owner,
            "repo": repo,
        },
        "base": {
            "label": f"{login}:{pull.base_ref}",
            "ref": pull.base_ref,
            "sha": pull.base_sha,
            "user": owner,
            "repo": repo,
        },
        "_links": {
            "self": {"href": api},
            "html": {"href": html},
            "issue": {"href": issue},
            "comments": {"href": f"{issue}/comments"},
            "review_comments": {"href": f"{api}/comments"},
            "review_comment": {"href": f"{base}/repos/{full_name}/pulls/comments" + "{/number}"},
            "commits": {"href": f"{api}/commits"},
            "statuses": {"href": statuses},
        },
        "author_association": "NONE",
        "auto_merge": None,
        "active_lock_reason": None,
    }
    if stats is not None:
        open_ = pull.state == "open"
        body.update(
            {
                "merged": pull.merged,
                "mergeable": stats.mergeable if open_ else None,
                "rebaseable": stats.mergeable if open_ else None,
                "mergeable_state": ("clean" if stats.mergeable else "dirty") if open_ else "unknown",
                "merged_by": merged_by,
                "comments": stats.comments,
                "review_comments": stats.review_comments,
                "maintainer_can_modify": False,
                "commits": stats.commits,
                "additions": stats.additions,
                "deletions": stats.deletions,
                "changed_files": stats.changed_files,
            }
        )
    return body


def reactions(api: str) -> Json:
    """The reaction counts of a comment or an issue: none, here."""
    return {
        "url": f"{api}/reactions",
        "total_count": 0,
        **dict.fromkeys(("+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes"), 0),
    }


def issue_comment(
    base: str, full_name: str, comment: Comment, *, author: Json, association: str = "NONE"
) -> Json:
    """A comment on an issue or pull request (the `IssueComment` shape)."""
    api = f"{base}/repos/{full_name}/issues/comments/{comment.id}"
    return {
        "url": api,
        "html_url": f"{base}/{full_name}/pull/{comment.number}#issuecomment-{comment.id}",
        "issue_url": f"{base}/repos/{full_name}/issues/{comment.number}",
        "id": comment.id,
        "node_id": node_id("IC", comment.id),
        "user": author,
        "created_at": iso(comment.created_at),
        "updated_at": iso(comment.updated_at),
        "author_association": association,
        "body": comment.body,
        "reactions": reactions(api),
        "performed_via_github_app": None,
    }


def review(
    base: str,
    full_name: str,
    number: int,
    review_id: int,
    *,
    author: Json,
    association: str,
    state: str,
    body: str,
    commit_id: str,
    at: float,
) -> Json:
    """A submitted pull request review (the webhook's `review` object)."""
    html = f"{base}/{full_name}/pull/{number}#pullrequestreview-{review_id}"
    pull_api = f"{base}/repos/{full_name}/pulls/{number}"
    return {
        "id": review_id,
        "node_id": node_id("PRR", review_id),
        "user": author,
        "body": body or None,
        "commit_id": commit_id,
        "submitted_at": iso(at),
        "state": state,
        "html_url": html,
        "pull_request_url": pull_api,
        "author_association": association,
        "_links": {"html": {"href": html}, "pull_request": {"href": pull_api}},
    }


def review_rest(event_review: Json) -> Json:
    """A review as the REST API lists it, from the `review` its webhook carried: the REST
    API says the state in capitals (`CHANGES_REQUESTED`) and an empty body as ``""``."""
    return {**event_review, "body": event_review["body"] or "", "state": event_review["state"].upper()}


def review_comment(
    base: str,
    full_name: str,
    number: int,
    comment_id: int,
    *,
    review_id: int,
    author: Json,
    association: str,
    path: str,
    line: int,
    body: str,
    diff_hunk: str,
    commit_id: str,
    at: float,
) -> Json:
    """One inline comment of a review (the `pull_request_review_comment` event's `comment`)."""
    api = f"{base}/repos/{full_name}/pulls/comments/{comment_id}"
    html = f"{base}/{full_name}/pull/{number}#discussion_r{comment_id}"
    pull_api = f"{base}/repos/{full_name}/pulls/{number}"
    return {
        "url": api,
        "pull_request_review_id": review_id,
        "id": comment_id,
        "node_id": node_id("PRRC", comment_id),
        "diff_hunk": diff_hunk,
        "path": path,
        "position": 1,
        "original_position": 1,
        "commit_id": commit_id,
        "original_commit_id": commit_id,
        "user": author,
        "body": body,
        "created_at": iso(at),
        "updated_at": iso(at),
        "html_url": html,
        "pull_request_url": pull_api,
        "author_association": association,
        "_links": {"self": {"href": api}, "html": {"href": html}, "pull_request": {"href": pull_api}},
        "start_line": None,
        "original_start_line": None,
        "start_side": None,
        "line": line,
        "original_line": line,
        "side": "RIGHT",
        "subject_type": "line",
        "reactions": reactions(api),
    }


def check_run(
    base: str,
    full_name: str,
    run_id: int,
    suite_id: int,
    *,
    name: str,
    conclusion: str,
    output: str,
    head_sha: str,
    head_branch: str,
    pulls: list[Json],
    app: Json,
    at: float,
) -> Json:
    """A completed check run with its suite (the `check_run` event's `check_run`)."""
    api = f"{base}/repos/{full_name}"
    suite = {
        "id": suite_id,
        "node_id": node_id("CS", suite_id),
        "head_branch": head_branch,
        "head_sha": head_sha,
        "status": "completed",
        "conclusion": conclusion,
        "url": f"{api}/check-suites/{suite_id}",
        "before": None,
        "after": head_sha,
        "pull_requests": pulls,
        "app": app,
        "created_at": iso(at),
        "updated_at": iso(at),
    }
    return {
        "id": run_id,
        "node_id": node_id("CR", run_id),
        "head_sha": head_sha,
        "external_id": "",
        "url": f"{api}/check-runs/{run_id}",
        "html_url": f"{base}/{full_name}/runs/{run_id}",
        "details_url": f"{base}/{full_name}/runs/{run_id}",
        "status": "completed",
        "conclusion": conclusion,
        "started_at": iso(at),
        "completed_at": iso(at),
        "output": {
            "title": f"{name}: {conclusion}",
            "summary": output or None,
            "text": None,
            "annotations_count": 0,
            "annotations_url": f"{api}/check-runs/{run_id}/annotations",
        },
        "name": name,
        "check_suite": suite,
        "app": app,
        "pull_requests": pulls,
    }


def check_run_rest(event_run: Json, pulls: list[Json]) -> Json:
    """A check run as the REST API lists it, from the `check_run` its webhook carried: the
    suite by its id only, and the pull requests whose head the commit is now."""
    return {**event_run, "check_suite": {"id": event_run["check_suite"]["id"]}, "pull_requests": pulls}


def commit(
    base: str, full_name: str, info: CommitInfo, *, author: Json | None, committer: Json | None
) -> Json:
    """A commit with its git data (the `status` event's `commit`, the REST `Commit` shape
    without the diff): `author`/`committer` are the GitHub users the emails belong to."""
    api = f"{base}/repos/{full_name}"

    def person(who: tuple[str, str, float]) -> Json:
        return {"name": who[0], "email": who[1], "date": iso(who[2])}

    return {
        "sha": info.sha,
        "node_id": node_id("C", int(info.sha[:12], 16)),
        "commit": {
            "author": person(info.author),
            "committer": person(info.committer),
            "message": info.message,
            "tree": {"sha": info.tree, "url": f"{api}/git/trees/{info.tree}"},
            "url": f"{api}/git/commits/{info.sha}",
            "comment_count": 0,
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            },
        },
        "url": f"{api}/commits/{info.sha}",
        "html_url": f"{base}/{full_name}/commit/{info.sha}",
        "comments_url": f"{api}/commits/{info.sha}/comments",
        "author": author,
        "committer": committer,
        "parents": [
            {"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{base}/{full_name}/commit/{p}"}
            for p in info.parents
        ],
    }


def commit_status(base: str, full_name: str, status: CommitStatus, *, creator: Json) -> Json:
    """One commit status (the `SimpleCommitStatus` shape of a combined status)."""
    return {
        "url": f"{base}/repos/{full_name}/statuses/{status.sha}",
        "avatar_url": creator["avatar_url"],
        "id": status.id,
        "node_id": node_id("SC", status.id),
        "state": status.state,
        "description": status.description,
        "target_url": status.target_url,
        "context": status.context,
        "created_at": iso(status.created_at),
        "updated_at": iso(status.updated_at),
    }


def combined_status(base: str, repo: Json, sha: str, statuses: list[Json]) -> Json:
    """GitHub's combined status of a commit from the latest status of each context:
    failure if any is error or failure, pending if any is pending or there is none, else
    success."""
    states = {s["state"] for s in statuses}
    if states & {"error", "failure"}:
        state = "failure"
    elif not states or "pending" in states:
        state = "pending"
    else:
        state = "success"
    api = f"{base}/repos/{repo['full_name']}/commits/{sha}"
    return {
        "state": state,
        "statuses": statuses,
        "sha": sha,
        "total_count": len(statuses),
        "repository": repo,
        "commit_url": api,
        "url": f"{api}/status",
    }


def status_event(
    full_name: str,
    status: CommitStatus,
    *,
    creator: Json,
    commit_json: Json,
    branches: list[Json],
) -> Json:
    """The fields of a `status` webhook before its repository, sender and installation (it
    has no `action`; its times are written `+00:00`, unlike every other event's)."""
    return {
        "id": status.id,
        "sha": status.sha,
        "name": full_name,
        "target_url": status.target_url,
        "avatar_url": creator["avatar_url"],
        "context": status.context,
        "description": status.description,
        "state": status.state,
        "commit": commit_json,
        "branches": branches,
        "created_at": iso(status.created_at).replace("Z", "+00:00"),
        "updated_at": iso(status.updated_at).replace("Z", "+00:00"),
    }


def error(
    message: str, *, status: int, documentation_url: str, errors: list[dict[str, str]] | None = None
) -> Json:
    body: Json = {"message": message}
    if errors is not None:
        body["errors"] = errors
    body["documentation_url"] = documentation_url
    body["status"] = str(status)
    return body
