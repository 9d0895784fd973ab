"""The local stack as a person runs it from outside: the `steward` entry point in its own
process with a clean environment, and Debian's Chromium as the console's browser (for the
e2e tests and the console bench)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STEWARD = [sys.executable, "-m", "steward.cli"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# What the machine's closed network needs (no background connections) and a root user needs.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def clean_env() -> dict[str, str]:
    """This process's environment without its Steward and AWS settings: what a person's shell has."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "AWS_"))}


@contextmanager
def local_up(
    state_file: Path, *args: str, settings: dict[str, str] | None = None, **popen: Any
) -> Iterator[subprocess.Popen[str]]:
    """`steward local up` (with these STEWARD_* `settings`) until its state file exists;
    terminated (then killed) afterwards."""
    process = subprocess.Popen(
        [*STEWARD, "--state-file", str(state_file), "local", "up", *args],
        text=True,
        env={**clean_env(), **(settings or {})},
        **popen,
    )
    try:
        deadline = time.monotonic() + 60
        while not state_file.exists():
            if process.poll() is not None:
                raise RuntimeError(
                    f"the local stack exited: {process.stdout.read() if process.stdout else ''}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError("the local stack did not come up within 60 s")
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
