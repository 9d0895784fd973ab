"""What the loop needs from whatever starts runtimes (docs/architecture.md, launcher).

The launcher is the one place that turns a queued task into a running runtime: a Fargate
task in AWS (`adapters.fargate_launcher`), a local process in the embedded stack
(`local.launcher`). Both give the runtime only its task id, a one-time ticket and the URLs
of docs/concepts/runner.md (with the deployment's runner bounds, and never an AWS variable), and both are idempotent per task id, because the heartbeat may replay a
launch after a lost response or a crash. The claim stays the real guard: a duplicate runtime
fails its conditional claim and exits (docs/testing.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from steward.domain.errors import StewardError
from steward.domain.models import Task


@dataclass(frozen=True)
class RuntimeEndpoints:
    """Where a runtime reaches the control plane: the only places it reaches at all, besides
    GitHub (at the URL the token route answers) and S3 (at presigned URLs the runtime routes
    answer). There is no AWS endpoint here: the runtime holds no AWS credential."""

    api_url: str
    relay_url: str


class LaunchError(StewardError):
    """The runtime could not be started (throttling, capacity, a refused request). The task
    stays queued: the next tick launches again, and the reaper fails it after the launch
    grace. The message names the provider's reason, never the ticket."""

    status = 502
    code = "launch_failed"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, field="launch")
        self.reason = reason


class Launcher(Protocol):
    def launch(self, task: Task, ticket: str) -> str:
        """Start the runtime of `task` with `ticket`; return its launch reference (an ECS task
        ARN, "local:<pid>"). While a runtime of the same task id exists, return its reference
        and start nothing. Raises LaunchError."""
        ...

    def stop(self, task: Task, launch_ref: str | None) -> None:
        """Stop the runtime of `task` (cancel, archive). Stopping what is already gone, or was
        never started, is a success."""
        ...
