"""moto's short cuts (`steward.local.moto_speed`) change what moto answers in nothing but time:
the same response for every attribute value, the same outcome for every update expression,
good or bad, after the parse is kept."""

from __future__ import annotations

import copy
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
from moto.dynamodb.parsing.ast_nodes import Node as _Node
from moto.dynamodb.parsing.expressions import UpdateExpressionParser
from steward.local.moto_speed import copy_tree, install_moto_shortcuts

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


@pytest.fixture
def tables() -> Any:
    """A table keyed by hash alone and one by hash and range, each holding two items."""
    install_moto_shortcuts()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        for name, keys in (("flat", ["pk"]), ("ranged", ["pk", "sk"])):
            client.create_table(
                TableName=name,
                KeySchema=[
                    {"AttributeName": k, "KeyType": t} for k, t in zip(keys, ("HASH", "RANGE"), strict=False)
                ],
                AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
                BillingMode="PAY_PER_REQUEST",
            )
            for n in ("a", "b"):
                item = {"pk": {"S": n}, "n": {"N": "1"}, "m": {"M": {"x": {"L": [{"S": n}]}}}}
                client.put_item(TableName=name, Item=item | ({"sk": {"S": "1"}} if name == "ranged" else {}))
        yield client


def _contents(client: Any) -> dict[str, Any]:
    return {name: sorted(client.scan(TableName=name)["Items"], key=json.dumps) for name in ("flat", "ranged")}


def _writes(fail_with: str) -> list[dict[str, Any]]:
    """A Put of a new item and of an existing one, an Update and a Delete on both tables,
    then the action that cancels the transaction."""
    ranged = {"sk": {"S": "1"}}
    actions: list[dict[str, Any]] = [
        {"Put": {"TableName": "flat", "Item": {"pk": {"S": "new"}, "n": {"N": "9"}}}},
        {"Put": {"TableName": "ranged", "Item": {"pk": {"S": "a"}, **ranged, "n": {"N": "9"}}}},
        {"Put": {"TableName": "ranged", "Item": {"pk": {"S": "a"}, "sk": {"S": "2"}}}},
        {
            "Update": {
                "TableName": "flat",
                "Key": {"pk": {"S": "a"}},
                "UpdateExpression": "SET n = n + :one, m.x[0] = :v REMOVE gone",
                "ExpressionAttributeValues": {":one": {"N": "1"}, ":v": {"S": "changed"}},
            }
        },
        {"Delete": {"TableName": "ranged", "Key": {"pk": {"S": "b"}, **ranged}}},
    ]
    if fail_with == "condition":
        actions.append(
            {
                "ConditionCheck": {
                    "TableName": "flat",
                    "Key": {"pk": {"S": "b"}},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        )
    elif fail_with == "same item twice":
        actions.append({"Delete": {"TableName": "flat", "Key": {"pk": {"S": "new"}}}})
    elif fail_with == "a missing key":
        actions.append({"Delete": {"TableName": "ranged", "Key": {"pk": {"S": "a"}}}})
    return actions


@pytest.mark.parametrize("fail_with", ["condition", "same item twice", "a missing key"])
def test_a_cancelled_transaction_leaves_every_table_as_it_was(tables: Any, fail_with: str) -> None:
    before = _contents(tables)
    with pytest.raises(ClientError) as cancelled:
        tables.transact_write_items(TransactItems=_writes(fail_with))
    assert cancelled.value.response["Error"]["Code"] in (
        "TransactionCanceledException",
        "ValidationException",
    )
    assert _contents(tables) == before
    # The tables still take writes, and a transaction that passes applies whole.
    tables.transact_write_items(TransactItems=_writes("nothing"))
    after = _contents(tables)
    assert {i["pk"]["S"] for i in after["flat"]} == {"a", "b", "new"}
    assert [i["m"]["M"]["x"]["L"][0]["S"] for i in after["flat"] if i["pk"]["S"] == "a"] == ["changed"]
    assert sorted((i["pk"]["S"], i["sk"]["S"], i.get("n")) for i in after["ranged"]) == [
        ("a", "1", {"N": "9"}),
        ("a", "2", None),
    ]


EXPRESSIONS = [
    "SET a = :v",
    "SET #n = if_not_exists(#n, :zero) + :one, m.x[2].y = list_append(l, :l) REMOVE gone, m.z[0]",
    "ADD counter :one, tags :set DELETE other :set",
    "REMOVE a[3], a[1] SET b = a",
]


def _shape(node: Any, parent: Any = None) -> Any:
    """A node tree as nested tuples: its class, attributes and children, and whether its parent
    link points at the node it hangs under."""
    if not isinstance(node, _Node):
        return node
    attrs = {k: v for k, v in vars(node).items() if k not in ("children", "parent")}
    children = [_shape(child, node) for child in node.children or []]
    return (type(node).__name__, repr(sorted(attrs.items())), children, node.parent is parent)


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_an_expression_tree_is_copied_as_deepcopy_copies_it(expression: str) -> None:
    tree = UpdateExpressionParser.make(expression)
    copied = copy_tree(tree)
    assert (
        _shape(copied, tree.parent) == _shape(copy.deepcopy(tree), tree.parent) == _shape(tree, tree.parent)
    )
    originals = {id(n) for n in _nodes(tree)}
    assert not originals & {id(n) for n in _nodes(copied)}  # nothing shared with the kept tree


def _nodes(node: Any) -> list[Any]:
    return [node, *(n for child in node.children or [] if isinstance(child, _Node) for n in _nodes(child))]
