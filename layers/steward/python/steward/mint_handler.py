"""Mint Lambda: `POST /v1/runtime/exchange`, a runtime's one-time ticket for its capability,
and `POST /v1/runtime/github-token`, its capability for an installation token scoped to its
task's repository (DESIGN sections 5, 6).

Both routes are outside the user authorizer: the ticket, or the capability, is the credential,
so no JWT claims are read. Neither the ticket nor the capability is ever logged; the request
body is not logged.

Environment: STEWARD_TABLE_PREFIX, STEWARD_CAPABILITY_KEY_ID (the KMS key id, also the
token's `kid`), STEWARD_CAPABILITY_LIFETIME (seconds, default 3600, at most 7200),
STEWARD_PRICE_TABLE (optional, read by the price table). The token route also reads
STEWARD_GITHUB_APP_ID, STEWARD_GITHUB_PRIVATE_KEY or STEWARD_GITHUB_PRIVATE_KEY_SECRET_ID
(Secrets Manager) and STEWARD_GITHUB_API_URL (unset: api.github.com; locally the twin). The
capability is read from `Authorization: Bearer`; neither it nor the token is logged.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from steward.adapters.capability_signer import CapabilityVerifier, KmsCapabilitySigner, kms_client
from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.api.requests import parse_body
from steward.config import Settings
from steward.domain.errors import StewardError, TooLarge
from steward.services.github_tokens import GitHubTokens
from steward.services.mint import Minter

logger = Logger(service="steward-mint")
app = APIGatewayHttpResolver()

EXCHANGE_PATH = "/v1/runtime/exchange"
GITHUB_TOKEN_PATH = "/v1/runtime/github-token"  # noqa: S105 - a route, not a secret
MAX_BODY_BYTES = 4096  # {"ticket": "<43 characters>"}; anything far bigger is not an exchange


class ExchangeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ticket: str = Field(min_length=1)


def minter_from_env() -> Minter:
    """Everything the exchange needs, bound to this process's environment (a cold start)."""
    from steward.domain.prices import load_price_table  # noqa: PLC0415 - reads a data file

    key_id = os.environ.get("STEWARD_CAPABILITY_KEY_ID", "")
    if not key_id:
        raise RuntimeError("STEWARD_CAPABILITY_KEY_ID is not set")
    lifetime = int(os.environ.get("STEWARD_CAPABILITY_LIFETIME", "3600"))
    tables = Tables.connect(Settings.from_env().table_prefix)
    return Minter(
        tickets=TicketStore(tables),
        tasks=TaskStore(tables),
        installations=InstallationStore(tables),
        signer=KmsCapabilitySigner(kms_client(), key_id),
        prices=load_price_table().entry,
        lifetime_seconds=lifetime,
    )


# Built once per execution environment; the local stack clears it to rebind to its endpoint.
minter = cache(minter_from_env)


def github_tokens_from_env() -> GitHubTokens:
    """The token route's parts, bound to this process's environment (a cold start): a
    verifier holding only the capability key's public half, the stores and the GitHub App."""
    from steward.adapters.github import github_app_from_env  # noqa: PLC0415 - off the exchange's cold start

    key_id = os.environ.get("STEWARD_CAPABILITY_KEY_ID", "")
    if not key_id:
        raise RuntimeError("STEWARD_CAPABILITY_KEY_ID is not set")
    tables = Tables.connect(Settings.from_env().table_prefix)
    return GitHubTokens(
        verify=CapabilityVerifier.from_kms(kms_client(), [key_id]).verify,
        tasks=TaskStore(tables),
        installations=InstallationStore(tables),
        github=github_app_from_env(),
    )


# Built once per execution environment, like `minter`; clear it to rebind (tests, local stack).
github_tokens = cache(github_tokens_from_env)


def _json(status: int, body: dict[str, Any]) -> Response[str]:
    return Response(status_code=status, content_type="application/json", body=json.dumps(body))


def _domain_error(exc: StewardError) -> Response[str]:
    if exc.status >= 500:
        logger.exception("internal error")
    return _json(exc.status, exc.to_body())


def _not_found(_: NotFoundError) -> Response[str]:
    path = app.current_event.path
    return _json(404, {"error": {"code": "not_found", "message": f"no route {path}"}})


def _unexpected(_: Exception) -> Response[str]:
    logger.exception("unhandled error")
    return _json(500, {"error": {"code": "internal", "message": "internal error"}})


# Registered by call rather than as decorators: Powertools' decorators are untyped.
app.exception_handler(StewardError)(_domain_error)
app.not_found(_not_found)
app.exception_handler(Exception)(_unexpected)


@app.post(EXCHANGE_PATH)
def exchange() -> Response[str]:
    raw = app.current_event.body
    if raw is not None and len(raw) > MAX_BODY_BYTES:
        raise TooLarge(f"request body is over {MAX_BODY_BYTES} bytes", field="body")
    body = parse_body(raw, ExchangeBody)
    result = minter().exchange(body.ticket)
    logger.info("capability minted", extra={"task_id": result["task_id"], "expires_at": result["expires_at"]})
    return _json(200, result)


@app.post(GITHUB_TOKEN_PATH)
def github_token() -> Response[str]:
    raw = app.current_event.body
    if raw is not None and len(raw) > MAX_BODY_BYTES:
        raise TooLarge(f"request body is over {MAX_BODY_BYTES} bytes", field="body")
    result = github_tokens().issue(app.current_event.headers.get("authorization"))
    logger.info(
        "github token issued",
        extra={"repository": result["repository"], "expires_at": result["expires_at"]},
    )
    return Response(
        status_code=200,
        content_type="application/json",
        body=json.dumps(result),
        headers={"Cache-Control": "no-store"},  # a credential: no cache may keep it
    )


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
