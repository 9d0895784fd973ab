"""The paths of the routes the runtime calls: one list for the server (the runtime and relay
functions) and the client (`steward.adapters.runtime_api`), so the two cannot drift."""

from __future__ import annotations

RUNTIME_PREFIX = "/v1/runtime/"
EXCHANGE_PATH = "/v1/runtime/exchange"
GITHUB_TOKEN_PATH = "/v1/runtime/github-token"  # noqa: S105 - a route, not a secret
CLAIM_PATH = "/v1/runtime/claim"
HEARTBEAT_PATH = "/v1/runtime/heartbeat"
EVENTS_PATH = "/v1/runtime/events"
FINISH_PATH = "/v1/runtime/finish"
ARTIFACTS_PATH = "/v1/runtime/artifacts"
CONVERSE_PATH = "/v1/relay/converse"
