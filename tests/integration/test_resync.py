"""Resync: the loop observes GitHub for what webhooks did not tell it (docs/concepts/github.md).

Real stores on moto, the heartbeat with its Fargate launcher on the ECS fake, and the
GitHub twin with its deliveries withheld, so every webhook is lost and only resync can
move a task."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.github import ConditionalRead, GitHubApp, InstallationRead, PullObservation
from steward.adapters.installation_store import InstallationStore
from steward.domain.installations import Installation
from steward.domain.models import ItemStatus, PlanStatus, Task, TaskStatus, utcnow
from steward.domain.resync import ResyncPolicy
from steward.domain.webhooks import WebhookSecret
from steward.local.github_twin import GitHubTwin
from steward.local.github_twin.twin import TEAM_WRITER_LOGIN
from steward.services.heartbeat import Outcome
from steward.services.replies import Replies
from steward.services.resync import Resync
from steward.services.webhooks import WebhookReceiver
from steward.wiring import Services

from tests.support.documents import document, numbered
from tests.support.git_push import push_branch
from tests.support.github_payloads import T0, delivery, installation_payload
from tests.support.loop import Loop, build_loop
from tests.support.plans import spawn_item

REPO = "octo/demo"
SECRET = "resync-test-secret"
PERIOD = timedelta(seconds=60)


@dataclass
class CountingGitHub:
    """The App, counting the calls resync makes and what GitHub answered."""

    app: GitHubApp
    answers: Counter[str] = field(default_factory=Counter)

    def read_installation(self, installation_id: int) -> InstallationRead:
        self.answers["installation"] += 1
        return self.app.read_installation(installation_id)

    def observe_pull(
        self, installation_id: int, repo: str, branch: str, *, etag: str | None = None
    ) -> PullObservation:
        seen = self.app.observe_pull(installation_id, repo, branch, etag=etag)
        self.answers["304" if not seen.changed else "200"] += 1
        return seen

    def _conditional(self, what: str, read: ConditionalRead) -> ConditionalRead:
        self.answers[what + (" 304" if not read.changed else " 200")] += 1
        return read

    def check_runs(
        self, installation_id: int, repo: str, ref: str, *, etag: str | None = None, name: str | None = None
    ) -> ConditionalRead:
        return self._conditional(
            "checks", self.app.check_runs(installation_id, repo, ref, etag=etag, name=name)
        )

    def commit_statuses(
        self, installation_id: int, repo: str, ref: str, *, etag: str | None = None
    ) -> ConditionalRead:
        return self._conditional("statuses", self.app.commit_statuses(installation_id, repo, ref, etag=etag))

    def __getattr__(self, name: str) -> Any:
        # reviews, review_comments, issue_comments, pull_base: counted as one call each
        method = getattr(self.app, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.answers[name] += 1
            return method(*args, **kwargs)

        return counted

    @property
    def calls(self) -> int:
        return sum(self.answers.values())


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[GitHubTwin]:
    # A webhook URL that nothing serves: with deliveries withheld, none is ever sent to it.
    with GitHubTwin(tmp_path / "twin", webhook_url="http://127.0.0.1:9/webhook", webhook_secret="s") as twin:
        twin.create_repo(REPO, {"README.md": "# demo\n"})
        twin.withhold(True)  # every webhook is lost: only resync can tell the loop
        yield twin


@pytest.fixture
def github(twin: GitHubTwin) -> Iterator[CountingGitHub]:
    with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_attempts=1) as app:
        yield CountingGitHub(app)


@pytest.fixture
def installation(twin: GitHubTwin) -> int:
    return twin.create_installation("octo", [REPO])


@pytest.fixture
def loop(services: Services, installation: int, github: CountingGitHub) -> Loop:
    installations = InstallationStore(services.tables)
    installations.put(
        Installation(installation_id=installation, account="octo", repositories=(REPO,)), now=utcnow()
    )
    installations.link(installation, "alice", now=utcnow(), force=True)
    loop = build_loop(services)
    loop.heartbeat.resync = Resync(
        loop.tasks, installations, github=lambda: github, policy=ResyncPolicy(period=PERIOD, max_calls=20)
    )
    loop.heartbeat.replies = Replies(loop.tasks, installations, github=lambda: github.app)
    # many pull requests open at once: neither max_parallel nor max_open_prs holds any back
    loop.settings("alice", interval_seconds=1, max_parallel=100, daily_spawn_cap=200, max_open_prs=100)
    return loop


def confirmed(loop: Loop, *items: str, slug: str = "demo", max_attempts: int = 3) -> None:
    markdown = document(*items, repo=REPO).replace("checks:", f"max_attempts: {max_attempts}\nchecks:")
    loop.services.plans.publish("alice", slug, markdown)
    loop.services.plans.confirm("alice", slug)


def tick(loop: Loop, seconds: float = 2) -> Outcome:
    loop.clock.advance(seconds)
    return loop.heartbeat.tick("alice").outcome


def live(loop: Loop) -> list[Task]:
    return loop.tasks.live_for_user("alice")


def pull_request_opened(
    loop: Loop, github: CountingGitHub, installation: int, tmp_path: Path
) -> tuple[Task, int]:
    """One item's running task whose runtime pushed its branch and opened the pull request
    (and has not yet said so)."""
    confirmed(loop, "Change module 1")
    tick(loop)
    [task] = live(loop)
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(hours=1))
    push_branch(github.app, installation, REPO, tmp_path, task.branch)
    pull = github.app.open_pull(installation, REPO, head=task.branch, base="main", title=task.title, body="")
    return task, pull.number


def in_review(loop: Loop, task: Task, number: int, head_sha: str | None = None) -> Task:
    """The runtime records the pull request (and the head it pushed), as publication does."""
    extra: dict[str, Any] = {"pr_number": number} | ({"head_sha": head_sha} if head_sha else {})
    task, _ = loop.tasks.transition(task, TaskStatus.REVIEW, now=loop.clock(), event="finished", extra=extra)
    loop.tasks.project_item(task, now=loop.clock())
    return task


def test_a_merge_whose_webhook_was_lost_reaches_merged_through_resync_and_the_plan_completes(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    running, number = pull_request_opened(loop, github, installation, tmp_path)
    task = in_review(loop, running, number)
    twin.merge(REPO, number)
    assert twin.deliveries[-1].error == "withheld"  # the merge's webhook never came
    tick(loop)  # the move to review itself woke the loop
    assert tick(loop) is Outcome.NO_PROGRESS  # nothing told it of the merge, and the period has not passed
    assert github.calls == 0
    loop.clock.advance(PERIOD.total_seconds())
    tick(loop)  # due: the user's due_at was set to the next resync, so no shortcut starves it
    merged = loop.tasks.require(task.id)
    assert merged.status is TaskStatus.MERGED
    events = loop.services.tasks.events.list(task.id, after=0, limit=100)
    resynced = [e for e in events if e["type"] == "github_event"]
    assert [e["data"]["source"] for e in resynced] == ["resync"]
    assert resynced[0]["data"]["merged"] is True
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert plan.status is PlanStatus.COMPLETED
    assert [i.status for i in plan.items] == [ItemStatus.MERGED]


def test_a_retryable_failure_whose_pull_request_exists_is_revived_never_retried(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    task, number = pull_request_opened(loop, github, installation, tmp_path)
    # The runtime died after opening the pull request and before it said so: the reaper
    # fails the silent task as retryable.
    failed, _ = loop.tasks.transition(
        task, TaskStatus.FAILED, now=loop.clock(), event="reaped", classification="retryable", reason="silent"
    )
    loop.tasks.project_item(failed, now=loop.clock())
    tick(loop)
    revived = loop.tasks.require(task.id)
    assert revived.status is TaskStatus.REVIEW
    assert revived.pr_number == number
    assert [t.attempt for t in live(loop)] == [1]  # no second attempt, so no second pull request
    assert len(twin.pulls(REPO)) == 1
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert [i.status for i in plan.items] == [ItemStatus.REVIEW]


def test_a_retryable_failure_without_a_pull_request_is_retried(loop: Loop, github: CountingGitHub) -> None:
    confirmed(loop, "Change module 1")
    tick(loop)
    [task] = live(loop)
    now = loop.clock()
    task = loop.tasks.claim(task, runtime_id="r1", now=now, deadline=now + timedelta(hours=1))
    failed, _ = loop.tasks.transition(
        task, TaskStatus.FAILED, now=now, event="reaped", classification="retryable", reason="runtime silent"
    )
    loop.tasks.project_item(failed, now=now)
    tick(loop)
    assert [t.attempt for t in live(loop)] == [2]
    assert github.calls == 1  # asked once, before the retry


def test_resync_makes_at_most_its_bound_of_calls_per_tick_and_unchanged_answers_are_304(
    loop: Loop, github: CountingGitHub
) -> None:
    now = loop.clock()
    for slug in ("a", "b", "c", "d"):  # 100 tasks waiting in review, 25 a plan
        confirmed(loop, *numbered(25), slug=slug)
        plan = loop.services.plans.get("alice", slug)
        assert plan is not None
        for ordinal in range(1, 26):
            queued, _ = spawn_item(loop.services, plan, ordinal)
            running = loop.tasks.claim(queued, runtime_id="r", now=now, deadline=now + timedelta(hours=1))
            loop.tasks.transition(running, TaskStatus.REVIEW, now=now, event="finished")
    assert len([t for t in live(loop) if t.status is TaskStatus.REVIEW]) == 100
    loop.clock.advance(PERIOD.total_seconds())
    per_tick = []
    for _ in range(6):  # one pass over all 100: 20 a tick, oldest observation first, then none
        before = github.calls
        tick(loop)
        per_tick.append(github.calls - before)
    assert per_tick == [20, 20, 20, 20, 20, 0]
    assert github.answers == Counter({"200": 100})
    loop.clock.advance(PERIOD.total_seconds())
    tick(loop)  # the next period: nothing changed, so each answer is a 304
    assert github.answers == Counter({"200": 100, "304": 20})
    assert all(t.status is TaskStatus.REVIEW for t in live(loop))


def test_deliveries_stamped_alike_that_disagree_are_settled_by_reading_github(
    loop: Loop, twin: GitHubTwin, installation: int
) -> None:
    """A suspend and a report with one `updated_at` disagree; the loop's next working tick
    reads the installation from GitHub's API (which says: live) and stores that."""
    receiver = WebhookReceiver(
        secret=WebhookSecret(SECRET),
        deliveries=DeliveryStore(loop.services.tables),
        tasks=loop.tasks,
        installations=InstallationStore(loop.services.tables),
    )
    stamp = T0 + timedelta(days=1)
    for action, suspended in (("suspend", True), ("new_permissions_accepted", False)):
        item = delivery(
            "installation",
            installation_payload(action, installation_id=installation, at=stamp, suspended=suspended),
            secret=SECRET,
        )
        assert receiver.receive(item.body, item.headers).status in ("applied", "unchanged")
    stored = InstallationStore(loop.services.tables).get(installation)
    assert stored is not None
    assert (stored.suspended, stored.needs_refresh) == (True, True)  # the conservative guess, disputed
    confirmed(loop, "Change module 1")  # any working tick of the owner's loop
    tick(loop)
    refreshed = InstallationStore(loop.services.tables).get(installation)
    assert refreshed is not None
    assert (refreshed.suspended, refreshed.needs_refresh, refreshed.repositories) == (False, False, (REPO,))
    assert refreshed.owner_sub == "alice"
    # a redelivery of either disputed delivery changes nothing now
    again = delivery(
        "installation",
        installation_payload("suspend", installation_id=installation, at=stamp, suspended=True),
        secret=SECRET,
    )
    receiver.receive(again.body, again.headers)
    assert InstallationStore(loop.services.tables).get(installation) == refreshed


# ---- follow-up asks whose deliveries were lost


def reviewed(loop: Loop, github: CountingGitHub, installation: int, tmp_path: Path) -> tuple[Task, int]:
    """A task in review with its pull request open, the head Steward pushed recorded, and the
    period passed since (GitHub's deliveries are all withheld)."""
    running, number = pull_request_opened(loop, github, installation, tmp_path)
    head = github.app.pull_head(installation, REPO, number)
    assert head is not None
    task = in_review(loop, running, number, head_sha=head[1])
    tick(loop)  # the move to review woke the loop
    return task, number


def follow_ups(loop: Loop, task: Task) -> list[dict[str, Any]]:
    events = loop.services.tasks.events.list(task.id, after=0, limit=200)
    return [e for e in events if e["type"].startswith("follow_up")]


def resynced(loop: Loop) -> None:
    loop.clock.advance(PERIOD.total_seconds())
    tick(loop)


def test_a_review_whose_delivery_was_lost_starts_its_round_through_resync_with_its_inline_comments(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    task, number = reviewed(loop, github, installation, tmp_path)
    twin.review(
        REPO, number, body="Please say what it returns.", comments=[("README.md", 1, "Name the unit")]
    )
    assert twin.deliveries[-1].error == "withheld"
    resynced(loop)  # the ask is recorded and wakes the loop; the round starts on the next tick
    [asked] = [e for e in follow_ups(loop, task) if e["type"] == "follow_up_asked"]
    assert asked["data"]["found_by"] == "resync"
    assert asked["data"]["body"] == "Please say what it returns."
    assert [(c["path"], c["line"], c["body"]) for c in asked["data"]["comments"]] == [
        ("README.md", 1, "Name the unit")
    ]
    tick(loop)
    [round_task] = [t for t in live(loop) if t.parent == task.id]
    assert round_task.trigger is not None
    assert round_task.trigger["source"] == asked["data"]["source"]
    resynced(loop)  # the next period reads nothing new: the review is not asked again
    resynced(loop)
    assert [e["type"] for e in follow_ups(loop, task)] == ["follow_up_asked", "follow_up_started"]


def test_a_review_both_delivered_and_resynced_is_recorded_once(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    """A mention by a person who may not ask, sent and read again: one refusal, one reply."""
    task, number = reviewed(loop, github, installation, tmp_path)
    twin.comment(REPO, number, "@steward please rename it", login="drive-by")
    receiver = WebhookReceiver(
        secret=WebhookSecret(SECRET),
        deliveries=DeliveryStore(loop.services.tables),
        tasks=loop.tasks,
        installations=InstallationStore(loop.services.tables),
        pulls=lambda: github.app,
    )
    sent = twin.deliveries[-1]  # withheld: the test hands it to the receiver itself
    item = delivery(sent.event, json.loads(sent.body), delivery_id=sent.delivery_id, secret=SECRET)
    assert receiver.receive(item.body, item.headers).status == "applied"
    resynced(loop)
    resynced(loop)
    assert [(e["type"], e["data"].get("reason")) for e in follow_ups(loop, task)] == [
        ("follow_up_refused", "only collaborators of the repository can ask Steward for a change"),
        ("follow_up_replied", None),
    ]


def test_a_failing_check_is_found_by_resync_and_one_failing_on_the_base_too_is_refused_once(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    task, number = reviewed(loop, github, installation, tmp_path)
    twin.check(REPO, number, name="lint", conclusion="failure", output="E501 line too long")
    twin.check(REPO, number, name="lint", conclusion="failure", output="E501 line too long", ref="main")
    resynced(loop)
    [asked] = [e for e in follow_ups(loop, task) if e["type"] == "follow_up_asked"]
    assert (asked["data"]["check_name"], asked["data"]["fails_on_base"]) == ("lint", True)
    tick(loop)  # the loop refuses it (no round) and says so once on the pull request
    assert not [t for t in live(loop) if t.parent == task.id]
    resynced(loop)
    types = [(e["type"], e["data"].get("reason"), e["data"].get("kind")) for e in follow_ups(loop, task)]
    assert types == [
        ("follow_up_asked", None, "check"),
        ("follow_up_refused", "fails_on_base", None),
        ("follow_up_replied", None, "fails_on_base"),
    ]
    [reply] = [c for c in twin.comments(REPO, number) if "steward-reply" in c["body"]]
    assert "fails on its base branch too" in reply["body"]


def test_a_failing_check_only_on_the_pull_request_starts_a_round(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    task, number = reviewed(loop, github, installation, tmp_path)
    twin.check(REPO, number, name="tests", conclusion="success", ref="main")
    twin.check(REPO, number, name="tests", conclusion="failure", output="1 failed")
    twin.status(REPO, number, context="ci/legacy", state="error", description="build broke")
    resynced(loop)
    asked = [e["data"] for e in follow_ups(loop, task) if e["type"] == "follow_up_asked"]
    assert [(a["check_name"], a.get("fails_on_base", False)) for a in asked] == [("tests", False)]
    # the status failed on the same commit: one round per (head, kind), recorded once
    assert len(loop.tasks.require(task.id).follow_up_keys) == 1
    tick(loop)
    assert [t.round for t in live(loop) if t.parent == task.id] == [1]


def test_resync_of_pull_requests_in_review_with_nothing_new_costs_three_conditional_calls_each(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    """The figure's shape: a pull request in review with nothing new costs its listing, its
    head's check runs and its statuses, each a 304 from the second period on."""
    task, _ = reviewed(loop, github, installation, tmp_path)
    resynced(loop)
    github.answers.clear()
    resynced(loop)
    assert github.answers == Counter({"304": 1, "checks 304": 1, "statuses 304": 1})
    assert loop.tasks.require(task.id).status is TaskStatus.REVIEW


def test_a_person_with_write_access_but_no_association_may_ask(
    loop: Loop, twin: GitHubTwin, github: CountingGitHub, installation: int, tmp_path: Path
) -> None:
    """GitHub's `author_association` does not show write access through a team: the
    repository's permission for the author is asked (one call), never a bot's."""
    task, number = reviewed(loop, github, installation, tmp_path)
    twin.comment(REPO, number, "@steward please rename it", login=TEAM_WRITER_LOGIN)
    resynced(loop)
    [asked] = [e["data"] for e in follow_ups(loop, task) if e["type"] == "follow_up_asked"]
    assert (asked["author"], asked["author_association"]) == (TEAM_WRITER_LOGIN, "CONTRIBUTOR")
    assert github.answers["can_write"] == 1
