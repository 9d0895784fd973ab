"""The web console in a real browser (Debian's Chromium driven by Playwright) against one
local stack: sign in with a login link, approve exactly the content shown, watch a task go
to review and merged, and the attacks a page must survive. Screenshots of each page are kept
under build/console/ (look at them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from steward.adapters.dynamo import Tables
from steward.adapters.plan_store import PlanStore
from steward.local.sample_repo import SAMPLE_REPO, SECOND_REPO

from tests.support.documents import document
from tests.support.local_cli import STEWARD, clean_env, local_up
from tests.support.rounds import FAILED_BECAUSE, FAILING_CHECK, PUSHED, REVIEWER, seed_rounds

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "console"
# What a caller may send the login exchange instead of {"code": "<a code it was given>"}.
HOSTILE_LOGIN_BODIES = [
    b"",
    b"not json",
    b"[]",
    b'{"code": 1}',
    b'{"code": null}',
    b'{"code": ""}',
    b'{"code": "' + b"A" * 43 + b'"}',  # the shape of a code, never issued
    b'{"code": {"$ne": ""}}',
    b'{"codes": "x"}',
    b'{"code": "' + b"x" * 5000 + b'"}',  # over the body bound
    b"[" * 2040 + b"]" * 2040,  # nested deeper than Python parses, inside the body bound
]
# Item titles a document may hold: each must show as the text it is, and run nothing.
HOSTILE_TITLES = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(2)</script>",
    "[click](javascript:alert(3))",
    '"><svg onload=alert(4)>',
    "javascript:alert(5)",
    "{{constructor.constructor('alert(6)')()}}",
]
# Text whose characters a page would act on or hide (bidirectional overrides and isolates,
# zero-width and control characters), and how every page shows it: as the CLI's escapes.
HOSTILE_BIDI = [
    ("Approve \u202etxt.exe", "Approve \\u202etxt.exe"),
    ("left \u2067right\u2069 left", "left \\u2067right\\u2069 left"),
    ("zero\u200bwidth\u200djoin", "zero\\u200bwidth\\u200djoin"),
    ("bell\x07 and \x1b[31mred", "bell\\u0007 and \\u001b[31mred"),
]
DEMO_ITEM = "Add a `subtract(a, b)` function to `calculator.py`.\nKeep the style of `add`."


class Stack:
    """`steward local up` in its own process, as a person starts it."""

    def __init__(self, state_file: Path) -> None:
        self.state_file = state_file
        self.state: dict[str, Any] = json.loads(state_file.read_text())

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*STEWARD, "--state-file", str(self.state_file), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
            check=False,
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    state_file = tmp_path_factory.mktemp("console") / "local.json"
    with local_up(
        state_file,
        "--tick-seconds",
        "1",
        settings={"STEWARD_RUNNER_HEARTBEAT_SECONDS": "1"},  # runtimes notice a cancel within a second
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ):
        yield Stack(state_file)


def api(stack: Stack, user: str = "alice") -> httpx.Client:
    return httpx.Client(
        base_url=stack.state["api_url"],
        headers={"Authorization": f"Bearer {stack.state['users'][user]}"},
        timeout=30,
    )


def tables(stack: Stack) -> Tables:
    """The stack's tables, for what only the loop and the runtimes write (a task's rounds)."""
    return Tables.connect(
        stack.state["table_prefix"],
        endpoint_url=stack.state["aws_endpoint_url"],
        region_name=stack.state["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def publish(
    stack: Stack,
    slug: str,
    *items: str,
    user: str = "alice",
    setup: str = "",
    title: str = "Demo",
    front: str = "",
) -> dict[str, Any]:
    """`front`: more front matter lines (`max_attempts: 1\n`, say)."""
    markdown = document(*items, repo=SAMPLE_REPO, checks=("python -m pytest -q",), title=title).replace(
        "checks:",
        "model: scripted-coder\nbudget_usd: 0.50\n"
        + (f"setup:\n  - {setup}\n" if setup else "")
        + front
        + "checks:",
    )
    with api(stack, user) as client:
        answer = client.put(f"/v1/plans/{slug}", json={"markdown": markdown})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def login_link(stack: Stack, user: str) -> str:
    """`steward local login USER`, as a person runs it."""
    made = stack.cli("local", "login", user)
    assert made.returncode == 0, made.stderr
    return made.stdout.splitlines()[0]


def signed_in(browser: Browser, stack: Stack, user: str) -> Page:
    page = browser.new_page()
    page.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    page.goto(login_link(stack, user))
    expect(page.locator("#who")).to_have_text(user)
    return page


# The pages the documentation shows: `make screenshots` sets STEWARD_DOCS_IMAGES to docs/images,
# and these are written there too, as the reader's first screenful (kept small).
DOCS_IMAGES = os.environ.get("STEWARD_DOCS_IMAGES")
DOCS_SHOTS = {"plan-review", "task-review", "task-rounds", "loop-375px"}


def shot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    if DOCS_IMAGES and name in DOCS_SHOTS:
        page.screenshot(path=str(Path(DOCS_IMAGES) / f"{name}.png"))


def test_a_login_link_signs_in_once_and_no_token_reaches_a_url(browser: Browser, stack: Stack) -> None:
    link = login_link(stack, "erin")  # any dev user, not only those of local.json
    assert link.startswith(stack.state["console_url"] + "#login=")
    page = browser.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(link)
    expect(page.locator("#who")).to_have_text("erin")
    expect(page.locator("h1")).to_have_text("Plans")
    assert "login=" not in page.url  # the code left the address bar
    token = page.evaluate("sessionStorage.getItem('steward.token')")
    assert token
    assert all(token not in url for url in requested)
    assert all("login=" not in url for url in requested)  # a fragment never reaches a server
    shot(page, "plans-empty")
    page.close()

    again = browser.new_page()
    again.goto(link)  # the code was spent
    expect(again.locator("#notice")).to_contain_text("used or expired")
    expect(again.locator("h1")).to_have_text("Sign in")
    again.close()


def test_a_login_link_opened_in_a_tab_already_on_the_console_signs_in(browser: Browser, stack: Stack) -> None:
    page = browser.new_page()
    page.goto(stack.state["console_url"])
    expect(page.locator("h1")).to_have_text("Sign in")
    page.goto(login_link(stack, "frank"))  # the same document: only the fragment changes
    expect(page.locator("#who")).to_have_text("frank")
    assert "login=" not in page.url
    page.goto(stack.state["console_url"] + "#login=not-a-code")
    expect(page.locator("#notice")).to_contain_text("this login link is malformed")
    assert "login=" not in page.url
    page.close()


# Addresses no page has: each is "Not found", said once, and asks the API nothing odd.
ODD_PAGES = [
    "#/plans/..",
    "#/plans/%E0%A4%A",
    "#/plans/a%2Fb",
    "#/tasks/../../v1/loop",
    "#/nowhere",
    "#/plans/UPPER",
]


def test_an_address_no_page_has_is_not_found_and_said_once(browser: Browser, stack: Stack) -> None:
    page = signed_in(browser, stack, "alice")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    for odd in ODD_PAGES:
        page.goto(stack.state["console_url"] + odd)
        expect(page.locator("h1")).to_have_text("Not found")
        expect(page.locator("#notice")).to_be_hidden()
    assert not [u for u in requested if "/v1/" in u and "/v1/plans?" not in u], requested
    page.close()


@pytest.mark.parametrize("body", HOSTILE_LOGIN_BODIES)
def test_the_login_exchange_refuses_anything_but_an_issued_code(stack: Stack, body: bytes) -> None:
    answer = httpx.post(f"{stack.state['api_url']}/local/login", content=body, timeout=10)
    assert answer.status_code in (400, 413), answer.text
    assert answer.json()["error"]["message"]
    assert "token" not in answer.json()


def test_login_codes_are_given_only_for_a_valid_dev_token(stack: Stack) -> None:
    codes = f"{stack.state['api_url']}/local/login-codes"
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic YWxpY2U6eA=="}):
        assert httpx.post(codes, headers=headers, timeout=10).status_code == 401
    assert httpx.get(codes, timeout=10).status_code == 405


def test_the_console_is_served_with_a_strict_policy(stack: Stack) -> None:
    index = httpx.get(stack.state["console_url"], timeout=10)
    assert index.status_code == 200
    policy = index.headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert '<script src="app.js" defer></script>' in index.text
    assert "<script>" not in index.text  # no inline script at all
    config = httpx.get(stack.state["console_url"] + "config.json", timeout=10).json()
    assert config == {"sign_in": "local", "live_output": "stream"}
    assert httpx.get(stack.state["console_url"] + "../v1/plans", timeout=10).status_code in (400, 401)


def test_confirm_from_the_review_page_then_watch_the_task_reach_review_and_merged(
    browser: Browser, stack: Stack
) -> None:
    with api(stack) as client:
        assert client.put("/v1/loop", json={"interval_seconds": 1, "max_open_prs": 100}).status_code == 200
    plan = publish(stack, "console-demo", DEMO_ITEM)
    page = signed_in(browser, stack, "alice")
    page.goto(f"{stack.state['console_url']}#/plans/console-demo")
    expect(page.locator("h1")).to_contain_text("Demo")
    expect(page.locator("dl.facts")).to_contain_text(SAMPLE_REPO)
    expect(page.locator("dl.facts")).to_contain_text("python -m pytest -q")
    expect(page.locator("dl.facts")).to_contain_text("scripted-coder")
    expect(page.locator("#confirm")).to_contain_text(plan["content_hash"][:12])
    # A part the page does not have (no blocked note here) is left out, not printed as "null".
    expect(page.locator("main")).not_to_contain_text("null")
    shot(page, "plan-review")
    page.locator("#confirm").click()
    expect(page.locator("#notice")).to_contain_text("Confirmed")
    task_link = page.locator("table.items a")
    deadline = time.monotonic() + 120
    while task_link.count() == 0:
        if time.monotonic() > deadline:
            with api(stack) as client:
                shown = client.get("/v1/plans/console-demo").json()
            pytest.fail(f"the loop never spawned the item's task: {shown['status']} {shown['items']}")
        page.wait_for_timeout(500)  # no reload: the confirmed plan's page follows its items
    task_link.first.click()
    task_id = page.url.rsplit("/", 1)[1]
    shown = page.locator("#summary h1 .status")
    deadline = time.monotonic() + 120
    while shown.text_content() != "review":
        with api(stack) as client:
            task = client.get(f"/v1/tasks/{task_id}").json()
        assert task["status"] in ("queued", "running", "review"), task
        assert time.monotonic() < deadline, f"the page never showed review ({task['status']})"
        page.wait_for_timeout(500)
    pr_url = page.locator("#pr-link").get_attribute("href")
    with api(stack) as client:
        task = client.get(f"/v1/tasks/{task_id}").json()
    assert pr_url == task["pr_url"]
    expect(page.locator("#pr-summary")).to_contain_text("subtract")  # what the pull request says
    expect(page.locator("#timeline")).to_contain_text(
        "The run finished: its pull request is open for review."
    )
    expect(page.locator("#checks")).to_have_text("python -m pytest -q — passed")
    expect(page.locator("#output")).to_contain_text("passed")
    expect(page.locator("#artifacts")).to_contain_text("diff.patch")
    shot(page, "task-review")
    # The item edited and confirmed while its pull request is open: the plan page names that
    # earlier revision's task and pull request until a person merges or closes it.
    edited = publish(stack, "console-demo", DEMO_ITEM + "\nName its arguments `a` and `b`.")
    with api(stack) as client:
        confirm = client.post("/v1/plans/console-demo/confirm", json={"content_hash": edited["content_hash"]})
        assert confirm.is_success, confirm.text
    page.goto(f"{stack.state['console_url']}#/plans/console-demo")
    expect(page.locator(".earlier-review")).to_contain_text(f"revision 1 is still in review: {task_id}")
    expect(page.locator(".earlier-review a[target=_blank]")).to_have_attribute("href", pr_url)
    page.goto(f"{stack.state['console_url']}#/tasks/{task_id}")
    merged = stack.cli("local", "github", "merge", f"{SAMPLE_REPO}#{pr_url.rstrip('/').rsplit('/', 1)[1]}")
    assert merged.returncode == 0, merged.stderr
    expect(page.locator("#summary h1 .status")).to_have_text("merged", timeout=30_000)
    shot(page, "task-merged")
    page.goto(f"{stack.state['console_url']}#/plans/console-demo")
    expect(page.locator("table.items")).to_be_visible()
    expect(page.locator(".earlier-review")).to_have_count(0)
    page.close()


def test_a_tasks_page_lists_its_rounds_and_a_rounds_page_links_back(browser: Browser, stack: Stack) -> None:
    """An item's task merged after two follow-up rounds (seeded as the loop and the runtimes
    leave them): its page lists each round with what asked for it, its status, the commit it
    pushed once answered, its checks and its cost; a round's page links back to it."""
    publish(stack, "console-rounds", DEMO_ITEM)  # not confirmed: the loop spawns nothing of it
    seeded = seed_rounds(
        tables(stack),
        PlanStore(tables(stack)).require("alice", "console-rounds"),
        pr_base=stack.state["github_url"],
    )
    page = signed_in(browser, stack, "alice")
    page.goto(f"{stack.state['console_url']}#/tasks/{seeded.parent.id}")
    expect(page.locator("#rounds-used")).to_have_text("2 of 2 used")
    expect(page.locator("#summary")).not_to_contain_text("null")  # an ending without a reason says nothing
    rows = page.locator("#rounds tbody tr")
    expect(rows).to_have_count(2)
    answered, failed = rows.nth(0), rows.nth(1)
    expect(answered.locator(".round-link")).to_have_text("round 1")
    expect(answered.locator(".trigger")).to_have_text(f"review requesting changes by @{REVIEWER}")
    expect(answered.locator(".trigger a")).to_have_attribute(
        "href", f"{seeded.parent.pr_url}#pullrequestreview-11"
    )
    expect(answered.locator(".status")).to_have_text("answered")
    expect(answered.locator("td.commit")).to_have_text(PUSHED[:7])
    expect(answered.locator("td.commit code")).to_have_attribute("title", PUSHED)
    expect(answered.locator(".round-checks")).to_have_text("python -m pytest -q — passed")
    expect(answered.locator("td.cost")).to_have_text("$0.0123 of $0.50")
    expect(failed.locator(".trigger")).to_have_text(f"failing check {FAILING_CHECK} (failure)")
    expect(failed.locator(".status")).to_have_text("failed")
    expect(failed).to_contain_text(FAILED_BECAUSE)
    expect(failed.locator("td.commit")).to_have_text("none")  # it pushed nothing
    expect(failed.locator(".round-checks")).to_have_text("python -m pytest -q — failed")
    expect(failed.locator("td.cost")).to_have_text("$0.0456 of $0.50")
    shot(page, "task-rounds")
    answered.locator(".round-link").click()
    expect(page.locator("#round-of")).to_have_text(f"1 of task {seeded.parent.id}")
    expect(page.locator("#summary h1 .status")).to_have_text("answered")
    expect(page.locator("#checks")).to_have_text("python -m pytest -q — passed")  # its own events
    expect(page.locator("#rounds")).to_have_count(0)  # a round has no rounds of its own
    page.locator("#round-of a").click()
    expect(page.locator("#rounds tbody tr")).to_have_count(2)
    page.close()


def test_confirm_on_a_stale_page_is_refused_and_approves_nothing(browser: Browser, stack: Stack) -> None:
    publish(stack, "console-stale", "[ ] First version of the item")
    page = signed_in(browser, stack, "alice")
    page.goto(f"{stack.state['console_url']}#/plans/console-stale")
    expect(page.locator("#confirm")).to_be_visible()
    edited = publish(stack, "console-stale", "[ ] An edited item the page never showed")  # another session
    page.locator("#confirm").click()
    expect(page.locator("#notice")).to_contain_text("Not confirmed")
    expect(page.locator("#confirm")).to_have_count(0)  # that content can never be confirmed now
    shot(page, "plan-stale-refused")
    page.locator("#review-again").click()  # what it shows now: the edited item, and what changed
    expect(page.locator("table.items .item-title")).to_have_text(["An edited item the page never showed"])
    expect(page.locator("ul.changes")).to_contain_text("added: #1 An edited item the page never showed")
    expect(page.locator("ul.changes")).not_to_contain_text("null")  # never confirmed: no key-by-key list
    with api(stack) as client:
        now = client.get("/v1/plans/console-stale").json()
    assert now["status"] in ("draft", "awaiting_confirmation")
    assert now["approved_hash"] is None
    assert now["content_hash"] == edited["content_hash"]
    page.close()


def test_the_review_page_shows_what_each_item_waits_for_and_its_own_repository(
    browser: Browser, stack: Stack
) -> None:
    publish(stack, "console-order", "[ ] First", f"[ ] Second (after #1)\nrepo: {SECOND_REPO}")
    page = signed_in(browser, stack, "alice")
    page.goto(f"{stack.state['console_url']}#/plans/console-order")
    expect(page.locator("table.items .item-title")).to_have_text(["First", "Second"])
    expect(page.locator("table.items .item-after")).to_have_text(["after #1"])
    expect(page.locator("table.items .item-repo")).to_have_text([f"in {SECOND_REPO}"])
    page.close()


def test_archive_asks_once_more_in_the_page_then_the_plan_is_archived(browser: Browser, stack: Stack) -> None:
    publish(stack, "console-archive", "[ ] An item nobody wants any more")
    page = signed_in(browser, stack, "alice")  # a dialog fails the test: the page asks in place
    page.goto(f"{stack.state['console_url']}#/plans/console-archive")
    page.locator("#archive").click()
    expect(page.locator("#archive-actions")).to_contain_text("Archiving is final")
    shot(page, "plan-archive-ask")
    page.locator("#archive-keep").click()  # changed their mind: nothing was sent
    expect(page.locator("#archive")).to_be_focused()
    with api(stack) as client:
        assert client.get("/v1/plans/console-archive").json()["status"] in ("draft", "awaiting_confirmation")

    page.locator("#archive").click()
    expect(page.locator("#archive-keep")).to_be_focused()  # Enter twice keeps the plan
    page.keyboard.press("Shift+Tab")
    expect(page.locator("#archive-confirm")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#notice")).to_contain_text("Archived")
    expect(page.locator("h1 .status")).to_have_text("archived")
    expect(page.locator("#archive, #confirm")).to_have_count(0)  # final: nothing more to do
    with api(stack) as client:
        assert client.get("/v1/plans/console-archive").json()["status"] == "archived"
    page.close()


SLOW_SETUP = 'python -c "import time; [print(i, flush=True) or time.sleep(0.5) for i in range(240)]"'


def test_a_cancelled_run_shows_its_output_and_artifacts_and_a_retry_links_the_next_attempt(
    browser: Browser, stack: Stack
) -> None:
    plan = publish(stack, "console-cancel", "[ ] An item whose setup takes its time", setup=SLOW_SETUP)
    with api(stack) as client:  # the loop looks every second: the retry's attempt comes at once
        assert client.put("/v1/loop", json={"interval_seconds": 1, "max_open_prs": 100}).is_success
        assert client.post(
            "/v1/plans/console-cancel/confirm", json={"content_hash": plan["content_hash"]}
        ).is_success
    task_id = wait_for_task(stack, "console-cancel")
    page = signed_in(browser, stack, "alice")
    page.goto(f"{stack.state['console_url']}#/tasks/{task_id}")
    expect(page.locator("#summary h1 .status")).to_have_text("running", timeout=30_000)
    expect(page.locator("#output")).to_contain_text("3", timeout=30_000)  # the setup's live output
    page.locator("#cancel").click()
    expect(page.locator("#summary h1 .status")).to_have_text("cancelled")
    expect(page.locator("#artifacts a.artifact").first).to_be_visible(
        timeout=20_000
    )  # uploaded once it noticed
    expect(page.locator("#output")).not_to_have_text("(waiting for output)")

    page.locator("#retry").click()
    expect(page.locator("#notice")).to_contain_text("Retry requested")
    expect(page.locator("#retry")).to_have_count(0)
    newer = page.locator("#newer-attempt")
    expect(newer).to_be_visible(timeout=30_000)  # the page followed the plan to the new attempt
    newer_id = newer.inner_text()
    assert newer_id != task_id
    page.goto(f"{stack.state['console_url']}#/tasks/{task_id}")  # the old attempt offers no Retry now
    expect(page.locator("#newer-attempt")).to_have_text(newer_id)
    expect(page.locator("#retry")).to_have_count(0)
    with api(stack) as client:
        assert client.post(f"/v1/tasks/{newer_id}/cancel").is_success  # frees the loop for the others
    page.close()


def wait_for_task(stack: Stack, slug: str) -> str:
    with api(stack) as client:
        for _ in range(150):
            items = client.get(f"/v1/plans/{slug}").json()["items"]
            if items[0]["task_id"]:
                return str(items[0]["task_id"])
            time.sleep(0.2)
    raise AssertionError(f"the loop spawned no task for {slug}")


def test_hostile_titles_render_as_text_and_run_nothing(browser: Browser, stack: Stack) -> None:
    publish(stack, "console-hostile", *HOSTILE_TITLES)
    page = signed_in(browser, stack, "alice")  # a dialog fails the test (signed_in)
    page.goto(f"{stack.state['console_url']}#/plans/console-hostile")
    titles = page.locator("table.items .item-title")
    expect(titles).to_have_count(len(HOSTILE_TITLES))
    assert titles.all_text_contents() == HOSTILE_TITLES
    assert page.locator("table.items img, table.items script, table.items svg").count() == 0
    hrefs = page.eval_on_selector_all("a", "nodes => nodes.map(n => n.getAttribute('href'))")
    assert not [h for h in hrefs if h and h.lower().startswith("javascript:")]
    page.wait_for_timeout(300)  # any onerror/onload would have fired
    shot(page, "plan-hostile")
    page.close()


def test_hidden_characters_show_as_escapes_and_a_failed_task_page_leads_with_why(
    browser: Browser, stack: Stack
) -> None:
    """The review page shows the document's text with its bidirectional and control
    characters as escapes, says once why its items wait and what confirming may spend at
    most. Confirmed there, an item's task fails (the packaged model knows no such item): its
    page escapes the title too, leads with why it failed, says "none" for what will never
    come, tells its events as sentences (their JSON on demand) in one time format."""
    raw_title, shown_title = HOSTILE_BIDI[0]
    items = [
        f"{'[x] ' if n >= 2 else ''}{raw}\n{raw} in the details" for n, (raw, _) in enumerate(HOSTILE_BIDI)
    ]
    publish(stack, "console-bidi", *items, title=raw_title, front="max_attempts: 1\nfollow_ups: 1\n")
    page = signed_in(browser, stack, "alice")
    page.goto(f"{stack.state['console_url']}#/plans/console-bidi")
    expect(page.locator("table.items .item-title")).to_have_text([shown for _, shown in HOSTILE_BIDI])
    expect(page.locator("table.items .details")).to_have_text(
        [f"{shown} in the details" for _, shown in HOSTILE_BIDI]
    )
    expect(page.locator("main h1")).to_contain_text(shown_title)
    expect(page.locator(".waiting")).to_have_count(1)  # once for the plan, not under each pending item
    expect(page.locator("#plan-waiting")).to_contain_text("not confirmed yet")
    expect(page.locator("#max-spend")).to_have_text(
        "at most $2.00 (2 pending items \u00d7 $0.50 \u00d7 (1 attempt + 1 follow-up round)),"
        " plus up to $0.50 per retry you ask for"
    )
    shown = page.inner_text("main")
    assert [raw for raw, _ in HOSTILE_BIDI if raw in shown] == []
    shot(page, "plan-bidi")
    try:
        page.locator("#confirm").click()
        task_link = page.locator("table.items a").first
        expect(task_link).to_be_visible(timeout=30_000)  # the confirmed plan's page follows its items
        task_link.click()
        expect(page.locator("#summary h1 .status")).to_have_text("failed", timeout=60_000)
        expect(page.locator("#summary h1")).to_contain_text(shown_title)
        expect(page.locator("#outcome")).to_contain_text("Failed (")
        expect(page.locator("#failure-code")).to_have_text(re.compile(r"^[a-z_]+$"))  # its code
        expect(page.locator("#remedy")).to_contain_text(
            re.compile(r"What to do \((you|the \w+|nobody.*)\): ")
        )
        expect(page.locator("dl.facts dt:text-is('Pull request') + dd")).to_have_text("none")
        started = page.locator("#timeline li.started")
        expect(started).to_contain_text("The run started.")
        expect(started.locator("pre")).to_be_hidden()  # the JSON, on demand
        started.locator("summary").click()
        expect(started.locator("pre")).to_contain_text('"status": "running"')
        stamp = started.locator("time")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", stamp.get_attribute("title") or "")
        assert "T" not in stamp.inner_text()  # the person's own format, not the ISO instant
        assert raw_title not in page.inner_text("main")
        shot(page, "task-failed")
    finally:
        with api(stack) as client:  # its other item stops, freeing alice's slots for the others
            client.post("/v1/plans/console-bidi/archive")
    page.close()


def test_another_users_plan_and_task_are_not_found(browser: Browser, stack: Stack) -> None:
    publish(stack, "console-private", "[ ] Alice's own item")
    page = signed_in(browser, stack, "bob")
    page.goto(f"{stack.state['console_url']}#/plans/console-private")
    expect(page.locator("h1")).to_have_text("Not found")
    made = stack.cli("local", "capability", "--owner", "alice", "--budget-usd", "0.01")
    assert made.returncode == 0, made.stderr
    page.goto(f"{stack.state['console_url']}#/tasks/{json.loads(made.stdout)['task_id']}")  # alice's task
    expect(page.locator("h1")).to_have_text("Not found")
    shot(page, "not-found")
    page.close()


def test_loop_settings_pause_and_resume_at_phone_width(browser: Browser, stack: Stack) -> None:
    page = signed_in(browser, stack, "carol")
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto(f"{stack.state['console_url']}#/loop")
    page.locator("#pause").click()
    expect(page.locator("#notice")).to_contain_text("Paused")
    with api(stack, "alice") as client:
        assert client.get("/v1/loop").json()["paused"] is False  # carol's loop, not alice's
    expect(page.locator("#interval_seconds")).to_have_value("60")  # how often the loop looks
    page.locator("#quiet_start").fill("22:00")  # no end: refused in the page, nothing saved
    page.locator("#max_parallel").fill("7")
    page.locator("#max_parallel").press("Enter")
    expect(page.locator("#notice")).to_contain_text("quiet hours need both a start and an end")
    expect(page.locator("#quiet_end")).to_be_focused()
    saved = page.evaluate(
        "async () => (await (await fetch('/v1/loop', {headers: {Authorization:"
        " `Bearer ${sessionStorage.getItem('steward.token')}`}})).json()).max_parallel"
    )
    assert saved != 7
    page.locator("#quiet_start").fill("")
    page.locator("#max_parallel").fill("2")
    page.locator("#max_parallel").press("Enter")
    # "Loop settings saved", not just "saved": the refusal before it says "Not saved", and
    # pausing while this save is still on its way lets the save's notice come last.
    expect(page.locator("#notice")).to_contain_text("Loop settings saved")
    # The keyboard alone resumes it: focus and Enter on the button as it is then (a focus
    # held by a button a re-render replaced would take the key nowhere).
    page.locator("#pause").press("Enter")
    # A write and a re-render under a loaded machine's parallel workers: wait longer than 5 s.
    expect(page.locator("#notice")).to_contain_text("Resumed", timeout=20_000)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"the page scrolls sideways at 375 px ({width})"
    shot(page, "loop-375px")
    page.close()
