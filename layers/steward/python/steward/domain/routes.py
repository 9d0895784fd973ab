"""The paths of the routes the runtime calls: one list for the server (the runtime and relay
functions) and the client (`steward.adapters.runtime_api`), so the two cannot drift."""

from __future__ import annotations

RUNTIME_PREFIX = "/v1/runtime/"
CONSOLE_PREFIX = "/console"  # the web console's files: outside the JWT authorizer, served by the API
EXCHANGE_PATH = "/v1/runtime/exchange"
GITHUB_TOKEN_PATH = "/v1/runtime/github-token"  # noqa: S105 - a route, not a secret
CLAIM_PATH = "/v1/runtime/claim"
HEARTBEAT_PATH = "/v1/runtime/heartbeat"
EVENTS_PATH = "/v1/runtime/events"
FINISH_PATH = "/v1/runtime/finish"
ARTIFACTS_PATH = "/v1/runtime/artifacts"
CONVERSE_PATH = "/v1/relay/converse"

# The relay's REST API treats every media type as binary: API Gateway returns a Lambda's
# base64 body as bytes only when the request's first Accept header matches one, and boto3's
# converse_stream sends none. So every request body reaches the relay base64-encoded.
RELAY_BINARY_MEDIA_TYPES = ("*/*",)
