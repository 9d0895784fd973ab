"""Governed publication against the GitHub twin, a real clone and real git processes
(DESIGN sections 3, 6): stages recorded, the bot's commit on the task's branch, one pull
request however often publication is repeated, cancellation re-checked, foreign commits never
overwritten, and no credential left behind in the clone or in any artifact."""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.git import GitError, run_git
from steward.adapters.github import GitHubApp, GitHubError
from steward.adapters.task_store import TaskStore
from steward.config import Settings
from steward.domain.models import Task, TaskStatus, utcnow
from steward.domain.redaction import redact
from steward.local.github_twin import GitHubTwin
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

    def clone(self, name: str, *, branch: str | None = None, tokens: Tokens | None = None) -> Path:
        """A clone as the runner's bootstrap makes it: over HTTP, the token in the header;
        `root/name/clone`, so its artifacts go to `root/name/artifacts`."""
        where = self.root / name
        where.mkdir(parents=True)
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
        return [int(p["number"]) for p in self.twin.pulls(REPO)]

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
    assert list(recorded) == ["stage", "record", "commit"]
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


def test_pull_request_created_but_its_response_lost_then_a_replay_reuses_it(kit: Kit) -> None:
    clone = kit.worked_clone()
    with kit.once() as once:
        tokens = Tokens(once, kit.installation)
        once.find_pull(kit.installation, REPO, kit.task.branch)  # caches the API token first
        kit.twin.faults.drop_response_after_pr_create = 1
        with pytest.raises(GitHubError):
            kit.publish(clone, app=once, tokens=tokens)
        assert len(kit.pull_numbers()) == 1  # it was created; only the answer was lost
        assert stages_of(clone)["pull_request"]["status"] == "failed"

        result = kit.publish(clone, app=once, tokens=tokens)
    assert kit.pull_numbers() == [result.pr_number]
    assert stages_of(clone)["pull_request"]["detail"]["action"] == "reused"


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
    assert len(kit.pull_numbers()) == 1
    [pull] = kit.twin.pulls(REPO)
    assert pull["head"]["ref"] == new.branch


def push_foreign(kit: Kit, *, email: str, message: str) -> str:
    """Someone else's commit pushed as the task's branch (on top of main)."""
    other = kit.clone("other")
    (other / "other.txt").write_text("someone else's work\n")
    run_git(["add", "-A"], cwd=other)
    identity = {"GIT_AUTHOR_NAME": "Human", "GIT_AUTHOR_EMAIL": email}
    identity |= {"GIT_COMMITTER_NAME": "Human", "GIT_COMMITTER_EMAIL": email}
    run_git(["commit", "--quiet", "--file=-"], cwd=other, env=identity, input_text=message)
    url = kit.app.git_url(REPO)
    run_git(
        ["push", "--quiet", url, f"HEAD:refs/heads/{kit.task.branch}"],
        cwd=other,
        token=kit.tokens(),
        token_url=url,
    )
    return git(other, "rev-parse", "HEAD")


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
    run_git(
        ["push", "--quiet", url, f"HEAD:refs/heads/{kit.task.branch}"],
        cwd=clone,
        token=kit.tokens(),
        token_url=url,
    )
    result = kit.publish(clone)
    assert kit.branch() == result.sha
    assert stages_of(clone)["push"]["detail"]["action"] == "fast-forward"


# ---- credentials


def test_no_credential_reaches_any_artifact_even_when_the_run_wrote_one(kit: Kit) -> None:
    clone = kit.worked_clone()
    leaked = kit.tokens()  # a live token the run got hold of and wrote into its work
    (clone / "leak.txt").write_text(f"token={leaked}\nheader={BASIC_PREFIX}Zm9vYmFy\n")
    result = kit.publish(
        clone,
        upload=True,
        summary=f"Used {leaked} to look around.",
        checks=[{"command": f"curl -H 'Authorization: token {leaked}'", "exit_status": 0, "duration_s": 1}],
    )
    body = kit.twin.pull(REPO, result.pr_number)["body"]
    assert_clean(body, kit.tokens)
    assert "Used [REDACTED] to look around." in body
    assert "+token=[REDACTED]" in (clone.parent / "artifacts" / "diff.patch").read_text()
    assert_nothing_persisted(clone, kit.tokens)
    for name in ("publish.json", "diff.patch", "git-status.txt"):
        assert_clean(kit.artifacts.read_text(kit.task.id, name) or "", kit.tokens)


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
        run_git(["ls-remote", url], cwd=clone, token=expired, token_url=url)
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


class Recorder(BaseHTTPRequestHandler):
    """An HTTP server that must never see a token: records every Authorization header."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def test_a_planted_config_cannot_redirect_the_token_or_run_hooks(kit: Kit) -> None:
    clone = kit.worked_clone()
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        evil = f"http://127.0.0.1:{server.server_address[1]}/steal/"
        marker = clone.parent / "hook-ran"
        hooks = clone.parent / "hooks"
        hooks.mkdir()
        for hook in ("pre-commit", "commit-msg", "post-commit", "pre-push"):
            (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
            (hooks / hook).chmod(0o755)
        with (clone / ".git" / "config").open("a") as config:
            config.write(f'[url "{evil}"]\n\tinsteadOf = {kit.app.git_url(REPO)}\n')
            config.write(f"[core]\n\thooksPath = {hooks}\n")
            config.write("[credential]\n\thelper = store\n")

        with pytest.raises(GitError):
            kit.publish(clone)
        assert Recorder.seen  # git did go there (the rewrite applied) ...
        assert set(Recorder.seen) == {None}  # ... without the header, scoped to the real URL
        assert stages_of(clone)["commit"]["status"] == "ok"
        assert not marker.exists()  # no hook ran, although the commit was made
        assert kit.branch() is None
    finally:
        server.shutdown()
        server.server_close()


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
        run_git(["ls-remote", f"http://x-access-token:{secret}@127.0.0.1/r.git"], cwd=tmp_path, token=secret)
