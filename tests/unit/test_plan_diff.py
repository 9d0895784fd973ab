"""`steward.domain.plan_diff`: what changed since the last confirmation, the kept approved
documents, and which content a confirm may name. Edge and hostile cases are rows of tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from steward.domain import plan_diff
from steward.domain.documents import parse_document
from steward.domain.errors import BadRequest
from steward.domain.models import Plan
from steward.domain.plan_diff import PlanContent, diff, kept_document, read_kept
from steward.domain.plans import MAX_CONTENT_HASHES, publish

from tests.support.documents import document

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def content(markdown: str) -> PlanContent:
    parsed = parse_document(markdown)
    return PlanContent(parsed.front_matter.model_dump(mode="json"), parsed.items)


def published(*markdowns: str) -> Plan:
    """The plan after publishing each document in turn."""
    plan = None
    for markdown in markdowns:
        plan = publish(
            plan, plan_id="p1", user="alice", slug="demo", document=parse_document(markdown), now=NOW
        ).plan
    assert plan is not None
    return plan


BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: reorders what a reviewer sees
ZERO_WIDTH = "\u200b"

# (id, approved items, current items, expected item changes as
# (ordinal, approved ordinal, change, fields))
ITEM_CASES: list[tuple[str, tuple[str, ...], tuple[str, ...], list[tuple[Any, ...]]]] = [
    ("nothing changed", ("A", "B"), ("A", "B"), []),
    ("one added at the end", ("A",), ("A", "B"), [(2, None, "added", ())]),
    # An insertion above shifts the ordinals of the items after it; they are not listed.
    ("inserted at the top", ("A", "B", "C"), ("X", "A", "B", "C"), [(1, None, "added", ())]),
    ("removed in the middle", ("A", "B", "C"), ("A", "C"), [(None, 2, "removed", ())]),
    (
        "every item removed but one",
        ("A", "B", "C"),
        ("C",),
        [(None, 1, "removed", ()), (None, 2, "removed", ())],
    ),
    ("moved to the end", ("A", "B", "C"), ("B", "C", "A"), [(3, 1, "moved", ())]),
    ("two swapped: one of them is the move", ("A", "B"), ("B", "A"), [(1, 2, "moved", ())]),
    ("title edited in place", ("A", "B", "C"), ("A", "B2", "C"), [(2, 2, "edited", ("title",))]),
    ("details edited", ("A\ndetail", "B"), ("A\nother detail", "B"), [(1, 1, "edited", ("details",))]),
    ("details added", ("A",), ("A\nnow with details",), [(1, 1, "edited", ("details",))]),
    ("box ticked", ("A", "B"), ("[x] A", "B"), [(1, 1, "edited", ("checked",))]),
    ("box ticked and text edited", ("A",), ("[x] A2",), [(1, 1, "edited", ("title", "checked"))]),
    ("box unticked", ("[x] A",), ("A",), [(1, 1, "edited", ("checked",))]),
    ("moved and ticked", ("A", "B", "C"), ("B", "C", "[x] A"), [(3, 1, "edited", ("checked",))]),
    # Identical items: the alignment pairs them in order, so removing one removes the last.
    ("duplicates, one removed", ("A", "A", "A"), ("A", "A"), [(None, 3, "removed", ())]),
    ("duplicates, one added", ("A",), ("A", "A"), [(2, None, "added", ())]),
    (
        "everything replaced",
        ("A", "B"),
        ("X", "Y"),
        [(1, 1, "edited", ("title",)), (2, 2, "edited", ("title",))],
    ),
    # A removal beside an edit in one run pairs in order, as publish pairs them (the
    # edited text takes the removed item's key): the diff says what publish will do.
    (
        "a removal beside an edit pairs in order",
        ("K", "Drop", "Edit"),
        ("K", "Edit2"),
        [(2, 2, "edited", ("title",)), (None, 3, "removed", ())],
    ),
    (
        "replaced with more",
        ("A",),
        ("X", "Y", "Z"),
        [(1, 1, "edited", ("title",)), (2, None, "added", ()), (3, None, "added", ())],
    ),
    (
        "a bidi override slipped into a title",
        ("pay alice",),
        (f"pay {BIDI}ecila",),
        [(1, 1, "edited", ("title",))],
    ),
    ("a zero-width space is an edit", ("A",), (f"A{ZERO_WIDTH}",), [(1, 1, "edited", ("title",))]),
    (
        "unicode titles",
        ("日本語 ✓", "emoji \U0001f600"),
        ("emoji \U0001f600", "日本語 ✓"),
        [(1, 2, "moved", ())],
    ),
    # Details are dedented and their trailing blanks dropped: re-indenting is no change.
    ("re-indented details", ("A\nline one\nline two",), ("A\n    line one\n    line two",), []),
    ("trailing spaces in details", ("A\nline",), ("A\nline   ",), []),
    (
        "a detail line that looks like a checkbox",
        ("A",),
        ("A\n- [ ] not an item",),
        [(1, 1, "edited", ("details",))],
    ),
    (
        "a detail line that looks like front matter",
        ("A\nkeep",),
        ("A\n---\nkeep",),
        [(1, 1, "edited", ("details",))],
    ),
    (
        "a hundred items, one in the middle edited",
        tuple(f"I{n}" for n in range(100)),
        tuple(f"I{n}" if n != 50 else "I50 changed" for n in range(100)),
        [(51, 51, "edited", ("title",))],
    ),
]


@pytest.mark.parametrize(
    ("approved", "current", "expected"), [c[1:] for c in ITEM_CASES], ids=[c[0] for c in ITEM_CASES]
)
def test_item_changes(
    approved: tuple[str, ...], current: tuple[str, ...], expected: list[tuple[Any, ...]]
) -> None:
    result = diff(content(document(*approved)), content(document(*current)))
    shown = [(i.ordinal, i.approved_ordinal, i.change, i.fields) for i in result.items]
    assert shown == expected
    assert result.front_matter == {}
    assert result.changed == (
        content(document(*approved)).content_hash != content(document(*current)).content_hash
    )


def test_item_changes_name_the_titles_a_person_reads() -> None:
    result = diff(
        content(document("Old title", "Keep", "Drop me")), content(document("New title", "Added", "Keep"))
    )
    assert [(i.change, i.title) for i in result.items] == [
        ("edited", "New title"),  # the current title of an edited item
        ("added", "Added"),
        ("removed", "Drop me"),  # the approved title of a removed one
    ]


def test_a_hundred_items_reversed_are_one_item_kept_and_the_rest_moved() -> None:
    items = [f"I{n}" for n in range(100)]
    result = diff(content(document(*items)), content(document(*reversed(items))))
    assert len(result.items) == 99
    assert {i.change for i in result.items} == {"moved"}
    assert all(i.ordinal == 101 - (i.approved_ordinal or 0) for i in result.items)


FM = "---\nrepo: octo/demo\nchecks:\n  - pytest -q\n"
# (id, approved front matter extra lines, current extra lines, expected changes)
FRONT_MATTER_CASES: list[tuple[str, str, str, dict[str, list[Any]]]] = [
    ("unchanged", "", "", {}),
    ("budget spelled differently is one value", "budget_usd: 2.50\n", "budget_usd: '2.5'\n", {}),
    ("budget raised", "budget_usd: 2\n", "budget_usd: 3.5\n", {"budget_usd": ["2", "3.5"]}),
    ("base given", "", "base: develop\n", {"base": [None, "develop"]}),
    ("base back to the default", "base: develop\n", "base:\n", {"base": ["develop", None]}),
    (
        "model changed",
        "model: scripted\n",
        "model: scripted-coder\n",
        {"model": ["scripted", "scripted-coder"]},
    ),
    ("setup added", "", "setup:\n  - pip install -e .\n", {"setup": [[], ["pip install -e ."]]}),
    ("max attempts", "", "max_attempts: 1\n", {"max_attempts": [3, 1]}),
    ("follow-up rounds off", "", "follow_ups: 0\n", {"follow_ups": [2, 0]}),
    ("follow-up rounds raised", "follow_ups: 1\n", "follow_ups: 2\n", {"follow_ups": [1, 2]}),
    ("follow-up rounds at their default said aloud", "", "follow_ups: 2\n", {}),
    (
        "a check with a bidi override",
        "",
        f"checks:\n  - pytest -q\n  - echo {BIDI}\n",
        {"checks": [["pytest -q"], ["pytest -q", f"echo {BIDI}"]]},
    ),
]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [c[1:] for c in FRONT_MATTER_CASES],
    ids=[c[0] for c in FRONT_MATTER_CASES],
)
def test_front_matter_changes(before: str, after: str, expected: dict[str, list[Any]]) -> None:
    def doc(extra: str) -> str:
        if extra.startswith("checks:"):
            return f"---\nrepo: octo/demo\n{extra}---\n- [ ] A\n"
        return f"{FM}{extra}---\n- [ ] A\n"

    result = diff(content(doc(before)), content(doc(after)))
    assert result.to_api()["front_matter"] == expected
    assert result.items == ()


def test_keys_a_stored_front_matter_lacks_or_does_not_know_are_compared_too() -> None:
    """A plan stored before a key existed, or with one a later release dropped: null stands
    for the missing key, unknown keys come after the known ones."""
    current = content(document("A"))
    old = PlanContent({**current.front_matter, "legacy": "x", "max_attempts": None}, current.items)
    assert diff(old, current).to_api()["front_matter"] == {"max_attempts": [None, 3], "legacy": ["x", None]}


def test_a_plan_approved_before_follow_ups_existed_is_unchanged_by_its_default() -> None:
    current = content(document("A"))
    stored = {k: v for k, v in current.front_matter.items() if k != "follow_ups"}
    old = PlanContent(stored, current.items)
    assert old.content_hash == current.content_hash  # its approval still matches
    assert diff(old, current).to_api()["front_matter"] == {}


def test_a_plan_never_confirmed_is_all_new() -> None:
    current = content(document("A", "[x] B"))
    result = diff(None, current).to_api()
    assert result["approved_hash"] is None
    assert result["current_hash"] == current.content_hash
    assert [(i["ordinal"], i["change"]) for i in result["items"]] == [(1, "added"), (2, "added")]
    assert result["front_matter"]["repo"] == [None, "octo/demo"]
    assert result["front_matter"]["checks"] == [None, ["pytest -q"]]
    assert "base" not in result["front_matter"]  # null before and after: no change


def test_the_answer_has_the_documented_shape() -> None:
    result = diff(content(document("A")), content(document("A", "B"))).to_api()
    assert set(result) == {"approved_hash", "current_hash", "front_matter", "items"}
    assert result["items"] == [
        {"ordinal": 2, "approved_ordinal": None, "title": "B", "change": "added", "fields": []}
    ]


# ---- kept documents

HOSTILE_DOCUMENTS = {
    "plain": document("First", "[x] Second"),
    "details with fences and nested bullets": document(
        "A\n```python\nprint('---')\n```\n- nested\n  - deeper\n\n1. numbered", "B"
    ),
    "tabs after the indentation and odd spacing": "---\nrepo: a/b\nchecks: [t]\n---\n- [ ] A\n\tx\ty\n\t  z\n",
    "front matter that YAML must quote": (
        "---\nrepo: a/b\nmodel: 'yes'\nbase: 'null'\nbudget_usd: '1'\n"
        "checks:\n  - \"echo '#' : {x} [y] no\"\n  - \"python -c 'print(1)'\"\n---\n- [ ] A\n"
    ),
    "unicode and invisible characters": document(
        f"t{BIDI}x {ZERO_WIDTH}\U0001f600\nd\u00e9tail \u2028 sep", "\u00e9"
    ),
    "a detail line of only '---'": document("A\n---\n...\n# not a title"),
    "a title that is a heading marker": "---\nrepo: a/b\nchecks: [t]\n---\n# T ###\n- [ ] # not a heading\n",
    "crlf line ends": "---\r\nrepo: a/b\r\nchecks: [t]\r\n---\r\n- [ ] A\r\n  d\r\n",
    "no title": "---\nrepo: a/b\nchecks: [t]\n---\n- [ ] A\n",
    "form feed and vertical tab in details": document("A\n\x0cpage\x0b"),
}


@pytest.mark.parametrize("markdown", list(HOSTILE_DOCUMENTS.values()), ids=list(HOSTILE_DOCUMENTS))
def test_a_kept_document_reads_back_to_the_content_it_is_kept_for(markdown: str) -> None:
    parsed = parse_document(markdown)
    kept = content(markdown)
    assert kept.content_hash == parsed.content_hash
    text = kept_document(kept, parsed.title)
    back = read_kept(text, parsed.content_hash)
    assert back.content_hash == parsed.content_hash
    assert [(i.checked, i.title, i.details) for i in back.items] == [
        (i.checked, i.title, i.details) for i in parsed.items
    ]
    # It is a Task Document a person could publish again, to the same content.
    assert parse_document(text).content_hash == parsed.content_hash


def test_the_plan_store_form_is_the_content_of_its_hash() -> None:
    for markdown in HOSTILE_DOCUMENTS.values():
        plan = published(markdown)
        assert plan_diff.content_of(plan).content_hash == plan.content_hash


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no front matter",
        "---\nrepo: a/b\n",  # never closed
        "---\n- a list\n---\n- [ ] A\n",  # not a mapping
        "---\nrepo: [unclosed\n---\n- [ ] A\n",
        "---\nrepo: a/b\n---\nno items\n",
    ],
    ids=["empty", "no front matter", "unclosed", "a list", "bad yaml", "no items"],
)
def test_what_is_not_a_kept_document_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a kept plan document"):
        read_kept(text, "0" * 64)


def test_a_kept_document_under_another_hash_is_refused() -> None:
    kept = content(document("A"))
    text = kept_document(kept, None)
    with pytest.raises(ValueError, match="not the content"):
        read_kept(text, content(document("B")).content_hash)
    with pytest.raises(ValueError, match="not the content"):
        read_kept(text.replace("- [ ] A", "- [x] A"), kept.content_hash)


@pytest.mark.parametrize(
    ("plan_id", "content_hash"),
    [("p1", "0" * 63), ("p1", "../" + "0" * 61), ("../p1", "0" * 64), ("p1", "A" * 64), ("", "0" * 64)],
)
def test_a_document_key_is_only_ever_under_plans(plan_id: str, content_hash: str) -> None:
    with pytest.raises(ValueError, match="whole content hash"):
        plan_diff.document_key(plan_id, content_hash)
    assert plan_diff.document_key("p1", "0" * 64) == f"plans/p1/{'0' * 64}.md"


_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r\n"), min_size=1, max_size=30
).filter(lambda t: t.strip() != "")


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.booleans(),
            _TEXT,
            st.lists(
                st.text(
                    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r\n"), max_size=20
                ),
                max_size=4,
            ),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_any_parsed_document_round_trips_through_its_kept_form(
    items: list[tuple[bool, str, list[str]]],
) -> None:
    lines = ["---", "repo: a/b", "checks: [t]", "---"]
    for checked, title, details in items:
        lines.append(f"- [{'x' if checked else ' '}] {title}")
        lines += [f"  {d}" for d in details]
    try:
        parsed = parse_document("\n".join(lines) + "\n")
    except Exception:  # what the parser refuses (a title of only spaces once stripped ...) is not kept
        return
    kept = content("\n".join(lines) + "\n")
    assert (
        read_kept(kept_document(kept, parsed.title), parsed.content_hash).content_hash == parsed.content_hash
    )


# ---- which content a confirm may name


@pytest.mark.parametrize(
    "text",
    ["", "abc", "0" * 11, "g" * 12, "0" * 65, " ", "0" * 12 + " x", "0" * 12 + "\n" + "0", "\uff10" * 12],
    ids=[
        "empty",
        "short",
        "eleven",
        "not hex",
        "too long",
        "blank",
        "trailing junk",
        "newline",
        "fullwidth digits",
    ],
)
def test_a_prefix_shorter_than_12_hex_characters_is_refused(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        plan_diff.given_hash(text)
    assert refused.value.field == "content_hash"
    assert "12" in refused.value.message


def test_a_given_hash_is_read_in_any_case() -> None:
    assert plan_diff.given_hash("ABCDEF012345") == "abcdef012345"
    assert plan_diff.given_hash("a" * 64) == "a" * 64


def test_known_hashes_are_the_last_twenty_and_the_approved_one() -> None:
    versions = [document(f"Item {n}") for n in range(MAX_CONTENT_HASHES + 5)]
    first = published(versions[0])
    approved = first.model_copy(update={"approved_hash": first.content_hash})
    hashes = [first.content_hash]
    plan = approved
    for markdown in versions[1:]:
        plan = publish(
            plan, plan_id="p1", user="alice", slug="demo", document=parse_document(markdown), now=NOW
        ).plan
        hashes.append(plan.content_hash)
    assert plan.content_hashes == tuple(hashes[-MAX_CONTENT_HASHES:])  # bounded, the current one last
    assert plan_diff.resolve_content(plan, plan.content_hash[:12]) == plan.content_hash
    assert plan_diff.resolve_content(plan, hashes[-2][:12]) == hashes[-2]
    assert plan_diff.resolve_content(plan, hashes[1][:12]) is None  # forgotten
    assert plan_diff.resolve_content(plan, hashes[0][:12]) == hashes[0]  # the approved one stays known


def test_a_republish_of_earlier_content_moves_its_hash_last_once() -> None:
    a, b = document("A"), document("B")
    plan = published(a, b, a)
    assert plan.content_hashes == (content(b).content_hash, content(a).content_hash)


def test_a_plan_stored_before_hashes_were_kept_knows_its_current_and_approved_ones() -> None:
    plan = published(document("A")).model_copy(update={"content_hashes": (), "approved_hash": "a" * 64})
    assert plan_diff.known_hashes(plan) == ("a" * 64, plan.content_hash)
    again = publish(
        plan, plan_id="p1", user="alice", slug="demo", document=parse_document(document("B")), now=NOW
    )
    assert again.plan.content_hashes == ("a" * 64, plan.content_hash, again.plan.content_hash)


def test_the_largest_plan_with_a_full_hash_history_still_fits_its_item() -> None:
    from steward.adapters.plan_store import MAX_STORED_PLAN_BYTES, stored_size  # noqa: PLC0415

    from tests.support.documents import largest_document  # noqa: PLC0415

    plan = published(largest_document()).model_copy(
        update={"content_hashes": tuple(f"{n:064x}" for n in range(20))}
    )
    assert stored_size(plan) <= MAX_STORED_PLAN_BYTES
