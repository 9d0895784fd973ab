"""Scheduler Lambda: EventBridge Scheduler's rate target; ticks every live user through the
heartbeat FIFO queue (docs/architecture.md)."""

from steward.scheduler_handler import lambda_handler

__all__ = ["lambda_handler"]
