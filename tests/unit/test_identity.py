"""Deterministic ids and item matching on publish (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from steward.domain import ids
from steward.domain.documents import parse_document
from steward.domain.errors import BadRequest
from steward.domain.plans import match_items, publish

from tests.support.documents import document

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_ids_are_deterministic_and_distinct() -> None:
    plan = ids.plan_id("alice", "demo")
    assert plan == ids.plan_id("alice", "demo")
    assert plan != ids.plan_id("bob", "demo")
    task = ids.task_id(plan, "ikey", 1, 1)
    assert task == ids.task_id(plan, "ikey", 1, 1)
    assert len({task, ids.task_id(plan, "ikey", 1, 2), ids.task_id(plan, "ikey", 2, 1)}) == 3


def test_branch_round_trip_and_non_canonical_branches() -> None:
    task = ids.task_id(ids.plan_id("alice", "demo"), "ikey", 1, 1)
    assert ids.task_id_from_branch(ids.branch_name(task)) == task
    for branch in ("main", "steward/", "steward/xyz", "steward/" + task[1:] + "x", "feature/" + task[1:]):
        assert ids.task_id_from_branch(branch) is None


@pytest.mark.parametrize("slug", ["a", "demo-1", "0" * 63])
def test_valid_slugs(slug: str) -> None:
    assert ids.validate_slug(slug) == slug


@pytest.mark.parametrize("slug", ["", "-a", "A", "a_b", "a b", "0" * 64, "a/b", "é"])
def test_invalid_slugs(slug: str) -> None:
    with pytest.raises(BadRequest) as caught:
        ids.validate_slug(slug)
    assert caught.value.field == "slug"


def _published(*items: str, existing=None):  # type: ignore[no-untyped-def]
    doc = parse_document(document(*items))
    return publish(existing, plan_id="p1", user="alice", slug="demo", document=doc, now=NOW).plan


def test_swapping_two_items_keeps_both_keys() -> None:
    before = _published("Alpha", "Beta")
    after = _published("Beta", "Alpha", existing=before)
    assert {i.title: i.key for i in before.active_items} == {i.title: i.key for i in after.active_items}


def test_duplicate_texts_get_distinct_keys() -> None:
    plan = _published("Same", "Same", "Same")
    assert len({i.key for i in plan.active_items}) == 3


titles = st.lists(
    st.text(alphabet=st.characters(whitelist_categories=("L", "N")), min_size=1, max_size=12),
    min_size=1,
    max_size=12,
)


@given(before=titles, after=titles)
def test_unchanged_texts_keep_their_keys_under_any_edit(before: list[str], after: list[str]) -> None:
    """Any text present before and after keeps a key it had (as many times as it appears in
    both), whatever was inserted, deleted or moved."""
    old = _published(*before)
    new = _published(*after, existing=old)
    old_keys: dict[str, set[str]] = {}
    for item in old.active_items:
        old_keys.setdefault(item.title, set()).add(item.key)
    for title in set(before) & set(after):
        kept = [i.key for i in new.active_items if i.title == title and i.key in old_keys[title]]
        assert len(kept) == min(before.count(title), after.count(title))
    assert len({i.key for i in new.items}) == len(new.items)
    assert [i.title for i in new.active_items] == after


def test_match_items_keeps_removed_items_that_have_work() -> None:
    plan = _published("Alpha", "Beta")
    alpha = plan.active_items[0].model_copy(update={"task_id": "t1"})
    items = match_items("p1", (alpha, plan.active_items[1]), parse_document(document("Beta")).items)
    removed = [i for i in items if i.removed]
    assert [(i.key, i.task_id) for i in removed] == [(alpha.key, "t1")]
