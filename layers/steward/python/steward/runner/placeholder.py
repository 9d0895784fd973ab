"""The runtime until the real runner exists: claim the task, then fail it as final.

It exercises the launch path end to end (launcher, environment, claim, durable events,
watermark, plan item projection) so the loop can be built and tested before the tool loop.
The runtime gets only STEWARD_TASK_ID, STEWARD_TICKET, STEWARD_API_URL and
STEWARD_RELAY_URL (DESIGN section 6), and locally AWS_ENDPOINT_URL. The ticket exchange
(POST /v1/runtime/exchange for a capability) arrives with the relay capability; until then
the placeholder requires the ticket but does not use it, and reaches DynamoDB directly with
the task role's (locally: dummy) credentials. It never prints a variable's value.

Exit codes: 0 when it failed the task, and also when it had nothing to do (another runtime
claimed the task, or it is no longer queued: a duplicate launch must be harmless); 1 when
the task does not exist; 2 when a required variable is missing.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Mapping
from datetime import timedelta

from steward.adapters.dynamo import Tables
from steward.adapters.task_store import TaskStore
from steward.domain.errors import LifecycleError
from steward.domain.models import Classification, TaskStatus, utcnow

REQUIRED = ("STEWARD_TASK_ID", "STEWARD_TICKET", "STEWARD_API_URL", "STEWARD_RELAY_URL")
CLAIM_DEADLINE = timedelta(seconds=180)
REASON = "runner not built"
DEFAULT_TABLE_PREFIX = "steward-"


def _say(message: str) -> None:
    print(f"steward.runner: {message}", file=sys.stderr, flush=True)


def main(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    for name in REQUIRED:
        if not env.get(name):
            _say(f"{name} is not set; the launcher provides it")
            return 2
    task_id = env["STEWARD_TASK_ID"]
    tasks = TaskStore(Tables.connect(env.get("STEWARD_TABLE_PREFIX") or DEFAULT_TABLE_PREFIX))
    task = tasks.get(task_id)
    if task is None:
        _say(f"no task {task_id}")
        return 1
    runtime_id = "r" + uuid.uuid4().hex
    now = utcnow()
    try:
        claimed = tasks.claim(task, runtime_id=runtime_id, now=now, deadline=now + CLAIM_DEADLINE)
    except LifecycleError:
        _say(f"task {task_id} is {task.status.value} or claimed by another runtime; nothing to do")
        return 0
    _say(f"runtime {runtime_id} claimed task {task_id}; failing it: {REASON}")
    try:
        failed, _ = tasks.transition(
            claimed,
            TaskStatus.FAILED,
            now=utcnow(),
            event="finished",
            data={"runtime_id": runtime_id, "classification": Classification.FINAL.value, "reason": REASON},
            classification=Classification.FINAL.value,
            reason=REASON,
        )
    except LifecycleError:
        _say(f"task {task_id} changed meanwhile (cancelled?); leaving it as it is")
        return 0
    tasks.project_item(failed, now=utcnow())
    return 0
