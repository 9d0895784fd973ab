"""The twin's records: accounts, repositories, installations, tokens, pull requests, their
comments and commit statuses.

Plain mutable records guarded by the twin's one lock; JSON is built from them on demand
(`shapes`), so a response always shows the current state, as GitHub's would.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

# What Steward's App asks for (docs/guides/deploying.md, "The GitHub App"): checks and statuses to read failing ones.
DEFAULT_PERMISSIONS = {
    "checks": "read",
    "contents": "write",
    "metadata": "read",
    "pull_requests": "write",
    "statuses": "read",
}
LEVELS = {"read": 1, "write": 2, "admin": 3}
TOKEN_TTL_SECONDS = 3600.0  # GitHub installation tokens last one hour


class TwinError(Exception):
    """A refusal with GitHub's status and body: the HTTP layer answers it as is."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[dict[str, str]] | None = None,
        documentation_url: str = "https://docs.github.com/rest",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.documentation_url = documentation_url


def iso(at: float) -> str:
    """GitHub's timestamp form, which githubkit parses with `%Y-%m-%dT%H:%M:%SZ`."""
    return datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(prefix: str, number: int) -> str:
    """An opaque GraphQL-style node id (`R_...`, `PR_...`), stable for a record."""
    raw = f"twin:{prefix}:{number}".encode()
    return f"{prefix}_{base64.urlsafe_b64encode(raw).decode().rstrip('=')}"


@dataclass
class Account:
    login: str
    id: int
    type: str  # "User", "Organization" or "Bot"


@dataclass
class Repo:
    id: int
    owner: str
    name: str
    default_branch: str
    private: bool
    created_at: float
    pushed_at: float
    next_number: int = 1

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class Installation:
    id: int
    account: str
    repo_ids: list[int]
    permissions: dict[str, str]
    created_at: float
    updated_at: float
    suspended_at: float | None = None
    deleted: bool = False


@dataclass
class Token:
    installation_id: int
    repo_ids: frozenset[int] | None  # None: every repository of the installation, as it changes
    permissions: dict[str, str]
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self.expires_at


@dataclass
class Pull:
    repo_id: int
    number: int
    id: int
    title: str
    body: str | None
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    user: str
    created_at: float
    updated_at: float
    draft: bool = False
    state: str = "open"
    closed_at: float | None = None
    merged_at: float | None = None
    merged_by: str | None = None
    merge_commit_sha: str | None = None
    labels: list[str] = field(default_factory=list)

    @property
    def merged(self) -> bool:
        return self.merged_at is not None


@dataclass
class Comment:
    """A comment on an issue or pull request (the twin has pull requests only)."""

    id: int
    repo_id: int
    number: int
    body: str
    user: str
    created_at: float
    updated_at: float


@dataclass
class CommitStatus:
    """A commit status a CI posted on a commit (GitHub keeps every one; a context's latest counts)."""

    id: int
    repo_id: int
    sha: str
    context: str
    state: str  # error, failure, pending or success
    description: str | None
    target_url: str | None
    creator: str  # login
    created_at: float
    updated_at: float
