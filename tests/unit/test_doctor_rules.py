"""`steward.domain.doctor`'s rules on made-up facts (a fake probe), the CLI's refusals, and
the rendering: no stack is started here."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from steward import cli
from steward.adapters.price_file import load_price_table
from steward.cli_render import render_doctor_result
from steward.domain.brake import Brake
from steward.domain.doctor import (
    CHECK_NAMES,
    SUBSCRIBED_EVENTS,
    GitHubRefused,
    ProbeFailed,
    Relay,
    Result,
    Runner,
    Subnet,
    exit_code,
    run_checks,
)
from steward.domain.installations import Installation
from steward.domain.prices import PriceEntry, PriceTable
from steward.domain.webhooks import HANDLED


@dataclass
class FakeProbe:
    """A healthy deployment's facts; a test changes one."""

    local: bool = False
    app: dict[str, Any] = field(
        default_factory=lambda: {"slug": "steward", "events": sorted(SUBSCRIBED_EVENTS)}
    )
    hook: dict[str, Any] = field(
        default_factory=lambda: {"url": "https://hook.example", "content_type": "json", "secret": "********"}
    )
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    installations: dict[int, dict[str, Any]] = field(default_factory=lambda: {7: {"suspended_at": None}})
    linked: list[Installation] = field(
        default_factory=lambda: [Installation(installation_id=7, owner_sub="alice", repositories=("o/r",))]
    )
    plans: list[tuple[str, str | None]] = field(default_factory=lambda: [("alice", "scripted")])
    runner_facts: Runner = field(
        default_factory=lambda: Runner(
            "repo:tag", True, (Subnet("subnet-1", nat=True, internet_gateway=False),)
        )
    )
    refuse_app: int | None = None
    broken: str | None = None  # a method that raises something unexpected

    def outputs(self) -> Mapping[str, str | None]:
        return {"ApiUrl": "https://api.example"}

    def anonymous_api_status(self) -> int:
        return 401

    def relay(self) -> Relay:
        if self.broken == "relay":
            raise KeyError("boom")
        return Relay(200, 401)

    def price_table(self) -> PriceTable:
        return load_price_table()

    def default_model(self) -> str | None:
        return "scripted"

    def model_problem(self, model_id: str, entry: PriceEntry) -> str | None:
        return None

    def stored_webhook_secret(self) -> str | None:
        return "s3cret"

    def webhook_status(self, body: bytes, headers: Mapping[str, str]) -> int:
        return 200 if "X-Hub-Signature-256" in headers else 401

    def webhook_url(self) -> str | None:
        return "https://hook.example"

    def github(self, path: str, params: Mapping[str, str | int] | None = None) -> object:
        if self.refuse_app is not None:
            raise GitHubRefused(f"GitHub read {path} failed: HTTP {self.refuse_app}", status=self.refuse_app)
        if path == "/app":
            return self.app
        if path == "/app/hook/config":
            return self.hook
        if path == "/app/hook/deliveries":
            return self.deliveries
        installation = self.installations.get(int(path.rsplit("/", 1)[1]))
        if installation is None:
            raise GitHubRefused("HTTP 404", status=404)
        return installation

    def linked_installations(self) -> list[Installation]:
        return self.linked

    def active_plans(self) -> list[tuple[str, str | None]]:
        return self.plans

    def runner(self) -> Runner:
        return self.runner_facts

    def schedules(self) -> Mapping[str, str]:
        return {"tick": "ENABLED", "reap": "ENABLED"}

    def brake(self) -> Brake:
        if self.broken == "brake":
            raise ProbeFailed("cannot read the controls table: AccessDeniedException: no")
        return Brake()

    def alarms_in_alarm(self) -> list[str]:
        return []


def failures(probe: FakeProbe) -> dict[str, Result]:
    return {r.check: r for r in run_checks(probe) if not r.ok}


def test_healthy_facts_pass_every_check_in_order_and_stream_as_they_complete() -> None:
    seen: list[str] = []
    results = run_checks(FakeProbe(), lambda r: seen.append(r.check))
    assert [r.check for r in results] == seen == list(CHECK_NAMES)
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    assert exit_code(results) == 0


def test_the_events_to_subscribe_are_the_receivers_less_those_github_always_sends() -> None:
    assert frozenset(HANDLED) - SUBSCRIBED_EVENTS == {"installation", "installation_repositories"}
    probe = FakeProbe(app={"events": sorted(SUBSCRIBED_EVENTS - {"status"})})
    assert "status" in failures(probe)["app_events"].detail


def test_a_refused_app_jwt_is_app_keys_failure_and_every_app_read_says_it_was_not_checked() -> None:
    failed = failures(FakeProbe(refuse_app=401))
    assert set(failed) == {
        "app_key",
        "webhook_secret",
        "app_webhook",
        "app_events",
        "app_deliveries",
        "installations",
    }
    assert "GitHubPrivateKeySecret" in failed["app_key"].remedy
    assert failed["app_webhook"].detail.startswith("not checked: GitHub refused the App JWT")
    assert failed["app_webhook"].remedy.startswith("repair app_key first")


def test_a_failed_or_unexpected_read_fails_its_check_only() -> None:
    failed = failures(FakeProbe(broken="relay"))
    assert set(failed) == {"relay"}
    assert failed["relay"].detail.startswith("unexpected KeyError")
    failed = failures(FakeProbe(broken="brake"))
    assert set(failed) == {"brake"}
    assert "AccessDeniedException" in failed["brake"].detail


def test_a_failed_delivery_counts_until_a_redelivery_of_it_succeeds() -> None:
    failed = [{"guid": "a", "status_code": 401}, {"guid": "b", "status_code": 0}]
    probe = FakeProbe(deliveries=[{"guid": "a", "status_code": 200}, *failed])
    result = failures(probe)["app_deliveries"]
    assert result.detail == "1 of the last 3 deliveries failed (status 0)"


def test_missing_and_suspended_installations_and_a_plan_owner_without_one() -> None:
    linked = [
        Installation(installation_id=7, owner_sub="alice"),
        Installation(installation_id=8, owner_sub="bob"),
        Installation(installation_id=9, owner_sub="dan", suspended=True),
    ]
    probe = FakeProbe(
        linked=linked,
        installations={7: {"suspended_at": "2026-01-01T00:00:00Z"}},
        plans=[("alice", None), ("carol", None), ("dan", None)],
    )
    failed = failures(probe)
    assert "7 (alice) is suspended" in failed["installations"].detail
    assert "8 (bob) is not installed" in failed["installations"].detail
    assert failed["plan_installations"].detail.endswith("carol, dan")


@pytest.mark.parametrize(
    ("subnet", "public_ip", "ok"),
    [
        (Subnet("s", nat=True, internet_gateway=False), False, True),
        (Subnet("s", nat=False, internet_gateway=True), True, True),
        (Subnet("s", nat=False, internet_gateway=True), False, False),  # a public subnet, no public IP
        (Subnet("s", nat=False, internet_gateway=False), True, False),  # isolated
    ],
)
def test_a_runner_subnet_reaches_the_control_plane_through_a_nat_or_an_igw_with_a_public_ip(
    subnet: Subnet, public_ip: bool, ok: bool
) -> None:
    probe = FakeProbe(runner_facts=Runner("img", True, (subnet,), public_ip=public_ip))
    assert ("runner_network" not in failures(probe)) is ok


def test_a_model_a_plan_uses_must_be_priced() -> None:
    failed = failures(FakeProbe(plans=[("alice", "gpt-nothing")]))
    assert failed["models"].detail == "'gpt-nothing' is used but not priced"


def test_a_result_renders_as_one_line_with_its_remedy_when_it_fails() -> None:
    assert render_doctor_result(Result("brake", True, "off")) == "ok    brake               off"
    line = render_doctor_result(Result("brake", False, "engaged: on since x", "release it"))
    assert line == "FAIL  brake               engaged: on since x. Fix: release it"


def test_without_a_local_stack_doctor_says_to_start_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["doctor", "--state-file", str(tmp_path / "local.json")]) == 1
    assert "start `steward local up` first" in capsys.readouterr().err


def test_without_aws_credentials_doctor_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert cli.main(["doctor", "--stack", "Steward", "--region", "eu-west-1", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "not_configured"
    assert "credentials" in error["message"]


def test_a_region_without_a_stack_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "--region", "eu-west-1"]) == 2
    assert "--region goes with --stack" in capsys.readouterr().err
