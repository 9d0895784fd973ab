"""`steward local up`: the embedded local stack (DESIGN section 8).

Everything runs on loopback in this process: a moto server as the AWS endpoint (tables and
bucket created from the same specs as the CDK app) and the real API Lambda handler behind an
adapter that verifies dev bearer tokens as API Gateway's JWT authorizer would. Later
capabilities add the relay, the webhook receiver, the GitHub twin, the scheduler tick and
the local launcher here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from steward.adapters.dynamo import Tables
from steward.config import Settings
from steward.local.dev_auth import DevIssuer
from steward.local.http_adapter import LambdaHttpServer
from steward.local.moto_server import MotoServer

DEV_USERS = ("alice", "bob")
LOCAL_REGION = "us-east-1"


@dataclass
class LocalStack:
    state_file: Path = Path(".steward/local.json")
    host: str = "127.0.0.1"
    api_port: int = 0
    moto_port: int = 0
    _moto: MotoServer | None = field(default=None, init=False)
    _api: LambdaHttpServer | None = field(default=None, init=False)
    _saved_env: dict[str, str | None] = field(default_factory=dict, init=False)
    state: dict[str, Any] = field(default_factory=dict, init=False)

    @property
    def state_dir(self) -> Path:
        return self.state_file.parent

    def start(self) -> dict[str, Any]:
        """Start every part, then write the state file (only once everything answers)."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> dict[str, Any]:
        self._moto = MotoServer(port=self.moto_port)
        self._moto.start()
        settings = Settings.from_env()
        # The handlers read their configuration from the environment, as on Lambda; stop()
        # puts the environment back.
        self._set_env(
            {
                "AWS_ENDPOINT_URL": self._moto.url,
                "AWS_ACCESS_KEY_ID": "local",
                "AWS_SECRET_ACCESS_KEY": "local",  # moto accepts any key
                "AWS_DEFAULT_REGION": LOCAL_REGION,
                "AWS_REGION": LOCAL_REGION,
                "STEWARD_TABLE_PREFIX": settings.table_prefix,
                "STEWARD_ARTIFACTS_BUCKET": settings.artifacts_bucket,
                "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
                "AWS_PROFILE": None,
            }
        )
        Tables.connect(settings.table_prefix, region_name=LOCAL_REGION).create_all()
        boto3.client("s3", region_name=LOCAL_REGION).create_bucket(Bucket=settings.artifacts_bucket)

        issuer = DevIssuer.load_or_create(self.state_dir / "dev-jwt-key.pem")
        from steward.api import handler  # noqa: PLC0415 - configured by the environment set above

        # Build the handler's clients now, bound to this stack's endpoint (a cold start), so
        # a later change of the process environment cannot redirect them.
        handler.services.cache_clear()
        handler.services()
        lambda_handler = handler.lambda_handler

        self._api = LambdaHttpServer(
            lambda_handler,
            kind="http_api",
            authorizer=issuer.verify,
            host=self.host,
            port=self.api_port,
            function_name="steward-api",
        )
        self._api.start()
        self.state = {
            "api_url": self._api.url,
            "aws_endpoint_url": self._moto.url,
            "region": LOCAL_REGION,
            "table_prefix": settings.table_prefix,
            "users": {name: issuer.mint(name) for name in DEV_USERS},
        }
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.state_file.with_suffix(".tmp")
        # The file holds bearer tokens: readable by its owner only, replaced atomically.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.state, handle, indent=2)
        tmp.replace(self.state_file)
        return self.state

    def stop(self) -> None:
        """Stop every part this stack started; remove the state file (its URLs are dead)."""
        if self._api is not None:
            self._api.stop()
            self._api = None
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if self.state:
            self.state_file.unlink(missing_ok=True)
            self.state = {}
        self._set_env(self._saved_env, save=False)
        self._saved_env = {}

    def _set_env(self, values: dict[str, str | None], *, save: bool = True) -> None:
        for key, value in values.items():
            if save:
                self._saved_env.setdefault(key, os.environ.get(key))
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
