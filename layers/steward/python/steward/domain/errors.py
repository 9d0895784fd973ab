"""Domain errors. Each maps to one HTTP status and the JSON error of docs/concepts/identity.md.

Adapters translate storage failures (for example DynamoDB's ConditionalCheckFailed) into
these, so services and handlers never see a botocore exception.
"""

from __future__ import annotations

from pydantic import ValidationError


class StewardError(Exception):
    """Base class: `status` and `code` form the JSON error `{"error": {"code", "message"}}`."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, field: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.line = line

    def to_body(self) -> dict[str, object]:
        error: dict[str, object] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        if self.line is not None:
            error["line"] = self.line
        return {"error": error}


class BadRequest(StewardError):
    status = 400
    code = "bad_request"

    @classmethod
    def from_validation(cls, exc: ValidationError, prefix: str = "") -> BadRequest:
        """The first validation error, naming its field (`prefix` + its location)."""
        first = exc.errors()[0]
        location = ".".join(str(part) for part in first["loc"]) or "body"
        field = f"{prefix}{location}"
        message = str(first["msg"]).removeprefix("Value error, ")
        return cls(f"{field}: {message}", field=field)


class Unauthorized(StewardError):
    status = 401
    code = "unauthorized"


class BudgetExhausted(StewardError):
    status = 402
    code = "budget_exhausted"


class CallExceedsBudget(BudgetExhausted):
    """What is left of the budget pays for smaller calls, not this one: its maximum cost (its
    input's bound and the fewest output tokens it accepts) is more. A smaller maxTokens or a
    shorter input is admitted; a 402 like a spent budget, told apart by its code."""

    code = "call_exceeds_budget"


class Forbidden(StewardError):
    status = 403
    code = "forbidden"


class NotFound(StewardError):
    status = 404
    code = "not_found"


class NoSuchContent(NotFound):
    """A content hash (or its prefix) that was never the plan's, or content that is not kept:
    404 like any name that does not exist, told apart from "the plan changed" (409, a hash
    that was the plan's but is not its current one) by its code."""

    code = "no_such_content"


class LifecycleError(StewardError):
    """A transition the lifecycle of docs/concepts/lifecycle.md does not allow."""

    status = 409
    code = "lifecycle"


class Conflict(StewardError):
    """A concurrent writer won; the caller may retry with fresh state."""

    status = 409
    code = "conflict"


class TooLarge(StewardError):
    status = 413
    code = "too_large"


class InvalidDocument(StewardError):
    """A Task Document that cannot be accepted; names the field and the line."""

    status = 422
    code = "invalid_document"


class RetryLater(StewardError):
    """Budget room is held by calls in flight: retry after `retry_after` seconds."""

    status = 429
    code = "retry_later"

    def __init__(self, message: str, *, field: str | None = None, retry_after: int = 1) -> None:
        super().__init__(message, field=field)
        self.retry_after = retry_after


class BrakeEngaged(StewardError):
    """The operators' global brake refuses every new model call and spawn."""

    status = 503
    code = "brake_engaged"


class ProviderError(StewardError):
    status = 502
    code = "provider_error"


class ModelCannotAnswer(ProviderError):
    """The model can never do this task, whatever the attempt (the scripted model has no play
    for it): nothing was charged, and the message says what to do instead."""

    status = 422
    code = "model_cannot_answer"


class ProviderOutcomeUnknown(ProviderError):
    """The provider may have done, and billed, the work: it answered 200 with a body that
    could not be read, or the answer never came back in time. The relay charges the
    reservation in full rather than release it."""

    code = "provider_outcome_unknown"
