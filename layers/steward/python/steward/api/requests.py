"""Request bodies, validated by pydantic at the boundary. The routes parse them here rather
than through Powertools' validation: the size check (413) comes before any parsing, and JSON
that Python cannot parse (nested too deeply, an integer too long) is a 400 naming `body`, not
a 500. Query strings are typed route parameters that Powertools validates (`steward.api.app`);
`steward.api.openapi` declares these bodies in the OpenAPI document."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from steward.api.http import check_body_size
from steward.domain.document_limits import MAX_DOCUMENT_BYTES
from steward.domain.errors import BadRequest

# JSON escaping can at most double a document's size (quotes, backslashes, control chars
# are rarer still); anything bigger cannot hold a valid document.
MAX_BODY_BYTES = 2 * MAX_DOCUMENT_BYTES + 4096

M = TypeVar("M", bound=BaseModel)


class PublishBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    markdown: str


class ConfirmBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # What the person reviewed: the content hash or its first 12 or more hex characters (the
    # service checks its form, `steward.domain.plan_diff:given_hash`); when given, confirm
    # fails with 409 if the plan changed since, 404 if the plan never had that content.
    content_hash: str | None = Field(default=None, max_length=64)


def parse_body(raw: str | None, model: type[M], *, optional: bool = False) -> M:
    if raw is None or raw.strip() == "":
        if optional:
            return model()
        raise BadRequest("request body is required (JSON object)", field="body")
    check_body_size(raw, MAX_BODY_BYTES)
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc.msg}", field="body") from exc
    except ValueError as exc:  # e.g. an integer too long to convert
        raise BadRequest(f"request body is not valid JSON: {exc}", field="body") from exc
    except RecursionError as exc:  # nested deeper than Python parses
        raise BadRequest("request body is nested too deeply", field="body") from exc
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object", field="body")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest.from_validation(exc) from exc
