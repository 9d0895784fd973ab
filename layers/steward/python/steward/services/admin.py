"""Operator actions that talk to the deployment's tables directly (no user API exists for
them): linking a GitHub App installation to a user."""

from __future__ import annotations

from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.domain.errors import NotFound
from steward.domain.installations import Installation
from steward.domain.models import utcnow


class UnknownInstallation(NotFound):
    code = "unknown_installation"


def link_installation(tables: Tables, installation_id: int, sub: str, *, force: bool) -> Installation:
    """Make `sub` the owner of an installation the GitHub App has: one the installation sync
    recorded (the `installation` webhooks, or the local stack's seed) and that was not
    uninstalled since. Any other id is refused, `force` or not: `force` only moves an
    installation from another user. (The record is read, then linked, in two requests:
    records are never deleted, an uninstallation only latches `deleted`, so the most a
    webhook between the two can do is uninstall it, leaving a link to an installation that
    is suspended and holds no repository: it grants nothing.)"""
    store = InstallationStore(tables)
    known, sync, _ = store.get_synced(installation_id)
    if known is None:
        raise UnknownInstallation(
            f"installation {installation_id} is not one the GitHub App has: Steward has no record "
            "of it (an installation is recorded when GitHub sends its `installation` webhook; "
            "check the id on the App's settings page)",
            field="installation_id",
        )
    if sync.get("deleted"):
        raise UnknownInstallation(
            f"installation {installation_id} was uninstalled from GitHub: it cannot be linked",
            field="installation_id",
        )
    return store.link(installation_id, sub, now=utcnow(), force=force)
