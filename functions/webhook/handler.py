"""Webhook Lambda (Function URL): GitHub's signed deliveries (see steward.webhook_handler)."""

from steward.webhook_handler import lambda_handler

__all__ = ["lambda_handler"]
