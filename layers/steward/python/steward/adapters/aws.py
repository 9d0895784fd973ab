"""Every boto3 client and resource Steward builds comes from here, with one botocore config.

Standard retry mode retries throttles and transient faults with backoff; every store write
is conditional, so a retried write that had in fact succeeded fails its condition instead
of applying twice, and the stores treat that as the no-op it is. Clients are thread-safe
once built, but building them on boto3's default session is not: the lock serializes that.

boto3 (and botocore's client machinery) is imported by the first client or resource built,
not with this module: importing it is most of a cold start's import time, and a handler's
modules import the stores at load while only its first event needs a client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.config import Config

# botocore logs request parameters at DEBUG, and RunTask's parameters carry the runtime's
# one-time ticket: whatever level a function logs at, these never go below INFO.
for _name in ("botocore", "boto3", "urllib3"):
    logging.getLogger(_name).setLevel(max(logging.INFO, logging.getLogger(_name).getEffectiveLevel()))

_LOCK = threading.Lock()

# Called with each client built here (a resource's: its `meta.client`), once, as it is built.
# Empty in every deployment: the infra tests append the recorder that attributes each AWS
# call to the function whose parts made the client (tests/support/aws_calls.py), to prove
# every role grants what its code calls and nothing more.
CLIENT_HOOKS: list[Callable[[Any], None]] = []


@cache
def boto_config() -> Config:
    """The botocore config every client and resource is built with."""
    from botocore.config import Config  # noqa: PLC0415 - loaded with the first client

    return Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=10)


def client(service: str, *, config: Config | None = None, **kwargs: Any) -> Any:
    """A boto3 client for `service` with the shared config (merged with `config`, if given)."""
    import boto3  # noqa: PLC0415 - loaded with the first client

    merged = boto_config().merge(config) if config is not None else boto_config()
    with _LOCK:
        made = boto3.client(service, config=merged, **kwargs)  # type: ignore[call-overload]
    for hook in CLIENT_HOOKS:
        hook(made)
    return made


def resource(service: str, **kwargs: Any) -> Any:
    import boto3  # noqa: PLC0415 - loaded with the first resource

    with _LOCK:
        made = boto3.resource(service, config=boto_config(), **kwargs)  # type: ignore[call-overload]
    for hook in CLIENT_HOOKS:
        hook(made.meta.client)
    return made
