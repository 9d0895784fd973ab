"""Mint Lambda: a runtime's one-time ticket for its capability, outside the user authorizer
(see steward.mint_handler)."""

from steward.mint_handler import lambda_handler

__all__ = ["lambda_handler"]
