"""Cold import of each Lambda handler, as a ratio to `import boto3` measured in the same run.

A cold start pays for the handler's imports before the first event; GitHub gives a webhook
delivery 10 s and API Gateway a relay call its integration timeout. Each figure is the
median of fresh interpreters (no bytecode written, so no run warms the next one's cache);
the ratio's aim is at most 1.5 for the relay and the webhook. Also lists which heavy
modules each handler loads at import.

    .venv/bin/python bench/bench_cold_imports.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

HANDLERS = (
    "steward.relay_handler",
    "steward.webhook_handler",
    "steward.runtime_handler",
    "steward.api.handler",
    "steward.scheduler_handler",
    "steward.heartbeat_handler",
    "steward.reaper_handler",
)
HEAVY = ("githubkit", "githubkit_schemas", "httpx", "aws_xray_sdk", "yaml", "steward.cli", "boto3")
RUNS = 5


def cold_seconds(statement: str) -> float:
    runs = []
    for _ in range(RUNS):
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)",
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        runs.append(float(out.stdout))
    return statistics.median(runs)


def heavy_modules(module: str) -> list[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def import_ratio(module: str, boto: float | None = None) -> str:
    """One line: the module's cold import, boto3's, their ratio and the heavy modules loaded."""
    boto = cold_seconds("import boto3") if boto is None else boto
    seconds = cold_seconds(f"import {module}")
    return (
        f"import {module}: {seconds * 1000:.0f} ms; import boto3: {boto * 1000:.0f} ms; "
        f"ratio (aim <= 1.5): {seconds / boto:.2f}; heavy modules loaded: {heavy_modules(module)}"
    )


def main() -> None:
    boto = cold_seconds("import boto3")
    for module in HANDLERS:
        print(import_ratio(module, boto))


if __name__ == "__main__":
    main()
