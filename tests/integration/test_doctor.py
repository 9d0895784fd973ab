"""`steward doctor --local` against a real local stack: a healthy one is all `ok` (exit 0);
each fault below, injected into the stack as it runs and restored after its case, gives
its named FAIL with its remedy (exit 1) and fails nothing else.

One stack for the module: the faults are data (`FAULTS`), each an inject/restore pair.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from steward import cli
from steward.adapters import aws
from steward.adapters.brake_store import BrakeStore
from steward.adapters.dynamo import Tables
from steward.domain.doctor import CHECK_NAMES
from steward.domain.models import utcnow
from steward.local.github_twin import admin
from steward.local.stack import LocalStack
from steward.tables import PLANS

pytestmark = pytest.mark.integration

Restore = Callable[[], None]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    # Tables of its own: the moto servers of one process share their state, and a module
    # that ran before in this worker may have left installations or plans that are not
    # this stack's (doctor would rightly report them).
    saved = os.environ.get("STEWARD_TABLE_PREFIX")
    os.environ["STEWARD_TABLE_PREFIX"] = f"doctor-{uuid.uuid4().hex[:8]}-"
    try:
        with LocalStack(state_file=tmp_path_factory.mktemp("doctor") / "local.json") as stack:
            yield stack
    finally:
        if saved is None:
            os.environ.pop("STEWARD_TABLE_PREFIX", None)
        else:
            os.environ["STEWARD_TABLE_PREFIX"] = saved


def _client(stack: LocalStack, service: str) -> Any:
    return aws.client(
        service,
        endpoint_url=stack.state["aws_endpoint_url"],
        region_name=stack.state["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def _tables(stack: LocalStack) -> Tables:
    return Tables.connect(
        stack.state["table_prefix"],
        endpoint_url=stack.state["aws_endpoint_url"],
        region_name=stack.state["region"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def doctor(stack: LocalStack, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, Any, str]:
    """(exit code, parsed --json output or None, the text output)."""
    code = cli.main(["doctor", "--state-file", str(stack.state_file), *options])
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in options else None, out


# -- the faults, as data -----------------------------------------------------------------------


def _stored_secret_unset(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    text = stack.state_file.read_text()
    state = json.loads(text)
    del state["webhook_secret"]
    stack.state_file.write_text(json.dumps(state))
    return lambda: stack.state_file.write_text(text)


def _app_secret_unset(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    secret, stack.twin.webhook_secret = stack.twin.webhook_secret, ""
    return lambda: setattr(stack.twin, "webhook_secret", secret)


def _app_webhook_elsewhere(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    # Through the twin's admin API, as a test driving a stack in another process would.
    url = stack.twin.webhook_url
    admin.configure_app(stack.state["github_url"], webhook_url="http://127.0.0.1:9/elsewhere")
    return lambda: admin.configure_app(stack.state["github_url"], webhook_url=url) and None


def _app_key_rotated(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    old = stack.twin.app_private_key_pem
    stack.twin.use_app_key()  # a new key on GitHub's side; the stored one is the old key
    return lambda: stack.twin.use_app_key(old)


def _event_unsubscribed(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    stack.twin.app_events.remove("check_suite")
    return lambda: stack.twin.app_events.append("check_suite")


def _default_model_unpriced(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    monkeypatch.setenv("STEWARD_DEFAULT_MODEL", "no-such-model")
    return monkeypatch.undo


def _model_unreachable(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    table = {
        "version": "doctor",
        "models": {
            "gone": {
                "provider": "openai",
                "base_url": "http://127.0.0.1:9/v1",
                "input_per_mtok": 1,
                "output_per_mtok": 1,
                "max_output_tokens": 100,
            }
        },
    }
    monkeypatch.setenv("STEWARD_PRICE_TABLE", json.dumps(table))
    monkeypatch.setenv("STEWARD_DEFAULT_MODEL", "gone")
    return monkeypatch.undo


def _brake_on(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    store = BrakeStore(_tables(stack))
    store.engage(reason="doctor test", by="operator test", now=utcnow())
    return lambda: store.release(by="operator test", now=utcnow()) and None


def _plan_without_installation(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    # carol (no installation linked) has a confirmed plan; only doctor reads it: carol's loop
    # was never woken, so the heartbeat never looks.
    plans = _tables(stack).table(PLANS)
    plans.put_item(Item={"user": "carol", "slug": "doctor", "status": "confirmed", "front_matter": {}})
    return lambda: plans.delete_item(Key={"user": "carol", "slug": "doctor"}) and None


def _schedule_disabled(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Restore:
    scheduler = _client(stack, "scheduler")
    found = scheduler.get_schedule(Name="steward-reaper")
    keep = {k: found[k] for k in ("Name", "ScheduleExpression", "FlexibleTimeWindow", "Target")}
    scheduler.update_schedule(**keep, State="DISABLED")
    return lambda: scheduler.update_schedule(**keep, State="ENABLED") and None


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[LocalStack, pytest.MonkeyPatch], Restore]
    check: str  # the check that names the fault
    detail: str  # in its detail
    remedy: str  # in its remedy
    also: frozenset[str] = frozenset()  # other checks that cannot pass with this fault


# Every App read needs the App JWT: with the key refused they say so, and app_key says why.
APP_READS = frozenset({"webhook_secret", "app_webhook", "app_events", "app_deliveries", "installations"})

FAULTS = [
    Fault(
        "stored webhook secret unset",
        _stored_secret_unset,
        "webhook_secret",
        "not set",
        "lacks webhook_secret",
    ),
    Fault(
        "App webhook secret unset",
        _app_secret_unset,
        "webhook_secret",
        "has no secret",
        "App's webhook secret",
    ),
    Fault(
        "App webhook URL elsewhere",
        _app_webhook_elsewhere,
        "app_webhook",
        "127.0.0.1:9/elsewhere",
        "WebhookUrl",
    ),
    Fault(
        "App key mismatch",
        _app_key_rotated,
        "app_key",
        "refused the App JWT",
        "App key changed",
        APP_READS,
    ),
    Fault("event not subscribed", _event_unsubscribed, "app_events", "check_suite", "subscribe the App"),
    Fault(
        "default model unpriced",
        _default_model_unpriced,
        "models",
        "'no-such-model' is used but not priced",
        "price every model",
    ),
    Fault(
        "model in use unreachable",
        _model_unreachable,
        "models",
        "gone: its base_url does not answer",
        "base_url must answer",
    ),
    Fault("brake on", _brake_on, "brake", "engaged", "steward admin brake off"),
    Fault(
        "active plan, no installation",
        _plan_without_installation,
        "plan_installations",
        "carol",
        "link-installation",
    ),
    Fault("schedule disabled", _schedule_disabled, "schedules", "steward-reaper", "ENABLED"),
]


# -- the tests ---------------------------------------------------------------------------------


def test_a_healthy_local_stack_is_all_ok(stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, text = doctor(stack, capsys)
    lines = text.splitlines()
    assert code == 0, text
    assert [line.split()[1] for line in lines] == list(CHECK_NAMES)
    assert all(line.startswith("ok ") for line in lines), text
    code, results, _ = doctor(stack, capsys, "--json")
    assert code == 0
    assert [r["check"] for r in results] == list(CHECK_NAMES)
    assert all(set(r) == {"check", "ok", "detail", "remedy"} and r["ok"] for r in results)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_each_fault_fails_its_check_with_its_remedy(
    stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fault: Fault
) -> None:
    restore = fault.inject(stack, monkeypatch)
    try:
        code, results, _ = doctor(stack, capsys, "--json")
    finally:
        restore()
    failed = {r["check"]: r for r in results if not r["ok"]}
    assert code == 1
    assert set(failed) == {fault.check} | fault.also, failed
    assert fault.detail in failed[fault.check]["detail"], failed[fault.check]
    assert fault.remedy in failed[fault.check]["remedy"], failed[fault.check]


def test_a_fault_is_one_line_naming_its_check_and_remedy(
    stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    restore = _event_unsubscribed(stack, pytest.MonkeyPatch())
    try:
        code, _, text = doctor(stack, capsys)
    finally:
        restore()
    line = next(line for line in text.splitlines() if line.startswith("FAIL"))
    assert code == 1
    assert line.split()[1] == "app_events"
    assert "check_suite" in line
    assert "Fix: subscribe the App" in line


def test_the_twins_app_routes_are_shaped_as_githubs(stack: LocalStack) -> None:
    """githubkit parses `GET /app`, `/app/hook/config` and `/app/hook/deliveries` into its
    models (the proof of GitHub's shapes), with the App's settings as the twin holds them."""
    from githubkit import AppAuthStrategy, GitHub  # noqa: PLC0415 - this test only
    from githubkit.cache import MemCacheStrategy  # noqa: PLC0415

    twin = stack.twin
    gh: GitHub[Any] = GitHub(
        AppAuthStrategy(twin.app_id, twin.app_private_key_pem.decode()),
        base_url=twin.url,
        cache_strategy=MemCacheStrategy(),
        http_cache=False,
    )
    app = gh.rest.apps.get_authenticated().parsed_data
    assert app is not None
    assert set(app.events) == set(twin.app_events)
    config = gh.rest.apps.get_webhook_config_for_app().parsed_data
    assert config.url == twin.webhook_url
    assert config.secret == "********"  # GitHub shows a mask, never the secret
    deliveries = gh.rest.apps.list_webhook_deliveries(per_page=1).parsed_data
    assert len(deliveries) == 1
    assert deliveries[0].guid == twin.deliveries[-1].delivery_id  # newest first
    assert deliveries[0].status_code == 200
    assert deliveries[0].status == "OK"


def test_the_twins_app_settings_change_whole_or_not_at_all(stack: LocalStack) -> None:
    url = stack.state["github_url"]
    before = (stack.twin.webhook_url, stack.twin.app_private_key_pem)
    with pytest.raises(admin.AdminError) as refused:
        admin.configure_app(url, webhook_url="http://127.0.0.1:9/x", private_key="not a key")
    assert refused.value.status == 422
    assert (stack.twin.webhook_url, stack.twin.app_private_key_pem) == before
