"""The client API end to end: HTTP through the local adapter (dev JWT verified as API
Gateway's authorizer would), the real Lambda handler, DynamoDB and S3 on a moto server."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.config import Settings
from steward.domain.ids import plan_id
from steward.local.dev_auth import DevIssuer
from steward.local.stack import LocalStack
from steward.wiring import Services

from tests.support.documents import DOCUMENT_REPO, document, numbered
from tests.support.installations import link_installation
from tests.support.plans import spawn_item
from tests.support.rounds import ASKED_ON, FAILED_BECAUSE, FAILING_CHECK, PUSHED, REVIEWER, seed_rounds

PLAN_KEYS = {"id", "slug", "status", "repo", "title", "content_hash", "items", "created_at", "updated_at"}
TASK_KEYS = {"id", "plan_slug", "ordinal", "attempt", "status", "classification", "branch", "pr_url"}
TASK_KEYS |= {"cost_usd", "created_at", "updated_at"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(state_file=tmp_path_factory.mktemp("stack") / "local.json") as stack:
        # Publish refuses a repository no live installation of the user holds: alice's and
        # carol's hold the documents' repository (bob has none).
        endpoint = {"endpoint_url": stack.state["aws_endpoint_url"], "region_name": stack.state["region"]}
        tables = Tables.connect(stack.state["table_prefix"], **endpoint)
        for user in ("alice", "carol"):
            link_installation(tables, user, DOCUMENT_REPO)
        # These tests make alice's tasks themselves (`spawn_item`): her loop, which a confirm
        # wakes at once, stays paused so it spawns none of its own.
        paused = Api(stack.state["api_url"], stack.state["users"]["alice"])(
            "PUT", "/v1/loop", {"paused": True}
        )
        assert paused.status_code == 200, paused.text
        yield stack


@pytest.fixture
def backend(stack: LocalStack) -> Services:
    """Direct access to the stack's storage, for what only later capabilities do via the API
    (spawning tasks, writing artifacts)."""
    endpoint = {"endpoint_url": stack.state["aws_endpoint_url"], "region_name": stack.state["region"]}
    tables = Tables.connect(stack.state["table_prefix"], **endpoint)
    settings = Settings(table_prefix=stack.state["table_prefix"])
    return Services.build(
        settings, tables, ArtifactStore(settings.artifacts_bucket, client=boto3.client("s3", **endpoint))
    )


class Api:
    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def __call__(self, method: str, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        return self.http.request(method, path, json=body, **kwargs)


@pytest.fixture
def alice(stack: LocalStack) -> Api:
    return Api(stack.state["api_url"], stack.state["users"]["alice"])


@pytest.fixture
def bob(stack: LocalStack) -> Api:
    return Api(stack.state["api_url"], stack.state["users"]["bob"])


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return dict(body["error"])


def test_state_file_lists_endpoints_and_users(stack: LocalStack) -> None:
    state = json.loads(Path(stack.state_file).read_text())
    assert {"api_url", "aws_endpoint_url", "users"} <= set(state)
    assert set(state["users"]) == {"alice", "bob"}
    assert stack.state_file.stat().st_mode & 0o777 == 0o600


def test_publish_confirm_and_read_back(alice: Api) -> None:
    published = alice("PUT", "/v1/plans/api-basic", {"markdown": document(*numbered(3))})
    assert published.status_code == 200
    plan = published.json()
    assert set(plan) >= PLAN_KEYS
    assert plan["status"] == "draft"
    assert [(i["ordinal"], i["status"], i["task_id"]) for i in plan["items"]] == [
        (1, "pending", None),
        (2, "pending", None),
        (3, "pending", None),
    ]
    confirmed = alice("POST", "/v1/plans/api-basic/confirm", {"content_hash": plan["content_hash"]})
    assert confirmed.status_code == 200
    assert confirmed.json()["status"] == "confirmed"
    assert alice("POST", "/v1/plans/api-basic/confirm").json()["status"] == "confirmed"
    assert alice("GET", "/v1/plans/api-basic").json() == confirmed.json()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("not json", "body"),
        ("[1, 2]", "body"),
        ("{}", "markdown"),
        ('{"markdown": "x", "colour": "red"}', "colour"),
        ('{"markdown": 7}', "markdown"),
        ("[" * 5000 + "]" * 5000, "body"),  # nested deeper than Python parses
        ('{"markdown": ' + "{" * 5000, "body"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(alice: Api, body: str, field: str) -> None:
    response = alice.http.put(
        "/v1/plans/bad-body", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert error_of(response)["field"] == field
    assert alice("GET", "/v1/plans/bad-body").status_code == 404  # nothing written


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/plans/deep/confirm"), ("PUT", "/v1/loop")])
def test_a_body_nested_too_deeply_is_400_on_every_route_that_takes_one(
    alice: Api, method: str, path: str
) -> None:
    response = alice.http.request(
        method, path, content="[" * 5000 + "]" * 5000, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert error_of(response)["field"] == "body"


def test_a_cursor_that_decodes_to_deep_json_is_400(alice: Api) -> None:
    cursor = base64.urlsafe_b64encode(b"[" * 1500).decode().rstrip("=")
    response = alice("GET", "/v1/plans", params={"cursor": cursor})
    assert response.status_code == 400
    assert error_of(response)["field"] == "cursor"


def encoded_cursor(key: Any) -> str:
    """A cursor as the API encodes one (base64url of the JSON key, unpadded): forged here."""
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


# Each list route, its query, and a well-formed cursor of alice's own (the page key the
# route's table or index returns); the rows below forge it.
CURSOR_ROUTES = {
    "plans": ("/v1/plans", {}, {"user": "alice", "slug": "cursor-plan"}),
    "tasks": ("/v1/tasks", {}, {"task_id": "t1", "user": "alice", "created_key": "2026-01-01T00:00:00Z#t1"}),
    "tasks of a plan": (
        "/v1/tasks",
        {"plan": "cursor-plan"},
        {
            "task_id": "t1",
            "plan_id": plan_id("alice", "cursor-plan"),
            "created_key": "2026-01-01T00:00:00Z#t1",
        },
    ),
}
WRONG_TYPES: list[Any] = [5, 1.5, True, None, [], ["alice"], {"S": "x"}, ""]
NOT_OBJECTS: list[Any] = [[], ["alice"], "alice", 7, None, True]


def forged_cursors(key: dict[str, Any]) -> list[tuple[str, Any]]:
    """(what is wrong, the decoded cursor): every key of the right user with a wrong type,
    each key missing, extra keys, JSON that is not an object, and another user's cursor."""
    rows: list[tuple[str, Any]] = []
    for name in key:
        rows += [(f"{name} = {value!r}", {**key, name: value}) for value in WRONG_TYPES]
        rows.append((f"{name} missing", {k: v for k, v in key.items() if k != name}))
    rows += [
        ("an extra key", {**key, "extra": "x"}),
        ("an extra attribute of the item", {**key, "status": "queued"}),
        ("an empty object", {}),
    ]
    rows += [(f"not an object: {value!r}", value) for value in NOT_OBJECTS]
    owner = "plan_id" if "plan_id" in key else "user"
    other = plan_id("bob", "cursor-plan") if owner == "plan_id" else "bob"
    rows.append(("another user's cursor", {**key, owner: other}))
    return rows


@pytest.mark.parametrize("route", list(CURSOR_ROUTES))
def test_a_forged_cursor_is_400_naming_cursor_on_every_list_route(alice: Api, route: str) -> None:
    path, query, key = CURSOR_ROUTES[route]
    alice("PUT", "/v1/plans/cursor-plan", {"markdown": document("Listed")})
    well_formed = alice("GET", path, params={**query, "cursor": encoded_cursor(key)})
    assert well_formed.status_code == 200, well_formed.text  # the rows below differ only by the forgery
    wrong = {}
    for what, forged in forged_cursors(key):
        response = alice("GET", path, params={**query, "cursor": encoded_cursor(forged)})
        if response.status_code != 400 or error_of(response).get("field") != "cursor":
            wrong[what] = (response.status_code, response.text[:200])
    assert wrong == {}


def test_task_lists_page_with_the_cursors_they_return(alice: Api, backend: Services) -> None:
    alice("PUT", "/v1/plans/paged-tasks", {"markdown": document(*numbered(2))})
    alice("POST", "/v1/plans/paged-tasks/confirm")
    plan = backend.plans.get("alice", "paged-tasks")
    spawned = {spawn_item(backend, plan, ordinal)[0].id for ordinal in (1, 2)}
    for query in ({}, {"plan": "paged-tasks"}):
        seen: list[str] = []
        cursor = None
        while True:
            page = alice(
                "GET", "/v1/tasks", params={**query, "limit": 1, **({"cursor": cursor} if cursor else {})}
            )
            assert page.status_code == 200, page.text
            seen += [task["id"] for task in page.json()["tasks"]]
            cursor = page.json()["next"]
            if not cursor:
                break
        assert spawned <= set(seen), query


@pytest.mark.parametrize(
    ("markdown", "field", "line"),
    [
        ("# no front matter\n- [ ] x\n", "front_matter", 1),
        ("---\nrepo: nope\nchecks: [pytest]\n---\n- [ ] x\n", "front_matter.repo", 2),
        ("---\nrepo: a/b\nchecks: []\n---\n- [ ] x\n", "front_matter.checks", 3),
        ("---\nrepo: a/b\nchecks: [t]\nbudget_usd: 0\n---\n- [ ] x\n", "front_matter.budget_usd", 4),
        ("---\nrepo: a/b\nchecks: [t]\nbudget_usd: 1000\n---\n- [ ] x\n", "front_matter.budget_usd", 4),
        ("---\nrepo: a/b\nchecks: [t]\ncolour: red\n---\n- [ ] x\n", "front_matter.colour", 4),
        ("---\nrepo: a/b\nchecks: [t]\n---\n# Title only\n", "items", 5),
    ],
)
def test_invalid_documents_are_422_with_field_and_line(
    alice: Api, markdown: str, field: str, line: int
) -> None:
    response = alice("PUT", "/v1/plans/invalid-doc", {"markdown": markdown})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["field"], error["line"]) == (field, line)
    assert alice("GET", "/v1/plans/invalid-doc").status_code == 404


def test_too_many_items_and_too_large_documents(alice: Api) -> None:
    response = alice("PUT", "/v1/plans/big", {"markdown": document(*numbered(101))})
    assert response.status_code == 422
    assert error_of(response)["field"] == "items"
    huge = document("One\n" + "x" * (256 * 1024))
    response = alice("PUT", "/v1/plans/big", {"markdown": huge})
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"
    assert alice("GET", "/v1/plans/big").status_code == 404


@pytest.mark.parametrize("slug", ["Upper", "-dash", "a" * 64, "under_score"])
def test_bad_slug_is_400(alice: Api, slug: str) -> None:
    response = alice("PUT", f"/v1/plans/{slug}", {"markdown": document("One")})
    assert response.status_code == 400
    assert error_of(response)["field"] == "slug"


def test_missing_or_invalid_token_is_401(stack: LocalStack, tmp_path: Path) -> None:
    url = stack.state["api_url"]
    stranger = DevIssuer.load_or_create(tmp_path / "other.pem").mint("alice")
    for token in (None, "not-a-jwt", stranger, stack.state["users"]["alice"][:-4] + "AAAA"):
        response = Api(url, token)("GET", "/v1/plans")
        assert response.status_code == 401
        assert error_of(response)["code"] == "unauthorized"


def test_lifecycle_violation_is_409(alice: Api) -> None:
    alice("PUT", "/v1/plans/archived", {"markdown": document("One")})
    assert alice("POST", "/v1/plans/archived/archive").json()["status"] == "archived"
    for action in ("confirm", "submit"):
        response = alice("POST", f"/v1/plans/archived/{action}")
        assert response.status_code == 409
        assert error_of(response)["code"] == "lifecycle"
    assert alice("PUT", "/v1/plans/archived", {"markdown": document("Two")}).status_code == 409


def test_another_users_plan_and_task_are_404(alice: Api, bob: Api, backend: Services) -> None:
    alice("PUT", "/v1/plans/private", {"markdown": document("Secret work")})
    alice("POST", "/v1/plans/private/confirm")
    task, _ = spawn_item(backend, backend.plans.get("alice", "private"), 1)
    for method, path in [
        ("GET", "/v1/plans/private"),
        ("POST", "/v1/plans/private/confirm"),
        ("POST", "/v1/plans/private/submit"),
        ("POST", "/v1/plans/private/archive"),
        ("GET", f"/v1/tasks/{task.id}"),
        ("GET", f"/v1/tasks/{task.id}/events"),
        ("GET", f"/v1/tasks/{task.id}/screen"),
        ("GET", f"/v1/tasks/{task.id}/artifacts/diff.patch"),
        ("POST", f"/v1/tasks/{task.id}/cancel"),
        ("POST", f"/v1/tasks/{task.id}/retry"),
    ]:
        response = bob(method, path)
        assert response.status_code == 404, (method, path)
    assert bob("GET", "/v1/tasks").json()["tasks"] == []
    assert bob("GET", "/v1/tasks", params={"plan": "private"}).json()["tasks"] == []
    assert all(p["slug"] != "private" for p in bob("GET", "/v1/plans").json()["plans"])
    # bob's requests changed nothing
    assert alice("GET", "/v1/plans/private").json()["status"] == "in_progress"
    assert alice("GET", f"/v1/tasks/{task.id}").json()["status"] == "queued"


def test_list_routes_paginate(stack: LocalStack, alice: Api, bob: Api) -> None:
    carol = Api(
        stack.state["api_url"], DevIssuer.load_or_create(stack.state_dir / "dev-jwt-key.pem").mint("carol")
    )
    for n in range(5):
        carol("PUT", f"/v1/plans/page-{n}", {"markdown": document(f"Item {n}")})
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = carol("GET", "/v1/plans", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        seen += [p["slug"] for p in page["plans"]]
        pages += 1
        cursor = page["next"]
        if not cursor:
            break
    assert sorted(seen) == [f"page-{n}" for n in range(5)]
    assert pages >= 3
    first = carol("GET", "/v1/plans", params={"limit": 2}).json()
    assert bob("GET", "/v1/plans", params={"cursor": first["next"]}).status_code == 400
    assert carol("GET", "/v1/plans", params={"cursor": "%%%"}).status_code == 400
    assert carol("GET", "/v1/plans", params={"limit": 0}).json()["error"]["field"] == "limit"


def test_tasks_events_screen_and_artifacts(
    alice: Api, bob: Api, backend: Services, stack: LocalStack
) -> None:
    alice("PUT", "/v1/plans/with-tasks", {"markdown": document(*numbered(2))})
    alice("POST", "/v1/plans/with-tasks/confirm")
    task, _ = spawn_item(backend, backend.plans.get("alice", "with-tasks"), 2)

    listed = alice("GET", "/v1/tasks", params={"plan": "with-tasks"}).json()
    assert [t["id"] for t in listed["tasks"]] == [task.id]
    shown = alice("GET", f"/v1/tasks/{task.id}").json()
    assert set(shown) >= TASK_KEYS
    assert (shown["plan_slug"], shown["ordinal"], shown["attempt"], shown["status"]) == (
        "with-tasks",
        2,
        1,
        "queued",
    )
    assert shown["branch"] == "steward/" + task.id[1:]
    assert alice("GET", "/v1/plans/with-tasks").json()["items"][1]["task_id"] == task.id

    assert alice("GET", f"/v1/tasks/{task.id}/events").json() == {"events": [], "next": 0}
    assert alice("GET", f"/v1/tasks/{task.id}/events", params={"after": -1}).status_code == 400
    assert alice("GET", f"/v1/tasks/{task.id}/screen").json()["screen"] == ""

    missing = alice("GET", f"/v1/tasks/{task.id}/artifacts/diff.patch")
    assert missing.status_code == 404
    assert alice("GET", f"/v1/tasks/{task.id}/artifacts/secrets.txt").status_code == 404
    backend.tasks.artifacts.put(task.id, "diff.patch", b"--- a\n+++ b\n", "text/x-diff")
    found = alice("GET", f"/v1/tasks/{task.id}/artifacts/diff.patch")
    assert found.status_code == 302
    assert httpx.get(found.headers["location"]).content == b"--- a\n+++ b\n"
    assert alice("GET", f"/v1/tasks/{task.id}/artifacts").json() == {
        "artifacts": [{"name": "diff.patch", "size": 12}]
    }
    backend.tasks.artifacts.put(task.id, "screen.txt", b"$ pytest\n1 passed\n", "text/plain")
    backend.tasks.artifacts.put(task.id, "not-an-artifact", b"x", "text/plain")
    listed = alice("GET", f"/v1/tasks/{task.id}/artifacts").json()["artifacts"]
    assert listed == [{"name": "diff.patch", "size": 12}, {"name": "screen.txt", "size": 18}]
    screen = alice("GET", f"/v1/tasks/{task.id}/artifacts/screen.txt")  # the screen tail is reachable
    assert screen.status_code == 302
    assert httpx.get(screen.headers["location"]).content == b"$ pytest\n1 passed\n"
    # A page's fetch cannot read a cross-origin redirect: it asks for the URL in the body.
    located = alice("GET", f"/v1/tasks/{task.id}/artifacts/screen.txt", params={"redirect": "false"})
    assert (located.status_code, "location" in located.headers) == (200, False)
    assert httpx.get(located.json()["url"]).content == b"$ pytest\n1 passed\n"
    assert (
        alice("GET", f"/v1/tasks/{task.id}/artifacts/screen.txt", params={"redirect": "maybe"}).status_code
        == 400
    )
    assert alice("GET", f"/v1/tasks/{task.id}/artifacts/not-an-artifact").status_code == 404
    assert bob("GET", f"/v1/tasks/{task.id}/artifacts").status_code == 404


def test_cancel_and_retry(alice: Api, backend: Services) -> None:
    alice("PUT", "/v1/plans/cancel-me", {"markdown": document("Only item")})
    alice("POST", "/v1/plans/cancel-me/confirm")
    task, _ = spawn_item(backend, backend.plans.get("alice", "cancel-me"), 1)
    assert alice("POST", f"/v1/tasks/{task.id}/retry").status_code == 409  # still queued
    cancelled = alice("POST", f"/v1/tasks/{task.id}/cancel")
    assert cancelled.status_code == 200
    assert (cancelled.json()["status"], cancelled.json()["classification"]) == ("cancelled", "final")
    assert cancelled.json()["failure"]["code"] == "cancelled"
    assert alice("POST", f"/v1/tasks/{task.id}/cancel").json()["status"] == "cancelled"
    retried = alice("POST", f"/v1/tasks/{task.id}/retry")
    assert retried.status_code == 202
    item = alice("GET", "/v1/plans/cancel-me").json()["items"][0]
    assert (item["status"], item["task_id"]) == ("pending", task.id)


def test_a_tasks_rounds_say_what_asked_what_they_pushed_their_checks_and_cost(
    alice: Api, bob: Api, backend: Services
) -> None:
    """`GET /v1/tasks/{id}/rounds`: each round of the task, oldest first, with what asked for
    it (not the ask's text), the commit it pushed once answered, its required checks with
    their last verdicts, and its cost; nothing for a task without rounds, 404 for another's."""
    from steward.domain.models import iso  # noqa: PLC0415

    alice("PUT", "/v1/plans/with-rounds", {"markdown": document("Add subtract")})
    seeded = seed_rounds(backend.tables, backend.plans.get("alice", "with-rounds"))
    answer = alice("GET", f"/v1/tasks/{seeded.parent.id}/rounds")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["task_id"], body["rounds_used"], body["follow_ups"]) == (seeded.parent.id, 2, 2)
    one, two = body["rounds"]
    assert one == {
        "id": seeded.answered.id,
        "round": 1,
        "attempt": 1,
        "status": "answered",
        "classification": None,
        "reason": None,
        "trigger": {
            "kind": "review",
            "source": "review:11",
            "author": REVIEWER,
            "check_name": None,
            "conclusion": None,
            "url": f"{seeded.parent.pr_url}#pullrequestreview-11",
            "head_sha": ASKED_ON,
        },
        "commit": PUSHED,
        "checks": [{"command": "pytest -q", "passed": True}],  # failed, then repaired
        "cost_usd": "0.0123",
        "budget_usd": str(seeded.answered.budget_usd),
        "created_at": iso(seeded.answered.created_at),
        "updated_at": iso(seeded.answered.updated_at),
    }
    assert "body" not in one["trigger"]
    assert (two["id"], two["round"], two["status"], two["classification"], two["reason"]) == (
        seeded.failed.id,
        2,
        "failed",
        "final",
        FAILED_BECAUSE,
    )
    assert two["trigger"] == {
        "kind": "check",
        "source": "check_run:21",
        "author": None,
        "check_name": FAILING_CHECK,
        "conclusion": "failure",
        "url": None,
        "head_sha": PUSHED,
    }
    assert (two["commit"], two["checks"], two["cost_usd"]) == (  # it pushed nothing
        None,
        [{"command": "pytest -q", "passed": False}],
        "0.0456",
    )
    # A round has no rounds of its own; another user's task is not found.
    assert alice("GET", f"/v1/tasks/{seeded.answered.id}/rounds").json()["rounds"] == []
    assert bob("GET", f"/v1/tasks/{seeded.parent.id}/rounds").status_code == 404
    assert bob("GET", f"/v1/tasks/{seeded.answered.id}/rounds").status_code == 404


def test_loop_settings(stack: LocalStack) -> None:
    dave = Api(
        stack.state["api_url"], DevIssuer.load_or_create(stack.state_dir / "dev-jwt-key.pem").mint("dave")
    )
    defaults = dave("GET", "/v1/loop").json()
    assert defaults["enabled"] is True
    assert defaults["timezone"] == "UTC"
    updated = dave(
        "PUT",
        "/v1/loop",
        {"paused": True, "quiet_hours": {"start": "22:00", "end": "07:00"}, "timezone": "Europe/Berlin"},
    )
    assert updated.status_code == 200
    assert dave("GET", "/v1/loop").json() == {**defaults, **updated.json()} == updated.json()
    assert updated.json()["paused"] is True
    for body, field in [
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"quiet_hours": {"start": "25:00", "end": "07:00"}}, "quiet_hours.start"),
        ({"max_parallel": 0}, "max_parallel"),
        ({"colour": "red"}, "colour"),
    ]:
        response = dave("PUT", "/v1/loop", body)
        assert response.status_code == 400
        assert error_of(response)["field"] == field
    assert dave("GET", "/v1/loop").json() == updated.json()
    cleared = dave("PUT", "/v1/loop", {"quiet_hours": None}).json()
    assert cleared["quiet_hours"] is None


def test_unknown_route_is_a_json_404(alice: Api) -> None:
    response = alice("GET", "/v1/nothing-here")
    assert response.status_code == 404
    assert error_of(response)["code"] == "not_found"


def test_a_plan_shows_its_outcomes_and_what_its_tasks_cost(alice: Api, backend: Services) -> None:
    """A plan whose items all finished but one failed is not shown as if it succeeded."""
    from decimal import Decimal  # noqa: PLC0415

    from steward.adapters.budget_store import BudgetStore  # noqa: PLC0415
    from steward.domain.models import TaskStatus, utcnow  # noqa: PLC0415

    alice("PUT", "/v1/plans/outcomes", {"markdown": document(*numbered(3))})
    alice("POST", "/v1/plans/outcomes/confirm")
    fresh = alice("GET", "/v1/plans/outcomes").json()
    assert fresh["outcomes"] == {"merged": 0, "closed": 0, "failed": 0, "done": 0, "removed": 0}
    assert fresh["cost_usd"] == "0"
    tasks, budget = backend.tasks.tasks, BudgetStore(backend.tables)
    ends = {
        1: (TaskStatus.REVIEW, TaskStatus.MERGED),
        2: (TaskStatus.FAILED,),
        3: (TaskStatus.REVIEW, TaskStatus.CLOSED),
    }
    for ordinal, path in ends.items():
        task, _ = spawn_item(backend, backend.plans.get("alice", "outcomes"), ordinal)
        now = utcnow()
        task = tasks.claim(task, runtime_id="r", now=now, deadline=now + timedelta(hours=1))
        cost = Decimal("0.25") * ordinal
        refusal = budget.reserve(
            task_id=task.id,
            owner="alice",
            model=task.model,
            token_cap=task.budget_usd,
            cost=cost,
            reservation_id=f"r{ordinal}",
            expires_at=now + timedelta(minutes=5),
            now=now,
        )
        assert refusal is None
        budget.settle(task_id=task.id, reservation_id=f"r{ordinal}", reserved=cost, actual=cost, now=now)
        for status in path:
            task, _ = tasks.transition(
                task,
                status,
                now=utcnow(),
                event=status.value,
                classification="final" if status is TaskStatus.FAILED else None,
            )
        tasks.project_item(task, now=utcnow())
    shown = alice("GET", "/v1/plans/outcomes").json()
    assert shown["outcomes"] == {"merged": 1, "closed": 1, "failed": 1, "done": 0, "removed": 0}
    assert Decimal(shown["cost_usd"]) == Decimal("1.50")
    listed = next(p for p in alice("GET", "/v1/plans").json()["plans"] if p["slug"] == "outcomes")
    assert (listed["outcomes"], listed["cost_usd"]) == (shown["outcomes"], shown["cost_usd"])


def test_a_plan_says_what_confirming_may_spend_and_shows_an_edited_items_open_pull_request(
    alice: Api, backend: Services
) -> None:
    """`max_spend`: pending items x budget_usd x (max_attempts + follow_ups) (a done item
    starts nothing);
    an item edited while its task awaits review names that task and its pull request
    (`earlier_reviews`) until the pull request is merged or closed."""
    from steward.domain.models import TaskStatus, utcnow  # noqa: PLC0415

    items = ["First: change module 1", "Second: change module 2", "[x] Done by hand"]
    markdown = document(*items).replace("checks:", "budget_usd: 0.5\nmax_attempts: 2\nfollow_ups: 1\nchecks:")
    alice("PUT", "/v1/plans/spend", {"markdown": markdown})
    shown = alice("GET", "/v1/plans/spend").json()
    assert shown["max_spend"] == {
        "usd": "3.0",
        "items": 2,
        "budget_usd": "0.5",
        "attempts": 2,
        "follow_ups": 1,
    }
    assert shown["follow_ups"] == 1
    assert [i["earlier_reviews"] for i in shown["items"]] == [[], [], []]

    alice("POST", "/v1/plans/spend/confirm")
    tasks = backend.tasks.tasks
    task, _ = spawn_item(backend, backend.plans.get("alice", "spend"), 1)
    now = utcnow()
    task = tasks.claim(task, runtime_id="r", now=now, deadline=now + timedelta(hours=1))
    pr_url = f"https://github.com/{DOCUMENT_REPO}/pull/7"
    task, _ = tasks.transition(
        task, TaskStatus.REVIEW, now=utcnow(), event="finished", extra={"pr_url": pr_url}
    )
    tasks.project_item(task, now=utcnow())
    edited = markdown.replace("First: change module 1", "First: change module 1, differently")
    alice("PUT", "/v1/plans/spend", {"markdown": edited})
    alice("POST", "/v1/plans/spend/confirm")
    first = alice("GET", "/v1/plans/spend").json()["items"][0]
    assert (first["status"], first["task_id"], first["revision"]) == ("pending", None, 2)
    assert first["earlier_reviews"] == [{"task_id": task.id, "revision": 1, "attempt": 1, "pr_url": pr_url}]
    listed = next(p for p in alice("GET", "/v1/plans").json()["plans"] if p["slug"] == "spend")
    assert listed["items"][0]["earlier_reviews"] == first["earlier_reviews"]

    tasks.transition(task, TaskStatus.MERGED, now=utcnow(), event="github_event")
    assert alice("GET", "/v1/plans/spend").json()["items"][0]["earlier_reviews"] == []


def test_a_waiting_item_says_why_through_the_api(stack: LocalStack, backend: Services) -> None:
    """Each loop gate, as the person sees it on `GET /v1/plans/{slug}` (erin's loop only: the
    module's stack runs alice's)."""
    link_installation(backend.tables, "erin", DOCUMENT_REPO)
    bob = Api(
        stack.state["api_url"], DevIssuer.load_or_create(stack.state_dir / "dev-jwt-key.pem").mint("erin")
    )
    assert bob("PUT", "/v1/loop", {"paused": True}).status_code == 200
    bob("PUT", "/v1/plans/waits", {"markdown": document(*numbered(2))})
    draft = bob("GET", "/v1/plans/waits").json()
    assert draft["items"][0]["waiting"]["reason"] == "awaiting_confirmation"
    bob("POST", "/v1/plans/waits/confirm")

    def reasons() -> list[tuple[str, str | None]]:
        items = bob("GET", "/v1/plans/waits").json()["items"]
        return [(i["waiting"]["reason"], i["waiting"]["until"]) for i in items]

    assert reasons() == [("paused", None)] * 2
    now = datetime.now(UTC)
    start, end = ((now + timedelta(hours=h)).strftime("%H:%M") for h in (-1, 1))  # a window around now
    bob(
        "PUT",
        "/v1/loop",
        {"paused": False, "quiet_hours": {"start": start, "end": end}, "timezone": "UTC"},
    )
    [(reason, until), _] = reasons()
    assert reason == "quiet_hours"
    assert until is not None
    assert until.endswith(f"T{end}:00Z")
    bob("PUT", "/v1/loop", {"quiet_hours": None, "daily_spawn_cap": 0})
    [(reason, until), _] = reasons()
    assert reason == "daily_cap"
    assert until is not None
    assert until.endswith("T00:00:00Z")
    bob("PUT", "/v1/loop", {"enabled": False})
    assert reasons() == [("disabled", None)] * 2
    bob("PUT", "/v1/loop", {"enabled": True, "paused": True, "daily_spawn_cap": 20})


# ---- reviewing a plan: what confirming approves, what changed, confirming by prefix

REVIEWED = """---
repo: octo/demo
base: develop
model: scripted
budget_usd: 1.50
checks:
  - pytest -q
  - ruff check .
setup:
  - pip install -e .
max_attempts: 2
---
# Reviewed

- [ ] Keep this one
  Its details, line one.
    and an indented line.
- [ ] Drop this one
- [ ] Stay where you are
- [ ] Edit this one
  old details
- [ ] Move this one
"""
# The budget raised, an item dropped, one edited, one moved to the top, one added.
REVISED = (
    REVIEWED.split("# Reviewed", maxsplit=1)[0].replace("budget_usd: 1.50", "budget_usd: 2")
    + """# Reviewed

- [ ] Move this one
- [ ] Keep this one
  Its details, line one.
    and an indented line.
- [ ] Stay where you are
- [ ] Edit this one
  new details
- [ ] Add this one
"""
)


def test_the_plan_view_carries_what_confirming_approves(alice: Api) -> None:
    published = alice("PUT", "/v1/plans/review-view", {"markdown": REVIEWED})
    assert published.status_code == 200, published.text
    plan = alice("GET", "/v1/plans/review-view").json()
    assert (plan["base"], plan["model"], plan["budget_usd"], plan["max_attempts"]) == (
        "develop",
        "scripted",
        "1.5",
        2,
    )
    assert (plan["checks"], plan["setup"]) == (["pytest -q", "ruff check ."], ["pip install -e ."])
    assert plan["items"][0]["details"] == "Its details, line one.\n  and an indented line."
    assert [i["details"] for i in plan["items"][1:]] == ["", "", "old details", ""]
    # A page of plans leaves details out (it must fit one Lambda answer); the rest is there.
    listed = next(p for p in alice("GET", "/v1/plans").json()["plans"] if p["slug"] == "review-view")
    assert "details" not in listed["items"][0]
    assert listed["checks"] == plan["checks"]


def test_diff_confirm_by_prefix_and_no_such_content(alice: Api, bob: Api, backend: Services) -> None:
    first = alice("PUT", "/v1/plans/review-diff", {"markdown": REVIEWED}).json()
    never = alice("GET", "/v1/plans/review-diff/diff").json()
    assert (never["approved_hash"], never["current_hash"]) == (None, first["content_hash"])
    assert [(i["ordinal"], i["change"]) for i in never["items"]] == [(n, "added") for n in range(1, 6)]
    assert never["front_matter"]["budget_usd"] == [None, "1.5"]

    # Confirm with the 12 characters the CLI prints.
    confirmed = alice("POST", "/v1/plans/review-diff/confirm", {"content_hash": first["content_hash"][:12]})
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["approved_hash"] == first["content_hash"]
    same = alice("GET", "/v1/plans/review-diff/diff").json()
    assert same == {
        "approved_hash": first["content_hash"],
        "current_hash": first["content_hash"],
        "front_matter": {},
        "items": [],
    }

    second = alice("PUT", "/v1/plans/review-diff", {"markdown": REVISED}).json()
    assert second["status"] == "awaiting_confirmation"
    changes = alice("GET", "/v1/plans/review-diff/diff").json()
    assert (changes["approved_hash"], changes["current_hash"]) == (
        first["content_hash"],
        second["content_hash"],
    )
    assert changes["front_matter"] == {"budget_usd": ["1.5", "2"]}
    assert [
        (i["ordinal"], i["approved_ordinal"], i["title"], i["change"], i["fields"]) for i in changes["items"]
    ] == [
        (1, 5, "Move this one", "moved", []),
        (4, 4, "Edit this one", "edited", ["details"]),
        (5, None, "Add this one", "added", []),
        (None, 2, "Drop this one", "removed", []),
    ]
    # What was approved is kept in the artifact bucket under the plan and its content hash.
    kept = backend.tasks.artifacts.plan_document(first["id"], first["content_hash"])
    assert kept is not None
    assert "- [ ] Drop this one" in kept
    assert "budget_usd: '1.5'" in kept

    # A hash the plan had, but not its current one: the plan changed (409).
    stale = alice("POST", "/v1/plans/review-diff/confirm", {"content_hash": first["content_hash"][:12]})
    assert stale.status_code == 409
    assert (error_of(stale)["code"], error_of(stale)["field"]) == ("conflict", "content_hash")
    assert "changed" in error_of(stale)["message"]
    # A hash the plan never had: no such content (404), whole or as a prefix.
    for never_had in ("0" * 12, "0" * 64, "abcdef" * 2):
        missing = alice("POST", "/v1/plans/review-diff/confirm", {"content_hash": never_had})
        assert missing.status_code == 404, never_had
        error = error_of(missing)
        assert (error["code"], error["field"]) == ("no_such_content", "content_hash")
        assert "no such content" in error["message"]
        assert never_had[:12] in error["message"]
    # Too short to name content, or not hex: 400 naming the field.
    for bad in (second["content_hash"][:11], "g" * 12, "", "0" * 65):
        refused = alice("POST", "/v1/plans/review-diff/confirm", {"content_hash": bad})
        assert refused.status_code == 400, bad
        assert error_of(refused)["field"] == "content_hash"
    assert alice("GET", "/v1/plans/review-diff").json()["status"] == "awaiting_confirmation"  # none approved

    reconfirmed = alice(
        "POST", "/v1/plans/review-diff/confirm", {"content_hash": second["content_hash"][:16].upper()}
    )
    assert reconfirmed.status_code == 200, reconfirmed.text
    assert reconfirmed.json()["approved_hash"] == second["content_hash"]
    assert alice("GET", "/v1/plans/review-diff/diff").json()["items"] == []

    assert bob("GET", "/v1/plans/review-diff/diff").status_code == 404
    hidden = bob("POST", "/v1/plans/review-diff/confirm", {"content_hash": second["content_hash"][:12]})
    assert error_of(hidden)["code"] == "not_found"  # another user's plan: not even its content


def test_a_diff_whose_approved_content_is_not_kept_says_so(alice: Api, stack: LocalStack) -> None:
    """Content approved before Steward kept documents (here: its document deleted)."""
    first = alice("PUT", "/v1/plans/review-lost", {"markdown": document("One")}).json()
    alice("POST", "/v1/plans/review-lost/confirm")
    alice("PUT", "/v1/plans/review-lost", {"markdown": document("One", "Two")})
    s3 = boto3.client("s3", endpoint_url=stack.state["aws_endpoint_url"], region_name=stack.state["region"])
    s3.delete_object(
        Bucket=Settings().artifacts_bucket, Key=f"plans/{first['id']}/{first['content_hash']}.md"
    )
    response = alice("GET", "/v1/plans/review-lost/diff")
    assert response.status_code == 404
    error = error_of(response)
    assert (error["code"], error["field"]) == ("no_such_content", "approved_hash")
    assert "not kept" in error["message"]
    # Confirming the current content keeps it again.
    current = alice("GET", "/v1/plans/review-lost").json()["content_hash"]
    assert alice("POST", "/v1/plans/review-lost/confirm", {"content_hash": current}).status_code == 200
    s3.head_object(Bucket=Settings().artifacts_bucket, Key=f"plans/{first['id']}/{current}.md")


def test_the_openapi_document_is_served_and_is_the_committed_one(alice: Api) -> None:
    response = alice("GET", "/v1/openapi.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    committed = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
    assert response.json() == json.loads(committed.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("query", "field"),
    [({"limit": "abc"}, "limit"), ({"limit": "101"}, "limit"), ({"cursor": "x" * 2049}, "cursor")],
)
def test_a_bad_query_parameter_is_400_naming_it(alice: Api, query: dict[str, str], field: str) -> None:
    # Query strings are typed route parameters that Powertools validates: its refusal is
    # answered as the documented error, not Powertools' own 422.
    for path in ("/v1/plans", "/v1/tasks"):
        response = alice("GET", path, params=query)
        assert response.status_code == 400, response.text
        assert error_of(response)["field"] == field
