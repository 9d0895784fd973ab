"""Operator actions that talk to the deployment's tables directly (no user API exists for
them): linking a GitHub App installation to a user."""

from __future__ import annotations

import json
import os
from pathlib import Path

from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.domain.installations import Installation
from steward.domain.models import utcnow


def operator_tables(state_file: Path) -> Tables:
    """The deployment's tables: AWS credentials and STEWARD_TABLE_PREFIX from the
    environment, or the local stack's endpoint when its state file exists."""
    prefix = os.environ.get("STEWARD_TABLE_PREFIX")
    kwargs: dict[str, str] = {}
    if "AWS_ENDPOINT_URL" not in os.environ and state_file.exists():
        state = json.loads(state_file.read_text())
        kwargs = {"endpoint_url": state["aws_endpoint_url"], "region_name": state["region"]}
        kwargs |= {"aws_access_key_id": "local", "aws_secret_access_key": "local"}
        prefix = prefix or state["table_prefix"]
    return Tables.connect(prefix or "steward-", **kwargs)


def link_installation(installation_id: int, sub: str, *, force: bool, state_file: Path) -> Installation:
    store = InstallationStore(operator_tables(state_file))
    return store.link(installation_id, sub, now=utcnow(), force=force)
