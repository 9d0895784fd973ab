"""Plan use cases: publish (parse, merge, conditional save) and the lifecycle transitions."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime

from steward.adapters.plan_store import PlanStore
from steward.domain import plans as plan_rules
from steward.domain.documents import DocumentPolicy, parse_document
from steward.domain.errors import Conflict
from steward.domain.ids import plan_id, validate_slug
from steward.domain.models import Plan, utcnow

PUBLISH_ATTEMPTS = 8


class PlanService:
    def __init__(
        self, store: PlanStore, policy: DocumentPolicy, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock

    def publish(self, user: str, slug: str, markdown: str) -> Plan:
        """Upsert a Task Document. Reads the plan, merges, and writes on the condition that
        nothing changed in between; a concurrent write (a confirm, a spawn linking a task)
        makes it merge again from fresh state, so no task link is ever lost."""
        validate_slug(slug)
        document = parse_document(markdown, self.policy)
        for attempt in range(PUBLISH_ATTEMPTS):
            existing = self.store.get(user, slug)
            result = plan_rules.publish(
                existing,
                plan_id=plan_id(user, slug),
                user=user,
                slug=slug,
                document=document,
                now=self.clock(),
            )
            if not result.changed:
                return result.plan
            try:
                return self.store.save(result.plan, expected_version=existing.version if existing else None)
            except Conflict:
                time.sleep(random.uniform(0, 0.01 * 2**attempt))  # noqa: S311 - jitter, not crypto
        raise Conflict("the plan kept changing while it was being published; retry")

    def get(self, user: str, slug: str) -> Plan:
        return self.store.require(user, validate_slug(slug))

    def list(self, user: str, *, limit: int, cursor: str | None) -> tuple[list[Plan], str | None]:
        return self.store.page(user, limit=limit, cursor=cursor)

    def confirm(self, user: str, slug: str, content_hash: str | None = None) -> Plan:
        return self.store.confirm(user, validate_slug(slug), content_hash=content_hash, now=self.clock())

    def submit(self, user: str, slug: str) -> Plan:
        return self.store.submit(user, validate_slug(slug), now=self.clock())

    def archive(self, user: str, slug: str) -> Plan:
        return self.store.archive(user, validate_slug(slug), now=self.clock())
