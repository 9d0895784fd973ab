"""moto's short cuts (`steward.local.moto_speed`) change what moto answers in nothing but time:
the same response for every attribute value, the same outcome for every update expression,
good or bad, after the parse is kept."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.core.responses import get_service_model
from moto.core.serialize import JSONSerializer, XFormedAttributePicker
from steward.local.moto_speed import install_moto_shortcuts

_DYNAMODB = get_service_model("dynamodb")

_text = st.text(max_size=8)
_scalar = st.one_of(
    st.builds(lambda s: {"S": s}, _text),
    st.builds(lambda n: {"N": str(n)}, st.integers(-(10**6), 10**6)),
    st.builds(lambda b: {"BOOL": b}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(lambda b: {"B": b}, st.binary(max_size=8)),
    st.builds(lambda ss: {"SS": ss}, st.lists(_text, min_size=1, max_size=3, unique=True)),
    st.builds(
        lambda ns: {"NS": [str(n) for n in ns]},
        st.lists(st.integers(0, 99), min_size=1, max_size=3, unique=True),
    ),
    st.builds(
        lambda bs: {"BS": bs},
        st.lists(st.binary(min_size=1, max_size=4), min_size=1, max_size=2, unique=True),
    ),
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.builds(lambda m: {"M": m}, st.dictionaries(_text, st.one_of(inner, st.none()), max_size=3)),
        st.builds(lambda items: {"L": items}, st.lists(inner, max_size=3)),
    ),
    max_leaves=12,
)
_item = st.dictionaries(st.text(min_size=1, max_size=6), _value, max_size=5)


def _render(result: dict[str, Any], operation: str) -> Any:
    serializer = JSONSerializer(
        operation_model=_DYNAMODB.operation_model(operation),
        pretty_print=False,
        value_picker=XFormedAttributePicker(),
    )
    return json.loads(serializer.serialize(result)["body"])


@settings(max_examples=300)
@given(item=_item)
def test_every_attribute_value_is_rendered_as_moto_renders_it(item: dict[str, Any]) -> None:
    install_moto_shortcuts()
    patched = JSONSerializer._serialize_type_structure
    short_cut = {op: _render(r, op) for op, r in _results(item).items()}
    try:
        JSONSerializer._serialize_type_structure = patched.__wrapped__  # type: ignore[attr-defined,method-assign]
        generic = {op: _render(r, op) for op, r in _results(item).items()}
    finally:
        JSONSerializer._serialize_type_structure = patched  # type: ignore[method-assign]
    assert short_cut == generic


def _results(item: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        "GetItem": {"Item": item},
        "Query": {"Items": [item, item], "Count": 2, "ScannedCount": 2},
        "UpdateItem": {"Attributes": item},
    }


def test_installing_twice_wraps_once() -> None:
    install_moto_shortcuts()
    first = JSONSerializer._serialize_type_structure
    install_moto_shortcuts()
    assert JSONSerializer._serialize_type_structure is first
    assert not hasattr(first.__wrapped__, "__wrapped__")  # type: ignore[attr-defined]


@pytest.fixture
def table() -> Any:
    install_moto_shortcuts()
    with mock_aws():
        dynamodb = boto3.resource("dynamodb", region_name="us-east-1")
        yield dynamodb.create_table(
            TableName="speed",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )


def test_every_kind_of_value_round_trips_through_moto(table: Any) -> None:
    item = {
        "pk": "a",
        "s": "text",
        "empty": "",
        "n": Decimal("2.50"),
        "b": b"\x00\xffbytes",
        "flag": False,
        "nothing": None,
        "ss": {"x", "y"},
        "ns": {Decimal(1), Decimal(2)},
        "bs": {b"1", b"2"},
        "m": {"inner": {"deeper": [Decimal(1), "two", None, {"b": b"3"}]}},
        "l": [],
    }
    table.put_item(Item=item)
    assert table.get_item(Key={"pk": "a"})["Item"] == item
    assert table.scan()["Items"] == [item]


def test_a_kept_parse_applies_each_request_its_own_values(table: Any) -> None:
    table.put_item(Item={"pk": "a", "n": 0})
    for value in (1, 2, 3):
        table.update_item(
            Key={"pk": "a"},
            UpdateExpression="SET n = n + :v, #t = :t",
            ExpressionAttributeNames={"#t": "tag"},
            ExpressionAttributeValues={":v": value, ":t": f"t{value}"},
        )
    assert table.get_item(Key={"pk": "a"})["Item"] == {"pk": "a", "n": 6, "tag": "t3"}


def test_an_expression_that_does_not_parse_is_refused_every_time(table: Any) -> None:
    for _ in range(2):
        with pytest.raises(ClientError) as refused:
            table.update_item(
                Key={"pk": "a"}, UpdateExpression="SET = :v", ExpressionAttributeValues={":v": 1}
            )
        assert refused.value.response["Error"]["Code"] == "ValidationException"
