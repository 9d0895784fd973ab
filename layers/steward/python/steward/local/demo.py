"""`steward demo` / `make demo`: the main job on the embedded local stack.

Starts the stack, publishes the sample Task Document as alice, confirms it, and watches the
reconciliation loop spawn one task per item, launch a local runtime for each, and finish
the plan. Until the runner capability lands, each runtime claims its task and ends it
`failed` / `final` / "runner not built", so the plan completes with failed items; the demo
exits 0 when the loop carried the plan to `completed`.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

from steward.adapters.api_client import ApiClient, Endpoint
from steward.cli import render_plan, render_tasks
from steward.local.stack import LocalStack

DEMO_SLUG = "demo"
TIMEOUT_SECONDS = 120


def sample_document() -> str:
    return resources.files("steward").joinpath("data/demo-plan.md").read_text(encoding="utf-8")


def _progress(plan: dict[str, Any]) -> str:
    items = " ".join(f"#{i['ordinal']}:{i['status']}" for i in plan["items"])
    return f"  plan {plan['status']:<12} {items}"


def run_demo(*, state_file: Path, as_json: bool = False, timeout: float = TIMEOUT_SECONDS) -> int:
    def say(text: str) -> None:
        if not as_json:
            print(text, flush=True)

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
            while plan["status"] != "completed" and time.monotonic() < deadline:
                time.sleep(0.5)
                plan = client.request("GET", f"/v1/plans/{DEMO_SLUG}")
                line = _progress(plan)
                if line != last:
                    say(line)
                    last = line
            tasks = client.paged("/v1/tasks", "tasks", {"plan": DEMO_SLUG})
            say(f"\n$ steward plan show {DEMO_SLUG}")
            say(render_plan(plan))
            say(f"\n$ steward tasks --plan {DEMO_SLUG}")
            say(render_tasks(tasks))
            for task in tasks:
                say(f"  {task['id']}: {task['status']} ({task['classification']}): {task['reason']}")
        finally:
            client.close()
    if as_json:
        print(json.dumps({"plan": plan, "tasks": tasks}, indent=2))
    ok = plan["status"] == "completed"
    say(
        "\ndemo: the loop spawned, launched and finished every item; the plan is completed"
        if ok
        else f"\ndemo: FAILED, the plan is {plan['status']} after {timeout:.0f} s"
    )
    return 0 if ok else 1
