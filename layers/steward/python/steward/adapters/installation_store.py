"""Installations table adapter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import (
    IncludedWriteRefused,
    Tables,
    error_code,
    is_conditional_failure,
    key,
    old_item,
    plain,
    refused_included,
)
from steward.domain.errors import Conflict
from steward.domain.installations import Installation
from steward.domain.models import iso
from steward.tables import INSTALLATIONS


def _to_installation(item: dict[str, Any]) -> Installation:
    data = plain(item)
    data["needs_refresh"] = bool((data.get("github_sync") or {}).get("needs_refresh"))
    return Installation(**{k: data[k] for k in Installation.model_fields if k in data})


class InstallationStore:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._table = tables.table(INSTALLATIONS)

    def get(self, installation_id: int) -> Installation | None:
        found = self._table.get_item(Key={"installation_id": installation_id}, ConsistentRead=True)
        return _to_installation(found["Item"]) if "Item" in found else None

    def for_owner(self, owner_sub: str) -> list[Installation]:
        page = self._table.query(IndexName="by_owner", KeyConditionExpression=key("owner_sub").eq(owner_sub))
        return [_to_installation(i) for i in page["Items"]]

    def holding(self, owner_sub: str, repo: str) -> list[Installation]:
        """The owner's installations that list `repo` (case-insensitively, as GitHub compares
        names), suspended or not: every page of the by_owner index (a Query, eventually
        consistent), in installation id order."""
        wanted = repo.lower()
        found: list[Installation] = []
        query: dict[str, Any] = {
            "IndexName": "by_owner",
            "KeyConditionExpression": key("owner_sub").eq(owner_sub),
        }
        while True:
            page = self._table.query(**query)
            for item in page["Items"]:
                installation = _to_installation(item)
                if wanted in {r.lower() for r in installation.repositories}:
                    found.append(installation)
            if "LastEvaluatedKey" not in page:
                return found
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def link(
        self, installation_id: int, owner_sub: str, *, now: datetime, force: bool = False
    ) -> Installation:
        """Make `owner_sub` the owner. Refuses to take an installation another user owns
        unless `force` (an operator's explicit decision)."""
        condition: dict[str, Any] = (
            {} if force else {"ConditionExpression": "attribute_not_exists(owner_sub) OR owner_sub = :sub"}
        )
        try:
            result = self._table.update_item(
                Key={"installation_id": installation_id},
                UpdateExpression="SET owner_sub = :sub, linked_at = :now",
                ExpressionAttributeValues={":sub": owner_sub, ":now": iso(now)},
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **condition,
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                owner = (old_item(exc) or {}).get("owner_sub")
                raise Conflict(
                    f"installation {installation_id} is linked to another user ({owner}); "
                    "pass --force to move it",
                    field="installation_id",
                ) from exc
            raise
        return _to_installation(result["Attributes"])

    def put(self, installation: Installation, *, now: datetime) -> None:
        """Record what GitHub says about an installation, keeping its owner link."""
        self._table.update_item(
            Key={"installation_id": installation.installation_id},
            UpdateExpression="SET account = :a, repositories = :r, suspended = :s, updated_at = :now",
            ExpressionAttributeValues={
                ":a": installation.account,
                ":r": list(installation.repositories),
                ":s": installation.suspended,
                ":now": iso(now),
            },
        )

    # ---- webhook sync (steward.services.webhooks merges GitHub's events order-independently)
    def get_synced(self, installation_id: int) -> tuple[Installation | None, dict[str, Any], int]:
        """The installation, the state its webhooks were merged into (`github_sync`, a plain
        map; empty before the first webhook) and the `sync_version` guarding the next
        `put_synced`."""
        found = self._table.get_item(Key={"installation_id": installation_id}, ConsistentRead=True)
        if "Item" not in found:
            return None, {}, 0
        item = plain(dict(found["Item"]))
        return _to_installation(item), dict(item.get("github_sync") or {}), int(item.get("sync_version", 0))

    def put_synced(
        self,
        installation: Installation,
        *,
        sync: Mapping[str, Any],
        version: int,
        now: datetime,
        include: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Store what the merged webhooks say, keeping the owner link, on the condition that
        no other sync wrote since `version` was read; False when one did (read again). The
        `include`d parts of other stores (a delivery's mark) commit with it or not at all;
        one whose own condition fails raises IncludedWriteRefused."""
        condition = "attribute_not_exists(sync_version)" if version == 0 else "sync_version = :v"
        values: dict[str, Any] = {
            ":a": installation.account,
            ":r": list(installation.repositories),
            ":s": installation.suspended,
            ":sync": dict(sync),
            ":next": version + 1,
            ":now": iso(now),
        }
        if version:
            values[":v"] = version
        update: dict[str, Any] = {
            "Key": {"installation_id": installation.installation_id},
            "UpdateExpression": "SET account = :a, repositories = :r, suspended = :s, github_sync = :sync, "
            "sync_version = :next, updated_at = :now",
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
        try:
            if not include:
                self._table.update_item(**update)
                return True
            parts: list[Any] = [{"Update": {"TableName": self._table.name, **update}}, *include]
            self._tables.client.transact_write_items(TransactItems=parts)
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            if error_code(exc) != "TransactionCanceledException":
                raise
            if refused_included(exc, 1):
                raise IncludedWriteRefused from None
            return False
        return True
