"""Three short cuts through moto's DynamoDB that change what it answers in nothing but time.

The tests, the simulation and the local stack make tens of thousands of DynamoDB requests to
moto, and in moto 5.2 most of each request's time went to work that its inputs make
predictable. `install_moto_shortcuts()` (idempotent) takes three of them away:

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
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import moto.core.responses
import moto.dynamodb.parsing.expressions
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


def install_moto_shortcuts() -> None:
    """Install the three short cuts in this process (idempotent)."""
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
