"""Records every AWS call Steward's code makes, as IAM authorizes it, attributed to the
principal (a Lambda function, or the operator CLI) whose parts built the client.

`steward.adapters.aws` builds every client and resource and gives each new client to the
callables in `CLIENT_HOOKS`; `Recorder.installed()` adds one that, if a principal is being
acted as (`acting_as`), registers a `before-parameter-build` handler on that client bound to
the principal. That event is emitted for every API call and for every presigned URL (which
emits no `before-call`), so presigned GETs and PUTs are recorded as the GetObject/PutObject
the signer must be allowed. Clients built outside `acting_as` (a test's own setup) are not
recorded, and nothing is registered when no recorder is installed: free otherwise.

Each call becomes one or more `Call`s as IAM authorizes it: a transaction or a batch, one per
item (Put -> PutItem, Update -> UpdateItem, Delete -> DeleteItem, ConditionCheck ->
ConditionCheckItem, Get -> GetItem) on the item's table; RunTask also needs iam:PassRole on
the task definition's roles (and ecs:TagResource when it tags); HeadObject is s3:GetObject,
ListObjectsV2 is s3:ListBucket; Converse is bedrock:InvokeModel.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlparse

from steward.adapters import aws

from tests.support.iam_policy import Request

ACCOUNT = "123456789012"  # moto's default account
# A cross-region inference profile id (infra.stack.INFERENCE_PROFILE): its geography, its model.
_INFERENCE_PROFILE = re.compile(r"^(us|us-gov|eu|apac|jp|au|ca|global)\.(.+)$")


@dataclass(frozen=True)
class Call:
    principal: str
    action: str
    resource: str
    operation: str  # the API operation (TransactWriteItems for its items' PutItem...)
    context: tuple[tuple[str, tuple[str, ...] | str], ...] = ()

    def request(self) -> Request:
        return Request(self.action, self.resource, dict(self.context))


def _scalar(value: Any) -> str:
    """A key attribute's value, serialized ({"S": "brake"}) or not ("brake")."""
    if isinstance(value, Mapping) and len(value) == 1:
        (kind, inner), *_ = value.items()
        if kind in ("S", "N", "B"):
            return str(inner)
    return str(value)


@dataclass
class Recorder:
    """`partition_keys`: table name -> its partition key attribute (for
    `dynamodb:LeadingKeys`); `task_roles`: task definition ARN -> the roles RunTask passes."""

    partition_keys: Mapping[str, str]
    task_roles: Callable[[str], list[str]] = lambda _arn: []
    calls: list[Call] = field(default_factory=list)
    # (principal, operation, parameters) of each call as made: a scenario reads what the
    # code sent (the ticket RunTask hands a runtime).
    raw: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    misattributed: list[str] = field(default_factory=list)
    _local: threading.local = field(default_factory=threading.local)

    @property
    def principal(self) -> str | None:
        return getattr(self._local, "principal", None)

    @contextmanager
    def acting_as(self, principal: str) -> Iterator[None]:
        saved = self.principal
        self._local.principal = principal
        try:
            yield
        finally:
            self._local.principal = saved

    @contextmanager
    def installed(self) -> Iterator[Recorder]:
        aws.CLIENT_HOOKS.append(self._hook)
        try:
            yield self
        finally:
            aws.CLIENT_HOOKS.remove(self._hook)

    def _hook(self, client: Any) -> None:
        principal = self.principal
        if principal is None:
            return
        handler = partial(self._on_call, principal, client.meta.region_name, client.meta.service_model)
        client.meta.events.register("before-parameter-build", handler, unique_id=f"recorder-{id(self)}")

    def _on_call(
        self, principal: str, region: str, service: Any, params: Mapping[str, Any], model: Any, **_: Any
    ) -> None:
        if self.principal not in (None, principal):
            # A client made for one function used while acting as another: the attribution
            # would be wrong. Kept, not raised: the code under test may swallow exceptions
            # (best-effort paths), and the grants test fails on any.
            self.misattributed.append(f"{principal}'s {service.service_name} client used by {self.principal}")
        self.raw.append((principal, model.name, dict(params)))
        prefix = service.signing_name  # IAM's prefix: secretsmanager, bedrock (for bedrock-runtime)
        for action, resource, context in expand(prefix, model.name, params, self, region):
            self.calls.append(Call(principal, action, resource, model.name, tuple(sorted(context.items()))))

    def by_principal(self) -> dict[str, set[tuple[str, str]]]:
        found: dict[str, set[tuple[str, str]]] = {}
        for call in self.calls:
            found.setdefault(call.principal, set()).add((call.action, call.resource))
        return found


def _arn(service: str, region: str, resource: str, account: str = ACCOUNT) -> str:
    return f"arn:aws:{service}:{region}:{account}:{resource}"


Expanded = list[tuple[str, str, dict[str, Any]]]

_WRITE = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def _dynamodb(operation: str, params: Mapping[str, Any], rec: Recorder, region: str) -> Expanded:
    def item(
        action: str, table: str, key: Mapping[str, Any] | None, index: str | None = None
    ) -> tuple[str, str, dict[str, Any]]:
        resource = _arn("dynamodb", region, f"table/{table}" + (f"/index/{index}" if index else ""))
        context: dict[str, Any] = {}
        attr = rec.partition_keys.get(table)
        if key is not None and attr is not None and attr in key:
            context["dynamodb:LeadingKeys"] = (_scalar(key[attr]),)
        return (f"dynamodb:{action}", resource, context)

    if operation == "TransactWriteItems":
        found = []
        for entry in params["TransactItems"]:
            ((kind, body),) = entry.items()
            found.append(item(_WRITE[kind], body["TableName"], body.get("Key") or body.get("Item")))
        return found
    if operation == "TransactGetItems":
        return [item("GetItem", e["Get"]["TableName"], e["Get"]["Key"]) for e in params["TransactItems"]]
    if operation == "BatchGetItem":
        return [item("GetItem", t, k) for t, spec in params["RequestItems"].items() for k in spec["Keys"]]
    if operation == "BatchWriteItem":
        return [
            item("PutItem", t, r["PutRequest"]["Item"])
            if "PutRequest" in r
            else item("DeleteItem", t, r["DeleteRequest"]["Key"])
            for t, requests in params["RequestItems"].items()
            for r in requests
        ]
    if operation in ("Query", "Scan"):
        return [item(operation, params["TableName"], None, params.get("IndexName"))]
    key = params.get("Key") or params.get("Item")
    return [item(operation, params["TableName"], key)]


def _s3(operation: str, params: Mapping[str, Any], presign: bool) -> Expanded:
    bucket = params["Bucket"]
    if operation in ("ListObjectsV2", "ListObjects"):
        return [("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": params.get("Prefix", "")})]
    action = {"HeadObject": "GetObject"}.get(operation, operation)
    return [(f"s3:{action}", f"arn:aws:s3:::{bucket}/{params['Key']}", {})]


def _ecs(operation: str, params: Mapping[str, Any], rec: Recorder, region: str) -> Expanded:
    cluster = params.get("cluster", "default")
    cluster_name = cluster.rsplit("/", 1)[-1]
    cluster_arn = cluster if cluster.startswith("arn:") else _arn("ecs", region, f"cluster/{cluster}")
    on_cluster = {"ecs:cluster": cluster_arn}

    def task(t: str) -> str:
        return t if t.startswith("arn:") else _arn("ecs", region, f"task/{cluster_name}/{t}")

    if operation == "RunTask":
        definition = params["taskDefinition"]
        found: Expanded = [("ecs:RunTask", definition, on_cluster)]
        if params.get("tags"):
            # Tags on create: authorized as TagResource on the new task (its id is not known yet).
            found.append(("ecs:TagResource", task("new-task"), {"ecs:CreateAction": "RunTask", **on_cluster}))
        overrides = params.get("overrides", {})
        roles = [
            overrides[k] for k in ("taskRoleArn", "executionRoleArn") if k in overrides
        ] or rec.task_roles(definition)
        found += [
            ("iam:PassRole", role, {"iam:PassedToService": "ecs-tasks.amazonaws.com"}) for role in roles
        ]
        return found
    if operation == "StopTask":
        return [("ecs:StopTask", task(params["task"]), on_cluster)]
    if operation == "DescribeTasks":
        return [("ecs:DescribeTasks", task(t), on_cluster) for t in params["tasks"]]
    if operation == "ListTasks":
        return [("ecs:ListTasks", _arn("ecs", region, f"container-instance/{cluster_name}/*"), on_cluster)]
    return [(f"ecs:{operation}", cluster_arn, on_cluster)]


def expand(  # noqa: PLR0911 - one answer per service
    prefix: str, operation: str, params: Mapping[str, Any], rec: Recorder, region: str
) -> Expanded:
    """(IAM action, resource ARN, condition context) for each authorization `operation` needs."""
    if prefix == "dynamodb":
        return _dynamodb(operation, params, rec, region)
    if prefix == "s3":
        return _s3(operation, params, presign=False)
    if prefix == "sqs":
        if operation == "GetQueueUrl":
            account = params.get("QueueOwnerAWSAccountId", ACCOUNT)
            return [("sqs:GetQueueUrl", _arn("sqs", region, params["QueueName"], account), {})]
        path = urlparse(params["QueueUrl"]).path.strip("/").split("/")  # /{account}/{name}
        action = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage"}.get(
            operation, operation
        )
        return [(f"sqs:{action}", _arn("sqs", region, path[-1], path[-2]), {})]
    if prefix == "kms":
        key = params["KeyId"]
        return [
            (f"kms:{operation}", key if key.startswith("arn:") else _arn("kms", region, f"key/{key}"), {})
        ]
    if prefix == "secretsmanager":
        secret = params["SecretId"]
        return [
            (
                f"secretsmanager:{operation}",
                secret if secret.startswith("arn:") else _arn("secretsmanager", region, f"secret:{secret}"),
                {},
            )
        ]
    if prefix == "ecs":
        return _ecs(operation, params, rec, region)
    if prefix == "bedrock":
        action = {"Converse": "InvokeModel", "ConverseStream": "InvokeModelWithResponseStream"}.get(
            operation, operation
        )
        model = params["modelId"]
        if model.startswith("arn:"):
            return [(f"bedrock:{action}", model, {})]
        profile = _INFERENCE_PROFILE.match(model)
        if profile is None:
            return [(f"bedrock:{action}", f"arn:aws:bedrock:{region}::foundation-model/{model}", {})]
        # A cross-region inference profile: Bedrock authorizes the profile here and its model
        # in the region it routes the call to (this one, for the record).
        return [
            (f"bedrock:{action}", f"arn:aws:bedrock:{region}:{ACCOUNT}:inference-profile/{model}", {}),
            (f"bedrock:{action}", f"arn:aws:bedrock:{region}::foundation-model/{profile[2]}", {}),
        ]
    raise AssertionError(f"no IAM mapping for {prefix}:{operation}: add one to tests/support/aws_calls.py")
