"""Relay Lambda (REST API): see steward.relay_handler."""

from steward.relay_handler import lambda_handler

__all__ = ["lambda_handler"]
