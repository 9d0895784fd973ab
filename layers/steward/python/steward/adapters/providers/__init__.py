"""Model providers of the relay, behind one `Provider` interface (see `base`).

Adapters are imported only when `provider_for` is called, so importing this package does
not import boto3 or httpx: the relay's cold start pays for the adapter it uses, no more.
"""

from __future__ import annotations

from collections.abc import Mapping

from steward.adapters.providers.base import Provider, ProviderResult
from steward.domain.prices import PriceEntry

__all__ = ["Provider", "ProviderResult", "provider_for"]


def provider_for(model_id: str, entry: PriceEntry, *, environ: Mapping[str, str]) -> Provider:
    """The adapter for `entry`, configured from it and from `environ` (the deployment's
    settings as the composition root read them, and the API key variables entries name).

    Cheap after the first call per provider kind: adapters share their clients (boto3,
    httpx) process-wide, and building a provider object does no I/O.
    """
    env = environ
    provider_model = entry.provider_model_for(model_id)
    if entry.provider == "bedrock":
        from steward.adapters.providers.bedrock import BedrockProvider  # noqa: PLC0415 (lazy by design)

        return BedrockProvider(provider_model, environ=env)
    if entry.provider == "openai":
        from steward.adapters.providers.openai_compat import OpenAICompatProvider  # noqa: PLC0415 (lazy by design)

        return OpenAICompatProvider(provider_model, entry, environ=env)
    from steward.adapters.providers.scripted import ScriptedProvider  # noqa: PLC0415 (lazy by design)

    return ScriptedProvider(provider_model, environ=env)
