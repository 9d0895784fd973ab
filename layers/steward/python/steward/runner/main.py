"""`python -m steward.runner`: the runtime's entry point (docs/concepts/runner.md).

It gets STEWARD_TASK_ID, STEWARD_TICKET, STEWARD_API_URL and STEWARD_RELAY_URL from the
launcher, plus the deployment's runner bounds (`steward.runner.config`), and no AWS
credential or endpoint: the control plane's `/v1/runtime/*` routes are its only way to
write. It exchanges the one-time ticket for its capability first — a second runtime for the
same launch finds the ticket used and exits without touching anything — then claims the task
at `POST /v1/runtime/claim` (a conditional write there: queued -> running, its runtime id
recorded; a runtime that loses the claim exits), and runs the stages (`steward.runner.run`).
It never prints a secret.

Exit codes: 0 when it ran the task to an end (whatever the outcome) or had nothing to do;
1 when the task or the control plane could not be reached; 2 when a variable is missing.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Mapping

import httpx

from steward.adapters.runtime_api import RuntimeApi, RuntimeApiError, RuntimeArtifacts
from steward.domain.redaction import RedactionError, Redactor
from steward.runner.config import ConfigError, RunnerConfig
from steward.runner.run import Run


def _say(message: str) -> None:
    print(f"steward.runner: {message}", file=sys.stderr, flush=True)


class RedactingFilter(logging.Filter):
    """Every log line of the runtime, tracebacks included, passes the redactor; a line that
    cannot be redacted is dropped (fail closed)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            record.msg = self._redactor.redact(record.getMessage())
            record.args = ()
            if record.exc_info:
                record.exc_text = self._redactor.redact(self._formatter.formatException(record.exc_info))
                record.exc_info = None
        except RedactionError:
            return False
        return True


class QuerylessUrls(logging.Filter):
    """httpx logs every request's URL. A presigned upload URL's query string is a credential
    for its object while it lasts (and in AWS carries the signer's session token): URLs are
    logged without their query."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) and a.query for a in record.args):
            record.args = tuple(
                a.copy_with(query=None) if isinstance(a, httpx.URL) else a for a in record.args
            )
        return True


def main(environ: Mapping[str, str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="steward.runner: %(levelname)s %(name)s: %(message)s")
    try:
        config = RunnerConfig.from_env(os.environ if environ is None else environ)
    except ConfigError as exc:
        _say(str(exc))
        return 2
    redactor = Redactor([config.ticket])
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(redactor))
    logging.getLogger("httpx").addFilter(QuerylessUrls())
    api = RuntimeApi(config.api_url, config.relay_url)
    try:
        try:
            exchanged = api.exchange(config.ticket)
        except RuntimeApiError as exc:
            _say(redactor.redact(str(exc)))
            # 401: the ticket is used or expired (a duplicate runtime), 409: the task is no
            # longer startable. Either way there is nothing for this runtime to do.
            return 0 if exc.status in (401, 403, 409) else 1
        redactor.add(exchanged.capability)
        if exchanged.task_id != config.task_id:
            _say(f"the ticket is for another task than {config.task_id}")
            return 1
        runtime_id = "r" + uuid.uuid4().hex
        try:
            claimed = api.claim(exchanged.capability, runtime_id)
        except RuntimeApiError as exc:
            _say(redactor.redact(str(exc)))
            # 409: claimed by another runtime, or no longer startable: nothing to do.
            return 0 if exc.status == 409 else 1
        task = claimed.task
        _say(f"runtime {runtime_id} claimed task {task.id}")
        run = Run(
            config,
            task,
            runtime_id,
            exchanged.capability,
            artifacts=RuntimeArtifacts(api, exchanged.capability, runtime_id, task.id),
            api=api,
            redactor=redactor,
            related=claimed.related,
        )
        # The launcher stops a cancelled task's runtime with SIGTERM: stop the command in the
        # sandbox (its own session, which the signal to our group does not reach) and unwind.
        signal.signal(signal.SIGTERM, lambda *_: run.stop())
        ending = run.execute()
        _say(f"task {task.id} ended: {ending}")
        return 0
    finally:
        api.close()
