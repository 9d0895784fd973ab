"""`POST /v1/runtime/github-token`: a runtime's capability for a GitHub installation token
scoped to its task's one repository (docs/concepts/runner.md).

The runtime asks at clone time and again at push time rather than holding a token past its
hour. Every answer is decided from durable state read now, not from the capability alone:
the capability proves which task and user are asking; the task must still be running and
owned by that user; a live installation linked to that user must still hold the task's
repository (an uninstall or a suspension takes effect at the next request). Tokens are never
logged or stored.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain.capability import Verify, bearer_token
from steward.domain.errors import Forbidden, LifecycleError, Unauthorized
from steward.domain.models import TaskStatus, iso, utcnow

if TYPE_CHECKING:  # githubkit costs the runtime function's cold start; only the token route needs it
    from steward.adapters.github import GitHubApp


class GitHubTokens:
    """Issues installation tokens to running tasks' runtimes."""

    def __init__(
        self,
        verify: Verify,
        tasks: TaskStore,
        installations: InstallationStore,
        github: GitHubApp,
        *,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.verify = verify
        self.tasks = tasks
        self.installations = installations
        self.github = github
        self.clock = clock

    def issue(self, authorization: str | None) -> dict[str, object]:
        """{"token", "expires_at", "repository", "installation_id", "api_url", "clone_url"}
        for the capability's running task: everything the runtime needs to reach GitHub, so
        it holds no GitHub configuration of its own (`api_url` null: api.github.com)."""
        capability = self.verify(bearer_token(authorization), now=self.clock())
        task = self.tasks.get(capability.task_id)
        if task is None:
            raise Unauthorized("the capability's task no longer exists")
        if task.user != capability.sub:
            raise Forbidden("the capability's task belongs to another user")
        if task.status != TaskStatus.RUNNING:
            raise LifecycleError(
                f"the task is {task.status.value}; GitHub tokens are issued only while it runs",
                field="status",
            )
        live = sorted(
            (i for i in self.installations.for_owner(task.user) if i.holds(task.repo)),
            key=lambda i: i.installation_id,
        )
        if not live:
            raise Forbidden(
                f"no live GitHub App installation of the task's owner holds {task.repo}", field="repo"
            )
        token = self.github.installation_token(live[0].installation_id, task.repo)
        return {
            "token": token.token,
            "expires_at": iso(token.expires_at),
            "repository": task.repo,
            "installation_id": live[0].installation_id,
            "api_url": self.github.base_url,
            "clone_url": self.github.git_url(task.repo),
        }
