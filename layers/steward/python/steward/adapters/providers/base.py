"""The one normalized shape every provider adapter answers with.

The relay and the runner see Bedrock Converse responses, whatever the provider: adapters
own their wire formats and translate. Failures are `ProviderError` (502) with a message
that names the provider and an error code only: never request content, response bodies or
keys, since the relay may log or return it. Adapters raise it `from None` for the same
reason (a chained botocore or httpx exception can quote the request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from steward.domain.budget import Usage
from steward.domain.converse import ConverseRequest


@dataclass(frozen=True)
class ProviderResult:
    """A Converse response and the usage to charge for it (None: the provider reported none).

    `response` is `{"output": {"message": {"role": "assistant", "content": [...]}},
    "stopReason": ..., "usage": {"inputTokens", "outputTokens", "totalTokens",
    "cacheReadInputTokens"?, "cacheWriteInputTokens"?}, "metrics": {"latencyMs"}}`, with
    `usage` left out when the provider reported none.
    """

    response: dict[str, Any]
    usage: Usage | None


class Provider(Protocol):
    def converse(self, request: ConverseRequest, *, max_tokens: int) -> ProviderResult:
        """Send `request` with exactly `max_tokens` as its output limit (the relay may have
        lowered it to what the budget pays). ValueError if `max_tokens` < 1."""
        ...


def converse_usage(usage: Usage) -> dict[str, int]:
    """`usage` in Converse's shape; `totalTokens` counts every token kind once."""
    shaped = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens,
    }
    if usage.cache_read_tokens:
        shaped["cacheReadInputTokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        shaped["cacheWriteInputTokens"] = usage.cache_write_tokens
    return shaped


def check_max_tokens(max_tokens: int) -> None:
    """Every adapter sends exactly `max_tokens`; below 1 no provider takes it."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError("max_tokens must be an integer >= 1")
