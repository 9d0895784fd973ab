"""Which deliveries ask for a follow-up round, who may ask, and which rounds start
(`steward.domain.follow_ups`), read from the real deliveries GitHub produced
(tests/fixtures/github-payloads) and from variants of them that change one field."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from steward.domain.errors import BadRequest
from steward.domain.follow_ups import (
    MAX_OUTPUT_CHARS,
    TRIGGER_EVENTS,
    RoundContext,
    TriggerKind,
    author_problem,
    mentions,
    round_refusal,
    trigger_of,
)

from tests.support.github_payloads import event_of, real_payload, real_payload_files

SLUG = "steward"


def _real(name: str, **changes: Any) -> dict[str, Any]:
    """A real delivery with `changes` applied at dotted paths (`review.state`)."""
    payload = copy.deepcopy(real_payload(name))
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = payload
        for part in parents:
            target = target[part]
        target[last] = value
    return payload


def test_every_real_delivery_of_a_trigger_event_is_read_without_error() -> None:
    read = [f.name for f in real_payload_files() if event_of(f) in TRIGGER_EVENTS]
    assert len(read) >= 10  # reviews, review comments, issue comments, check runs and suites, statuses
    for name in read:
        trigger_of(event_of(name), real_payload(name), app_slug=SLUG)  # raises on what it cannot read


def test_the_real_deliveries_ask_for_nothing_as_they_are() -> None:
    # A review that only comments, comments that do not address Steward, passing checks and
    # statuses: nothing to answer.
    for name in (
        "octokit.pull_request_review.submitted.json",
        "octokit.pull_request_review_comment.created.json",
        "octokit.issue_comment.created.json",
        "octokit.check_run.completed.json",
        "octokit.check_suite.completed.json",
        "octokit.status.json",
    ):
        assert trigger_of(event_of(name), real_payload(name), app_slug=SLUG) is None, name


def test_the_real_failing_check_run_is_a_check_trigger_on_its_commit() -> None:
    name = "octokit.check_run.completed.1.json"
    trigger = trigger_of("check_run", real_payload(name), app_slug=SLUG)
    assert trigger is not None
    assert trigger.kind is TriggerKind.CHECK
    assert (trigger.check_name, trigger.conclusion) == ("Octocoders-linter", "failure")
    assert trigger.head_sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    assert (trigger.pull_number, trigger.head_ref, trigger.branches) == (2, "changes", ("changes",))
    assert trigger.repository == "Codertocat/Hello-World"
    assert author_problem(trigger) is None  # a check needs no author


def test_a_review_requesting_changes_is_a_review_trigger_with_its_author() -> None:
    payload = _real(
        "octokit.pull_request_review.submitted.json",
        review__state="changes_requested",
        review__body="Please also handle negative numbers.",
    )
    trigger = trigger_of("pull_request_review", payload, app_slug=SLUG)
    assert trigger is not None
    assert trigger.kind is TriggerKind.REVIEW
    assert trigger.body == "Please also handle negative numbers."
    assert (trigger.pull_number, trigger.head_ref) == (2, "changes")
    assert trigger.head_sha == "ec26c3e57ca3a959ca5aad62de7213c562f8c821"  # the commit reviewed
    assert (trigger.author, trigger.author_association, trigger.author_is_bot) == (
        "Codertocat",
        "OWNER",
        False,
    )
    assert trigger.installation_id == 1
    assert author_problem(trigger) is None
    assert trigger.round_key(2, trigger.head_sha) == f"2:{trigger.head_sha}:review"


def test_a_comment_on_a_pull_request_addressing_steward_is_a_mention() -> None:
    payload = _real("octokit.issue_comment.created.with-installation.json", comment__body="@steward rename x")
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"}
    trigger = trigger_of("issue_comment", payload, app_slug=SLUG)
    assert trigger is not None
    assert (trigger.kind, trigger.pull_number, trigger.head_sha) == (TriggerKind.MENTION, 1, None)
    # The same comment on an issue (no `pull_request` link) is not about a pull request.
    del payload["issue"]["pull_request"]
    assert trigger_of("issue_comment", payload, app_slug=SLUG) is None


def test_an_inline_comment_addressing_steward_carries_its_line() -> None:
    payload = _real(
        "octokit.pull_request_review_comment.created.json", comment__body="/steward use a constant here"
    )
    trigger = trigger_of("pull_request_review_comment", payload, app_slug=SLUG)
    assert trigger is not None
    assert trigger.kind is TriggerKind.MENTION
    [inline] = trigger.comments
    assert (inline.path, inline.diff_hunk) == ("README.md", "@@ -1 +1 @@\n-# Hello-World")


@pytest.mark.parametrize(
    ("association", "kind", "allowed"),
    [
        ("OWNER", "User", True),
        ("MEMBER", "User", True),
        ("COLLABORATOR", "User", True),
        ("CONTRIBUTOR", "User", False),
        ("FIRST_TIME_CONTRIBUTOR", "User", False),
        ("NONE", "User", False),
        ("OWNER", "Bot", False),  # a bot, Steward itself included, never asks
    ],
)
def test_only_a_collaborator_who_is_a_person_may_ask(association: str, kind: str, allowed: bool) -> None:
    payload = _real(
        "octokit.pull_request_review.submitted.json",
        review__state="changes_requested",
        review__author_association=association,
    )
    payload["review"]["user"]["type"] = kind
    trigger = trigger_of("pull_request_review", payload, app_slug=SLUG)
    assert trigger is not None
    assert (author_problem(trigger) is None) is allowed


def test_an_app_login_ending_in_bot_is_a_bot_whatever_its_type_says() -> None:
    payload = _real("octokit.pull_request_review.submitted.json", review__state="changes_requested")
    payload["review"]["user"]["login"] = "steward[bot]"
    trigger = trigger_of("pull_request_review", payload, app_slug=SLUG)
    assert trigger is not None
    assert author_problem(trigger) == "the author is a bot"


# Hostile and near-miss texts, each with whether it addresses the App `steward`.
MENTION_CASES = [
    ("@steward please rename x", True),
    ("Hey @Steward, fix the test", True),
    ("(@steward) please", True),
    ("/steward retry the failing check", True),
    ("  /steward indented command", True),
    ("LGTM\n/steward also update the README", True),
    ("write to ops@steward.dev", False),  # an e-mail address
    ("@stewardship is not us", False),  # a longer handle
    ("@steward-bot is another app", False),
    ("cc @someone-else", False),
    ("the steward will do it", False),
    ("/stewardship docs", False),  # the command is the word /steward
    ("see /steward docs", False),  # not at the start of a line
    ("/steward", True),
    ("", False),
]


@pytest.mark.parametrize(("body", "expected"), MENTION_CASES)
def test_a_mention_is_the_app_slug_as_a_word_or_a_line_starting_slash_steward(
    body: str, expected: bool
) -> None:
    assert mentions(body, SLUG) is expected


def test_a_failing_status_is_a_check_and_a_passing_or_pending_one_is_not() -> None:
    for state, expected in (("failure", True), ("error", True), ("success", False), ("pending", False)):
        payload = _real("octokit.status.with-installation.json", state=state, description="tests failed")
        trigger = trigger_of("status", payload, app_slug=SLUG)
        assert (trigger is not None) is expected, state
        if trigger is not None:
            assert trigger.branches == ("master", "changes", "gh-pages")
            assert (trigger.check_name, trigger.output) == ("default", "tests failed")


def test_a_timed_out_suite_is_a_check_and_a_neutral_one_is_not() -> None:
    for conclusion, expected in (
        ("timed_out", True),
        ("failure", True),
        ("neutral", False),
        ("cancelled", False),
    ):
        payload = _real("octokit.check_suite.completed.json")
        payload["check_suite"]["conclusion"] = conclusion
        trigger = trigger_of("check_suite", payload, app_slug=SLUG)
        assert (trigger is not None) is expected, conclusion


def test_a_check_output_is_bounded() -> None:
    payload = _real("octokit.check_run.completed.1.json")
    payload["check_run"]["output"] = {"title": "lint", "summary": "x" * (MAX_OUTPUT_CHARS * 2), "text": None}
    trigger = trigger_of("check_run", payload, app_slug=SLUG)
    assert trigger is not None
    assert len(trigger.output) < MAX_OUTPUT_CHARS + 20
    assert trigger.output.endswith("[… cut]")


@pytest.mark.parametrize(
    ("event", "name", "path"),
    [
        ("pull_request_review", "octokit.pull_request_review.submitted.json", ("review", "state")),
        ("issue_comment", "octokit.issue_comment.created.json", ("comment", "id")),
        ("check_run", "octokit.check_run.completed.1.json", ("check_run", "head_sha")),
        ("status", "octokit.status.json", ("sha",)),
    ],
)
def test_a_payload_without_what_steward_reads_is_refused_naming_the_field(
    event: str, name: str, path: tuple[str, ...]
) -> None:
    payload = copy.deepcopy(real_payload(name))
    target = payload
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    with pytest.raises(BadRequest) as refused:
        trigger_of(event, payload, app_slug=SLUG)
    assert refused.value.field == ".".join(path)


def test_an_event_that_is_no_trigger_is_nothing() -> None:
    assert trigger_of("push", {"anything": 1}, app_slug=SLUG) is None


OPEN = {
    "task_in_review": True,
    "pull_open": True,
    "head_is_stewards": True,
    "plan_archived": False,
    "superseded": False,
    "rounds_used": 0,
    "follow_ups": 2,
}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({}, None),
        ({"rounds_used": 1}, None),
        ({"rounds_used": 2}, "rounds_used_up"),
        ({"follow_ups": 0}, "follow_ups_off"),
        ({"pull_open": False}, "pull_request_closed"),
        ({"task_in_review": False}, "not_in_review"),
        ({"head_is_stewards": False}, "head_not_stewards"),
        ({"plan_archived": True}, "plan_archived"),
        ({"superseded": True}, "superseded"),
        ({"fails_on_base": True}, "fails_on_base"),
        ({"pull_open": False, "rounds_used": 5}, "pull_request_closed"),  # the first reason is named
    ],
)
def test_a_round_starts_only_within_the_approved_bounds(change: dict[str, Any], reason: str | None) -> None:
    assert round_refusal(RoundContext(**{**OPEN, **change})) == reason
