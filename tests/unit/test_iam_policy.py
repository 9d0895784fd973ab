"""The tests' IAM policy evaluator (tests/support/iam_policy.py) against cases taken from AWS's
IAM User Guide: "Policy evaluation logic", "IAM JSON policy elements" (Action, NotAction,
Resource, NotResource, Condition), "Condition operators" and "Single-valued vs. multivalued
context keys" (the DynamoDB fine-grained access example for `dynamodb:LeadingKeys`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.iam_policy import Request, arn_matches, evaluate

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/GameScores"


def allow(**parts: Any) -> dict[str, Any]:
    return {"Effect": "Allow", **parts}


def deny(**parts: Any) -> dict[str, Any]:
    return {"Effect": "Deny", **parts}


# (why, statements, request, expected decision)
CASES: list[tuple[str, list[dict[str, Any]], Request, str]] = [
    ("no statement: implicit deny", [], Request("s3:GetObject", "arn:aws:s3:::b/k"), "ImplicitDeny"),
    (
        "explicit deny beats allow",
        [allow(Action="s3:*", Resource="*"), deny(Action="s3:GetObject", Resource="arn:aws:s3:::b/*")],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "ExplicitDeny",
    ),
    (
        "a deny that does not apply leaves the allow",
        [allow(Action="s3:*", Resource="*"), deny(Action="s3:DeleteObject", Resource="*")],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "Allow",
    ),
    (
        "actions are case-insensitive",
        [allow(Action="S3:getobject", Resource="*")],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "Allow",
    ),
    (
        "action wildcard: iam:*AccessKey* matches iam:CreateAccessKey",
        [allow(Action="iam:*AccessKey*", Resource="*")],
        Request("iam:CreateAccessKey", "arn:aws:iam::123456789012:user/x"),
        "Allow",
    ),
    (
        "action ? wildcard is one character",
        [allow(Action="s3:?etObject", Resource="*")],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "Allow",
    ),
    (
        "action ? does not match none",
        [allow(Action="s3:?GetObject", Resource="*")],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "ImplicitDeny",
    ),
    (
        "NotAction with Allow allows everything but the listed",
        [allow(NotAction="iam:*", Resource="*")],
        Request("iam:CreateUser", "arn:aws:iam::123456789012:user/x"),
        "ImplicitDeny",
    ),
    (
        "NotAction with Allow allows other services",
        [allow(NotAction="iam:*", Resource="*")],
        Request("s3:ListBucket", "arn:aws:s3:::b"),
        "Allow",
    ),
    (
        "the bucket ARN is not its objects' ARN",
        [allow(Action="s3:ListBucket", Resource="arn:aws:s3:::b/*")],
        Request("s3:ListBucket", "arn:aws:s3:::b"),
        "ImplicitDeny",
    ),
    (
        "a resource wildcard spans the slashes of a key",
        [allow(Action="s3:GetObject", Resource="arn:aws:s3:::b/plans/*")],
        Request("s3:GetObject", "arn:aws:s3:::b/plans/p1/abc.md"),
        "Allow",
    ),
    (
        "a prefix grant does not reach another prefix",
        [allow(Action="s3:PutObject", Resource="arn:aws:s3:::b/plans/*")],
        Request("s3:PutObject", "arn:aws:s3:::b/tasks/t1/diff.patch"),
        "ImplicitDeny",
    ),
    (
        "resources are case-sensitive",
        [allow(Action="s3:GetObject", Resource="arn:aws:s3:::B/*")],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "ImplicitDeny",
    ),
    (
        "NotResource: everything but the listed",
        [allow(Action="s3:*", NotResource="arn:aws:s3:::secret/*")],
        Request("s3:GetObject", "arn:aws:s3:::secret/k"),
        "ImplicitDeny",
    ),
    (
        "a table grant does not cover its index",
        [allow(Action="dynamodb:Query", Resource=TABLE)],
        Request("dynamodb:Query", f"{TABLE}/index/by_owner"),
        "ImplicitDeny",
    ),
    (
        "ecs task wildcard under the cluster",
        [allow(Action="ecs:StopTask", Resource="arn:aws:ecs:us-east-1:123456789012:task/c1/*")],
        Request("ecs:StopTask", "arn:aws:ecs:us-east-1:123456789012:task/c1/0123abcd"),
        "Allow",
    ),
    (
        "a region wildcard stays in its segment",
        [allow(Action="kms:Sign", Resource="arn:aws:kms:*:123456789012:key/*")],
        Request("kms:Sign", "arn:aws:kms:eu-west-1:210987654321:key/k"),
        "ImplicitDeny",
    ),
    (
        "secret name with the six random characters",
        [
            allow(
                Action="secretsmanager:GetSecretValue",
                Resource="arn:aws:secretsmanager:us-east-1:1:secret:k-??????",
            )
        ],
        Request("secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:1:secret:k-AbCdEf"),
        "Allow",
    ),
    # ---- conditions: the DynamoDB fine-grained access example (LeadingKeys, multivalued)
    (
        "ForAllValues:StringEquals LeadingKeys: the one key",
        [
            allow(
                Action=["dynamodb:GetItem"],
                Resource=TABLE,
                Condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["brake"]}},
            )
        ],
        Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["brake"]}),
        "Allow",
    ),
    (
        "ForAllValues:StringEquals LeadingKeys: another key",
        [
            allow(
                Action=["dynamodb:GetItem"],
                Resource=TABLE,
                Condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["brake"]}},
            )
        ],
        Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["other"]}),
        "ImplicitDeny",
    ),
    (
        "ForAllValues with the key absent is vacuously true (AWS's warning)",
        [
            allow(
                Action="dynamodb:Scan",
                Resource=TABLE,
                Condition={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["brake"]}},
            )
        ],
        Request("dynamodb:Scan", TABLE),
        "Allow",
    ),
    (
        "ForAnyValue with the key absent is false",
        [
            allow(
                Action="dynamodb:Scan",
                Resource=TABLE,
                Condition={"ForAnyValue:StringEquals": {"dynamodb:LeadingKeys": ["brake"]}},
            )
        ],
        Request("dynamodb:Scan", TABLE),
        "ImplicitDeny",
    ),
    (
        "ForAllValues:StringLike with a wildcard value",
        [
            allow(
                Action="dynamodb:GetItem",
                Resource=TABLE,
                Condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["user-*"]}},
            )
        ],
        Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["user-1", "user-2"]}),
        "Allow",
    ),
    (
        "ForAllValues: one value outside the set fails",
        [
            allow(
                Action="dynamodb:GetItem",
                Resource=TABLE,
                Condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["user-*"]}},
            )
        ],
        Request("dynamodb:GetItem", TABLE, {"dynamodb:LeadingKeys": ["user-1", "admin"]}),
        "ImplicitDeny",
    ),
    (
        "StringEquals: multiple values are ORed",
        [
            allow(
                Action="iam:PassRole",
                Resource="*",
                Condition={
                    "StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ecs-tasks.amazonaws.com"]}
                },
            )
        ],
        Request("iam:PassRole", "arn:aws:iam::1:role/r", {"iam:PassedToService": "ecs-tasks.amazonaws.com"}),
        "Allow",
    ),
    (
        "StringEquals: a missing key fails",
        [
            allow(
                Action="iam:PassRole",
                Resource="*",
                Condition={"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}},
            )
        ],
        Request("iam:PassRole", "arn:aws:iam::1:role/r"),
        "ImplicitDeny",
    ),
    (
        "StringEqualsIfExists: a missing key passes",
        [
            allow(
                Action="ec2:RunInstances",
                Resource="*",
                Condition={"StringEqualsIfExists": {"ec2:InstanceType": ["t2.micro"]}},
            )
        ],
        Request("ec2:RunInstances", "arn:aws:ec2:us-east-1:1:volume/v"),
        "Allow",
    ),
    (
        "StringEqualsIfExists: a present key must match",
        [
            allow(
                Action="ec2:RunInstances",
                Resource="*",
                Condition={"StringEqualsIfExists": {"ec2:InstanceType": ["t2.micro"]}},
            )
        ],
        Request("ec2:RunInstances", "arn:aws:ec2:us-east-1:1:instance/i", {"ec2:InstanceType": "m5.large"}),
        "ImplicitDeny",
    ),
    (
        "StringNotEquals with a missing key holds",
        [
            allow(
                Action="s3:GetObject",
                Resource="*",
                Condition={"StringNotEquals": {"aws:PrincipalTag/team": "red"}},
            )
        ],
        Request("s3:GetObject", "arn:aws:s3:::b/k"),
        "Allow",
    ),
    (
        "multiple keys in one operator are ANDed",
        [
            allow(
                Action="ecs:TagResource",
                Resource="*",
                Condition={
                    "StringEquals": {"ecs:CreateAction": "RunTask", "aws:RequestedRegion": "us-east-1"}
                },
            )
        ],
        Request("ecs:TagResource", "arn:aws:ecs:us-east-1:1:task/c/t", {"ecs:CreateAction": "RunTask"}),
        "ImplicitDeny",
    ),
    (
        "ArnEquals takes wildcards per segment",
        [
            allow(
                Action="ecs:RunTask",
                Resource="*",
                Condition={"ArnEquals": {"ecs:cluster": "arn:aws:ecs:*:1:cluster/c"}},
            )
        ],
        Request(
            "ecs:RunTask",
            "arn:aws:ecs:us-east-1:1:task-definition/td:1",
            {"ecs:cluster": "arn:aws:ecs:us-east-1:1:cluster/c"},
        ),
        "Allow",
    ),
    (
        "ArnLike: another cluster fails",
        [
            allow(
                Action="ecs:RunTask",
                Resource="*",
                Condition={"ArnLike": {"ecs:cluster": "arn:aws:ecs:*:1:cluster/c"}},
            )
        ],
        Request(
            "ecs:RunTask",
            "arn:aws:ecs:us-east-1:1:task-definition/td:1",
            {"ecs:cluster": "arn:aws:ecs:us-east-1:1:cluster/other"},
        ),
        "ImplicitDeny",
    ),
    (
        "Bool aws:SecureTransport false denies an insecure request",
        [
            allow(Action="s3:*", Resource="*"),
            deny(Action="s3:*", Resource="*", Condition={"Bool": {"aws:SecureTransport": "false"}}),
        ],
        Request("s3:GetObject", "arn:aws:s3:::b/k", {"aws:SecureTransport": "false"}),
        "ExplicitDeny",
    ),
    (
        "Bool with a JSON boolean",
        [allow(Action="s3:*", Resource="*", Condition={"Bool": {"aws:SecureTransport": True}})],
        Request("s3:GetObject", "arn:aws:s3:::b/k", {"aws:SecureTransport": "true"}),
        "Allow",
    ),
    (
        "Null true: the key must be absent",
        [allow(Action="ec2:*", Resource="*", Condition={"Null": {"aws:TokenIssueTime": "true"}})],
        Request("ec2:DescribeInstances", "*", {"aws:TokenIssueTime": "2024-01-01T00:00:00Z"}),
        "ImplicitDeny",
    ),
    (
        "Null false: the key must be present",
        [allow(Action="ec2:*", Resource="*", Condition={"Null": {"aws:TokenIssueTime": "false"}})],
        Request("ec2:DescribeInstances", "*", {"aws:TokenIssueTime": "2024-01-01T00:00:00Z"}),
        "Allow",
    ),
]


@pytest.mark.parametrize(("why", "statements", "request_", "expected"), CASES, ids=[c[0] for c in CASES])
def test_documented_cases(
    why: str, statements: list[dict[str, Any]], request_: Request, expected: str
) -> None:
    assert evaluate(statements, request_) == expected, why


@pytest.mark.parametrize(
    ("pattern", "arn", "expected"),
    [
        ("arn:aws:s3:::*", "arn:aws:s3:::bucket/a:b/c", True),
        ("arn:aws:iam::*", "arn:aws:iam::123456789012:role/x", True),
        ("arn:aws:iam::123456789012:role/*", "arn:aws:iam::123456789012:role/path/x", True),
        ("arn:aws:iam::123456789012:role/*", "arn:aws:iam::210987654321:role/x", False),
        ("arn:aws:dynamodb:*:*:table/T", "arn:aws:dynamodb:us-east-1:1:table/T/index/I", False),
        ("arn:aws:dynamodb:*:*:table/T*", "arn:aws:dynamodb:us-east-1:1:table/T/index/I", True),
        ("arn:aws:logs:us-east-1:1:log-group:g:*", "arn:aws:logs:us-east-1:1:log-group:g:log-stream:s", True),
        ("*", "anything", True),
    ],
)
def test_arn_matching(pattern: str, arn: str, expected: bool) -> None:
    assert arn_matches(pattern, arn) is expected
