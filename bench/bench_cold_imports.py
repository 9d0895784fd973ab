"""Cold import of each Lambda handler, as a ratio to `import boto3` measured in the same run.

A cold start pays for the handler's imports before the first event; GitHub gives a webhook
delivery 10 s and API Gateway a relay call its integration timeout. Each figure is the
median of fresh interpreters, the handler's runs alternating with boto3's so that both see
the same machine; the ratio's aim is at most 1.0 for the relay and 1.5 for every other
handler. Also lists which heavy modules each handler loads at import
(tests/unit/test_cold_imports.py holds which it may).

What is timed is the interpreter's CPU time for the import, not the wall clock: an import
is CPU work, and on a shared machine the wall clock also counts the time other processes
hold the CPU (the same code measured 1.2x to 2.0x boto3 by wall clock in one minute). Both
sides load from bytecode, as installed packages do: one untimed run of each statement
first writes whatever bytecode is missing (the development tree often has none, as
`PYTHONDONTWRITEBYTECODE` is common), then the timed runs write none, so none warms the
next one's cache.

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
HEAVY = (
    "githubkit",
    "githubkit_schemas",
    "httpx",
    "aws_xray_sdk",
    "yaml",
    "steward.cli",
    "boto3",
    "pydantic.main",
    "steward.domain.documents",
)
AIMS = {"steward.relay_handler": 1.0}  # every other handler: DEFAULT_AIM
DEFAULT_AIM = 1.5
RUNS = 7


def _one_run(statement: str, *, write_bytecode: bool = False) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import time; t = time.process_time(); {statement}; print(time.process_time() - t)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(out.stdout)


def cold_seconds(*statements: str) -> list[float]:
    """The median CPU seconds of each statement, their runs alternating."""
    for statement in statements:
        _one_run(statement, write_bytecode=True)  # untimed: both sides load from bytecode
    runs: list[list[float]] = [[] for _ in statements]
    for _ in range(RUNS):
        for times, statement in zip(runs, statements, strict=True):
            times.append(_one_run(statement))
    return [statistics.median(times) for times in runs]


def heavy_modules(module: str) -> list[str]:
    code = f"import sys, json, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def import_ratio(module: str) -> str:
    """One line: the module's cold import, boto3's, their ratio and the heavy modules loaded."""
    boto, seconds = cold_seconds("import boto3", f"import {module}")
    return (
        f"import {module}: {seconds * 1000:.0f} ms CPU; import boto3: {boto * 1000:.0f} ms CPU; "
        f"ratio (aim <= {AIMS.get(module, DEFAULT_AIM)}): {seconds / boto:.2f}; "
        f"heavy modules loaded: {heavy_modules(module)}"
    )


def main() -> None:
    for module in HANDLERS:
        print(import_ratio(module))


if __name__ == "__main__":
    main()
