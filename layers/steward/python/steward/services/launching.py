"""Starting a queued task's runtime: the launcher step of the loop (docs/architecture.md).

A launch issues a one-time ticket, starts the runtime with it, and records `launched_at` and
`launch_ref` on the task. The task is re-read first (one consistent read), so a replayed
call for a task already launched, or no longer queued, issues no ticket and starts nothing.
A crash between launch and record is repaired by the next call: the launcher is idempotent
per task id, so the replay gets the same runtime back (its fresh ticket is never used and
expires).
"""

from __future__ import annotations

from datetime import datetime

from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import DEFAULT_TTL_SECONDS, TicketStore
from steward.domain.launch import Launcher
from steward.domain.models import Task, TaskStatus


def launch_task(
    task: Task,
    *,
    launcher: Launcher,
    tickets: TicketStore,
    tasks: TaskStore,
    now: datetime,
    ticket_ttl_seconds: int = DEFAULT_TTL_SECONDS,
) -> str | None:
    """Launch `task`'s runtime and return its launch reference. A task already launched gets
    the reference recorded then (None if none was), and nothing is started; a task no longer
    queued and never launched gets None. Raises NotFound for an unknown task and LaunchError
    when the runtime could not be started (the task stays queued for the next tick)."""
    current = tasks.require(task.id)
    if current.launched_at is not None:
        return current.launch_ref
    if current.status is not TaskStatus.QUEUED:
        return None
    ticket = tickets.issue(current.id, now=now, ttl_seconds=ticket_ttl_seconds)
    ref = launcher.launch(current, ticket)
    tasks.mark_launched(current.id, launch_ref=ref, now=now)
    return ref
