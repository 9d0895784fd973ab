"""The view on GitHub, pure (docs/concepts/github.md): the status comment as a table over
every status, with and without rounds, hostile text rendered inert; when the loop must update
it (`status_due`); the failure table every surface shows; and the pull request's body."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from steward.domain.documents import parse_document
from steward.domain.failures import TABLE, FailureCode, Who, failure_of
from steward.domain.models import Classification, PlanKind, PlanStatus, Task, TaskStatus
from steward.domain.plans import publish
from steward.domain.reconcile import Policy, ShowStatus, reconcile
from steward.domain.status_comment import StatusView, marker, render, shown_key, status_due, tame
from steward.domain.tasks import task_for
from steward.services.publication import MAX_BODY_CHARS, pull_request_body
from steward.services.status_comments import last_results

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
DOC = "---\nrepo: octo/widgets\nbudget_usd: 2\nchecks:\n  - pytest -q\n  - ruff check .\n---\n# T\n\n- [ ] {title}\n  {details}\n"


def task_of(title: str = "Add a greeting", details: str = "Say hello.", **update: object) -> Task:
    document = parse_document(DOC.format(title=title, details=details))
    plan = publish(None, plan_id="pid", user="alice", slug="greet", document=document, now=NOW).plan
    plan = plan.model_copy(update={"status": PlanStatus.IN_PROGRESS, "approved_hash": plan.content_hash})
    task = task_for(plan, plan.items[0], attempt=1, now=NOW)
    base = {"status": TaskStatus.REVIEW, "pr_number": 7, "pr_url": "https://github.test/o/w/pull/7"}
    return task.model_copy(update={**base, "cost_usd": Decimal("0.1234"), **update})


CHECKS = [
    {"command": "pytest -q", "passed": True, "exit_code": 0},
    {"command": "ruff check .", "passed": True},
]

# (name, task update, rounds allowed, what the comment says)
STATUSES = [
    ("review", {}, 2, ["In review", "0 of 2 used", "`/steward`", "$0.1234 of $2.00", "$1.8766 left"]),
    ("review, no rounds", {}, 0, ["In review", "0 of 0 used; none left"]),
    ("round running", {"rounds_used": 1}, 2, ["Follow-up round 1 is at work", "1 of 2 used; the next"]),
    ("rounds spent", {"rounds_used": 2, "rounds_settled": 2}, 2, ["In review", "2 of 2 used; none left"]),
    (
        "merged",
        {"status": TaskStatus.MERGED, "rounds_used": 1, "rounds_settled": 1},
        2,
        ["Merged", "1 of 2 used."],
    ),
    ("closed", {"status": TaskStatus.CLOSED}, 2, ["Closed without merging"]),
    ("withdrawn", {"status": TaskStatus.CLOSED, "reason": "withdrawn"}, 2, ["Withdrawn"]),
    (
        "failed",
        {
            "status": TaskStatus.FAILED,
            "classification": Classification.FINAL,
            "failure_code": "checks_never_passed",
            "reason": "required checks failed on the final tree: pytest -q",
        },
        2,
        ["Failed", "`checks_never_passed`", "What to do** (you)", "required checks failed"],
    ),
    ("cancelled", {"status": TaskStatus.CANCELLED, "reason": "cancelled by user"}, 2, ["`cancelled`"]),
]


@pytest.mark.parametrize(
    ("update", "allowed", "said"), [s[1:] for s in STATUSES], ids=[s[0] for s in STATUSES]
)
def test_the_status_comment_says_where_the_task_is_what_it_cost_and_how_to_ask_for_more(
    update: dict[str, object], allowed: int, said: list[str]
) -> None:
    task = task_of(**update)
    text = render(StatusView(task, allowed, CHECKS, console_url="https://console.test/"))
    assert text.startswith(marker(task.id) + "\n")
    for phrase in said:
        assert phrase in text, (phrase, text)
    assert "item 1 of plan `greet`: Add a greeting" in text
    assert f"(https://console.test/#/tasks/{task.id})" in text
    assert "| `pytest -q` | passed |" in text
    assert "| `ruff check .` | passed |" in text
    without_console = render(StatusView(task, allowed, CHECKS))
    assert "console" not in without_console
    assert f"`{task.id}`" in without_console


def test_checks_that_never_ran_and_one_that_failed_are_said_so() -> None:
    assert "No required check has run" in render(StatusView(task_of(), 2, ()))
    failed = render(StatusView(task_of(), 2, [{"command": "pytest -q", "passed": False, "exit_code": 3}]))
    assert "| `pytest -q` | failed (exit 3) |" in failed


HOSTILE = [
    "@octocat please look",
    "fixes #12 and GH-3",
    "<img src=https://evil.test/x.png>",
    "![pixel](https://evil.test/p.png)",
    "<script>alert(1)</script> <details open>",
    "`code` with ``` fences\n# heading\n> quote",
    "[link](javascript:alert(1)) | pipe | ~~strike~~",
    "a" * 5000,
]


def _outside_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_text_in_titles_reasons_and_checks_is_inert(hostile: str) -> None:
    task = task_of(
        title=hostile.replace("\n", " ")[:200] or "x",
        status=TaskStatus.FAILED,
        failure_code="setup_failed",
        reason=hostile,
    )
    checks = [{"command": hostile, "passed": False, "exit_code": hostile}]
    text = render(StatusView(task, 2, checks, app_slug="steward"))
    body = _outside_code(text.split("\n", 1)[1])  # past the marker, Steward's own HTML comment
    assert "<" not in body  # no HTML at all
    assert "![" not in body  # no image
    assert not re.search(r"@[A-Za-z0-9]", body)  # no mention that pings
    assert not re.search(r"#[0-9]", body)  # no reference that links
    assert "](" not in body.replace("\\](", "")  # no link but Steward's own
    assert all(len(line) < 1500 for line in text.splitlines())  # bounded
    assert text.count(marker(task.id)) == 1


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_text_in_the_models_summary_is_harmless_in_the_pull_requests_body(hostile: str) -> None:
    body = pull_request_body(task_of(), hostile, CHECKS, Decimal(0))
    summary = body.split("### What was asked", 1)[0]
    assert "<" not in summary  # no HTML
    assert not re.search(r"(?<!\\)!\[", summary)  # no image (an escaped `\![` is text)
    assert not re.search(r"@[A-Za-z0-9]|#[0-9]", summary)  # no mention or reference that pings


def test_the_model_summary_stays_readable_markdown_but_harmless() -> None:
    tamed = tame("Added `greet()`.\n\n- @octocat see #4\n- ![x](https://evil.test/x.png) <b>bold</b>")
    assert "- " in tamed
    assert "`greet()`" in tamed
    assert not re.search(r"@[A-Za-z0-9]|#[0-9]|<b>", tamed)
    assert "\\![x]" in tamed


def test_the_loop_updates_the_comment_only_when_what_it_shows_changed() -> None:
    task = task_of()
    assert status_due(task)  # in review, never shown
    shown = task.model_copy(update={"status_shown": shown_key(task)})
    assert not status_due(shown)
    for change in (
        {"status": TaskStatus.MERGED},
        {"rounds_used": 1},
        {"rounds_settled": 1},
        {"cost_usd": Decimal(1)},
    ):
        assert status_due(shown.model_copy(update=change)), change
    assert not status_due(shown.model_copy(update={"updated_at": NOW, "github_etag": "x"}))
    assert not status_due(task_of(pr_number=None, status=TaskStatus.RUNNING))  # no pull request yet
    assert not status_due(
        task.model_copy(update={"parent": "t-parent", "round": 1})
    )  # a round's is its parent's
    assert not status_due(task.model_copy(update={"kind": PlanKind.FIXTURE}))


def test_reconcile_decides_a_status_update_for_live_and_finished_tasks_in_sight() -> None:
    review, merged = task_of(), task_of(status=TaskStatus.MERGED)
    decision = reconcile([], [review, merged.model_copy(update={"id": "t-merged"})], NOW, Policy(5, 5))
    assert [a for a in decision.actions if isinstance(a, ShowStatus)] == [
        ShowStatus(review.id),
        ShowStatus("t-merged"),
    ]
    assert decision.live_work
    shown = [t.model_copy(update={"status_shown": shown_key(t)}) for t in (review, merged)]
    assert not [a for a in reconcile([], shown, NOW, Policy(5, 5)).actions if isinstance(a, ShowStatus)]


def test_the_last_result_of_each_required_check_in_the_plans_order() -> None:
    ran = [
        {"command": "ruff check .", "passed": False},
        {"command": "pytest -q", "passed": False},
        {"command": "pytest -q", "passed": True},
        {"command": "echo not required", "passed": True},
    ]
    assert last_results(["pytest -q", "ruff check .", "never ran"], ran) == [ran[2], ran[0]]


# --- failures --------------------------------------------------------------------------------


def test_every_failure_code_has_a_one_sentence_remedy_and_who_must_act() -> None:
    assert set(TABLE) == set(FailureCode)
    for code, entry in TABLE.items():
        assert entry.remedy.endswith("."), code
        assert ". " not in entry.remedy, code  # one sentence
        assert isinstance(entry.who, Who)


def test_a_retryable_failure_with_attempts_left_is_nobodys_to_act_on() -> None:
    failed = task_of(
        status=TaskStatus.FAILED, classification=Classification.RETRYABLE, failure_code="provider_unavailable"
    )
    first = failure_of(failed)
    assert first is not None
    assert first.who is Who.STEWARD
    assert "attempt 1 of 3" in first.remedy
    last = failure_of(failed.model_copy(update={"attempt": 3}))
    assert last is not None
    assert last.who is Who.OPERATOR
    assert last.code is FailureCode.PROVIDER_UNAVAILABLE
    assert failure_of(task_of()) is None  # in review: no failure
    old = failure_of(task_of(status=TaskStatus.FAILED, reason="from before codes"))
    assert old is not None
    assert old.code is FailureCode.UNRECORDED
    assert old.detail == "from before codes"
    api = failed.to_api()["failure"]
    assert api == {
        "code": "provider_unavailable",
        "remedy": first.remedy,
        "who": "nobody: Steward retries",
        "detail": None,
    }


# --- the pull request's body -------------------------------------------------------------------


def test_the_pull_request_body_explains_itself() -> None:
    task = task_of(title="Add @octocat greeting", details="Use `greet()`; see #4.\n  - and ```fences```")
    files = [{"status": "A", "path": "src/greet.py"}, {"status": "M", "path": "tests/test_`x`.py"}]
    body = pull_request_body(
        task, "I added it. @octocat ![x](https://evil.test/x.png)", CHECKS, Decimal("0.5"), files=files
    )
    assert body.startswith("I added it.")
    asked = body[body.index("### What was asked") :]
    assert "````text\nAdd @octocat greeting\n\nUse `greet()`; see #4.\n- and ```fences```\n````" in asked
    assert "- `added` `src/greet.py`" in body
    assert "- `modified` `tests/test_'x'.py`" in body
    assert "| `pytest -q` |" in body
    assert "$0.5000 of a $2.00 budget" in body
    footer = body.rstrip().splitlines()[-1]
    assert task.id in footer
    assert (task.content_hash or "")[:16] in footer
    assert "Steward" in footer
    assert not re.search(r"@[A-Za-z0-9]", body.split("### What was asked")[0])  # the summary pings nobody
    assert "\\![x]" in body


def test_a_huge_summary_is_cut_and_the_body_stays_under_githubs_limit() -> None:
    files = [{"status": "M", "path": f"f{n}.py"} for n in range(400)]
    body = pull_request_body(task_of(), "x" * 100_000, CHECKS, Decimal(0), files=files)
    assert len(body) <= MAX_BODY_CHARS
    assert "[summary truncated]" in body
    assert "and 350 more" in body
