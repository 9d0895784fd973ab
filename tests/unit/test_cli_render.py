"""What the CLI prints from the API's answers: each case is what a person reads in a
terminal (`steward.cli_render`, and `steward.cli:main` with the API's answers as data)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from steward.cli import main
from steward.cli_render import render_plan, render_plans, render_task, waiting_text

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def stamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


# (the API's waiting, what the CLI prints)
WAITS: list[tuple[dict[str, Any] | None, str]] = [
    (None, "-"),
    (
        {
            "reason": "next_tick",
            "until": stamp(NOW + timedelta(seconds=30)),
            "detail": "the loop looks every 60 s",
        },
        "next_tick until 2026-06-01T12:00:30Z: the loop looks every 60 s",
    ),
    (
        {
            "reason": "next_tick",
            "until": stamp(NOW - timedelta(seconds=5)),
            "detail": "the loop looks every 5 s",
        },
        "next_tick due now: the loop looks every 5 s",
    ),
    (
        {"reason": "next_tick", "until": stamp(NOW), "detail": "the loop looks every 5 s"},
        "next_tick due now: the loop looks every 5 s",
    ),
    (
        {"reason": "quiet_hours", "until": stamp(NOW - timedelta(hours=1)), "detail": "quiet hours"},
        "quiet_hours until 2026-06-01T11:00:00Z: quiet hours",  # only a tick is ever "due"
    ),
    ({"reason": "paused", "until": None, "detail": "the loop is paused"}, "paused: the loop is paused"),
]


@pytest.mark.parametrize(("waiting", "shown"), WAITS)
def test_a_next_tick_whose_time_has_passed_is_due_now(waiting: dict[str, Any] | None, shown: str) -> None:
    assert waiting_text(waiting, NOW) == shown


def plan(*items: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "slug": "demo",
        "status": "awaiting_confirmation",
        "title": "Demo",
        "repo": "octo/demo",
        "content_hash": "a" * 64,
        "approved_hash": None,
        "front_matter": {"repo": "octo/demo", "model": "scripted", "budget_usd": "0.5", "checks": ["pytest"]},
        "items": list(items),
        **fields,
    }


def item(ordinal: int, title: str, **fields: Any) -> dict[str, Any]:
    return {
        "ordinal": ordinal,
        "key": f"k{ordinal}",
        "title": title,
        "status": "pending",
        "task_id": None,
        "checked": False,
        "details": "",
        "waiting": None,
        **fields,
    }


# Titles whose characters a terminal would act on or hide: every view shows their escapes.
HOSTILE_TITLES = [
    ("\u202eexe.gnp", "\\u202eexe.gnp"),
    ("a\u2066b\u2069c", "a\\u2066b\\u2069c"),
    ("zero\u200bwidth", "zero\\u200bwidth"),
    ("bell\x07and\x1b[2Jclear", "bell\\u0007and\\u001b[2Jclear"),
]


@pytest.mark.parametrize(("title", "shown"), HOSTILE_TITLES)
def test_the_items_table_shows_control_and_bidirectional_characters_as_escapes(
    title: str, shown: str
) -> None:
    table = render_plan(plan(item(1, title)))
    assert shown in table
    assert title not in table


def test_plan_show_says_what_confirming_may_spend_at_most() -> None:
    spend = {"usd": "5.00", "items": 2, "budget_usd": "0.50", "attempts": 3, "follow_ups": 2}
    shown = render_plan(plan(item(1, "One"), item(2, "Two"), max_spend=spend), full=True)
    assert (
        "  may spend:    at most 5.00 USD (2 pending items x 0.50 USD x (3 attempts + 2 follow-up rounds)), "
        "plus up to 0.50 USD per retry you ask for"
    ) in shown.splitlines()
    assert "  follow_ups:   2 (rounds per item on its pull request)" in shown.splitlines()
    off = {**spend, "usd": "3.00", "follow_ups": 0}  # rounds turned off: attempts alone
    assert "x 0.50 USD x 3 attempts), plus" in render_plan(plan(item(1, "One"), max_spend=off), full=True)


def test_an_edited_items_earlier_revision_in_review_is_shown_with_its_pull_request() -> None:
    earlier = {
        "task_id": "t" + "1" * 24,
        "revision": 1,
        "attempt": 1,
        "pr_url": "https://github.com/o/r/pull/7",
    }
    shown = render_plan(plan(item(1, "Edited", revision=2, earlier_reviews=[earlier]), item(2, "Other")))
    assert (
        f"  #1: revision 1 is still in review: task {earlier['task_id']}, https://github.com/o/r/pull/7 "
        "(open until merged or closed)"
    ) in shown.splitlines()
    assert "still in review" not in render_plan(plan(item(1, "Edited", earlier_reviews=[])))


def test_plan_show_and_task_show_say_the_follow_up_rounds_used_of_allowed() -> None:
    in_review = item(1, "One", status="review", task_id="t" + "1" * 24, rounds={"used": 1, "allowed": 2})
    merged = item(2, "Two", status="merged", rounds=None)
    assert "follow-up rounds:\n  #1: 1 of 2 used" in render_plan(plan(in_review, merged))
    assert "follow-up rounds" not in render_plan(plan(merged))
    task = {"id": "t" + "1" * 24, "status": "review", "rounds_used": 1, "follow_ups": 2, "round": 0}
    assert "rounds:         1 of 2 follow-up rounds used" in render_task(task).splitlines()
    one = {"id": "t" + "2" * 24, "status": "answered", "parent": task["id"], "round": 1, "follow_ups": 0}
    assert f"round:          follow-up round 1 of task {task['id']}" in render_task(one).splitlines()


def test_plan_show_says_what_an_item_waits_for_where_it_works_and_that_the_plan_is_blocked() -> None:
    closed = item(1, "One", status="closed", task_id="t" + "1" * 24, repo="octo/demo")
    after = {
        "reason": "blocked",
        "until": None,
        "detail": "#1 closed without merge; retry it or edit the plan",
    }
    blocked = item(2, "Two", repo="octo/web", after=[1], waiting=after)
    shown = render_plan(plan(closed, blocked, status="in_progress", blocked=True))
    assert "  blocked: every item still to do waits on one that ended without a merge" in shown.splitlines()
    row = next(line for line in shown.splitlines() if "octo/web: Two" in line)
    assert "blocked: #1 closed without merge; retry it or edit the plan" in row
    assert "octo/demo: One" not in shown  # the plan's own repository goes without saying
    waits = {"reason": "after", "until": None, "detail": "#1 (review)"}
    assert waiting_text(waits) == "after: #1 (review)"
    assert "blocked:" not in render_plan(plan(closed, item(2, "Two"), blocked=False)).split("\n\n")[0]


def test_plan_list_without_plans_says_how_to_publish_one() -> None:
    assert render_plans([]) == (
        "no plans yet: publish one with `steward plan publish FILE` (examples/demo-plan.md is one)"
    )


class Answers:
    """The API's answers as data, in place of the HTTP client (`steward.cli._client`)."""

    def __init__(self, pages: dict[str, list[dict[str, Any]]]) -> None:
        self.pages = pages

    def paged(self, path: str, key: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.pages[key]


def task(task_id: str, ordinal: int, attempt: int, revision: int = 1) -> dict[str, Any]:
    return {
        "id": task_id,
        "plan_slug": "demo",
        "ordinal": ordinal,
        "revision": revision,
        "attempt": attempt,
        "status": "failed",
        "cost_usd": "0",
        "pr_url": None,
    }


def test_tasks_of_a_plan_are_listed_by_item_then_attempt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Task ids are hashes: the API's order (by id) says nothing of the plan's.
    listed = [
        task("t" + "0" * 24, 2, 1),
        task("t" + "1" * 24, 1, 2),
        task("t" + "2" * 24, 1, 1, revision=2),
        task("t" + "3" * 24, 1, 1),
        task("t" + "4" * 24, 3, 1),
    ]
    monkeypatch.setattr("steward.cli._client", lambda _args: Answers({"tasks": listed}))
    assert main(["tasks", "--plan", "demo"]) == 0
    rows = [line.split()[:4] for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[0][1], r[2], r[3]) for r in rows] == [
        ("3", "1", "1"),
        ("1", "1", "2"),
        ("2", "1", "1"),
        ("0", "2", "1"),
        ("4", "3", "1"),
    ]


def test_task_show_says_the_failure_code_what_to_do_and_who_must_act() -> None:
    failure = {"code": "checks_fail_on_base", "remedy": "Make it pass on the base.", "who": "the repository"}
    task = {
        "id": "t" + "3" * 24,
        "status": "failed",
        "reason": "pytest -q fails on the base",
        "failure": failure,
    }
    lines = render_task(task).splitlines()
    assert "failure:        checks_fail_on_base" in lines
    assert "what to do:     Make it pass on the base. (who: the repository)" in lines
    assert not [
        line for line in render_task({"id": "t", "status": "review"}).splitlines() if "failure" in line
    ]
