"""`steward demo` / `make demo`: the main job on the embedded local stack.

Starts the stack, publishes the sample Task Document as alice, confirms it, and watches the
reconciliation loop spawn one task per item and launch a local runtime for each. Each
runtime clones the twin's sample repository, lets the scripted model (`scripted-coder`,
playing data/playbook.json) edit it through the six tools, runs the plan's check under
bubblewrap, and publishes a pull request. The third item waits for the first two (`(after #1,
#2)`, docs/concepts/task-document.md): it starts once both are merged, on the base as they
left it. The stand-in reviewer (`octo-reviewer` on the
twin) first requests a change on the first item's pull request: the signed review reaches
the receiver, the loop starts a follow-up round, and its runtime pushes a new commit to the
same branch and replies on the pull request (docs/concepts/follow-ups.md). The reviewer then
merges each pull request, the signed webhook moves the task to merged, and the plan
completes. It prints a progress view while it runs and a final table (item, task, branch,
PR, checks, cost), and exits 0 only if the plan completed with every item merged and the
round answered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from steward.adapters.api_client import ApiClient, Endpoint
from steward.cli_render import render_plan, table
from steward.local.sample_repo import SAMPLE_REPO
from steward.local.stack import LocalStack

DEMO_SLUG = "demo"
TIMEOUT_SECONDS = 240
REVIEWED_ITEM = 1  # the item whose pull request gets a review requesting a change
REVIEW_ASK = "Please give `subtract` a docstring that says what it returns."


def sample_document() -> str:
    return resources.files("steward").joinpath("data/demo-plan.md").read_text(encoding="utf-8")


def _progress(plan: dict[str, Any]) -> str:
    items = " ".join(f"#{i['ordinal']}:{i['status']}{_order_wait(i)}" for i in plan["items"])
    return f"  plan {plan['status']:<12} {items}"


def _order_wait(item: dict[str, Any]) -> str:
    """` (after #1 (review))` for an item that waits for others, else nothing."""
    waiting = item.get("waiting") or {}
    return (
        f" ({waiting['reason']} {waiting['detail']})" if waiting.get("reason") in ("after", "blocked") else ""
    )


def run_demo(*, state_file: Path, as_json: bool = False, timeout: float = TIMEOUT_SECONDS) -> int:
    def say(text: str) -> None:
        if not as_json:
            print(text, flush=True)

    started = time.monotonic()
    say("starting the local stack (moto server, API, scheduler, heartbeat, reaper, local launcher)...")
    with LocalStack(state_file=state_file, tick_seconds=1, reaper_seconds=2) as stack:
        say(f"  api: {stack.state['api_url']}   aws: {stack.state['aws_endpoint_url']}")
        client = ApiClient(Endpoint(stack.state["api_url"], stack.state["users"]["alice"]))
        try:
            say("\n$ steward loop set --interval 1")
            client.request("PUT", "/v1/loop", {"interval_seconds": 1})
            say(f"$ steward plan publish examples/demo-plan.md --slug {DEMO_SLUG}")
            plan = client.request("PUT", f"/v1/plans/{DEMO_SLUG}", {"markdown": sample_document()})
            say(render_plan(plan))
            say(f"\n$ steward plan confirm {DEMO_SLUG}")
            plan = client.request(
                "POST", f"/v1/plans/{DEMO_SLUG}/confirm", {"content_hash": plan["content_hash"]}
            )
            say("\nwatching the loop (one tick a second):")
            last = ""
            deadline = time.monotonic() + timeout
            reviewer = _Reviewer(stack, client, say)
            # A blocked plan waits for a person (nothing the loop does moves it): stop there.
            while plan["status"] != "completed" and not plan.get("blocked") and time.monotonic() < deadline:
                time.sleep(0.5)
                plan = client.request("GET", f"/v1/plans/{DEMO_SLUG}")
                line = _progress(plan)
                if line != last:
                    say(line)
                    last = line
                reviewer.act(client.paged("/v1/tasks", "tasks", {"plan": DEMO_SLUG}))
            tasks = sorted(
                client.paged("/v1/tasks", "tasks", {"plan": DEMO_SLUG}),
                key=lambda t: (t["ordinal"], t["attempt"], t["round"]),
            )
            rows = [_row(client, plan, task) for task in tasks]
            say(f"\n$ steward plan show {DEMO_SLUG}")
            say(render_plan(plan))
            say("")
            say(table(rows, ("item", "task", "status", "branch", "pr", "checks", "cost")))
        finally:
            client.close()
    if as_json:
        print(json.dumps({"plan": plan, "tasks": tasks}, indent=2))
    answered = any(t["round"] and t["status"] == "answered" for t in tasks)
    ok = answered and plan["status"] == "completed" and all(i["status"] == "merged" for i in plan["items"])
    if ok:
        say(
            "\ndemo: every item became a reviewed, merged pull request (one after a follow-up round "
            "answered its review); the plan is completed"
        )
    else:
        say("\n" + failure_summary(plan, tasks, time.monotonic() - started, timeout, stack_logs(state_file)))
    return 0 if ok else 1


class _Reviewer:
    """The stand-in reviewer on the twin: requests a change on the first item's pull request
    once, merges it after its follow-up round has ended, and merges every other one."""

    def __init__(self, stack: LocalStack, client: ApiClient, say: Callable[[str], None]) -> None:
        self.stack, self.client, self.say = stack, client, say
        self.asked: set[str] = set()
        self.merged: set[str] = set()

    def act(self, tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            if task["round"] or task["status"] != "review" or not task["pr_url"] or task["id"] in self.merged:
                continue
            number = int(str(task["pr_url"]).rstrip("/").rsplit("/", 1)[1])
            if task["ordinal"] == REVIEWED_ITEM and task["id"] not in self.asked:
                self.asked.add(task["id"])
                self.say(f"  reviewer: requesting a change on {SAMPLE_REPO}#{number}: {REVIEW_ASK}")
                self.stack.twin.review(SAMPLE_REPO, number, body=REVIEW_ASK)
                continue
            if task["id"] in self.asked:
                if not self._round_ended(task, tasks):
                    continue  # merged once its round has answered (or failed)
                self.say(f"  steward: {self._answer(task['id'])}")
            self.merged.add(task["id"])
            self.say(f"  reviewer: merging {SAMPLE_REPO}#{number} (item #{task['ordinal']})")
            self.stack.twin.merge(SAMPLE_REPO, number)

    def _answer(self, task_id: str) -> str:
        """How the round answered, timed from the review's delivery (its ask recorded) to the
        round's commit on the pull request (recorded on the task)."""
        events = self.client.request("GET", f"/v1/tasks/{task_id}/events")["events"]
        asked = next((e for e in events if e["type"] == "follow_up_asked"), None)
        answered = next((e for e in events if e["type"] == "follow_up_answered"), None)
        if asked is None or answered is None:
            return "the follow-up round ended without a commit"
        seconds = (
            datetime.fromisoformat(answered["at"]) - datetime.fromisoformat(asked["at"])
        ).total_seconds()
        head = str(answered["data"]["head_sha"])[:12]
        return f"follow-up round answered the review with commit {head}, {seconds:.1f} s after its delivery"

    @staticmethod
    def _round_ended(task: dict[str, Any], tasks: list[dict[str, Any]]) -> bool:
        rounds = [t for t in tasks if t["parent"] == task["id"]]
        return bool(rounds) and all(t["status"] not in ("queued", "running") for t in rounds)


def failure_summary(
    plan: dict[str, Any], tasks: list[dict[str, Any]], elapsed: float, timeout: float, logs: Path
) -> str:
    """What failed and when: the time the demo took, whether it gave up waiting, and each
    item that was not merged with its latest task's status and reason."""
    latest = {task["ordinal"]: task for task in tasks if not task["round"]}  # sorted by (ordinal, attempt)
    failed = [item for item in plan["items"] if item["status"] != "merged"]
    rounds = [t for t in tasks if t["round"]]
    gave_up = (
        f"gave up waiting for the plan ({timeout:.0f} s); "
        if plan["status"] != "completed" and not plan.get("blocked")
        else ""
    )
    lines = [
        f"demo: FAILED after {elapsed:.0f} s: {gave_up}{len(failed)} of {len(plan['items'])} items not merged, "
        f"the plan is {plan['status']}{' and blocked' if plan.get('blocked') else ''} (runtime logs: {logs})"
    ]
    for item in failed:
        task = latest.get(item["ordinal"])
        if task is None:
            waiting = item.get("waiting") or {}
            why = f"{waiting['reason']}: {waiting['detail']}" if waiting else "no task was spawned"
            lines.append(f"  #{item['ordinal']} {item['status']}: {why}")
            continue
        how = task["status"] + (f" ({task['classification']})" if task.get("classification") else "")
        reason = f": {task['reason']}" if task.get("reason") else ""
        lines.append(f"  #{item['ordinal']} {item['status']}: task {task['id']} {how}{reason}")
    reviewed = any(t["ordinal"] == REVIEWED_ITEM and t["pr_url"] and not t["round"] for t in tasks)
    if reviewed and not any(t["status"] == "answered" for t in rounds):
        ended = (
            ", ".join(f"{t['id']} {t['status']}: {t.get('reason') or '-'}" for t in rounds) or "none started"
        )
        lines.append(f"  the review's follow-up round did not answer ({ended})")
    return "\n".join(lines)


def _row(client: ApiClient, plan: dict[str, Any], task: dict[str, Any]) -> tuple[Any, ...]:
    events = client.request("GET", f"/v1/tasks/{task['id']}/events")["events"]
    final = [e["data"] for e in events if e["type"] == "check" and e["data"].get("stage") == "final"]
    checks = f"{sum(1 for c in final if c.get('passed'))}/{len(final)} passed" if final else "-"
    pr = task["pr_url"] or "-"  # the twin serves the page: the link a reviewer would open
    item = f"#{task['ordinal']}" + (f" round {task['round']}" if task["round"] else "")
    return (item, task["id"], task["status"], task["branch"], pr, checks, task["cost_usd"])


def stack_logs(state_file: Path) -> Path:
    return state_file.parent / "runs"
