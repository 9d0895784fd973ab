"""The runtime's own routes (`POST /v1/runtime/claim`, `/heartbeat`, `/events`, `/finish`,
`/artifacts/{name}`) in the runtime Lambda behind the local HTTP adapter, over in-process
moto with a KMS-signed capability: the task and its owner come from the capability only, a
capability of another task changes nothing, bodies are validated, and an upload is a
presigned PUT of exactly that task's object (docs/concepts/identity.md, docs/concepts/runner.md)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import requests
from steward import wiring
from steward.adapters.capability_signer import KmsCapabilitySigner, kms_client
from steward.adapters.dynamo import count_requests
from steward.adapters.task_store import TaskStore
from steward.config import Settings
from steward.domain.artifacts import RUNTIME_ARTIFACTS
from steward.domain.capability import capability_claims
from steward.domain.models import Task, TaskStatus, utcnow
from steward.local.github_twin import GitHubTwin
from steward.local.http_adapter import LambdaHttpServer
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.documents import document
from tests.support.plans import spawn_item
from tests.support.runtime_routes import RuntimeGitHub, new_capability_key, runtime_github, runtime_server

REPO = "octo/demo"
OTHER_REPO = "octo/other"
PR_URL = f"https://github.example/{REPO}/pull/7"


def bodies(runtime_id: str) -> dict[str, dict[str, Any]]:
    """One valid body per capability route (the data the tests below run over)."""
    return {
        "/v1/runtime/claim": {"runtime_id": runtime_id},
        "/v1/runtime/heartbeat": {"runtime_id": runtime_id},
        "/v1/runtime/events": {"runtime_id": runtime_id, "type": "phase", "data": {"phase": "edit"}},
        "/v1/runtime/finish": {
            "runtime_id": runtime_id,
            "status": "failed",
            "classification": "final",
            "reason": "the model did not finish",
        },
        "/v1/runtime/artifacts/harness.json": {"runtime_id": runtime_id, "size": 2},
    }


ROUTES = tuple(bodies("r1"))


@dataclass
class Kit:
    services: Services
    server: LambdaHttpServer
    signer: KmsCapabilitySigner
    other_signer: KmsCapabilitySigner
    bucket: str
    github: RuntimeGitHub

    def task(self, slug: str, *, runtime_id: str | None = "r1") -> Task:
        self.services.plans.publish("alice", slug, document("Change the thing", repo=REPO))
        task, _ = spawn_item(self.services, self.services.plans.confirm("alice", slug), 1)
        if runtime_id is None:
            return task
        now = utcnow()
        return self.store.claim(task, runtime_id=runtime_id, now=now, deadline=now + timedelta(hours=1))

    @property
    def store(self) -> TaskStore:
        return self.services.tasks.tasks

    @property
    def twin(self) -> GitHubTwin:
        return self.github.twin

    def pull(self, repo: str, branch: str) -> int:
        return self.github.pull(repo, branch).number

    def capability(self, task: Task, *, signer: KmsCapabilitySigner | None = None, **changes: Any) -> str:
        claims = capability_claims(
            sub=task.user, task_id=task.id, model_id=task.model, max_budget_usd=task.budget_usd, now=utcnow()
        )
        return (signer or self.signer).mint({**claims, **changes})

    def post(
        self, path: str, capability: str | None, body: Any = None, *, raw: bytes | None = None
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {capability}"} if capability is not None else {}
        content = raw if raw is not None else json.dumps(body).encode()
        return httpx.post(self.server.url + path, content=content, headers=headers, timeout=30)

    def snapshot(self, task: Task) -> tuple[Task | None, list[dict[str, Any]], list[str]]:
        """Everything a route could change about `task`: its row, its events, its objects."""
        listed = self.services.tasks.artifacts._s3.list_objects_v2(
            Bucket=self.bucket, Prefix=f"artifacts/{task.id}/"
        )
        keys = [o["Key"] for o in listed.get("Contents", [])]
        return self.store.get(task.id), self.services.tasks.events.list(task.id, after=0, limit=1000), keys


@pytest.fixture
def kit(
    services: Services, settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Kit]:
    kms = kms_client(region_name=REGION)
    key_id, stranger = new_capability_key(), new_capability_key()
    # the runtime routes check a review ending's pull request through the App
    with (
        runtime_github(services, monkeypatch, tmp_path, (REPO, OTHER_REPO)) as github,
        runtime_server(services, settings, monkeypatch, key_id) as server,
    ):
        yield Kit(
            services,
            server,
            KmsCapabilitySigner(kms, key_id),
            KmsCapabilitySigner(kms, stranger),
            settings.artifacts_bucket,
            github,
        )


def each_route(check: Callable[[str, httpx.Response], None], call: Callable[[str], httpx.Response]) -> None:
    failures = []
    for path in ROUTES:
        response = call(path)
        try:
            check(path, response)
        except AssertionError as exc:
            failures.append(f"{path}: {response.status_code} {response.text[:200]} ({exc})")
    assert failures == []


# ---- who may call


def test_every_route_answers_401_without_a_valid_capability(kit: Kit) -> None:
    task = kit.task("a")
    before = kit.snapshot(task)
    old = int((datetime.now(UTC) - timedelta(hours=2)).timestamp())
    header, _, signature = kit.capability(task).split(".")
    forged_payload = kit.capability(task, task_id="t" + "0" * 24).split(".")[1]
    credentials = {
        "none": None,
        "garbage": "not-a-capability",
        "expired": kit.capability(task, iat=old, exp=old + 600),
        "another key's": kit.capability(task, signer=kit.other_signer),
        "forged": f"{header}.{forged_payload}.{signature}",
    }
    for name, credential in credentials.items():

        def unauthorized(path: str, response: httpx.Response, name: str = name) -> None:
            assert response.status_code == 401, name
            assert response.json()["error"]["code"] == "unauthorized", name

        each_route(unauthorized, lambda path, c=credential: kit.post(path, c, bodies("r1")[path]))  # type: ignore[misc]
    assert kit.snapshot(task) == before


def test_every_route_answers_403_to_another_users_capability_for_the_task(kit: Kit) -> None:
    task = kit.task("a")
    before = kit.snapshot(task)

    def forbidden(path: str, response: httpx.Response) -> None:
        assert response.status_code == 403
        assert response.json()["error"]["message"] == "the capability's task belongs to another user"

    each_route(forbidden, lambda path: kit.post(path, kit.capability(task, sub="bob"), bodies("r1")[path]))
    assert kit.snapshot(task) == before


def test_a_capability_of_another_task_changes_nothing_on_any_route(kit: Kit) -> None:
    mine = kit.task("a", runtime_id="r1")
    other = kit.task("b", runtime_id="r2")
    theirs = kit.capability(other)
    before = kit.snapshot(mine), kit.snapshot(other)

    # Naming this task in the body is no field of any route.
    def smuggled(path: str, response: httpx.Response) -> None:
        assert response.status_code == 400
        assert response.json()["error"]["field"] == "task_id"

    each_route(smuggled, lambda path: kit.post(path, theirs, bodies("r1")[path] | {"task_id": mine.id}))

    # This task's runtime id with the other task's capability reaches the other task, where
    # that runtime id holds nothing.
    def refused(path: str, response: httpx.Response) -> None:
        expected = {
            "/v1/runtime/claim": (409, None),
            "/v1/runtime/heartbeat": (200, {"running": False, "status": "running", "cost_usd": "0"}),
            "/v1/runtime/events": (409, None),
            "/v1/runtime/finish": (200, {"status": "running", "changed": False}),
            "/v1/runtime/artifacts/harness.json": (409, None),
        }[path]
        assert response.status_code == expected[0]
        if expected[1] is not None:
            assert response.json() == expected[1]

    each_route(refused, lambda path: kit.post(path, theirs, bodies("r1")[path]))
    assert (kit.snapshot(mine), kit.snapshot(other)) == before

    # The other task's own runtime reaches its own task only.
    for path, body in bodies("r2").items():
        if path == "/v1/runtime/finish":
            continue
        response = kit.post(path, theirs, body)
        assert response.status_code == 200, (path, response.text)
        if path.startswith("/v1/runtime/artifacts/"):
            assert response.json()["key"] == f"artifacts/{other.id}/harness.json"
    assert kit.snapshot(mine) == before[0]
    assert kit.snapshot(other)[1][-1]["type"] == "phase"


# ---- what a body may say


def test_bodies_are_validated_naming_the_field_and_bounded(kit: Kit) -> None:
    task = kit.task("a")
    capability = kit.capability(task)
    before = kit.snapshot(task)

    def answers(status: int, field: str | None) -> Callable[[str, httpx.Response], None]:
        def check(path: str, response: httpx.Response) -> None:
            assert response.status_code == status
            assert response.json()["error"].get("field") == field

        return check

    each_route(answers(400, "runtime_id"), lambda path: kit.post(path, capability, {}))
    each_route(answers(400, "runtime_id"), lambda path: kit.post(path, capability, bodies("../x")[path]))
    each_route(answers(400, "body"), lambda path: kit.post(path, capability, raw=b"{not json"))
    each_route(answers(400, "body"), lambda path: kit.post(path, capability, raw=b"[]"))
    each_route(answers(413, "body"), lambda path: kit.post(path, capability, raw=b" " * 20_000))

    specific = [
        ("/v1/runtime/events", {"type": "finished"}, 400, "type"),
        ("/v1/runtime/events", {"type": "started"}, 400, "type"),
        ("/v1/runtime/events", {"type": "github_event"}, 400, "type"),
        ("/v1/runtime/events", {"data": "text"}, 400, "data"),
        ("/v1/runtime/events", {"data": {"output": "x" * 5000}}, 413, "data"),
        ("/v1/runtime/finish", {"status": "merged"}, 400, "status"),
        ("/v1/runtime/finish", {"status": "cancelled"}, 400, "status"),
        ("/v1/runtime/finish", {"classification": "maybe"}, 400, "classification"),
        ("/v1/runtime/finish", {"classification": None}, 400, "classification"),
        ("/v1/runtime/finish", {"reason": ""}, 400, "reason"),
        ("/v1/runtime/finish", {"pr_url": PR_URL, "pr_number": 7}, 400, "pr_url"),
        ("/v1/runtime/finish", {"artifacts_not_written": ["../x"]}, 400, "artifacts_not_written"),
        (
            "/v1/runtime/finish",
            {"status": "review", "classification": None, "reason": None},
            400,
            "pr_number",
        ),
        (
            "/v1/runtime/finish",
            {
                "status": "review",
                "classification": None,
                "reason": None,
                "pr_url": "https://x/a/b/pull/7",
                "pr_number": 7,
            },
            400,
            "pr_url",
        ),
        ("/v1/runtime/finish", {"status": "review", "pr_url": PR_URL, "pr_number": 7}, 400, "classification"),
        ("/v1/runtime/artifacts/harness.json", {"size": -1}, 400, "size"),
        ("/v1/runtime/artifacts/harness.json", {"size": 16 * 1024 * 1024 + 1}, 413, "size"),
        ("/v1/runtime/artifacts/harness.json", {"size": None}, 400, "size"),
    ]
    for path, change, status, field in specific:
        response = kit.post(path, capability, bodies("r1")[path] | change)
        assert response.status_code == status, (path, change, response.text)
        if field is not None:
            assert response.json()["error"]["field"] == field, (path, change)
    assert kit.snapshot(task) == before


# ---- the run's calls


def test_a_run_claims_beats_records_uploads_and_finishes_with_few_requests(kit: Kit) -> None:
    task = kit.task("a", runtime_id=None)
    capability = kit.capability(task)
    tables = wiring.tables()

    def counted(path: str, body: dict[str, Any]) -> tuple[httpx.Response, dict[str, int]]:
        with count_requests(tables) as counts:
            response = kit.post(path, capability, body)
        assert response.status_code == 200, (path, response.text)
        return response, dict(counts)

    claimed, counts = counted("/v1/runtime/claim", {"runtime_id": "r1"})
    # the task, its claim, and its plan (the related pull requests of its item: none here)
    assert counts == {"GetItem": 2, "TransactWriteItems": 1}
    assert claimed.json()["related"] == []
    answered = Task.model_validate(claimed.json()["task"])
    assert (answered.id, answered.status, answered.runtime_id) == (task.id, TaskStatus.RUNNING, "r1")
    assert answered.checks == task.checks
    again, counts = counted("/v1/runtime/claim", {"runtime_id": "r1"})  # a replay of the same runtime
    assert counts == {"GetItem": 2}
    assert again.json()["task"]["runtime_id"] == "r1"
    assert kit.post("/v1/runtime/claim", capability, {"runtime_id": "r2"}).status_code == 409

    seen = kit.store.require(task.id).last_seen
    beat, counts = counted("/v1/runtime/heartbeat", {"runtime_id": "r1"})
    assert counts == {"UpdateItem": 1}  # the one frequent call: one conditional write, no read
    assert beat.json() == {"running": True, "status": "running", "cost_usd": "0"}
    assert kit.store.require(task.id).last_seen != seen

    event, counts = counted(
        "/v1/runtime/events", {"runtime_id": "r1", "type": "check", "data": {"passed": True}}
    )
    assert counts == {"GetItem": 1, "TransactWriteItems": 1}
    assert event.json() == {"seq": 2}

    upload, counts = counted("/v1/runtime/artifacts/diff.patch", {"runtime_id": "r1", "size": 5})
    assert counts == {"GetItem": 1}

    number = kit.pull(REPO, task.branch)
    link = f"{kit.twin.url}/{REPO}/pull/{number}"
    finish = {"runtime_id": "r1", "status": "review", "pr_url": link, "pr_number": number, "summary": "Done."}
    done, counts = counted("/v1/runtime/finish", finish)
    # read, the owner's installations (the pull request is checked on GitHub), transition, plan item
    assert counts == {"GetItem": 1, "Query": 1, "TransactWriteItems": 1, "UpdateItem": 1}
    assert done.json() == {"status": "review", "changed": True}
    assert kit.post("/v1/runtime/finish", capability, finish).json() == {"status": "review", "changed": False}

    stored = kit.store.require(task.id)
    assert (stored.status, stored.pr_url, stored.pr_number) == (TaskStatus.REVIEW, link, number)
    events = kit.services.tasks.events.list(task.id, after=0, limit=100)
    assert [e["type"] for e in events] == ["started", "check", "finished"]  # the replay wrote nothing
    assert events[-1]["data"] == {
        "status": "review",
        "runtime_id": "r1",
        "outcome": "published",
        "pr_url": link,
        "pr_number": number,
        "summary": "Done.",
    }
    # After the pull request: no longer running, but the publication's records still land.
    assert kit.post("/v1/runtime/heartbeat", capability, {"runtime_id": "r1"}).json()["running"] is False
    assert kit.post("/v1/runtime/events", capability, bodies("r1")["/v1/runtime/events"]).status_code == 200
    assert upload.json()["key"] == f"artifacts/{task.id}/diff.patch"


def test_a_review_ending_records_only_a_pull_request_of_the_tasks_branch_with_the_servers_link(
    kit: Kit,
) -> None:
    """A capability holder cannot point the task's pull request anywhere: the number must be
    a pull request of the task's repository whose head is the task's branch (asked of
    GitHub), and the link recorded is the server's own."""
    task = kit.task("a")
    capability = kit.capability(task)
    mine = kit.pull(REPO, task.branch)
    elsewhere = kit.pull(REPO, "feature/someone-else")  # another branch's, same repository
    for branch in ("feature/a", "feature/b"):  # the other repository's numbers run ahead
        kit.pull(OTHER_REPO, branch)
    other_repo = kit.pull(OTHER_REPO, task.branch)  # the task's branch name, in another repository
    assert other_repo not in (mine, elsewhere)
    twin = kit.twin.url
    before = kit.snapshot(task)
    hostile: list[tuple[str, dict[str, Any], str]] = [
        ("other host", {"pr_url": f"https://evil.example/{REPO}/pull/{mine}", "pr_number": mine}, "pr_url"),
        ("other repo's link", {"pr_url": f"{twin}/{OTHER_REPO}/pull/{mine}", "pr_number": mine}, "pr_url"),
        ("other repo's number", {"pr_number": other_repo}, "pr_number"),
        ("another branch's pull request", {"pr_number": elsewhere}, "pr_number"),
        (
            "its link for another branch's",
            {"pr_url": f"{twin}/{REPO}/pull/{elsewhere}", "pr_number": elsewhere},
            "pr_number",
        ),
        ("no such pull request", {"pr_number": 999}, "pr_number"),
        ("non-numeric", {"pr_number": "seven"}, "pr_number"),
        ("a numeric string", {"pr_number": str(mine)}, "pr_number"),
        ("a boolean", {"pr_number": True}, "pr_number"),
        ("huge", {"pr_number": 10**40}, "pr_number"),
        ("past 32 bits", {"pr_number": 2**31}, "pr_number"),
        ("zero", {"pr_number": 0}, "pr_number"),
        ("negative", {"pr_number": -mine}, "pr_number"),
        ("a path, not a link", {"pr_url": f"/{REPO}/pull/{mine}", "pr_number": mine}, "pr_url"),
    ]
    for name, change, field in hostile:
        body = {"runtime_id": "r1", "status": "review", "summary": "Done."} | change
        response = kit.post("/v1/runtime/finish", capability, body)
        assert (response.status_code, response.json().get("error", {}).get("field")) == (400, field), (
            name,
            response.text,
        )
    assert kit.snapshot(task) == before

    # the ending may leave the link out: the server builds it
    done = kit.post(
        "/v1/runtime/finish", capability, {"runtime_id": "r1", "status": "review", "pr_number": mine}
    )
    assert done.json() == {"status": "review", "changed": True}
    stored = kit.store.require(task.id)
    assert (stored.pr_url, stored.pr_number) == (f"{twin}/{REPO}/pull/{mine}", mine)
    assert kit.twin.pull(REPO, mine)["html_url"] == stored.pr_url  # the link GitHub itself gives
    # and the head commit is GitHub's too: the ending has no field for it
    assert stored.head_sha == kit.twin.pull(REPO, mine)["head"]["sha"]
    assert kit.services.tasks.tasks.require(task.id).to_api()["head_sha"] == stored.head_sha


def test_a_failed_ending_is_redacted_and_a_cancelled_task_takes_no_more_records(kit: Kit) -> None:
    task = kit.task("a")
    capability = kit.capability(task)
    token = "ghs_" + "A" * 36
    finish = bodies("r1")["/v1/runtime/finish"] | {"reason": f"push failed with {token}"}
    event = {"runtime_id": "r1", "type": "phase", "data": {"note": f"Authorization: Bearer {capability}"}}
    assert kit.post("/v1/runtime/events", capability, event).status_code == 200
    assert kit.post("/v1/runtime/finish", capability, finish).json() == {"status": "failed", "changed": True}
    stored = kit.store.require(task.id)
    assert (stored.status, stored.classification) == (TaskStatus.FAILED, "final")
    assert token not in (stored.reason or "")
    written = json.dumps(kit.services.tasks.events.list(task.id, after=0, limit=100))
    assert token not in written
    assert capability not in written

    cancelled = kit.task("b")
    capability = kit.capability(cancelled)
    kit.services.tasks.cancel("alice", cancelled.id)
    before = kit.snapshot(cancelled)
    assert kit.post("/v1/runtime/heartbeat", capability, {"runtime_id": "r1"}).json() == {
        "running": False,
        "status": "cancelled",
        "cost_usd": "0",
    }
    assert kit.post("/v1/runtime/events", capability, bodies("r1")["/v1/runtime/events"]).status_code == 409
    assert kit.post("/v1/runtime/claim", capability, {"runtime_id": "r1"}).status_code == 409
    ended = kit.post("/v1/runtime/finish", capability, bodies("r1")["/v1/runtime/finish"])
    assert ended.json() == {"status": "cancelled", "changed": False}
    assert kit.snapshot(cancelled) == before
    # The cancelled run's record of its own attempt may still be uploaded.
    assert (
        kit.post("/v1/runtime/artifacts/diff.patch", capability, {"runtime_id": "r1", "size": 1}).status_code
        == 200
    )


# ---- uploads


def test_an_upload_url_is_a_short_presigned_put_of_exactly_that_tasks_object(kit: Kit) -> None:
    task = kit.task("a")
    capability = kit.capability(task)
    for name, content_type in RUNTIME_ARTIFACTS.items():
        response = kit.post(f"/v1/runtime/artifacts/{name}", capability, {"runtime_id": "r1", "size": 5})
        assert response.status_code == 200, response.text
        assert response.headers["cache-control"] == "no-store"
        answer = response.json()
        assert answer["method"] == "PUT"
        assert answer["key"] == f"artifacts/{task.id}/{name}"
        assert answer["headers"] == {"Content-Type": content_type, "Content-Length": "5"}
        url = urlsplit(answer["url"])
        assert url.path in (f"/{answer['key']}", f"/{kit.bucket}/{answer['key']}")
        assert url.netloc.startswith(kit.bucket) or url.path.startswith(f"/{kit.bucket}/")
        query = parse_qs(url.query)
        assert set(query["X-Amz-SignedHeaders"][0].split(";")) >= {"content-length", "content-type", "host"}
        assert int(query["X-Amz-Expires"][0]) <= 300
        # moto intercepts the PUT in process (it checks no signature; S3 checks the signed headers)
        put = requests.put(answer["url"], data=b"hello", headers=answer["headers"], timeout=30)
        assert put.status_code == 200
        assert kit.services.tasks.artifacts.read_text(task.id, name) == "hello"

    for name in ("unknown.txt", "HARNESS.JSON", "harness.json.", "screen.txt~", "..."):
        response = kit.post(f"/v1/runtime/artifacts/{name}", capability, {"runtime_id": "r1", "size": 5})
        assert response.status_code == 404, (name, response.text)
        assert response.json()["error"]["field"] == "name"
    # Paths that try to leave the name: refused by the front door (400) or by no route (404).
    for path in (
        "/v1/runtime/artifacts/../x",
        "/v1/runtime/artifacts/harness.json/../../t2/x",
        "/v1/runtime/artifacts/..%2Fx",
        "/v1/runtime/artifacts/harness.json%2F..%2F..%2Ft2%2Fx",
        "/v1/runtime/artifacts/",
    ):
        response = kit.post(path, capability, {"runtime_id": "r1", "size": 5})
        assert response.status_code in (400, 404), (path, response.text)
        assert "url" not in response.json()
