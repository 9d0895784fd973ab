"""Withdrawing a task in review: a person's cancel closes the task (reason `withdrawn`) in one
conditional write, and the loop closes Steward's own pull request on GitHub with one comment.

Real stores on moto, the heartbeat with its Fargate launcher on the ECS fake, the GitHub
twin with its deliveries withheld (each is handed to the webhook receiver by the test, so a
test says when GitHub's word arrives), and the real webhook receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from steward.adapters.delivery_store import DeliveryStore
from steward.adapters.dynamo import count_requests
from steward.adapters.github import GitHubApp, PullRef, PullState
from steward.adapters.installation_store import InstallationStore
from steward.adapters.liveness import LivenessIndex
from steward.domain.errors import LifecycleError
from steward.domain.installations import Installation
from steward.domain.models import ItemStatus, PlanStatus, Task, TaskStatus, utcnow
from steward.domain.resync import ResyncPolicy
from steward.domain.tasks import SpawnRefused, task_for
from steward.domain.webhooks import WebhookSecret
from steward.local.github_twin import Delivery, GitHubTwin
from steward.local.github_twin.webhooks import signature_256
from steward.services.heartbeat import Outcome
from steward.services.resync import Resync
from steward.services.webhooks import WebhookReceiver
from steward.services.withdrawal import Withdrawals

from tests.support.documents import numbered
from tests.support.loop import Loop, build_loop, open_reviews

REPO = "octo/demo"
SECRET = "withdrawal-test-secret"


class Crash(Exception):
    """The heartbeat's process dies here (the Lambda times out, the host goes away)."""


@dataclass
class FaultyGitHub:
    """The App, with a crash switched on before or after one of its calls."""

    app: GitHubApp
    crash_before: set[str] = field(default_factory=set)  # once each
    calls: list[str] = field(default_factory=list)

    def _hit(self, name: str) -> None:
        self.calls.append(name)
        if name in self.crash_before:
            self.crash_before.discard(name)
            raise Crash(name)

    def find_pull(
        self, installation_id: int, repo: str, branch: str, state: PullState = "all"
    ) -> PullRef | None:
        self._hit("find_pull")
        return self.app.find_pull(installation_id, repo, branch, state)

    def find_comment(self, installation_id: int, repo: str, number: int, marker: str) -> int | None:
        self._hit("find_comment")
        return self.app.find_comment(installation_id, repo, number, marker)

    def comment(self, installation_id: int, repo: str, number: int, body: str) -> int:
        self._hit("comment")
        return self.app.comment(installation_id, repo, number, body)

    def close_pull(self, installation_id: int, repo: str, number: int) -> PullRef:
        self._hit("close_pull")
        return self.app.close_pull(installation_id, repo, number)


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[GitHubTwin]:
    with GitHubTwin(
        tmp_path / "twin", webhook_url="http://127.0.0.1:9/webhook", webhook_secret=SECRET
    ) as twin:
        twin.create_repo(REPO, {"README.md": "# demo\n"})
        twin.withhold(True)  # the test hands each delivery to the receiver itself
        yield twin


@pytest.fixture
def app(twin: GitHubTwin) -> Iterator[GitHubApp]:
    with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url, max_attempts=1) as app:
        yield app


@pytest.fixture
def github(app: GitHubApp) -> FaultyGitHub:
    return FaultyGitHub(app)


@pytest.fixture
def installation(twin: GitHubTwin) -> int:
    return twin.create_installation("octo", [REPO])


@pytest.fixture
def loop(services: Any, installation: int, github: FaultyGitHub, app: GitHubApp) -> Loop:
    installations = InstallationStore(services.tables)
    installations.put(
        Installation(installation_id=installation, account="octo", repositories=(REPO,)), now=utcnow()
    )
    installations.link(installation, "alice", now=utcnow(), force=True)
    loop = build_loop(services)
    loop.heartbeat.resync = Resync(
        loop.tasks, installations, github=lambda: app, policy=ResyncPolicy(period=timedelta(hours=1))
    )
    loop.heartbeat.withdrawals = Withdrawals(loop.tasks, installations, github=lambda: github)
    # many pull requests open at once: neither max_parallel nor max_open_prs holds any back
    loop.settings("alice", interval_seconds=1, max_parallel=100, daily_spawn_cap=200, max_open_prs=100)
    return loop


@pytest.fixture
def receiver(loop: Loop) -> WebhookReceiver:
    return WebhookReceiver(
        secret=WebhookSecret(SECRET),
        deliveries=DeliveryStore(loop.services.tables),
        tasks=loop.tasks,
        installations=InstallationStore(loop.services.tables),
        clock=loop.clock,
    )


def tick(loop: Loop, seconds: float = 2) -> Outcome:
    loop.clock.advance(seconds)
    return loop.heartbeat.tick("alice").outcome


def send(receiver: WebhookReceiver, delivery: Delivery) -> str:
    """Hand a delivery the twin withheld to the receiver, as hookshot would send it."""
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": delivery.event,
        "X-GitHub-Delivery": delivery.delivery_id,
        "X-Hub-Signature-256": signature_256(SECRET, delivery.body),
    }
    return receiver.receive(delivery.body, headers).status


def in_review(loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, *titles: str) -> list[Task]:
    return open_reviews(loop, twin, app, installation, titles, repo=REPO)


def event_types(loop: Loop, task_id: str) -> list[str]:
    return [e["type"] for e in loop.services.tasks.events.list(task_id, after=0, limit=100)]


def bodies(twin: GitHubTwin, task: Task) -> list[str]:
    return [c["body"] for c in twin.comments(REPO, task.pr_number or 0)]


def pull_state(twin: GitHubTwin, task: Task) -> tuple[str, bool]:
    pull = twin.pull(REPO, task.pr_number or 0)
    return pull["state"], pull["merged"]


def test_cancel_in_review_withdraws_the_task_the_loop_closes_its_pull_request_with_one_comment(
    *,
    loop: Loop,
    twin: GitHubTwin,
    app: GitHubApp,
    installation: int,
    receiver: WebhookReceiver,
) -> None:
    [task, other] = in_review(loop, twin, app, installation, *numbered(2))
    withdrawn = loop.services.tasks.cancel("alice", task.id)
    assert (withdrawn.status, withdrawn.reason, withdrawn.classification) == (
        TaskStatus.CLOSED,
        "withdrawn",
        "final",
    )
    assert withdrawn.pr_close_pending
    assert withdrawn == loop.tasks.require(task.id)
    assert event_types(loop, task.id)[-1] == "withdrawn"
    [event] = [
        e for e in loop.services.tasks.events.list(task.id, after=0, limit=100) if e["type"] == "withdrawn"
    ]
    assert event["data"] == {"status": "closed", "by": "alice", "number": task.pr_number, "url": task.pr_url}
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert [i.status for i in plan.items] == [ItemStatus.CLOSED, ItemStatus.REVIEW]
    assert loop.services.tasks.cancel("alice", task.id) == withdrawn  # a repeated cancel is a no-op
    assert pull_state(twin, task) == ("open", False)  # the API touches no GitHub

    assert tick(loop) is Outcome.WORKED
    assert pull_state(twin, task) == ("closed", False)
    assert bodies(twin, task) == [
        "Withdrawn by `alice` through Steward: the task was cancelled while in review.\n\n"
        f"<!-- steward:withdrawn {task.id} -->"
    ]
    closed = loop.tasks.require(task.id)
    assert not closed.pr_close_pending
    assert closed.id not in {t.id for t in loop.tasks.live_for_user("alice")}
    assert event_types(loop, task.id)[-2:] == ["withdrawn", "pr_closed"]
    assert loop.services.tasks.events.list(task.id, after=0, limit=100)[-1]["data"] == {
        "number": task.pr_number,
        "url": task.pr_url,
        "commented": True,
    }
    assert pull_state(twin, other) == ("open", False)  # never another pull request
    assert bodies(twin, other) == []

    # GitHub's `closed` delivery for the loop's own close, twice: nothing changes
    closing = [d for d in twin.deliveries if d.action == "closed"]
    assert len(closing) == 1
    assert [send(receiver, closing[0]), send(receiver, closing[0])] == ["unchanged", "unchanged"]
    assert loop.tasks.require(task.id) == closed

    tick(loop)
    assert pull_state(twin, task) == ("closed", False)
    assert len(bodies(twin, task)) == 1
    # the other item merges; the plan completes with one item closed and one merged
    twin.merge(REPO, other.pr_number or 0)
    assert send(receiver, twin.deliveries[-1]) == "applied"
    tick(loop)
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert plan.status is PlanStatus.COMPLETED
    assert [i.status for i in plan.items] == [ItemStatus.CLOSED, ItemStatus.MERGED]
    assert "alice" not in set(LivenessIndex(loop.services.tables).all_live_users())


@pytest.mark.parametrize("crash", ["close_pull", "finish"])
def test_a_crash_between_the_comment_and_the_close_or_the_clear_still_ends_with_one_comment(
    *,
    loop: Loop,
    twin: GitHubTwin,
    app: GitHubApp,
    github: FaultyGitHub,
    installation: int,
    monkeypatch: pytest.MonkeyPatch,
    crash: str,
) -> None:
    [task] = in_review(loop, twin, app, installation, "Change module 1")
    loop.services.tasks.cancel("alice", task.id)
    if crash == "close_pull":
        github.crash_before.add("close_pull")  # the comment is written, the close never is
    else:
        finish = loop.tasks.finish_withdrawal

        def crash_once(*args: Any, **kwargs: Any) -> bool:
            monkeypatch.setattr(loop.tasks, "finish_withdrawal", finish)
            raise Crash("finish_withdrawal")  # closed on GitHub, the mark never cleared

        monkeypatch.setattr(loop.tasks, "finish_withdrawal", crash_once)
    assert tick(loop) is Outcome.PARTIAL
    assert len(bodies(twin, task)) == 1
    assert pull_state(twin, task) == ("open" if crash == "close_pull" else "closed", False)
    assert loop.tasks.require(task.id).pr_close_pending  # the work is still owed
    github.calls.clear()
    assert tick(loop) is Outcome.WORKED  # the partial tick left its watermark unprocessed
    assert len(bodies(twin, task)) == 1  # found by its marker, not written again
    assert pull_state(twin, task) == ("closed", False)
    assert not loop.tasks.require(task.id).pr_close_pending
    expected = ["find_pull", "find_comment", "close_pull"] if crash == "close_pull" else ["find_pull"]
    assert github.calls == expected
    tick(loop)
    assert len(bodies(twin, task)) == 1
    assert len(github.calls) == len(expected)  # nothing more to do


def test_a_person_who_merges_after_the_withdrawal_merges_it_and_nothing_is_closed(
    *,
    loop: Loop,
    twin: GitHubTwin,
    app: GitHubApp,
    installation: int,
    receiver: WebhookReceiver,
) -> None:
    [first, second] = in_review(loop, twin, app, installation, *numbered(2))
    for task in (first, second):
        loop.services.tasks.cancel("alice", task.id)
        twin.merge(REPO, task.pr_number or 0)  # a human merged anyway
    # the first one's webhook comes before the loop: closed -> merged, as the lifecycle allows
    assert send(receiver, twin.deliveries[-2]) == "applied"
    merged = loop.tasks.require(first.id)
    assert (merged.status, merged.pr_close_pending) == (TaskStatus.MERGED, False)
    # the second one's is lost: the loop finds the merge when it goes to close the pull request
    tick(loop)
    found = loop.tasks.require(second.id)
    assert (found.status, found.pr_close_pending) == (TaskStatus.MERGED, False)
    assert event_types(loop, second.id)[-2:] == ["withdrawn", "github_event"]
    assert [pull_state(twin, t) for t in (first, second)] == [("closed", True)] * 2
    assert bodies(twin, first) == bodies(twin, second) == []
    assert send(receiver, twin.deliveries[-1]) == "unchanged"
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert [i.status for i in plan.items] == [ItemStatus.MERGED, ItemStatus.MERGED]
    assert plan.status is PlanStatus.COMPLETED


def test_a_merge_webhook_and_a_withdrawal_racing_end_in_one_outcome(
    *,
    loop: Loop,
    twin: GitHubTwin,
    app: GitHubApp,
    installation: int,
    receiver: WebhookReceiver,
) -> None:
    """The reviewer merged on GitHub while the person cancelled: the merge's webhook and the
    withdrawal race in Steward, on real threads. Whichever writes first, the task ends merged
    with one `github_event`; the withdrawal either was refused with a 409 saying the pull
    request was merged (the merge came first) or was recorded before it (a human merged
    anyway); no comment is written and no close is attempted on a merged pull request."""
    tasks = in_review(loop, twin, app, installation, *numbered(6))
    outcomes = []
    for task in tasks:
        twin.merge(REPO, task.pr_number or 0)
        delivery = twin.deliveries[-1]
        start = threading.Barrier(2)
        results: dict[str, Any] = {}

        def webhook(
            delivery: Delivery = delivery, start: threading.Barrier = start, results: dict[str, Any] = results
        ) -> None:
            start.wait()
            results["webhook"] = send(receiver, delivery)

        def cancel(
            task: Task = task, start: threading.Barrier = start, results: dict[str, Any] = results
        ) -> None:
            start.wait()
            try:
                results["cancel"] = loop.services.tasks.cancel("alice", task.id)
            except LifecycleError as exc:
                results["cancel"] = exc

        threads = [threading.Thread(target=webhook), threading.Thread(target=cancel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert results["webhook"] == "applied"
        final = loop.tasks.require(task.id)
        assert (final.status, final.pr_close_pending) == (TaskStatus.MERGED, False)
        types = event_types(loop, task.id)
        assert types.count("github_event") == 1
        if isinstance(results["cancel"], LifecycleError):
            assert results["cancel"].status == 409
            assert "merged" in results["cancel"].message
            assert "withdrawn" not in types
            outcomes.append("refused")
        else:
            assert results["cancel"].status is TaskStatus.CLOSED
            assert types[-2:] == ["withdrawn", "github_event"]
            outcomes.append("withdrawn, then merged")
    tick(loop)
    tick(loop)
    assert all(pull_state(twin, t) == ("closed", True) and bodies(twin, t) == [] for t in tasks)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert plan.status is PlanStatus.COMPLETED
    assert {i.status for i in plan.items} == {ItemStatus.MERGED}
    assert len(outcomes) == len(tasks)


def test_cancelling_a_merged_or_github_closed_task_is_a_409_that_says_why(
    *,
    loop: Loop,
    twin: GitHubTwin,
    app: GitHubApp,
    installation: int,
    receiver: WebhookReceiver,
) -> None:
    [merged, closed] = in_review(loop, twin, app, installation, *numbered(2))
    twin.merge(REPO, merged.pr_number or 0)
    twin.close(REPO, closed.pr_number or 0)
    for delivery in twin.deliveries[-2:]:
        assert send(receiver, delivery) == "applied"
    for task, says in ((merged, "merged"), (closed, "closed on GitHub")):
        with pytest.raises(LifecycleError, match=says) as refused:
            loop.services.tasks.cancel("alice", task.id)
        assert refused.value.status == 409
        assert refused.value.code == "lifecycle"
        assert not loop.tasks.require(task.id).pr_close_pending
    assert bodies(twin, merged) == bodies(twin, closed) == []


def test_a_retry_of_a_withdrawn_task_spawns_only_once_its_pull_request_is_closed(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int
) -> None:
    [task] = in_review(loop, twin, app, installation, "Change module 1")
    loop.services.tasks.cancel("alice", task.id)
    loop.services.tasks.retry("alice", task.id)  # the person asks again at once
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    item = plan.items[0]
    with pytest.raises(SpawnRefused, match="withdrawn pull request is not closed yet"):
        loop.tasks.spawn(
            task_for(plan, item, attempt=2, now=loop.clock()), previous_task_id=task.id, now=loop.clock()
        )
    tick(loop)  # closes the pull request; the retry waits for it
    assert pull_state(twin, task) == ("closed", False)
    assert [t.attempt for t in loop.tasks.live_for_user("alice")] == []
    tick(loop)
    [retried] = loop.tasks.live_for_user("alice")
    assert (retried.attempt, retried.status) == (2, TaskStatus.QUEUED)
    assert retried.branch != task.branch  # its own branch, and later its own pull request


def test_a_cancel_repeated_after_a_retry_changes_nothing_and_the_retry_still_spawns(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int
) -> None:
    """Withdraw, retry (acknowledged: the item is pending), cancel again (the documented
    no-op): the repeated cancel must not put `closed` back on the item, which would lose the
    acknowledged retry for good (no attempt ever spawned, the plan completed)."""
    [task] = in_review(loop, twin, app, installation, "Change module 1")
    withdrawn = loop.services.tasks.cancel("alice", task.id)
    loop.services.tasks.retry("alice", task.id)
    seq = loop.tasks.require(task.id).event_seq
    assert loop.services.tasks.cancel("alice", task.id) == withdrawn  # 200, a no-op
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert (plan.items[0].status, plan.items[0].retry_requested) == (ItemStatus.PENDING, True)
    assert loop.tasks.require(task.id).event_seq == seq  # no event either
    for _ in range(3):
        tick(loop)
    [retried] = loop.tasks.live_for_user("alice")
    assert (retried.attempt, retried.status) == (2, TaskStatus.QUEUED)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert (plan.status, plan.items[0].status) == (PlanStatus.IN_PROGRESS, ItemStatus.RUNNING)


# ---- a person reopens a pull request Steward opened


def open_pulls(twin: GitHubTwin) -> list[int]:
    return [p["number"] for p in twin.pull_states(REPO) if p["state"] == "open"]


def test_a_retry_after_a_lost_reopen_returns_the_task_to_review_and_opens_no_second_pull_request(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, receiver: WebhookReceiver
) -> None:
    [task] = in_review(loop, twin, app, installation, "Change module 1")
    twin.close(REPO, task.pr_number or 0)
    assert send(receiver, twin.deliveries[-1]) == "applied"
    twin.reopen(REPO, task.pr_number or 0)  # as GitHub does; its `reopened` delivery is lost
    lost = twin.deliveries[-1]
    assert lost.action == "reopened"
    loop.services.tasks.retry("alice", task.id)  # the task is closed as far as Steward knows: 202

    tick(loop)  # the retry's spawn asks GitHub about the previous attempt's pull request first
    assert loop.tasks.require(task.id).status is TaskStatus.REVIEW
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert plan.items[0].status is ItemStatus.REVIEW
    assert [t.id for t in loop.tasks.live_for_user("alice")] == [task.id]  # no attempt 2
    tick(loop)
    assert open_pulls(twin) == [task.pr_number]  # never a second pull request
    assert send(receiver, lost) == "unchanged"  # the delivery, late: already in review

    # a retry now is refused, naming the open pull request (one per item revision)
    with pytest.raises(LifecycleError, match=f"#{task.pr_number} is open") as refused:
        loop.services.tasks.retry("alice", task.id)
    assert refused.value.status == 409


def test_resync_finds_a_reopen_and_a_merge_whose_deliveries_were_lost(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, receiver: WebhookReceiver
) -> None:
    [task, other] = in_review(loop, twin, app, installation, *numbered(2))
    twin.close(REPO, task.pr_number or 0)
    assert send(receiver, twin.deliveries[-1]) == "applied"
    twin.merge(REPO, other.pr_number or 0)
    assert send(receiver, twin.deliveries[-1]) == "applied"
    tick(loop)
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert (plan.status, [i.status for i in plan.items]) == (
        PlanStatus.COMPLETED,
        [ItemStatus.CLOSED, ItemStatus.MERGED],
    )
    # a person closed it lately: the loop keeps the user scheduled to look again
    assert "alice" in set(LivenessIndex(loop.services.tables).all_live_users())

    twin.reopen(REPO, task.pr_number or 0)
    twin.merge(REPO, task.pr_number or 0)  # both deliveries lost
    tick(loop, seconds=2 * 3600)  # past the resync period
    merged = loop.tasks.require(task.id)
    assert merged.status is TaskStatus.MERGED
    assert event_types(loop, task.id)[-1] == "github_event"
    tick(loop)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert [i.status for i in plan.items] == [ItemStatus.MERGED, ItemStatus.MERGED]
    tick(loop)
    assert "alice" not in set(LivenessIndex(loop.services.tables).all_live_users())


def test_the_closed_tasks_resync_watches_are_read_in_one_request_per_tick(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, receiver: WebhookReceiver
) -> None:
    tasks = in_review(loop, twin, app, installation, *numbered(3))
    for task in tasks:
        twin.close(REPO, task.pr_number or 0)
        assert send(receiver, twin.deliveries[-1]) == "applied"
    tick(loop)
    resync = loop.heartbeat.resync
    assert resync is not None
    plans = [p for p in [loop.services.plans.get("alice", "demo")] if p is not None]
    with count_requests(loop.services.tables) as requests:
        watched = resync.recently_closed(plans, now=loop.clock())
    assert sorted(t.id for t in watched) == sorted(t.id for t in tasks)
    assert dict(requests) == {"BatchGetItem": 1}  # never a GetItem per closed item, every tick


def test_a_withdrawn_task_stays_closed_when_its_pull_request_is_reopened_and_the_loop_closes_it_again(
    loop: Loop, twin: GitHubTwin, app: GitHubApp, installation: int, receiver: WebhookReceiver
) -> None:
    [task] = in_review(loop, twin, app, installation, "Change module 1")
    loop.services.tasks.cancel("alice", task.id)
    tick(loop)
    assert pull_state(twin, task) == ("closed", False)
    assert send(receiver, twin.deliveries[-1]) == "unchanged"  # the loop's own close

    twin.reopen(REPO, task.pr_number or 0)
    assert send(receiver, twin.deliveries[-1]) == "applied"
    reopened = loop.tasks.require(task.id)
    assert (reopened.status, reopened.reason, reopened.pr_close_pending) == (
        TaskStatus.CLOSED,
        "withdrawn",
        True,
    )
    tick(loop)
    assert pull_state(twin, task) == ("closed", False)  # the withdrawal stands
    assert len(bodies(twin, task)) == 1  # and says so once
    closed = loop.tasks.require(task.id)
    assert (closed.status, closed.pr_close_pending) == (TaskStatus.CLOSED, False)
    plan = loop.services.plans.get("alice", "demo")
    assert plan is not None
    assert plan.items[0].status is ItemStatus.CLOSED
