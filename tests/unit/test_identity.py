"""Deterministic ids and item matching on publish (pure)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from steward.domain import ids
from steward.domain.documents import parse_document
from steward.domain.errors import BadRequest
from steward.domain.plans import match_items, publish

from tests.support.documents import document, largest_document

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


def test_the_kept_history_is_bounded_whatever_the_publish_history() -> None:
    """Rounds of a hundred items, each given a task and then replaced by the next round: the
    removed items kept as history stay few and short, so the stored plan stays under
    DynamoDB's item limit; an item whose history was dropped comes back at a revision no
    task of it ever had (its key derives from its text, so a reused revision would reuse a
    task id)."""
    from steward.adapters.plan_store import plan_to_item  # noqa: PLC0415

    plan = None
    first_round: dict[str, str] = {}
    for n in range(8):
        titles = ["Anchor", *(f"Round {n} item {k} " + "t" * 2000 for k in range(99))]
        now = NOW + timedelta(minutes=n)
        plan = publish(
            plan, plan_id="p1", user="alice", slug="demo", document=parse_document(document(*titles)), now=now
        ).plan
        plan = plan.model_copy(
            update={
                "items": tuple(
                    i
                    if i.removed
                    else i.model_copy(
                        update={"task_id": ids.task_id("p1", i.key, i.revision, 1), "attempt": 1}
                    )
                    for i in plan.items
                )
            }
        )
        if n == 0:
            first_round = {i.title: i.key for i in plan.active_items[1:]}
        # the person deletes the round's checkboxes: their tasks stay as history
        plan = publish(
            plan,
            plan_id="p1",
            user="alice",
            slug="demo",
            document=parse_document(document("Anchor")),
            now=now,
        ).plan
        stored = json.dumps(plan_to_item(plan), default=str).encode()
        assert len(stored) < 100_000, f"round {n}: {len(stored)} bytes"
    assert plan is not None
    from steward.domain.plans import MAX_REMOVED_ITEMS, REMOVED_TITLE_CHARS  # noqa: PLC0415

    removed = [i for i in plan.items if i.removed]
    assert 0 < len(removed) <= MAX_REMOVED_ITEMS
    assert all(len(i.title) <= REMOVED_TITLE_CHARS and i.details == "" for i in removed)
    assert all(i.title.startswith("Round 7 ") for i in removed)  # the latest removals are kept

    title = next(iter(first_round))
    back = publish(
        plan,
        plan_id="p1",
        user="alice",
        slug="demo",
        document=parse_document(document("Anchor", title)),
        now=NOW,
    ).plan
    returned = back.active_items[1]
    assert returned.key == first_round[title]
    assert returned.revision > 1
    assert ids.task_id("p1", returned.key, returned.revision, 1) != ids.task_id("p1", returned.key, 1, 1)


def test_the_largest_document_fits_one_item_with_a_full_history_and_every_task_linked() -> None:
    """A 256 KiB document of a hundred items, published over a full history of removed items
    (titles of 200 four-byte characters), is accepted, and the plan still fits DynamoDB's
    item once every item is approved, linked to a task and classified: the room `save`
    keeps covers what later writes add."""
    from steward.adapters.dynamo import DYNAMODB_ITEM_LIMIT, item_size  # noqa: PLC0415
    from steward.adapters.plan_store import MAX_STORED_PLAN_BYTES, plan_to_item, stored_size  # noqa: PLC0415
    from steward.domain.models import Classification, ItemStatus, PlanStatus  # noqa: PLC0415
    from steward.domain.plans import MAX_REMOVED_ITEMS  # noqa: PLC0415

    def linked(plan, status=ItemStatus.RUNNING, classification=None):  # type: ignore[no-untyped-def]
        return plan.model_copy(
            update={
                "items": tuple(
                    i
                    if i.removed
                    else i.model_copy(
                        update={
                            "task_id": ids.task_id("p1", i.key, i.revision, 9),
                            "attempt": 9,
                            "status": status,
                            "last_classification": classification,
                            "supersedes": None,
                        }
                    )
                    for i in plan.items
                )
            }
        )

    old = [f"Old {n} " + "\U0001f600" * 200 for n in range(MAX_REMOVED_ITEMS + 10)]
    plan = linked(_published("Anchor", *old))
    plan = _published("Anchor", existing=plan)
    assert sum(i.removed for i in plan.items) == MAX_REMOVED_ITEMS
    plan = publish(
        plan, plan_id="p1", user="alice", slug="demo", document=parse_document(largest_document()), now=NOW
    ).plan
    assert stored_size(plan) <= MAX_STORED_PLAN_BYTES  # `save` accepts it
    grown = linked(plan, ItemStatus.FAILED, Classification.RETRYABLE.value).model_copy(
        update={
            "status": PlanStatus.ARCHIVED,
            "approved_hash": plan.content_hash,
            "version": 10**9,
            "confirmations": 10**6,
        }
    )
    written = plan_to_item(grown) | {
        "confirmed_at": "2026-01-01T00:00:00.000Z",
        "archived_at": "2026-01-01T00:00:00.000Z",
    }
    assert item_size(written) <= stored_size(plan) <= DYNAMODB_ITEM_LIMIT
