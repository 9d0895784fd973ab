"""Publish as a pure function: merge a parsed Task Document into the stored plan.

Identity rules (docs/concepts/lifecycle.md): an item keeps its key (and with it status and task id)
when its text is unchanged, wherever it moved; an item whose text changed in place keeps
its key and, if work had started on it, becomes a new revision (pending, no task: the old
task stays as history, named by `supersedes` until the new revision spawns, so confirming
the new revision can cancel it); a deleted checkbox is marked removed and keeps its task
link.

Bounded history (a plan is one DynamoDB item, 400 KB at most): a removed item is kept only
while it has a task, without its details, its title cut to `REMOVED_TITLE_CHARS`, and at
most `MAX_REMOVED_ITEMS` are kept: those whose task still runs or awaits review first, then
the most recently removed. An item dropped from the plan may come back (its key derives
from its text), so the plan remembers the highest revision that left it (`retired_revision`)
and new items start above it: a task id, a hash of (plan, key, revision, attempt), is never
reused. Whatever the publish history, the stored plan is the document's items plus at most
`MAX_REMOVED_ITEMS` short removed ones; what remains to check before a write is that the
document's own items fit (`steward.adapters.plan_store`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from difflib import SequenceMatcher
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from steward.domain import lifecycle
from steward.domain.errors import LifecycleError
from steward.domain.follow_ups import follow_ups_of
from steward.domain.ids import item_key
from steward.domain.models import ItemStatus, Plan, PlanItem, PlanKind, Task, TaskStatus

if TYPE_CHECKING:
    # Only annotations here: the API's routes read plans (outcomes, earlier reviews) on
    # every call, and the parser (its pydantic models, the price table) loads with a publish.
    from steward.domain.documents import ParsedItem, TaskDocument

MAX_REMOVED_ITEMS = 50  # removed items kept as history, the most recently removed
REMOVED_TITLE_CHARS = 200  # a removed item's title is cut to this many characters
# The content hashes a plan remembers (its last ones, the current one last): what a confirm
# may name, so a hash that was the plan's ("the plan changed") is told from one that never
# was ("no such content"). 20 of 64 characters take about 1.4 KB of the plan's item.
MAX_CONTENT_HASHES = 20


@dataclass(frozen=True)
class PublishResult:
    plan: Plan
    changed: bool  # False: the stored plan already holds exactly this document


def _fresh_key(plan: str, text_hash: str, taken: set[str]) -> str:
    occurrence = 0
    while (key := item_key(plan, text_hash, occurrence)) in taken:
        occurrence += 1
    taken.add(key)
    return key


def _status_for_checkbox(item: PlanItem, checked: bool) -> ItemStatus:
    """`- [x]` means done by hand; unchecking a done item makes it pending again. Items with
    work attached keep the status their task gave them."""
    if checked and item.status is ItemStatus.PENDING and item.task_id is None:
        return ItemStatus.DONE
    if not checked and item.status is ItemStatus.DONE:
        return ItemStatus.PENDING
    return item.status


class _Text(Protocol):
    @property
    def text_hash(self) -> str: ...


Old = TypeVar("Old", bound=_Text)


def _take(pool: list[Old], text_hash: str) -> Old | None:
    for index, candidate in enumerate(pool):
        if candidate.text_hash == text_hash:
            return pool.pop(index)
    return None


@dataclass
class Alignment(Generic[Old]):
    matched: dict[int, Old]  # new index -> old item with the same text
    edited: dict[int, Old]  # new index -> old item whose text it replaced in place
    gone: list[Old]  # old items with no counterpart
    moved: set[int] = field(default_factory=set)  # new indexes matched outside an unchanged run


def align(active: Sequence[Old], removed: list[Old], new: Sequence[_Text]) -> Alignment[Old]:
    """Pair old and new items: unchanged runs by sequence alignment, then moves by exact text
    (including removed items coming back: those are taken out of `removed`), then what is
    left in a replaced run, in order, as in-place edits. Publish merges by it, and
    `steward.domain.plan_diff` shows a person the same pairing."""
    out: Alignment[Old] = Alignment(matched={}, edited={}, gone=[])
    blocks: list[tuple[list[Old], list[int]]] = []
    opcodes = SequenceMatcher(
        None, [i.text_hash for i in active], [i.text_hash for i in new], autojunk=False
    ).get_opcodes()
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            out.matched.update(zip(range(j1, j2), active[i1:i2], strict=True))
        else:  # replace, delete, insert: one block of old and new items to pair up
            blocks.append((list(active[i1:i2]), list(range(j1, j2))))
            out.gone.extend(active[i1:i2])
    for _, new_indexes in blocks:
        for j in new_indexes:
            found = _take(out.gone, new[j].text_hash) or _take(removed, new[j].text_hash)
            if found is not None:
                out.matched[j] = found
                out.moved.add(j)
    for old_block, new_indexes in blocks:
        left_old = [i for i in old_block if any(i is g for g in out.gone)]
        left_new = [j for j in new_indexes if j not in out.matched]
        for old_item, j in zip(left_old, left_new, strict=False):
            out.gone = [g for g in out.gone if g is not old_item]
            out.edited[j] = old_item
    return out


def _carry(old: PlanItem | None, edited: bool, fields: dict[str, object]) -> PlanItem:
    if old is None:
        return PlanItem(**fields)  # type: ignore[arg-type]
    if edited and old.task_id is not None:
        # Work started on the old text: the new text is new work, the old task is history,
        # superseded once the new revision is confirmed.
        return old.model_copy(
            update={
                **fields,
                "revision": old.revision + 1,
                "status": ItemStatus.PENDING,
                "task_id": None,
                "attempt": 0,
                "last_classification": None,
                "retry_requested": False,
                "supersedes": old.task_id,
            }
        )
    return old.model_copy(update=fields)


def _short(title: str) -> str:
    return title if len(title) <= REMOVED_TITLE_CHARS else title[: REMOVED_TITLE_CHARS - 1] + "\u2026"


_NEVER = datetime.min.replace(tzinfo=UTC)  # removed before removals were dated: oldest
_LIVE_ITEM_STATUSES = frozenset({ItemStatus.RUNNING, ItemStatus.REVIEW})


@dataclass(frozen=True)
class Merged:
    items: tuple[PlanItem, ...]  # active ones in document order, then the removed ones kept
    retired_revision: int  # the plan's new `retired_revision`


def merge_items(
    plan_id: str,
    old: Iterable[PlanItem],
    new: tuple[ParsedItem, ...],
    *,
    now: datetime | None = None,
    retired_revision: int = 0,
) -> Merged:
    """The stored items after publishing `new`, and the history they leave behind."""
    active = sorted((i for i in old if not i.removed), key=lambda i: i.ordinal)
    removed = [i for i in old if i.removed]
    taken = {i.key for i in active} | {i.key for i in removed}
    alignment = align(active, removed, new)

    result: list[PlanItem] = []
    for j, parsed in enumerate(new):
        fields: dict[str, object] = {
            "ordinal": parsed.ordinal,
            "title": parsed.title,
            "details": parsed.details,
            "text_hash": parsed.text_hash,
            "checked": parsed.checked,
            "removed": False,
            "removed_at": None,
            "repo": parsed.repo,
        }
        previous = alignment.matched.get(j) or alignment.edited.get(j)
        if previous is None:
            # Fresh keys never equal a key the plan holds (`taken`), but may equal one that
            # left it: start above every revision that left, so no task id is reused.
            fields["key"] = _fresh_key(plan_id, parsed.text_hash, taken)
            fields["revision"] = retired_revision + 1
        item = _carry(previous, j in alignment.edited, fields)
        result.append(item.model_copy(update={"status": _status_for_checkbox(item, parsed.checked)}))
    # References are re-resolved at each publish: `(after #n)` means the item shown n-th now.
    result = [
        item.model_copy(update={"after": tuple(result[n - 1].key for n in parsed.after)})
        for item, parsed in zip(result, new, strict=True)
    ]

    # A deleted checkbox with work attached stays as history (its task runs on untouched),
    # without its details and with a short title; one without work is dropped: its key is
    # derived from its text, so if the text comes back it gets the same key.
    gone = [
        i.model_copy(update={"removed": True, "details": "", "title": _short(i.title), "removed_at": now})
        for i in alignment.gone
        if i.task_id
    ]
    # Kept first: items whose task still runs or awaits review (their projection lands on
    # them), then the most recently removed.
    history = sorted(
        (*gone, *removed),
        key=lambda i: (i.status in _LIVE_ITEM_STATUSES, i.removed_at or _NEVER),
        reverse=True,
    )
    dropped = [i for i in alignment.gone if not i.task_id] + history[MAX_REMOVED_ITEMS:]
    retired = max(
        [retired_revision, *(i.revision for i in dropped if i.task_id or i.supersedes or i.revision > 1)]
    )
    return Merged((*result, *history[:MAX_REMOVED_ITEMS]), retired)


def match_items(plan_id: str, old: Iterable[PlanItem], new: tuple[ParsedItem, ...]) -> tuple[PlanItem, ...]:
    """Return the stored items after publishing `new`: active ones in document order, then
    the removed ones kept as history."""
    return merge_items(plan_id, old, new).items


def publish(
    existing: Plan | None,
    *,
    plan_id: str,
    user: str,
    slug: str,
    document: TaskDocument,
    now: datetime,
    kind: PlanKind = PlanKind.WORK,
) -> PublishResult:
    """The plan after publishing `document`; `changed` is False for an identical republish.

    A plan keeps the kind it was created with (`PlanKind`): publishing over a plan of the
    other kind is a 409, so a person's document never lands in a local fixture (whose tasks
    the loop ignores) and a fixture never takes over a person's plan."""
    if existing is not None and existing.kind is not kind:
        raise LifecycleError(
            f"plan {slug!r} is a local fixture (made by `steward local capability`), not a plan "
            "to publish: publish under another slug"
            if existing.kind is PlanKind.FIXTURE
            else f"plan {slug!r} already exists as a {existing.kind.value} plan",
            field="slug",
        )
    content_hash = document.content_hash
    if existing is not None and existing.content_hash == content_hash:
        lifecycle.after_publish(existing.status, content_changed=False)  # archived still refuses
        return PublishResult(existing, changed=False)
    status = lifecycle.after_publish(existing.status if existing else None, content_changed=True)
    merged = merge_items(
        plan_id,
        existing.items if existing else (),
        document.items,
        now=now,
        retired_revision=existing.retired_revision if existing else 0,
    )
    items = merged.items
    front_matter = document.front_matter.model_dump(mode="json")
    hashes = remember_hash(existing, content_hash) if existing else (content_hash,)
    if existing is None:
        plan = Plan(
            id=plan_id,
            user=user,
            slug=slug,
            status=status,
            repo=document.front_matter.repo,
            title=document.title,
            front_matter=front_matter,
            content_hash=content_hash,
            items=items,
            created_at=now,
            updated_at=now,
            retired_revision=merged.retired_revision,
            kind=kind,
            content_hashes=hashes,
        )
    else:
        plan = existing.model_copy(
            update={
                "status": status,
                "repo": document.front_matter.repo,
                "title": document.title,
                "front_matter": front_matter,
                "content_hash": content_hash,
                "items": items,
                "updated_at": now,
                "retired_revision": merged.retired_revision,
                "content_hashes": hashes,
            }
        )
    return PublishResult(plan, changed=True)


def remember_hash(plan: Plan, content_hash: str) -> tuple[str, ...]:
    """The plan's content hashes once `content_hash` is its content: it goes last (once), the
    oldest go beyond `MAX_CONTENT_HASHES`. A plan stored before hashes were remembered starts
    from its current and approved ones."""
    known = plan.content_hashes or tuple(
        dict.fromkeys(h for h in (plan.approved_hash, plan.content_hash) if h)
    )
    kept = (*(h for h in known if h != content_hash), content_hash)
    return kept[-MAX_CONTENT_HASHES:]


# The statuses an item ends in; a plan's outcome counts every one, so a plan whose items all
# finished but some failed never reads as if it succeeded.
OUTCOME_STATUSES = (
    ItemStatus.MERGED,
    ItemStatus.CLOSED,
    ItemStatus.FAILED,
    ItemStatus.DONE,
    ItemStatus.REMOVED,
)


def plan_outcomes(plan: Plan) -> dict[str, int]:
    """How many of the plan's items ended in each final status (zeros included)."""
    counts = {status.value: 0 for status in OUTCOME_STATUSES}
    for item in plan.items:
        shown = item.shown_status.value
        if shown in counts:
            counts[shown] += 1
    return counts


def max_spend(plan: Plan) -> dict[str, Any]:
    """What confirming the plan may spend at most: every current item that would start work
    (pending) may run `max_attempts` attempts (the loop retries a retryable failure by
    itself) and then `follow_ups` rounds on its pull request, each up to `budget_usd`. A
    retry a person asks for is not bounded by `max_attempts`: each adds up to `budget_usd`
    more."""
    fm = plan.front_matter
    budget = Decimal(str(fm.get("budget_usd", 0)))
    attempts = int(fm.get("max_attempts", 3))
    follow_ups = follow_ups_of(fm)
    items = sum(1 for i in plan.items if not i.removed and i.status is ItemStatus.PENDING)
    return {
        "usd": str(items * budget * (attempts + follow_ups)),
        "items": items,
        "budget_usd": str(budget),
        "attempts": attempts,
        "follow_ups": follow_ups,
    }


def earlier_reviews(plan: Plan, live: Sequence[Task]) -> dict[str, list[dict[str, Any]]]:
    """Per item key, its tasks of an earlier revision still in review: an edit made a new
    revision, yet the old task's pull request is open until a person merges or closes it
    (or withdraws it), so the item must not hide it. `live` holds every review task."""
    found: dict[str, list[dict[str, Any]]] = {}
    for task in sorted(live, key=lambda t: (t.revision, t.attempt)):
        item = plan.item(task.item_key)
        if (
            task.plan_id != plan.id
            or task.status is not TaskStatus.REVIEW
            or item is None
            or task.id == item.task_id
            or task.revision >= item.revision
        ):
            continue
        shown = {
            "task_id": task.id,
            "revision": task.revision,
            "attempt": task.attempt,
            "pr_url": task.pr_url,
        }
        found.setdefault(task.item_key, []).append(shown)
    return found
