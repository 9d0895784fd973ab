"""The API's OpenAPI document: generated from the routes, committed current at
docs/openapi.json, complete (every route, its parameters, body, answers and errors) and served
at `GET /v1/openapi.json`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from steward.api.app import create_app
from steward.api.openapi import OPENAPI_PATH, document, document_text
from steward.wiring import Services

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.json"
REGENERATE = ".venv/bin/python tools/openapi.py"

# DESIGN section 4's routes (and the diff and rounds routes the console reads).
ROUTES = {
    ("put", "/v1/plans/{slug}"),
    ("post", "/v1/plans/{slug}/submit"),
    ("post", "/v1/plans/{slug}/confirm"),
    ("post", "/v1/plans/{slug}/archive"),
    ("get", "/v1/plans"),
    ("get", "/v1/plans/{slug}"),
    ("get", "/v1/plans/{slug}/diff"),
    ("get", "/v1/tasks"),
    ("get", "/v1/tasks/{task_id}"),
    ("get", "/v1/tasks/{task_id}/events"),
    ("get", "/v1/tasks/{task_id}/rounds"),
    ("get", "/v1/tasks/{task_id}/screen"),
    ("get", "/v1/tasks/{task_id}/artifacts"),
    ("get", "/v1/tasks/{task_id}/artifacts/{name}"),
    ("post", "/v1/tasks/{task_id}/retry"),
    ("post", "/v1/tasks/{task_id}/cancel"),
    ("get", "/v1/loop"),
    ("put", "/v1/loop"),
    ("get", OPENAPI_PATH),
}


def _no_services() -> Services:
    raise AssertionError("generating the document serves no request")


def generated() -> dict[str, Any]:
    return document(create_app(_no_services))


def test_the_committed_document_is_current() -> None:
    text = document_text(create_app(_no_services))
    committed = COMMITTED.read_text(encoding="utf-8") if COMMITTED.exists() else ""
    assert committed == text, f"docs/openapi.json is stale: run {REGENERATE}"


def test_the_tool_checks_the_committed_document() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import openapi as tool  # noqa: PLC0415 - tools/ is not a package

        assert tool.main(["--check"]) == 0
    finally:
        sys.path.remove(str(ROOT / "tools"))


def test_every_route_is_documented_with_its_answers_and_errors() -> None:
    doc = generated()
    found = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert found == ROUTES
    error = {"$ref": "#/components/schemas/ErrorAnswer"}
    for method, path in ROUTES:
        operation = doc["paths"][path][method]
        answers = operation["responses"]
        assert any(code.startswith("2") for code in answers), (method, path)
        assert answers["401"]["content"]["application/json"]["schema"] == error, (method, path)
        for code, answer in answers.items():
            if code.startswith(("4", "5")):
                assert answer["content"]["application/json"]["schema"] == error, (method, path, code)
        for name in (part[1:-1] for part in path.split("/") if part.startswith("{")):
            assert {"in": "path", "name": name} in [
                {"in": p["in"], "name": p["name"]} for p in operation.get("parameters", [])
            ], (method, path, name)
    bodies = {
        (m, p): doc["paths"][p][m]["requestBody"] for m, p in ROUTES if "requestBody" in doc["paths"][p][m]
    }
    assert set(bodies) == {
        ("put", "/v1/plans/{slug}"),
        ("post", "/v1/plans/{slug}/confirm"),
        ("put", "/v1/loop"),
    }
    assert bodies[("post", "/v1/plans/{slug}/confirm")]["required"] is False
    assert doc["paths"]["/v1/plans/{slug}"]["put"]["responses"]["422"]
    assert doc["paths"]["/v1/plans/{slug}"]["put"]["responses"]["413"]
    assert set(doc["paths"]["/v1/plans/{slug}"]["put"]["responses"]["200"]["links"]) == {
        "GetPlan",
        "SubmitPlan",
        "ConfirmPlan",
    }
    assert doc["components"]["securitySchemes"] == {
        "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    }
    assert doc["security"] == [{"bearer": []}]
    # Powertools' own 422 shape is never answered: the document does not name it.
    assert not {"HTTPValidationError", "ValidationError"} & set(doc["components"]["schemas"])


def test_the_console_is_no_part_of_the_document() -> None:
    from steward.api import console  # noqa: PLC0415
    from steward.config import Settings  # noqa: PLC0415

    app = create_app(_no_services)
    console.register(app, Settings)
    assert document_text(app) == COMMITTED.read_text(encoding="utf-8")
