"""Short cuts through moto's DynamoDB that change what it answers in nothing but time.

The tests, the simulation and the local stack make tens of thousands of DynamoDB requests to
moto, and in moto 5.2 most of each request's time went to work that its inputs make
predictable. `install_moto_shortcuts()` (idempotent) takes six of them away:

* **Attribute values are written as they are.** moto renders every response through its
  generic, shape-driven serializer; for an `AttributeValue` (ten members, nested through `M`
  and `L`) it looks every member up under several aliases, tens of thousands of calls for one
  plan row: a fifth of each request. The values moto hands it are already in the wire shape,
  so `S`, `N`, `BOOL`, `NULL`, `SS`, `NS`, `M` and `L` of those are written directly; anything
  else (binary `B`/`BS`, a `None` inside a map or list, a map member named "", an unknown
  key, a value that is not a dict) takes moto's own path for the whole value, so the answer
  never differs
  (`tests/unit/test_moto_speed.py` compares both on generated values).
* **An update expression is parsed once per text.** moto parses it twice per `UpdateItem`
  and once per transaction action. The tree depends on the text only, and moto never changes
  it (its validator works on a deep copy), so parses are kept (LRU, 512 texts); a text that
  does not parse still raises every time.
* **A handler's method names are listed once per class**, not with `inspect.getmembers` on
  every request of every service.
* **An update expression's tree is walked with its node types looked up once.** Each of the
  ten validators walks the whole tree, and moto asked each node whether it is a `Node` (an
  ABC: a slow `isinstance`) and rebuilt the validator's map of node types for every node,
  a seventh of a simulated schedule. The walk here visits the same nodes in the same order,
  calls the same hooks and processors, and answers by the same classes.
* **The validator's copy of that tree is made node by node.** Every validation works on a
  deep copy of the kept tree; `copy.deepcopy` reduces each node generically. A plain node
  (no slots, no copy or pickle hooks of its own) is copied here as deepcopy would copy it:
  a new instance of its class whose attributes are copies, each object copied once (the
  parent links point into the copy); anything else is handed to `copy.deepcopy` itself.
* **A transaction keeps a copy of the items it writes, not of its tables.** moto deep-copies
  every table a `TransactWriteItems` names, all its items, so that a cancelled transaction
  can put the table back: each transaction cost as much as the tables were large, and a test
  that writes a few hundred tasks spent most of its time copying them. Only the items under
  the transaction's keys can change, so those are copied (before any of them is written) and
  put back (or removed, if they were absent) when moto rolls back. A table with a stream, or a
  transaction whose keys cannot be read (which moto refuses), takes moto's own copy.
"""

from __future__ import annotations

import copy
import copyreg
import functools
import threading
from collections.abc import Callable
from typing import Any

import moto.core.responses
import moto.dynamodb.models
import moto.dynamodb.parsing.ast_nodes
import moto.dynamodb.parsing.expressions
import moto.dynamodb.parsing.validators
from moto.core.serialize import JSONSerializer

_INSTALL_GUARD = threading.Lock()
_MARKER = "__steward_short_cut__"


class _Unusual(Exception):
    """A value the short cut does not render exactly as moto would."""


def _string(member: Any) -> str:
    if not isinstance(member, str):
        raise _Unusual
    return member


def _flag(member: Any) -> bool:
    if not isinstance(member, bool):
        raise _Unusual
    return member


def _strings(member: Any) -> list[str]:
    if not isinstance(member, list):
        raise _Unusual
    return [_string(s) for s in member]


def _map(member: Any) -> dict[str, Any]:
    if not isinstance(member, dict) or "" in member:
        raise _Unusual  # moto merges a member named "" into its map
    return {name: attribute_value(inner) for name, inner in member.items()}


def _list(member: Any) -> list[Any]:
    if not isinstance(member, list):
        raise _Unusual
    return [attribute_value(inner) for inner in member]


# Binary values (`B`, `BS`) and unknown keys are not here: moto's own path renders them.
_RENDER: dict[str, Callable[[Any], Any]] = {
    "S": _string,
    "N": _string,
    "BOOL": _flag,
    "NULL": _flag,
    "SS": _strings,
    "NS": _strings,
    "M": _map,
    "L": _list,
}


def attribute_value(value: Any) -> dict[str, Any]:
    """The wire form of one attribute value, as moto's generic serializer renders it."""
    if not isinstance(value, dict):
        raise _Unusual
    out: dict[str, Any] = {}
    for key, member in value.items():
        if member is None:
            continue  # the generic path skips members that are None
        render = _RENDER.get(key)
        if render is None:
            raise _Unusual
        out[key] = render(member)
    return out


_Node: Any = vars(moto.dynamodb.parsing.ast_nodes)["Node"]


@functools.cache
def _is_node(cls: Any) -> bool:
    return issubclass(cls, _Node)


def _kind(value: Any) -> Any:
    return type(value)


@functools.cache
def _is_plain_node(cls: Any) -> bool:
    """A node class that `copy.deepcopy` copies by its `__dict__` alone."""
    return (
        _is_node(cls)
        and cls not in copyreg.dispatch_table
        and not any("__slots__" in vars(klass) for klass in cls.__mro__)
        and not hasattr(cls, "__deepcopy__")
        and not hasattr(cls, "__setstate__")
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", None) is getattr(object, "__getstate__", None)
    )


_ATOMIC = frozenset({str, int, float, bool, type(None), bytes})


def copy_tree(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """`copy.deepcopy(value)` for an expression tree, plain nodes copied directly."""
    if memo is None:
        memo = {}
    cls: Any = type(value)
    if cls in _ATOMIC:
        return value
    seen = memo.get(id(value), memo)
    if seen is not memo:
        return seen
    if cls is list:
        copied: list[Any] = []
        memo[id(value)] = copied
        _keep_alive(value, memo)
        copied.extend(copy_tree(member, memo) for member in value)
        return copied
    if not _is_plain_node(cls):
        return copy.deepcopy(value, memo)
    node = cls.__new__(cls)
    memo[id(value)] = node
    _keep_alive(value, memo)
    node.__dict__.update({name: copy_tree(member, memo) for name, member in value.__dict__.items()})
    return node


def _keep_alive(value: Any, memo: dict[int, Any]) -> None:
    # As deepcopy does: an original stays alive while the memo holds its id.
    memo.setdefault(id(memo), []).append(value)


def _deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    return copy_tree(value, memo) if _is_node(_kind(value)) else copy.deepcopy(value, memo)


def traverse(self: Any, root: Any) -> Any:
    """`DepthFirstTraverser.traverse`: the same visits, hooks and processing, bottom up."""
    types = self.nodes_to_be_processed()
    before_child = self.pre_processing_of_child
    process = self.process

    def visit(node: Any, child_id: int) -> Any:
        if _is_node(_kind(node)):
            parent = node.parent
            if node.children is not None:
                for n, child in enumerate(node.children):
                    before_child(node, n)
                    visit(child, n)
            if isinstance(node, types):
                node = process(node)
                node.parent = parent
                if parent:
                    parent.children[child_id] = node
        return node

    return visit(root, -1)


_Table: Any = vars(moto.dynamodb.models)["Table"]
_tx = threading.local()  # the keys of the transaction this thread is running, per table name


class _ItemsBefore:
    """What a table held under a transaction's keys before it ran: moto's rollback puts this
    in the table's place, and `restore` turns it back into the table as it was."""

    def __init__(self, table: Any, keys: list[tuple[Any, Any]]) -> None:
        self.table = table
        self.saved = [(h, r, copy.deepcopy(table.get_item(h, r))) for h, r in keys]

    def restore(self) -> Any:
        items = self.table.items
        for hash_key, range_key, item in reversed(self.saved):
            if range_key is None:
                if item is None:
                    items.pop(hash_key, None)
                else:
                    items[hash_key] = item
            elif item is None:
                items.get(hash_key, {}).pop(range_key, None)
            else:
                items[hash_key][range_key] = item
        return self.table


def _transaction_keys(backend: Any, transact_items: list[dict[str, Any]]) -> dict[str, list[Any]] | None:
    """Table name -> the (hash, range) keys the transaction writes; None where moto's own copy
    must be taken (a key it cannot read, a table with a stream)."""
    keys: dict[str, list[Any]] = {}
    try:
        for entry in transact_items:
            op_type, op = next(iter(entry.items()))
            table = backend.tables.get(op.get("TableName"))
            if table is None:
                continue
            if table.stream_shard is not None:
                return None
            if op_type == "Put":
                attrs = op["Item"]
                key = {name: attrs[name] for name in (table.hash_key_attr, table.range_key_attr) if name}
            else:
                key = op["Key"]
            keys.setdefault(table.name, []).append(backend.get_keys_value(table, key))
    except Exception:  # moto itself refuses such a transaction, after its own copy
        return None
    return keys


class _CopyModule:
    """`copy` as moto's DynamoDB models module sees it: a table copied for a transaction's
    rollback is only the items under the transaction's keys."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        keys = getattr(_tx, "keys", None)
        if keys is not None and isinstance(value, _Table):
            return _ItemsBefore(value, keys.get(value.name, []))
        return copy.deepcopy(value, memo)


def _transactions_copy_items(transact: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(transact)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        _tx.keys = _transaction_keys(self, transact_items)
        try:
            return transact(self, transact_items)
        finally:
            _tx.keys = None
            for name, table in list(self.tables.items()):
                if isinstance(table, _ItemsBefore):  # rolled back by moto
                    self.tables[name] = table.restore()

    return transact_write_items


def install_moto_shortcuts() -> None:
    """Install the short cuts in this process (idempotent)."""
    with _INSTALL_GUARD:
        serialize_structure = JSONSerializer._serialize_type_structure
        if getattr(serialize_structure, _MARKER, False):
            return

        def _serialize_type_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
            if key and shape.name == "AttributeValue" and self.service_model.service_name == "dynamodb":
                try:
                    rendered = attribute_value(value)
                except _Unusual:
                    pass
                else:
                    serialized[self.get_serialized_name(shape, key)] = rendered
                    return
            serialize_structure(self, serialized, value, shape, key)

        setattr(_serialize_type_structure, _MARKER, True)
        _serialize_type_structure.__wrapped__ = serialize_structure  # type: ignore[attr-defined]
        JSONSerializer._serialize_type_structure = _serialize_type_structure  # type: ignore[method-assign]

        parser: Any = vars(moto.dynamodb.parsing.expressions)["UpdateExpressionParser"]
        parse: Any = functools.lru_cache(maxsize=512)(parser.make.__func__)
        parser.make = classmethod(parse)

        # `BaseResponse.call_action` looks the name up in its own module on every request.
        responses: Any = moto.core.responses
        responses.method_names_from_class = functools.cache(responses.method_names_from_class)

        traverser: Any = vars(moto.dynamodb.parsing.ast_nodes)["DepthFirstTraverser"]
        traverser.traverse = traverse
        validators: Any = moto.dynamodb.parsing.validators
        validators.deepcopy = _deepcopy

        models: Any = moto.dynamodb.models
        models.copy = _CopyModule()
        backend: Any = models.DynamoDBBackend
        backend.transact_write_items = _transactions_copy_items(backend.transact_write_items)
