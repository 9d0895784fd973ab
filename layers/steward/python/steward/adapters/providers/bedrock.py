"""Amazon Bedrock through the Converse API (boto3 `bedrock-runtime`).

The request is already in Bedrock's shape, so the adapter only swaps in the model id at the
provider and the `maxTokens` the relay settled on, and maps the reported usage to `Usage`
(Bedrock already counts cache reads and writes apart from `inputTokens`).

Retries: botocore's standard mode retries throttling, 5xx and connection errors, which the
service does not bill. It would also retry a read timeout, after which Bedrock may have
billed the first attempt: the read timeout is therefore long (10 minutes), and the relay's
own time limit must stay below it so that a call is abandoned (its reservation then charged
in full by the reaper) rather than silently paid twice.

`STEWARD_BEDROCK_ENDPOINT_URL` points the client elsewhere (the local Converse server).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError

from steward.adapters import aws
from steward.adapters.providers.base import ProviderResult, check_max_tokens
from steward.domain.budget import Usage
from steward.domain.converse import ConverseRequest, model_input, wire
from steward.domain.errors import ProviderError, ProviderOutcomeUnknown

ENDPOINT_ENV = "STEWARD_BEDROCK_ENDPOINT_URL"
READ_TIMEOUT_ENV = "STEWARD_BEDROCK_READ_TIMEOUT_SECONDS"
CONNECT_TIMEOUT_SECONDS = 5
# Under the relay function's own timeout (`infra.layout.TIMEOUTS`, 300 s; the CDK app's
# `relayTimeoutSeconds` sets both): a call that would outlast it ends as the provider's error
# the relay answers and settles, not as a killed Lambda whose reservation the reaper charges
# in full (`tests/infra`: the deadlines' order).
READ_TIMEOUT_SECONDS = 240
MAX_ATTEMPTS = 3  # in total, the first attempt included

_ERROR_CODE = re.compile(r"^[A-Za-z0-9_.]{1,80}$")
_CLIENTS: dict[tuple[str | None, str | None, int, int], Any] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(endpoint_url: str | None, region: str | None, max_attempts: int, read_timeout: int) -> Any:
    """One shared client per endpoint, region, retry budget and deadline: clients are
    thread-safe and costly to build, and the relay builds a provider per call."""
    key = (endpoint_url, region, max_attempts, read_timeout)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            config = Config(
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                read_timeout=read_timeout,
                retries={"mode": "standard", "total_max_attempts": max_attempts},
            )
            client = aws.client(
                "bedrock-runtime", endpoint_url=endpoint_url, region_name=region, config=config
            )
            _CLIENTS[key] = client
        return client


class BedrockProvider:
    """`Provider` for Bedrock models; `model_id` is the id Bedrock knows (or an inference profile)."""

    def __init__(
        self, model_id: str, *, environ: Mapping[str, str], max_attempts: int = MAX_ATTEMPTS
    ) -> None:
        self.model_id = model_id
        endpoint_url = environ.get(ENDPOINT_ENV) or None
        region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
        read_timeout = int(environ.get(READ_TIMEOUT_ENV) or READ_TIMEOUT_SECONDS)
        self._client = _client(endpoint_url, region, max_attempts, read_timeout)

    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        check_max_tokens(max_tokens)
        inference: dict[str, Any] = wire(request.inferenceConfig) if request.inferenceConfig else {}
        inference["maxTokens"] = max_tokens
        started = time.monotonic()
        try:
            raw = self._client.converse(
                modelId=self.model_id, **model_input(request), inferenceConfig=inference
            )
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            raise ProviderError(f"bedrock: {code if _ERROR_CODE.match(code) else 'error'}") from None
        except ReadTimeoutError:  # the request went out: Bedrock may have billed it
            raise ProviderOutcomeUnknown("bedrock: ReadTimeoutError") from None
        except BotoCoreError as exc:  # connection, parameter validation: the type says enough
            raise ProviderError(f"bedrock: {type(exc).__name__}") from None
        response = {key: value for key, value in raw.items() if key != "ResponseMetadata"}
        if "output" not in response or "stopReason" not in response:
            raise ProviderOutcomeUnknown("bedrock: malformed response")
        usage = usage_from_converse(response.get("usage"))
        if usage is None:
            response.pop("usage", None)
        response.setdefault("metrics", {"latencyMs": int((time.monotonic() - started) * 1000)})
        return ProviderResult(response=response, usage=usage)


def usage_from_converse(reported: Any) -> Usage | None:
    """Converse's usage as `Usage`; None when absent or malformed (the relay then charges
    the reservation in full rather than trust it)."""
    if not isinstance(reported, dict):
        return None
    try:
        return Usage(
            input_tokens=reported["inputTokens"],
            output_tokens=reported["outputTokens"],
            cache_read_tokens=reported.get("cacheReadInputTokens", 0),
            cache_write_tokens=reported.get("cacheWriteInputTokens", 0),
        )
    except (KeyError, ValueError):
        return None
