"""The webhook receiver against moto: every bad input of issue 5 refused or ignored with
nothing stored; every real delivery GitHub produced (`tests/fixtures/github-payloads`)
accepted; pull request events driving a real spawned and claimed task; duplicates costing
one request; installation events converging whatever their order.

Payloads are built with GitHub's shapes or taken from real deliveries
(`tests/support/github_payloads.py`) and signed with the test secret.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import itertools
import json
import logging
import random
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import boto3
import httpx
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from steward import webhook_handler, wiring
from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.dynamo import Tables, count_requests, plain
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.domain.follow_ups import MAX_FOLLOW_UP_KEYS, MAX_REFUSALS
from steward.domain.installations import Installation
from steward.domain.models import Task, TaskStatus, utcnow
from steward.domain.webhooks import (
    REPORT,
    SUSPEND,
    UNSUSPEND,
    InstallationChange,
    InstallationSync,
    WebhookSecret,
    merge,
)
from steward.local.http_adapter import LambdaContext, LambdaHttpServer
from steward.services.webhooks import WebhookReceiver
from steward.tables import DELIVERIES, EVENTS, INSTALLATIONS, PLANS, TASKS, USERS
from steward.wiring import Services

from tests.support.documents import document
from tests.support.github_payloads import (
    INSTALLATION_ID,
    REPO,
    SECRET,
    T0,
    Delivery,
    aimed_at,
    delivery,
    event_of,
    installation_payload,
    installation_repositories_payload,
    pull_request_payload,
    real_payload,
    real_payload_files,
    signature,
    signed_file,
)
from tests.support.plans import spawn_item

# ---- fixtures and helpers


@dataclass
class World:
    """A running task of alice's in octo/demo, and her installation holding that repository."""

    services: Services
    receiver: WebhookReceiver
    task: Task

    def deliver(self, item: Delivery) -> str:
        return self.receiver.receive(item.body, item.headers).status

    def current(self) -> Task:
        return self.services.tasks.tasks.require(self.task.id)

    def events(self) -> list[dict[str, Any]]:
        return self.services.tasks.events.list(self.task.id, after=0, limit=100)

    def watermark(self, user: str = "alice") -> int:
        return self.services.users.loop_state(user).watermark

    def item_status(self) -> str:
        plan = self.services.plans.get(self.task.user, self.task.plan_slug)
        return next(i.status.value for i in plan.items if i.key == self.task.item_key)


def receiver_for(tables: Tables, secret: str | None = SECRET) -> WebhookReceiver:
    return WebhookReceiver(
        secret=WebhookSecret(secret),
        deliveries=DeliveryStore(tables),
        tasks=TaskStore(tables),
        installations=InstallationStore(tables),
    )


def running_task(services: Services, *, user: str = "alice", slug: str = "hooks", repo: str = REPO) -> Task:
    services.plans.publish(user, slug, document("Change module 1", repo=repo))
    plan = services.plans.confirm(user, slug)
    task, _ = spawn_item(services, plan, 1)
    now = utcnow()
    return services.tasks.tasks.claim(
        task, runtime_id="runtime-1", now=now, deadline=now + timedelta(hours=1)
    )


def install(
    services: Services,
    installation_id: int = INSTALLATION_ID,
    *,
    owner: str = "alice",
    repositories: tuple[str, ...] = (REPO,),
    suspended: bool = False,
    account: str = "octo",
) -> None:
    """An installation as an operator links it (the baseline webhooks then keep true)."""
    store = InstallationStore(services.tables)
    store.put(
        Installation(
            installation_id=installation_id, account=account, repositories=repositories, suspended=suspended
        ),
        now=utcnow(),
    )
    store.link(installation_id, owner, now=utcnow())


@pytest.fixture
def world(services: Services) -> World:
    task = running_task(services)
    install(services)
    return World(services, receiver_for(services.tables), task)


def stored(tables: Tables) -> dict[str, list[dict[str, Any]]]:
    """Every item of the tables a delivery may touch, for before/after comparisons."""
    out: dict[str, list[dict[str, Any]]] = {}
    for spec in (DELIVERIES, TASKS, EVENTS, PLANS, USERS, INSTALLATIONS):
        items = plain(tables.table(spec).scan(ConsistentRead=True)["Items"])
        out[spec.logical_name] = sorted(items, key=lambda i: json.dumps(i, sort_keys=True, default=str))
    return out


@pytest.fixture
def endpoint(services: Services, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaHttpServer]:
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", services.tables.prefix)
    monkeypatch.setenv("STEWARD_WEBHOOK_SECRET", SECRET)
    monkeypatch.delenv("STEWARD_WEBHOOK_SECRET_ID", raising=False)
    wiring.reset()
    with LambdaHttpServer(
        webhook_handler.lambda_handler, kind="function_url", function_name="steward-webhook"
    ) as server:
        yield server
    wiring.reset()


def post(server: LambdaHttpServer, item: Delivery, path: str = "/") -> httpx.Response:
    return httpx.post(server.url + path, content=item.body, headers=item.headers)


# ---- bad input: 401, 400 or ignored; nothing stored, no crash


def _resigned(item: Delivery, **headers: str | None) -> Delivery:
    merged = {k: v for k, v in {**item.headers, **headers}.items() if v is not None}
    return Delivery(item.event, item.body, merged)


def _with_body(item: Delivery, body: bytes, content_type: str = "application/json") -> Delivery:
    return Delivery(
        item.event,
        body,
        {**item.headers, "Content-Type": content_type, "X-Hub-Signature-256": signature(body)},
    )


def bad_inputs(task: Task) -> dict[str, tuple[Delivery, int, str]]:
    """Case name -> (delivery, HTTP status, error code or outcome status)."""
    opened = pull_request_payload("opened", branch=task.branch)
    good = delivery("pull_request", opened)
    digest = good.headers["X-Hub-Signature-256"].removeprefix("sha256=")
    sha1 = "sha1=" + hmac.new(SECRET.encode(), good.body, hashlib.sha1).hexdigest()
    reserialized = json.dumps(opened, indent=2, sort_keys=True).encode()
    suffix = task.branch.removeprefix("steward/")
    other = "0" * 24 if suffix != "0" * 24 else "1" * 24
    form = urlencode({"payload": good.body.decode()}).encode()
    return {
        "missing signature": (_resigned(good, **{"X-Hub-Signature-256": None}), 401, "unauthorized"),
        "wrong signature": (
            _resigned(good, **{"X-Hub-Signature-256": signature(good.body, "guess")}),
            401,
            "unauthorized",
        ),
        "signature over re-serialized JSON": (
            _resigned(good, **{"X-Hub-Signature-256": signature(reserialized)}),
            401,
            "unauthorized",
        ),
        "trailing newline added": (
            Delivery(good.event, good.body + b"\n", good.headers),
            401,
            "unauthorized",
        ),
        "only the SHA-1 header": (
            _resigned(good, **{"X-Hub-Signature-256": None, "X-Hub-Signature": sha1}),
            401,
            "unauthorized",
        ),
        "empty digest": (_resigned(good, **{"X-Hub-Signature-256": "sha256="}), 401, "unauthorized"),
        "non-hex digest": (
            _resigned(good, **{"X-Hub-Signature-256": "sha256=" + "g" * 64}),
            401,
            "unauthorized",
        ),
        "uppercase hex": (
            _resigned(good, **{"X-Hub-Signature-256": "sha256=" + digest.upper()}),
            401,
            "unauthorized",
        ),
        "uppercase prefix": (
            _resigned(good, **{"X-Hub-Signature-256": "SHA256=" + digest}),
            401,
            "unauthorized",
        ),
        "space after the prefix": (
            _resigned(good, **{"X-Hub-Signature-256": "sha256= " + digest}),
            401,
            "unauthorized",
        ),
        "space inside the digest": (
            _resigned(good, **{"X-Hub-Signature-256": f"sha256={digest[:32]} {digest[32:]}"}),
            401,
            "unauthorized",
        ),
        "sha1 under the sha256 header": (
            _resigned(good, **{"X-Hub-Signature-256": sha1}),
            401,
            "unauthorized",
        ),
        "invalid JSON after a valid signature": (
            _with_body(good, b'{"action": "opened",'),
            400,
            "bad_request",
        ),
        "JSON that is not an object": (_with_body(good, b'["opened"]'), 400, "bad_request"),
        "JSON nested deeper than the parser goes": (
            _with_body(good, b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
            400,
            "bad_request",
        ),
        "form-encoded payload": (
            _with_body(good, form, "application/x-www-form-urlencoded"),
            400,
            "bad_request",
        ),
        "form-encoded payload sent as JSON": (_with_body(good, form), 400, "bad_request"),
        "payload GitHub would not send": (
            _with_body(good, json.dumps({"action": "opened", "number": 1}).encode()),
            400,
            "bad_request",
        ),
        "missing delivery id": (_resigned(good, **{"X-GitHub-Delivery": None}), 400, "bad_request"),
        "malformed delivery id": (_resigned(good, **{"X-GitHub-Delivery": "../../etc"}), 400, "bad_request"),
        "missing event name": (_resigned(good, **{"X-GitHub-Event": None}), 400, "bad_request"),
        "unknown event": (delivery("push", {"ref": "refs/heads/main", "commits": []}), 200, "ignored"),
        "ping event": (delivery("ping", {"zen": "Design for failure.", "hook_id": 1}), 200, "ignored"),
        "unknown pull request action": (
            delivery("pull_request", pull_request_payload("labeled", branch=task.branch)),
            200,
            "ignored",
        ),
        "action GitHub never sends": (
            delivery("pull_request", {**opened, "action": "exploded"}),
            200,
            "ignored",
        ),
        "unknown installation action": (
            delivery("installation", installation_payload("transferred")),
            200,
            "ignored",
        ),
        "unknown installation": (
            delivery("pull_request", pull_request_payload("opened", branch=task.branch, installation_id=999)),
            200,
            "ignored",
        ),
        "no installation in the payload": (
            delivery(
                "pull_request", pull_request_payload("opened", branch=task.branch, installation_id=None)
            ),
            200,
            "ignored",
        ),
        "wrong suffix": (
            delivery("pull_request", pull_request_payload("opened", branch=f"steward/{other}")),
            200,
            "ignored",
        ),
        "truncated suffix": (
            delivery("pull_request", pull_request_payload("opened", branch=task.branch[:-1])),
            200,
            "ignored",
        ),
        "suffix with extra text": (
            delivery("pull_request", pull_request_payload("opened", branch=task.branch + "-fix")),
            200,
            "ignored",
        ),
        "uppercase suffix": (
            delivery("pull_request", pull_request_payload("opened", branch="steward/" + suffix.upper())),
            200,
            "ignored",
        ),
        "another prefix": (
            delivery("pull_request", pull_request_payload("opened", branch=f"feature/{suffix}")),
            200,
            "ignored",
        ),
        "the branch of a fork": (
            delivery(
                "pull_request",
                pull_request_payload(
                    "opened", branch=task.branch, head_repo="mallory/demo", head_repo_id=666
                ),
            ),
            200,
            "ignored",
        ),
        "another repository of the installation": (
            delivery(
                "pull_request",
                pull_request_payload("opened", branch=task.branch, repo="octo/other", repo_id=5),
            ),
            200,
            "ignored",
        ),
        "the head repository of a deleted fork (null)": (
            delivery("pull_request", _edited(opened, ("pull_request", "head", "repo"), None)),
            200,
            "ignored",
        ),
    }


def _edited(payload: dict[str, Any], path: tuple[str, ...], value: Any = ...) -> dict[str, Any]:
    """A copy of `payload` with the field at `path` set to `value` (or removed: `...`)."""
    out = copy.deepcopy(payload)
    node = out
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


def unusable_deliveries(task: Task) -> dict[str, tuple[Delivery, str]]:
    """Case name -> (a verified delivery lacking a field Steward needs, that field)."""
    opened = pull_request_payload("opened", branch=task.branch)
    suspend = installation_payload("suspend", suspended=True)
    added = installation_repositories_payload("added", added=("octo/api",))
    return {
        "no head.ref": (
            delivery("pull_request", _edited(opened, ("pull_request", "head", "ref"))),
            "pull_request.head.ref",
        ),
        "head.ref null": (
            delivery("pull_request", _edited(opened, ("pull_request", "head", "ref"), None)),
            "pull_request.head.ref",
        ),
        "no base repository": (
            delivery("pull_request", _edited(opened, ("pull_request", "base", "repo"))),
            "pull_request.base.repo",
        ),
        "a pull request state GitHub has not": (
            delivery("pull_request", _edited(opened, ("pull_request", "state"), "merged")),
            "pull_request.state",
        ),
        "no repository": (delivery("pull_request", _edited(opened, ("repository",))), "repository"),
        "an installation without its id": (
            delivery("pull_request", _edited(opened, ("installation",), {"node_id": "MDIz"})),
            "installation.id",
        ),
        "an installation event without updated_at": (
            delivery("installation", _edited(suspend, ("installation", "updated_at"))),
            "installation.updated_at",
        ),
        "an updated_at beyond any calendar": (
            delivery("installation", _edited(suspend, ("installation", "updated_at"), 10**20)),
            "installation.updated_at",
        ),
        "added without repositories_added": (
            delivery("installation_repositories", _edited(added, ("repositories_added",))),
            "repositories_added",
        ),
    }


def test_every_bad_input_is_refused_or_ignored_and_stores_nothing(
    world: World,
    endpoint: LambdaHttpServer,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    cases = bad_inputs(world.task)
    before = stored(world.services.tables)
    for name, (item, status, code) in cases.items():
        response = post(endpoint, item)
        assert response.status_code == status, name
        assert response.headers["content-type"] == "application/json", name
        body = response.json()
        if status == 200:
            assert body == {"status": code}, name
        else:
            assert set(body) == {"error"}, name
            assert body["error"]["code"] == code, name
        assert stored(world.services.tables) == before, name
    assert world.current().status is TaskStatus.RUNNING
    logged = caplog.text + capsys.readouterr().out
    assert "webhook ignored" in logged
    assert "webhook refused" in logged
    for secret in [SECRET, *(item.headers.get("X-Hub-Signature-256", "") for item, _, _ in cases.values())]:
        if len(secret) > 8:
            assert secret not in logged
            assert secret.removeprefix("sha256=") not in logged


def test_a_delivery_lacking_a_field_steward_needs_is_a_400_naming_it(
    world: World, endpoint: LambdaHttpServer
) -> None:
    before = stored(world.services.tables)
    for name, (item, where) in unusable_deliveries(world.task).items():
        response = post(endpoint, item)
        assert response.status_code == 400, name
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("bad_request", where), name
        assert f"'s {where} " in error["message"], name
        assert stored(world.services.tables) == before, name


# ---- real deliveries GitHub produced (tests/fixtures/github-payloads)


def _outcome(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    status: str = response.json()["status"]
    return status


@pytest.mark.parametrize("path", real_payload_files(), ids=lambda p: p.name)
def test_every_real_delivery_is_accepted(services: Services, endpoint: LambdaHttpServer, path: Path) -> None:
    event = event_of(path)
    payload = json.loads(path.read_bytes())
    outcome = _outcome(post(endpoint, signed_file(path)))  # the file's bytes, as GitHub sent them
    if event == "pull_request":
        assert outcome == "ignored"  # none is on a Steward branch
    elif event in ("installation", "installation_repositories"):
        assert outcome == "applied"  # each is news to an empty table
        row = installation_row(services.tables, payload["installation"]["id"])
        assert row["account"] == payload["installation"]["account"]["login"]
        assert row["suspended"] is (payload["action"] in ("suspend", "deleted"))
    else:
        assert outcome == "ignored"  # ping, push, issues, check_run: not processed


def test_a_real_labelled_pull_request_moves_its_task_to_review_and_a_real_merge_to_merged(
    world: World, endpoint: LambdaHttpServer
) -> None:
    task = world.task
    opened = real_payload("octokit.pull_request.opened.json")
    assert opened["pull_request"]["labels"]
    assert "archived_by" not in opened["pull_request"]["labels"][0]  # what githubkit-schemas refused
    labelled = aimed_at(opened, branch=task.branch)
    assert _outcome(post(endpoint, delivery("pull_request", labelled))) == "applied"
    current = world.current()
    assert current.status is TaskStatus.REVIEW
    assert (current.pr_url, current.pr_number) == (opened["pull_request"]["html_url"], 2)
    assert world.item_status() == "review"
    labelled_again = aimed_at(real_payload("octokit.pull_request.labeled.json"), branch=task.branch)
    assert _outcome(post(endpoint, delivery("pull_request", labelled_again))) == "ignored"  # not an action

    merged = real_payload("reallyfastci.pull_request.closed.merged.fork.json")
    assert (
        _outcome(post(endpoint, delivery("pull_request", aimed_at(merged, branch=task.branch)))) == "applied"
    )
    current = world.current()
    assert current.status is TaskStatus.MERGED
    assert (current.pr_url, current.pr_number) == (merged["pull_request"]["html_url"], merged["number"])
    assert world.item_status() == "merged"
    assert world.events()[-1]["data"]["merged"] is True


@pytest.mark.parametrize(
    "order", [("suspend", "unsuspend"), ("unsuspend", "suspend"), ("suspend", "unsuspend", "suspend")]
)
def test_a_real_unsuspend_stamped_like_its_suspend_lifts_the_suspension(
    world: World, order: tuple[str, ...]
) -> None:
    tables = world.services.tables
    files = {
        action: delivery("installation", aimed_at(real_payload(f"octokit.installation.{action}.json")))
        for action in ("suspend", "unsuspend")
    }
    assert (
        json.loads(files["suspend"].body)["installation"]["updated_at"]
        == json.loads(files["unsuspend"].body)["installation"]["updated_at"]
    )
    for action in order:
        world.deliver(files[action])  # the last suspend is GitHub redelivering the first
    assert installation_row(tables)["suspended"] is False
    sync = plain(tables.table(INSTALLATIONS).get_item(Key={"installation_id": INSTALLATION_ID})["Item"])
    assert sync["github_sync"]["needs_refresh"] is True  # stamped alike and disagreeing: re-read later
    opened = delivery("pull_request", pull_request_payload("opened", branch=world.task.branch))
    assert world.deliver(opened) == "applied"  # not stranded: the task moves
    assert world.current().status is TaskStatus.REVIEW


def test_a_real_suspend_still_suspends(world: World) -> None:
    suspend = delivery("installation", aimed_at(real_payload("octokit.installation.suspend.json")))
    assert world.deliver(suspend) == "applied"
    assert installation_row(world.services.tables)["suspended"] is True
    opened = delivery("pull_request", pull_request_payload("opened", branch=world.task.branch))
    assert world.deliver(opened) == "ignored"


def test_the_webhook_handler_loads_no_githubkit() -> None:
    # githubkit-schemas alone is ~56 MB and a second of imports: the webhook Lambda needs none.
    code = (
        "import sys, steward.webhook_handler; "
        "print(sorted(m for m in sys.modules if m.startswith(('githubkit', 'githubkit_schemas'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_another_tenants_repository_changes_nothing(services: Services) -> None:
    alice = running_task(services, user="alice", slug="a")
    bob = running_task(services, user="bob", slug="b", repo="bob/private")
    install(services, INSTALLATION_ID, owner="alice", repositories=(REPO,))
    install(services, 8, owner="bob", repositories=("bob/private",), account="bob")
    world = World(services, receiver_for(services.tables), alice)
    before = stored(services.tables)
    attempts = {
        # alice's installation naming bob's repository and branch
        "alice's installation, bob's task": pull_request_payload(
            "opened", branch=bob.branch, repo="bob/private", repo_id=88, installation_id=INSTALLATION_ID
        ),
        # bob's installation naming alice's repository and branch
        "bob's installation, alice's task": pull_request_payload(
            "closed", merged=True, branch=alice.branch, installation_id=8
        ),
        # bob's repository with alice's branch
        "alice's task, bob's repository": pull_request_payload(
            "opened", branch=alice.branch, repo="bob/private", repo_id=88, installation_id=8
        ),
    }
    for name, payload in attempts.items():
        assert world.deliver(delivery("pull_request", payload)) == "ignored", name
        assert stored(services.tables) == before, name


def test_a_suspended_installation_changes_nothing(services: Services) -> None:
    task = running_task(services)
    install(services, suspended=True)
    world = World(services, receiver_for(services.tables), task)
    before = stored(services.tables)
    payload = pull_request_payload("closed", merged=True, branch=task.branch)
    assert world.deliver(delivery("pull_request", payload)) == "ignored"
    assert stored(services.tables) == before


def test_an_unset_secret_refuses_everything(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    task = running_task(services)
    install(services)
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", services.tables.prefix)
    monkeypatch.delenv("STEWARD_WEBHOOK_SECRET", raising=False)
    monkeypatch.delenv("STEWARD_WEBHOOK_SECRET_ID", raising=False)
    wiring.reset()
    before = stored(services.tables)
    payload = pull_request_payload("opened", branch=task.branch)
    try:
        with LambdaHttpServer(webhook_handler.lambda_handler, kind="function_url") as server:
            for secret in ("", SECRET):  # signed with the empty key, or with any key at all
                response = post(server, delivery("pull_request", payload, secret=secret))
                assert response.status_code == 401
                assert response.json()["error"]["code"] == "unauthorized"
    finally:
        wiring.reset()
    assert stored(services.tables) == before


# ---- pull request lifecycle on a real task


def test_pull_request_lifecycle_moves_the_task_to_review_then_merged(
    world: World, endpoint: LambdaHttpServer
) -> None:
    task = world.task
    assert task.status is TaskStatus.RUNNING
    mark = world.watermark()

    opened = post(endpoint, delivery("pull_request", pull_request_payload("opened", branch=task.branch)))
    assert (opened.status_code, opened.json()) == (200, {"status": "applied"})
    current = world.current()
    assert current.status is TaskStatus.REVIEW
    assert (current.pr_url, current.pr_number) == (f"https://github.com/{REPO}/pull/17", 17)
    assert world.watermark() == mark + 1
    assert world.item_status() == "review"
    event = world.events()[-1]
    assert event["type"] == "github_event"
    assert event["data"] | {"delivery": "-"} == {
        "status": "review",
        "action": "opened",
        "number": 17,
        "url": f"https://github.com/{REPO}/pull/17",
        "merged": False,
        "delivery": "-",
    }

    edited = post(endpoint, delivery("pull_request", pull_request_payload("edited", branch=task.branch)))
    assert edited.json() == {"status": "unchanged"}  # already in review: no event, no watermark
    assert world.watermark() == mark + 1

    merged = delivery("pull_request", pull_request_payload("closed", merged=True, branch=task.branch))
    response = post(endpoint, merged, path="/webhook")
    assert response.json() == {"status": "applied"}
    current = world.current()
    assert current.status is TaskStatus.MERGED
    assert current.pr_url == f"https://github.com/{REPO}/pull/17"
    assert world.watermark() == mark + 2
    assert world.item_status() == "merged"
    assert [e["type"] for e in world.events()] == ["started", "github_event", "github_event"]
    assert world.events()[-1]["data"]["merged"] is True

    # merged is final: a late reopen or a late open changes nothing
    for action in ("reopened", "opened"):
        late = post(endpoint, delivery("pull_request", pull_request_payload(action, branch=task.branch)))
        assert late.json() == {"status": "unchanged"}
    assert world.current().status is TaskStatus.MERGED
    assert world.watermark() == mark + 2
    assert len(world.events()) == 3


def test_closed_then_a_late_opened_stays_closed(world: World) -> None:
    task = world.task
    assert (
        world.deliver(delivery("pull_request", pull_request_payload("closed", branch=task.branch)))
        == "applied"
    )
    assert world.current().status is TaskStatus.CLOSED
    assert world.item_status() == "closed"
    events = len(world.events())
    late = delivery("pull_request", pull_request_payload("opened", branch=task.branch))
    assert world.deliver(late) == "unchanged"
    assert world.current().status is TaskStatus.CLOSED
    assert len(world.events()) == events
    # a merge after a close (reopened and merged) still lands
    merged = delivery("pull_request", pull_request_payload("closed", merged=True, branch=task.branch))
    assert world.deliver(merged) == "applied"
    assert world.current().status is TaskStatus.MERGED


@pytest.mark.parametrize(
    ("action", "merged", "target"), [("opened", False, "review"), ("closed", True, "merged")]
)
def test_a_failed_task_moves_on_a_verified_event(
    world: World, action: str, merged: bool, target: str
) -> None:
    tasks = world.services.tasks.tasks
    failed, _ = tasks.transition(
        world.task,
        TaskStatus.FAILED,
        now=utcnow(),
        event="failed",
        classification="final",
        reason="stream died",
    )
    tasks.project_item(failed, now=utcnow())
    mark = world.watermark()
    payload = pull_request_payload(action, merged=merged, branch=world.task.branch)
    assert world.deliver(delivery("pull_request", payload)) == "applied"
    assert world.current().status.value == target
    assert world.current().pr_number == 17
    assert world.item_status() == target
    assert world.watermark() == mark + 1


def test_a_queued_task_is_not_moved(services: Services) -> None:
    services.plans.publish("alice", "queued", document("Change module 1"))
    plan = services.plans.confirm("alice", "queued")
    task, _ = spawn_item(services, plan, 1)
    install(services)
    world = World(services, receiver_for(services.tables), task)
    payload = pull_request_payload("opened", branch=task.branch)
    assert world.deliver(delivery("pull_request", payload)) == "unchanged"
    assert world.current().status is TaskStatus.QUEUED


def test_a_duplicate_delivery_costs_one_request_and_changes_nothing(
    world: World, endpoint: LambdaHttpServer
) -> None:
    item = delivery("pull_request", pull_request_payload("opened", branch=world.task.branch))
    assert world.deliver(item) == "applied"
    before = stored(world.services.tables)
    with count_requests(world.services.tables) as requests:
        assert world.deliver(item) == "duplicate"
    assert sum(requests.values()) == 1
    assert dict(requests) == {"GetItem": 1}
    assert stored(world.services.tables) == before
    response = post(endpoint, item)  # the same redelivery through the Function URL
    assert (response.status_code, response.json()) == (200, {"status": "duplicate"})
    assert stored(world.services.tables) == before


def test_a_failure_while_acting_leaves_no_record_so_a_redelivery_is_processed(world: World) -> None:
    tables = world.services.tables
    item = delivery("pull_request", pull_request_payload("opened", branch=world.task.branch))
    tables.client.delete_table(TableName=tables.name(EVENTS))
    with pytest.raises(Exception, match=r"ResourceNotFound|non-existent|not found"):
        world.deliver(item)
    assert tables.table(DELIVERIES).scan()["Items"] == []
    tables.create_all((EVENTS,))
    assert world.deliver(item) == "applied"
    assert world.current().status is TaskStatus.REVIEW


# ---- installations


def installation_row(tables: Tables, installation_id: int = INSTALLATION_ID) -> dict[str, Any]:
    item = plain(tables.table(INSTALLATIONS).get_item(Key={"installation_id": installation_id})["Item"])
    return {k: item.get(k) for k in ("owner_sub", "account", "repositories", "suspended")}


def test_installation_events_keep_the_installations_table_true(services: Services) -> None:
    tables = services.tables
    task = running_task(services)
    receiver = receiver_for(tables)
    world = World(services, receiver, task)

    def at(minutes: int) -> datetime:
        return T0 + timedelta(minutes=minutes)

    created = installation_payload("created", at=at(0), repositories=(REPO, "octo/docs"))
    assert world.deliver(delivery("installation", created)) == "applied"
    assert installation_row(tables) == {
        "owner_sub": None,
        "account": "octo",
        "repositories": ["octo/demo", "octo/docs"],
        "suspended": False,
    }
    InstallationStore(tables).link(INSTALLATION_ID, "alice", now=utcnow())  # the operator links it

    added = installation_repositories_payload("added", at=at(1), added=("octo/api",))
    assert world.deliver(delivery("installation_repositories", added)) == "applied"
    removed = installation_repositories_payload("removed", at=at(2), removed=("octo/docs",))
    assert world.deliver(delivery("installation_repositories", removed)) == "applied"
    assert installation_row(tables)["repositories"] == ["octo/api", "octo/demo"]

    suspend = installation_payload("suspend", at=at(3), suspended=True)
    assert world.deliver(delivery("installation", suspend)) == "applied"
    assert installation_row(tables)["suspended"] is True
    opened = delivery("pull_request", pull_request_payload("opened", branch=task.branch))
    assert world.deliver(opened) == "ignored"  # suspended: pull request events change nothing
    assert world.current().status is TaskStatus.RUNNING

    unsuspend = installation_payload("unsuspend", at=at(4))
    assert world.deliver(delivery("installation", unsuspend)) == "applied"
    assert installation_row(tables)["suspended"] is False
    assert world.deliver(opened) == "applied"  # the ignored delivery left no record behind
    assert world.current().status is TaskStatus.REVIEW

    late_suspend = installation_payload("suspend", at=at(3), suspended=True, repositories=(REPO,))
    assert world.deliver(delivery("installation", late_suspend)) == "unchanged"  # older than unsuspend
    assert installation_row(tables)["suspended"] is False

    renamed = installation_payload("new_permissions_accepted", at=at(5), account="octo-inc")
    assert world.deliver(delivery("installation", renamed)) == "applied"
    assert installation_row(tables)["account"] == "octo-inc"

    deleted = installation_payload("deleted", at=at(6), account="octo-inc", repositories=(REPO,))
    assert world.deliver(delivery("installation", deleted)) == "applied"
    assert installation_row(tables) == {
        "owner_sub": "alice",
        "account": "octo-inc",
        "repositories": [],
        "suspended": True,
    }
    re_added = installation_repositories_payload("added", at=at(7), account="octo-inc", added=("octo/new",))
    assert world.deliver(delivery("installation_repositories", re_added)) == "unchanged"
    assert installation_row(tables)["repositories"] == []


def convergence_round(services: Services, round_no: int, order: list[int]) -> dict[str, Any]:
    """The 6 deliveries of one round in `order`; returns the final state they leave."""
    slug = f"conv-{round_no}"
    installation_id = 1000 + round_no
    task = running_task(services, slug=slug)
    install(services, installation_id, repositories=(REPO,))  # linked by an operator beforehand
    receiver = receiver_for(services.tables)

    def at(minutes: int) -> datetime:
        return T0 + timedelta(minutes=minutes)

    added = delivery(
        "installation_repositories",
        installation_repositories_payload(
            "added", installation_id=installation_id, at=at(1), added=("octo/extra",)
        ),
    )
    deliveries = [
        delivery(
            "installation",
            installation_payload("created", installation_id=installation_id, at=at(0), repositories=(REPO,)),
        ),
        added,
        delivery(
            "pull_request",
            pull_request_payload("opened", branch=task.branch, installation_id=installation_id),
        ),
        delivery(
            "pull_request",
            pull_request_payload("closed", merged=True, branch=task.branch, installation_id=installation_id),
        ),
        added,  # GitHub redelivering the same delivery (same id and body)
        delivery(
            "installation_repositories",
            installation_repositories_payload(
                "removed", installation_id=installation_id, at=at(2), removed=("octo/extra",)
            ),
        ),
    ]
    for index in order:
        item = deliveries[index]
        receiver.receive(item.body, item.headers)
    final = services.tasks.tasks.require(task.id)
    plan = services.plans.get("alice", slug)
    # GitHub redelivering all of them afterwards changes nothing (a delivery that changed
    # nothing stored no mark, so which ones answer "duplicate" depends on the order).
    replayed = {receiver.receive(x.body, x.headers).status for x in deliveries}
    return {
        "task": (final.status.value, final.pr_url, final.pr_number),
        "item": next(i.status.value for i in plan.items if i.key == task.item_key),
        "installation": installation_row(services.tables, installation_id),
        "replayed": replayed <= {"duplicate", "unchanged"} and services.tasks.tasks.require(task.id) == final,
    }


def test_a_hundred_orders_of_the_same_deliveries_end_in_the_same_state(services: Services) -> None:
    rng = random.Random(5)
    orders = [list(range(6))]
    all_orders = list(itertools.permutations(range(6)))
    rng.shuffle(all_orders)
    orders += [list(o) for o in all_orders if list(o) != orders[0]][:99]
    assert len({tuple(o) for o in orders}) == 100
    # orders where arrival contradicts GitHub's order: removal before addition, merge before open
    assert sum(o.index(1) > o.index(5) for o in orders) > 20
    assert sum(o.index(2) > o.index(3) for o in orders) > 20
    finals = [convergence_round(services, n, order) for n, order in enumerate(orders)]
    expected = {
        "task": ("merged", f"https://github.com/{REPO}/pull/17", 17),
        "item": "merged",
        "installation": {"owner_sub": "alice", "account": "octo", "repositories": [REPO], "suspended": False},
        "replayed": True,
    }
    for order, final in zip(orders, finals, strict=True):
        assert final == expected, order


_REPOS = ("octo/a", "octo/b", "Octo/B", "octo/c")


@st.composite
def changes(draw: st.DrawFn) -> InstallationChange:
    kind = draw(st.sampled_from(["created", "added", "removed", "suspend", "unsuspend", "deleted"]))
    repos = tuple(draw(st.lists(st.sampled_from(_REPOS), max_size=3)))
    precedence = {"suspend": SUSPEND, "unsuspend": UNSUSPEND}.get(kind, REPORT)
    return InstallationChange(
        installation_id=1,
        stamp=draw(st.integers(0, 5)),  # few stamps: plenty of ties
        account=draw(st.sampled_from(["octo", "octo-inc", None])),
        suspended={"suspend": True, "unsuspend": False}.get(kind, draw(st.booleans())),
        snapshot=repos if kind == "created" else None,
        added=repos if kind == "added" else (),
        removed=repos if kind == "removed" else (),
        deleted=kind == "deleted" and draw(st.booleans()),
        precedence=precedence,
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(changes(), min_size=1, max_size=7), st.randoms(use_true_random=False))
def test_the_installation_merge_ignores_order_and_repetition(
    events: list[InstallationChange], rng: random.Random
) -> None:
    def fold(sequence: list[InstallationChange]) -> tuple[Installation, InstallationSync, bool]:
        state = InstallationSync()
        for change in sequence:
            state = merge(state, change)
        return state.view(1, "alice"), state, state.needs_refresh  # the disputes too

    shuffled = [*events, rng.choice(events)]  # a redelivery, processed again
    rng.shuffle(shuffled)
    assert fold(shuffled) == fold(events)


# ---- the Lambda entry point


def _function_url_event(item: Delivery, *, base64_body: bool) -> dict[str, Any]:
    body = base64.b64encode(item.body).decode() if base64_body else item.body.decode()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "rawQueryString": "",
        "headers": {k.lower(): v for k, v in item.headers.items()},
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "abcdefghij",
            "domainName": "abcdefghij.lambda-url.us-east-1.on.aws",
            "domainPrefix": "abcdefghij",
            "http": {
                "method": "POST",
                "path": "/",
                "protocol": "HTTP/1.1",
                "sourceIp": "140.82.115.1",
                "userAgent": "GitHub-Hookshot/a1b2c3d",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Mar/2025:12:00:00 +0000",
            "timeEpoch": 1740830400000,
        },
        "body": body,
        "isBase64Encoded": base64_body,
    }


def test_the_handler_reads_a_base64_body_and_a_secret_from_secrets_manager(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_id = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="steward/webhook-secret", SecretString=SECRET
    )["ARN"]
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", world.services.tables.prefix)
    monkeypatch.delenv("STEWARD_WEBHOOK_SECRET", raising=False)
    monkeypatch.setenv("STEWARD_WEBHOOK_SECRET_ID", secret_id)
    wiring.reset()
    try:
        item = delivery("pull_request", pull_request_payload("opened", branch=world.task.branch))
        result = webhook_handler.lambda_handler(
            _function_url_event(item, base64_body=True), LambdaContext("hook")
        )
        assert result["statusCode"] == 200
        assert json.loads(result["body"]) == {"status": "applied"}
        assert world.current().status is TaskStatus.REVIEW
        assert "It's a Secret" not in repr(wiring.webhook_receiver())
        again = webhook_handler.lambda_handler(
            _function_url_event(item, base64_body=False), LambdaContext("hook")
        )
        assert json.loads(again["body"]) == {"status": "duplicate"}
    finally:
        wiring.reset()


def test_the_handler_answers_other_routes_with_a_json_404(endpoint: LambdaHttpServer) -> None:
    response = httpx.get(endpoint.url + "/")
    assert response.status_code in (404, 405)
    assert response.json()["error"]["code"] == "not_found"
    response = httpx.post(endpoint.url + "/elsewhere", content=b"{}")
    assert response.status_code == 404


# ---- no acknowledged delivery is lost


class Throttle:
    """From the `nth` DynamoDB request of the receiver on, every request fails with a
    throttle, as an exhausted retry budget surfaces it: the delivery's processing dies at
    that request, and nothing after it (no compensating write) gets through. A botocore
    hook: the real client, the real stores."""

    def __init__(self, tables: Tables, nth: int) -> None:
        self.nth, self.seen, self.fired = nth, 0, ""
        self._events = tables.client.meta.events

    def __call__(self, model: Any, **_: Any) -> None:
        self.seen += 1
        if self.seen >= self.nth:
            self.fired = self.fired or model.name
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "injected"}}
            raise ClientError(error, model.name)  # type: ignore[arg-type]

    def __enter__(self) -> Throttle:
        self._events.register("before-call.dynamodb", self)
        return self

    def __exit__(self, *_: object) -> None:
        self._events.unregister("before-call.dynamodb", self)


def _pull_request_round(world: World) -> list[Delivery]:
    return [
        delivery("pull_request", pull_request_payload("opened", branch=world.task.branch)),
        delivery("pull_request", pull_request_payload("closed", merged=True, branch=world.task.branch)),
    ]


@pytest.mark.parametrize("nth", range(1, 6))
def test_a_throttle_at_any_request_loses_nothing_and_the_redelivery_applies_it_once(
    services: Services, nth: int
) -> None:
    world = World(services, receiver_for(services.tables), running_task(services, slug=f"throttle-{nth}"))
    install(services)
    opened, merged = _pull_request_round(world)
    with Throttle(services.tables, nth) as throttle, pytest.raises(ClientError):
        world.deliver(opened)  # answered 500: GitHub records the failure and redelivers
    assert throttle.fired, "the delivery made fewer requests than the throttle waited for"
    assert world.deliver(opened) in ("applied", "duplicate")  # GitHub's redelivery
    assert world.deliver(opened) == "duplicate"
    assert world.current().status is TaskStatus.REVIEW
    assert [e["type"] for e in world.events()].count("github_event") == 1  # recorded exactly once
    assert world.deliver(merged) == "applied"
    assert world.current().status is TaskStatus.MERGED


@pytest.mark.parametrize("nth", range(1, 4))
def test_a_throttled_installation_delivery_is_processed_again_on_redelivery(
    services: Services, nth: int
) -> None:
    install(services)
    receiver = receiver_for(services.tables)
    added = delivery(
        "installation_repositories",
        installation_repositories_payload("added", at=T0 + timedelta(minutes=1), added=("octo/extra",)),
    )
    with Throttle(services.tables, nth) as throttle, pytest.raises(ClientError):
        receiver.receive(added.body, added.headers)
    assert throttle.fired
    assert receiver.receive(added.body, added.headers).status == "applied"
    assert receiver.receive(added.body, added.headers).status == "duplicate"
    assert "octo/extra" in installation_row(services.tables, INSTALLATION_ID)["repositories"]


def test_two_copies_of_one_delivery_racing_apply_it_once(world: World) -> None:
    opened, _ = _pull_request_round(world)
    barrier = threading.Barrier(8)

    def deliver() -> str:
        barrier.wait(timeout=10)
        return world.deliver(opened)

    with ThreadPoolExecutor(8) as pool:
        outcomes = sorted(pool.map(lambda _: deliver(), range(8)))
    assert outcomes.count("applied") == 1
    assert set(outcomes) <= {"applied", "duplicate", "unchanged"}
    assert [e["type"] for e in world.events()].count("github_event") == 1


def test_a_real_reopen_brings_a_closed_task_back_to_review_but_never_a_withdrawn_one(
    world: World, endpoint: LambdaHttpServer
) -> None:
    """A person closed Steward's pull request, then reopened it: the task and its item are in
    review again. A task Steward withdrew stays closed: its pull request is to be closed
    again by the loop (`pr_close_pending`), and a late `opened` is no reopen."""
    task = world.task
    closed = delivery("pull_request", pull_request_payload("closed", branch=task.branch))
    assert _outcome(post(endpoint, closed)) == "applied"
    assert (world.current().status, world.item_status()) == (TaskStatus.CLOSED, "closed")
    late = delivery("pull_request", pull_request_payload("opened", branch=task.branch))
    assert _outcome(post(endpoint, late)) == "unchanged"
    assert world.current().status is TaskStatus.CLOSED

    payload = real_payload("octokit.pull_request.reopened.json")
    assert (payload["action"], payload["pull_request"]["state"]) == ("reopened", "open")
    reopened = delivery("pull_request", aimed_at(payload, branch=task.branch))
    assert _outcome(post(endpoint, reopened)) == "applied"
    current = world.current()
    assert (current.status, world.item_status()) == (TaskStatus.REVIEW, "review")
    assert (current.pr_url, current.pr_number) == (payload["pull_request"]["html_url"], payload["number"])
    assert world.events()[-1]["data"]["action"] == "reopened"
    assert _outcome(post(endpoint, reopened)) == "duplicate"

    # withdrawn by its owner: the withdrawal stands
    withdrawn = world.services.tasks.cancel("alice", task.id)
    assert (withdrawn.status, withdrawn.reason, withdrawn.pr_close_pending) == (
        TaskStatus.CLOSED,
        "withdrawn",
        True,
    )
    tasks = world.services.tasks.tasks
    tasks.finish_withdrawal(withdrawn, {"number": withdrawn.pr_number}, now=utcnow())  # the loop closed it
    assert not tasks.require(task.id).pr_close_pending
    again = delivery("pull_request", aimed_at(payload, branch=task.branch))
    assert _outcome(post(endpoint, again)) == "applied"
    current = world.current()
    assert (current.status, current.reason, current.pr_close_pending) == (
        TaskStatus.CLOSED,
        "withdrawn",
        True,
    )
    assert world.item_status() == "closed"
    assert task.id in {t.id for t in tasks.live_for_user("alice")}  # the loop sees it to close it
    assert world.events()[-1]["type"] == "pr_reopened"
    twice = delivery("pull_request", aimed_at(payload, branch=task.branch))
    assert _outcome(post(endpoint, twice)) == "unchanged"  # already to be closed again


# ---- follow-up triggers on a task in review (steward.domain.follow_ups)


def _in_review(world: World) -> tuple[Task, int]:
    """The world's task moved to review by GitHub's real `opened` delivery; its pull number."""
    opened = aimed_at(real_payload("octokit.pull_request.opened.json"), branch=world.task.branch)
    assert world.deliver(delivery("pull_request", opened)) == "applied"
    task = world.current()
    assert task.status is TaskStatus.REVIEW
    assert task.pr_number is not None
    return task, task.pr_number


def _review(
    world: World,
    number: int,
    *,
    state: str = "changes_requested",
    association: str = "COLLABORATOR",
    body: str = "Please also handle negative numbers.",
) -> dict[str, Any]:
    payload = aimed_at(real_payload("octokit.pull_request_review.submitted.json"), branch=world.task.branch)
    payload["pull_request"]["number"] = number
    payload["review"].update(state=state, body=body, author_association=association)
    return payload


def _follow_ups(world: World) -> list[dict[str, Any]]:
    return [e for e in world.events() if e["type"].startswith("follow_up")]


def test_a_review_requesting_changes_is_recorded_once_with_its_round_key(world: World) -> None:
    task, number = _in_review(world)
    watermark = world.watermark()
    review = delivery("pull_request_review", _review(world, number))
    assert world.deliver(review) == "applied"
    assert world.deliver(review) == "duplicate"  # GitHub's redelivery of that delivery
    again = delivery("pull_request_review", _review(world, number))  # the same ask, another delivery id
    assert world.deliver(again) == "unchanged"
    head = real_payload("octokit.pull_request_review.submitted.json")["review"]["commit_id"]
    assert world.current().follow_up_keys == (f"{number}:{head}:review",)
    [asked] = _follow_ups(world)
    assert asked["type"] == "follow_up_asked"
    data = asked["data"]
    assert (data["kind"], data["round_key"], data["author"], data["author_association"]) == (
        "review",
        f"{number}:{head}:review",
        "Codertocat",
        "COLLABORATOR",
    )
    assert data["body"] == "Please also handle negative numbers."
    assert world.current().status is TaskStatus.REVIEW  # the item stays in review
    assert world.current().event_seq == task.event_seq + 1  # one event, nothing else moved
    # The ask waits for the loop's round, and woke the loop in the same transaction.
    assert world.current().pending_asks == (data,)
    assert world.watermark() == watermark + 1


def test_a_mention_and_a_failing_check_on_the_same_head_are_rounds_of_their_own(world: World) -> None:
    _, number = _in_review(world)
    mention = aimed_at(
        real_payload("octokit.pull_request_review_comment.created.json"), branch=world.task.branch
    )
    mention["pull_request"]["number"] = number
    mention["comment"].update(body="@steward use a constant here", author_association="MEMBER")
    assert world.deliver(delivery("pull_request_review_comment", mention)) == "applied"
    check = aimed_at(real_payload("octokit.check_run.completed.1.json"))
    check["check_run"]["pull_requests"][0]["number"] = number
    check["check_run"]["pull_requests"][0]["head"]["ref"] = world.task.branch
    assert world.deliver(delivery("check_run", check)) == "applied"
    second = copy.deepcopy(check)  # another failing check on the same commit: the same round
    second["check_run"].update(id=42, name="tests")
    assert world.deliver(delivery("check_run", second)) == "unchanged"
    assert sorted(k.rsplit(":", 1)[1] for k in world.current().follow_up_keys) == ["check", "mention"]
    kinds = [(e["type"], e["data"]["kind"]) for e in _follow_ups(world)]
    assert kinds == [("follow_up_asked", "mention"), ("follow_up_asked", "check")]
    [inline] = _follow_ups(world)[0]["data"]["comments"]
    assert inline["path"] == "README.md"


@pytest.mark.parametrize(
    ("association", "kind", "reason"),
    [
        ("NONE", "User", "only collaborators of the repository can ask Steward for a change"),
        ("CONTRIBUTOR", "User", "only collaborators of the repository can ask Steward for a change"),
        ("OWNER", "Bot", "the author is a bot"),
    ],
)
def test_a_review_by_someone_who_may_not_ask_is_recorded_as_refused_and_asks_for_nothing(
    world: World, association: str, kind: str, reason: str
) -> None:
    _, number = _in_review(world)
    payload = _review(world, number, association=association)
    payload["review"]["user"]["type"] = kind
    assert world.deliver(delivery("pull_request_review", payload)) == "applied"
    assert world.current().follow_up_keys == ()
    [refused] = _follow_ups(world)
    assert (refused["type"], refused["data"]["reason"]) == ("follow_up_refused", reason)


def test_a_trigger_on_a_task_not_in_review_or_on_another_pull_request_changes_nothing(world: World) -> None:
    before = stored(world.services.tables)
    assert world.deliver(delivery("pull_request_review", _review(world, 2))) == "ignored"  # still running
    assert stored(world.services.tables) == before
    _, number = _in_review(world)
    before = stored(world.services.tables)
    assert world.deliver(delivery("pull_request_review", _review(world, number + 1))) == "ignored"
    approving = _review(world, number, state="approved", body="LGTM")
    assert world.deliver(delivery("pull_request_review", approving)) == "ignored"  # asks for nothing
    assert stored(world.services.tables) == before


def test_a_review_delivered_on_eight_threads_is_asked_for_once(world: World) -> None:
    _, number = _in_review(world)
    copies = [delivery("pull_request_review", _review(world, number)) for _ in range(8)]
    copies += [copies[0]] * 4  # and one delivery redelivered while the others arrive
    barrier = threading.Barrier(len(copies))

    def deliver(item: Delivery) -> str:
        barrier.wait()
        return world.deliver(item)

    with ThreadPoolExecutor(len(copies)) as pool:
        outcomes = list(pool.map(deliver, copies))
    assert outcomes.count("applied") == 1, outcomes
    assert set(outcomes) <= {"applied", "unchanged", "duplicate"}
    assert len(world.current().follow_up_keys) == 1
    assert [e["type"] for e in _follow_ups(world)] == ["follow_up_asked"]


def test_a_review_that_arrives_as_the_pull_request_is_merged_records_nothing_after_the_merge(
    world: World,
) -> None:
    """The receiver reads the task in review; before its write, the merge lands. The write is
    conditional on the task as read, and the ask is judged again on the task as it is now."""
    _, number = _in_review(world)
    merged = pull_request_payload("closed", merged=True, branch=world.task.branch, number=number)
    store = world.receiver.tasks
    read = store.get

    def read_then_merge(task_id: str) -> Task | None:
        task = read(task_id)
        store.get = read  # type: ignore[method-assign]
        assert world.deliver(delivery("pull_request", merged)) == "applied"
        return task

    store.get = read_then_merge  # type: ignore[method-assign]
    outcome = world.receiver.receive(*_signed_parts(delivery("pull_request_review", _review(world, number))))
    assert (outcome.status, outcome.reason) == ("unchanged", "the task is merged, not in review")
    assert world.current().status is TaskStatus.MERGED
    assert world.current().follow_up_keys == ()
    assert _follow_ups(world) == []


def _signed_parts(item: Delivery) -> tuple[bytes, dict[str, str]]:
    return item.body, item.headers


CREDENTIALS = [
    "ghp_" + "a1B2" * 9,
    "github_pat_" + "A" * 22 + "_" + "b" * 59,
    "ghs_" + "Z" * 36,
    "AKIA" + "ABCDEFGHIJKLMNOP",
]


@pytest.mark.parametrize("secret", CREDENTIALS)
def test_a_credential_in_a_review_an_inline_comment_or_a_check_output_is_never_stored(
    world: World, secret: str
) -> None:
    _, number = _in_review(world)
    review = _review(world, number, body=f"use this token: {secret} please")
    assert world.deliver(delivery("pull_request_review", review)) == "applied"
    inline = aimed_at(
        real_payload("octokit.pull_request_review_comment.created.json"), branch=world.task.branch
    )
    inline["pull_request"]["number"] = number
    inline["comment"].update(
        body=f"@steward the key is {secret}", diff_hunk=f"+KEY = '{secret}'", author_association="OWNER"
    )
    assert world.deliver(delivery("pull_request_review_comment", inline)) == "applied"
    check = aimed_at(real_payload("octokit.check_run.completed.1.json"))
    check["check_run"]["pull_requests"][0].update(number=number)
    check["check_run"]["pull_requests"][0]["head"]["ref"] = world.task.branch
    check["check_run"]["output"] = {"title": "tests", "summary": f"env: TOKEN={secret}", "text": None}
    assert world.deliver(delivery("check_run", check)) == "applied"
    asked = _follow_ups(world)
    assert [e["data"]["kind"] for e in asked] == ["review", "mention", "check"]
    written = json.dumps(world.services.tasks.events.list(world.task.id, after=0, limit=100))
    assert secret not in written
    assert "[REDACTED" in written


def test_a_task_holds_a_bounded_number_of_asks(world: World) -> None:
    _, number = _in_review(world)
    full = [f"{number}:{n:040x}:check" for n in range(MAX_FOLLOW_UP_KEYS)]
    world.services.tables.table(TASKS).update_item(
        Key={"task_id": world.task.id},
        UpdateExpression="SET follow_up_keys = :k",
        ExpressionAttributeValues={":k": full},
    )
    outcome = world.receiver.receive(*_signed_parts(delivery("pull_request_review", _review(world, number))))
    assert (outcome.status, outcome.reason) == (
        "unchanged",
        f"the task holds {MAX_FOLLOW_UP_KEYS} follow-up asks already",
    )
    assert len(world.current().follow_up_keys) == MAX_FOLLOW_UP_KEYS


def test_a_strangers_flood_of_mentions_never_uses_up_what_a_collaborator_may_ask(world: World) -> None:
    _, number = _in_review(world)
    for n in range(MAX_REFUSALS + 5):  # each a new comment of someone who may not ask
        mention = aimed_at(
            real_payload("octokit.pull_request_review_comment.created.json"), branch=world.task.branch
        )
        mention["pull_request"]["number"] = number
        mention["comment"].update(id=9000 + n, body="@steward do my bidding", author_association="NONE")
        world.deliver(delivery("pull_request_review_comment", mention))
    refused = [e for e in _follow_ups(world) if e["type"] == "follow_up_refused"]
    assert len(refused) == MAX_REFUSALS
    assert world.deliver(delivery("pull_request_review", _review(world, number))) == "applied"
    assert [e["type"] for e in _follow_ups(world)][-1] == "follow_up_asked"
