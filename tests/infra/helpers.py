"""Lookups in the synthesized template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in resources.items() if v["Type"] == kind}


def function_id(resources: dict[str, Any], name: str) -> str:
    """Logical id of the Lambda function of `name` (described "steward <name>")."""
    (found,) = [
        k
        for k, v in of_type(resources, "AWS::Lambda::Function").items()
        if v["Properties"].get("Description") == f"steward {name}"
    ]
    return found


def role_id(resources: dict[str, Any], name: str) -> str:
    return str(resources[function_id(resources, name)]["Properties"]["Role"]["Fn::GetAtt"][0])


def statements_of_role(resources: dict[str, Any], role: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for policy in of_type(resources, "AWS::IAM::Policy").values():
        if {"Ref": role} in policy["Properties"]["Roles"]:
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    for inline in resources[role]["Properties"].get("Policies", []):
        found += inline["PolicyDocument"]["Statement"]
    return found


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def actions_by_resource(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(action, resource rendered as a string) for every allowed pair."""
    pairs: set[tuple[str, str]] = set()
    for statement in statements:
        assert statement["Effect"] == "Allow"
        for action in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                pairs.add((action, render(resource)))
    return pairs


def render(value: Any) -> str:
    """A CloudFormation value as a readable string: {Ref: X} -> <X>, GetAtt -> <X.Attr>."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return f"<{value['Ref']}>"
    if "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(render(p) for p in parts)
    return str(value)
