"""An in-process local stack for tests that run whole runs: the runner's settings the test
needs in the environment while it runs (the stack's handlers and runtimes read them there),
the environment put back afterwards."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from steward.local.stack import LocalStack


@contextmanager
def local_stack(
    root: Path, plays: Sequence[Mapping[str, Any]], runner: Mapping[str, str]
) -> Iterator[LocalStack]:
    """The stack with the scripted model playing `plays`, runtimes heartbeating every second,
    checks bounded to a minute, and the `runner` settings the test adds."""
    playbook = root / "playbook.json"
    playbook.write_text(json.dumps({"plays": list(plays)}))
    environment = {
        "STEWARD_SCRIPTED_PLAYBOOK": str(playbook),
        "STEWARD_RUNNER_HEARTBEAT_SECONDS": "1",
        "STEWARD_CHECK_WALL_SECONDS": "60",
        **runner,
    }
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
