"""The client API's OpenAPI 3 document, generated from its routes by Powertools.

Routes declare their parameters (typed `Query` annotations, validated by Powertools), their
answers (`responses=` naming the models of `steward.api.answers`) and their links; this
module adds what Powertools cannot take from a route whose body it does not parse: the
request bodies, which the routes still parse themselves (`steward.api.requests:parse_body`:
the 413 before any parsing, the nesting and number limits, the messages naming the field).
Each body is declared by the route (`body_of`) with the very model that parses it, so the
document and the parsing cannot drift. `docs/openapi.json` is this document, committed
(`tools/openapi.py` writes it; tests/integration/test_api_openapi.py checks it is current).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

TITLE = "Steward client API"
VERSION = "1"  # the `/v1` of the paths: bumped only with them
OPENAPI_PATH = "/v1/openapi.json"
SECURITY_SCHEME = "bearer"
_REF = "#/components/schemas/{model}"
DESCRIPTION = (
    "JSON over HTTPS. The caller is the JWT's `sub`: every read and write is scoped to it, and "
    'another user\'s ids answer 404. Errors answer `{"error": {"code", "message", "field"?, '
    '"line"?}}`. See DESIGN.md section 4.'
)

F = TypeVar("F", bound=Callable[..., Any])

# (method, OpenAPI path) -> (the model the route parses its body with, whether it is required)
_BODY_ATTRIBUTE = "__steward_body__"


def body_of(model: type[BaseModel], *, required: bool = True) -> Callable[[F], F]:
    """Declare the JSON body a route parses itself (put it under the route's decorator)."""

    def mark(func: F) -> F:
        setattr(func, _BODY_ATTRIBUTE, (model, required))
        return func

    return mark


def document(app: APIGatewayHttpResolver) -> dict[str, Any]:
    """The OpenAPI document of `app`'s routes (those not left out of the schema)."""
    doc: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            description=DESCRIPTION,
            security_schemes={SECURITY_SCHEME: HTTPBearer(bearerFormat="JWT")},
            security=[{SECURITY_SCHEME: []}],
        )
    )
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    # Powertools adds its own 422 error shapes for routes it validates; this API answers every
    # refusal as `ErrorAnswer` (mapped in `steward.api.http`), so they describe nothing here.
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        schemas.pop(unused, None)
    bodies = _declared_bodies(app)
    if bodies:
        models = sorted({model for model, _ in bodies.values()}, key=lambda m: m.__name__)
        _, defs = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
        for name, schema in defs.get("$defs", {}).items():
            schemas.setdefault(name, schema)
        for (method, path), (model, required) in bodies.items():
            operation = doc["paths"][path][method]
            operation["requestBody"] = {
                "required": required,
                "content": {"application/json": {"schema": {"$ref": _REF.format(model=model.__name__)}}},
            }
    return doc


def _declared_bodies(app: APIGatewayHttpResolver) -> dict[tuple[str, str], tuple[type[BaseModel], bool]]:
    found: dict[tuple[str, str], tuple[type[BaseModel], bool]] = {}
    for route in [*app._static_routes, *app._dynamic_routes]:  # Powertools keeps no public list
        declared = getattr(route.func, _BODY_ATTRIBUTE, None)
        if declared is not None and route.include_in_schema:
            found[(route.method.lower(), route.openapi_path)] = declared
    return found


def document_text(app: APIGatewayHttpResolver) -> str:
    """The document as committed: sorted keys, two-space indent, a final newline."""
    return json.dumps(document(app), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
