"""Plans with structure on the local stack, run by real runtimes (docs/concepts/task-document.md): a chain across two repositories lands in order, each pull request in its own
repository on a branch cut from the base as the merge left it, linked to its neighbours;
`max_open_prs` holds the next item until a pull request merges; a predecessor closed unmerged
blocks its dependents (the API says so) until a person retries it; a confirm starts work at
once, whatever the loop's interval.

The module's stack is its own: the tests count open pull requests and move `main`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from steward.adapters.dynamo import Tables
from steward.adapters.user_store import UserStore
from steward.local.github_twin import admin
from steward.local.sample_repo import SAMPLE_REPO, SECOND_REPO
from steward.local.stack import LOCAL_REGION, LocalStack

from tests.support.stack import local_stack

CHECK = "python -m pytest -q"
WAIT = 120.0
DONE = {"text": "The change is complete."}
VERIFY = {"tool": "run_verification", "input": {"command": CHECK}}
# The second item's test imports what the first adds: its check passes only on a branch cut
# from the base after the first merged.
SUBTRACT = {
    "tool": "replace_in_file",
    "input": {
        "path": "calculator.py",
        "old": "    return a + b\n",
        "new": "    return a + b\n\n\ndef subtract(a: float, b: float) -> float:\n    return a - b\n",
    },
}
TEST_SUBTRACT = {
    "tool": "write_file",
    "input": {
        "path": "test_subtract.py",
        "content": "from calculator import subtract\n\n\ndef test_subtract() -> None:\n    assert subtract(5, 3) == 2\n",
    },
}
DIFFERENCE = {
    "tool": "replace_in_file",
    "input": {
        "path": "page.py",
        "old": '    return f"{a} + {b} = {a + b}"\n',
        "new": '    return f"{a} + {b} = {a + b}"\n\n\ndef difference_line(a: float, b: float) -> str:\n'
        '    return f"{a} - {b} = {a - b}"\n',
    },
}


def note(name: str) -> dict[str, Any]:
    return {"tool": "write_file", "input": {"path": f"{name}.md", "content": f"# {name}\n"}}


PLAYS: list[dict[str, Any]] = [
    {"match": "ORDER-subtract", "summary": "Adds subtract.", "steps": [SUBTRACT, DONE, VERIFY]},
    {"match": "ORDER-test-subtract", "summary": "Tests subtract.", "steps": [TEST_SUBTRACT, DONE, VERIFY]},
    {"match": "ORDER-web", "summary": "Shows a difference.", "steps": [DIFFERENCE, DONE, VERIFY]},
    *(
        {"match": f"NOTE-{n}", "summary": f"Notes {n}.", "steps": [note(n), DONE, VERIFY]}
        for n in (*"abcd", "prompt")
    ),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with local_stack(tmp_path_factory.mktemp("order-stack"), PLAYS, {}) as stack:
        yield stack


@pytest.fixture(autouse=True)
def _stack_env(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stack's handlers read their endpoint from the environment at a cold start.
    monkeypatch.setenv("AWS_ENDPOINT_URL", stack.state["aws_endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


@pytest.fixture(scope="module")
def api(stack: LocalStack) -> Iterator[Callable[..., Any]]:
    token = stack.state["users"]["alice"]
    with httpx.Client(
        base_url=stack.state["api_url"], headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as client:

        def call(method: str, path: str, body: Any = None) -> Any:
            response = client.request(method, path, json=body)
            assert response.status_code < 400, response.text
            return response.json()

        call("PUT", "/v1/loop", {"interval_seconds": 1})
        yield call


def eventually(check: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)
    return found


def start(api: Callable[..., Any], slug: str, body: str) -> dict[str, Any]:
    markdown = (
        f"---\nrepo: {SAMPLE_REPO}\nbase: main\nmodel: scripted-coder\nbudget_usd: 0.50\n"
        f"checks:\n  - {CHECK}\nmax_attempts: 1\n---\n# {slug}\n\n{body}"
    )
    published = api("PUT", f"/v1/plans/{slug}", {"markdown": markdown})
    return api("POST", f"/v1/plans/{slug}/confirm", {"content_hash": published["content_hash"]})  # type: ignore[no-any-return]


def item(api: Callable[..., Any], slug: str, ordinal: int) -> dict[str, Any]:
    found: dict[str, Any] = api("GET", f"/v1/plans/{slug}")["items"][ordinal - 1]
    return found


def in_review(api: Callable[..., Any], slug: str, ordinal: int, after: str | None = None) -> dict[str, Any]:
    """The item's task (a later one than `after`) once its runtime ended with its pull request
    open."""
    task_id = eventually(lambda: (found := item(api, slug, ordinal)["task_id"]) != after and found)
    return eventually(  # type: ignore[no-any-return]
        lambda: (
            (t := api("GET", f"/v1/tasks/{task_id}"))["status"] == "review"
            and "finished" in [e["type"] for e in api("GET", f"/v1/tasks/{task_id}/events")["events"]]
            and t
        )
    )


def number(task: dict[str, Any]) -> int:
    return int(str(task["pr_url"]).rsplit("/", 1)[-1])


def pull(stack: LocalStack, repo: str, pr: int) -> dict[str, Any]:
    return next(p for p in admin.pulls(stack.state["github_url"], repo) if p["number"] == pr)


def test_a_chain_across_two_repositories_lands_in_order_each_in_its_own_repository(
    stack: LocalStack, api: Callable[..., Any]
) -> None:
    github = stack.state["github_url"]
    start(
        api,
        "chain",
        "- [ ] ORDER-subtract: add subtract\n"
        "- [ ] ORDER-test-subtract: test it (after #1)\n"
        f"- [ ] ORDER-web: show a difference (after #2)\n  repo: {SECOND_REPO}\n",
    )
    first = in_review(api, "chain", 1)
    assert (item(api, "chain", 2)["task_id"], item(api, "chain", 2)["waiting"]["detail"]) == (
        None,
        "#1 (review)",
    )
    assert item(api, "chain", 3)["repo"] == SECOND_REPO
    merged = admin.merge(github, SAMPLE_REPO, number(first))
    second = in_review(api, "chain", 2)  # its check imports subtract: the branch holds #1's merge
    assert second["repo"] == SAMPLE_REPO
    body = pull(stack, SAMPLE_REPO, number(second))["body"]
    assert (
        f"waits for item 1 (merged): ORDER-subtract: add subtract, [{SAMPLE_REPO} pull request]({first['pr_url']})"
        in body
    )
    assert "is waited for by item 3 (pending)" in body
    # Once the second is in review, the first's body links it (the loop rewrites its section).
    eventually(lambda: second["pr_url"] in pull(stack, SAMPLE_REPO, number(first))["body"])
    assert merged["merged"] is True
    admin.merge(github, SAMPLE_REPO, number(second))
    third = in_review(api, "chain", 3)
    assert third["repo"] == SECOND_REPO
    assert pull(stack, SECOND_REPO, number(third))["head"]["ref"] == third["branch"]
    assert not [p for p in admin.pulls(github, SAMPLE_REPO) if p["head"]["ref"] == third["branch"]]
    admin.merge(github, SECOND_REPO, number(third))
    eventually(lambda: api("GET", "/v1/plans/chain")["status"] == "completed")


def test_max_open_prs_holds_the_next_item_until_a_pull_request_merges(
    stack: LocalStack, api: Callable[..., Any]
) -> None:
    api("PUT", "/v1/loop", {"max_open_prs": 1})
    try:
        start(api, "capacity", "- [ ] NOTE-a: note a\n- [ ] NOTE-b: note b\n")
        first = in_review(api, "capacity", 1)
        waiting = eventually(lambda: item(api, "capacity", 2)["waiting"])
        assert waiting["reason"] == "review_capacity"
        assert f"#{number(first)}" in waiting["detail"]
        assert item(api, "capacity", 2)["task_id"] is None
        admin.merge(stack.state["github_url"], SAMPLE_REPO, number(first))
        second = in_review(api, "capacity", 2)
        admin.merge(stack.state["github_url"], SAMPLE_REPO, number(second))
    finally:
        api("PUT", "/v1/loop", {"max_open_prs": 5})


def test_a_predecessor_closed_unmerged_blocks_its_dependent_until_a_person_retries_it(
    stack: LocalStack, api: Callable[..., Any]
) -> None:
    start(api, "blocked", "- [ ] NOTE-c: note c\n- [ ] NOTE-d: note d (after #1)\n")
    first = in_review(api, "blocked", 1)
    admin.close(stack.state["github_url"], SAMPLE_REPO, number(first))
    shown = eventually(lambda: (p := api("GET", "/v1/plans/blocked"))["blocked"] and p)
    assert shown["status"] == "in_progress"
    assert shown["items"][1]["waiting"]["reason"] == "blocked"
    assert shown["items"][1]["waiting"]["detail"] == "#1 closed without merge; retry it or edit the plan"
    api("POST", f"/v1/tasks/{first['id']}/retry")
    retried = in_review(api, "blocked", 1, after=first["id"])  # the retry's own attempt
    assert retried["attempt"] == 2
    assert item(api, "blocked", 2)["waiting"]["reason"] == "after"
    assert api("GET", "/v1/plans/blocked")["blocked"] is False


def test_a_confirm_starts_work_at_once_whatever_the_interval(
    stack: LocalStack, api: Callable[..., Any]
) -> None:
    """An approval is not held back by the loop's interval gate (DESIGN 12): with an interval
    of an hour and the loop's last tick just done, a confirmed plan's task still starts (the
    API enqueues a tick, which the interval gate lets through)."""
    users = UserStore(Tables.connect(stack.state["table_prefix"], region_name=LOCAL_REGION))
    api("PUT", "/v1/loop", {"interval_seconds": 3600})
    try:
        # The loop has ticked since the stack started: the interval gate holds for an hour.
        eventually(lambda: users.loop_state("alice").last_tick_at)
        start(api, "prompt", "- [ ] NOTE-prompt: note prompt\n")
        task_id = eventually(lambda: item(api, "prompt", 1)["task_id"])
        task = eventually(lambda: (t := api("GET", f"/v1/tasks/{task_id}"))["status"] != "queued" and t)
        assert task["status"] in ("running", "review")
        if task["status"] == "running":
            api("POST", f"/v1/tasks/{task_id}/cancel")  # its pull request is no test's
    finally:
        api("PUT", "/v1/loop", {"interval_seconds": 1})
