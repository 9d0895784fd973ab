"""Operator actions that talk to the deployment's tables directly (no user API exists for
them): linking a GitHub App installation to a user."""

from __future__ import annotations

from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.domain.installations import Installation
from steward.domain.models import utcnow


def link_installation(tables: Tables, installation_id: int, sub: str, *, force: bool) -> Installation:
    return InstallationStore(tables).link(installation_id, sub, now=utcnow(), force=force)
