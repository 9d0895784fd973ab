"""An evaluator of IAM identity policies, as AWS documents the logic, for the tests that prove
each role grants what its code calls (tests/infra/test_infra_grants.py).

Only identity-based policies of one principal (no resource policies, boundaries, SCPs or
sessions): an explicit Deny beats an Allow, which beats the implicit deny. A statement
applies when its Action (or NotAction), its Resource (or NotResource) and every condition
match the request. Policy variables (`${aws:username}`) are not supported: the stack uses
none, and one would fail to match rather than match too much.

References (IAM User Guide): "Policy evaluation logic", "IAM JSON policy elements: Action,
NotAction, Resource, NotResource, Condition", "Condition operators", "Single-valued vs.
multivalued context keys".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

Decision = Literal["Allow", "ExplicitDeny", "ImplicitDeny"]
ContextValue = str | Sequence[str]


@dataclass(frozen=True)
class Request:
    """One authorization: the IAM action, the resource's ARN, the request's context keys
    (a key with a list value is multivalued, e.g. `dynamodb:LeadingKeys`)."""

    action: str
    resource: str
    context: Mapping[str, ContextValue] = field(default_factory=dict)


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


@cache
def _glob(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: `*` any run of characters (including none), `?` any one character;
    nothing else is special (no character classes)."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    return _glob(pattern, ignore_case).fullmatch(value) is not None


def action_matches(pattern: str, action: str) -> bool:
    """Actions are case-insensitive (`s3:getobject` is `s3:GetObject`); wildcards anywhere."""
    return glob_match(pattern, action, ignore_case=True)


def arn_matches(pattern: str, arn: str) -> bool:
    """Resource and ArnLike/ArnEquals matching: `*` alone matches everything; otherwise each
    of the six colon-delimited parts (arn:partition:service:region:account:resource) is
    matched on its own, case-sensitively, and the resource part (which may hold `:` and `/`)
    as a whole, so a wildcard there spans both. A wildcard ending a pattern of fewer parts
    expands past the colons (`arn:aws:s3:::*` and `arn:aws:iam::*` both work)."""
    if pattern == "*":
        return True
    want = pattern.split(":", 5)
    have = arn.split(":", 5)
    if len(want) < 6:
        if not want[-1].endswith("*") or len(have) < len(want):
            return False
        have = [*have[: len(want) - 1], ":".join(have[len(want) - 1 :])]
    if len(have) != len(want):
        return False
    return all(glob_match(w, h) for w, h in zip(want, have, strict=True))


# ---- conditions

_NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals", "ArnNotLike"}


def _value_matches(operator: str, policy_value: str, request_value: str) -> bool:  # noqa: PLR0911 - one per operator
    """One request value against one policy value for a positive operator."""
    match operator:
        case "StringEquals":
            return request_value == policy_value
        case "StringEqualsIgnoreCase":
            return request_value.casefold() == policy_value.casefold()
        case "StringLike":
            return glob_match(policy_value, request_value)
        case "ArnEquals" | "ArnLike":  # both take wildcards, per part (AWS: "Condition operators")
            return arn_matches(policy_value, request_value)
        case "Bool":
            return request_value.lower() == str(policy_value).lower()
        case "NumericEquals":
            return float(request_value) == float(policy_value)
        case "NumericLessThan":
            return float(request_value) < float(policy_value)
        case "NumericLessThanEquals":
            return float(request_value) <= float(policy_value)
        case "NumericGreaterThan":
            return float(request_value) > float(policy_value)
        case "NumericGreaterThanEquals":
            return float(request_value) >= float(policy_value)
    raise NotImplementedError(f"condition operator {operator!r}")


def _positive(operator: str) -> str:
    return {
        "StringNotEquals": "StringEquals",
        "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
        "StringNotLike": "StringLike",
        "ArnNotEquals": "ArnEquals",
        "ArnNotLike": "ArnLike",
    }.get(operator, operator)


def _one_value(operator: str, policy_values: list[str], request_value: str) -> bool:
    """Multiple policy values are ORed; a negated operator holds when none matches."""
    hit = any(_value_matches(_positive(operator), str(p), request_value) for p in policy_values)
    return not hit if operator in _NEGATED else hit


def condition_matches(
    operator: str, key: str, policy_value: Any, context: Mapping[str, ContextValue]
) -> bool:
    """One (operator, key) pair of a Condition block against the request context."""
    qualifier = None
    if ":" in operator:  # ForAllValues:StringEquals, ForAnyValue:StringLike
        qualifier, operator = operator.split(":", 1)
    if_exists = operator.endswith("IfExists")
    if if_exists:
        operator = operator.removesuffix("IfExists")
    present = key in context and context[key] is not None
    policy_values = [str(v).lower() if isinstance(v, bool) else str(v) for v in as_list(policy_value)]
    if operator == "Null":
        # "true": the key must be absent; "false": present (AWS: "Condition operator to check existence").
        return any((v.lower() == "true") == (not present) for v in policy_values)
    values = [str(v) for v in as_list(context[key])] if present else []
    if qualifier == "ForAllValues":
        # Vacuously true for a missing key or an empty set: every request value (none) matches.
        return all(_one_value(operator, policy_values, v) for v in values)
    if qualifier == "ForAnyValue":
        return any(_one_value(operator, policy_values, v) for v in values)
    if qualifier is not None:
        raise NotImplementedError(f"set operator {qualifier!r}")
    if not present:
        # A missing key: IfExists makes the condition hold; a negated operator holds too
        # (nothing to be equal to); any other operator fails.
        return if_exists or operator in _NEGATED
    if operator in _NEGATED:
        return all(_one_value(operator, policy_values, v) for v in values)
    return any(_one_value(operator, policy_values, v) for v in values)


def conditions_match(block: Mapping[str, Mapping[str, Any]], context: Mapping[str, ContextValue]) -> bool:
    """Every operator and every key in it must hold (AND); values within a key are ORed."""
    return all(
        condition_matches(operator, key, value, context)
        for operator, keys in block.items()
        for key, value in keys.items()
    )


# ---- statements and policies


def statement_applies(statement: Mapping[str, Any], request: Request) -> bool:
    if "Action" in statement:
        if not any(action_matches(a, request.action) for a in as_list(statement["Action"])):
            return False
    elif "NotAction" in statement:
        if any(action_matches(a, request.action) for a in as_list(statement["NotAction"])):
            return False
    else:
        raise ValueError(f"statement without Action or NotAction: {statement}")
    if "Resource" in statement:
        if not any(arn_matches(r, request.resource) for r in as_list(statement["Resource"])):
            return False
    elif "NotResource" in statement:
        if any(arn_matches(r, request.resource) for r in as_list(statement["NotResource"])):
            return False
    else:
        raise ValueError(f"statement without Resource or NotResource: {statement}")
    return conditions_match(statement.get("Condition", {}), request.context)


def evaluate(statements: Sequence[Mapping[str, Any]], request: Request) -> Decision:
    """AWS's order: any applicable Deny denies; else any applicable Allow allows; else the
    implicit deny."""
    applicable = [s for s in statements if statement_applies(s, request)]
    if any(s["Effect"] == "Deny" for s in applicable):
        return "ExplicitDeny"
    if any(s["Effect"] == "Allow" for s in applicable):
        return "Allow"
    return "ImplicitDeny"


def allowing(statements: Sequence[Mapping[str, Any]], request: Request) -> list[Mapping[str, Any]]:
    """The Allow statements that apply to `request` (which grants a call exercises)."""
    return [s for s in statements if s["Effect"] == "Allow" and statement_applies(s, request)]
