"""GitHub App installations for tests, recorded and linked as webhooks and an operator would."""

from __future__ import annotations

import zlib

from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.domain.installations import Installation
from steward.domain.models import utcnow


def link_installation(
    tables: Tables,
    owner: str,
    *repos: str,
    installation_id: int | None = None,
    suspended: bool = False,
) -> Installation:
    """An installation holding `repos`, linked to `owner` (`steward admin link-installation`);
    its id is derived from the owner and the repositories unless given."""
    if installation_id is None:
        installation_id = 1_000_000 + zlib.crc32(" ".join((owner, *repos)).encode()) % 1_000_000
    store = InstallationStore(tables)
    account = repos[0].split("/")[0] if repos else owner
    installation = Installation(
        installation_id=installation_id, account=account, repositories=repos, suspended=suspended
    )
    store.put(installation, now=utcnow())
    return store.link(installation_id, owner, now=utcnow(), force=True)
