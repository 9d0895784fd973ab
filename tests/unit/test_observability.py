"""Tracing follows Powertools' own rule (inside Lambda, unless disabled), and outside
Lambda no handler pays for the X-Ray SDK at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from steward import observability

HANDLERS = (
    "steward.relay_handler",
    "steward.webhook_handler",
    "steward.api.handler",
    "steward.heartbeat_handler",
)


def test_outside_lambda_no_handler_imports_the_xray_sdk() -> None:
    code = f"import sys, json; import {', '.join(HANDLERS)}; print(json.dumps('aws_xray_sdk' in sys.modules))"
    env = {k: v for k, v in os.environ.items() if k not in ("LAMBDA_TASK_ROOT", "POWERTOOLS_TRACE_DISABLED")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert json.loads(done.stdout) is False


@pytest.mark.parametrize(
    ("environ", "traced"),
    [
        ({}, False),
        ({"LAMBDA_TASK_ROOT": "/var/task"}, True),
        ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"}, False),
        ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "1"}, False),
    ],
)
def test_tracing_is_on_only_inside_lambda_unless_disabled(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], traced: bool
) -> None:
    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    monkeypatch.delenv("POWERTOOLS_TRACE_DISABLED", raising=False)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    tracer = observability.tracer_for("test")
    assert (type(tracer).__name__ == "Tracer") is traced

    @tracer.capture_lambda_handler(capture_response=False)
    def handler(event: dict[str, int], context: object) -> int:
        return event["n"] + 1

    if not traced:  # the untraced decorator hands the handler back as it is
        assert handler({"n": 1}, None) == 2


def test_disabled_metrics_record_and_print_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Powertools' own Metrics, disabled, still keeps values and prints an EMF blob once a
    metric holds 100; the local stack's console must stay quiet."""
    from aws_lambda_powertools.metrics import MetricUnit  # noqa: PLC0415
    from steward.observability import metrics_for  # noqa: PLC0415

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = metrics_for("relay")

    @metrics.log_metrics
    def handler(event: object, context: object) -> str:
        for _ in range(250):
            metrics.add_metric(name="CallsAdmitted", unit=MetricUnit.Count, value=1)
        return "answered"

    assert handler({}, None) == "answered"
    metrics.clear_metrics()
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    assert type(metrics_for("relay")).__name__ == "Metrics"


API_PROBE = """
import json, warnings
from steward.api import handler
from steward.domain.routes import CONSOLE_PREFIX

class Context:
    function_name, memory_limit_in_mb, aws_request_id = "steward-api", 128, "r"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:steward-api"

def event(path):
    http = {"method": "GET", "path": path, "sourceIp": "192.0.2.1"}
    return {"version": "2.0", "routeKey": "$default", "rawPath": path, "rawQueryString": "",
            "headers": {}, "requestContext": {"http": http, "stage": "$default", "requestId": "r"},
            "isBase64Encoded": False}

with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    statuses = [handler.lambda_handler(event(p), Context())["statusCode"]
                for p in ("/v1/no-such-route", CONSOLE_PREFIX + "/")]
print(json.dumps({"statuses": statuses, "warnings": [str(w.message) for w in seen]}))
"""


def test_the_api_publishes_a_refusal_metric_and_nothing_for_an_answer_that_counted_none() -> None:
    """With metrics on (as in AWS): a refusal's `Refused404` goes out as one EMF line; an answer
    that counted nothing prints nothing and warns nothing."""
    env = dict(os.environ, POWERTOOLS_METRICS_DISABLED="false", AWS_DEFAULT_REGION="us-east-1")
    done = subprocess.run(
        [sys.executable, "-c", API_PROBE], capture_output=True, text=True, check=True, env=env
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    emf = [line for line in lines if "_aws" in line]
    assert [line["Refused404"] for line in emf] == [[1.0]]
    result = next(line for line in lines if "statuses" in line)
    assert result == {"statuses": [404, 200], "warnings": []}
