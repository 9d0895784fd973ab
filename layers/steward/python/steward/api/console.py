"""The web console's static files, served by the API function on the API's own origin.

One origin for the console and `/v1/*` means no CORS and a Content-Security-Policy of
`'self'`: no inline script, no third-party origin (the OIDC token endpoint aside, which the
console must reach to finish a sign-in). The routes sit outside the JWT authorizer (a
browser fetches the page before it has a token); they serve only the files shipped in
`steward/console/` and the sign-in settings, never data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from steward.config import Settings
from steward.domain.errors import NotFound
from steward.domain.routes import CONSOLE_PREFIX as PREFIX

FILES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
SCOPES = "openid email"
_HOST = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?")


@cache
def _file(name: str) -> str:
    return resources.files("steward").joinpath(f"console/{name}").read_text(encoding="utf-8")


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    # Only a host[:port]: anything else in a policy (a space, a `;`) would add to it.
    if parts.scheme != "https" or not _HOST.fullmatch(parts.netloc):
        return None
    return f"https://{parts.netloc}"


def content_security_policy(settings: Settings) -> str:
    """Everything from this origin only; the OIDC token endpoint is the one other place the
    page may connect to (an https origin, or nothing)."""
    connect = " ".join(o for o in ("'self'", _origin(settings.console_token_url)) if o)
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src {connect}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def sign_in_config(settings: Settings) -> dict[str, Any]:
    """What the page needs to sign a person in and to choose how it shows live output (the
    local stack streams it; in AWS the page polls the events and the screen tail)."""
    config: dict[str, Any] = {
        "sign_in": settings.console_sign_in,
        "live_output": "stream" if settings.console_sign_in == "local" else "poll",
    }
    if settings.console_sign_in == "oidc":
        config |= {
            "client_id": settings.require("console_client_id"),
            "authorize_url": settings.require("console_authorize_url"),
            "token_url": settings.require("console_token_url"),
            "scopes": SCOPES,
        }
    return config


def _headers(settings: Settings) -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(settings),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-cache",
    }


def register(app: APIGatewayHttpResolver, settings: Callable[[], Settings]) -> None:
    """The console's routes on the API's resolver."""

    # The console's files are no part of the client API: left out of its OpenAPI document.
    @app.get(PREFIX, include_in_schema=False)
    def console_root() -> Response[str]:
        return Response(status_code=302, headers={"Location": f"{PREFIX}/", **_headers(settings())}, body="")

    @app.get(f"{PREFIX}/", include_in_schema=False)
    def console_index() -> Response[str]:
        return _static("index.html")

    @app.get(f"{PREFIX}/config.json", include_in_schema=False)
    def console_config() -> Response[str]:
        return Response(
            status_code=200,
            content_type="application/json",
            body=json.dumps(sign_in_config(settings())),
            headers=_headers(settings()),
        )

    @app.get(f"{PREFIX}/<name>", include_in_schema=False)
    def console_file(name: str) -> Response[str]:
        return _static(name)

    def _static(name: str) -> Response[str]:
        if name not in FILES:  # answered here, not by the error handler: with the page's headers
            error = NotFound(f"the console has no file {name[:64]!r}", field="path")
            return Response(
                status_code=404,
                content_type="application/json",
                body=json.dumps(error.to_body()),
                headers=_headers(settings()),
            )
        return Response(
            status_code=200, content_type=FILES[name], body=_file(name), headers=_headers(settings())
        )
