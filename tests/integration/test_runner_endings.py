"""How a run ends, against in-process moto and the runtime Lambda's routes behind the local
HTTP adapter (the run's events and ending go through them with a KMS-signed capability; its
artifacts go to the store directly, as the e2e runs upload them by presigned PUTs): artifacts
fail closed when redaction cannot be guaranteed, and a task that is no longer the runtime's
is never written again."""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from steward import runtime_handler
from steward.adapters.artifact_store import SCREEN_NAME
from steward.adapters.capability_signer import KmsCapabilitySigner, kms_client
from steward.adapters.runtime_api import RuntimeApi, RuntimeApiError
from steward.config import Settings
from steward.domain.capability import capability_claims
from steward.domain.failures import FailureCode
from steward.domain.models import Fault, Task, TaskStatus, utcnow
from steward.domain.redaction import RedactionError, Redactor
from steward.runner.config import RunnerConfig
from steward.runner.main import QuerylessUrls, RedactingFilter
from steward.runner.run import Run
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.documents import document, numbered
from tests.support.plans import spawn_item
from tests.support.runtime_routes import new_capability_key, runtime_github, runtime_server


class FailingRedactor(Redactor):
    """Redaction that cannot be guaranteed for anything mentioning the secret word."""

    def redact(self, text: str) -> str:
        if "unredactable" in text:
            raise RedactionError("redaction failed")
        return super().redact(text)


@pytest.fixture
def running(services: Services) -> Task:
    services.plans.publish("alice", "demo", document(*numbered(1)))
    plan = services.plans.confirm("alice", "demo")
    task, _ = spawn_item(services, plan, 1)
    now = utcnow()
    return services.tasks.tasks.claim(task, runtime_id="r1", now=now, deadline=now)


class Control:
    """The runtime routes, and capabilities for them."""

    def __init__(self, url: str, signer: KmsCapabilitySigner) -> None:
        self.url = url
        self.signer = signer

    def capability(self, task: Task) -> str:
        claims = capability_claims(
            sub=task.user, task_id=task.id, model_id=task.model, max_budget_usd=task.budget_usd, now=utcnow()
        )
        return self.signer.mint(claims)


@pytest.fixture
def control(services: Services, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Control]:
    key_id = new_capability_key()
    with runtime_server(services, settings, monkeypatch, key_id) as server:
        yield Control(server.url, KmsCapabilitySigner(kms_client(region_name=REGION), key_id))


def make_run(services: Services, control: Control, task: Task, redactor: Redactor) -> Run:
    config = RunnerConfig(task_id=task.id, ticket="ticket-value", api_url=control.url, relay_url="http://x")
    capability = control.capability(task)
    redactor.add(capability)
    return Run(
        config,
        task,
        "r1",
        capability,
        artifacts=services.tasks.artifacts,
        api=RuntimeApi(control.url, "http://127.0.0.1:9", sleep=lambda _: None),
        redactor=redactor,
    )


def events(services: Services, task: Task) -> list[dict[str, Any]]:
    return services.tasks.events.list(task.id, after=0, limit=100)


def test_an_artifact_that_cannot_be_redacted_is_not_written_and_the_ending_says_so(
    services: Services, control: Control, running: Task, tmp_path: Path
) -> None:
    run = make_run(services, control, running, FailingRedactor())
    run.records.harness.append({"kind": "turn", "text": "unredactable"})
    reason = run._fail(
        tmp_path / "no-clone", "the model did not finish", "final", FailureCode.MODEL_DID_NOT_FINISH
    )
    assert reason == "failed"
    store = services.tasks.artifacts
    assert not store.exists(running.id, "harness.json")
    assert store.exists(running.id, "bootstrap.json")
    assert store.exists(running.id, SCREEN_NAME)
    finished = events(services, running)[-1]
    assert finished["type"] == "finished"
    assert finished["data"]["artifacts_not_written"] == ["harness.json"]
    task = services.tasks.tasks.require(running.id)
    assert (task.status, task.classification, task.reason) == (
        TaskStatus.FAILED,
        "final",
        "the model did not finish",
    )
    assert task.failure_code == "model_did_not_finish"
    assert finished["data"]["code"] == "model_did_not_finish"


def test_secrets_the_runtime_holds_never_reach_an_artifact(
    services: Services, control: Control, running: Task, tmp_path: Path
) -> None:
    run = make_run(services, control, running, Redactor(["ticket-value"]))
    capability = run.capability
    run.records.bootstrap["note"] = f"ticket-value {capability} ghs_" + "x" * 36
    assert (
        run._fail(tmp_path / "no-clone", f"failed with {capability}", "retryable", FailureCode.RUNNER_ERROR)
        == "failed"
    )
    store = services.tasks.artifacts
    for name in ("bootstrap.json", "harness.json", SCREEN_NAME):
        text = store.read_text(running.id, name) or ""
        assert "ticket-value" not in text
        assert capability not in text
        assert "ghs_xxxx" not in text
    assert capability not in json.dumps(events(services, running))
    assert capability not in (services.tasks.tasks.require(running.id).reason or "")


def test_a_task_cancelled_meanwhile_is_not_written_again(
    services: Services, control: Control, running: Task, tmp_path: Path
) -> None:
    services.tasks.tasks.cancel("alice", running.id, now=utcnow(), reason="stop")
    cancelled = services.tasks.tasks.require(running.id)
    seen = events(services, running)
    run = make_run(services, control, running, Redactor())
    run.emit("phase", {"phase": "checks"})  # refused (409) and logged, never written
    assert run._fail(tmp_path / "no-clone", "late failure", "final", FailureCode.RUNNER_ERROR) == "cancelled"
    assert services.tasks.tasks.require(running.id) == cancelled
    assert events(services, running) == seen
    assert services.tasks.artifacts.exists(running.id, "harness.json")  # the run's record stays


def test_runtime_log_lines_and_tracebacks_are_redacted() -> None:
    redactor = Redactor(["capability-value"])
    logger = logging.getLogger("steward.runner.test")
    handler = logging.StreamHandler(io.StringIO())
    handler.addFilter(RedactingFilter(redactor))
    logger.addHandler(handler)
    try:
        logger.warning("sending %s", "capability-value")
        try:
            raise RuntimeError("failed with capability-value")
        except RuntimeError:
            logger.exception("runner error")
    finally:
        logger.removeHandler(handler)
    stream = handler.stream
    assert isinstance(stream, io.StringIO)
    written = stream.getvalue()
    assert "capability-value" not in written
    assert "sending [REDACTED]" in written
    assert "RuntimeError: failed with [REDACTED]" in written


def test_presigned_urls_are_logged_without_their_query() -> None:
    logger = logging.getLogger("httpx")
    handler = logging.StreamHandler(io.StringIO())
    logger.addHandler(handler)
    queryless = QuerylessUrls()
    logger.addFilter(queryless)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        url = httpx.URL(
            "http://127.0.0.1:1/bucket/artifacts/t1/harness.json?X-Amz-Signature=f00d&X-Amz-Expires=120"
        )
        logger.info('HTTP Request: %s %s "%s %d %s"', "PUT", url, "HTTP/1.1", 200, "OK")
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(queryless)
        logger.setLevel(level)
    stream = handler.stream
    assert isinstance(stream, io.StringIO)
    assert (
        stream.getvalue()
        == 'HTTP Request: PUT http://127.0.0.1:1/bucket/artifacts/t1/harness.json "HTTP/1.1 200 OK"\n'
    )


def test_a_webhook_faster_than_the_runtime_still_gets_the_runs_finished_event(
    services: Services, control: Control, running: Task, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pull request's webhook moved the task to review; the heartbeat then saw the task
    # was no longer running and stopped the run's checks. The ending is still recorded, once.
    with runtime_github(services, monkeypatch, tmp_path, (running.repo,)) as github:
        opened = github.pull(running.repo, running.branch)
        services.tasks.tasks.transition(
            running,
            TaskStatus.REVIEW,
            now=utcnow(),
            event="github_event",
            extra={"pr_url": opened.url, "pr_number": opened.number},
        )
        run = make_run(services, control, running, Redactor())
        run.stop()
        pull = {"pr_url": opened.url, "pr_number": opened.number}
        ending = run._finish(
            TaskStatus.REVIEW, {"outcome": "published", **pull, "summary": "Done."}, extra=pull
        )
        assert ending == "review"
        finished = events(services, running)[-1]
        assert (finished["type"], finished["data"]["outcome"]) == ("finished", "published")
        assert services.tasks.tasks.require(running.id).status is TaskStatus.REVIEW
        assert run._finish(TaskStatus.REVIEW, {"outcome": "published", **pull}, extra=pull) == "review"
        assert [e["type"] for e in events(services, running)].count("finished") == 1


@pytest.fixture
def metered(services: Services, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Control]:
    """The runtime routes with their metrics on, as in Lambda (the local stack turns them
    off): the handler is imported afresh with the setting, and again afterwards without."""
    saved = os.environ.get("POWERTOOLS_METRICS_DISABLED")
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "false"
    importlib.reload(runtime_handler)
    try:
        key_id = new_capability_key()
        with runtime_server(services, settings, monkeypatch, key_id) as server:
            yield Control(server.url, KmsCapabilitySigner(kms_client(region_name=REGION), key_id))
    finally:
        if saved is None:
            os.environ.pop("POWERTOOLS_METRICS_DISABLED", None)
        else:
            os.environ["POWERTOOLS_METRICS_DISABLED"] = saved
        importlib.reload(runtime_handler)


def emitted(out: str, name: str) -> list[dict[str, Any]]:
    """The EMF blobs printed with metric `name`."""
    blobs = [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"_aws"' in line]
    return [b for b in blobs if name in b]


def test_an_ending_the_relay_refused_is_counted_once_for_the_alarm(
    services: Services, metered: Control, running: Task, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(services, metered, running, Redactor())
    capsys.readouterr()
    reason = "Steward's fault, not the model's or the plan's: the relay refused the runner's own request"
    ended = run._fail(
        tmp_path / "no-clone", reason, "retryable", FailureCode.RELAY_REFUSED, fault=Fault.RELAY_REFUSED
    )
    assert ended == "failed"
    (blob,) = emitted(capsys.readouterr().out, runtime_handler.REFUSED_METRIC)
    assert blob[runtime_handler.REFUSED_METRIC] == [1.0]
    assert blob["service"] == "runtime"
    (directive,) = blob["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Steward"
    task = services.tasks.tasks.require(running.id)
    assert (task.status, task.classification) == (TaskStatus.FAILED, "retryable")
    assert events(services, running)[-1]["data"]["fault"] == "relay_refused"
    assert task.failure_code == "relay_refused"
    # A replay of the same ending changes nothing and counts nothing.
    ending = {"status": "failed", "classification": "retryable", "reason": reason, "fault": "relay_refused"}
    assert run.api.finish(run.capability, run.runtime_id, ending) == "failed"
    assert emitted(capsys.readouterr().out, runtime_handler.REFUSED_METRIC) == []


# (an ending carrying a fault it cannot have, the words the 400 names)
BAD_FAULTS: list[tuple[dict[str, Any], str]] = [
    ({"status": "review", "pr_url": "https://github.example/o/r/pull/1", "pr_number": 1}, "fault"),
    ({"status": "failed", "classification": "retryable", "reason": "x", "fault": "model_refused"}, "fault"),
    ({"status": "failed", "classification": "retryable", "reason": "x", "fault": 400}, "fault"),
]


def test_an_ending_with_a_fault_it_cannot_have_is_refused_naming_the_field(
    services: Services, control: Control, running: Task
) -> None:
    run = make_run(services, control, running, Redactor())
    for ending, field in BAD_FAULTS:
        body = {"fault": "relay_refused", **ending}
        with pytest.raises(RuntimeApiError) as refused:
            run.api.finish(run.capability, run.runtime_id, body)
        assert (refused.value.status, refused.value.code) == (400, "bad_request"), body
        assert refused.value.detail.startswith(f"{field}:"), (body, refused.value.detail)
    assert services.tasks.tasks.require(running.id).status is TaskStatus.RUNNING


# (an ending carrying a failure code it cannot have, the words the 400 names)
BAD_CODES: list[dict[str, Any]] = [
    {
        "status": "review",
        "pr_url": "https://github.example/o/r/pull/1",
        "pr_number": 1,
        "code": "budget_spent",
    },
    {"status": "failed", "classification": "final", "reason": "x", "code": "no_such_code"},
    {"status": "failed", "classification": "final", "reason": "x", "code": 7},
]


def test_an_ending_with_a_code_it_cannot_have_is_refused_naming_the_field(
    services: Services, control: Control, running: Task
) -> None:
    run = make_run(services, control, running, Redactor())
    for body in BAD_CODES:
        with pytest.raises(RuntimeApiError) as refused:
            run.api.finish(run.capability, run.runtime_id, body)
        assert (refused.value.status, refused.value.code) == (400, "bad_request"), body
        assert refused.value.detail.startswith("code:"), (body, refused.value.detail)
    assert services.tasks.tasks.require(running.id).status is TaskStatus.RUNNING


def test_an_ending_without_a_code_from_an_older_runner_stores_none(
    services: Services, control: Control, running: Task
) -> None:
    run = make_run(services, control, running, Redactor())
    ending = {"status": "failed", "classification": "final", "reason": "the checks failed"}
    assert run.api.finish(run.capability, run.runtime_id, ending) == "failed"
    task = services.tasks.tasks.require(running.id)
    assert task.failure_code is None
    failure = task.to_api()["failure"]
    assert (failure["code"], failure["detail"]) == ("unrecorded", "the checks failed")
