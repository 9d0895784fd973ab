"""Runtime Lambda: the `/v1/runtime/*` routes a runtime calls with its ticket or capability,
outside the user authorizer (see steward.runtime_handler)."""

from steward.runtime_handler import lambda_handler

__all__ = ["lambda_handler"]
