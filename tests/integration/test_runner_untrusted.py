"""Untrusted trees through the whole runner (docs/concepts/runner.md, docs/testing.md, "Guarantees"): the scripted model
writes a `conftest.py` that the plan's own check (`python -m pytest -q`) runs under
bubblewrap, and that conftest plants a nested repository whose clean filter would write a
sentinel file on the host. The runner's git, as root, must never run it: not when it
publishes, not when it keeps a failed run's work. A credential the model wrote refuses the
publication, naming the file. Its own stack, with plays of its own; the helpers are
test_runner's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from steward.adapters.artifact_store import ArtifactStore
from steward.local.sample_repo import SAMPLE_REPO
from steward.local.stack import LocalStack

from tests.integration.test_runner import (
    BROKEN_TEST,
    CREDENTIAL,
    DONE,
    RUNTIME_LOGS,
    SUBTRACT,
    VERIFY,
    Alice,
    assert_no_credentials,
    settled,
    start,
)
from tests.support.stack import local_stack

FAKE_TOKEN = "ghs_" + "N0tAL1veT0kenButSh4pedL1keOne0123456"  # what the redactor's patterns catch


def conftest(sentinel: Path) -> str:
    """What a hostile check runs inside the sandbox: `git init evil`, a committed file made
    stat-dirty, a clean filter that writes `sentinel` (a host path, out of the sandbox's
    reach) and an untracked `.gitattributes` naming it."""
    return f"""import os
import subprocess
from pathlib import Path


def _git(cwd, *args):
    identity = ["-c", "user.name=check", "-c", "user.email=check@example.com"]
    subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True)


evil = Path(__file__).parent / "evil"
if not evil.exists():
    evil.mkdir()
    _git(evil, "init", "-q")
    (evil / "f").write_text("x\\n")
    _git(evil, "add", "f")
    _git(evil, "commit", "-q", "-m", "f")
    _git(evil, "config", "filter.evil.clean", "touch {sentinel}; cat")
    (evil / ".gitattributes").write_text("* filter=evil\\n")
    os.utime(evil / "f", (1_000_000_000, 1_000_000_000))
"""


def plant(sentinel: Path) -> dict[str, object]:
    return {"tool": "write_file", "input": {"path": "conftest.py", "content": conftest(sentinel)}}


def plays(host: Path) -> list[dict[str, object]]:
    """One play per test, each planting a filter that writes its own sentinel under `host`."""
    leak = {"tool": "write_file", "input": {"path": "notes.txt", "content": f"token: {FAKE_TOKEN}\n"}}
    return [
        {
            "match": "PLAY-nested-and-leak",
            "summary": "Adds subtract.",
            "steps": [plant(host / "publish"), leak, SUBTRACT, DONE, VERIFY],
        },
        {
            "match": "PLAY-nested-failing",
            "steps": [plant(host / "failing"), SUBTRACT, BROKEN_TEST, DONE, VERIFY, DONE],
            "loop_from": 4,
        },
    ]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the planted filters would write: on the host, out of the sandbox's reach."""
    return tmp_path_factory.mktemp("host")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, host: Path) -> Iterator[LocalStack]:
    root = tmp_path_factory.mktemp("untrusted-stack")
    runner = {
        "STEWARD_RUNNER_MAX_REPAIR_ROUNDS": "0",
    }
    with local_stack(root, plays(host), runner) as stack:
        RUNTIME_LOGS.append(stack.state_dir / "runs")
        yield stack


@pytest.fixture(autouse=True)
def _stack_env(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", stack.state["aws_endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


@pytest.fixture(scope="module")
def alice(stack: LocalStack) -> Alice:
    client = Alice(stack)
    client("PUT", "/v1/loop", {"interval_seconds": 1})
    return client


@pytest.fixture(scope="module")
def artifacts(stack: LocalStack) -> ArtifactStore:
    client = boto3.client(
        "s3", endpoint_url=stack.state["aws_endpoint_url"], region_name=stack.state["region"]
    )
    return ArtifactStore("steward-artifacts", client=client)


def test_a_planted_repository_never_runs_and_a_credential_refuses_publication(
    stack: LocalStack, alice: Alice, artifacts: ArtifactStore, host: Path
) -> None:
    (task_id,) = start(alice, "untrusted-publish", "PLAY-nested-and-leak: add subtract")
    task = settled(alice, task_id)
    assert not (host / "publish").exists(), "the nested repository's filter ran on the host"
    assert (task["status"], task["classification"]) == ("failed", "final"), task["reason"]
    assert "nested git repository at evil" in task["reason"]
    assert "credential in notes.txt" in task["reason"]
    assert FAKE_TOKEN not in task["reason"]
    assert stack.twin.branch_sha(SAMPLE_REPO, task["branch"]) is None  # nothing was pushed
    assert all(p["head"]["ref"] != task["branch"] for p in stack.twin.pulls(SAMPLE_REPO))
    diff = artifacts.read_text(task_id, "diff.patch") or ""
    assert "def subtract" in diff
    assert "+token: [REDACTED]" in diff
    assert "Subproject commit" not in diff
    assert not CREDENTIAL.search(diff)
    assert_no_credentials(artifacts, task_id)


def test_a_failed_runs_work_is_kept_without_running_a_planted_repository(
    alice: Alice, artifacts: ArtifactStore, host: Path
) -> None:
    (task_id,) = start(alice, "untrusted-failing", "PLAY-nested-failing: add subtract")
    task = settled(alice, task_id)
    assert not (host / "failing").exists(), "the nested repository's filter ran on the host"
    assert (task["status"], task["classification"]) == ("failed", "final"), task["reason"]
    assert "checks" in task["reason"]
    diff = artifacts.read_text(task_id, "diff.patch") or ""
    assert "def subtract" in diff  # the work is kept ...
    assert "Subproject commit" not in diff  # ... and the nested repository is not in it
    assert "?? evil/" in (artifacts.read_text(task_id, "git-status.txt") or "")
