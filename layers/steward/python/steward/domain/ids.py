"""Deterministic identities (docs/concepts/lifecycle.md).

Every id is a hash of what identifies the thing, so a retried write finds the same id and a
conditional put can decide whether it already happened.
"""

from __future__ import annotations

import hashlib
import re

from steward.domain.errors import BadRequest

SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
TASK_ID_PATTERN = re.compile(r"^t[0-9a-f]{24}$")
BRANCH_PREFIX = "steward/"


def _digest(*parts: str) -> str:
    # NUL cannot occur in any part (slugs, subs and hashes are validated), so joining is unambiguous.
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def validate_slug(slug: str) -> str:
    if not SLUG_PATTERN.fullmatch(slug):
        raise BadRequest(
            f"slug must match [a-z0-9][a-z0-9-]{{0,62}}, got {slug[:80]!r}",
            field="slug",
        )
    return slug


LIVE_SHARDS = 16


def live_shard(user: str) -> str:
    """Partition of the sparse liveness indexes; spreads users so no index key runs hot."""
    return f"s{int(_digest('shard', user)[:8], 16) % LIVE_SHARDS:02d}"


def plan_id(user: str, slug: str) -> str:
    return "p" + _digest("plan", user, slug)[:24]


def item_key(plan: str, text_hash: str, occurrence: int) -> str:
    """Key of an item first seen with this text; `occurrence` separates identical texts."""
    return "i" + _digest("item", plan, text_hash, str(occurrence))[:16]


def task_id(plan: str, key: str, revision: int, attempt: int) -> str:
    return "t" + _digest("task", plan, key, str(revision), str(attempt))[:24]


def round_task_id(parent: str, round_number: int, attempt: int = 1) -> str:
    """Attempt `attempt` of follow-up round `round_number` of the task `parent` (a replayed
    spawn builds the same id)."""
    extra = () if attempt == 1 else (str(attempt),)
    return "t" + _digest("round", parent, str(round_number), *extra)[:24]


def branch_name(task: str) -> str:
    """The branch a task owns; webhooks correlate pull requests by this exact suffix."""
    return BRANCH_PREFIX + task[1:]


def task_id_from_branch(branch: str) -> str | None:
    """The task id a canonical Steward branch belongs to, or None (never guessed)."""
    if not branch.startswith(BRANCH_PREFIX):
        return None
    candidate = "t" + branch[len(BRANCH_PREFIX) :]
    return candidate if TASK_ID_PATTERN.fullmatch(candidate) else None
