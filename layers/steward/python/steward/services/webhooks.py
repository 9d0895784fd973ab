"""The GitHub webhook receiver (docs/concepts/github.md): verify, parse, record, act. The rules it
applies (signature, payload reading, correlation, the installation merge) are pure and live
in `steward.domain.webhooks`; this module orders them and talks to the stores.

Order, chosen so that input that cannot be processed stores nothing and costs no request:

1. `X-Hub-Signature-256` over the raw body bytes, in constant time, before anything else
   is read; no secret configured rejects everything. Failure: 401.
2. `X-GitHub-Event` and `X-GitHub-Delivery` (a UUID): 400 if missing or malformed.
3. An event Steward does not process: ignored (200), nothing read or written.
4. The body must be a JSON object sent as `application/json` (a hook configured for
   form-encoded payloads is refused): 400.
5. An action Steward does not process: ignored. Then the fields Steward uses are read; a
   verified delivery lacking one is 400 naming it (fields Steward does not read never
   matter).
6. Pure correlation (pull requests): a canonical task branch, head and base in the event's
   repository, an installation id. Otherwise ignored.
7. A delivery whose effect was committed before ends here (200 "duplicate", one
   consistent read in all).
8. Act. The effect and the delivery's "processed" mark commit in one transaction (the
   task transition, or the installation sync), so no acknowledged delivery is ever lost:
   a failure at any write answers 5xx, leaves neither, and GitHub's redelivery is
   processed afresh; a concurrent copy that committed first makes this one a duplicate. A
   pull request event whose task, repository or installation does not match (no such task,
   another repository, an installation unknown, suspended, not holding the repository or
   linked to another user) is ignored, and like any delivery that changes nothing it stores
   nothing. The item projection after a transition may fail on its own: the loop repairs
   projections from the task (the truth).

Pull requests: the target status is assigned through `TaskStore.transition`, which is a
no-op when the task already has it; a transition the lifecycle forbids (anything after
merged) is a logged no-op. States therefore never move backwards, except that a person's
reopen (`reopened`) brings a closed task back to review (`domain.webhooks.reopened`; a late
`opened` does not), and a `failed` task moves to review or merged on a verified event. A
task Steward withdrew stays closed when its pull request is reopened: it is marked for the
loop to close it again (`TaskStore.close_again`).

Follow-up triggers (`steward.domain.follow_ups`: a review requesting changes, a mention, a
failing check): a trigger on the pull request of a task in review, correlated as a pull request
event is (its branch, the task's repository, the owner's live installation holding it), is
recorded by `steward.services.asks` in one transaction with the delivery's mark: once per
round key (pull request, head commit, kind) and once per GitHub object, so a redelivery under
another id, a review's inline comment or a second failing check on one commit changes
nothing. A conversation comment names only its pull request's number: once the delivery is
known to be new, GitHub is asked for that pull request's head. A recorded ask starts work at
once: its wake lets the loop's next tick through the interval gate, and a tick for the task's
owner is enqueued (`tick_now`) once the record is committed.

Installations: each event is merged into the installation's stored merge state
(`domain.webhooks.merge`, order-independent) under an optimistic version check, and the
visible installation is rewritten from the merged state. A merged state whose deliveries
disagree at one stamp is logged and stored with `needs_refresh` (the hook for re-reading
the installation from GitHub; not done here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.dynamo import IncludedWriteRefused
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain.errors import BadRequest, LifecycleError, Unauthorized
from steward.domain.follow_ups import (
    TRIGGER_EVENTS,
    Trigger,
    trigger_branch,
    trigger_of,
)
from steward.domain.ids import task_id_from_branch
from steward.domain.models import Task, utcnow
from steward.domain.webhooks import (
    HANDLED,
    NO_ACTION,
    InstallationChange,
    NamesRepository,
    PullRequestFacts,
    Reopened,
    WebhookOutcome,
    WebhookSecret,
    branch_problem,
    correlation_problem,
    delivery_id_of,
    event_name_of,
    header,
    installation_change,
    load_payload,
    pull_request_facts,
    reopened,
    signature_matches,
)
from steward.services.asks import AskReader, Asks
from steward.services.installations import sync_installation


class PullHeads(AskReader, Protocol):
    def pull_head(self, installation_id: int, repo: str, number: int) -> tuple[str, str] | None: ...


# The handler and the local stack import the secret and the outcome from here with the service.
logger = logging.getLogger(__name__)


class WebhookReceiver:
    """Processes one delivery: `receive(body, headers)`; see the module docstring."""

    def __init__(
        self,
        *,
        secret: WebhookSecret,
        deliveries: DeliveryStore,
        tasks: TaskStore,
        installations: InstallationStore,
        clock: Callable[[], datetime] = utcnow,
        ttl_days: int = 14,
        app_slug: str = "steward",
        pulls: Callable[[], PullHeads] | None = None,
        tick_now: Callable[[str], object] | None = None,
    ) -> None:
        self.secret = secret
        self.deliveries = deliveries
        self.tasks = tasks
        self.installations = installations
        self.pulls = pulls  # a conversation comment's pull request head, from GitHub
        self.asks = Asks(tasks, pulls)
        # A tick for the owner right after a recorded ask (`steward.adapters.queue:TickNow`,
        # which never raises); None: the scheduler's next window ticks them.
        self.tick_now = tick_now
        self.clock = clock
        self.ttl_days = ttl_days
        self.app_slug = app_slug

    def receive(self, body: bytes, headers: Mapping[str, str]) -> WebhookOutcome:
        """Unauthorized (401) for a signature that does not verify, BadRequest (400) for a
        verified delivery that cannot be processed, else the outcome."""
        if not self.secret:
            logger.warning("webhook refused: no webhook secret is configured")
            raise Unauthorized("signature verification failed", field="X-Hub-Signature-256")
        if not signature_matches(self.secret, body, header(headers, "X-Hub-Signature-256")):
            present = header(headers, "X-Hub-Signature-256") is not None
            logger.warning(
                "webhook refused: %s", "signature does not verify" if present else "no X-Hub-Signature-256"
            )
            raise Unauthorized("signature verification failed", field="X-Hub-Signature-256")

        event_name = event_name_of(header(headers, "X-GitHub-Event"))
        if event_name is None:
            raise BadRequest("X-GitHub-Event is missing or malformed", field="X-GitHub-Event")
        delivery = delivery_id_of(header(headers, "X-GitHub-Delivery"))
        if delivery is None:
            raise BadRequest("X-GitHub-Delivery is missing or malformed", field="X-GitHub-Delivery")
        context = {"delivery": delivery, "github_event": event_name}
        actions = HANDLED.get(event_name)
        if actions is None:
            return self._ignored("event not processed", context)

        payload = load_payload(body, header(headers, "Content-Type"))
        action = payload.get("action", NO_ACTION if NO_ACTION in actions else None)
        context["action"] = str(action)[:64]
        if not isinstance(action, str) or action not in actions:
            return self._ignored("action not processed", context)

        if event_name in TRIGGER_EVENTS:
            return self._trigger_delivery(event_name, payload, delivery, context)

        if event_name == "pull_request":
            facts = pull_request_facts(payload)
            problem = branch_problem(facts)
            if problem:
                return self._ignored(problem, context)
            return self._once(
                delivery, event_name, context, lambda now, mark: self._pull_request(facts, now, mark, context)
            )
        change = installation_change(event_name, payload)
        return self._once(
            delivery, event_name, context, lambda now, mark: self._installation(change, now, mark)
        )

    # ---- steps

    def _ignored(self, reason: str, context: Mapping[str, str]) -> WebhookOutcome:
        logger.info("webhook ignored: %s", reason, extra=dict(context))
        return WebhookOutcome("ignored", reason)

    def _once(
        self,
        delivery: str,
        event_name: str,
        context: Mapping[str, str],
        act: Callable[[datetime, Mapping[str, Any]], WebhookOutcome],
    ) -> WebhookOutcome:
        """Apply a delivery at most once: `act` commits its effect together with the
        delivery's mark, so a failure anywhere (answered 5xx) leaves neither and GitHub's
        redelivery is processed afresh; a delivery that changes nothing stores nothing."""
        now = self.clock()
        if self.deliveries.seen(delivery, now=now):
            logger.info("webhook duplicate delivery", extra=dict(context))
            return WebhookOutcome("duplicate")
        mark = self.deliveries.mark(delivery, event=event_name, now=now, ttl_days=self.ttl_days)
        try:
            return act(now, mark)
        except IncludedWriteRefused:  # a concurrent copy of this delivery committed first
            logger.info("webhook duplicate delivery", extra=dict(context))
            return WebhookOutcome("duplicate")

    def _correlated(
        self, task_id: str | None, installation_id: int | None, facts: NamesRepository
    ) -> tuple[Task | None, str]:
        """The task a delivery's branch names, or None and why it must not be touched."""
        task = self.tasks.get(task_id) if task_id else None
        installation = (
            self.installations.get(installation_id)
            if task is not None and installation_id is not None
            else None
        )
        problem = correlation_problem(facts, task, installation)
        if problem or task is None:
            return None, problem or "no task owns this branch"
        return task, ""

    def _pull_request(
        self, facts: PullRequestFacts, now: datetime, mark: Mapping[str, Any], context: Mapping[str, str]
    ) -> WebhookOutcome:
        task, problem = self._correlated(facts.task_id, facts.installation_id, facts)
        if task is None:
            return self._ignored(problem, context)
        event = {
            "action": facts.action,
            "number": facts.number,
            "url": facts.url,
            "merged": facts.merged,
            "delivery": context["delivery"],
        }
        back = reopened(task, facts.target, action=facts.action)
        if back in (Reopened.STALE, Reopened.CLOSE_AGAIN):
            return self._not_reopened(back, task, event, now, mark)
        try:
            moved, changed = self.tasks.transition(
                task,
                facts.target,
                now=now,
                event="github_event",
                data=event,
                extra={"pr_url": facts.url, "pr_number": facts.number},
                lifecycle_event=True,
                include=[mark],
            )
        except LifecycleError as exc:
            logger.info("webhook changed nothing: %s", exc.message, extra={**context, "task_id": task.id})
            return WebhookOutcome("unchanged", exc.message)
        if not changed:
            return WebhookOutcome("unchanged", f"the task is already {moved.status.value}")
        self.tasks.project_item(moved, now=now)
        logger.info("webhook moved task to %s", moved.status.value, extra={**context, "task_id": task.id})
        return WebhookOutcome("applied")

    def _trigger_delivery(
        self, event_name: str, payload: Mapping[str, Any], delivery: str, context: Mapping[str, str]
    ) -> WebhookOutcome:
        trigger = trigger_of(event_name, payload, app_slug=self.app_slug)
        if trigger is None:
            return self._ignored("asks for no follow-up", context)
        return self._once(
            delivery, event_name, context, lambda now, mark: self._trigger(trigger, now, mark, context)
        )

    def _headed(self, trigger: Trigger) -> tuple[Trigger, str] | str:
        """The trigger with its pull request's head and the Steward branch it names, or why
        not. A conversation comment names only its pull request's number: GitHub names its
        head (asked only for a delivery not seen before)."""
        if trigger.head_ref is None and not trigger.branches and trigger.pull_number is not None:
            if self.pulls is None or trigger.installation_id is None:
                return "a comment's pull request is read with the GitHub App, unset here"
            head = self.pulls().pull_head(trigger.installation_id, trigger.repository, trigger.pull_number)
            if head is None:
                return "its pull request's head is not a branch of the repository"
            trigger = replace(trigger, head_ref=head[0], head_sha=head[1])
        branch = trigger_branch(trigger)
        return "names no Steward branch" if branch is None else (trigger, branch)

    def _trigger(
        self,
        trigger: Trigger,
        now: datetime,
        mark: Mapping[str, Any],
        context: Mapping[str, str],
    ) -> WebhookOutcome:
        headed = self._headed(trigger)
        if isinstance(headed, str):
            return self._ignored(headed, context)
        trigger, branch = headed
        task, problem = self._correlated(task_id_from_branch(branch), trigger.installation_id, trigger)
        if task is None:
            return self._ignored(problem, context)
        outcome = self.asks.record(
            task, trigger, now=now, origin={"delivery": context["delivery"]}, include=[mark]
        )
        if outcome.status == "applied" and self.tick_now is not None:
            self.tick_now(task.user)  # the record is committed: the loop may act on it now
        return outcome

    def _not_reopened(
        self, back: Reopened, task: Task, event: Mapping[str, Any], now: datetime, mark: Mapping[str, Any]
    ) -> WebhookOutcome:
        """A closed task's pull request is open, and the task stays closed: a late `opened`
        changes nothing; a withdrawn task's pull request is marked to be closed again."""
        if back is Reopened.STALE:
            return WebhookOutcome("unchanged", "a closed pull request comes back only by its reopen")
        if not self.tasks.close_again(task, event, now=now, include=[mark]):
            return WebhookOutcome("unchanged", "its pull request is being closed again already")
        logger.info(
            "webhook: a withdrawn task's pull request was reopened; the loop closes it again",
            extra={"task_id": task.id},
        )
        return WebhookOutcome("applied")

    def _installation(
        self, change: InstallationChange, now: datetime, mark: Mapping[str, Any]
    ) -> WebhookOutcome:
        return WebhookOutcome(sync_installation(self.installations, change, now=now, include=[mark]))
