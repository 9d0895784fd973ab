"""Every failure code the runner decides (steward.domain.failures), each produced through the
runner's own ending: `Run.execute` against the runtime Lambda's routes (moto, a KMS-signed
capability), the code stored on the task and shown as `failure` {code, remedy, who}.

Two kinds of rows. Real bootstraps: a local git repository stands in for the clone (the
token and clone stages are the only ones replaced), then the real sandbox probe, the plan's
setup and the baseline run under bubblewrap (or git's own clone fails). Raised: where a code
is decided by what a later stage raises (the relay, GitHub, publication's rules), that is
raised in the stage named, and the runner's ending is what is checked (their bootstrap is
skipped, to keep the table quick). The full runs through the local stack
(tests/integration/test_runner.py) assert the codes their own scenarios end with."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from steward.adapters.git import GitError
from steward.adapters.github import GitHubError, InstallationToken
from steward.adapters.runtime_api import BudgetExhausted, IssuedToken, RuntimeApiError
from steward.domain.errors import ModelCannotAnswer
from steward.domain.failures import TABLE, FailureCode
from steward.domain.models import Task, TaskStatus, utcnow
from steward.domain.redaction import Redactor
from steward.runner.harness import RelayRefused
from steward.runner.run import Run
from steward.services.publication import PublishError
from steward.wiring import Services

from tests.integration.test_runner_endings import Control, control, make_run  # noqa: F401
from tests.support.documents import document, numbered
from tests.support.plans import spawn_item

F = FailureCode


def _repo(path: Path, files: dict[str, str]) -> str:
    """A one-commit repository at `path` (what the clone stage would have left); its head."""
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=path, check=True, env={"PATH": "/usr/bin:/bin", **env})
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True)
    return head.stdout.strip()


def _local_clone(files: dict[str, str]) -> Callable[[Run, IssuedToken, Path], dict[str, Any]]:
    def clone(run: Run, issued: IssuedToken, path: Path) -> dict[str, Any]:
        head = _repo(path, files)
        run.records.bootstrap["clone"] = {"url": "local", "base": "main", "head": head}
        return {"base": "main", "head": head}

    return clone


def _issued(clone_url: str) -> IssuedToken:
    token = InstallationToken("ghs_" + "t" * 36, utcnow() + timedelta(hours=1), "alice/demo")
    return IssuedToken(token, 1, None, clone_url)


@dataclass(frozen=True)
class Row:
    code: FailureCode
    classification: str
    # The plan as the run sees it (checks, setup, baseline), and the clone's files.
    plan: dict[str, Any]
    files: dict[str, str] | None = None  # None: the clone stage itself fails
    # What a later stage raises, and in which stage (the bootstrap passes first).
    raises: BaseException | None = None
    phase: str = "tool_loop"


PASSING = {"checks": ("python -c pass",)}
FILES = {"a.txt": "a\n"}
ROWS = [
    Row(F.SETUP_FAILED, "final", {"setup": ("python -c 'raise SystemExit(3)'",)} | PASSING, FILES),
    Row(
        F.CHECKS_FAIL_ON_BASE,
        "final",
        {"checks": ("python -c 'print(\"broken base\"); raise SystemExit(5)'",)},
        {"a.txt": "a\n"},
    ),
    Row(F.CLONE_FAILED, "retryable", PASSING),
    Row(F.BUDGET_SPENT, "final", PASSING, FILES, BudgetExhausted("402", status=402, code="budget_exhausted")),
    Row(F.RELAY_REFUSED, "retryable", PASSING, FILES, RelayRefused("HTTP 400 bad_request")),
    Row(
        F.MODEL_CANNOT_ANSWER,
        "final",
        PASSING,
        FILES,
        RuntimeApiError("422", status=422, code=ModelCannotAnswer.code, detail="no play"),
    ),
    Row(
        F.PROVIDER_UNAVAILABLE,
        "retryable",
        PASSING,
        FILES,
        RuntimeApiError("502", status=502, retryable=True),
    ),
    Row(F.CANNOT_START, "final", PASSING, FILES, RuntimeApiError("403", status=403, code="forbidden")),
    Row(
        F.PUBLISH_FAILED,
        "retryable",
        PASSING,
        FILES,
        GitHubError("pull request refused", operation="open the pull request"),
        "publish",
    ),
    Row(F.PUBLISH_FAILED, "retryable", PASSING, FILES, GitError("push failed"), "publish"),
    Row(F.RUNNER_ERROR, "retryable", PASSING, FILES, KeyError("bug"), "checks"),
    *(
        Row(code, "final", PASSING, FILES, PublishError("refused", stage="scan", reason=reason), "publish")
        for reason, code in [
            ("no_changes", F.MODEL_MADE_NO_CHANGE),
            ("nested_repository", F.NESTED_REPOSITORY),
            ("git_dir", F.NESTED_REPOSITORY),
            ("credential", F.CREDENTIAL_IN_CHANGE),
            ("too_large", F.CHANGE_TOO_LARGE),
            ("foreign_commits", F.BRANCH_TAKEN_OVER),
            ("branch", F.BRANCH_TAKEN_OVER),
            ("merge_state", F.CONFLICT_UNRESOLVED),
        ]
    ),
]


def test_each_way_a_run_fails_ends_with_its_code(
    services: Services,
    control: Control,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One plan, one item per row: each row's run ends its own task (one stack for all).
    services.plans.publish("alice", "codes", document(*numbered(len(ROWS))))
    plan = services.plans.confirm("alice", "codes")
    for ordinal, row in enumerate(ROWS, start=1):
        spawned, _ = spawn_item(services, plan, ordinal)
        now = utcnow()
        task = services.tasks.tasks.claim(
            spawned, runtime_id="r1", now=now, deadline=now + timedelta(minutes=5)
        )
        with monkeypatch.context() as patch:
            _ends_with(services, control, task, row, patch)


def _ends_with(
    services: Services, routes: Control, running: Task, row: Row, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run(services, routes, running, Redactor())
    run.task = run.task.model_copy(update=row.plan)
    if row.files is None:  # a repository that is not there: git's own clone fails
        monkeypatch.setattr(Run, "_token", lambda self: _issued(f"file://{self.config.ticket}/missing.git"))
    else:
        monkeypatch.setattr(Run, "_token", lambda self: _issued("local"))
        monkeypatch.setattr(Run, "_clone", _local_clone(row.files))
    if row.raises is not None:
        raised = row.raises

        def later_stage(self: Run, clone: Path) -> None:  # the bootstrap is the rows above's
            self.phase = row.phase
            raise raised

        monkeypatch.setattr(Run, "_bootstrap", later_stage)
    models: list[str] = []
    monkeypatch.setattr(run.api, "converse", lambda *a, **k: models.append("call") or {})
    assert run.execute() == "failed", row
    task = services.tasks.tasks.require(running.id)
    assert (task.status, task.classification) == (TaskStatus.FAILED, row.classification), (row, task.reason)
    assert task.failure_code == row.code.value, (row, task.reason)
    failure = task.to_api()["failure"]
    entry = TABLE[row.code]
    if row.classification == "retryable" and task.attempt < task.max_attempts:
        assert failure["who"] == "nobody: Steward retries"
    else:
        assert (failure["remedy"], failure["who"]) == (entry.remedy, entry.who.value)
    assert (failure["code"], failure["detail"]) == (row.code.value, task.reason)
    assert models == []  # none of these reached a model call
    if row.code is F.CHECKS_FAIL_ON_BASE:
        bootstrap = json.loads(services.tasks.artifacts.read_text(task.id, "bootstrap.json") or "{}")
        (base,) = bootstrap["baseline"]
        assert (base["exit_code"], base["passed"]) == (5, False)
        assert base["output_tail"].strip() == "broken base"


def test_every_runner_code_has_a_row_here_or_a_run_in_the_stack() -> None:
    in_the_stack = {F.CHECKS_NEVER_PASSED, F.MODEL_DID_NOT_FINISH, F.CONFLICT_UNRESOLVED, F.BRANCH_TAKEN_OVER}
    # A run whose host cannot sandbox checks: test_sandbox_confined.py runs Run.execute with it.
    in_the_stack |= {F.SANDBOX_TOO_WEAK}
    runner_codes = set(FailureCode) - {
        F.INSTALLATION_MISSING,  # the loop's, before a runtime starts
        F.DEADLINE,  # the reaper's
        F.SUPERSEDED,
        F.CANCELLED,
        F.UNRECORDED,
    }
    assert runner_codes <= {row.code for row in ROWS} | in_the_stack
