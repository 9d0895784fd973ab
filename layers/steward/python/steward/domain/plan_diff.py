"""What changed in a plan since its last confirmation, and the approved documents kept to tell.

Pure: plans and text in, a `PlanDiff` out. The plan service reads and writes the documents
(`steward.services.plans`), the artifact store holds them.

* **Kept documents.** Every content a plan takes is kept in the artifact bucket under
  `plans/{plan id}/{content hash}.md` (`document_key`), written before the publish that
  records the hash (and again at each confirm, for content published before documents were
  kept), so the content any hash of the plan names stays readable. The document is
  Markdown in a canonical form (`kept_document`): the front matter exactly as the plan
  stores it, every key written out (so a later change of the deployment's defaults never
  changes what it says), as PyYAML writes it; the title as a heading; one checkbox per item
  with its details indented by two spaces. `read_kept` reads it back without the parser's
  size limits (it is Steward's own text, and a kept front matter may be longer than the one
  written: quotes and defaults) and refuses a document whose content hash is not the hash it
  is kept under.
* **Which content a confirm may name.** A plan remembers its last content hashes
  (`steward.domain.plans:MAX_CONTENT_HASHES`, `Plan.content_hashes`); those, its approved
  and its current hash are its known content (`known_hashes`). A confirm names one by the
  whole hash or by a prefix of at least `MIN_HASH_PREFIX` hex characters (what `steward plan
  show` prints): a prefix of the current hash approves the current content; of another
  known hash is "the plan changed" (409); of none is "no such content" (404). Two known
  hashes sharing a 12-character prefix is a 1 in 10^12 event for 20 hashes; a prefix that
  matches the current content confirms it.
* **The diff** (`diff`) pairs items exactly as publish does (`steward.domain.plans:align`),
  so what it calls `edited` is what publish makes a new revision of (once work started on
  it) and what it calls `moved` keeps its work: an item in an unchanged run is not listed
  even when an insertion above it shifted its ordinal; one whose text is found elsewhere is
  `moved`; one whose text changed in place is `edited` (`fields` says which of its title,
  details and checkbox changed; ticking or unticking a box alone is `edited` with
  `["checked"]`, since the box is approved content; an item whose predecessors are other
  items than approved, by their text, is `edited` with `["after"]`, so renumbering a
  reference after an insertion is no change and an insertion that shifts what a reference
  names is one); the rest are `added` or `removed`.
  Front matter lists the keys whose values differ, as `[old, new]` (a key the stored form
  lacks is null). A plan never confirmed has no approved content: every key and every item
  is new.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from steward.domain.document_limits import DEFAULT_FOLLOW_UPS
from steward.domain.documents import (
    DocumentPolicy,
    FrontMatter,
    ParsedItem,
    content_hash_of,
    parse_body,
    waits_for,
)
from steward.domain.errors import BadRequest, InvalidDocument
from steward.domain.models import Plan
from steward.domain.plans import align

MIN_HASH_PREFIX = 12  # hex characters; what `steward plan show` prints of a content hash
_GIVEN_HASH = re.compile(rf"[0-9a-f]{{{MIN_HASH_PREFIX},64}}")
_FULL_HASH = re.compile(r"[0-9a-f]{64}")
# Reading back what Steward wrote: only the item count is bounded (as no plan holds more).
_KEPT_POLICY = DocumentPolicy(max_bytes=2**62, max_items=10**6)

ADDED, REMOVED, EDITED, MOVED = "added", "removed", "edited", "moved"


@dataclass(frozen=True)
class PlanContent:
    """What a confirmation approves: the front matter in its stored (JSON) form and the items
    in order."""

    front_matter: Mapping[str, Any]
    items: tuple[ParsedItem, ...]

    @property
    def content_hash(self) -> str:
        return content_hash_of(self.front_matter, self.items)


def content_of(plan: Plan) -> PlanContent:
    """The plan's current content (its hash is the plan's `content_hash`)."""
    active = plan.active_items
    ordinal = {i.key: n for n, i in enumerate(active, start=1)}
    items = tuple(
        ParsedItem(
            ordinal=n,
            line=0,
            checked=i.checked,
            title=i.title,
            details=i.details,
            after=tuple(sorted(ordinal[k] for k in i.after if k in ordinal)),
        )
        for n, i in enumerate(active, start=1)
    )
    return PlanContent(dict(plan.front_matter), items)


# ---- kept documents


def document_key(plan_id: str, content_hash: str) -> str:
    """The S3 key of the document kept for one content of a plan."""
    if not _FULL_HASH.fullmatch(content_hash) or not re.fullmatch(r"[A-Za-z0-9_-]+", plan_id):
        raise ValueError("a kept document is named by a plan id and a whole content hash")
    return f"plans/{plan_id}/{content_hash}.md"


def kept_document(content: PlanContent, title: str | None) -> str:
    """`content` as canonical Markdown that `read_kept` reads back to the same content hash."""
    # PyYAML loads with the first kept document, not with this module (whose `document_key`
    # the runtime routes import): `steward.domain.documents` says why.
    import yaml  # noqa: PLC0415

    header = yaml.safe_dump(
        dict(content.front_matter),
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=2**31 - 1,  # never folded
    )
    lines = ["---", header.rstrip("\n"), "---"]
    if title:
        lines += [f"# {title}", ""]
    for item in content.items:
        after = f" (after {', '.join(f'#{n}' for n in item.after)})" if item.after else ""
        lines.append(f"- [{'x' if item.checked else ' '}] {item.title}{after}")
        if item.details:
            lines += [f"  {line}" if line else "" for line in item.details.split("\n")]
    return "\n".join(lines) + "\n"


def read_kept(text: str, content_hash: str) -> PlanContent:
    """The content of a kept document; ValueError when it is not one, or not the content
    `content_hash` names."""
    import yaml  # noqa: PLC0415 - see `kept_document`

    lines = text.split("\n")
    if lines[0] != "---" or "---" not in lines[1:]:
        raise ValueError("not a kept plan document: no front matter")
    end = lines.index("---", 1)
    try:
        front_matter = yaml.safe_load("\n".join(lines[1:end]))
        _, items = parse_body("\n".join(lines[end + 1 :]), _KEPT_POLICY)
    except (yaml.YAMLError, InvalidDocument) as exc:
        raise ValueError(f"not a kept plan document: {exc}") from None
    if not isinstance(front_matter, dict):
        raise ValueError("not a kept plan document: its front matter is not a mapping")
    content = PlanContent(front_matter, items)
    if content.content_hash != content_hash:
        raise ValueError("the kept document is not the content its name says")
    return content


# ---- content a confirm may name


def given_hash(text: str) -> str:
    """A content hash as a person gives it: the whole hash or at least its first
    `MIN_HASH_PREFIX` hex characters (any case); BadRequest naming `content_hash` otherwise."""
    given = text.strip().lower()
    if not _GIVEN_HASH.fullmatch(given):
        raise BadRequest(
            f"content_hash must be the plan's content hash or at least its first {MIN_HASH_PREFIX} "
            "hex characters (as `steward plan show` prints it)",
            field="content_hash",
        )
    return given


def known_hashes(plan: Plan) -> tuple[str, ...]:
    """Every content hash the plan remembers having had, its approved and current ones included."""
    return tuple(
        dict.fromkeys((*plan.content_hashes, *(h for h in (plan.approved_hash, plan.content_hash) if h)))
    )


def resolve_content(plan: Plan, given: str) -> str | None:
    """The known hash `given` (a hash or a prefix) names, the current one first; None: none."""
    if plan.content_hash.startswith(given):
        return plan.content_hash
    return next((h for h in known_hashes(plan) if h.startswith(given)), None)


# ---- the diff


@dataclass(frozen=True)
class ItemChange:
    ordinal: int | None  # in the current plan; None for a removed item
    approved_ordinal: int | None  # in the approved content; None for an added item
    title: str  # the current title (the approved one for a removed item)
    change: str  # added, removed, edited, moved
    fields: tuple[str, ...] = ()  # of an edited item: which of title, details, checked, after changed

    def to_api(self) -> dict[str, Any]:
        return {
            "ordinal": self.ordinal,
            "approved_ordinal": self.approved_ordinal,
            "title": self.title,
            "change": self.change,
            "fields": list(self.fields),
        }


@dataclass(frozen=True)
class PlanDiff:
    approved_hash: str | None
    current_hash: str
    front_matter: Mapping[str, tuple[Any, Any]]  # key -> (approved value, current value)
    items: tuple[ItemChange, ...]

    @property
    def changed(self) -> bool:
        return self.approved_hash != self.current_hash

    def to_api(self) -> dict[str, Any]:
        return {
            "approved_hash": self.approved_hash,
            "current_hash": self.current_hash,
            "front_matter": {key: [old, new] for key, (old, new) in self.front_matter.items()},
            "items": [change.to_api() for change in self.items],
        }


def _plain(value: Any) -> Any:
    """Lists for tuples, so stored and kept forms compare as JSON does."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _front_matter_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    # A key added after plans were first approved compares by its value in effect.
    old, new = ({"follow_ups": DEFAULT_FOLLOW_UPS, **fm} for fm in (old, new))
    known = [key for key in FrontMatter.model_fields if key in old or key in new]
    others = sorted((set(old) | set(new)) - set(known), key=str)
    changes: dict[str, tuple[Any, Any]] = {}
    for key in (*known, *others):
        before, after = _plain(old.get(key)), _plain(new.get(key))
        if before != after:
            changes[key] = (before, after)
    return changes


def _waits(content: PlanContent | None) -> dict[int, frozenset[str]]:
    """ordinal -> the texts (hashes) of the items it waits for: what its order means, however
    its references are numbered."""
    if content is None:
        return {}
    graph = waits_for(content.items, sequential=content.front_matter.get("order") == "sequential")
    text = {i.ordinal: i.text_hash for i in content.items}
    return {n: frozenset(text[r] for r in refs if r in text) for n, refs in graph.items()}


def _edited_fields(old: ParsedItem, new: ParsedItem, order_changed: bool) -> tuple[str, ...]:
    return tuple(
        name
        for name, changed in (
            ("title", old.title != new.title),
            ("details", old.details != new.details),
            ("checked", old.checked != new.checked),
            ("after", order_changed),
        )
        if changed
    )


def diff(approved: PlanContent | None, current: PlanContent) -> PlanDiff:
    """What changed from `approved` (None: never confirmed) to `current`: the front matter keys
    whose values differ, then the current items that are added, edited or moved, in order,
    then the removed ones in their approved order."""
    old_items = list(approved.items) if approved is not None else []
    pairing = align(old_items, [], current.items)
    old_waits, new_waits = _waits(approved), _waits(current)
    changes: list[ItemChange] = []
    for j, item in enumerate(current.items):
        ordinal = j + 1
        before = pairing.edited.get(j) or pairing.matched.get(j)
        if before is None:
            changes.append(ItemChange(ordinal, None, item.title, ADDED))
            continue
        fields = _edited_fields(before, item, old_waits.get(before.ordinal) != new_waits.get(ordinal))
        if fields:
            changes.append(ItemChange(ordinal, before.ordinal, item.title, EDITED, fields))
        elif j in pairing.moved:
            changes.append(ItemChange(ordinal, before.ordinal, item.title, MOVED))
    for gone in sorted(pairing.gone, key=lambda i: i.ordinal):
        changes.append(ItemChange(None, gone.ordinal, gone.title, REMOVED))
    return PlanDiff(
        approved_hash=approved.content_hash if approved is not None else None,
        current_hash=current.content_hash,
        front_matter=_front_matter_changes(
            approved.front_matter if approved is not None else {}, current.front_matter
        ),
        items=tuple(changes),
    )
