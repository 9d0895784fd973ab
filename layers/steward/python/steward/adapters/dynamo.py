"""DynamoDB plumbing shared by the stores: table handles, error mapping, cursors.

Stores speak the high-level resource API, whose client also serializes TransactWriteItems
arguments; the resource comes from `steward.adapters.aws`. Nothing here imports boto3 at
load (its `dynamodb` helpers load the whole of boto3): the deserializer and the key
condition builder (`key`) load it on first use, with the first client.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from steward.adapters import aws
from steward.domain.errors import BadRequest
from steward.tables import ALL_TABLES, AttrType, TableSpec

if TYPE_CHECKING:
    from boto3.dynamodb.conditions import Key
    from boto3.dynamodb.types import TypeDeserializer
    from mypy_boto3_dynamodb import DynamoDBClient, DynamoDBServiceResource
    from mypy_boto3_dynamodb.service_resource import Table


@cache
def _deserializer() -> TypeDeserializer:
    from boto3.dynamodb.types import TypeDeserializer  # noqa: PLC0415 - see the module docstring

    return TypeDeserializer()


def key(name: str) -> Key:
    """boto3's key condition builder for the attribute `name` (`key("task_id").eq(...)`)."""
    from boto3.dynamodb.conditions import Key  # noqa: PLC0415 - see the module docstring

    return Key(name)


class Tables:
    """Handles to the Steward tables under one name prefix."""

    def __init__(self, resource: DynamoDBServiceResource, prefix: str) -> None:
        self.resource = resource
        self.prefix = prefix
        self.client: DynamoDBClient = resource.meta.client

    @classmethod
    def connect(cls, prefix: str, **client_kwargs: Any) -> Tables:
        resource = aws.resource("dynamodb", **client_kwargs)
        return cls(resource, prefix)

    def table(self, spec: TableSpec) -> Table:
        return self.resource.Table(spec.physical_name(self.prefix))

    def table_by_name(self, logical_name: str) -> Table:
        spec = next(s for s in ALL_TABLES if s.logical_name == logical_name)
        return self.table(spec)

    def name(self, spec: TableSpec) -> str:
        return spec.physical_name(self.prefix)

    def create_all(self, specs: tuple[TableSpec, ...] = ALL_TABLES) -> None:
        """Create missing tables (local stack and tests; the CDK app creates them in AWS)."""
        existing = set(self.client.list_tables()["TableNames"])
        for spec in specs:
            if spec.physical_name(self.prefix) in existing:
                continue
            self.client.create_table(**spec.create_table_kwargs(self.prefix))
            if spec.ttl_attribute:
                self.client.update_time_to_live(
                    TableName=spec.physical_name(self.prefix),
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
                )


class IncludedWriteRefused(Exception):
    """A write another store included in a transaction failed its own condition (for
    example a webhook delivery's mark that a concurrent redelivery committed first); the
    transaction wrote nothing."""


def refused_included(error: ClientError, first_included: int) -> bool:
    """Whether a cancelled transaction failed on one of the parts from `first_included` on."""
    reasons = cancellation_reasons(error)
    return any(r.get("Code") == "ConditionalCheckFailed" for r in reasons[first_included:])


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def is_conditional_failure(error: ClientError) -> bool:
    return error_code(error) == "ConditionalCheckFailedException"


def old_item(error: ClientError) -> dict[str, Any] | None:
    """The item a failed condition saw (ReturnValuesOnConditionCheckFailure=ALL_OLD)."""
    raw: Any = error.response.get("Item")
    return deserialize(raw) if raw else None


def cancellation_reasons(error: ClientError) -> list[dict[str, Any]]:
    reasons = error.response.get("CancellationReasons") or []
    return [dict(r) for r in reasons]


def deserialize(raw: Mapping[str, Any]) -> dict[str, Any]:
    deserializer = _deserializer()
    return {k: deserializer.deserialize(v) for k, v in raw.items()}


def plain(value: Any, *, floats: bool = False) -> Any:
    """DynamoDB numbers come back as Decimal; integral ones become int, and with `floats`
    (data shown to JSON clients, never money) fractional ones become float."""
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return int(value)
        return float(value) if floats else value
    if isinstance(value, dict):
        return {k: plain(v, floats=floats) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v, floats=floats) for v in value]
    return value


def storable(value: Any) -> Any:
    """A JSON-like value as DynamoDB takes it: it has no float type, so floats become Decimal."""
    if isinstance(value, float):
        return Decimal(str(value))
    if isinstance(value, Mapping):
        return {k: storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


DYNAMODB_ITEM_LIMIT = 400 * 1024  # bytes: DynamoDB refuses a larger item with ValidationException


def item_size(item: Mapping[str, Any]) -> int:
    """An upper estimate of the size DynamoDB counts for `item` (as the resource API takes it),
    following its published rules: names and strings in UTF-8 bytes, a number one byte per
    two significant digits plus one, a boolean or null one byte, a map or list 3 bytes plus
    one per element plus its elements (map keys count as names). Pure: for checking an item
    before writing it."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        size = 1
    elif isinstance(value, str):
        size = len(value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, bytes | bytearray):
        size = len(value)
    elif isinstance(value, int | float | Decimal):
        size = (len(Decimal(str(value)).normalize().as_tuple().digits) + 1) // 2 + 1
    elif isinstance(value, Mapping):
        size = 3 + sum(len(str(k).encode()) + _value_size(v) + 1 for k, v in value.items())
    elif isinstance(value, list | tuple):
        size = 3 + sum(_value_size(v) + 1 for v in value)
    elif isinstance(value, set | frozenset):
        size = sum(_value_size(v) for v in value)
    else:
        raise TypeError(f"no DynamoDB type for {type(value).__name__}")
    return size


def encode_cursor(last_key: Mapping[str, Any] | None) -> str | None:
    if not last_key:
        return None
    payload = json.dumps(plain(dict(last_key)), separators=(",", ":"), sort_keys=True)
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_cursor(
    cursor: str | None, key: Mapping[str, AttrType], *, must_match: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Decode a list cursor: exactly the page key `key` names (`TableSpec.page_key`), each
    value of its type, and of the caller's own partition (no id leaks). Anything else is
    400 naming `cursor`: DynamoDB (or boto3's serializer, for a float) would refuse it as a
    500, and an extra attribute would be sent on as part of the key."""
    if not cursor:
        return None
    refused = BadRequest("cursor is not one this API returned", field="cursor")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, RecursionError) as exc:
        raise refused from exc
    if not isinstance(decoded, dict) or decoded.keys() != key.keys():
        raise refused
    for name, kind in key.items():
        value = decoded[name]
        # DynamoDB refuses an empty string in a key; "N" keys are integers here (no bool).
        valid = (
            isinstance(value, str) and value != ""
            if kind == "S"
            else isinstance(value, int) and not isinstance(value, bool)
        )
        if not valid:
            raise refused
    if any(decoded[k] != v for k, v in must_match.items()):
        raise refused
    return decoded


@contextmanager
def count_client_requests(client: Any, service: str) -> Iterator[Counter[str]]:
    """Count the requests a boto3 client sends, by operation (a botocore event hook on
    `before-send`, so a retried request counts again). For benchmarks and tests."""
    counts: Counter[str] = Counter()

    def on_send(request: Any, **_: Any) -> None:
        target = request.headers.get("X-Amz-Target", b"")
        name = target.decode() if isinstance(target, bytes) else str(target)
        counts[name.rsplit(".", 1)[-1]] += 1

    events = client.meta.events
    events.register(f"before-send.{service}", on_send)
    try:
        yield counts
    finally:
        events.unregister(f"before-send.{service}", on_send)


def count_requests(tables: Tables) -> AbstractContextManager[Counter[str]]:
    """Count the DynamoDB requests sent through `tables`, by operation."""
    return count_client_requests(tables.client, "dynamodb")
