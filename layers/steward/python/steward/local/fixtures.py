"""Local-only fixtures for exercising the stack from outside.

`steward local capability --owner U --budget-usd X --model M` creates a running task for U
(a one-item plan, confirmed, spawned and claimed, exactly as the loop and a runtime would)
and mints its capability with the stack's KMS key, so the relay can be called directly.

The plan and its task are of kind `fixture` (`steward.domain.models:PlanKind`), which only
this module sets: the loop never launches, retries or counts the task (it holds none of
U's `max_parallel` slots and none of the daily cap: the spawn charges nothing), `plan list`
does not show the plan (`plan show SLUG` and the task routes still do), and the task lives
`lifetime` (10 minutes unless asked, at most the capability's 2 hours): its deadline is the
capability's expiry, after which the reaper cancels it (`steward.services.reaper`). Its
runtime routes still work while it runs; a heartbeat there keeps it alive no longer than the
capability plus the running grace.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from steward.adapters.capability_signer import KmsCapabilitySigner, kms_client
from steward.adapters.dynamo import Tables
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.domain.capability import MAX_LIFETIME_SECONDS, capability_claims
from steward.domain.documents import DocumentPolicy
from steward.domain.models import PlanKind, iso, utcnow
from steward.domain.tasks import task_for
from steward.services.plans import PlanService

FIXTURE_REPO = "steward-demo/calculator"
FIXTURE_LIFETIME = timedelta(minutes=10)
MAX_FIXTURE_LIFETIME = timedelta(seconds=MAX_LIFETIME_SECONDS)
FIXTURE_RUNTIME_ID = "local-fixture"


def make_fixture(
    tables: Tables,
    signer: KmsCapabilitySigner,
    *,
    user: str,
    budget_usd: Decimal,
    model: str,
    now: datetime | None = None,
    lifetime: timedelta = FIXTURE_LIFETIME,
) -> dict[str, Any]:
    """A fixture plan of `user`'s with one running task, and that task's capability:
    {"task_id", "plan_slug", "kind", "capability", "expires_at", "lifetime_seconds"}."""
    seconds = int(lifetime.total_seconds())
    if not 0 < seconds <= MAX_LIFETIME_SECONDS:
        raise ValueError(f"a fixture lives 1 s to {MAX_LIFETIME_SECONDS} s (its capability's limit)")
    now = now or utcnow()
    slug = f"capability-{uuid.uuid4().hex[:8]}"
    markdown = (
        f'---\nrepo: {FIXTURE_REPO}\nmodel: {model}\nbudget_usd: "{budget_usd}"\nchecks:\n  - pytest -q\n---\n'
        f"# Relay fixture\n\n- [ ] Exercise the relay\n"
    )
    tasks = TaskStore(tables)
    policy = DocumentPolicy(max_budget_usd=max(budget_usd, Decimal("10")))
    plans = PlanService(PlanStore(tables), policy, tasks=tasks, clock=lambda: now)
    plans.publish(user, slug, markdown, kind=PlanKind.FIXTURE)
    plan = plans.confirm(user, slug)
    task, _ = tasks.spawn(
        task_for(plan, plan.active_items[0], attempt=1, now=now), previous_task_id=None, now=now
    )
    iat = int(now.timestamp())
    expires = datetime.fromtimestamp(iat + seconds, UTC)
    # The deadline is the capability's expiry: the reaper ends the task when the relay would
    # refuse its capability anyway.
    task = tasks.claim(task, runtime_id=FIXTURE_RUNTIME_ID, now=now, deadline=expires)
    claims = capability_claims(
        sub=user,
        task_id=task.id,
        model_id=model,
        max_budget_usd=budget_usd,
        now=now,
        lifetime_seconds=seconds,
    )
    return {
        "task_id": task.id,
        "plan_slug": slug,
        "kind": PlanKind.FIXTURE.value,
        "capability": signer.mint(claims),
        "expires_at": iso(expires),
        "lifetime_seconds": seconds,
    }


def running_task_with_capability(
    state_file: Path,
    *,
    user: str,
    budget_usd: Decimal,
    model: str,
    lifetime: timedelta = FIXTURE_LIFETIME,
) -> dict[str, Any]:
    """`make_fixture` on the running local stack that `state_file` describes."""
    state = json.loads(state_file.read_text())
    aws = {
        "endpoint_url": state["aws_endpoint_url"],
        "region_name": state["region"],
        "aws_access_key_id": "local",
        "aws_secret_access_key": "local",  # moto accepts any key
    }
    tables = Tables.connect(state["table_prefix"], **aws)
    signer = KmsCapabilitySigner(kms_client(**aws), state["capability_key_id"])
    return make_fixture(tables, signer, user=user, budget_usd=budget_usd, model=model, lifetime=lifetime)
