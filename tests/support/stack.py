"""An in-process local stack for tests that run whole runs: the runner's settings the test
needs in the environment while it runs (the stack's handlers and runtimes read them there),
the environment put back afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from steward.local.stack import LocalStack


@contextmanager
def local_stack(root: Path, environment: Mapping[str, str]) -> Iterator[LocalStack]:
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    try:
        with LocalStack(state_file=root / "local.json", tick_seconds=1, reaper_seconds=2) as stack:
            yield stack
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
