"""The launcher in AWS: one Fargate task per Steward task id (docs/architecture.md).

`launch` is ECS RunTask with a clientToken derived from the task id alone, so a replayed
launch with the same parameters returns the task ECS already started. A replay with a new
ticket differs in its parameters, and ECS answers ConflictException (its documented answer
to a reused token with other parameters); the launcher then finds the task it started
earlier by its `steward:task_id` tag among the cluster's tasks started by "steward" and
returns that one, starting nothing. ECS keeps a token for 24 hours; past that a replay
would start a second runtime, whose conditional claim fails (docs/testing.md: never rely
on a provider token alone).

The runtime's environment (docs/concepts/runner.md): this launcher overrides exactly
STEWARD_TASK_ID, STEWARD_TICKET, STEWARD_API_URL and STEWARD_RELAY_URL; the task definition
carries the deployment's runner bounds (STEWARD_RUNNER_*, STEWARD_CHECK_*, and from the image
STEWARD_SANDBOX_UID=10001 and STEWARD_WORK_DIR=/tmp, optionally STEWARD_KEEP_WORK). No
AWS_* variable is set by Steward, and the task definition has no task role, so ECS serves
the container no credentials (no AWS_CONTAINER_CREDENTIALS_RELATIVE_URI); what ECS itself
adds (AWS_REGION, AWS_DEFAULT_REGION, AWS_EXECUTION_ENV, ECS_CONTAINER_METADATA_URI*)
names no credential. Every write of the runtime goes through the `/v1/runtime/*` routes.

Every failure becomes LaunchError with the provider's error code or failure reason; the
ticket never appears in a message, and the botocore error (whose message could echo request
parameters) is not chained.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from steward.adapters.dynamo import error_code
from steward.domain.launch import LaunchError, RuntimeEndpoints
from steward.domain.models import Task

__all__ = ["STARTED_BY", "TASK_ID_TAG", "EcsClient", "FargateLauncher", "LaunchError", "client_token"]

STARTED_BY = "steward"
TASK_ID_TAG = "steward:task_id"
STOP_REASON = "steward: task cancelled"
_TOKEN_PREFIX = "steward-"  # noqa: S105 - an idempotency token, not a secret
_MISMATCH_CODES = frozenset({"ConflictException", "IdempotentParameterMismatch"})


class EcsClient(Protocol):
    """The part of boto3's ECS client the launcher uses."""

    def run_task(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def stop_task(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def list_tasks(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def describe_tasks(self, **kwargs: Any) -> Mapping[str, Any]: ...


def client_token(task_id: str) -> str:
    """RunTask's idempotency token for `task_id`: 64 characters of [a-z0-9-], the same for
    the same task id on every call, different for different ones."""
    return _TOKEN_PREFIX + hashlib.sha256(task_id.encode()).hexdigest()[: 64 - len(_TOKEN_PREFIX)]


class FargateLauncher:
    def __init__(
        self,
        ecs_client: EcsClient,
        *,
        cluster: str,
        task_definition: str,
        container_name: str,
        subnets: list[str],
        security_groups: list[str],
        endpoints: RuntimeEndpoints,
        assign_public_ip: bool = False,
    ) -> None:
        if not subnets:
            raise ValueError("a Fargate task needs at least one subnet")
        self._ecs = ecs_client
        self._cluster = cluster
        self._task_definition = task_definition
        self._container = container_name
        self._network = {
            "awsvpcConfiguration": {
                "subnets": list(subnets),
                "securityGroups": list(security_groups),
                "assignPublicIp": "ENABLED" if assign_public_ip else "DISABLED",
            }
        }
        self._endpoints = endpoints

    def environment(self, task: Task, ticket: str) -> list[dict[str, str]]:
        env = {
            "STEWARD_TASK_ID": task.id,
            "STEWARD_TICKET": ticket,
            "STEWARD_API_URL": self._endpoints.api_url,
            "STEWARD_RELAY_URL": self._endpoints.relay_url,
        }
        return [{"name": k, "value": v} for k, v in env.items()]

    def launch(self, task: Task, ticket: str) -> str:
        failure: LaunchError | None = None
        launched_before = False
        try:
            response = self._ecs.run_task(
                cluster=self._cluster,
                taskDefinition=self._task_definition,
                launchType="FARGATE",
                count=1,
                clientToken=client_token(task.id),
                startedBy=STARTED_BY,
                tags=[{"key": TASK_ID_TAG, "value": task.id}],
                propagateTags="TASK_DEFINITION",
                networkConfiguration=self._network,
                overrides={
                    "containerOverrides": [
                        {"name": self._container, "environment": self.environment(task, ticket)}
                    ]
                },
            )
        except ClientError as exc:
            code = error_code(exc) or "unknown"
            if code in _MISMATCH_CODES:
                launched_before = True
            else:
                failure = LaunchError(f"ECS RunTask for task {task.id} failed: {code}", reason=code)
        except BotoCoreError as exc:
            failure = LaunchError(
                f"ECS RunTask for task {task.id} failed: {type(exc).__name__}", reason=type(exc).__name__
            )
        # Outside the except blocks, so no botocore error rides along as an exception context.
        if failure is not None:
            raise failure
        if launched_before:
            return self._earlier_launch(task)
        return self._started_arn(task, response)

    def _started_arn(self, task: Task, response: Mapping[str, Any]) -> str:
        tasks = response.get("tasks") or []
        if tasks and tasks[0].get("taskArn"):
            return str(tasks[0]["taskArn"])
        failures = response.get("failures") or []
        reason = str(failures[0].get("reason", "unknown")) if failures else "no task started"
        raise LaunchError(f"ECS could not start a task for {task.id}: {reason}", reason=reason)

    def _earlier_launch(self, task: Task) -> str:
        """The ECS task an earlier launch of `task` started (a running one first)."""
        found = self._find(task, ("RUNNING", "STOPPED"))
        if not found:
            raise LaunchError(
                f"task {task.id} was launched under its client token, but its ECS task is gone",
                reason="launched_and_gone",
            )
        return found[0]

    def _find(self, task: Task, desired_statuses: tuple[str, ...]) -> list[str]:
        """ARNs of the ECS tasks tagged with `task`'s id, in the order of `desired_statuses`."""
        failure: LaunchError | None = None
        arns: list[str] = []
        try:
            for status in desired_statuses:
                for described in self._described(status):
                    tags = {t.get("key"): t.get("value") for t in described.get("tags") or []}
                    if tags.get(TASK_ID_TAG) == task.id:
                        arns.append(str(described["taskArn"]))
        except (ClientError, BotoCoreError) as exc:
            reason = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            failure = LaunchError(f"looking up the ECS task of {task.id} failed: {reason}", reason=reason)
        if failure is not None:
            raise failure
        return arns

    def _described(self, desired_status: str) -> Iterator[Mapping[str, Any]]:
        kwargs: dict[str, Any] = {
            "cluster": self._cluster,
            "startedBy": STARTED_BY,
            "desiredStatus": desired_status,
            "maxResults": 100,
        }
        while True:
            page = self._ecs.list_tasks(**kwargs)
            arns = list(page.get("taskArns") or [])
            if arns:
                described = self._ecs.describe_tasks(cluster=self._cluster, tasks=arns, include=["TAGS"])
                yield from described.get("tasks") or []
            token = page.get("nextToken")
            if not token:
                return
            kwargs["nextToken"] = token

    def stop(self, task: Task, launch_ref: str | None) -> None:
        """Stop the ECS task (without a reference: every running one tagged with the task id).
        A task ECS no longer knows, or one already stopped, is fine."""
        for arn in [launch_ref] if launch_ref else self._find(task, ("RUNNING",)):
            self._stop_one(task, arn)

    def _stop_one(self, task: Task, arn: str) -> None:
        failure: LaunchError | None = None
        try:
            self._ecs.stop_task(cluster=self._cluster, task=arn, reason=STOP_REASON)
        except ClientError as exc:
            code = error_code(exc)
            message = str(exc.response.get("Error", {}).get("Message", "")).lower()
            if code == "InvalidParameterException" and "not found" in message:
                return
            failure = LaunchError(f"ECS StopTask for task {task.id} failed: {code}", reason=code)
        except BotoCoreError as exc:
            failure = LaunchError(
                f"ECS StopTask for task {task.id} failed: {type(exc).__name__}", reason=type(exc).__name__
            )
        if failure is not None:
            raise failure
