"""The CLI as a person uses it: `steward local up` in its own process, commands in others,
SIGTERM to stop; and `steward demo` from start to finish."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.domain.installations import Installation
from steward.domain.models import utcnow
from steward.local.github_twin import admin
from steward.local.sample_repo import SAMPLE_REPO

from tests.support.documents import document
from tests.support.local_cli import STEWARD, clean_env
from tests.support.local_cli import local_up as stack_up

RESYNC_SECONDS = 3  # the module's stack looks at GitHub for review tasks this often


def run(
    state_file: Path, *args: str, user: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    extra = ["--user", user] if user else []
    return subprocess.run(
        [*STEWARD, "--state-file", str(state_file), *extra, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
        check=False,
    )


@pytest.fixture(scope="module")
def local_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    state_file = tmp_path_factory.mktemp("cli") / "local.json"
    args = ("--resync-seconds", str(RESYNC_SECONDS))
    with stack_up(state_file, *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        yield process, state_file


def test_a_local_capability_fixture_stays_out_of_its_owners_way(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """`local capability` for alice says how long its fixture lives; `plan list` does not
    show it (`plan show` does); its task holds none of alice's `max_parallel` slots, so her
    real plan at max_parallel 1 spawns past it; and a retry of it is refused, where one of
    real work says which attempt is queued. First in the module: no real work of alice's
    runs yet on the shared stack to hold that one slot."""
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    api = httpx.Client(
        base_url=state["api_url"], headers={"Authorization": f"Bearer {state['users']['alice']}"}, timeout=30
    )
    restored = {
        k: v
        for k, v in api.get("/v1/loop").json().items()
        if k in ("interval_seconds", "max_parallel", "paused")
    }
    assert api.put("/v1/loop", json={"interval_seconds": 1, "max_parallel": 1}).status_code == 200
    try:
        # `local capability` names its owner with --owner; --user (the identity the CLI acts
        # as, here after the subcommand) still means the same dev user.
        made = steward(
            "local", "capability", "--budget-usd", "0.01", "--user", "alice", "--state-file", str(state_file)
        )
        assert made.returncode == 0, made.stderr
        fixture = json.loads(made.stdout)
        assert fixture["lifetime_seconds"] == 600
        assert f"lives 10 min, until {fixture['expires_at']}" in made.stderr
        assert fixture["plan_slug"] not in run(state_file, "plan", "list").stdout
        shown = run(state_file, "plan", "show", fixture["plan_slug"])
        assert f"plan {fixture['plan_slug']}  (in_progress, local fixture)" in shown.stdout, shown.stderr
        refused = run(state_file, "--json", "task", "retry", fixture["task_id"])
        assert refused.returncode == 1
        assert json.loads(refused.stdout)["error"]["status"] == 409
        assert "not retried" in json.loads(refused.stdout)["error"]["message"]

        plan_file = tmp_path / "neighbour.md"
        plan_file.write_text(document("A real change beside the fixture", repo=SAMPLE_REPO))
        assert run(state_file, "plan", "publish", str(plan_file), "--slug", "neighbour").returncode == 0
        assert run(state_file, "plan", "confirm", "neighbour").returncode == 0
        reasons: list[tuple[str, str] | None] = []
        deadline = time.monotonic() + 15
        while (item := api.get("/v1/plans/neighbour").json()["items"][0])["task_id"] is None:
            reasons.append(item["waiting"] and (item["waiting"]["reason"], item["waiting"]["detail"]))
            assert time.monotonic() < deadline, f"the real item never spawned: {reasons}"
            time.sleep(0.2)
        assert all(seen is None or seen[0] == "next_tick" for seen in reasons), reasons
        task_id = item["task_id"]
        assert api.get(f"/v1/tasks/{task_id}").json()["kind"] == "work"

        # Paused: a retry is a person's action that the interval no longer holds back, so
        # attempt 2 waits for a resume that the archive below comes before, and no second
        # runtime starts on the shared stack.
        assert api.put("/v1/loop", json={**restored, "paused": True}).status_code == 200
        assert run(state_file, "task", "cancel", task_id).returncode == 0
        retried = run(state_file, "task", "retry", task_id)
        assert retried.returncode == 0, retried.stderr
        assert "retry requested for item #1 of plan neighbour: attempt 2 is queued" in retried.stdout
        assert "the loop is paused: it spawns the attempt once resumed" in retried.stdout
        again = run(state_file, "--json", "task", "retry", task_id)  # until spawned: the same ask
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["queued_attempt"] == 2
    finally:
        run(state_file, "plan", "archive", "neighbour")
        assert api.put("/v1/loop", json=restored).status_code == 200


def test_plan_commands_print_tables_and_json(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    _, state_file = local_up
    plan_file = tmp_path / "My Plan.md"
    # Publish refuses a repository no installation of alice holds: the stack's sample one.
    plan_file.write_text(document("First change", "Second change", repo=SAMPLE_REPO))

    published = run(state_file, "plan", "publish", str(plan_file))
    assert published.returncode == 0, published.stderr
    assert "plan my-plan  (draft)" in published.stdout
    assert "First change" in published.stdout

    confirmed = run(state_file, "--json", "plan", "confirm", "my-plan")
    assert json.loads(confirmed.stdout)["status"] == "confirmed"

    listed = run(state_file, "plan", "list")
    # The stack's loop may already have picked it up.
    assert re.search(r"^my-plan\s+(confirmed|in_progress)\s", listed.stdout, re.M), listed.stdout
    tasks = run(state_file, "--json", "tasks", "--plan", "my-plan")
    assert {t["plan_slug"] for t in json.loads(tasks.stdout)["tasks"]} <= {"my-plan"}

    hidden = run(state_file, "plan", "show", "my-plan", user="bob")
    assert hidden.returncode == 1
    assert "404" in hidden.stderr
    assert "my-plan" in hidden.stderr


REVIEW_PLAN = """---
repo: {repo}
base: main
budget_usd: {budget}
checks:
  - python -m pytest -q
setup:
  - python -m pip --version
max_attempts: 2
---
# Review me

- [x] Keep the first item, whose title is longer than the table of items shows it, word for word
  Its details, as the person wrote them.
    An indented line.
{middle}- [x] The last item
{tail}"""


def test_plan_show_shows_what_is_approved_and_plan_diff_what_changed(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """Checked items only, so the shared stack's loop has nothing to spawn."""
    _, state_file = local_up
    plan_file = tmp_path / "review.md"
    middle = "- [x] An item to drop\n- [x] An item that stays\n- [x] An item to edit\n  old details\n"
    plan_file.write_text(REVIEW_PLAN.format(repo=SAMPLE_REPO, budget="1.50", middle=middle, tail=""))
    published = run(state_file, "plan", "publish", str(plan_file), "--slug", "review")
    assert published.returncode == 0, published.stderr
    match = re.search(r"^  content: ([0-9a-f]{12})$", published.stdout, re.MULTILINE)
    assert match, published.stdout
    first = match.group(1)

    shown = run(state_file, "plan", "show", "review")
    assert shown.returncode == 0, shown.stderr
    for line in (
        "what confirming approves:",
        f"  repo:         {SAMPLE_REPO}",
        "  base:         main",
        "  model:        scripted",
        "  budget_usd:   1.5 (per task)",
        "  checks:       python -m pytest -q",
        "  setup:        python -m pip --version",
        "  max_attempts: 2",
        "  1. [x] Keep the first item, whose title is longer than the table of items shows it, word for word",
        "         Its details, as the person wrote them.",
        "           An indented line.",
        "  4. [x] An item to edit",
        "         old details",
    ):
        assert line in shown.stdout.splitlines(), (line, shown.stdout)

    never = run(state_file, "plan", "diff", "review")
    assert never.returncode == 0, never.stderr
    assert "plan review: never confirmed, so all of it is new" in never.stdout
    assert "  budget_usd:    - -> 1.5" in never.stdout

    confirmed = run(state_file, "plan", "confirm", "review", "--content-hash", first)
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"content: {first}  (approved)" in confirmed.stdout
    unchanged = run(state_file, "plan", "diff", "review")
    assert f"plan review: no change since its last confirmation (content {first})" in unchanged.stdout

    middle = "- [x] An item that stays\n- [x] An item to edit\n  new details\n"
    tail = "- [x] An item added\n"
    plan_file.write_text(REVIEW_PLAN.format(repo=SAMPLE_REPO, budget="3", middle=middle, tail=tail))
    republished = run(state_file, "plan", "publish", str(plan_file), "--slug", "review")
    assert "(awaiting_confirmation)" in republished.stdout, republished.stderr
    changed = run(state_file, "plan", "diff", "review")
    assert changed.returncode == 0, changed.stderr
    lines = changed.stdout.splitlines()
    assert lines[:3] == ["plan review: changed since its last confirmation", f"  approved: {first}", lines[2]]
    assert "  budget_usd:  1.5 -> 3" in lines
    start = next(n for n, line in enumerate(lines) if line.startswith("#  WAS"))
    table = [" ".join(line.split()) for line in lines[start:]]
    assert table == [
        "# WAS CHANGE ITEM",
        "3 4 edited (details) An item to edit",
        "5 - added An item added",
        "- 2 removed An item to drop",
    ], changed.stdout
    as_json = json.loads(run(state_file, "--json", "plan", "diff", "review").stdout)
    assert as_json["approved_hash"].startswith(first)
    assert as_json["front_matter"] == {"budget_usd": ["1.5", "3"]}

    stale = run(state_file, "plan", "confirm", "review", "--content-hash", first)
    assert stale.returncode == 1
    assert "409 conflict: the plan changed since you reviewed it" in stale.stderr
    never_had = run(state_file, "plan", "confirm", "review", "--content-hash", "000000000000")
    assert never_had.returncode == 1
    assert "404 no_such_content: no such content: 000000000000 was never the content" in never_had.stderr
    short = run(state_file, "plan", "confirm", "review", "--content-hash", first[:11])
    assert short.returncode == 1
    assert "400" in short.stderr
    assert "field: content_hash" in short.stderr


def test_loop_commands_and_clear_errors(local_up: tuple[subprocess.Popen[str], Path]) -> None:
    _, state_file = local_up
    shown = run(
        state_file, "--json", "loop", "set", "--quiet-hours", "22:00-06:30", "--timezone", "Asia/Tokyo"
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["quiet_hours"] == {"start": "22:00", "end": "06:30"}
    bad = run(state_file, "loop", "set", "--timezone", "Nowhere/Land")
    assert bad.returncode == 1
    assert "field: timezone" in bad.stderr
    missing = run(state_file, "task", "show", "t000000000000000000000000")
    assert missing.returncode == 1
    assert "404" in missing.stderr
    # The module's stack is shared: quiet hours left set would hold alice's loop (and its
    # resync) for the later tests whenever they run inside the window.
    cleared = run(state_file, "--json", "loop", "set", "--quiet-hours", "none", "--timezone", "UTC")
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["quiet_hours"] is None


def test_a_document_error_names_its_line_and_a_login_link_is_stdout_alone(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """The API's line of an invalid document reaches the person (text and `--json`); `local
    login` prints the link alone on stdout (`URL=$(steward local login alice)`)."""
    _, state_file = local_up
    broken = tmp_path / "broken.md"
    broken.write_text(f"---\nrepo: {SAMPLE_REPO}\nchecks: [pytest\n---\n# Broken\n\n- [ ] An item\n")
    refused = run(state_file, "plan", "publish", str(broken))
    assert refused.returncode == 1
    assert re.search(r"\(field: front_matter\S*, line 3\)$", refused.stderr.strip()), refused.stderr
    error = json.loads(run(state_file, "--json", "plan", "publish", str(broken)).stdout)["error"]
    assert (error["status"], error["line"]) == (422, 3), error

    link = run(state_file, "local", "login", "alice")
    assert link.returncode == 0, link.stderr
    assert re.fullmatch(r"https?://\S+#login=[A-Za-z0-9_-]+\n", link.stdout), link.stdout
    assert "signs in once" in link.stderr
    as_json = json.loads(run(state_file, "--json", "local", "login", "alice").stdout)
    assert as_json["url"].startswith(json.loads(state_file.read_text())["console_url"])


def test_local_token_and_admin_link(local_up: tuple[subprocess.Popen[str], Path]) -> None:
    _, state_file = local_up
    token = run(state_file, "local", "token", "erin").stdout.strip()
    assert token.count(".") == 2
    minted = json.loads(run(state_file, "--json", "local", "token", "erin").stdout)
    assert minted["user"] == "erin"
    assert minted["token"].count(".") == 2
    # Installation 7 as the installation sync records one the App was installed on.
    state = json.loads(state_file.read_text())
    tables = Tables.connect(
        state["table_prefix"],
        endpoint_url=state["aws_endpoint_url"],
        region_name=state["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    InstallationStore(tables).put(
        Installation(installation_id=7, account="other-org", repositories=("other-org/tool",)), now=utcnow()
    )
    linked = run(state_file, "admin", "link-installation", "7", "--owner", "alice")
    assert linked.returncode == 0, linked.stderr
    assert "linked to alice" in linked.stdout
    taken = run(state_file, "admin", "link-installation", "7", "--owner", "bob")
    assert taken.returncode == 1
    assert "another user" in taken.stderr
    moved = run(state_file, "admin", "link-installation", "7", "--owner", "bob", "--force")
    assert moved.returncode == 0
    assert InstallationStore(tables).for_owner("bob")[0].installation_id == 7


def test_local_capability_drives_the_relay_from_outside(local_up: tuple[subprocess.Popen[str], Path]) -> None:
    _, state_file = local_up
    made = run(
        state_file, "local", "capability", "--owner", "alice", "--budget-usd", "0.002", "--model", "scripted"
    )
    assert made.returncode == 0, made.stderr
    fixture = json.loads(made.stdout)
    state = json.loads(state_file.read_text())
    relay = state["relay_url"] + "/v1/relay/converse"
    assert relay.startswith("https://")
    body = {
        "messages": [{"role": "user", "content": [{"text": "hello"}]}],
        "inferenceConfig": {"maxTokens": 100},
    }
    auth = {"Authorization": f"Bearer {fixture['capability']}"}
    client = httpx.Client(verify=ssl.create_default_context(cafile=state["ca_bundle"]), timeout=30)
    plain = httpx.post(state["relay_http_url"] + "/v1/relay/converse", json=body, timeout=30)
    assert plain.status_code == 401, plain.text  # the runner's plain-http door: the same relay
    answered = client.post(relay, json=body, headers=auth)
    assert answered.status_code == 200, answered.text
    steward = answered.json()["steward"]
    assert Decimal(steward["cost_usd"]) > 0
    assert Decimal(steward["remaining_usd"]) == Decimal("0.002") - Decimal(steward["cost_usd"])
    assert client.post(relay, json=body).status_code == 401
    statuses = []
    while len(statuses) < 300 and (not statuses or statuses[-1] == 200):
        statuses.append(client.post(relay, json=body, headers=auth).status_code)
    assert statuses[-1] == 402, statuses  # one caller at a time: spent, never "held"
    assert set(statuses[:-1]) == {200}


def test_task_logs_prints_live_output_while_it_runs_and_follows_it_to_the_end(
    local_up: tuple[subprocess.Popen[str], Path],
) -> None:
    """`task logs` shows what a running task printed so far; `--follow` prints until the
    run ends; another user gets the API's 404."""
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    made = run(
        state_file, "local", "capability", "--owner", "alice", "--budget-usd", "0.01", "--model", "scripted"
    )
    fixture = json.loads(made.stdout)
    task_id, runtime = fixture["task_id"], {"Authorization": f"Bearer {fixture['capability']}"}
    post = f"{state['stream_url']}/v1/runtime/stream"
    assert httpx.post(post, content="$ pytest -q\n", headers=runtime, timeout=10).status_code == 204

    so_far = run(state_file, "task", "logs", task_id)
    assert (so_far.returncode, so_far.stdout) == (0, "$ pytest -q\n"), so_far.stderr
    follower = subprocess.Popen(
        [*STEWARD, "--state-file", str(state_file), "task", "logs", task_id, "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "$ pytest -q\n"  # the replay, then it waits
        httpx.post(post, content="1 passed\n", headers=runtime, timeout=10)
        httpx.post(post, params={"end": "1"}, content="", headers=runtime, timeout=10)
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert (follower.returncode, out) == (0, "1 passed\n"), err
    hidden = run(state_file, "task", "logs", task_id, user="bob")
    assert (hidden.returncode, "404" in hidden.stderr) == (1, True)


STOCK_BOTO3 = """
import json, sys
import boto3
client = boto3.client("bedrock-runtime")
messages = [{"role": "user", "content": [{"text": "hello from a stock client"}]}]
answer = client.converse(modelId="scripted", messages=messages)
stream = client.converse_stream(modelId="scripted", messages=messages)
events = [name for event in stream["stream"] for name in event]
try:
    client.converse(modelId="another-model", messages=messages)
    pinned = None
except client.exceptions.AccessDeniedException as exc:
    pinned = exc.response["Error"]["Code"]
print(json.dumps({
    "text": answer["output"]["message"]["content"][0]["text"],
    "cost": answer["ResponseMetadata"]["HTTPHeaders"]["x-steward-cost-usd"],
    "events": events,
    "pinned": pinned,
}))
"""


def stock_env(state: dict[str, object], capability: str) -> dict[str, str]:
    """Only what a user of stock boto3 sets (plus PATH and HOME to run Python at all)."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": str(state["relay_url"]),
        "AWS_BEARER_TOKEN_BEDROCK": capability,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CA_BUNDLE": str(state["ca_bundle"]),
    }


def capability(state_file: Path, budget_usd: str) -> dict[str, str]:
    """A running task of alice's on the module's stack and its capability (`local capability`)."""
    made = run(
        state_file,
        "local",
        "capability",
        "--owner",
        "alice",
        "--budget-usd",
        budget_usd,
        "--model",
        "scripted",
    )
    assert made.returncode == 0, made.stderr
    fixture: dict[str, str] = json.loads(made.stdout)
    return fixture


def test_stock_boto3_with_only_its_environment_calls_the_local_relay_over_https(
    local_up: tuple[subprocess.Popen[str], Path],
) -> None:
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    fixture = capability(state_file, "0.05")
    done = subprocess.run(
        [sys.executable, "-c", STOCK_BOTO3],
        env=stock_env(state, fixture["capability"]),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "hello from a stock client" in seen["text"]
    assert Decimal(seen["cost"]) > 0
    assert seen["events"][0] == "messageStart"
    assert seen["events"][-1] == "metadata"
    assert seen["pinned"] == "AccessDeniedException"


def test_admin_brake_stops_model_calls_until_released(local_up: tuple[subprocess.Popen[str], Path]) -> None:
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    fixture = capability(state_file, "0.05")
    client = httpx.Client(verify=ssl.create_default_context(cafile=state["ca_bundle"]), timeout=30)
    url = state["relay_url"] + "/v1/relay/converse"
    body = {
        "messages": [{"role": "user", "content": [{"text": "hello"}]}],
        "inferenceConfig": {"maxTokens": 64},
    }
    auth = {"Authorization": f"Bearer {fixture['capability']}"}
    on = run(state_file, "admin", "brake", "on", "--reason", "incident 42")
    assert on.returncode == 0, on.stderr
    assert "brake on since" in on.stdout
    assert "incident 42" in on.stdout
    assert "unchanged" in run(state_file, "admin", "brake", "on").stdout
    deadline = time.monotonic() + 10  # the relay's cache is at most 5 s stale
    while (answer := client.post(url, json=body, headers=auth)).status_code == 200:
        assert time.monotonic() < deadline, "the brake never reached the relay"
        time.sleep(0.5)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "brake_engaged"
    status = json.loads(run(state_file, "--json", "admin", "brake", "status").stdout)
    assert status["engaged"] is True
    assert status["reason"] == "incident 42"
    off = run(state_file, "admin", "brake", "off")
    assert off.returncode == 0
    assert "brake off" in off.stdout
    deadline = time.monotonic() + 10
    while (answer := client.post(url, json=body, headers=auth)).status_code == 503:
        assert time.monotonic() < deadline, "the release never reached the relay"
        time.sleep(0.5)
    assert answer.status_code == 200, answer.text


def opened_pull_request(state_file: Path, tmp_path: Path) -> tuple[str, int, str]:
    """A runtime's work on the twin, done by hand: capability -> scoped GitHub token ->
    branch pushed over smart HTTP -> pull request opened. (task id, number, html url)"""
    state = json.loads(state_file.read_text())
    fixture = json.loads(
        run(
            state_file,
            "local",
            "capability",
            "--owner",
            "alice",
            "--budget-usd",
            "0.10",
            "--model",
            "scripted",
        ).stdout
    )
    task_id, capability = fixture["task_id"], fixture["capability"]
    issued = httpx.post(
        f"{state['api_url']}/v1/runtime/github-token",
        headers={"Authorization": f"Bearer {capability}"},
        timeout=30,
    )
    assert issued.status_code == 200, issued.text
    token = issued.json()["token"]
    repo = "steward-demo/calculator"
    clone = tmp_path / "clone"
    header = "Authorization: Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
    git_env = {
        **os.environ,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": header,
    }
    git_env |= {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    clone_url = state["repos"][repo]["clone_url"]
    subprocess.run(["git", "clone", "-q", clone_url, str(clone)], env=git_env, check=True, timeout=60)
    branch = "steward/" + task_id[1:]
    (clone / "NOTES.md").write_text(f"a change for {task_id}\n")
    for args in (
        ["checkout", "-q", "-b", branch],
        ["add", "-A"],
        ["commit", "-qm", "change"],
        ["push", "-q", "origin", branch],
    ):
        subprocess.run(["git", *args], cwd=clone, env=git_env, check=True, timeout=60)
    assert token not in (clone / ".git" / "config").read_text()
    opened = httpx.post(
        f"{state['github_url']}/repos/{repo}/pulls",
        json={"title": "A change", "head": branch, "base": "main", "body": "by Steward"},
        headers={"Authorization": f"token {token}", "Accept": "application/vnd.github+json"},
        timeout=30,
    )
    assert opened.status_code == 201, opened.text
    number = opened.json()["number"]

    return task_id, number, str(opened.json()["html_url"])


def run_json(state_file: Path, repo: str, number: int) -> list[dict[str, Any]]:
    """The conversation comments of a pull request on the stack's twin."""
    return admin.comments(str(json.loads(state_file.read_text())["github_url"]), repo, number)


def test_a_pull_request_on_the_twin_moves_its_task_through_review_to_merged(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """The whole GitHub path of the local stack: a runtime's capability buys a scoped
    installation token, a branch is pushed over smart HTTP with it, a pull request is opened,
    the twin's signed webhook moves the task to review, and a reviewer's merge (the CLI
    acting on the twin) moves it to merged."""
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    task_id, number, html_url = opened_pull_request(state_file, tmp_path)
    repo = "steward-demo/calculator"
    alice = {"Authorization": f"Bearer {state['users']['alice']}"}

    def status() -> str:
        return str(
            httpx.get(f"{state['api_url']}/v1/tasks/{task_id}", headers=alice, timeout=30).json()["status"]
        )

    deadline = time.monotonic() + 20
    while status() != "review" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status() == "review"
    # A person standing in for a reviewer, a stranger and CI, through the CLI.
    reviewed = run(
        state_file,
        "local",
        "github",
        "review",
        f"{repo}#{number}",
        "--request-changes",
        "Please also handle negative numbers.",
        "--comment",
        "calculator.py:3:a constant here",
    )
    assert reviewed.returncode == 0, reviewed.stderr
    assert "by octo-reviewer (changes_requested)" in reviewed.stdout
    said = run(
        state_file,
        "--json",
        "local",
        "github",
        "comment",
        f"{repo}#{number}",
        "@steward hi",
        "--as",
        "drive-by",
    )
    assert said.returncode == 0, said.stderr
    assert (json.loads(said.stdout)["user"]["login"], json.loads(said.stdout)["author_association"]) == (
        "drive-by",
        "NONE",
    )
    checked = run(
        state_file,
        "local",
        "github",
        "check",
        f"{repo}#{number}",
        "--name",
        "lint",
        "--conclusion",
        "failure",
    )
    assert checked.returncode == 0, checked.stderr
    assert "check lint failure on" in checked.stdout
    for bad, code, says in (
        (
            ("review", f"{repo}#{number}", "--request-changes", "x", "--comment", "no-line-here"),
            2,
            "PATH:LINE:TEXT",
        ),
        (("check", f"{repo}#{number}", "--name", "lint", "--conclusion", "maybe"), 2, "invalid choice"),
        (("comment", f"{repo}#999", "hello"), 1, f"{repo}#999: no such pull request on the twin"),
        (("review", f"{repo}#{number}", "--approve", "ok", "--request-changes", "no"), 2, "not allowed with"),
    ):
        refused = run(state_file, "local", "github", *bad)
        assert (refused.returncode, says in refused.stderr) == (code, True), (bad, refused.stderr)
    assert [c["user"]["login"] for c in run_json(state_file, repo, number)] == ["drive-by"]
    pushed = run(state_file, "--json", "local", "github", "push", f"{repo}#{number}")
    assert pushed.returncode == 0, pushed.stderr
    head = json.loads(pushed.stdout)["head"]
    shown = {p["number"]: p["head"]["sha"] for p in admin.pulls(state["github_url"], repo)}
    assert shown[number] == head["sha"]  # the branch moved
    merged = run(state_file, "local", "github", "merge", f"{repo}#{number}")
    assert merged.returncode == 0, merged.stderr
    deadline = time.monotonic() + 20
    while status() != "merged" and time.monotonic() < deadline:
        time.sleep(0.2)
    task = httpx.get(f"{state['api_url']}/v1/tasks/{task_id}", headers=alice, timeout=30).json()
    assert (task["status"], task["pr_url"]) == ("merged", html_url)
    events = httpx.get(f"{state['api_url']}/v1/tasks/{task_id}/events", headers=alice, timeout=30).json()[
        "events"
    ]
    assert [e["type"] for e in events].count("github_event") == 2


def test_a_merge_whose_webhook_is_withheld_reaches_merged_through_resync(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """GitHub loses the merge's webhook (`steward local github withhold on`): the loop's
    resync finds the merge on the twin within the period and moves the task to merged."""
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    alice = {"Authorization": f"Bearer {state['users']['alice']}"}
    httpx.put(
        f"{state['api_url']}/v1/loop",
        json={"interval_seconds": 1, "max_open_prs": 100},
        headers=alice,
        timeout=30,
    )
    task_id, number, _ = opened_pull_request(state_file, tmp_path)

    def task() -> dict[str, object]:
        found: dict[str, object] = httpx.get(
            f"{state['api_url']}/v1/tasks/{task_id}", headers=alice, timeout=30
        ).json()
        return found

    deadline = time.monotonic() + 20
    while task()["status"] != "review" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert task()["status"] == "review"
    withheld = run(state_file, "local", "github", "withhold", "on")
    assert (withheld.returncode, withheld.stdout.strip()) == (0, "webhooks withheld"), withheld.stderr
    try:
        assert (
            run(state_file, "local", "github", "merge", f"steward-demo/calculator#{number}").returncode == 0
        )
        deadline = time.monotonic() + RESYNC_SECONDS + 30
        while task()["status"] != "merged" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert task()["status"] == "merged"
    finally:
        delivered = run(state_file, "--json", "local", "github", "withhold", "off")
        assert json.loads(delivered.stdout) == {"withholding": False}
    events = httpx.get(f"{state['api_url']}/v1/tasks/{task_id}/events", headers=alice, timeout=30).json()[
        "events"
    ]
    sources = [e["data"].get("source") for e in events if e["type"] == "github_event"]
    assert sources[-1] == "resync"


def test_task_cancel_in_review_withdraws_it_and_the_loop_closes_its_pull_request(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """`steward task cancel` on a task in review withdraws it (closed, reason withdrawn); the
    loop then comments on its pull request on the twin and closes it. Cancelling a merged
    task is still a 409."""
    _, state_file = local_up
    state = json.loads(state_file.read_text())
    repo = "steward-demo/calculator"
    alice = {"Authorization": f"Bearer {state['users']['alice']}"}
    httpx.put(
        f"{state['api_url']}/v1/loop",
        json={"interval_seconds": 1, "max_open_prs": 100},
        headers=alice,
        timeout=30,
    )

    def task(task_id: str) -> dict[str, Any]:
        found: dict[str, Any] = httpx.get(
            f"{state['api_url']}/v1/tasks/{task_id}", headers=alice, timeout=30
        ).json()
        return found

    def wait_for(check: Callable[[], bool], seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while not check() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert check()

    withdrawn_id, number, html_url = opened_pull_request(state_file, tmp_path / "w")
    wait_for(lambda: task(withdrawn_id)["status"] == "review")
    cancelled = run(state_file, "task", "cancel", withdrawn_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"withdrawn: task {withdrawn_id}" in cancelled.stdout
    assert f"the loop closes {html_url} with a comment at its next tick" in cancelled.stdout
    shown = run(state_file, "task", "show", withdrawn_id)
    assert re.search(r"status:\s+closed", shown.stdout)
    assert re.search(r"reason:\s+withdrawn", shown.stdout)

    def closed_on_the_twin() -> bool:
        pull = next(p for p in admin.pulls(state["github_url"], repo) if p["number"] == number)
        return pull["state"] == "closed" and not task(withdrawn_id)["pr_close_pending"]

    wait_for(closed_on_the_twin)
    [comment] = admin.comments(state["github_url"], repo, number)
    assert comment["body"].startswith("Withdrawn by `alice` through Steward")
    events = run(state_file, "--json", "task", "events", withdrawn_id)
    assert [e["type"] for e in json.loads(events.stdout)["events"]][-2:] == ["withdrawn", "pr_closed"]
    again = run(state_file, "task", "cancel", withdrawn_id)  # the same ask: nothing more
    assert again.returncode == 0, again.stderr
    assert f"the loop has closed {html_url}" in again.stdout

    merged_id, merged_number, _ = opened_pull_request(state_file, tmp_path / "m")
    wait_for(lambda: task(merged_id)["status"] == "review")
    assert run(state_file, "local", "github", "merge", f"{repo}#{merged_number}").returncode == 0
    wait_for(lambda: task(merged_id)["status"] == "merged")
    refused = run(state_file, "--json", "task", "cancel", merged_id)
    assert refused.returncode == 1
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "lifecycle"
    assert "merged" in error["message"]
    assert admin.comments(state["github_url"], repo, merged_number) == []


def steward(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point with exactly `args` (no options put in front of them)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "AWS_"))}
    return subprocess.run(
        [*STEWARD, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **(env or {})},
        check=False,
    )


def test_global_options_work_anywhere_and_json_errors_are_json(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    _, state_file = local_up
    sf = str(state_file)
    version = steward("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"steward {metadata.version('steward')}")
    plan_file = tmp_path / "anywhere.md"
    plan_file.write_text(document("Options after the subcommand", repo=SAMPLE_REPO))
    published = steward("plan", "publish", str(plan_file), "--state-file", sf, "--json")
    assert published.returncode == 0, published.stderr
    assert json.loads(published.stdout)["slug"] == "anywhere"
    shown = steward("plan", "show", "anywhere", "--json", "--state-file", sf)
    assert json.loads(shown.stdout)["items"][0]["title"] == "Options after the subcommand"
    # bob cannot see alice's plan, whichever position says --user; an option a subcommand
    # was not given keeps what an earlier position set.
    for args in (
        ("plan", "show", "anywhere", "--user", "bob", "--json", "--state-file", sf),
        ("--user", "bob", "--json", "plan", "show", "anywhere", "--state-file", sf),
    ):
        hidden = steward(*args)
        assert hidden.returncode == 1
        assert hidden.stderr == ""
        error = json.loads(hidden.stdout)["error"]
        assert (error["code"], error["status"]) == ("not_found", 404), error
    nobody = steward("tasks", "--user", "nobody", "--state-file", sf)
    assert nobody.returncode == 1
    assert "no token for user 'nobody'" in nobody.stderr
    usage = steward("plan", "show", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout)["error"]["code"] == "usage"
    plain = steward("plan", "show")
    assert (plain.returncode, plain.stdout) == (2, "")
    assert "required: slug" in plain.stderr


def test_admin_link_installation_refuses_without_aws_and_for_unknown_installations(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    _, state_file = local_up
    no_aws = {
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for args in (
        ("admin", "link-installation", "1", "--owner", "alice"),
        ("admin", "brake", "status"),
    ):
        refused = steward(*args, "--state-file", str(tmp_path / "local.json"), env=no_aws)
        assert refused.returncode == 1
        assert refused.stdout == ""
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "no AWS region or credentials configured" in refused.stderr
    for force in ((), ("--force",)):
        unknown = run(state_file, "admin", "link-installation", "424242", "--owner", "alice", *force)
        assert unknown.returncode == 1
        assert "installation 424242 is not one the GitHub App has" in unknown.stderr
        assert "Traceback" not in unknown.stderr
    old_spelling = run(state_file, "admin", "link-installation", "1", "--user", "bob")
    assert old_spelling.returncode == 2
    assert "say --owner bob" in old_spelling.stderr
    relinked = run(state_file, "--json", "admin", "link-installation", "1", "--owner", "alice")
    assert json.loads(relinked.stdout)["owner_sub"] == "alice"  # the seed's owner, unchanged


def test_a_second_stack_on_the_same_state_directory_is_refused(
    local_up: tuple[subprocess.Popen[str], Path],
) -> None:
    process, state_file = local_up
    before = state_file.read_bytes()
    lock = state_file.parent / "stack.lock"
    assert lock.read_text().strip() == str(process.pid)
    second = steward("local", "up", "--state-file", str(state_file))
    assert second.returncode == 1
    assert f"a stack is already running (pid {process.pid})" in second.stderr
    demo = steward("demo", "--json", "--state-file", str(state_file.parent / "demo.json"))
    assert demo.returncode == 1
    error = json.loads(demo.stdout)["error"]
    assert (error["code"], error["pid"]) == ("stack_running", process.pid)
    assert not (state_file.parent / "demo.json").exists()
    assert state_file.read_bytes() == before
    assert lock.read_text().strip() == str(process.pid)
    assert run(state_file, "plan", "list").returncode == 0  # the first stack still answers


def test_task_commands_show_events_artifacts_diff_and_the_pull_request(
    local_up: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """`task events`, `task artifacts`, `task artifact`, `task diff`, `task open`, `tasks
    --watch`, `plan watch`, `loop pause` / `resume`, as a person runs them."""
    import boto3  # noqa: PLC0415

    _, state_file = local_up
    state = json.loads(state_file.read_text())
    task_id, _, html_url = opened_pull_request(state_file, tmp_path)
    alice = {"Authorization": f"Bearer {state['users']['alice']}"}
    deadline = time.monotonic() + 20
    while (
        httpx.get(f"{state['api_url']}/v1/tasks/{task_id}", headers=alice, timeout=30).json()["pr_url"]
        is None
    ):
        assert time.monotonic() < deadline, "the pull request never reached the task"
        time.sleep(0.2)

    events = run(state_file, "task", "events", task_id)
    assert events.returncode == 0, events.stderr
    assert "github_event" in events.stdout
    as_json = json.loads(run(state_file, "--json", "task", "events", task_id).stdout)
    assert [e["seq"] for e in as_json["events"]] == sorted(e["seq"] for e in as_json["events"])
    opened = run(state_file, "task", "open", task_id)
    assert (opened.returncode, opened.stdout.strip()) == (0, html_url)
    opened_json = run(state_file, "--json", "task", "open", task_id)
    assert json.loads(opened_json.stdout) == {"task_id": task_id, "pr_url": html_url}, opened_json.stderr

    s3 = boto3.client(
        "s3",
        endpoint_url=state["aws_endpoint_url"],
        region_name=state["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    bucket = s3.list_buckets()["Buckets"][0]["Name"]
    s3.put_object(Bucket=bucket, Key=f"artifacts/{task_id}/diff.patch", Body=b"--- a/x\n+++ b/x\n")
    s3.put_object(Bucket=bucket, Key=f"artifacts/{task_id}/screen.txt", Body=b"$ pytest -q\n1 passed\n")
    listed = run(state_file, "task", "artifacts", task_id)
    assert "diff.patch" in listed.stdout
    assert "screen.txt" in listed.stdout
    assert run(state_file, "task", "diff", task_id).stdout == "--- a/x\n+++ b/x\n"
    assert run(state_file, "task", "logs", task_id).stdout == "$ pytest -q\n1 passed\n"  # its run ended
    # --json: one object each, the content in it (every command takes the global option).
    assert json.loads(run(state_file, "--json", "task", "diff", task_id).stdout) == {
        "task_id": task_id,
        "name": "diff.patch",
        "size": 16,
        "encoding": "utf-8",
        "content": "--- a/x\n+++ b/x\n",
    }
    logs = json.loads(run(state_file, "task", "logs", task_id, "--json").stdout)
    assert logs == {
        "task_id": task_id,
        "status": "review",
        "source": "screen",
        "output": "$ pytest -q\n1 passed\n",
    }
    out = tmp_path / "screen.txt"
    saved = run(state_file, "task", "artifact", task_id, "screen.txt", "-o", str(out))
    assert saved.returncode == 0, saved.stderr
    assert out.read_bytes() == b"$ pytest -q\n1 passed\n"
    saved_json = run(state_file, "--json", "task", "artifact", task_id, "screen.txt", "-o", str(out))
    assert json.loads(saved_json.stdout) == {
        "task_id": task_id,
        "name": "screen.txt",
        "size": 21,
        "written_to": str(out),
    }
    missing = run(state_file, "--json", "task", "artifact", task_id, "publish.json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["status"] == 404

    watched = run(state_file, "tasks", "--watch", "--rounds", "1")
    assert watched.returncode == 0
    assert task_id in watched.stdout
    plan_slug = httpx.get(f"{state['api_url']}/v1/tasks/{task_id}", headers=alice, timeout=30).json()[
        "plan_slug"
    ]
    plan = run(state_file, "plan", "watch", plan_slug, "--rounds", "1")
    assert plan.returncode == 0
    assert f"plan {plan_slug}" in plan.stdout
    assert task_id in plan.stdout

    paused = json.loads(run(state_file, "--json", "loop", "pause").stdout)
    assert paused["paused"] is True
    resumed = json.loads(run(state_file, "--json", "loop", "resume").stdout)
    assert resumed["paused"] is False


def test_sigterm_stops_everything_and_removes_the_state_file(
    local_up: tuple[subprocess.Popen[str], Path],
) -> None:
    process, state_file = local_up
    state = json.loads(state_file.read_text())
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    assert not state_file.exists()
    banner = process.stdout.read() if process.stdout else ""
    for key in [k for k in state if k.endswith("_url")] + ["ca_bundle"]:  # the banner lists them all
        assert f"  {key}: {state[key]}" in banner, key
    for key in ("api_url", "relay_url", "relay_http_url", "aws_endpoint_url"):
        url = urlparse(state[key])
        with (
            pytest.raises(ConnectionRefusedError),
            socket.create_connection((url.hostname, url.port), timeout=1),
        ):
            pass


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"{os.getpid()}\\n".encode())
print("locked", flush=True)
time.sleep(60)
"""


def test_demo_runs_to_completion(tmp_path: Path) -> None:
    # A stack killed with SIGKILL leaves its lock file (and pid) behind: it blocks nothing.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / "stack.lock")], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    holder.kill()
    holder.wait(timeout=10)
    assert (tmp_path / "stack.lock").read_text().strip() == str(holder.pid)
    # The demo's third item waits for the first two to merge: under a loaded CI machine it
    # takes longer than a minute; the demo itself gives up at 240 s.
    result = run(tmp_path / "demo.json", "demo", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every item became a reviewed, merged pull request (one after a follow-up round" in result.stdout
    # The first item's review was answered by a round on the same pull request before its merge.
    assert "reviewer: requesting a change on steward-demo/calculator#" in result.stdout
    assert re.search(
        r"follow-up round answered the review with commit [0-9a-f]{12}, [\d.]+ s after", result.stdout
    )
    assert result.stdout.count("1/1 passed") == 4  # each task's required check, on its final tree
    rows = [line for line in result.stdout.splitlines() if re.match(r"#\d\s", line)]
    assert [row.split()[:2] for row in rows] == [  # in the plan's order, the round after its item
        ["#1", rows[0].split()[1]],
        ["#1", "round"],
        ["#2", rows[2].split()[1]],
        ["#3", rows[3].split()[1]],
    ]
    assert rows[1].split()[4] == "answered"
    assert rows[1].split()[5:7] == rows[0].split()[3:5]  # the round's branch and pull request are its item's
    for row in rows:  # each links the pull request page the twin serves (its html_url)
        assert re.search(r"http://127\.0\.0\.1:\d+/steward-demo/calculator/pull/\d+", row), row
    assert not (tmp_path / "demo.json").exists()
    assert (tmp_path / "stack.lock").read_text() == ""  # released: no pid of a stopped stack


# Slugs and task ids that would name another route, or none, if put in a path as they are.
HOSTILE_REFERENCES = [
    ("plan", "show", "a/b"),
    ("plan", "show", "#/tasks/x"),
    ("plan", "confirm", "../loop"),
    ("plan", "publish", "x.md", "--slug", "UPPER"),
    ("tasks", "--plan", "a?b=c"),
    ("task", "show", "t0000/../../v1/loop"),
    ("task", "cancel", "%2e%2e"),
    ("task", "logs", ""),
]


@pytest.mark.parametrize("args", HOSTILE_REFERENCES, ids=[" ".join(a) for a in HOSTILE_REFERENCES])
def test_a_slug_or_task_id_the_api_would_never_take_is_refused_before_any_request(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    refused = steward(*args, "--json", "--state-file", str(tmp_path / "no-stack.json"))
    assert refused.returncode == 2
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "usage"
    assert "a slug is" in error["message"] or "a task id is" in error["message"], error
