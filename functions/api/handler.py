"""API Lambda: the client HTTP API behind API Gateway's JWT authorizer (docs/concepts/identity.md)."""

from steward.api.handler import lambda_handler

__all__ = ["lambda_handler"]
