"""API Lambda entry point (functions/api/handler.py re-exports it)."""

from __future__ import annotations

from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from steward.api.app import create_app, logger
from steward.services.container import Services

services = cache(Services.from_env)
app = create_app(services)


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
