"""The per-task artifacts (docs/concepts/runner.md): their fixed names, what each holds, the bound
on their size and the S3 key each is stored under (`artifacts/{task_id}/{name}`).

The names are a closed list: an artifact route (the client's download, the runtime's upload)
answers only for these, so no name can reach another key.
"""

from __future__ import annotations

SCREEN_NAME = "screen.txt"
_JSON = "application/json"
_TEXT = "text/plain; charset=utf-8"
# Everything a runtime may upload, with the content type it is stored (and served) with.
RUNTIME_ARTIFACTS: dict[str, str] = {
    "bootstrap.json": _JSON,
    "harness.json": _JSON,
    "diff.patch": _TEXT,
    "git-status.txt": _TEXT,
    "publish.json": _JSON,
    SCREEN_NAME: _TEXT,
}
# What a client may read: every artifact a runtime writes, the screen tail included.
ARTIFACT_NAMES: tuple[str, ...] = tuple(RUNTIME_ARTIFACTS)
# The runner bounds what it writes far below this (diff.patch at 2 MiB, the screen tail at
# 64 KiB); the bound is for an upload that is not the runner's.
MAX_ARTIFACT_BYTES = 16 * 1024 * 1024


def artifact_key(task_id: str, name: str) -> str:
    return f"artifacts/{task_id}/{name}"
