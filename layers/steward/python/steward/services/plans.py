"""Plan use cases: publish (parse, merge, conditional save) and the lifecycle transitions.

Confirming a new revision of an item cancels the task of the revision it supersedes while
that task is queued or running (`cancelled`, reason `superseded`, docs/concepts/lifecycle.md): after
the approval (one transaction with the loop's wake-up), each item that names a superseded
task (`PlanItem.supersedes`) costs one GetItem, and each cancel one TransactWriteItems (the
task, its event, the wake). These cancels are not part of the approval's transaction: they
would make it conflict with every progress event of the running task, and a plan item can
name its superseded task only until the loop spawns the new revision. The approval is the
durable decision; a cancel lost to a crash or an error here is made by the loop's next tick
(`steward.domain.reconcile:superseded`), which also stops the runtime (the API has no
launcher; the runtime notices the cancel at its next heartbeat either way). The relay, the
token route and publication refuse a cancelled task.

Publish refuses (422, naming the field and its line) what would only fail later: besides the
document's own rules (`steward.domain.documents`), a model the price table lacks and a
budget below one minimal call (`check_priced`), and a repository that no live installation
of the user holds (one Query of the installations' by_owner index per publish). The API
builds the service with both (`steward.wiring:Services.build`); without them (the local
stack's fixtures, the simulation) only the document itself is checked.

What a confirmation approved stays readable (`steward.domain.plan_diff`): a publish that
changes the content writes the kept document of the new content before the plan records its
hash (one S3 PUT; a refused or conflicting save may leave a document no hash of the plan
names, which nothing reads), and a confirm writes the approved content's again (for content
published before documents were kept; its failure leaves the approval standing). `diff`
reads the approved one (one S3 GET, none when nothing changed or nothing was approved).
Without an artifact store (the fixtures, the simulation) nothing is kept, and a diff of a
changed plan answers that the approved content is not kept.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime

from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.installation_store import InstallationStore
from steward.adapters.plan_store import PlanStore
from steward.adapters.task_store import TaskStore
from steward.domain import plan_diff
from steward.domain import plans as plan_rules
from steward.domain.documents import DocumentPolicy, TaskDocument, check_priced, parse_document
from steward.domain.errors import Conflict, InvalidDocument, LifecycleError, NoSuchContent
from steward.domain.ids import plan_id, validate_slug
from steward.domain.models import Plan, PlanKind, Task, TaskStatus, utcnow
from steward.domain.prices import PriceTable
from steward.domain.reconcile import PLAN_ARCHIVED, SUPERSEDED, cancel_code, superseded

logger = logging.getLogger(__name__)

PUBLISH_ATTEMPTS = 8


class PlanService:
    def __init__(
        self,
        store: PlanStore,
        policy: DocumentPolicy,
        *,
        tasks: TaskStore,
        clock: Callable[[], datetime] = utcnow,
        installations: InstallationStore | None = None,
        prices: Callable[[], PriceTable] | None = None,
        documents: ArtifactStore | None = None,
        tick_now: Callable[[str], object] | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.tasks = tasks
        self.clock = clock
        self.installations = installations
        self.prices = prices  # read at each publish (the loader caches it)
        self.documents = documents  # where approved content is kept (None: nowhere)
        # A tick for the user right after a confirm (`steward.adapters.queue:TickNow`, which
        # never raises); None: the scheduler's next window ticks them.
        self.tick_now = tick_now

    def publish(self, user: str, slug: str, markdown: str, *, kind: PlanKind = PlanKind.WORK) -> Plan:
        """Upsert a Task Document. Reads the plan, merges, and writes on the condition that
        nothing changed in between; a concurrent write (a confirm, a spawn linking a task)
        makes it merge again from fresh state, so no task link is ever lost. `kind` is code's
        choice, never the document's: the API publishes work, and only the local fixture
        (`steward.local.fixtures`) passes `PlanKind.FIXTURE`."""
        validate_slug(slug)
        document = parse_document(markdown, self.policy)
        self._check_runnable(user, document)
        kept = False
        for attempt in range(PUBLISH_ATTEMPTS):
            existing = self.store.get(user, slug)
            result = plan_rules.publish(
                existing,
                plan_id=plan_id(user, slug),
                user=user,
                slug=slug,
                document=document,
                now=self.clock(),
                kind=kind,
            )
            if not result.changed:
                return result.plan
            if not kept:  # before the hash is recorded: every hash the plan has names a document
                self._keep(result.plan)
                kept = True
            try:
                return self.store.save(result.plan, expected_version=existing.version if existing else None)
            except Conflict:
                time.sleep(random.uniform(0, 0.01 * 2**attempt))  # noqa: S311 - jitter, not crypto
        raise Conflict("the plan kept changing while it was being published; retry")

    def _check_runnable(self, user: str, document: TaskDocument) -> None:
        """What the deployment knows at publish: the model priced, the budget enough for one
        call, every repository (the front matter's, and each item's own) held by a live
        installation of `user` (else 422 naming where the repository is written)."""
        if self.prices is not None:
            check_priced(document, self.prices())
        if self.installations is None:
            return
        where = {
            document.front_matter.repo: ("front matter: repo", "front_matter.repo", document.line_of("repo"))
        }
        for item in document.items:
            if item.repo is not None and item.repo not in where:
                where[item.repo] = (
                    f"items: checkbox {item.ordinal}: repo",
                    f"items[{item.ordinal}].repo",
                    item.line,
                )
        for repo, (said, field, line) in where.items():
            holding = self.installations.holding(user, repo)
            if any(not installation.suspended for installation in holding):
                continue
            if holding:
                ids = ", ".join(str(installation.installation_id) for installation in holding)
                reason = f"the GitHub App installation that holds it is suspended ({ids})"
            else:
                reason = (
                    "no GitHub App installation linked to you holds it (install the App on the "
                    "repository, and have an operator link the installation to you)"
                )
            raise InvalidDocument(f"{said} {repo}: {reason}", field=field, line=line)

    def get(self, user: str, slug: str) -> Plan:
        return self.store.require(user, validate_slug(slug))

    def list(self, user: str, *, limit: int, cursor: str | None) -> tuple[list[Plan], str | None]:
        """A page of the user's plans without the local fixtures (`PlanKind.FIXTURE`): they
        are no work of the person's, and stay reachable by slug (`get`) from the task that
        `steward local capability` printed. A page may so hold fewer than `limit` plans, or
        none, with `next` still set; clients follow `next` until it is null."""
        plans, next_cursor = self.store.page(user, limit=limit, cursor=cursor)
        return [plan for plan in plans if plan.kind is PlanKind.WORK], next_cursor

    def confirm(self, user: str, slug: str, content_hash: str | None = None) -> Plan:
        """Approve the current content; `content_hash` (the whole hash or its first 12 or more
        hex characters) says which content the person reviewed (rules in
        `steward.adapters.plan_store:PlanStore.confirm`). An approval starts work at once: the
        loop's interval gate does not hold it back, and a tick for the user is enqueued."""
        given = None if content_hash is None else plan_diff.given_hash(content_hash)
        plan = self.store.confirm(user, validate_slug(slug), content_hash=given, now=self.clock())
        self._cancel_superseded(plan)
        if self.tick_now is not None:
            self.tick_now(user)
        if plan.approved_hash == plan.content_hash:
            try:
                self._keep(plan)
            except Exception:  # the approval stands; the publish kept this content already
                logger.exception("keeping the approved document of plan %s failed", plan.id)
        return plan

    def _keep(self, plan: Plan) -> None:
        """Write the kept document of the plan's current content (idempotent)."""
        content = plan_diff.content_of(plan)
        if self.documents is None or content.content_hash != plan.content_hash:
            return
        text = plan_diff.kept_document(content, plan.title)
        self.documents.put_plan_document(plan.id, plan.content_hash, text)

    def diff(self, user: str, slug: str) -> plan_diff.PlanDiff:
        """What changed since the last confirmation (everything, if the plan was never confirmed)."""
        plan = self.get(user, slug)
        current = plan_diff.content_of(plan)
        if plan.approved_hash is None:
            return plan_diff.diff(None, current)
        if plan.approved_hash == plan.content_hash:
            return plan_diff.diff(current, current)
        return plan_diff.diff(self._approved(plan, plan.approved_hash), current)

    def _approved(self, plan: Plan, content_hash: str) -> plan_diff.PlanContent:
        text = None if self.documents is None else self.documents.plan_document(plan.id, content_hash)
        if text is not None:
            try:
                return plan_diff.read_kept(text, content_hash)
            except ValueError:
                logger.exception("the kept document %s of plan %s is unreadable", content_hash, plan.id)
        raise NoSuchContent(
            f"the approved content {content_hash[:12]} of plan {plan.slug!r} is not kept (approved "
            "before Steward kept approved documents): read the plan as it is with `steward plan show`",
            field="approved_hash",
        )

    def _cancel_superseded(self, plan: Plan) -> None:
        """Cancel each queued or running task that the approved plan supersedes. Idempotent:
        a cancelled task stays as it is, one that reached review keeps its pull request."""
        for item in plan.active_items:
            if item.supersedes is None:
                continue
            try:
                task = self.tasks.get(item.supersedes)
                if task is not None and superseded(plan, task):
                    self._cancel_run(task, SUPERSEDED)
            except Exception:  # the approval stands; the loop's next tick cancels it
                logger.exception("cancelling superseded task %s failed", item.supersedes)

    def _cancel_run(self, task: Task, reason: str) -> None:
        """Cancel `task` if still queued or running (its runtime stops at its next heartbeat,
        and publication's re-check refuses it); one that reached review keeps its pull request."""
        if task.status not in (TaskStatus.QUEUED, TaskStatus.RUNNING):
            return
        with contextlib.suppress(LifecycleError):  # it reached review meanwhile
            self.tasks.transition(
                task,
                TaskStatus.CANCELLED,
                now=self.clock(),
                event="cancelled",
                classification="final",
                reason=reason,
                extra={"failure_code": cancel_code(reason)},
            )

    def submit(self, user: str, slug: str) -> Plan:
        return self.store.submit(user, validate_slug(slug), now=self.clock())

    def archive(self, user: str, slug: str) -> Plan:
        """Archive the plan and cancel its queued and running tasks at once (the loop's next
        tick would too: this spares their runtimes the wait, so none publishes for an
        archived plan). A task in review keeps its pull request."""
        plan = self.store.archive(user, validate_slug(slug), now=self.clock())
        try:
            for task in self.tasks.live_for_user(user):
                if task.plan_id == plan.id:
                    self._cancel_run(task, PLAN_ARCHIVED)
        except Exception:  # the archive stands; the loop's next tick cancels what is left
            logger.exception("cancelling the tasks of archived plan %s failed", plan.id)
        return plan
