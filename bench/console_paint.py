"""The web console on the local stack, printed, not asserted:

1. what the console weighs over the wire (its files and config.json, as served: the local
   stack and API Gateway's HTTP API send them uncompressed);
2. time to first contentful paint and to the task's status shown, for a finished task's
   page in headless Chromium, ROUNDS fresh pages each, as a ratio to the sign-in page (the
   same files, no API call) measured in the same run.

    .venv/bin/python bench/console_paint.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.local_cli import CHROMIUM, CHROMIUM_ARGS, STEWARD, clean_env, local_up

ROUNDS = 15
PAINT = "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null"


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        state_file = Path(root) / "local.json"
        with local_up(
            state_file, "--tick-seconds", "1", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ):
            run(json.loads(state_file.read_text()), state_file, clean_env())


def run(state: dict[str, object], state_file: Path, env: dict[str, str]) -> None:
    console = str(state["console_url"])
    files = ("", "app.js", "style.css", "favicon.svg", "config.json")  # all a first visit fetches
    sizes = {name: len(httpx.get(console + name, timeout=10).content) for name in files}
    total = sum(sizes.values())
    print("console over the wire: " + ", ".join(f"{k or 'index.html'} {v} B" for k, v in sizes.items()))
    print(f"  total {total} B ({total / 1024:.1f} KiB), uncompressed, no third-party request")

    token = dict(state["users"])["alice"]  # type: ignore[call-overload]
    api = httpx.Client(
        base_url=str(state["api_url"]), headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    made = subprocess.run(
        [
            *STEWARD,
            "--state-file",
            str(state_file),
            "local",
            "capability",
            "--owner",
            "alice",
            "--budget-usd",
            "0.01",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    task_id = json.loads(made.stdout)["task_id"]
    api.post(f"/v1/tasks/{task_id}/cancel")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        signin, task_paint, task_status = [], [], []
        for _ in range(ROUNDS):
            page = browser.new_page()
            start = time.perf_counter()
            page.goto(console)
            page.locator("h1", has_text="Sign in").wait_for()
            signin.append((time.perf_counter() - start) * 1000)
            page.close()

            link = subprocess.run(
                [*STEWARD, "--state-file", str(state_file), "local", "login", "alice"],
                capture_output=True,
                text=True,
                env=env,
                check=True,
            ).stdout.splitlines()[0]
            page = browser.new_page()
            page.goto(link)
            page.locator("#who", has_text="alice").wait_for()
            page.goto(f"{console}#/tasks/{task_id}")
            page.locator("#summary h1 .status").wait_for()
            start = time.perf_counter()
            page.reload()  # a fresh load of the task page, signed in (sessionStorage)
            page.locator("#summary h1 .status").wait_for()
            task_status.append((time.perf_counter() - start) * 1000)
            paint = page.evaluate(PAINT)
            if paint is not None:
                task_paint.append(float(paint))
            page.close()
        browser.close()
    base = statistics.median(signin)
    print(f"sign-in page shown (baseline): median {base:.0f} ms over {ROUNDS} fresh pages")
    if task_paint:
        print(f"task page first contentful paint: median {statistics.median(task_paint):.0f} ms")
    shown = statistics.median(task_status)
    print(f"task page status shown: median {shown:.0f} ms, {shown / base:.2f}x the sign-in page")


if __name__ == "__main__":
    main()
