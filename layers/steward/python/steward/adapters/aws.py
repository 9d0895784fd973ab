"""Every boto3 client and resource Steward builds comes from here, with one botocore config.

Standard retry mode retries throttles and transient faults with backoff; every store write
is conditional, so a retried write that had in fact succeeded fails its condition instead
of applying twice, and the stores treat that as the no-op it is. Clients are thread-safe
once built, but building them on boto3's default session is not: the lock serializes that.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import boto3
from botocore.config import Config

BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=10)

# botocore logs request parameters at DEBUG, and RunTask's parameters carry the runtime's
# one-time ticket: whatever level a function logs at, these never go below INFO.
for _name in ("botocore", "boto3", "urllib3"):
    logging.getLogger(_name).setLevel(max(logging.INFO, logging.getLogger(_name).getEffectiveLevel()))

_LOCK = threading.Lock()


def client(service: str, *, config: Config | None = None, **kwargs: Any) -> Any:
    """A boto3 client for `service` with the shared config (merged with `config`, if given)."""
    merged = BOTO_CONFIG.merge(config) if config is not None else BOTO_CONFIG
    with _LOCK:
        return boto3.client(service, config=merged, **kwargs)  # type: ignore[call-overload]


def resource(service: str, **kwargs: Any) -> Any:
    with _LOCK:
        return boto3.resource(service, config=BOTO_CONFIG, **kwargs)  # type: ignore[call-overload]
