"""Model providers of the relay, behind one `Provider` interface (see `base`).

Adapters are imported only when `provider_for` is called, so importing this package does
not import boto3 or httpx: the relay's cold start pays for the adapter it uses, no more.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from steward.domain.prices import PriceEntry
from steward.providers.base import Provider, ProviderResult

__all__ = ["Provider", "ProviderResult", "provider_for"]


def provider_for(model_id: str, entry: PriceEntry, *, environ: Mapping[str, str] | None = None) -> Provider:
    """The adapter for `entry`, configured from it and from `environ` (default os.environ).

    Cheap after the first call per provider kind: adapters share their clients (boto3,
    httpx) process-wide, and building a provider object does no I/O.
    """
    env = os.environ if environ is None else environ
    provider_model = entry.provider_model_for(model_id)
    if entry.provider == "bedrock":
        from steward.providers.bedrock import BedrockProvider  # noqa: PLC0415 (lazy by design)

        return BedrockProvider(provider_model, environ=env)
    if entry.provider == "openai":
        from steward.providers.openai_compat import OpenAICompatProvider  # noqa: PLC0415 (lazy by design)

        return OpenAICompatProvider(provider_model, entry, environ=env)
    from steward.providers.scripted import ScriptedProvider  # noqa: PLC0415 (lazy by design)

    return ScriptedProvider(provider_model, environ=env)
