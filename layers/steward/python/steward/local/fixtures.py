"""Local-only fixtures for exercising the stack from outside.

`steward local capability --user U --budget-usd X --model M` creates a running task for U
(a one-item plan, confirmed, spawned and claimed, exactly as the loop and a runtime would)
and mints its capability with the stack's KMS key, so the relay can be called directly.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from steward.adapters.capability_signer import KmsCapabilitySigner, kms_client
from steward.adapters.dynamo import Tables
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.domain.capability import capability_claims
from steward.domain.documents import DocumentPolicy
from steward.domain.models import utcnow
from steward.domain.tasks import task_for
from steward.services.plans import PlanService

FIXTURE_REPO = "steward-demo/calculator"


def running_task_with_capability(
    state_file: Path, *, user: str, budget_usd: Decimal, model: str
) -> dict[str, Any]:
    state = json.loads(state_file.read_text())
    aws = {
        "endpoint_url": state["aws_endpoint_url"],
        "region_name": state["region"],
        "aws_access_key_id": "local",
        "aws_secret_access_key": "local",  # moto accepts any key
    }
    tables = Tables.connect(state["table_prefix"], **aws)
    slug = f"capability-{uuid.uuid4().hex[:8]}"
    markdown = (
        f'---\nrepo: {FIXTURE_REPO}\nmodel: {model}\nbudget_usd: "{budget_usd}"\nchecks:\n  - pytest -q\n---\n'
        f"# Relay fixture\n\n- [ ] Exercise the relay\n"
    )
    tasks = TaskStore(tables)
    policy = DocumentPolicy(max_budget_usd=max(budget_usd, Decimal("10")))
    plans = PlanService(PlanStore(tables), policy, tasks=tasks)
    plans.publish(user, slug, markdown)
    plan = plans.confirm(user, slug)
    now = utcnow()
    task, _ = tasks.spawn(
        task_for(plan, plan.active_items[0], attempt=1, now=now), previous_task_id=None, now=now
    )
    task = tasks.claim(task, runtime_id="local-fixture", now=now, deadline=now + timedelta(hours=2))
    signer = KmsCapabilitySigner(kms_client(**aws), state["capability_key_id"])
    claims = capability_claims(sub=user, task_id=task.id, model_id=model, max_budget_usd=budget_usd, now=now)
    return {"task_id": task.id, "capability": signer.mint(claims)}
