"""The seven Lambda functions: code from functions/<name>, the layers each needs, and an
environment generated from `steward.config.SETTINGS` (each function gets exactly the
variables tagged with it; every required one must have a value)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct
from steward.config import FUNCTIONS, Function, settings_for

from infra.layout import LAYERS, MEMORY, TIMEOUTS

ROOT = Path(__file__).resolve().parent.parent


def environment_for(function: Function, values: Mapping[str, str]) -> dict[str, str]:
    """The function's variables from `values` (env name -> value): exactly those
    `settings_for(function)` lists and `values` has, and every required one."""
    env: dict[str, str] = {}
    for setting in settings_for(function):
        if setting.env in values:
            env[setting.env] = values[setting.env]
        elif setting.required:
            raise ValueError(f"{function} requires {setting.env} and the stack gives it no value")
    return env


@dataclass(frozen=True)
class LayerSet:
    layers: dict[str, lambda_.ILayerVersion]


def build_layers(scope: Construct, layer_dir: Path) -> LayerSet:
    layers: dict[str, lambda_.ILayerVersion] = {}
    for name in ("common", "crypto", "github"):
        layers[name] = lambda_.LayerVersion(
            scope,
            f"{name.capitalize()}Layer",
            code=lambda_.Code.from_asset(str(layer_dir / name)),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.X86_64],
            description=f"Steward's locked {name} dependencies (tools/build_layers.py)",
        )
    layers["steward"] = lambda_.LayerVersion(
        scope,
        "StewardLayer",
        code=lambda_.Code.from_asset(
            str(ROOT / "layers" / "steward"), exclude=["**/__pycache__", "**/*.pyc"]
        ),
        compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
        compatible_architectures=[lambda_.Architecture.X86_64],
        description="The steward package",
    )
    return LayerSet(layers)


class StewardFunction(Construct):
    """One handler with its own role (no managed policy: logs are granted on its own log
    group) and a log group with retention."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        function: Function,
        layers: LayerSet,
        environment: Mapping[str, str],
        log_retention: logs.RetentionDays,
        timeout_seconds: int | None = None,
    ) -> None:
        super().__init__(scope, id)
        assert function in FUNCTIONS
        self.log_group = logs.LogGroup(
            self, "Logs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"steward {function}: exactly what its code calls",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[self.log_group.log_group_arn],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.X86_64,
            handler="handler.lambda_handler",
            code=lambda_.Code.from_asset(str(ROOT / "functions" / function), exclude=["**/__pycache__"]),
            layers=[layers.layers[name] for name in (*LAYERS[function], "steward")],
            environment=environment_for(function, environment),
            timeout=Duration.seconds(timeout_seconds or TIMEOUTS[function]),
            memory_size=MEMORY.get(function, 512),
            # Active: Lambda samples and records each invocation, and the handlers' Powertools
            # Tracer (steward.observability) adds their AWS and HTTP calls under it; with the
            # relay's stage traced too, a model call is one trace from API Gateway to Bedrock.
            tracing=lambda_.Tracing.ACTIVE,
            role=self.role,
            log_group=self.log_group,
            description=f"steward {function}",
        )
        self.name = function
