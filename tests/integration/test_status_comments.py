"""The status comment on Steward's pull request (docs/concepts/github.md): one per pull
request, written when the task enters review and edited in place as it moves, within at most
four GitHub calls over a task's life without rounds; a lost answer, a 5xx or a rate limit
never makes a second one and never holds back a state change.

Real stores on moto, the heartbeat with the real `StatusComments` over the App's client to the
GitHub twin (its fault switches), and a counting wrapper to read the calls."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from steward.adapters.event_store import EventStore
from steward.adapters.github import GitHubApp
from steward.adapters.installation_store import InstallationStore
from steward.adapters.liveness import LivenessIndex
from steward.adapters.plan_store import PlanStore
from steward.domain.installations import Installation
from steward.domain.models import Task, TaskStatus, utcnow
from steward.domain.status_comment import marker
from steward.local.github_twin import GitHubTwin
from steward.services.heartbeat import Outcome
from steward.services.status_comments import StatusComments
from steward.services.withdrawal import Withdrawals

from tests.support.loop import Loop, build_loop, open_reviews

_REPOS = itertools.count(1)


@dataclass
class Counted:
    """The App, counting the calls the status comment makes."""

    app: GitHubApp
    calls: Counter[str] = field(default_factory=Counter)

    def find_comment(self, installation_id: int, repo: str, number: int, marker: str) -> int | None:
        self.calls["find_comment"] += 1
        return self.app.find_comment(installation_id, repo, number, marker)

    def comment(self, installation_id: int, repo: str, number: int, body: str) -> int:
        self.calls["comment"] += 1
        return self.app.comment(installation_id, repo, number, body)

    def edit_comment(self, installation_id: int, repo: str, comment_id: int, body: str) -> bool:
        self.calls["edit_comment"] += 1
        return self.app.edit_comment(installation_id, repo, comment_id, body)


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitHubTwin]:
    # one twin for the module (its start is most of a test's time); a repository per test
    twin_dir = tmp_path_factory.mktemp("twin")
    with GitHubTwin(twin_dir, webhook_url="http://127.0.0.1:9/webhook", webhook_secret="s") as twin:
        twin.withhold(True)
        yield twin


@pytest.fixture(scope="module")
def app(twin: GitHubTwin) -> Iterator[GitHubApp]:
    with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_attempts=1) as app:
        yield app


@pytest.fixture
def repo(twin: GitHubTwin) -> str:
    name = f"octo{next(_REPOS)}/demo"  # an account each: the App is installed once per account
    twin.create_repo(name, {"README.md": "# demo\n"})
    return name


@pytest.fixture
def installation(twin: GitHubTwin, repo: str) -> int:
    return twin.create_installation(repo.split("/", maxsplit=1)[0], [repo])


@pytest.fixture
def github(app: GitHubApp) -> Counted:
    return Counted(app)


@pytest.fixture
def loop(services: Any, installation: int, github: Counted, app: GitHubApp, repo: str) -> Loop:
    installations = InstallationStore(services.tables)
    installations.put(
        Installation(
            installation_id=installation, account=repo.split("/", maxsplit=1)[0], repositories=(repo,)
        ),
        now=utcnow(),
    )
    installations.link(installation, "alice", now=utcnow(), force=True)
    loop = build_loop(services)
    loop.heartbeat.status_comments = StatusComments(
        loop.tasks,
        EventStore(services.tables),
        PlanStore(services.tables),
        installations,
        github=lambda: github,
        console_url="https://console.test/",
    )
    loop.heartbeat.withdrawals = Withdrawals(loop.tasks, installations, github=lambda: app)
    loop.settings("alice", interval_seconds=1, max_parallel=10, max_open_prs=10)
    return loop


def tick(loop: Loop) -> Outcome:
    loop.clock.advance(2)
    return loop.heartbeat.tick("alice").outcome


def status_comments(twin: GitHubTwin, task: Task) -> list[str]:
    return [c["body"] for c in twin.comments(task.repo, task.pr_number or 0) if marker(task.id) in c["body"]]


def live_ids(loop: Loop) -> set[str]:
    return {t.id for t in loop.tasks.live_for_user("alice")}


def test_one_comment_follows_a_task_from_review_to_merge_in_three_github_calls(
    *, loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, repo: str, github: Counted
) -> None:
    [task] = open_reviews(loop, twin, app, installation, ["Add a greeting"], repo=repo)
    assert tick(loop) is Outcome.WORKED
    [shown] = status_comments(twin, task)
    assert "In review" in shown
    assert f"(https://console.test/#/tasks/{task.id})" in shown
    assert github.calls == {"find_comment": 1, "comment": 1}
    # Steward's own comment is no news of GitHub's: resync's "last observed" stays as it was
    # (a later stamp hid a base moved by another merge, and its conflict round never came)
    assert loop.tasks.require(task.id).updated_at == task.updated_at
    tick(loop)
    tick(loop)
    assert github.calls == {"find_comment": 1, "comment": 1}  # nothing changed: nothing written

    loop.tasks.transition(loop.tasks.require(task.id), TaskStatus.MERGED, now=loop.clock(), event="merged")
    assert task.id in live_ids(loop)  # in sight until the comment says it merged
    tick(loop)
    [shown] = status_comments(twin, task)
    assert "Merged" in shown
    assert github.calls == {"find_comment": 1, "comment": 1, "edit_comment": 1}  # 3 over its life
    assert task.id not in live_ids(loop)
    tick(loop)
    assert sum(github.calls.values()) == 3


@pytest.mark.parametrize(
    "fault", ["drop_response_after_comment_create", "server_errors", "secondary_rate_limit"]
)
def test_a_lost_answer_or_a_github_failure_never_makes_a_second_comment_nor_holds_a_state_change(
    *, loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, repo: str, fault: str
) -> None:
    [task] = open_reviews(loop, twin, app, installation, ["Add a greeting"], repo=repo)
    setattr(twin.faults, fault, 1)
    assert tick(loop) is Outcome.PARTIAL  # this action failed; the tick's other work went on
    # the state moves on whatever GitHub does
    loop.tasks.transition(loop.tasks.require(task.id), TaskStatus.MERGED, now=loop.clock(), event="merged")
    assert tick(loop) is Outcome.WORKED
    [shown] = status_comments(twin, task)
    assert "Merged" in shown
    assert task.id not in live_ids(loop)


def test_a_withdrawn_task_says_so_and_leaves_the_loops_sight_once_its_pull_request_is_closed(
    *, loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, repo: str
) -> None:
    [task] = open_reviews(loop, twin, app, installation, ["Add a greeting"], repo=repo)
    tick(loop)
    loop.services.tasks.cancel("alice", task.id)
    tick(loop)
    [shown] = status_comments(twin, task)
    assert "Withdrawn" in shown
    assert twin.pull(task.repo, task.pr_number or 0)["state"] == "closed"
    assert task.id not in live_ids(loop)


def test_without_a_github_app_no_finished_task_lingers_in_the_loops_sight(
    *, loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, repo: str
) -> None:
    loop.heartbeat.status_comments = None
    [task] = open_reviews(loop, twin, app, installation, ["Add a greeting"], repo=repo)
    loop.tasks.transition(loop.tasks.require(task.id), TaskStatus.MERGED, now=loop.clock(), event="merged")
    tick(loop)
    assert task.id not in live_ids(loop)
    assert status_comments(twin, task) == []


def test_a_round_starting_and_ending_updates_the_same_comment(
    *, loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, repo: str, github: Counted
) -> None:
    [task] = open_reviews(loop, twin, app, installation, ["Add a greeting"], repo=repo)
    tick(loop)
    head = "a1" * 20
    ask = {
        "round_key": f"{task.pr_number}:{head}:review",
        "kind": "review",
        "source": "review:1",
        "head_sha": head,
        "pull_number": task.pr_number,
        "author": "octo",
        "author_association": "OWNER",
        "body": "Rename it.",
    }
    current = loop.tasks.require(task.id)
    sets = {"head_sha": head, "pending_asks": [ask]}
    loop.tasks.append_event(current, "follow_up_asked", ask, now=loop.clock(), sets=sets, wake=True)
    tick(loop)  # the round starts; its runtime claims it
    [queued] = [t for t in loop.tasks.live_for_user("alice") if t.parent == task.id]
    now = loop.clock()
    round_task = loop.tasks.claim(queued, runtime_id="r-round", now=now, deadline=now + timedelta(hours=1))
    tick(loop)
    [shown] = status_comments(twin, task)
    assert "Follow-up round 1 is at work" in shown
    loop.tasks.transition(
        round_task, TaskStatus.FAILED, now=loop.clock(), event="finished", classification="final", reason="no"
    )
    tick(loop)  # the round is settled
    tick(loop)
    [shown] = status_comments(twin, task)
    assert "In review" in shown
    assert "1 of 2 used" in shown
    assert github.calls == {"find_comment": 1, "comment": 1, "edit_comment": 2}


def test_the_loop_leaves_the_user_once_every_comment_is_current(
    *, loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, repo: str
) -> None:
    [task] = open_reviews(loop, twin, app, installation, ["Add a greeting"], repo=repo)
    closed, _ = loop.tasks.transition(
        loop.tasks.require(task.id), TaskStatus.CLOSED, now=loop.clock(), event="closed"
    )
    loop.tasks.project_item(closed, now=loop.clock())
    tick(loop)
    tick(loop)
    assert "Closed without merging" in status_comments(twin, task)[0]
    assert task.id not in live_ids(loop)
    assert "alice" not in set(LivenessIndex(loop.services.tables).all_live_users())
