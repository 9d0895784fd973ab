"""Reaper Lambda (EventBridge Scheduler): see steward.reaper_handler."""

from steward.reaper_handler import lambda_handler

__all__ = ["lambda_handler"]
