"""Plans with structure (docs/concepts/task-document.md), pure: `(after #n)` and `order:
sequential` as the parser reads and refuses them, as publish re-resolves them, as the content
hash and `plan diff` see them, and as the loop decides from them (every predecessor state)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from steward.domain import order, waiting
from steward.domain.documents import TaskDocument, content_hash_of, parse_document
from steward.domain.errors import InvalidDocument
from steward.domain.loop import LoopSettings, LoopState
from steward.domain.models import ItemStatus, Plan, PlanStatus, TaskStatus
from steward.domain.plan_diff import content_of, diff, kept_document, read_kept
from steward.domain.plans import publish
from steward.domain.reconcile import CompletePlan, Policy, Reply, Spawn, reconcile
from steward.domain.tasks import task_for
from steward.services.publication import (
    RELATED_END,
    RELATED_START,
    pull_request_body,
    related_section,
    with_related,
)

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
FRONT = "---\nrepo: octo/widgets\nchecks:\n  - pytest -q\n---\n"  # body starts on line 6
SEQUENTIAL = "---\nrepo: octo/widgets\norder: sequential\nchecks:\n  - pytest -q\n---\n"


def parse(body: str, front: str = FRONT) -> TaskDocument:
    return parse_document(front + body)


def plan_of(body: str, front: str = FRONT, existing: Plan | None = None) -> Plan:
    result = publish(
        existing, plan_id="pid", user="alice", slug="p", document=parse(body, front), now=NOW
    ).plan
    return result.model_copy(update={"status": PlanStatus.IN_PROGRESS, "approved_hash": result.content_hash})


def waits(plan: Plan) -> dict[int, list[int]]:
    return {i.ordinal: [p.ordinal for p in plan.predecessors(i)] for i in plan.active_items}


# --- the parser ---------------------------------------------------------------------------

ORDERS = [
    # (body, titles, explicit references per item)
    ("- [ ] a\n- [ ] b (after #1)\n", ["a", "b"], [(), (1,)]),
    ("- [ ] a\n- [ ] b\n- [ ] c (after #1, #2)\n", ["a", "b", "c"], [(), (), (1, 2)]),
    ("- [ ] a\n- [ ] b\n- [ ] c (after #2,#1, #2)\n", ["a", "b", "c"], [(), (), (1, 2)]),
    ("- [ ] a (after #2)\n- [ ] b\n", ["a", "b"], [(2,), ()]),  # forward references are order too
    ("- [ ] a\n- [ ] b (AFTER  #1 )\n", ["a", "b"], [(), (1,)]),
    ("- [x] a\n- [ ] b (after #1)\n", ["a", "b"], [(), (1,)]),
    # in the details, or not at the end of the line, it is text
    ("- [ ] a\n- [ ] b\n  (after #1)\n", ["a", "b"], [(), ()]),
    ("- [ ] a\n- [ ] b (after #1) then c\n", ["a", "b (after #1) then c"], [(), ()]),
    ("- [ ] a\n- [ ] ship it (after review)\n", ["a", "ship it (after review)"], [(), ()]),
    ("- [ ] a\n- [ ] b (after)\n", ["a", "b (after)"], [(), ()]),
    ("- [ ] a\r\n- [ ] b (after #1)\r\n", ["a", "b"], [(), (1,)]),  # CRLF
]


@pytest.mark.parametrize(("body", "titles", "after"), ORDERS)
def test_after_references_are_read_from_the_end_of_the_checkbox_line(
    body: str, titles: list[str], after: list[tuple[int, ...]]
) -> None:
    document = parse(body)
    assert [i.title for i in document.items] == titles
    assert [i.after for i in document.items] == after


BAD_ORDERS = [
    # (front, body, field, line, words in the message)
    (FRONT, "- [ ] a (after #1)\n", "items[1].after", 6, "waits for itself (#1)"),
    (FRONT, "- [ ] a\n- [ ] b (after #3)\n", "items[2].after", 7, "waits for #3, but the document has 2"),
    (FRONT, "- [ ] a\n- [ ] b (after #0)\n", "items[2].after", 7, "waits for #0"),
    (FRONT, "- [ ] a (after #2)\n- [ ] b (after #1)\n", "items[1].after", 6, "#1 -> #2 -> #1"),
    (FRONT, "- [ ] a (after #3)\n- [ ] b (after #1)\n- [ ] c (after #2)\n", "items[1].after", 6, "cycle"),
    (FRONT, "- [ ] a\n- [ ] b (after #one)\n", "items[2].after", 7, "(after #1, #3)"),
    (FRONT, "- [ ] a\n- [ ] b (after #1 and #2)\n", "items[2].after", 7, "write the items"),
    (FRONT, "- [ ] a\n- [ ] b (after #1; #2)\n", "items[2].after", 7, "write the items"),
    (FRONT, "- [ ] (after #2)\n- [ ] b\n", "items[1].title", 6, "has no text"),
    # sequential makes #1 wait for nothing, #2 for #1: #1 after #2 closes a cycle
    (SEQUENTIAL, "- [ ] a (after #2)\n- [ ] b\n", "items[1].after", 7, "#1 -> #2 -> #1"),
    (FRONT.replace("checks", "order: parallel\nchecks"), "- [ ] a\n", "front_matter.order", 3, "sequential"),
    (FRONT, "- [ ] a\n  repo: nobody\n", "items[1].repo", 6, "owner/name"),
    (FRONT, "- [ ] a\n  repo: a/b\n  repo: c/d\n", "items[1].repo", 6, "2 times"),
]


@pytest.mark.parametrize(("front", "body", "field", "line", "words"), BAD_ORDERS)
def test_bad_order_and_repositories_are_refused_naming_the_item(
    front: str, body: str, field: str, line: int, words: str
) -> None:
    with pytest.raises(InvalidDocument) as info:
        parse(body, front)
    assert (info.value.field, info.value.line, info.value.status) == (field, line, 422)
    assert words in info.value.message


def test_an_item_names_its_repository_in_its_details() -> None:
    document = parse("- [ ] a\n- [ ] b (after #1)\n  repo: octo/web\n  Change the page.\n")
    assert [i.repo for i in document.items] == [None, "octo/web"]
    plan = plan_of("- [ ] a\n- [ ] b (after #1)\n  repo: octo/web\n")
    assert [plan.item_repo(i) for i in plan.active_items] == ["octo/widgets", "octo/web"]
    assert task_for(plan, plan.active_items[1], attempt=1, now=NOW).repo == "octo/web"


# --- approval: the hash, publish, diff ----------------------------------------------------


def test_a_plan_without_order_keeps_the_hash_it_had_before_order_existed() -> None:
    document = parse("- [ ] a\n- [ ] b\n")
    fm = document.front_matter.model_dump(mode="json")
    fm.pop("order")
    assert document.content_hash == content_hash_of(fm, document.items)
    ordered = parse("- [ ] a\n- [ ] b (after #1)\n")
    assert [i.text_hash for i in ordered.items] == [i.text_hash for i in document.items]  # same work
    assert (
        len(
            {
                document.content_hash,
                ordered.content_hash,
                parse("- [ ] a\n- [ ] b\n", SEQUENTIAL).content_hash,
            }
        )
        == 3
    )


def test_references_are_re_resolved_at_each_publish_and_a_changed_referent_is_a_changed_item() -> None:
    approved = plan_of("- [ ] a\n- [ ] b\n- [ ] c (after #1)\n")
    assert waits(approved) == {1: [], 2: [], 3: [1]}
    # A checkbox inserted above, references untouched: #1 is now the new item, so c waits
    # for it. The work is the same (no new revision), its order is not: re-confirmation.
    inserted = plan_of("- [ ] new\n- [ ] a\n- [ ] b\n- [ ] c (after #1)\n", existing=approved)
    c = inserted.active_items[3]
    assert (c.title, c.revision, [p.title for p in inserted.predecessors(c)]) == ("c", 1, ["new"])
    changes = diff(content_of(approved), content_of(inserted)).items
    assert [(ch.title, ch.change, ch.fields) for ch in changes] == [
        ("new", "added", ()),
        ("c", "edited", ("after",)),
    ]
    # The reference renumbered to keep naming `a`: the order is the approved one.
    renumbered = plan_of("- [ ] new\n- [ ] a\n- [ ] b\n- [ ] c (after #2)\n", existing=approved)
    assert [(ch.title, ch.change) for ch in diff(content_of(approved), content_of(renumbered)).items] == [
        ("new", "added")
    ]


def test_sequential_order_follows_inserted_and_removed_items() -> None:
    plan = plan_of("- [ ] a\n- [ ] b\n- [ ] c\n", SEQUENTIAL)
    assert waits(plan) == {1: [], 2: [1], 3: [2]}
    inserted = plan_of("- [ ] a\n- [ ] x\n- [ ] b\n- [ ] c\n", SEQUENTIAL, existing=plan)
    assert {i.title: [p.title for p in inserted.predecessors(i)] for i in inserted.active_items} == {
        "a": [],
        "x": ["a"],
        "b": ["x"],
        "c": ["b"],
    }
    removed = plan_of("- [ ] a\n- [ ] c (after #1)\n", SEQUENTIAL, existing=inserted)
    assert {i.title: [p.title for p in removed.predecessors(i)] for i in removed.active_items} == {
        "a": [],
        "c": ["a"],
    }


def test_a_kept_document_reads_back_to_the_same_order() -> None:
    plan = plan_of("- [ ] a\n- [ ] b\n- [ ] c (after #1, #2)\n  repo: octo/web\n", SEQUENTIAL)
    content = content_of(plan)
    assert content.content_hash == plan.content_hash
    text = kept_document(content, plan.title)
    assert "- [ ] c (after #1, #2)" in text
    kept = read_kept(text, plan.content_hash)  # refuses a document whose hash differs
    assert [(i.title, i.details, i.after) for i in kept.items] == [
        (i.title, i.details, i.after) for i in content.items
    ]


# --- the loop's decision ------------------------------------------------------------------

CHAIN = "- [ ] first\n- [ ] second (after #1)\n"


def chain(status: ItemStatus, **first: object) -> Plan:
    plan = plan_of(CHAIN)
    one = plan.active_items[0].model_copy(update={"status": status, "task_id": "t1", "attempt": 1, **first})
    return plan.model_copy(update={"items": (one, plan.active_items[1])})


PREDECESSOR_STATES = [
    # (status of #1, its classification, attempt, what #2 does: spawn / after / blocked)
    (ItemStatus.PENDING, None, 0, "after"),
    (ItemStatus.RUNNING, None, 1, "after"),
    (ItemStatus.REVIEW, None, 1, "after"),
    (ItemStatus.MERGED, None, 1, "spawn"),
    (ItemStatus.DONE, None, 1, "spawn"),
    (ItemStatus.FAILED, "retryable", 1, "after"),  # the loop retries it
    (ItemStatus.FAILED, "retryable", 3, "blocked"),  # attempts used up
    (ItemStatus.FAILED, "final", 1, "blocked"),  # failed for good, withdrawn or cancelled
    (ItemStatus.FAILED, None, 1, "blocked"),
    (ItemStatus.CLOSED, None, 1, "blocked"),
]


@pytest.mark.parametrize(("status", "classification", "attempt", "expected"), PREDECESSOR_STATES)
def test_an_item_starts_only_once_every_predecessor_merged(
    status: ItemStatus, classification: str | None, attempt: int, expected: str
) -> None:
    plan = chain(status, last_classification=classification, attempt=attempt)
    if status is ItemStatus.PENDING:
        plan = plan_of(CHAIN)
    second = plan.active_items[1]
    decision = reconcile([plan], [], NOW, Policy(max_parallel=10, spawns_left=10))
    spawned = [a.item_key for a in decision.actions if isinstance(a, Spawn)]
    assert (second.key in spawned) is (expected == "spawn")
    state = order.order_state(plan, second)
    assert {"spawn": state.ready, "after": bool(state.waiting_for), "blocked": bool(state.blocked_by)}[
        expected
    ]
    shown = waiting.for_item(plan, second, LoopState(user="alice", settings=LoopSettings()), [], NOW)
    if expected == "spawn":
        assert shown is None or shown.reason not in ("after", "blocked")
    else:
        assert shown is not None
        assert shown.reason == expected
        assert shown.detail.startswith("#1 ")
    if expected == "spawn":
        spawn = next(a for a in decision.actions if isinstance(a, Spawn) and a.item_key == second.key)
        assert spawn.after == (plan.active_items[0].key,)  # the spawn's write re-checks it


def test_the_waiting_reason_names_each_predecessor_and_where_it_is() -> None:
    plan = plan_of("- [ ] a\n- [ ] b\n- [ ] c (after #1, #2)\n")
    a, b, c = plan.active_items
    plan = plan.model_copy(
        update={
            "items": (
                a.model_copy(update={"status": ItemStatus.REVIEW, "task_id": "ta"}),
                b.model_copy(update={"status": ItemStatus.MERGED, "task_id": "tb"}),
                c,
            )
        }
    )
    shown = waiting.for_item(plan, c, LoopState(user="alice", settings=LoopSettings()), [], NOW)
    assert shown is not None
    assert (shown.reason, shown.detail) == ("after", "#1 (review)")


def test_blocking_passes_down_a_chain_and_a_wholly_blocked_plan_is_not_completed() -> None:
    plan = plan_of("- [ ] a\n- [ ] b\n- [ ] c\n", SEQUENTIAL)
    a, b, c = plan.active_items
    closed = plan.model_copy(
        update={"items": (a.model_copy(update={"status": ItemStatus.CLOSED, "task_id": "ta"}), b, c)}
    )
    state = order.order_state(closed, c)
    assert [i.ordinal for i in state.blocked_by] == [1]
    assert not state.waiting_for
    assert state.detail() == "#1 closed without merge; retry it or edit the plan"
    assert order.blocked(closed)
    decision = reconcile([closed], [], NOW, Policy(max_parallel=10, spawns_left=10))
    assert not any(isinstance(x, Spawn | CompletePlan) for x in decision.actions)
    # a person's retry makes #1 pending again: nothing is blocked, #2 waits for it
    retried = closed.model_copy(
        update={
            "items": (
                a.model_copy(update={"status": ItemStatus.PENDING, "task_id": "ta", "retry_requested": True}),
                b,
                c,
            )
        }
    )
    assert not order.blocked(retried)
    assert order.order_state(retried, b).detail() == "#1 (pending)"
    assert [
        x.item_key
        for x in reconcile([retried], [], NOW, Policy(max_parallel=10, spawns_left=10)).actions
        if isinstance(x, Spawn)
    ] == [a.key]


def test_a_pull_request_in_review_links_those_of_the_items_it_waits_for_once() -> None:
    plan = plan_of(CHAIN)
    first, second = plan.active_items
    task = task_for(plan, second, attempt=1, now=NOW).model_copy(
        update={"status": TaskStatus.REVIEW, "launched_at": NOW}
    )
    plan = plan.model_copy(
        update={
            "items": (
                first.model_copy(update={"status": ItemStatus.MERGED, "task_id": "t1"}),
                second.model_copy(update={"status": ItemStatus.REVIEW, "task_id": task.id}),
            )
        }
    )
    policy = Policy(max_parallel=10, spawns_left=10)
    assert Reply(task.id, order.RELATED) in reconcile([plan], [task], NOW, policy).actions
    done = task.model_copy(update={"replied": (order.RELATED,)})
    assert not any(isinstance(a, Reply) for a in reconcile([plan], [done], NOW, policy).actions)


def test_the_related_section_links_each_neighbour_and_is_rewritten_in_place() -> None:
    plan = plan_of("- [ ] first\n- [ ] second (after #1)\n  repo: octo/web\n")
    first, second = plan.active_items
    t1 = task_for(plan, first, attempt=1, now=NOW).model_copy(
        update={"pr_url": "https://github.test/octo/widgets/pull/7"}
    )
    t2 = task_for(plan, second, attempt=1, now=NOW).model_copy(
        update={"pr_url": "https://github.test/octo/web/pull/3"}
    )
    plan = plan.model_copy(
        update={
            "items": (
                first.model_copy(update={"task_id": t1.id, "status": ItemStatus.MERGED}),
                second.model_copy(update={"task_id": t2.id, "status": ItemStatus.REVIEW}),
            )
        }
    )
    first, second = plan.active_items
    before = order.related(plan, first, {})  # the first's pull request opened before the second's
    assert before == [
        {
            "relation": "before",
            "ordinal": 2,
            "title": "second",
            "repo": "octo/web",
            "status": "review",
            "pr_url": None,
        }
    ]
    body = pull_request_body(t1, "Did it. " + RELATED_START, [], 0, before)  # type: ignore[arg-type]
    assert "no pull request yet" in body
    now_linked = with_related(body, related_section("p", order.related(plan, first, {t1.id: t1, t2.id: t2})))
    assert "[octo/web pull request](https://github.test/octo/web/pull/3)" in now_linked
    assert "no pull request yet" not in now_linked
    assert now_linked.count(RELATED_END) == 1
    # the summary's text is left alone, a marker the model wrote in it made inert
    assert now_linked.startswith("Did it. &lt;!-- steward:related --&gt;")
    assert (
        with_related(now_linked, related_section("p", order.related(plan, first, {t1.id: t1, t2.id: t2})))
        == now_linked
    )
    after = order.related(plan, second, {t1.id: t1})
    assert [(r["relation"], r["ordinal"], r["pr_url"]) for r in after] == [("after", 1, t1.pr_url)]
