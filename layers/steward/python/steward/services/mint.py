"""The runtime's entry: a one-time ticket exchanged for its capability (DESIGN sections 5, 6).

Order matters. The ticket is consumed first, by one conditional delete, so of any number of
concurrent exchanges exactly one proceeds, and a refused exchange still uses the ticket up
(a runtime that was refused has nothing to retry with: its task is failed by the reaper and
retried by the loop with a fresh ticket). Then every check reads durable state — the task's
status, the user's live installation holding the repository, the model's price entry — and
only after all of them is anything signed. A failure of KMS after the ticket is consumed
also ends that runtime; the loop's retry covers it the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from steward.adapters.capability_signer import KmsCapabilitySigner
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.domain.capability import MAX_LIFETIME_SECONDS, Capability, capability_claims
from steward.domain.errors import Forbidden, LifecycleError, Unauthorized
from steward.domain.models import TaskStatus, iso, utcnow

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
        if not any(i.holds(task.repo) for i in self.installations.for_owner(task.user)):
            raise Forbidden(
                f"no live GitHub App installation of the task's owner holds {task.repo}", field="repo"
            )
        if self.prices is not None:
            self.prices(task.model)
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
