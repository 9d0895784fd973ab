"""Which heavy modules each Lambda handler loads at cold start (never how long it takes).

A cold start pays for its handler's imports before the first event. What only a call needs
loads with that call: boto3 with the first client (`steward.adapters.aws`), the relay's
service (its stores, the capability verifier and the Converse models) with `wiring.relay()`,
PyYAML with the first front matter parsed, the document parser with the first publish,
githubkit with the first GitHub call. Each row: a handler and the heavy modules it may load
at import, each with why; a fresh interpreter imports the handler and lists `sys.modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "steward" / "python" / "steward"

# Heavy, or what would pull much more in with it, and loaded by a call rather than an import.
HEAVY = (
    "boto3",  # with botocore's client machinery: about as long as all the rest of a cold start
    "botocore.session",
    "botocore.client",
    "s3transfer",
    "yaml",  # front matter parsing: a publish (API) or a kept document
    "githubkit",  # GitHub's client: installation tokens, pull requests
    "httpx",
    "aws_xray_sdk",  # tracing, inside Lambda only (test_observability)
    "jwt",  # capability verification, with the relay's or the runtime routes' service
    "pydantic.main",  # pydantic models: building each one's validator at import
    # The Task Document parser, with its models, budget math and the price table: a publish
    # (the API's plan service) or a kept document. Its size bound, which the HTTP boundary
    # checks, is `steward.domain.document_limits`.
    "steward.domain.documents",
    "steward.domain.prices",  # the price table's models: minting, admission, a publish
    "steward.cli",
    "steward.services.relay",  # the relay: stores, verifier, Converse models
    "steward.domain.redaction",  # compiles every redaction rule
)

# What each handler may load of HEAVY, and why; everything else in HEAVY must wait for a call.
# `botocore` itself is not heavy: Powertools imports the package (its user agent hook), not
# its client machinery.
ALLOWED: dict[str, dict[str, str]] = {
    # Powertools' resolver, the settings and the error mapping: every relay route needs the
    # service, which `wiring.relay()` builds on the first call, as each route's translation.
    "steward.relay_handler": {},
    # Bodies are parsed into pydantic models defined with the routes; the stores, the
    # redactor and the token route's GitHub App load with the service (wiring).
    "steward.runtime_handler": {"pydantic.main": "its request bodies are pydantic models"},
    # Request bodies and query strings are pydantic models; PyYAML loads with a publish.
    "steward.api.handler": {"pydantic.main": "its request bodies and queries are pydantic models"},
    "steward.webhook_handler": {},
    "steward.scheduler_handler": {},
    "steward.heartbeat_handler": {"pydantic.main": "the domain models it reads tasks into"},
    "steward.reaper_handler": {"pydantic.main": "the domain models it reads tasks into"},
}


def loaded_at_import(module: str) -> list[str]:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    # Outside Lambda (no LAMBDA_TASK_ROOT), as a test or the local stack imports it.
    env = {k: v for k, v in os.environ.items() if k != "LAMBDA_TASK_ROOT"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    modules: list[str] = json.loads(done.stdout)
    return modules


@pytest.mark.parametrize("handler", sorted(ALLOWED))
def test_a_handler_loads_at_import_only_the_heavy_modules_it_needs(handler: str) -> None:
    loaded = set(loaded_at_import(handler))
    assert handler in loaded
    unexpected = sorted(m for m in HEAVY if m in loaded and m not in ALLOWED[handler])
    assert unexpected == [], f"{handler} loads {unexpected} at import"


def test_every_handler_has_a_row() -> None:
    handlers = {f"steward.{p.stem}" for p in PACKAGE.glob("*_handler.py")} | {"steward.api.handler"}
    assert handlers == set(ALLOWED)
