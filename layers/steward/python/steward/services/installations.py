"""Keeping the installations table true: merge one change (a webhook's, or a read of
GitHub's API) into an installation's stored merge state under its optimistic version."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from steward.adapters.installation_store import InstallationStore
from steward.domain.errors import Conflict
from steward.domain.installations import Installation
from steward.domain.webhooks import InstallationChange, merge, sync_from_map, sync_to_map

logger = logging.getLogger(__name__)

SYNC_ATTEMPTS = 8


def sync_installation(
    installations: InstallationStore,
    change: InstallationChange,
    *,
    now: datetime,
    include: Sequence[Mapping[str, Any]] = (),
) -> Literal["applied", "unchanged"]:
    """Merge `change` and store the installation it leaves ("applied" when what Steward
    acts on changed), committing the `include`d parts with it. A state that merges nothing
    new writes nothing (and so commits none of the included parts)."""
    for _ in range(SYNC_ATTEMPTS):
        stored, raw, version = installations.get_synced(change.installation_id)
        state = sync_from_map(raw, stored)
        merged = merge(state, change)
        owner = stored.owner_sub if stored else None
        view = merged.view(change.installation_id, owner)
        visible = stored is None or not _same(view, stored)
        if raw and merged == state and not visible:
            return "unchanged"
        if installations.put_synced(
            view, sync=sync_to_map(merged), version=version, now=now, include=include
        ):
            if merged.needs_refresh and merged.disputes() != state.disputes():
                logger.warning(
                    "installation deliveries stamped alike disagree (%s): kept %s until it is re-read from GitHub",
                    ", ".join(merged.disputes()),
                    "suspended" if view.suspended else "not suspended",
                    extra={"installation_id": change.installation_id},
                )
            # the merge state may have advanced without the visible installation changing
            return "applied" if visible else "unchanged"
    raise Conflict(f"installation {change.installation_id} kept changing; retry")


def _same(a: Installation, b: Installation) -> bool:
    return (a.account, a.repositories, a.suspended) == (b.account, tuple(b.repositories), b.suspended)
