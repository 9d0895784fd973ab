"""A stand-in for boto3's ECS client, because moto's ECS ignores `clientToken` (docs/testing.md) and RunTask with awsvpc would need a whole mocked network.

It keeps ECS's documented behaviour for the calls the launcher makes:

* RunTask: a clientToken is up to 64 ASCII characters in the range 33-126 (else
  InvalidParameterException). Within one cluster, the same token with the same parameters
  returns the original response and starts nothing; the same token with other parameters
  raises ConflictException (ECS's answer, see "Idempotency for RunTask" in the ECS API
  reference; the error code is a switch here, `mismatch_code`). A run that returned a
  `failures` entry started nothing and does not use up its token.
* StopTask: stopping a stopped task returns it again; an unknown task raises
  InvalidParameterException "The referenced task was not found.".
* ListTasks (cluster, startedBy, desiredStatus, paginated) and DescribeTasks (tags only with
  include=["TAGS"], unknown ARNs as MISSING failures).

Fault switches: `throttle_next()` makes the next call of any operation raise
ThrottlingException; `fail_next_run(reason)` makes the next RunTask answer with a failures
entry and no task. Errors are botocore ClientErrors shaped as botocore builds them.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

ACCOUNT = "123456789012"
MAX_OVERRIDES_CHARS = 8192  # ECS: "A total of 8192 characters are allowed for overrides."


def client_error(operation: str, code: str, message: str, status: int = 400) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"RequestId": str(uuid.uuid4()), "HTTPStatusCode": status, "RetryAttempts": 0},
    }
    return ClientError(response, operation)  # type: ignore[arg-type]


@dataclass
class FakeEcs:
    region: str = "us-east-1"
    mismatch_code: str = "ConflictException"
    runs: list[dict[str, Any]] = field(default_factory=list)  # RunTask calls that started a task
    run_calls: list[dict[str, Any]] = field(default_factory=list)  # every RunTask call, as sent
    stops: list[dict[str, Any]] = field(default_factory=list)  # every StopTask call, as sent
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # by task ARN
    _tokens: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)
    _throttle: int = 0
    _run_failures: list[str] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # ---- fault switches
    def throttle_next(self, count: int = 1) -> None:
        with self._lock:
            self._throttle += count

    @property
    def throttles_armed(self) -> int:
        """How many of the next calls will still be throttled."""
        with self._lock:
            return self._throttle

    def fail_next_run(self, reason: str = "RESOURCE:MEMORY") -> None:
        with self._lock:
            self._run_failures.append(reason)

    # ---- views for tests
    def running(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(t) for t in self.tasks.values() if t["desiredStatus"] == "RUNNING"]

    def environment_of(self, arn: str, container: str) -> dict[str, str]:
        with self._lock:
            overrides = self.tasks[arn]["overrides"]["containerOverrides"]
            entry = next(o for o in overrides if o["name"] == container)
            return {e["name"]: e["value"] for e in entry.get("environment", [])}

    # ---- the ECS API subset
    def run_task(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.run_calls.append(copy.deepcopy(kwargs))
            self._maybe_throttle("RunTask")
            self._validate_run(kwargs)
            cluster = str(kwargs.get("cluster", "default"))
            params = {k: v for k, v in kwargs.items() if k != "clientToken"}
            token = kwargs.get("clientToken")
            if token is not None and (cluster, token) in self._tokens:
                seen, response = self._tokens[(cluster, token)]
                if seen != params:
                    raise client_error(
                        "RunTask",
                        self.mismatch_code,
                        "The client token was already used with different request parameters.",
                    )
                return copy.deepcopy(response)
            if self._run_failures:
                reason = self._run_failures.pop(0)
                arn = self._arn("container-instance", cluster, uuid.uuid4().hex)
                return {"tasks": [], "failures": [{"arn": arn, "reason": reason}]}
            task = self._new_task(cluster, kwargs)
            self.tasks[task["taskArn"]] = task
            self.runs.append(copy.deepcopy(kwargs))
            response = {"tasks": [self._public(task, with_tags=True)], "failures": []}
            if token is not None:
                self._tokens[(cluster, token)] = (copy.deepcopy(params), copy.deepcopy(response))
            return response

    def stop_task(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self.stops.append(copy.deepcopy(kwargs))
            self._maybe_throttle("StopTask")
            cluster = str(kwargs.get("cluster", "default"))
            task = self._lookup(cluster, str(kwargs.get("task", "")))
            if task is None:
                raise client_error(
                    "StopTask", "InvalidParameterException", "The referenced task was not found."
                )
            if task["desiredStatus"] != "STOPPED":
                task.update(
                    desiredStatus="STOPPED",
                    lastStatus="STOPPED",
                    stoppedReason=str(kwargs.get("reason", "")),
                    stopCode="UserInitiated",
                    stoppedAt=datetime.now(UTC),
                )
            return {"task": self._public(task, with_tags=False)}

    def list_tasks(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self._maybe_throttle("ListTasks")
            cluster = str(kwargs.get("cluster", "default"))
            desired = kwargs.get("desiredStatus", "RUNNING")
            arns = [
                arn
                for arn, t in self.tasks.items()
                if t["cluster"] == cluster
                and t["desiredStatus"] == desired
                and ("startedBy" not in kwargs or t.get("startedBy") == kwargs["startedBy"])
            ]
            size = int(kwargs.get("maxResults", 100))
            start = int(kwargs.get("nextToken", 0) or 0)
            page: dict[str, Any] = {"taskArns": arns[start : start + size]}
            if start + size < len(arns):
                page["nextToken"] = str(start + size)
            return page

    def describe_tasks(self, **kwargs: Any) -> dict[str, Any]:
        with self._lock:
            self._maybe_throttle("DescribeTasks")
            cluster = str(kwargs.get("cluster", "default"))
            wanted = list(kwargs.get("tasks", []))
            if len(wanted) > 100:
                raise client_error(
                    "DescribeTasks", "InvalidParameterException", "Tasks cannot be longer than 100."
                )
            with_tags = "TAGS" in (kwargs.get("include") or [])
            out: dict[str, Any] = {"tasks": [], "failures": []}
            for ref in wanted:
                task = self._lookup(cluster, ref)
                if task is None:
                    out["failures"].append({"arn": ref, "reason": "MISSING"})
                else:
                    out["tasks"].append(self._public(task, with_tags=with_tags))
            return out

    # ---- internals
    def _maybe_throttle(self, operation: str) -> None:
        if self._throttle:
            self._throttle -= 1
            raise client_error(operation, "ThrottlingException", "Rate exceeded")

    def _validate_run(self, kwargs: Mapping[str, Any]) -> None:
        def invalid(message: str) -> ClientError:
            return client_error("RunTask", "InvalidParameterException", message)

        if not kwargs.get("taskDefinition"):
            raise invalid("taskDefinition is required.")
        token = kwargs.get("clientToken")
        if token is not None and (
            not isinstance(token, str)
            or not 1 <= len(token) <= 64
            or any(not 33 <= ord(c) <= 126 for c in token)
        ):
            raise invalid("clientToken: up to 64 ASCII characters in the range 33-126 are allowed.")
        started_by = kwargs.get("startedBy")
        if started_by is not None and (
            len(started_by) > 128
            or any(not (c.isascii() and (c.isalnum() or c in "-_/")) for c in started_by)
        ):
            raise invalid("startedBy: up to 128 letters, numbers, hyphens, slashes and underscores.")
        if not 1 <= int(kwargs.get("count", 1)) <= 10:
            raise invalid("count must be between 1 and 10.")
        if kwargs.get("propagateTags") not in (None, "TASK_DEFINITION", "NONE"):
            raise invalid("propagateTags: SERVICE is not valid for RunTask.")
        for tag in kwargs.get("tags") or []:
            if not 1 <= len(tag.get("key", "")) <= 128 or len(tag.get("value", "")) > 256:
                raise invalid("Tag keys are 1-128 characters, values at most 256.")
        if kwargs.get("launchType") == "FARGATE":
            vpc = (kwargs.get("networkConfiguration") or {}).get("awsvpcConfiguration") or {}
            if not vpc.get("subnets"):
                raise invalid(
                    "Network Configuration must be provided when networkMode 'awsvpc' is specified."
                )
            if vpc.get("assignPublicIp", "DISABLED") not in ("ENABLED", "DISABLED"):
                raise invalid("assignPublicIp must be ENABLED or DISABLED.")
        overrides = kwargs.get("overrides") or {}
        if len(repr(overrides)) > MAX_OVERRIDES_CHARS:
            raise invalid("Container Overrides length must be at most 8192")

    def _arn(self, kind: str, cluster: str, ident: str) -> str:
        return f"arn:aws:ecs:{self.region}:{ACCOUNT}:{kind}/{cluster}/{ident}"

    def _new_task(self, cluster: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        family = str(kwargs["taskDefinition"]).rsplit("/", 1)[-1].split(":", 1)[0]
        return {
            "taskArn": self._arn("task", cluster, uuid.uuid4().hex),
            "clusterArn": f"arn:aws:ecs:{self.region}:{ACCOUNT}:cluster/{cluster}",
            "cluster": cluster,
            "taskDefinitionArn": f"arn:aws:ecs:{self.region}:{ACCOUNT}:task-definition/{family}:1",
            "group": f"family:{family}",
            "launchType": kwargs.get("launchType", "EC2"),
            "lastStatus": "PROVISIONING",
            "desiredStatus": "RUNNING",
            "startedBy": kwargs.get("startedBy"),
            "overrides": copy.deepcopy(kwargs.get("overrides") or {"containerOverrides": []}),
            "tags": copy.deepcopy(kwargs.get("tags") or []),
            "createdAt": datetime.now(UTC),
        }

    def _lookup(self, cluster: str, ref: str) -> dict[str, Any] | None:
        task = self.tasks.get(ref) or next(
            (t for a, t in self.tasks.items() if a.rsplit("/", 1)[-1] == ref), None
        )
        return task if task is not None and task["cluster"] == cluster else None

    @staticmethod
    def _public(task: Mapping[str, Any], *, with_tags: bool) -> dict[str, Any]:
        out = {k: copy.deepcopy(v) for k, v in task.items() if k not in ("cluster", "tags")}
        if with_tags:
            out["tags"] = copy.deepcopy(task["tags"])
        return out
