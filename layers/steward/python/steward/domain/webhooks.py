"""GitHub webhook rules (docs/concepts/github.md), pure: signature, headers, payloads, correlation
and the order-independent installation merge. `steward.services.webhooks` applies them
with the stores.

Signature. `X-Hub-Signature-256` is exactly `sha256=` + 64 lowercase hex digits, the
HMAC-SHA256 of the raw body under the shared secret, compared in constant time; an unset
secret matches nothing; a SHA-1-only signature is refused.

Payloads. Each event is read with a small local model of the few fields Steward uses;
every other field is ignored and nulls are accepted where GitHub sends them. GitHub's own
generated schemas (githubkit-schemas) are deliberately not used: they change with every
release and refuse real deliveries (a label without `archived_by`, an installation without
`app_slug`, a pull request without `auto_merge`). A verified delivery lacking a field
Steward needs is a BadRequest whose `field` names it (`pull_request.head.ref`); one lacking
only fields Steward never reads is processed. Read per event:

* pull_request: action; pull_request.number, state, merged (null or absent on an open
  pull request: not merged), html_url, head.ref, head.repo.id (null when the fork was
  deleted: then the branch is not Steward's), base.repo.id; repository.id, full_name;
  installation.id (absent on a repository hook's delivery: ignored).
* installation, installation_repositories: action; installation.id, account (a user or an
  organization by `login`, an enterprise by `slug` or `name`; may be null), updated_at (an
  ISO 8601 string, or epoch seconds as octokit's examples carry; an offset-less time is
  UTC), suspended_at; repositories (created), repositories_added / repositories_removed
  (full_name; an entry without one is skipped).

Correlation (pull requests): a canonical task branch (`ids.task_id_from_branch`, never
guessed), head and base in the event's repository (a fork's branch of the same name is not
Steward's), an installation id; then the task, its repository and its owner's live
installation holding that repository must all agree. The target status is derived from the
pull request (merged -> merged, closed -> closed, open -> review); a closed task follows an
open pull request back to review only when a person reopened it (`reopened`), never when
Steward withdrew the task.

Installations (ordering rule). Deliveries repeat and arrive out of order, so each
installation event is merged into a per-installation state that is a join of its parts,
keyed by GitHub's own clock, the payload's `installation.updated_at` (the "stamp",
milliseconds since the epoch, one-second resolution in practice):

* each repository has a last-writer-wins entry (stamp, present/absent); a `created` event is
  a snapshot: its repositories are present at its stamp and every entry older than that
  stamp is absent; at one stamp, absent wins (holding a repository is a grant: not granted
  on doubt);
* the account login is a last-writer-wins register over the events that name one (at one
  stamp the larger login wins);
* `suspended` is a last-writer-wins register over every event (each payload carries the
  installation as it was at its stamp). At one stamp the action decides: another event's
  report (`suspended_at` of created, new_permissions_accepted, installation_repositories)
  < `suspend` < `unsuspend`, and between two reports, suspended. Why this order: a suspend
  sets `suspended_at` and `updated_at` to the same instant (octokit's example), so a report
  stamped alike was made before it; an unsuspend undoes a suspension, so it comes after the
  suspend it shares a stamp with (octokit's unsuspend keeps the suspend's `updated_at`:
  ordering that tie the conservative way left every such installation suspended for good);
* `deleted` is a latch: a deleted installation stays suspended with no repositories (its
  owner link is kept).

Every part is a maximum over a total order (and a union at equal stamps), so any order and
any repetition of the same deliveries yields the same state. Where deliveries with the same
stamp disagree (suspended or not, a repository present or absent, two logins), the choice
above is provisional and the state records the dispute: `InstallationSync.needs_refresh`.
The loop's resync re-reads such an installation from GitHub's API (`refresh_change`: the
read merged as one more change, stamped just after the disputed ones, so it settles them
without another vote); a later stamp settles a dispute too.

An installation stored before any webhook (an operator's or the local stack's `put`) is the
baseline, stamp 0, older than every event; once webhooks have been merged, the next one
rewrites the visible fields from the merged state, so a later plain `put` lasts only until
then. Only `link` sets the owner; no event does.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from steward.domain import lifecycle
from steward.domain.errors import BadRequest
from steward.domain.ids import task_id_from_branch
from steward.domain.installations import Installation
from steward.domain.models import Task, TaskStatus

SIGNATURE_PATTERN = re.compile(r"sha256=[0-9a-f]{64}")
DELIVERY_PATTERN = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
EVENT_PATTERN = re.compile(r"[a-z_]{1,64}")

PULL_REQUEST_ACTIONS = frozenset(
    {"opened", "reopened", "closed", "edited", "synchronize", "ready_for_review", "converted_to_draft"}
)
INSTALLATION_ACTIONS = frozenset({"created", "deleted", "suspend", "unsuspend", "new_permissions_accepted"})
INSTALLATION_REPOSITORIES_ACTIONS = frozenset({"added", "removed"})
NO_ACTION = ""  # the action of an event GitHub sends without one (`status`)
HANDLED: dict[str, frozenset[str]] = {
    "pull_request": PULL_REQUEST_ACTIONS,
    "installation": INSTALLATION_ACTIONS,
    "installation_repositories": INSTALLATION_REPOSITORIES_ACTIONS,
    # Follow-up triggers (`steward.domain.follow_ups`); a commit status carries no action.
    "pull_request_review": frozenset({"submitted"}),
    "pull_request_review_comment": frozenset({"created"}),
    "issue_comment": frozenset({"created"}),
    "check_run": frozenset({"completed"}),
    "check_suite": frozenset({"completed"}),
    "status": frozenset({NO_ACTION}),
}

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


# ---- headers and body


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


def event_name_of(value: str | None) -> str | None:
    """The `X-GitHub-Event` name (lowercase letters and underscores), or None."""
    if value is None or not EVENT_PATTERN.fullmatch(value):
        return None
    return value


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
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # nesting too deep: not JSON we take
        raise BadRequest("the body is not JSON", field="body") from exc
    if not isinstance(payload, dict):
        raise BadRequest("the body is not a JSON object", field="body")
    return payload


# ---- what Steward reads of GitHub's payloads (see the module docstring)


class PayloadModel(BaseModel):
    """What Steward reads of a GitHub payload: GitHub adds fields all the time and Steward
    reads a handful, so the rest is ignored (`steward.domain.follow_ups` reads with it too)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class RepositoryRef(PayloadModel):
    id: int


class Head(PayloadModel):
    ref: str
    repo: RepositoryRef | None = None  # null when the fork it came from was deleted


class Base(PayloadModel):
    repo: RepositoryRef


class PullRequestBody(PayloadModel):
    number: int
    state: Literal["open", "closed"]
    merged: bool | None = None  # null or absent on some open pull requests: not merged
    html_url: str
    head: Head
    base: Base


class RepositoryBody(PayloadModel):
    id: int
    full_name: str


class InstallationRef(PayloadModel):
    id: int


class PullRequestEvent(PayloadModel):
    action: str
    pull_request: PullRequestBody
    repository: RepositoryBody
    installation: InstallationRef | None = None  # a repository hook's delivery has none


class AccountBody(PayloadModel):
    login: str | None = None  # users and organizations
    slug: str | None = None  # enterprises
    name: str | None = None

    @property
    def handle(self) -> str | None:
        return self.login or self.slug or self.name


class InstallationBody(PayloadModel):
    id: int
    account: AccountBody | None = None
    updated_at: datetime
    suspended_at: Any = None  # only whether it is set matters

    @field_validator("updated_at", mode="before")
    @classmethod
    def _epoch_seconds(cls, value: Any) -> Any:
        # octokit's examples carry epoch seconds; pydantic alone would read a large number as
        # milliseconds, so numbers are converted here, always as seconds.
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return datetime.fromtimestamp(value, UTC)
            except (OverflowError, OSError, ValueError) as exc:
                raise ValueError("epoch seconds out of range") from exc
        return value


class Listed(PayloadModel):
    full_name: str | None = None  # a removed repository may come without its name


class InstallationEvent(PayloadModel):
    action: str
    installation: InstallationBody
    repositories: list[Listed] | None = None


class InstallationRepositoriesEvent(PayloadModel):
    action: str
    installation: InstallationBody
    repositories_added: list[Listed] | None = None
    repositories_removed: list[Listed] | None = None


_Event = TypeVar("_Event", bound=PayloadModel)


def _where(loc: Iterable[int | str]) -> str:
    """A pydantic location as a path: `repositories_added[0].full_name`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "body"


def read_payload(model: type[_Event], payload: Mapping[str, Any], event_name: str) -> _Event:
    """The payload through `model`; BadRequest naming the first field Steward cannot use."""
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = _where(error["loc"])
        if error["type"] == "missing":
            problem = "is missing"
        elif error.get("input", ...) is None:
            problem = "is null"
        else:
            problem = f"is not usable ({error['msg']})"
        raise BadRequest(f"the {event_name} payload's {where} {problem}", field=where) from exc


# ---- pull requests


def target_status(*, state: str, merged: bool) -> TaskStatus:
    """The task status a pull request in this state stands for."""
    if merged:
        return TaskStatus.MERGED
    return TaskStatus.CLOSED if state == "closed" else TaskStatus.REVIEW


class Reopened(StrEnum):
    """What a pull request found open means for a closed task (`reopened`)."""

    NO = "no"  # the task is not closed, or the pull request is not open: the usual rules
    FOLLOW = "follow"  # a person reopened it: the task is back in review
    STALE = "stale"  # a delivery older than the close (a late `opened`): nothing changes
    CLOSE_AGAIN = "close_again"  # Steward withdrew the task: it stays closed, the loop closes it


def reopened(task: Task, target: TaskStatus, *, action: str | None) -> Reopened:
    """A pull request event (`action`), or resync's observation of GitHub now (`action`
    None), says the pull request of `task` is open (`target` review). A closed task follows
    a person's reopen back to review, but only on the `reopened` delivery itself or on what
    GitHub says now: deliveries come out of order, and a late `opened` is older than the
    close. A task Steward withdrew stays closed: the withdrawal stands."""
    if task.status is not TaskStatus.CLOSED or target is not TaskStatus.REVIEW:
        return Reopened.NO
    if not lifecycle.follows_reopen(task.status, task.reason):
        return Reopened.CLOSE_AGAIN
    if action is not None and action != "reopened":
        return Reopened.STALE
    return Reopened.FOLLOW


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
    """The facts of a pull_request payload (BadRequest naming a field Steward needs)."""
    event = read_payload(PullRequestEvent, payload, "pull_request")
    pr = event.pull_request
    merged = bool(pr.merged)
    return PullRequestFacts(
        action=event.action,
        installation_id=event.installation.id if event.installation else None,
        repository=event.repository.full_name,
        repository_id=event.repository.id,
        head_ref=pr.head.ref,
        head_repository_id=pr.head.repo.id if pr.head.repo else None,
        base_repository_id=pr.base.repo.id,
        number=pr.number,
        url=pr.html_url,
        merged=merged,
        target=target_status(state=pr.state, merged=merged),
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


class NamesRepository(Protocol):
    """A delivery's facts that name the repository they happened in."""

    @property
    def repository(self) -> str: ...


def correlation_problem(
    facts: NamesRepository, task: Task | None, installation: Installation | None
) -> str | None:
    """Why a pull request event (or a follow-up trigger) must not touch the task its branch
    names: the task, its repository and its owner's live installation holding that
    repository must all agree."""
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

# At one stamp: another event's report of `suspended_at` < suspend < unsuspend.
REPORT, SUSPEND, UNSUSPEND, READ = 0, 1, 2, 3


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
    # REPORT, or SUSPEND / UNSUSPEND for those actions: what decides a tie on `suspended`
    precedence: int = REPORT


@dataclass(frozen=True)
class RepoEntry:
    name: str
    present: bool
    stamp: int
    disputed: bool = False  # deliveries at this stamp said both present and absent

    def join(self, other: RepoEntry) -> RepoEntry:
        if self.stamp != other.stamp:
            return self if self.stamp > other.stamp else other
        return RepoEntry(
            name=max(self.name, other.name),  # the spelling, deterministically
            present=self.present and other.present,  # absent wins
            stamp=self.stamp,
            disputed=self.disputed or other.disputed or self.present != other.present,
        )


@dataclass(frozen=True)
class SuspendedRegister:
    stamp: int = -1
    precedence: int = REPORT
    value: bool = False
    disputed: bool = False  # deliveries at this stamp said both suspended and not

    def join(self, other: SuspendedRegister) -> SuspendedRegister:
        if self.stamp != other.stamp:
            return self if self.stamp > other.stamp else other
        winner = max(self, other, key=lambda r: (r.precedence, r.value))  # reports: suspended wins
        return SuspendedRegister(
            stamp=self.stamp,
            precedence=winner.precedence,
            value=winner.value,
            disputed=self.disputed or other.disputed or self.value != other.value,
        )


@dataclass(frozen=True)
class AccountRegister:
    stamp: int = -1
    login: str = ""  # "" when no event named the account
    disputed: bool = False  # two logins at this stamp

    def join(self, other: AccountRegister) -> AccountRegister:
        if self.stamp != other.stamp:
            return self if self.stamp > other.stamp else other
        both = self.login and other.login
        return AccountRegister(
            stamp=self.stamp,
            login=max(self.login, other.login),
            disputed=self.disputed or other.disputed or bool(both and self.login != other.login),
        )


@dataclass(frozen=True)
class InstallationSync:
    """The merged state of every event applied to one installation."""

    repos: Mapping[str, RepoEntry] = field(default_factory=dict)
    snapshot: int = -1  # entries older than the newest `created` snapshot are absent
    suspended: SuspendedRegister = SuspendedRegister()
    account: AccountRegister = AccountRegister()
    deleted: bool = False

    def disputes(self) -> tuple[str, ...]:
        """What deliveries stamped alike disagree about, as far as it is still visible."""
        if self.deleted:  # nothing left to re-read: a deletion is final
            return ()
        registers = (("suspended", self.suspended.disputed), ("account", self.account.disputed))
        repos = (
            f"repository {e.name}"
            for _, e in sorted(self.repos.items())
            if e.disputed and e.stamp >= self.snapshot  # older ones are absent anyway
        )
        return (*(name for name, disputed in registers if disputed), *repos)

    @property
    def needs_refresh(self) -> bool:
        """The hook for re-reading the installation from GitHub (see the module docstring)."""
        return bool(self.disputes())

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
            account=self.account.login or None,
            repositories=repositories,
            suspended=self.deleted or self.suspended.value,
        )


def merge(state: InstallationSync, change: InstallationChange) -> InstallationSync:
    """Join one event into the state: commutative, associative and idempotent."""
    repos = dict(state.repos)

    def put(name: str, present: bool) -> None:
        entry = RepoEntry(name, present, change.stamp)
        old = repos.get(name.lower())
        repos[name.lower()] = entry if old is None else old.join(entry)

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
        suspended=state.suspended.join(
            SuspendedRegister(stamp=change.stamp, precedence=change.precedence, value=change.suspended)
        ),
        # an event that names no account (null) says nothing about it: the login stays
        account=state.account.join(AccountRegister(change.stamp, change.account))
        if change.account
        else state.account,
        deleted=state.deleted or change.deleted,
    )


def sync_to_map(state: InstallationSync) -> dict[str, Any]:
    return {
        "repos": {
            k: {"name": e.name, "present": e.present, "stamp": e.stamp, "disputed": e.disputed}
            for k, e in state.repos.items()
        },
        "snapshot": state.snapshot,
        "suspended": {
            "stamp": state.suspended.stamp,
            "precedence": state.suspended.precedence,
            "value": state.suspended.value,
            "disputed": state.suspended.disputed,
        },
        "account": {
            "stamp": state.account.stamp,
            "login": state.account.login,
            "disputed": state.account.disputed,
        },
        "deleted": state.deleted,
        "needs_refresh": state.needs_refresh,  # derived; stored so an operator or a job can find it
    }


def sync_from_map(raw: Mapping[str, Any], stored: Installation | None) -> InstallationSync:
    """The stored merge state; an installation stored without one is the baseline (stamp 0,
    older than any event GitHub sends). Maps written before disputes were recorded read as
    undisputed reports."""
    if not raw:
        if stored is None:
            return InstallationSync()
        return InstallationSync(
            repos={r.lower(): RepoEntry(r, True, 0) for r in stored.repositories},
            suspended=SuspendedRegister(stamp=0, value=stored.suspended),
            account=AccountRegister(stamp=0, login=stored.account or ""),
        )
    suspended = raw["suspended"]
    account = raw["account"]
    return InstallationSync(
        repos={
            k: RepoEntry(str(v["name"]), bool(v["present"]), int(v["stamp"]), bool(v.get("disputed", False)))
            for k, v in raw["repos"].items()
        },
        snapshot=int(raw["snapshot"]),
        suspended=SuspendedRegister(
            stamp=int(suspended["stamp"]),
            precedence=int(suspended.get("precedence", REPORT)),
            value=bool(suspended["value"]),
            disputed=bool(suspended.get("disputed", False)),
        ),
        account=AccountRegister(
            stamp=int(account["stamp"]),
            login=str(account["login"]),
            disputed=bool(account.get("disputed", False)),
        ),
        deleted=bool(raw["deleted"]),
    )


def refresh_change(
    state: InstallationSync,
    *,
    installation_id: int,
    updated_at: datetime,
    account: str | None,
    suspended: bool,
    repositories: tuple[str, ...] | None,
) -> InstallationChange:
    """What GitHub's API says of the installation now, as one more change to merge. It is
    stamped one millisecond after both the API's `updated_at` and the newest stamp merged so
    far: later than every delivery it settles (deliveries stamped alike disagree only within
    one second of GitHub's clock, whose stamps are whole seconds), earlier than any delivery
    GitHub stamps later, so the join stays order-independent. Its repositories, when it could
    list them, are a snapshot, like `created`'s."""
    newest = max(
        state.snapshot,
        state.suspended.stamp,
        state.account.stamp,
        *(e.stamp for e in state.repos.values()),
        0,
    )
    return InstallationChange(
        installation_id=installation_id,
        stamp=max(_stamp(updated_at), newest) + 1,
        account=account,
        suspended=suspended,
        snapshot=repositories,
        precedence=READ,
    )


def _stamp(moment: datetime) -> int:
    if moment.tzinfo is None:  # an offset-less time: read as UTC, never as the host's zone
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _names(items: Iterable[Listed]) -> tuple[str, ...]:
    return tuple(i.full_name for i in items if i.full_name)


def installation_change(event_name: str, payload: Mapping[str, Any]) -> InstallationChange:
    """The facts of an installation or installation_repositories payload (BadRequest naming
    a field Steward needs)."""
    snapshot: tuple[str, ...] | None = None
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    precedence = REPORT
    if event_name == "installation":
        event = read_payload(InstallationEvent, payload, event_name)
        installation = event.installation
        action = event.action
        if action == "created" and event.repositories is not None:
            snapshot = _names(event.repositories)
        precedence = {"suspend": SUSPEND, "unsuspend": UNSUSPEND}.get(action, REPORT)
    else:
        repo_event = read_payload(InstallationRepositoriesEvent, payload, event_name)
        installation = repo_event.installation
        action = repo_event.action
        # the list the action is about is what Steward needs; the other may be empty or null
        named = {"added": repo_event.repositories_added, "removed": repo_event.repositories_removed}
        if action in named and named[action] is None:
            where = f"repositories_{action}"
            raise BadRequest(f"the {event_name} payload's {where} is missing", field=where)
        added = _names(repo_event.repositories_added or ())
        removed = _names(repo_event.repositories_removed or ())
    # suspend and unsuspend mean what they say, whatever suspended_at carries
    suspended = {SUSPEND: True, UNSUSPEND: False}.get(precedence, installation.suspended_at is not None)
    return InstallationChange(
        installation_id=installation.id,
        stamp=_stamp(installation.updated_at),
        account=installation.account.handle if installation.account else None,
        suspended=suspended,
        snapshot=snapshot,
        added=added,
        removed=removed,
        deleted=action == "deleted",
        precedence=precedence,
    )
