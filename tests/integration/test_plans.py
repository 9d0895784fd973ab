"""Plan store rules against moto: publish upsert, lifecycle transitions, content binding."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from steward.adapters.dynamo import count_requests
from steward.domain.errors import Conflict, LifecycleError, NotFound, TooLarge
from steward.domain.models import Classification, ItemStatus, PlanStatus, TaskStatus, utcnow
from steward.wiring import Services

from tests.support.documents import document, largest_document, numbered
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


def test_a_publish_history_of_removed_long_titles_stays_storable(services: Services) -> None:
    """Each round publishes ten checkboxes with 24 KB titles, their tasks spawn, and the next
    publish deletes them: kept whole, the removed titles would pass 400 KB by round three."""
    for n in range(4):
        titles = [f"Round {n} item {k} " + "t" * 24_000 for k in range(10)]
        services.plans.publish("alice", "history", document("Anchor", *titles))
        plan = services.plans.confirm("alice", "history")
        for ordinal in range(2, 12):
            spawn_item(services, plan, ordinal)
        services.plans.publish("alice", "history", document("Anchor"))  # kept whole: a 500 by round 2
    stored = services.tables.table_by_name("plans").get_item(
        Key={"user": "alice", "slug": "history"}, ConsistentRead=True
    )["Item"]
    assert len(json.dumps(stored, default=str).encode()) < 100_000
    removed = [i for i in services.plans.get("alice", "history").items if i.removed]
    assert removed  # history: the latest removals, with their tasks
    assert all(i.task_id for i in removed)


def tabbed(lines: int, tabs: int) -> str:
    """Details whose indentation is tabs: each expands to four columns once stored."""
    return "\n".join(["Do it like this:", *(("\t" * tabs) + "and so on" for _ in range(lines))])


# (case, document, field the refusal names, words its message must hold)
UNSTORABLE = [
    (
        "one checkbox whose tab-indented details expand past an item's limit",
        document("Expand me\n" + tabbed(110, 1000)),
        "items[1]",
        ("checkbox 1", "tabs", "bytes"),
    ),
    (
        "a hundred checkboxes that together expand past what one plan item can hold",
        document(*(f"Item {n}\n" + tabbed(4, 500) for n in range(100))),
        "markdown",
        ("stored", "bytes", "tabs"),
    ),
]


@pytest.mark.parametrize(("case", "markdown", "field", "words"), UNSTORABLE, ids=[c[0] for c in UNSTORABLE])
def test_a_document_that_cannot_be_stored_is_refused_before_any_write(
    services: Services, case: str, markdown: str, field: str, words: tuple[str, ...]
) -> None:
    assert len(markdown.encode()) <= 256 * 1024, case  # a valid document by every other rule
    with count_requests(services.tables) as requests, pytest.raises(TooLarge) as refused:
        services.plans.publish("alice", "fresh", markdown)
    assert (refused.value.status, refused.value.field) == (413, field), case
    assert all(word in refused.value.message for word in words), refused.value.message
    assert "PutItem" not in requests, case
    with pytest.raises(NotFound):
        services.plans.get("alice", "fresh")

    services.plans.publish("alice", "kept", document("Alpha", "Beta"))
    before = services.plans.confirm("alice", "kept")
    with count_requests(services.tables) as requests, pytest.raises(TooLarge):
        services.plans.publish("alice", "kept", markdown)
    assert set(requests) <= {"GetItem"}, case  # at most read and judged: nothing written
    assert services.plans.get("alice", "kept") == before


def test_a_hundred_item_document_at_the_size_limit_is_stored_and_spawns(services: Services) -> None:
    """The largest document the parser accepts (no tabs), front matter near its own limit:
    stored, confirmed, spawned, projected (the room every later write needs is checked in
    `tests/unit/test_identity.py`)."""
    markdown = largest_document()
    assert len(markdown.encode()) == 256 * 1024
    plan = services.plans.publish("alice", "max", markdown)
    assert len(plan.active_items) == 100
    plan = services.plans.confirm("alice", "max")
    for ordinal in (1, 100):
        task, created = spawn_item(services, plan, ordinal)
        assert created
        failed = task.model_copy(
            update={"status": TaskStatus.FAILED, "classification": Classification.RETRYABLE}
        )
        assert services.tasks.tasks.project_item(failed, now=utcnow())
    stored = services.plans.get("alice", "max")
    assert [i.last_classification for i in stored.active_items if i.task_id] == ["retryable"] * 2


def test_archive_cancels_the_plans_queued_and_running_tasks_at_once(services: Services) -> None:
    """Not at the loop's next tick: a runtime must not publish for an archived plan meanwhile."""
    services.plans.publish("alice", "doomed", document(*numbered(3)))
    plan = services.plans.confirm("alice", "doomed")
    services.plans.publish("alice", "kept", document("Another plan's item"))
    other = services.plans.confirm("alice", "kept")
    now = utcnow()
    running = services.tasks.tasks.claim(
        spawn_item(services, plan, 1)[0], runtime_id="r1", now=now, deadline=now + timedelta(hours=1)
    )
    queued, _ = spawn_item(services, plan, 2)
    in_review, _ = services.tasks.tasks.transition(
        services.tasks.tasks.claim(
            spawn_item(services, plan, 3)[0], runtime_id="r3", now=now, deadline=now + timedelta(hours=1)
        ),
        TaskStatus.REVIEW,
        now=now,
        event="github_event",
    )
    elsewhere, _ = spawn_item(services, other, 1)

    archived = services.plans.archive("alice", "doomed")

    assert archived.status is PlanStatus.ARCHIVED
    after = {t.id: services.tasks.tasks.require(t.id) for t in (running, queued, in_review, elsewhere)}
    for task in (running, queued):
        assert (after[task.id].status, after[task.id].reason) == (TaskStatus.CANCELLED, "plan archived")
    assert after[in_review.id].status is TaskStatus.REVIEW  # its pull request stays the person's to decide
    assert after[elsewhere.id].status is TaskStatus.QUEUED  # another plan's task is untouched
