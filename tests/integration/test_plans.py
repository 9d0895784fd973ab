"""Plan store rules against moto: publish upsert, lifecycle transitions, content binding."""

from __future__ import annotations

import pytest
from steward.domain.errors import Conflict, LifecycleError, NotFound
from steward.domain.models import ItemStatus, PlanStatus
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.plans import spawn_item


def test_first_publish_creates_a_draft_with_ordered_items(services: Services) -> None:
    plan = services.plans.publish("alice", "demo", document("First", "[x] Done by hand", "Third"))
    assert plan.status is PlanStatus.DRAFT
    assert [(i.ordinal, i.title, i.status) for i in plan.active_items] == [
        (1, "First", ItemStatus.PENDING),
        (2, "Done by hand", ItemStatus.DONE),
        (3, "Third", ItemStatus.PENDING),
    ]
    assert services.plans.get("alice", "demo") == plan


def test_identical_republish_changes_nothing(services: Services) -> None:
    first = services.plans.publish("alice", "demo", document(*numbered(3)))
    again = services.plans.publish("alice", "demo", document(*numbered(3)))
    assert again == first
    assert again.version == first.version


def test_confirm_binds_to_content_and_any_change_needs_a_new_confirmation(services: Services) -> None:
    services.plans.publish("alice", "demo", document(*numbered(2)))
    confirmed = services.plans.confirm("alice", "demo")
    assert confirmed.status is PlanStatus.CONFIRMED
    assert confirmed.approved_hash == confirmed.content_hash

    changed = services.plans.publish("alice", "demo", document(*numbered(3)))
    assert changed.status is PlanStatus.AWAITING_CONFIRMATION
    assert changed.approved_hash == confirmed.content_hash != changed.content_hash

    reconfirmed = services.plans.confirm("alice", "demo")
    assert reconfirmed.status is PlanStatus.CONFIRMED
    assert reconfirmed.approved_hash == changed.content_hash


def test_change_to_an_in_progress_plan_returns_it_to_awaiting_confirmation(services: Services) -> None:
    services.plans.publish("alice", "demo", document(*numbered(2)))
    plan = services.plans.confirm("alice", "demo")
    task, _ = spawn_item(services, plan, 1)
    assert services.plans.get("alice", "demo").status is PlanStatus.IN_PROGRESS

    edited = services.plans.publish("alice", "demo", document("Item 1: change module 1", "Rewritten"))
    assert edited.status is PlanStatus.AWAITING_CONFIRMATION
    # the running task was approved and keeps its link
    assert edited.active_items[0].task_id == task.id
    assert edited.active_items[0].status is ItemStatus.RUNNING
    # no new work until a person approves the new content; then it is confirmed again
    reapproved = services.plans.confirm("alice", "demo")
    assert reapproved.status is PlanStatus.CONFIRMED
    assert reapproved.approved_hash == edited.content_hash
    assert reapproved.active_items[0].task_id == task.id


def test_confirm_rules(services: Services) -> None:
    services.plans.publish("alice", "demo", document("One"))
    assert services.plans.submit("alice", "demo").status is PlanStatus.AWAITING_CONFIRMATION
    assert services.plans.confirm("alice", "demo").status is PlanStatus.CONFIRMED
    again = services.plans.confirm("alice", "demo")  # success, no second transition
    assert again.status is PlanStatus.CONFIRMED
    assert again.confirmations == 1
    with pytest.raises(LifecycleError):
        services.plans.submit("alice", "demo")
    spawn_item(services, services.plans.get("alice", "demo"), 1)
    with pytest.raises(LifecycleError):
        services.plans.confirm("alice", "demo")  # in_progress
    assert services.plans.archive("alice", "demo").status is PlanStatus.ARCHIVED
    assert services.plans.archive("alice", "demo").status is PlanStatus.ARCHIVED
    for action in (services.plans.confirm, services.plans.submit):
        with pytest.raises(LifecycleError):
            action("alice", "demo")
    with pytest.raises(LifecycleError):
        services.plans.publish("alice", "demo", document("One", "Two"))


def test_confirm_with_a_stale_content_hash_is_refused(services: Services) -> None:
    seen = services.plans.publish("alice", "demo", document("One"))
    services.plans.publish("alice", "demo", document("One", "Sneaked in"))
    with pytest.raises(Conflict) as caught:
        services.plans.confirm("alice", "demo", seen.content_hash)
    assert caught.value.field == "content_hash"
    assert services.plans.get("alice", "demo").status is PlanStatus.DRAFT


def test_unknown_plan_and_other_users_plan_are_not_found(services: Services) -> None:
    services.plans.publish("alice", "demo", document("One"))
    for action in (services.plans.get, services.plans.confirm, services.plans.submit, services.plans.archive):
        with pytest.raises(NotFound):
            action("bob", "demo")
    assert services.plans.get("alice", "demo").status is PlanStatus.DRAFT


def test_moved_items_keep_key_status_and_task(services: Services) -> None:
    services.plans.publish("alice", "demo", document("Alpha", "Beta", "Gamma"))
    plan = services.plans.confirm("alice", "demo")
    beta_task, _ = spawn_item(services, plan, 2)
    keys = {i.title: i.key for i in plan.active_items}

    moved = services.plans.publish("alice", "demo", document("Beta", "New first", "Gamma", "Alpha"))
    by_title = {i.title: i for i in moved.active_items}
    assert {t: by_title[t].key for t in ("Alpha", "Beta", "Gamma")} == keys
    assert by_title["Beta"].task_id == beta_task.id
    assert by_title["Beta"].status is ItemStatus.RUNNING
    assert by_title["Beta"].ordinal == 1
    assert by_title["New first"].key not in keys.values()
    assert by_title["New first"].status is ItemStatus.PENDING


def test_text_change_after_work_started_is_a_new_revision(services: Services) -> None:
    services.plans.publish("alice", "demo", document("Alpha", "Beta"))
    plan = services.plans.confirm("alice", "demo")
    alpha_task, _ = spawn_item(services, plan, 1)
    alpha_key = plan.active_items[0].key

    edited = services.plans.publish("alice", "demo", document("Alpha, but better", "Beta"))
    item = edited.active_items[0]
    assert item.key == alpha_key
    assert (item.revision, item.status, item.task_id) == (2, ItemStatus.PENDING, None)
    # the earlier task stays as history
    old = services.tasks.get("alice", alpha_task.id)
    assert (old.revision, old.title) == (1, "Alpha")

    # a text change before any work keeps the revision
    beta = edited.active_items[1]
    edited2 = services.plans.publish("alice", "demo", document("Alpha, but better", "Beta v2"))
    assert (edited2.active_items[1].key, edited2.active_items[1].revision) == (beta.key, 1)


def test_deleted_checkbox_is_removed_without_touching_its_task(services: Services) -> None:
    services.plans.publish("alice", "demo", document("Alpha", "Beta"))
    plan = services.plans.confirm("alice", "demo")
    task, _ = spawn_item(services, plan, 1)

    after = services.plans.publish("alice", "demo", document("Beta"))
    shown = {i["title"]: i for i in after.to_api()["items"]}
    assert shown["Alpha"]["status"] == "removed"
    assert shown["Alpha"]["task_id"] == task.id
    assert shown["Alpha"]["ordinal"] is None
    assert services.tasks.get("alice", task.id).status.value == "queued"

    restored = services.plans.publish("alice", "demo", document("Alpha", "Beta"))
    alpha = restored.active_items[0]
    assert (alpha.title, alpha.task_id, alpha.status) == ("Alpha", task.id, ItemStatus.RUNNING)


def test_checking_a_box_by_hand_marks_the_item_done(services: Services) -> None:
    services.plans.publish("alice", "demo", document("Alpha", "Beta"))
    plan = services.plans.publish("alice", "demo", document("[x] Alpha", "Beta"))
    assert [i.status for i in plan.active_items] == [ItemStatus.DONE, ItemStatus.PENDING]
    plan = services.plans.publish("alice", "demo", document("Alpha", "Beta"))
    assert [i.status for i in plan.active_items] == [ItemStatus.PENDING, ItemStatus.PENDING]


def test_a_hundred_item_plan_near_the_size_limit_fits_one_item(services: Services) -> None:
    detail = "x" * 2400
    items = [f"Item {n}\n{detail}" for n in range(100)]
    markdown = document(*items)
    assert 240_000 < len(markdown.encode()) <= 256 * 1024
    plan = services.plans.publish("alice", "big", markdown)
    assert len(plan.active_items) == 100
    plan = services.plans.confirm("alice", "big")
    task, created = spawn_item(services, plan, 100)
    assert created
    assert services.plans.get("alice", "big").active_items[99].task_id == task.id
