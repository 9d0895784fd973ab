"""Serialize moto's DynamoDB so that races in tests exercise our logic, not moto's.

Real DynamoDB applies every single-item write atomically: a conditional `UpdateItem` either
sees the committed item and applies, or fails its condition. moto's DynamoDB is not
linearizable: two threads handling requests on one item can interleave between evaluating
the condition and writing the result (20 threads doing a conditional `ADD` overshot the
limit in 2 of 3 runs, docs/testing.md). Budget reservations, claims and lifecycle
transitions rely on that atomicity, so the local stack and the tests must not run on a
backend that lacks it.

`install_dynamodb_lock()` wraps `moto.dynamodb.responses.DynamoHandler.call_action` with one
process-wide re-entrant lock. Both front doors reach the backend through that method:
in-process `mock_aws` (botocore stubber -> `DynamoHandler.dispatch` -> `call_action`) and
moto server mode (werkzeug app -> the same `dispatch`). Every DynamoDB API call, including
transactions and batch writes, therefore runs alone. The lock is re-entrant so that a moto
code path that calls back into DynamoDB on the same thread cannot deadlock.

`install_number_arithmetic()` (which `install_dynamodb_lock()` installs too) fixes one more
difference: moto's `ADD` and `SET a = a + :v` read a number without a "." as an int, so a
number DynamoDB accepts in exponent notation (`0E-8`, `1E-9`: what `str()` of a small
`Decimal` gives, as a settlement's delta may be) failed there with a ValueError (an HTTP 500)
where DynamoDB adds it. Such operands are read as decimals; every other value as before.

`install_s3_lock()` does the same for moto's S3 (`S3Response.ambiguous_response`,
`bucket_response`, `key_response`): moto keeps an object's bytes in a temporary file and closes
it when the key is overwritten, so a concurrent read or overwrite of one key fails with "I/O
operation on closed file", which real S3 never does (its PUT is atomic, last writer wins).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

# moto imports a service's URL table on its first request; threads making their first S3
# requests together raced that import ("module moto.s3.urls not in sys.modules"): it is
# imported here, before any request can.
import moto.s3.urls  # noqa: F401
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.responses import DynamoHandler
from moto.s3.responses import S3Response

_LOCK = threading.RLock()
_INSTALL_GUARD = threading.Lock()
_MARKER = "__steward_serialized__"


def install_dynamodb_lock() -> None:
    """Make every moto DynamoDB request run under one process-wide lock. Idempotent."""
    with _INSTALL_GUARD:
        original: Callable[..., Any] = DynamoHandler.call_action
        if getattr(original, _MARKER, False):
            return

        @functools.wraps(original)
        def call_action(self: Any) -> Any:
            with _LOCK:
                return original(self)

        setattr(call_action, _MARKER, True)
        DynamoHandler.call_action = call_action  # type: ignore[method-assign]
    install_number_arithmetic()


def _plain(value: DynamoType) -> DynamoType:
    """A number in exponent notation written in plain decimals (the same number)."""
    if value.is_number() and "e" in value.value.lower():
        return DynamoType({"N": format(Decimal(value.value), "f")})
    return value


def install_number_arithmetic() -> None:
    """moto's number arithmetic accepts exponent notation, as DynamoDB does. Idempotent."""
    with _INSTALL_GUARD:
        for name in ("__add__", "__sub__"):
            original: Callable[..., Any] = getattr(DynamoType, name)
            if getattr(original, _MARKER, False):
                continue

            def operate(self: DynamoType, other: DynamoType, _original: Callable[..., Any] = original) -> Any:
                return _original(_plain(self), _plain(other))

            functools.update_wrapper(operate, original)
            setattr(operate, _MARKER, True)
            setattr(DynamoType, name, operate)


_S3_LOCK = threading.RLock()
_S3_ENTRY_POINTS = ("ambiguous_response", "bucket_response", "key_response")


def install_s3_lock() -> None:
    """Make every moto S3 request run under one process-wide lock. Idempotent."""
    with _INSTALL_GUARD:
        for name in _S3_ENTRY_POINTS:
            original: Callable[..., Any] = getattr(S3Response, name)
            if getattr(original, _MARKER, False):
                continue

            def serialized(*args: Any, __original: Callable[..., Any] = original, **kwargs: Any) -> Any:
                with _S3_LOCK:
                    return __original(*args, **kwargs)

            functools.update_wrapper(serialized, original)
            setattr(serialized, _MARKER, True)
            setattr(S3Response, name, serialized)
