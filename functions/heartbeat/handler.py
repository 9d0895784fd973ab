"""Heartbeat Lambda (SQS FIFO, group = user): see steward.heartbeat_handler."""

from steward.heartbeat_handler import lambda_handler

__all__ = ["lambda_handler"]
