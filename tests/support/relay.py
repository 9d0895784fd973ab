"""A relay wired to real stores, a real KMS key (moto) and the packaged price table, plus
running tasks with capabilities, built the way the loop and a runtime build them."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
from steward.adapters.budget_store import BudgetStore
from steward.adapters.capability_signer import CapabilityVerifier, KmsCapabilitySigner
from steward.adapters.price_file import load_price_table
from steward.adapters.providers import provider_for
from steward.domain.capability import capability_claims
from steward.domain.models import Task, utcnow
from steward.domain.tasks import task_for
from steward.services.relay import Relay
from steward.wiring import Services

from tests.support.documents import document


@dataclass
class RelayKit:
    services: Services
    signer: KmsCapabilitySigner
    relay: Relay
    budget: BudgetStore

    def running_task(
        self, *, budget: str = "1.00", model: str = "scripted", user: str = "alice", slug: str = "relay"
    ) -> Task:
        markdown = document("Use the model").replace(
            "checks:", f'model: {model}\nbudget_usd: "{budget}"\nchecks:'
        )
        self.services.plans.publish(user, slug, markdown)
        plan = self.services.plans.confirm(user, slug)
        now = utcnow()
        tasks = self.services.tasks.tasks
        task, _ = tasks.spawn(
            task_for(plan, plan.active_items[0], attempt=1, now=now), previous_task_id=None, now=now
        )
        return tasks.claim(task, runtime_id="runtime", now=now, deadline=now + timedelta(hours=1))

    def capability(self, task: Task, **overrides: Any) -> str:
        claims = capability_claims(
            sub=task.user, task_id=task.id, model_id=task.model, max_budget_usd=task.budget_usd, now=utcnow()
        )
        return self.signer.mint({**claims, **overrides})

    def reserve(
        self, task: Task, rid: str, *, cost: Decimal, cap: Decimal | None = None, minutes: int = 5
    ) -> None:
        """A reservation as the relay makes it, held as a call in flight would hold it."""
        now = self.relay.clock()
        refused = self.budget.reserve(
            task_id=task.id,
            owner=task.user,
            model=task.model,
            token_cap=task.budget_usd if cap is None else cap,
            cost=cost,
            reservation_id=rid,
            expires_at=now + timedelta(minutes=minutes),
            now=now,
        )
        assert refused is None

    def call(self, task: Task, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
        return self.relay.converse(f"Bearer {token or self.capability(task)}", json.dumps(body or ask()))

    def spent(self, task: Task) -> tuple[Decimal, Decimal]:
        """(settled cost, committed) as stored."""
        item = self.services.tables.table_by_name("tasks").get_item(
            Key={"task_id": task.id}, ConsistentRead=True
        )["Item"]
        return Decimal(str(item["cost_usd"])), Decimal(str(item["committed_usd"]))


def ask(text: str = "Say hello.", max_tokens: int = 64) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": [{"text": text}]}],
        "inferenceConfig": {"maxTokens": max_tokens},
    }


def build_relay(services: Services, **client_kwargs: Any) -> RelayKit:
    kms = boto3.client("kms", **({"region_name": "us-east-1"} | client_kwargs))
    key_id = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"]
    signer = KmsCapabilitySigner(kms, key_id)
    verifier = CapabilityVerifier.from_kms(kms, [key_id])
    budget = BudgetStore(services.tables)

    def record_over_report(task_id: str, data: Mapping[str, Any], now: datetime) -> None:
        services.tasks.tasks.record_over_report(task_id, data, now=now)

    relay = Relay(
        verify=verifier.verify,
        budget=budget,
        prices=load_price_table(),
        provider_for=functools.partial(provider_for, environ={}),
        record_over_report=record_over_report,
        capability_key_ids=frozenset({key_id}),
    )
    return RelayKit(services, signer, relay, budget)
