"""Mint Lambda: `POST /v1/runtime/exchange`, a runtime's one-time ticket for its capability
(DESIGN sections 5, 6).

The route is outside the user authorizer: the ticket is the credential, so no JWT claims are
read. Neither the ticket nor the capability is ever logged; the request body is not logged.

Environment: STEWARD_TABLE_PREFIX, STEWARD_CAPABILITY_KEY_ID (the KMS key id, also the
token's `kid`), STEWARD_CAPABILITY_LIFETIME (seconds, default 3600, at most 7200),
STEWARD_PRICE_TABLE (optional, read by the price table).
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

from steward.adapters.capability_signer import KmsCapabilitySigner, kms_client
from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.api.requests import parse_body
from steward.config import Settings
from steward.domain.errors import StewardError, TooLarge
from steward.services.mint import Minter

logger = Logger(service="steward-mint")
app = APIGatewayHttpResolver()

EXCHANGE_PATH = "/v1/runtime/exchange"
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


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
