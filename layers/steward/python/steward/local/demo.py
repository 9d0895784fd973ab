"""`steward demo` / `make demo`: the main job on the embedded local stack.

Today it shows the control plane: start the stack, publish the sample Task Document as
alice, confirm it, and show the plan as the CLI sees it. Later capabilities grow it into the
full loop (spawn, run, publish pull requests, merge).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from steward.adapters.api_client import ApiClient, Endpoint
from steward.cli import render_loop, render_plan
from steward.local.stack import LocalStack

DEMO_SLUG = "demo"


def sample_document() -> str:
    return resources.files("steward").joinpath("data/demo-plan.md").read_text(encoding="utf-8")


def run_demo(*, state_file: Path, as_json: bool = False) -> int:
    def say(text: str) -> None:
        if not as_json:
            print(text, flush=True)

    say("starting the local stack (moto server, API on loopback)...")
    with LocalStack(state_file=state_file) as stack:
        say(f"  api: {stack.state['api_url']}   aws: {stack.state['aws_endpoint_url']}")
        client = ApiClient(Endpoint(stack.state["api_url"], stack.state["users"]["alice"]))
        try:
            say(f"\n$ steward plan publish examples/demo-plan.md --slug {DEMO_SLUG}")
            plan = client.request("PUT", f"/v1/plans/{DEMO_SLUG}", {"markdown": sample_document()})
            say(render_plan(plan))
            say(f"\n$ steward plan confirm {DEMO_SLUG}")
            plan = client.request(
                "POST", f"/v1/plans/{DEMO_SLUG}/confirm", {"content_hash": plan["content_hash"]}
            )
            say(render_plan(plan))
            say("\n$ steward loop show")
            loop = client.request("GET", "/v1/loop")
            say(render_loop(loop))
            result: dict[str, Any] = {"plan": plan, "loop": loop}
        finally:
            client.close()
    if as_json:
        print(json.dumps(result, indent=2))
    ok = plan["status"] == "confirmed" and plan["approved_hash"] == plan["content_hash"]
    say("\ndemo: plan published and confirmed" if ok else "\ndemo: FAILED, the plan was not confirmed")
    return 0 if ok else 1
