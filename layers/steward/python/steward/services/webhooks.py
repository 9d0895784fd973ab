"""The GitHub webhook receiver (DESIGN section 7): verify, parse, record, act.

Order, chosen so that input that cannot be processed stores nothing and costs no request:

1. `X-Hub-Signature-256` over the raw body bytes, in constant time, before anything else
   is read: exactly `sha256=` + 64 lowercase hex digits; no secret configured rejects
   everything; a SHA-1-only signature is refused. Failure: 401.
2. `X-GitHub-Event` and `X-GitHub-Delivery` (a UUID): 400 if missing or malformed.
3. An event Steward does not process: ignored (200), nothing read or written.
4. The body must be a JSON object sent as `application/json` (a hook configured for
   form-encoded payloads is refused): 400.
5. An action Steward does not process: ignored. Then githubkit parses the payload; a payload
   GitHub would not send is 400.
6. Pure correlation (pull requests): a canonical task branch (`ids.task_id_from_branch`,
   never guessed), head and base in the event's repository (a fork's branch of the same
   name is not Steward's), an installation id. Otherwise ignored.
7. The delivery is recorded with one conditional put; a duplicate ends here (200
   "duplicate", one DynamoDB request in all).
8. Act. A pull request event whose task, repository or installation does not match (no
   such task, another repository, an installation unknown, suspended, not holding the
   repository or linked to another user) is ignored and its delivery record removed again,
   so it leaves nothing behind; if acting raises, the record is removed too and the error
   propagates (500), so GitHub's redelivery is processed afresh.

Pull requests: the target status is derived from the pull request in the payload (merged ->
merged, closed -> closed, open -> review) and assigned through `TaskStore.transition`, which
is a no-op when the task already has it; a transition the lifecycle forbids (anything after
merged, review after closed) is a logged no-op. States therefore never move backwards, and
a `failed` task moves to review or merged on a verified event.

Installations (ordering rule). Deliveries repeat and arrive out of order, so each
installation event is merged into a per-installation state that is a join of its parts,
keyed by GitHub's own clock, the payload's `installation.updated_at` (the "stamp"):

* each repository has a last-writer-wins entry (stamp, present/absent); a `created` event is
  a snapshot: its repositories are present at its stamp and every entry older than that
  stamp is absent;
* `suspended` and the account login are last-writer-wins registers over every event (each
  payload carries the installation as it was at its stamp);
* `deleted` is a latch: a deleted installation stays suspended with no repositories (its
  owner link is kept);
* ties on equal stamps go to the conservative value (absent, suspended; the larger login),
  so the result never depends on arrival order.

Every part is a maximum over a total order, so any order (and any repetition) of the same
deliveries yields the same stored installation. An installation stored before any webhook
(an operator's or the local stack's `put`) is the baseline, older than every event; once
webhooks have been merged, the next one rewrites the visible fields from the merged state,
so a later plain `put` lasts only until then. The stamp has GitHub's one-second resolution:
two changes within the same second resolve conservatively (a repository added and removed
in one second ends absent) until the next event. Only `link` sets the owner; no event does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, Literal

from githubkit_schemas.latest.models import Enterprise, SimpleUser
from githubkit_schemas.latest.models import Installation as GitHubInstallation
from githubkit_schemas.latest.webhooks import (
    InstallationEvent,
    InstallationRepositoriesEvent,
    PullRequestEvent,
)
from pydantic import TypeAdapter

from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain.errors import BadRequest, Conflict, LifecycleError, Unauthorized
from steward.domain.ids import task_id_from_branch
from steward.domain.installations import Installation
from steward.domain.models import Task, TaskStatus, utcnow

logger = logging.getLogger(__name__)

SIGNATURE_PATTERN = re.compile(r"sha256=[0-9a-f]{64}")
DELIVERY_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EVENT_PATTERN = re.compile(r"[a-z_]{1,64}")

PULL_REQUEST_ACTIONS = frozenset(
    {"opened", "reopened", "closed", "edited", "synchronize", "ready_for_review", "converted_to_draft"}
)
INSTALLATION_ACTIONS = frozenset({"created", "deleted", "suspend", "unsuspend", "new_permissions_accepted"})
INSTALLATION_REPOSITORIES_ACTIONS = frozenset({"added", "removed"})
HANDLED: dict[str, frozenset[str]] = {
    "pull_request": PULL_REQUEST_ACTIONS,
    "installation": INSTALLATION_ACTIONS,
    "installation_repositories": INSTALLATION_REPOSITORIES_ACTIONS,
}
SYNC_ATTEMPTS = 8

Status = Literal["applied", "unchanged", "ignored", "duplicate"]


@dataclass(frozen=True)
class WebhookOutcome:
    """What became of a verified delivery; the HTTP answer is 200 `{"status": status}`."""

    status: Status
    reason: str = ""

    def to_body(self) -> dict[str, str]:
        return {"status": self.status}


class WebhookSecret:
    """The shared secret; its repr never shows the value (services get logged and printed)."""

    __slots__ = ("_value",)

    def __init__(self, value: str | bytes | None) -> None:
        self._value = value.encode() if isinstance(value, str) else (value or b"")

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "WebhookSecret(set)" if self._value else "WebhookSecret(unset)"

    def sign(self, body: bytes) -> str:
        return "sha256=" + hmac.new(self._value, body, hashlib.sha256).hexdigest()


# ---- pure parts


# githubkit's event models, each behind a TypeAdapter built once: `githubkit.webhooks.parse_obj`
# builds a new TypeAdapter on every call (about 12 ms of schema work per delivery).
@cache
def _pull_request_events() -> TypeAdapter[PullRequestEvent]:
    return TypeAdapter(PullRequestEvent)


@cache
def _installation_events() -> TypeAdapter[InstallationEvent]:
    return TypeAdapter(InstallationEvent)


@cache
def _installation_repositories_events() -> TypeAdapter[InstallationRepositoriesEvent]:
    return TypeAdapter(InstallationRepositoriesEvent)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value whatever the case of its name (Function URLs lowercase them)."""
    value = headers.get(name)
    if value is not None:
        return value
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), None)


def signature_matches(secret: WebhookSecret, body: bytes, signature: str | None) -> bool:
    """`X-Hub-Signature-256` is exactly the HMAC-SHA256 of the raw body under the secret.

    The format is checked first (`sha256=` and 64 lowercase hex digits: GitHub's form, so
    upper case, spaces or an empty digest are refused), then the digest in constant time.
    An unset secret matches nothing."""
    if not secret or signature is None or not SIGNATURE_PATTERN.fullmatch(signature):
        return False
    return hmac.compare_digest(secret.sign(body).encode("ascii"), signature.encode("ascii"))


def delivery_id_of(value: str | None) -> str | None:
    """The delivery's GUID, as GitHub sends it (lowercase UUID), or None."""
    if value is None or not DELIVERY_PATTERN.fullmatch(value):
        return None
    return value


def load_payload(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The body as a JSON object; BadRequest for anything else (form-encoded included)."""
    media = (content_type or "application/json").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise BadRequest(
            "webhook payloads must be sent as application/json (set the hook's content type to JSON)",
            field="content-type",
        )
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest("the body is not JSON", field="body") from exc
    if not isinstance(payload, dict):
        raise BadRequest("the body is not a JSON object", field="body")
    return payload


def target_status(*, state: str, merged: bool) -> TaskStatus:
    """The task status a pull request in this state stands for."""
    if merged:
        return TaskStatus.MERGED
    return TaskStatus.CLOSED if state == "closed" else TaskStatus.REVIEW


@dataclass(frozen=True)
class PullRequestFacts:
    """What a verified pull_request event says, reduced to what correlation needs."""

    action: str
    installation_id: int | None
    repository: str
    repository_id: int
    head_ref: str
    head_repository_id: int | None
    base_repository_id: int
    number: int
    url: str
    merged: bool
    target: TaskStatus

    @property
    def task_id(self) -> str | None:
        return task_id_from_branch(self.head_ref)


def pull_request_facts(payload: Mapping[str, Any]) -> PullRequestFacts:
    """Parse a pull_request payload with githubkit (BadRequest if GitHub would not send it)."""
    try:
        event = _pull_request_events().validate_python(payload)
    except ValueError as exc:  # pydantic's ValidationError
        raise BadRequest("the payload is not a valid pull_request event", field="body") from exc
    pr = event.pull_request
    installation = event.installation
    head_repo = pr.head.repo
    return PullRequestFacts(
        action=event.action,
        installation_id=installation.id if installation else None,
        repository=event.repository.full_name,
        repository_id=event.repository.id,
        head_ref=pr.head.ref,
        head_repository_id=head_repo.id if head_repo else None,
        base_repository_id=pr.base.repo.id,
        number=pr.number,
        url=pr.html_url,
        merged=bool(pr.merged),
        target=target_status(state=pr.state, merged=bool(pr.merged)),
    )


def branch_problem(facts: PullRequestFacts) -> str | None:
    """Why a pull request cannot be Steward's, judged from the payload alone."""
    if facts.task_id is None:
        return "the head branch is not a canonical Steward branch"
    if facts.head_repository_id != facts.repository_id or facts.base_repository_id != facts.repository_id:
        return "the head branch lives in another repository (a fork)"
    if facts.installation_id is None:
        return "the event names no installation"
    return None


def correlation_problem(
    facts: PullRequestFacts, task: Task | None, installation: Installation | None
) -> str | None:
    """Why a pull request event must not touch the task its branch names: the task, its
    repository and its owner's live installation holding that repository must all agree."""
    if task is None:
        return "no task owns this branch"
    if installation is None:
        return "the installation is unknown"
    problems = (
        (task.repo.lower() != facts.repository.lower(), "the task belongs to another repository"),
        (installation.owner_sub != task.user, "the installation is not linked to the task's owner"),
        (installation.suspended, "the installation is suspended"),
        (not installation.holds(task.repo), "the installation does not hold the repository"),
    )
    return next((reason for failed, reason in problems if failed), None)


# ---- installations: an order-independent merge (see the module docstring)


@dataclass(frozen=True)
class InstallationChange:
    """One installation or installation_repositories event, as facts stamped with GitHub's
    `installation.updated_at` (milliseconds since the epoch)."""

    installation_id: int
    stamp: int
    account: str | None
    suspended: bool
    snapshot: tuple[str, ...] | None = None  # created: every repository it holds
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    deleted: bool = False


@dataclass(frozen=True)
class RepoEntry:
    name: str
    present: bool
    stamp: int

    def rank(self) -> tuple[int, int, str]:
        # equal stamps: absent wins (conservative), then the larger spelling
        return (self.stamp, 0 if self.present else 1, self.name)


@dataclass(frozen=True)
class InstallationSync:
    """The merged state of every event applied to one installation."""

    repos: Mapping[str, RepoEntry] = field(default_factory=dict)
    snapshot: int = -1  # entries older than the newest `created` snapshot are absent
    suspended: tuple[int, bool] = (-1, False)  # (stamp, value): ties go to suspended
    account: tuple[int, str] = (-1, "")  # (stamp, login): ties go to the larger login
    deleted: bool = False

    def view(self, installation_id: int, owner_sub: str | None) -> Installation:
        """The installation as Steward keeps it: what the merged state says now."""
        if self.deleted:
            repositories: tuple[str, ...] = ()
        else:
            repositories = tuple(
                sorted(
                    (e.name for e in self.repos.values() if e.present and e.stamp >= self.snapshot),
                    key=str.lower,
                )
            )
        return Installation(
            installation_id=installation_id,
            owner_sub=owner_sub,
            account=self.account[1] or None,
            repositories=repositories,
            suspended=self.deleted or self.suspended[1],
        )


def merge(state: InstallationSync, change: InstallationChange) -> InstallationSync:
    """Join one event into the state: commutative, associative and idempotent."""
    repos = dict(state.repos)

    def put(name: str, present: bool) -> None:
        entry = RepoEntry(name, present, change.stamp)
        old = repos.get(name.lower())
        if old is None or entry.rank() > old.rank():
            repos[name.lower()] = entry

    for name in change.snapshot or ():
        put(name, True)
    for name in change.added:
        put(name, True)
    for name in change.removed:
        put(name, False)
    snapshot = max(state.snapshot, change.stamp) if change.snapshot is not None else state.snapshot
    return InstallationSync(
        repos=repos,
        snapshot=snapshot,
        suspended=max(state.suspended, (change.stamp, change.suspended)),
        account=max(state.account, (change.stamp, change.account or "")),
        deleted=state.deleted or change.deleted,
    )


def sync_to_map(state: InstallationSync) -> dict[str, Any]:
    return {
        "repos": {
            k: {"name": e.name, "present": e.present, "stamp": e.stamp} for k, e in state.repos.items()
        },
        "snapshot": state.snapshot,
        "suspended": {"stamp": state.suspended[0], "value": state.suspended[1]},
        "account": {"stamp": state.account[0], "login": state.account[1]},
        "deleted": state.deleted,
    }


def sync_from_map(raw: Mapping[str, Any], stored: Installation | None) -> InstallationSync:
    """The stored merge state; an installation stored without one is the baseline (stamp 0,
    older than any event GitHub sends)."""
    if not raw:
        if stored is None:
            return InstallationSync()
        return InstallationSync(
            repos={r.lower(): RepoEntry(r, True, 0) for r in stored.repositories},
            suspended=(0, stored.suspended),
            account=(0, stored.account or ""),
        )
    return InstallationSync(
        repos={
            k: RepoEntry(str(v["name"]), bool(v["present"]), int(v["stamp"])) for k, v in raw["repos"].items()
        },
        snapshot=int(raw["snapshot"]),
        suspended=(int(raw["suspended"]["stamp"]), bool(raw["suspended"]["value"])),
        account=(int(raw["account"]["stamp"]), str(raw["account"]["login"])),
        deleted=bool(raw["deleted"]),
    )


def _stamp(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _account_login(installation: GitHubInstallation) -> str | None:
    account = installation.account
    if isinstance(account, SimpleUser):
        return account.login
    if isinstance(account, Enterprise):
        return account.slug
    return None


def _names(items: Iterable[Any]) -> tuple[str, ...]:
    """Full names of listed repositories (a removed one may come without its name: skipped)."""
    return tuple(i.full_name for i in items if isinstance(i.full_name, str))


def installation_change(event_name: str, payload: Mapping[str, Any]) -> InstallationChange:
    """Parse an installation or installation_repositories payload with githubkit."""
    snapshot: tuple[str, ...] | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    deleted = False
    try:
        if event_name == "installation":
            event = _installation_events().validate_python(payload)
            installation = event.installation
            deleted = event.action == "deleted"
            if event.action == "created" and isinstance(event.repositories, list):
                snapshot = _names(event.repositories)
        else:
            repo_event = _installation_repositories_events().validate_python(payload)
            installation = repo_event.installation
            added = _names(repo_event.repositories_added)
            removed = _names(repo_event.repositories_removed)
    except ValueError as exc:  # pydantic's ValidationError
        raise BadRequest(f"the payload is not a valid {event_name} event", field="body") from exc
    return InstallationChange(
        installation_id=installation.id,
        stamp=_stamp(installation.updated_at),
        account=_account_login(installation),
        suspended=installation.suspended_at is not None,
        snapshot=snapshot,
        added=added,
        removed=removed,
        deleted=deleted,
    )


# ---- the use case


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
    ) -> None:
        self.secret = secret
        self.deliveries = deliveries
        self.tasks = tasks
        self.installations = installations
        self.clock = clock
        self.ttl_days = ttl_days

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

        event_name = header(headers, "X-GitHub-Event") or ""
        if not EVENT_PATTERN.fullmatch(event_name):
            raise BadRequest("X-GitHub-Event is missing or malformed", field="X-GitHub-Event")
        delivery = delivery_id_of(header(headers, "X-GitHub-Delivery"))
        if delivery is None:
            raise BadRequest("X-GitHub-Delivery is missing or malformed", field="X-GitHub-Delivery")
        context = {"delivery": delivery, "github_event": event_name}
        actions = HANDLED.get(event_name)
        if actions is None:
            return self._ignored("event not processed", context)

        payload = load_payload(body, header(headers, "Content-Type"))
        action = payload.get("action")
        context["action"] = str(action)[:64]
        if not isinstance(action, str) or action not in actions:
            return self._ignored("action not processed", context)

        if event_name == "pull_request":
            facts = pull_request_facts(payload)
            problem = branch_problem(facts)
            if problem:
                return self._ignored(problem, context)
            return self._recorded(
                delivery, event_name, context, lambda now: self._pull_request(facts, now, context)
            )
        change = installation_change(event_name, payload)
        return self._recorded(delivery, event_name, context, lambda now: self._installation(change, now))

    # ---- steps

    def _ignored(self, reason: str, context: Mapping[str, str]) -> WebhookOutcome:
        logger.info("webhook ignored: %s", reason, extra=dict(context))
        return WebhookOutcome("ignored", reason)

    def _recorded(
        self,
        delivery: str,
        event_name: str,
        context: Mapping[str, str],
        act: Callable[[datetime], WebhookOutcome],
    ) -> WebhookOutcome:
        now = self.clock()
        if not self.deliveries.record(delivery, event=event_name, now=now, ttl_days=self.ttl_days):
            logger.info("webhook duplicate delivery", extra=dict(context))
            return WebhookOutcome("duplicate")
        try:
            outcome = act(now)
        except Exception:
            self.deliveries.forget(delivery)
            raise
        if outcome.status == "ignored":
            self.deliveries.forget(delivery)  # it changed nothing: leave nothing behind
        return outcome

    def _pull_request(
        self, facts: PullRequestFacts, now: datetime, context: Mapping[str, str]
    ) -> WebhookOutcome:
        task_id = facts.task_id
        task = self.tasks.get(task_id) if task_id else None
        installation = (
            self.installations.get(facts.installation_id)
            if task is not None and facts.installation_id is not None
            else None
        )
        problem = correlation_problem(facts, task, installation)
        if problem or task is None:
            return self._ignored(problem or "no task owns this branch", context)
        try:
            moved, changed = self.tasks.transition(
                task,
                facts.target,
                now=now,
                event="github_event",
                data={
                    "action": facts.action,
                    "number": facts.number,
                    "url": facts.url,
                    "merged": facts.merged,
                    "delivery": context["delivery"],
                },
                extra={"pr_url": facts.url, "pr_number": facts.number},
                lifecycle_event=True,
            )
        except LifecycleError as exc:
            logger.info("webhook changed nothing: %s", exc.message, extra={**context, "task_id": task.id})
            return WebhookOutcome("unchanged", exc.message)
        if not changed:
            return WebhookOutcome("unchanged", f"the task is already {moved.status.value}")
        self.tasks.project_item(moved, now=now)
        logger.info("webhook moved task to %s", moved.status.value, extra={**context, "task_id": task.id})
        return WebhookOutcome("applied")

    def _installation(self, change: InstallationChange, now: datetime) -> WebhookOutcome:
        for _ in range(SYNC_ATTEMPTS):
            stored, raw, version = self.installations.get_synced(change.installation_id)
            state = sync_from_map(raw, stored)
            merged = merge(state, change)
            owner = stored.owner_sub if stored else None
            view = merged.view(change.installation_id, owner)
            visible = stored is None or not _same(view, stored)
            if raw and merged == state and not visible:
                return WebhookOutcome("unchanged", "already known")
            if self.installations.put_synced(view, sync=sync_to_map(merged), version=version, now=now):
                # the merge state may have advanced without the visible installation changing
                return WebhookOutcome("applied" if visible else "unchanged")
        raise Conflict(f"installation {change.installation_id} kept changing; retry")


def _same(a: Installation, b: Installation) -> bool:
    return (a.account, a.repositories, a.suspended) == (b.account, tuple(b.repositories), b.suspended)
