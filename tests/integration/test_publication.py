"""Governed publication against the GitHub twin, a real clone and real git processes
(docs/concepts/lifecycle.md, docs/concepts/runner.md): stages recorded, the bot's commit on the task's branch, one pull
request however often publication is repeated, cancellation re-checked, foreign commits never
overwritten, and no credential left behind in the clone or in any artifact."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import boto3
import pytest
from moto import mock_aws
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.adapters.git import GitError, basic_header, remote_git, run_git
from steward.adapters.github import GitHubApp, GitHubError
from steward.adapters.runtime_api import RuntimeApi
from steward.adapters.task_store import TaskStore
from steward.config import Settings
from steward.domain.models import Task, TaskStatus, utcnow
from steward.domain.redaction import Redactor, redact
from steward.local.github_twin import GitHubTwin
from steward.local.moto_serial import install_dynamodb_lock
from steward.runner.config import RunnerConfig
from steward.runner.run import Run
from steward.services.publication import STAGES, Publisher, PublishError, PublishResult, StageHook
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.documents import document
from tests.support.plans import spawn_item

REPO = "octo/demo"
BOT = "steward[bot] <steward-bot@users.noreply.github.com>"
TOKEN_SHAPE = re.compile(r"gh[pousr]_[A-Za-z0-9._-]{20,}")
BASIC_PREFIX = base64.b64encode(b"x-access-token:").decode()
CHECKS: list[dict[str, Any]] = [
    {"command": "pytest -q", "exit_status": 0, "duration_s": 3.25},
    {"command": "ruff check | tee out", "exit_status": 1, "duration_ms": 1500},
]


class Crash(Exception):
    """The runtime dying right after a stage was recorded."""


def crash_at(stage: str) -> StageHook:
    def hook(name: str, record: Mapping[str, Any]) -> None:
        if name == stage:
            raise Crash(stage)

    return hook


class Tokens:
    """The runtime's token provider: a fresh installation token per call, all remembered."""

    def __init__(self, app: GitHubApp, installation: int) -> None:
        self.app = app
        self.installation = installation
        self.issued: list[str] = []

    def __call__(self) -> str:
        token = self.app.installation_token(self.installation, REPO).token
        self.issued.append(token)
        return token


@dataclass
class Kit:
    """A running task of alice's on REPO, the twin holding REPO, the App, and helpers."""

    twin: GitHubTwin
    app: GitHubApp
    services: Services
    artifacts: ArtifactStore
    task: Task
    installation: int
    tokens: Tokens
    root: Path
    template: Path | None = None  # a clone of main to copy instead of cloning again

    def clone(self, name: str, *, branch: str | None = None, tokens: Tokens | None = None) -> Path:
        """A clone as the runner's bootstrap makes it: over HTTP, the token in the header;
        `root/name/clone`, so its artifacts go to `root/name/artifacts`."""
        where = self.root / name
        where.mkdir(parents=True)
        if self.template is not None and branch is None and tokens is None:
            shutil.copytree(self.template, where / "clone", symlinks=True)
            return where / "clone"
        url = self.app.git_url(REPO)
        args = ["clone", "--quiet", *(["--branch", branch] if branch else []), url, "clone"]
        run_git(args, cwd=where, token=(tokens or self.tokens)(), token_url=url)
        return where / "clone"

    def worked_clone(self, name: str = "run") -> Path:
        """A clone with the run's changes: one file changed, one added."""
        clone = self.clone(name)
        (clone / "app.py").write_text("print('hello, world')\n")
        (clone / "docs").mkdir()
        (clone / "docs" / "greeting.md").write_text("Be polite.\n")
        return clone

    def publisher(self, app: GitHubApp | None = None, *, upload: bool = False) -> Publisher:
        return Publisher(app or self.app, self.status_of, self.artifacts if upload else None)

    def status_of(self, task_id: str) -> TaskStatus | None:
        task = TaskStore(self.services.tables).get(task_id)
        return None if task is None else task.status

    def publish(
        self,
        clone: Path,
        *,
        app: GitHubApp | None = None,
        tokens: Tokens | None = None,
        upload: bool = False,
        **kwargs: Any,
    ) -> PublishResult:
        arguments: dict[str, Any] = {
            "installation_id": self.installation,
            "summary": "Made the greeting polite.",
            "checks": CHECKS,
            "cost_usd": Decimal("0.0123"),
            "token_provider": tokens or self.tokens,
        }
        return self.publisher(app, upload=upload).publish(self.task, clone, **(arguments | kwargs))

    def pull_numbers(self) -> list[int]:
        """The pull requests of this kit's task (its branch is the head)."""
        return [int(p["number"]) for p in self.twin.pulls(REPO) if p["head"]["ref"] == self.task.branch]

    def branch(self) -> str | None:
        return self.twin.branch_sha(REPO, self.task.branch)

    def once(self) -> GitHubApp:
        """An App client that makes one attempt per call: a fault surfaces as a failure."""
        return GitHubApp(
            self.twin.app_id, self.twin.app_private_key_pem, base_url=self.twin.url, max_attempts=1
        )


@pytest.fixture
def kit(services: Services, settings: Settings, tmp_path: Path) -> Iterator[Kit]:
    with GitHubTwin(tmp_path / "twin") as twin:
        twin.create_repo(REPO, {"README.md": "# demo\n", "app.py": "print('hello')\n"})
        installation = twin.create_installation("octo", [REPO])
        services.plans.publish("alice", "demo", document("Greet the world politely", repo=REPO))
        spawned, created = spawn_item(services, services.plans.confirm("alice", "demo"), 1)
        assert created
        now = utcnow()
        task = services.tasks.tasks.claim(
            spawned, runtime_id="r1", now=now, deadline=now + timedelta(hours=1)
        )
        artifacts = ArtifactStore(settings.artifacts_bucket, client=boto3.client("s3", region_name=REGION))
        with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, sleep=lambda _: None) as app:
            tokens = Tokens(app, installation)
            yield Kit(twin, app, services, artifacts, task, installation, tokens, tmp_path)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kit]:
    """One twin, App and moto for a module's worth of hostile cases (each gets its own task
    from `hostile`): the cases are many, and a twin per case would cost most of their time."""
    root = tmp_path_factory.mktemp("hostile")
    with pytest.MonkeyPatch.context() as env:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            env.delenv(name, raising=False)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_DEFAULT_REGION", REGION)
        install_dynamodb_lock()
        with mock_aws(), GitHubTwin(root / "twin") as twin:
            settings = Settings(table_prefix="test-", artifacts_bucket="test-artifacts")
            tables = Tables.connect(settings.table_prefix, region_name=REGION)
            tables.create_all()
            s3 = boto3.client("s3", region_name=REGION)
            s3.create_bucket(Bucket=settings.artifacts_bucket)
            artifacts = ArtifactStore(settings.artifacts_bucket, client=s3)
            services = Services.build(settings, tables, artifacts)
            twin.create_repo(REPO, {"README.md": "# demo\n", "app.py": "print('hello')\n"})
            installation = twin.create_installation("octo", [REPO])
            with GitHubApp(
                twin.app_id, twin.app_private_key_pem, base_url=twin.url, sleep=lambda _: None
            ) as app:
                tokens = Tokens(app, installation)
                kit = Kit(twin, app, services, artifacts, cast(Task, None), installation, tokens, root)
                kit.template = kit.clone("template")
                yield kit


@pytest.fixture
def hostile(shared: Kit, tmp_path: Path) -> Kit:
    """A Kit on the shared twin with a task of its own (its own branch and pull request)."""
    slug = f"hostile-{tmp_path.name[-40:]}".lower().replace("_", "-")
    services = shared.services
    services.plans.publish("alice", slug, document("Greet the world politely", repo=REPO))
    spawned, _ = spawn_item(services, services.plans.confirm("alice", slug), 1)
    now = utcnow()
    task = services.tasks.tasks.claim(spawned, runtime_id="r1", now=now, deadline=now + timedelta(hours=1))
    return dataclasses.replace(shared, task=task, root=tmp_path)


def stages_of(clone: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((clone.parent / "artifacts" / "publish.json").read_text())
    return data


def git(clone: Path, *args: str) -> str:
    return run_git(args, cwd=clone).stdout.strip()


def assert_clean(text: str, *token_sets: Tokens) -> None:
    assert not TOKEN_SHAPE.search(text)
    assert BASIC_PREFIX not in text
    for tokens in token_sets:
        for token in tokens.issued:
            assert token not in text


def assert_nothing_persisted(clone: Path, *token_sets: Tokens) -> None:
    """No token in any file of the clone's .git, nor in any artifact."""
    assert any(t.issued for t in token_sets)
    for path in [*(clone / ".git").rglob("*"), *(clone.parent / "artifacts").rglob("*")]:
        if path.is_file():
            assert_clean(path.read_bytes().decode("latin-1"), *token_sets)


# ---- the happy path


def test_publish_pushes_the_bot_commit_and_opens_the_pull_request(kit: Kit) -> None:
    clone = kit.worked_clone()
    seen: list[str] = []
    result = kit.publish(clone, upload=True, on_stage=lambda name, record: seen.append(name))

    assert seen == list(STAGES)
    pulls = kit.twin.pulls(REPO)
    assert len(pulls) == 1
    pull = pulls[0]
    assert (result.pr_number, result.pr_url) == (pull["number"], pull["html_url"])
    assert pull["title"] == kit.task.title == "Greet the world politely"
    assert pull["user"]["login"] == "steward[bot]"
    assert (pull["head"]["ref"], pull["base"]["ref"]) == (kit.task.branch, "main")
    body = pull["body"]
    assert body.startswith("Made the greeting polite.\n")
    assert "| Command | Exit status | Duration |" in body
    assert "| `pytest -q` | 0 | 3.2 s |" in body
    assert "| `ruff check \\| tee out` | 1 | 1.5 s |" in body
    assert "$0.0123" in body
    assert kit.task.id in body

    # The branch holds the bot's commit, on top of main, with the task trailer.
    assert kit.branch() == result.sha == git(clone, "rev-parse", "HEAD")
    assert git(clone, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == f"{BOT}|{BOT}"
    assert git(clone, "log", "-1", "--format=%B") == f"{kit.task.title}\n\nSteward-Task: {kit.task.id}"
    assert git(clone, "rev-parse", "HEAD~1") == kit.twin.branch_sha(REPO, "main")

    # publish.json: every stage, in order, each with status, time and detail.
    recorded = stages_of(clone)
    assert list(recorded) == list(STAGES)
    assert result.stages == recorded
    assert all(r["status"] == "ok" for r in recorded.values())
    assert all(set(r) == {"status", "at", "detail"} for r in recorded.values())
    assert recorded["record"]["detail"]["files"] == [
        {"status": "M", "path": "app.py"},
        {"status": "A", "path": "docs/greeting.md"},
    ]
    assert recorded["push"]["detail"]["action"] == "created"
    assert recorded["push"]["detail"]["remote_before"] is None
    assert recorded["pull_request"]["detail"]["action"] == "opened"
    assert recorded["recheck_push"]["detail"] == {"task_status": "running"}

    out = clone.parent / "artifacts"
    diff = (out / "diff.patch").read_text()
    assert "+print('hello, world')" in diff
    assert "+Be polite." in diff
    status = (out / "git-status.txt").read_text()
    assert "M  app.py" in status
    assert "A  docs/greeting.md" in status
    for name in ("publish.json", "diff.patch", "git-status.txt"):
        assert kit.artifacts.read_text(kit.task.id, name) == (out / name).read_text()

    assert_nothing_persisted(clone, kit.tokens)


def test_no_changes_is_refused_and_nothing_is_pushed(kit: Kit) -> None:
    clone = kit.clone("untouched")
    with pytest.raises(PublishError) as caught:
        kit.publish(clone)
    assert (caught.value.stage, caught.value.reason) == ("commit", "no_changes")
    assert "no changes" in caught.value.message
    recorded = stages_of(clone)
    assert list(recorded) == ["stage", "record", "scan", "commit"]
    assert recorded["commit"]["status"] == "refused"
    assert kit.branch() is None
    assert kit.pull_numbers() == []


# ---- repeating publication


def test_publishing_twice_makes_one_pull_request(kit: Kit) -> None:
    clone = kit.worked_clone()
    first = kit.publish(clone)
    second = kit.publish(clone)
    assert (second.pr_number, second.pr_url, second.sha) == (first.pr_number, first.pr_url, first.sha)
    assert kit.pull_numbers() == [first.pr_number]
    recorded = stages_of(clone)
    assert recorded["commit"]["status"] == "skipped"
    assert recorded["record"]["detail"]["source"] == "commit"  # the diff of the task's commit
    assert "+print('hello, world')" in (clone.parent / "artifacts" / "diff.patch").read_text()
    assert recorded["push"]["status"] == "skipped"
    assert recorded["pull_request"]["detail"]["action"] == "reused"


@pytest.mark.parametrize("stage", STAGES)
def test_a_crash_after_any_stage_then_a_replay_yields_exactly_one_pull_request(kit: Kit, stage: str) -> None:
    clone = kit.worked_clone()
    with pytest.raises(Crash):
        kit.publish(clone, on_stage=crash_at(stage))
    assert list(stages_of(clone))[-1] == stage

    result = kit.publish(clone)
    assert kit.pull_numbers() == [result.pr_number]
    assert kit.branch() == result.sha
    assert git(clone, "rev-list", "--count", f"{kit.twin.branch_sha(REPO, 'main')}..{result.sha}") == "1"
    assert all(r["status"] in ("ok", "skipped") for r in stages_of(clone).values())
    assert_nothing_persisted(clone, kit.tokens)


@pytest.mark.parametrize("stage", ["push", "recheck_pull_request", "pull_request"])
def test_a_replay_from_a_fresh_clone_of_the_pushed_branch_yields_one_pull_request(
    kit: Kit, stage: str
) -> None:
    with pytest.raises(Crash):
        kit.publish(kit.worked_clone(), on_stage=crash_at(stage))
    pushed = kit.branch()
    assert pushed is not None

    fresh = kit.clone("fresh", branch=kit.task.branch)
    result = kit.publish(fresh)
    assert result.sha == pushed
    assert kit.pull_numbers() == [result.pr_number]
    assert stages_of(fresh)["push"]["status"] == "skipped"
    assert_nothing_persisted(fresh, kit.tokens)


def test_push_done_but_the_pull_request_failed_then_a_replay_opens_one(kit: Kit) -> None:
    clone = kit.worked_clone()

    def fail_github_after_push(name: str, record: Mapping[str, Any]) -> None:
        if name == "recheck_pull_request":
            kit.twin.faults.server_errors = 1

    with kit.once() as once:
        tokens = Tokens(once, kit.installation)
        with pytest.raises(GitHubError) as caught:
            kit.publish(clone, app=once, tokens=tokens, on_stage=fail_github_after_push)
        assert_clean(str(caught.value), tokens, kit.tokens)
        recorded = stages_of(clone)
        assert recorded["push"]["status"] == "ok"
        assert recorded["pull_request"]["status"] == "failed"
        assert kit.branch() is not None
        assert kit.pull_numbers() == []

        result = kit.publish(clone, app=once, tokens=tokens)
    assert kit.pull_numbers() == [result.pr_number]
    assert_nothing_persisted(clone, tokens, kit.tokens)


@pytest.mark.parametrize("opened_webhook_first", [False, True], ids=["running", "moved-to-review"])
def test_pull_request_created_but_its_response_lost_then_a_replay_reuses_it(
    kit: Kit, opened_webhook_first: bool
) -> None:
    """Also when the "opened" webhook moved the task to review before the replay: the re-check
    lets a task in review go on, to reuse its pull request (never a second one)."""
    clone = kit.worked_clone()
    with kit.once() as once:
        tokens = Tokens(once, kit.installation)
        once.find_pull(kit.installation, REPO, kit.task.branch)  # caches the API token first
        kit.twin.faults.drop_response_after_pr_create = 1
        with pytest.raises(GitHubError):
            kit.publish(clone, app=once, tokens=tokens)
        assert len(kit.pull_numbers()) == 1  # it was created; only the answer was lost
        assert stages_of(clone)["pull_request"]["status"] == "failed"
        if opened_webhook_first:
            task = kit.services.tasks.tasks.require(kit.task.id)
            kit.services.tasks.tasks.transition(task, TaskStatus.REVIEW, now=utcnow(), event="github_event")

        result = kit.publish(clone, app=once, tokens=tokens)
    assert kit.pull_numbers() == [result.pr_number]
    recorded = stages_of(clone)
    assert recorded["pull_request"]["detail"]["action"] == "reused"
    status = "review" if opened_webhook_first else "running"
    assert recorded["recheck_pull_request"]["detail"] == {"task_status": status}


def test_a_lost_response_inside_one_publication_is_absorbed_by_its_retry(kit: Kit) -> None:
    kit.app.find_pull(kit.installation, REPO, kit.task.branch)
    kit.twin.faults.drop_response_after_pr_create = 1
    result = kit.publish(kit.worked_clone())
    assert kit.pull_numbers() == [result.pr_number]
    assert kit.twin.faults.drop_response_after_pr_create == 0


# ---- governance


def test_a_cancelled_task_is_not_pushed(kit: Kit) -> None:
    clone = kit.worked_clone()
    asked = len(kit.tokens.issued)
    kit.services.tasks.cancel("alice", kit.task.id)
    with pytest.raises(PublishError) as caught:
        kit.publish(clone)
    assert (caught.value.stage, caught.value.reason) == ("recheck_push", "cancelled")
    recorded = stages_of(clone)
    assert list(recorded)[-1] == "recheck_push"
    assert recorded["recheck_push"]["status"] == "refused"
    assert kit.branch() is None
    assert kit.pull_numbers() == []
    assert len(kit.tokens.issued) == asked  # no token was even asked for to push


def test_a_task_cancelled_after_the_push_gets_no_pull_request(kit: Kit) -> None:
    def cancel_after_push(name: str, record: Mapping[str, Any]) -> None:
        if name == "push":
            kit.services.tasks.cancel("alice", kit.task.id)

    with pytest.raises(PublishError) as caught:
        kit.publish(kit.worked_clone(), on_stage=cancel_after_push)
    assert (caught.value.stage, caught.value.reason) == ("recheck_pull_request", "cancelled")
    assert kit.branch() is not None
    assert kit.pull_numbers() == []


# How a task ends while its runtime is between the push and the pull request: each a path the
# control plane takes (a webhook of a pull request an earlier attempt opened, a withdrawal, the
# reaper), as (status it moves through, then where it ends).
ENDINGS = [
    ("failed by the reaper", (TaskStatus.FAILED,)),
    ("withdrawn in review", (TaskStatus.REVIEW, "withdraw")),
    ("merged in review", (TaskStatus.REVIEW, TaskStatus.MERGED)),
    ("closed in review", (TaskStatus.REVIEW, TaskStatus.CLOSED)),
]


@pytest.mark.parametrize(("how", "steps"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_a_task_that_ended_after_the_push_gets_no_pull_request(
    kit: Kit, how: str, steps: tuple[TaskStatus | str, ...]
) -> None:
    def end_after_push(name: str, record: Mapping[str, Any]) -> None:
        if name != "push":
            return
        for step in steps:
            task = kit.services.tasks.tasks.require(kit.task.id)
            if step == "withdraw":
                kit.services.tasks.cancel("alice", kit.task.id)
            else:
                kit.services.tasks.tasks.transition(task, TaskStatus(step), now=utcnow(), event="test_end")

    with pytest.raises(PublishError) as caught:
        kit.publish(kit.worked_clone(), on_stage=end_after_push)
    ended = kit.services.tasks.tasks.require(kit.task.id).status
    assert (caught.value.stage, caught.value.reason) == ("recheck_pull_request", "ended")
    assert f"is {ended}" in caught.value.message
    assert kit.pull_numbers() == []


def test_a_superseded_task_opens_no_second_pull_request(kit: Kit) -> None:
    clone = kit.worked_clone("old")
    # the person edits the item while its task runs, and confirms the new revision
    kit.services.plans.publish("alice", "demo", document("Greet the world very politely", repo=REPO))
    plan = kit.services.plans.confirm("alice", "demo")
    with pytest.raises(PublishError) as caught:
        kit.publish(clone)
    assert (caught.value.stage, caught.value.reason) == ("recheck_push", "cancelled")
    assert kit.branch() is None
    # the new revision's task publishes the one pull request of the checkbox
    spawned, created = spawn_item(kit.services, plan, 1)
    assert created
    assert spawned.revision == 2
    now = utcnow()
    new = kit.services.tasks.tasks.claim(spawned, runtime_id="r2", now=now, deadline=now + timedelta(hours=1))
    kit.publisher().publish(
        new,
        kit.worked_clone("new"),
        installation_id=kit.installation,
        summary="Made the greeting very polite.",
        checks=CHECKS,
        cost_usd=Decimal("0.01"),
        token_provider=kit.tokens,
    )
    [pull] = kit.twin.pulls(REPO)  # the one pull request of the checkbox
    assert pull["head"]["ref"] == new.branch
    assert kit.pull_numbers() == []  # none from the superseded task


def push_foreign(kit: Kit, *, email: str, message: str) -> str:
    """Someone else's commit pushed as the task's branch (on top of main)."""
    other = kit.clone("other")
    (other / "other.txt").write_text("someone else's work\n")
    run_git(["add", "-A"], cwd=other)
    identity = {"GIT_AUTHOR_NAME": "Human", "GIT_AUTHOR_EMAIL": email}
    identity |= {"GIT_COMMITTER_NAME": "Human", "GIT_COMMITTER_EMAIL": email}
    run_git(["commit", "--quiet", "--file=-"], cwd=other, env=identity, input_text=message)
    head = git(other, "rev-parse", "HEAD")
    url = kit.app.git_url(REPO)
    remote_git(
        ["push", "--quiet", url, f"{head}:refs/heads/{kit.task.branch}"],
        borrow=other,
        token=kit.tokens(),
        token_url=url,
    )
    return head


@pytest.mark.parametrize(
    ("email", "trailer"),
    [
        ("human@example.com", ""),
        ("human@example.com", "Steward-Task: {task}"),  # a forged trailer alone is not enough
        ("steward-bot@users.noreply.github.com", "Steward-Task: t000000000000000000000000"),  # another task
    ],
)
def test_a_remote_branch_with_a_foreign_commit_is_never_overwritten(
    kit: Kit, email: str, trailer: str
) -> None:
    clone = kit.worked_clone()
    foreign = push_foreign(
        kit, email=email, message="Someone's change\n\n" + trailer.format(task=kit.task.id) + "\n"
    )
    with pytest.raises(PublishError) as caught:
        kit.publish(clone)
    assert (caught.value.stage, caught.value.reason) == ("push", "foreign_commits")
    assert foreign[:12] in caught.value.message
    assert kit.branch() == foreign
    assert kit.pull_numbers() == []
    assert stages_of(clone)["push"]["status"] == "refused"


def test_only_the_tasks_own_branch_is_ever_pushed(kit: Kit) -> None:
    clone = kit.worked_clone()
    main = kit.twin.branch_sha(REPO, "main")
    kit.task = kit.task.model_copy(update={"branch": "main"})
    with pytest.raises(PublishError) as caught:
        kit.publish(clone)
    assert (caught.value.stage, caught.value.reason) == ("push", "branch")
    assert kit.twin.branch_sha(REPO, "main") == main
    assert kit.pull_numbers() == []


def test_an_earlier_bot_commit_of_the_task_is_built_upon_not_overwritten(kit: Kit) -> None:
    # An earlier publication of this task, from another clone, pushed a different change.
    earlier_clone = kit.clone("earlier")
    (earlier_clone / "app.py").write_text("print('hi')\n")
    earlier = kit.publish(earlier_clone)

    clone = kit.worked_clone()
    result = kit.publish(clone)
    assert result.pr_number == earlier.pr_number
    assert kit.pull_numbers() == [earlier.pr_number]
    assert kit.branch() == result.sha
    assert git(clone, "rev-parse", "HEAD~1") == earlier.sha  # a fast-forward on top of it
    assert git(clone, "show", "HEAD:app.py") == "print('hello, world')"
    push = stages_of(clone)["push"]
    assert push["status"] == "ok"
    assert push["detail"]["rebuilt_on"] == earlier.sha


def test_a_remote_branch_behind_our_commit_is_fast_forwarded(kit: Kit) -> None:
    clone = kit.worked_clone()
    url = kit.app.git_url(REPO)
    head = git(clone, "rev-parse", "HEAD")
    remote_git(
        ["push", "--quiet", url, f"{head}:refs/heads/{kit.task.branch}"],
        borrow=clone,
        token=kit.tokens(),
        token_url=url,
    )
    result = kit.publish(clone)
    assert kit.branch() == result.sha
    assert stages_of(clone)["push"]["detail"]["action"] == "fast-forward"


# ---- credentials


def merging_clone(kit: Kit, name: str) -> tuple[Path, str]:
    """A clone with the run's changes and, merged without a commit (as a conflict round's
    runner merges), a commit a person pushed to `main` holding text the redactor knows as a
    secret (the base has it already: it is not the change's to refuse)."""
    clone = kit.worked_clone(name)
    secret = {"settings.json": f'{{"capability": "{HELD}"}}\n'}
    base = kit.twin.push(kit.tokens(), REPO, "main", secret, on_branch=True)
    moved = kit.clone(f"{name}-base")  # the base as it is now, fetched from a local clone of it
    # the test's own git (Steward's refuses a local transport): what the runner's merge leaves
    for args in (["fetch", "--quiet", str(moved), "main"], ["merge", "--no-ff", "--no-commit", base]):
        subprocess.run(
            ["git", "-c", "user.name=x", "-c", "user.email=x@invalid", *args], cwd=clone, check=True
        )
    return clone, base


def test_a_conflict_rounds_merge_is_published_with_both_parents_and_no_other_merge_ever_is(kit: Kit) -> None:
    unasked, _ = merging_clone(kit, "unasked")
    with pytest.raises(PublishError) as caught:  # a merge state Steward did not make
        kit.publish(unasked, redactor=Redactor([HELD]))
    assert (caught.value.stage, caught.value.reason) == ("stage", "merge_state")
    assert kit.branch() is None

    clone, base = merging_clone(kit, "asked")
    result = kit.publish(clone, redactor=Redactor([HELD]), merge_parent=base)
    parents = git(clone, "rev-list", "--parents", "-n", "1", result.sha).split()[1:]
    assert parents[1] == base  # a merge of the branch's head and the base, never a rebase
    assert kit.branch() == result.sha
    assert stages_of(clone)["commit"]["detail"]["merged"] == base
    again = kit.publish(clone, redactor=Redactor([HELD]), merge_parent=base)  # a replay finds it
    assert (again.sha, again.pr_number, kit.pull_numbers()) == (
        result.sha,
        result.pr_number,
        [result.pr_number],
    )


def test_the_pull_request_and_the_commit_are_redacted(hostile: Kit) -> None:
    kit = hostile
    leaked = kit.tokens()  # a live token in the item's title, the run's summary and a check
    kit.task = kit.task.model_copy(update={"title": f"Rotate {leaked} before Friday"})
    held = "held-capability-value"  # a secret the runtime holds, not shaped like a token
    result = kit.publish(
        kit.worked_clone(),
        upload=True,
        redactor=Redactor([held]),
        summary=f"Used {leaked} and {held} to look around.",
        checks=[{"command": f"curl -H 'Authorization: token {leaked}'", "exit_status": 0, "duration_s": 1}],
    )
    pull = kit.twin.pull(REPO, result.pr_number)
    assert pull["title"] == "Rotate [REDACTED] before Friday"
    assert "Used [REDACTED] and [REDACTED] to look around." in pull["body"]
    message = git(kit.root / "run" / "clone", "log", "-1", "--format=%B")
    assert message.splitlines()[0] == "Rotate [REDACTED] before Friday", message
    for text in (pull["title"], pull["body"], message):
        assert_clean(text, kit.tokens)
        assert held not in text
    assert_nothing_persisted(kit.root / "run" / "clone", kit.tokens)


HELD = "held-capability-value"  # what the runtime holds besides tokens (capability, ticket)
# How a credential reaches a change: (path written, its content); `{token}` is a live
# installation token, `{basic}` its Basic header, `{held}` HELD. One line per way.
LEAKS: dict[str, tuple[str, str]] = {
    "a live token in a new file": ("notes/leak.txt", "token={token}\n"),
    "its Basic header added to a tracked file": ("app.py", "print('hello, world')\n# {basic}\n"),
    "a held secret that is not token-shaped": ("settings.json", '{{"capability": "{held}"}}\n'),
    "a token as a file name": ("docs/{token}.md", "nothing secret inside\n"),
    "a token in a file .gitattributes calls binary": ("blob.bin", "\0\0binary {token}\0"),
}


@pytest.mark.parametrize("leak", LEAKS, ids=list(LEAKS))
def test_a_credential_in_the_change_refuses_publication_and_pushes_nothing(hostile: Kit, leak: str) -> None:
    kit = hostile
    clone = kit.worked_clone()
    token = kit.tokens()  # live: it would still authenticate wherever it was pushed
    (clone / ".gitattributes").write_text("*.bin -diff\n")
    where, content = (part.format(token=token, basic=basic_header(token), held=HELD) for part in LEAKS[leak])
    (clone / where).parent.mkdir(parents=True, exist_ok=True)
    (clone / where).write_bytes(content.encode("latin-1"))

    with pytest.raises(PublishError) as caught:
        kit.publish(clone, upload=True, redactor=Redactor([HELD]))
    assert (caught.value.stage, caught.value.reason) == ("scan", "credential")
    assert redact(where, [token]) in caught.value.message  # the file, by a name that is safe to show
    assert_clean(caught.value.message, kit.tokens)
    assert kit.branch() is None
    assert kit.pull_numbers() == []
    recorded = stages_of(clone)
    assert list(recorded)[-1] == "scan"
    assert recorded["scan"]["status"] == "refused"
    diff = kit.artifacts.read_text(kit.task.id, "diff.patch") or ""
    assert "+print('hello, world')" in diff  # the work is kept, redacted
    for name in ("publish.json", "diff.patch", "git-status.txt"):
        text = kit.artifacts.read_text(kit.task.id, name) or ""
        assert_clean(text, kit.tokens)
        assert HELD not in text


def test_no_token_in_git_config_or_in_any_exception(kit: Kit) -> None:
    clone = kit.worked_clone()
    config_before = (clone / ".git" / "config").read_text()
    assert "extraheader" not in config_before.lower()
    kit.publish(clone)
    assert (clone / ".git" / "config").read_text() == config_before

    # A token that no longer works: git's refusal is reported without it.
    expired = kit.tokens()
    kit.twin.expire_token(expired)
    url = kit.app.git_url(REPO)
    with pytest.raises(GitError) as caught:
        remote_git(["ls-remote", url], token=expired, token_url=url)
    assert_clean(str(caught.value) + caught.value.stderr, kit.tokens)

    # A push that fails inside publication: the stage records the error, redacted.
    (clone / "more.txt").write_text("more\n")

    def expired_provider() -> str:
        token = kit.tokens()
        kit.twin.expire_token(token)
        return token

    with pytest.raises(GitError) as failed:
        kit.publish(clone, token_provider=expired_provider)
    assert_clean(str(failed.value), kit.tokens)
    assert stages_of(clone)["push"]["status"] == "failed"
    assert_nothing_persisted(clone, kit.tokens)


# ---- untrusted trees (docs/testing.md: nothing the model or a check writes runs)


class Listener:
    """A TCP server on loopback that must never be contacted: it records the first bytes of
    every connection (an HTTP request, a proxy request, a TLS hello) and closes it."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(2)
                try:
                    self.seen.append(connection.recv(65536))
                except OSError:
                    self.seen.append(b"")

    def close(self) -> None:
        self.socket.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def plain_git(cwd: Path, *args: str) -> None:
    """git as a check runs it: a plain subprocess, none of Steward's hardening."""
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    env |= {
        "GIT_AUTHOR_NAME": "c",
        "GIT_AUTHOR_EMAIL": "c@x",
        "GIT_COMMITTER_NAME": "c",
        "GIT_COMMITTER_EMAIL": "c@x",
    }
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def nested_repository(root: Path, where: str, sentinel: Path) -> None:
    """What the check of the issue did: `git init <where>` with a clean filter that writes
    `sentinel`, a committed file made stat-dirty (git would clean it again) and an untracked
    `.gitattributes` naming the filter."""
    repo = root / where
    repo.mkdir(parents=True)
    plain_git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    plain_git(repo, "add", "f")
    plain_git(repo, "commit", "-q", "-m", "f")
    plain_git(repo, "config", "filter.evil.clean", f"touch {sentinel}; cat")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    os.utime(repo / "f", (1_000_000_000, 1_000_000_000))


def gitfile(root: Path, where: str, sentinel: Path) -> None:
    """A `.git` file pointing at the clone's own git directory."""
    (root / where).mkdir(parents=True)
    (root / where / ".git").write_text(f"gitdir: {root / '.git'}\n")


def bare_repository(root: Path, where: str, sentinel: Path) -> None:
    """A bare repository as plain files, its config naming a program for whoever enters it."""
    plain_git(root, "init", "-q", "--bare", where)
    plain_git(root / where, "config", "core.fsmonitor", f"touch {sentinel}")


def uppercase_git(root: Path, where: str, sentinel: Path) -> None:
    """`.GIT`: git on Linux might take it for a name, a case-folding filesystem for `.git`."""
    nested_repository(root, where, sentinel)
    (root / where / ".git").rename(root / where / ".GIT")


# A tree a check left behind: (the path the hostile repository is at, how it was made).
# Publication refuses each; nothing in it ever runs; it is never pushed.
HOSTILE_TREES: dict[str, tuple[str, Callable[[Path, str, Path], None]]] = {
    "a nested repository with a clean filter": ("evil", nested_repository),
    "a nested repository deep in the tree": ("src/vendor/evil", nested_repository),
    "a .git file pointing at the clone's git directory": ("sub", gitfile),
    "a nested bare repository": ("fixtures/evil.git", bare_repository),
    "a nested repository spelled .GIT": ("loud", uppercase_git),
}


@pytest.mark.parametrize("case", HOSTILE_TREES, ids=list(HOSTILE_TREES))
def test_a_nested_repository_never_runs_and_is_never_published(hostile: Kit, case: str) -> None:
    kit = hostile
    clone = kit.worked_clone()
    sentinel = kit.root / "sentinel"
    where, make = HOSTILE_TREES[case]
    make(clone, where, sentinel)

    with pytest.raises(PublishError) as caught:
        kit.publish(clone, upload=True)
    assert (caught.value.stage, caught.value.reason) == ("scan", "nested_repository")
    assert where in caught.value.message
    assert not sentinel.exists(), "a program the tree named ran"
    assert kit.branch() is None
    assert kit.pull_numbers() == []
    assert "160000" not in git(clone, "ls-files", "--stage")  # no gitlink was ever staged
    diff = kit.artifacts.read_text(kit.task.id, "diff.patch") or ""
    assert "+print('hello, world')" in diff  # the rest of the work stays reviewable
    assert "Subproject commit" not in diff


@pytest.mark.parametrize("case", HOSTILE_TREES, ids=list(HOSTILE_TREES))
def test_the_failure_path_runs_nothing_a_nested_repository_names(hostile: Kit, case: str) -> None:
    kit = hostile
    # A run that ends without publishing (a failed check) keeps its work as diff.patch.
    clone = kit.worked_clone()
    sentinel = kit.root / "sentinel"
    where, make = HOSTILE_TREES[case]
    make(clone, where, sentinel)
    config = RunnerConfig(
        task_id=kit.task.id, ticket="ticket-value", api_url="http://x", relay_url="http://x"
    )
    run = Run(
        config,
        kit.task,
        "r1",
        "capability-value",
        artifacts=kit.artifacts,
        api=RuntimeApi("http://127.0.0.1:9", "http://127.0.0.1:9"),
        redactor=Redactor(),
    )
    run._write_artifacts(clone, preserve=True)
    assert not sentinel.exists(), "a program the tree named ran"
    diff = kit.artifacts.read_text(kit.task.id, "diff.patch") or ""
    assert "+print('hello, world')" in diff
    assert "Subproject commit" not in diff
    assert "160000" not in git(clone, "ls-files", "--stage")


# A config planted in the clone's `.git/config`, and files beside it: `{twin}` is the twin's
# base URL, `{url}` the repository's, `{listener}` a server that must never be contacted,
# `{sentinel}` a file no program may create, `{home}` the clone's parent. Publication must go
# on as if nothing were planted. One line (or two) per attack.
PLANTED: dict[str, tuple[str, dict[str, str]]] = {
    "a url-specific proxy": ('[http "{twin}/"]\n\tproxy = {listener}\n', {}),
    "a proxy without TLS verification": ('[http "{twin}/"]\n\tsslVerify = false\n\tproxy = {listener}\n', {}),
    "a proxy for the remote named by its url": ('[remote "{url}"]\n\tproxy = {listener}\n', {}),
    "a push url": ('[remote "{url}"]\n\tpushurl = {listener}/x.git\n', {}),
    "insteadOf": ('[url "{listener}/"]\n\tinsteadOf = {twin}/\n', {}),
    "pushInsteadOf, redirects followed": (
        '[url "{listener}/"]\n\tpushInsteadOf = {twin}/\n[http "{listener}/"]\n\tfollowRedirects = true\n',
        {},
    ),
    "an included config": (
        "[include]\n\tpath = {home}/planted.cfg\n",
        {"planted.cfg": '[http "{twin}/"]\n\tproxy = {listener}\n'},
    ),
    "the ext transport": (
        '[protocol "ext"]\n\tallow = always\n[url "ext::sh -c touch% {sentinel}"]\n\tinsteadOf = {url}\n',
        {},
    ),
    "an ssh command": (
        '[protocol "ssh"]\n\tallow = always\n[url "ssh://evil/"]\n\tinsteadOf = {twin}/\n'
        "[core]\n\tsshCommand = touch {sentinel}\n",
        {},
    ),
    "a url-specific credential helper": ('[credential "{twin}"]\n\thelper = !touch {sentinel}\n', {}),
    "aliases": ("[alias]\n\tpush = !touch {sentinel}\n\tls-remote = !touch {sentinel}\n", {}),
    "hooks": (
        "[core]\n\thooksPath = {home}/hooks\n",
        {
            f"hooks/{h}": "#!/bin/sh\ntouch {sentinel}\n"
            for h in ("pre-commit", "commit-msg", "post-commit", "pre-push", "reference-transaction")
        },
    ),
    "an fsmonitor": ("[core]\n\tfsmonitor = touch {sentinel}\n", {}),
    "a work tree elsewhere": (
        "[core]\n\tworktree = {home}/elsewhere\n",
        {"elsewhere/stolen.txt": "a host file\n"},
    ),
    "a clean filter .gitattributes names": (
        '[filter "evil"]\n\tclean = touch {sentinel}; cat\n',
        {"clone/.gitattributes": "* filter=evil\n"},
    ),
    "a textconv and an external diff": (
        '[diff "evil"]\n\ttextconv = touch {sentinel}; cat\n[diff]\n\texternal = touch {sentinel}\n',
        {"clone/.gitattributes": "*.py diff=evil\n"},
    ),
}


@pytest.mark.parametrize("case", PLANTED, ids=list(PLANTED))
def test_a_planted_config_changes_nothing_publication_does(
    hostile: Kit, listener: Listener, case: str
) -> None:
    kit = hostile
    clone = kit.worked_clone()
    sentinel = kit.root / "sentinel"
    values = {
        "twin": kit.twin.url.rstrip("/"),
        "url": kit.app.git_url(REPO),
        "listener": listener.url,
        "sentinel": str(sentinel),
        "home": str(clone.parent),
    }
    config, files = PLANTED[case]
    for name, text in files.items():
        path = clone.parent / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**values))
        path.chmod(0o755)
    with (clone / ".git" / "config").open("a") as planted:
        planted.write(config.format(**values))

    try:
        result: PublishResult | None = kit.publish(clone)
    except GitError as error:  # what a planted config did to git, when it did something
        result, failure = None, error
    assert not sentinel.exists(), "a program the planted config named ran"
    assert listener.seen == [], (
        f"a request went where the planted config pointed: {redact(listener.seen[0].decode('latin-1'))[:300]!r}"
    )
    assert result is not None, failure
    assert kit.branch() == result.sha
    pushed = git(clone, "ls-tree", "-r", "--name-only", result.sha).splitlines()
    assert {"app.py", "docs/greeting.md"} <= set(pushed)  # the run's work, and only the clone's
    assert "stolen.txt" not in pushed
    assert git(clone, "show", f"{result.sha}:app.py") == "print('hello, world')"
    assert kit.pull_numbers() == [result.pr_number]
    assert all(r["status"] == "ok" for r in stages_of(clone).values())


def test_run_git_redacts_what_it_returns_and_raises(tmp_path: Path) -> None:
    secret = "ghs_" + "A" * 36
    run_git(["init", "--quiet"], cwd=tmp_path)
    with pytest.raises(GitError) as caught:
        run_git(["show", secret], cwd=tmp_path)  # git echoes the unknown revision
    assert secret not in str(caught.value) + caught.value.stderr
    assert "'[REDACTED]'" in str(caught.value)
    held = run_git(["show", "plain-held-value"], cwd=tmp_path, check=False, secrets=["plain-held-value"])
    assert held.returncode != 0
    assert "plain-held-value" not in held.stderr
    assert "[REDACTED]" in held.stderr
    assert (
        redact(f"x {BASIC_PREFIX}QUJD y https://user:pw@host/x") == "x [REDACTED] y https://[REDACTED]@host/x"
    )
    assert redact("held: s3cr3t-value.", ["s3cr3t-value"]) == "held: [REDACTED]."
    with pytest.raises(ValueError, match="argv"):
        remote_git(["ls-remote", f"http://x-access-token:{secret}@127.0.0.1/r.git"], token=secret)
    with pytest.raises(ValueError, match="RemoteRepository"):  # never in a clone: its config would apply
        run_git(["ls-remote", "http://127.0.0.1/r.git"], cwd=tmp_path, token=secret)
