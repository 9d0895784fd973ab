"""The runtime's entry: a one-time ticket exchanged for its capability (docs/concepts/relay.md, docs/concepts/runner.md).

Order matters. The ticket is consumed first, by one conditional delete, so of any number of
concurrent exchanges exactly one proceeds, and a refused exchange still uses the ticket up
(a runtime that was refused has nothing to retry with). A refusal that will not change by
itself (no installation of the owner lists the repository at all, or the model is not
priced) ends the task `failed` `final` at once with that reason; any other (a suspended
installation, a task that moved on) leaves it to the reaper and the loop's retry with a
fresh ticket. Then every check reads durable state — the task's
status, the user's live installation holding the repository, the model's price entry — and
only after all of them is anything signed. A failure of KMS after the ticket is consumed
also ends that runtime; the loop's retry covers it the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from steward.adapters.capability_signer import KmsCapabilitySigner
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.domain.capability import MAX_LIFETIME_SECONDS, Capability, capability_claims
from steward.domain.errors import Forbidden, LifecycleError, StewardError, Unauthorized
from steward.domain.failures import FailureCode
from steward.domain.models import Task, TaskStatus, iso, utcnow

logger = logging.getLogger(__name__)

LAUNCHABLE = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING})


# Raises a 403 StewardError (a Forbidden) for a model the price table does not hold.
PriceCheck = Callable[[str], object]


class Minter:
    """Exchanges tickets for capabilities.

    `prices` is the price table's lookup (`load_price_table().entry`, as
    `steward.wiring.minter` wires it); None skips the price check and exists only for the
    tests of this module.
    """

    def __init__(
        self,
        tickets: TicketStore,
        tasks: TaskStore,
        installations: InstallationStore,
        signer: KmsCapabilitySigner,
        prices: PriceCheck | None,
        *,
        clock: Callable[[], datetime] = utcnow,
        lifetime_seconds: int = 3600,
    ) -> None:
        if not 0 < lifetime_seconds <= MAX_LIFETIME_SECONDS:
            raise ValueError(f"lifetime_seconds must be within 1..{MAX_LIFETIME_SECONDS}")
        self.tickets = tickets
        self.tasks = tasks
        self.installations = installations
        self.signer = signer
        self.prices = prices
        self.clock = clock
        self.lifetime_seconds = lifetime_seconds

    def _end_for_good(
        self,
        task: Task,
        refusal: StewardError,
        now: datetime,
        *,
        code: FailureCode = FailureCode.CANNOT_START,
    ) -> None:
        """A task that cannot start for a reason that will not change by itself ends `failed`
        `final` at once with that reason (not `retryable` after the launch grace), so the
        loop does not retry it and the person reads why. Best effort: the refusal is
        answered either way, and a task that moved on meanwhile is left as it is."""
        try:
            ended, changed = self.tasks.transition(
                task,
                TaskStatus.FAILED,
                now=now,
                event="finished",
                data={"refused": refusal.code, "field": refusal.field},
                classification="final",
                reason=f"cannot start: {refusal.message}",
                extra={"failure_code": code},
            )
            if changed:
                self.tasks.project_item(ended, now=now)
        except StewardError as exc:
            logger.info("task %s not ended after a refused exchange: %s", task.id, exc.message)

    def exchange(self, ticket: str) -> dict[str, object]:
        """{"task_id", "capability", "expires_at"} for a valid ticket, once."""
        now = self.clock()
        task_id = self.tickets.consume(ticket, now=now)
        if task_id is None:
            raise Unauthorized("ticket unknown, used or expired")
        task = self.tasks.get(task_id)
        if task is None:
            raise Unauthorized("the ticket's task no longer exists")
        if task.status not in LAUNCHABLE:
            raise LifecycleError(f"the task is {task.status.value}; it cannot start", field="status")
        installations = self.installations.for_owner(task.user)
        if not any(i.holds(task.repo) for i in installations):
            refusal = Forbidden(
                f"no live GitHub App installation of the task's owner holds {task.repo}", field="repo"
            )
            # Held by none at all will not change by itself; held only by a suspended one may
            # (a person unsuspends it), so that task is left to the reaper and the loop's retry.
            if not any(i.lists(task.repo) for i in installations):
                self._end_for_good(task, refusal, now, code=FailureCode.INSTALLATION_MISSING)
            raise refusal
        if self.prices is not None:
            try:
                self.prices(task.model)
            except StewardError as exc:  # an unpriced model: no retry can price it
                self._end_for_good(task, exc, now)
                raise
        claims = capability_claims(
            sub=task.user,
            task_id=task.id,
            model_id=task.model,
            max_budget_usd=task.budget_usd,
            now=now,
            lifetime_seconds=self.lifetime_seconds,
        )
        capability = self.signer.mint(claims)
        expires = Capability.model_validate(claims).exp
        return {
            "task_id": task.id,
            "capability": capability,
            "expires_at": iso(datetime.fromtimestamp(expires, UTC)),
        }
