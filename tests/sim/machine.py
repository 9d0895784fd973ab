"""The control plane as a Hypothesis state machine: people, the loop, runtimes, GitHub and
faults interleave in the order the rules are drawn, and the invariants of
`tests.sim.invariants` hold after every step; at the end, with the faults stopped, a bounded
number of ticks brings every confirmed plan to a terminal state (`converge`).

Every rule is one thing that happens in production: a request of the person (through the
API's services), a scheduler run or a heartbeat (one Lambda invocation each), one stage of
one runtime (over the real runtime routes and relay), one webhook delivery, a reviewer's
merge, a reaper sweep, time passing. A rule that an injected fault broke ends as its Lambda
invocation would (an error answer, a retry later); a rule that fails without a fault having
fired is a bug and fails the schedule.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from steward.adapters.github import GitHubError
from steward.adapters.liveness import LivenessIndex
from steward.adapters.runtime_api import BudgetExhausted, RuntimeApiError
from steward.domain.documents import parse_document
from steward.domain.errors import StewardError
from steward.domain.loop import LoopSettings, LoopSettingsUpdate
from steward.domain.models import TaskStatus

from tests.sim import invariants
from tests.sim.faults import DYNAMO_FAULTS
from tests.sim.world import BUDGET, COMPONENTS, MODEL, USER, Run, Runtime, World

TITLES = (
    "Add a greeting",
    "Fix the parser",
    "Write the docs",
    "Speed up start",
    "Log the errors",
    "Trim the deps",
)
CHECKS = ("pytest -q", "ruff check .")
SLUGS = ("p1", "p2")
# A plan's shape: no order, `order: sequential`, or `(after #n)` on later items (drawn per
# item: 0 none, 1 and 2 an item above, 3 every item above).
LAYOUTS = ("flat", "flat", "sequential", "after", "after")
LINKS = st.lists(st.integers(0, 3), min_size=3, max_size=3)
# Where each item works: "" the plan's repository, "b" the second one (`repo:` in its details).
PLACES = st.lists(st.sampled_from(("", "", "b")), min_size=3, max_size=3)
# Now and then a document the publish must refuse: an item that waits for itself, or one in
# a repository no installation of the user holds (422 either way; a refusal is an answer).
FLAWS = ("",) * 10 + ("self_ref", "unheld")
# What may happen at each stage of a runtime, drawn when the runtime reaches it ("ok" first:
# it is what shrinking goes to).
STAGE_OUTCOMES = {
    "exchange": ("ok",) * 6 + ("crash",),
    "claim": ("ok",) * 6 + ("crash",),
    "token": ("ok",) * 6 + ("crash",),
    "model": ("ok", "ok", "ok", "over_report", "concurrent", "provider_error", "provider_unknown", "crash"),
    "checks": ("ok", "ok", "ok", "fail_checks", "hostile", "crash"),
    "push": ("ok", "ok", "lose_stream", "crash"),
    "pr": ("ok", "ok", "ok", "pr_response_lost", "crash"),
    "finish": ("ok",) * 6 + ("crash",),
}
INTERLEAVED = (
    "heartbeat_b",
    "deliver_next",
    "cancel_live",
    "retry_failed",
    "reap",
    "confirm_awaiting",
    "edit_first",
    "review_first",
    "ask_first",
)
TWIN_FAULTS = ("server_errors", "secondary_rate_limit")
# Every kind the CI profile must fire at least once (else the suite fails).
ASKS = ("review", "mention", "check", "stranger", "push")
FAULT_KINDS = (
    *DYNAMO_FAULTS,
    *(f"interleave:{a}" for a in INTERLEAVED),
    *(f"twin:{f}" for f in TWIN_FAULTS),
    "twin:drop_response_after_pr_create",
    "ecs_throttle",
    "runtime_crash",
    "stream_lost_after_push",
    "provider_error",
    "provider_outcome_unknown",
    "relay_over_report",
    "relay_concurrent",
    "webhook_duplicated",
    "webhook_reordered",
    "webhook_withheld",
    "ask",  # any of ASKS on an open pull request (each is also counted as ask:<kind>)
    "round_answered",  # a follow-up round's runtime finished with its commit on the pull request
    "clock_skew",
    "stale_confirm",
    "order_kept",  # a task spawned for an item that waited for others (`Checker._order_kept`)
    "order_blocked",  # an item waited for one that ended unmerged: the person retried that one
    "second_repo",  # a task in the second repository (an item's `repo:`)
)
EXPECTED_ERRORS = (ClientError, BotoCoreError, GitHubError, RuntimeApiError)


@dataclass(frozen=True)
class Item:
    """One checkbox as the person writes it."""

    title: str
    checked: bool = False
    after: tuple[int, ...] = ()  # the ordinals its `(after #n)` names (kept valid: see `refs`)
    repo: str = ""  # "" the plan's repository; "b" the second one, "x" one nobody holds


def refs(items: list[Item], ordinal: int) -> tuple[int, ...]:
    """The references item `ordinal` is written with: those naming an item above it (never
    itself, never beyond the list; with `order: sequential` as well, no cycle either)."""
    return tuple(sorted({n for n in items[ordinal - 1].after if 1 <= n < ordinal}))


def waits_for(items: list[Item], *, sequential: bool) -> dict[int, tuple[int, ...]]:
    """ordinal -> the ordinals of the items it waits for, as the person wrote them."""
    return {
        n: tuple(sorted({*refs(items, n), *((n - 1,) if sequential and n > 1 else ())}))
        for n in range(1, len(items) + 1)
    }


def document(
    items: list[Item],
    max_attempts: int,
    repos: Mapping[str, str],
    *,
    sequential: bool = False,
    flaw: str = "",
) -> str:
    lines = [
        "---",
        f"repo: {repos['']}",
        f"model: {MODEL}",
        f'budget_usd: "{BUDGET}"',
        f"max_attempts: {max_attempts}",
        *(["order: sequential"] if sequential else []),
        "checks:",
    ]
    lines += [f"  - {c}" for c in CHECKS] + ["---", "# Simulated plan", ""]
    for n, item in enumerate(items, 1):
        last = n == len(items)
        after = (*refs(items, n), *((n,) if flaw == "self_ref" and last else ()))
        suffix = f" (after {', '.join(f'#{r}' for r in after)})" if after else ""
        lines.append(f"- [{'x' if item.checked else ' '}] {item.title}{suffix}")
        repo = "x" if flaw == "unheld" and last else item.repo
        if repo:
            lines.append(f"  repo: {repos[repo]}")
    return "\n".join(lines) + "\n"


def shaped(titles: list[str], layout: str, links: list[int], places: list[str]) -> tuple[list[Item], bool]:
    """The items of a new document of `layout` (see LAYOUTS), and whether it is sequential."""
    items = []
    for n, title in enumerate(titles, 1):
        link = links[(n - 1) % len(links)] if links else 0
        after: tuple[int, ...] = ()
        if layout == "after" and n > 1 and link:
            after = tuple(range(1, n)) if link == 3 else ((link - 1) % (n - 1) + 1,)
        items.append(Item(title, after=after, repo=places[(n - 1) % len(places)] if places else ""))
    return items, layout == "sequential"


def retitled(item: Item, mark: str) -> Item:
    """The item with ` <mark>` added to its title, or taken off again."""
    title = item.title.removesuffix(f" {mark}") if item.title.endswith(mark) else f"{item.title} {mark}"
    return replace(item, title=title)


class ControlPlane(RuleBasedStateMachine):
    run: Run  # set by the test before the machine runs
    steps = 0
    schedules = 0

    def __init__(self) -> None:
        super().__init__()
        ControlPlane.schedules += 1
        self.w: World = self.run.new_world()
        self.docs: dict[str, list[Item]] = {}
        self.attempts: dict[str, int] = {}
        self.sequential: dict[str, bool] = {}
        self.hashes: dict[str, list[str]] = {}
        self.refusals: list[str] = []  # the answers that refused something, newest last
        self.failures: list[str] = []  # from rules that ran inside another (interleaved)
        # (slug, content hash) the person confirmed in another session (interleaved), newest last
        self.confirmed_elsewhere: list[tuple[str, str]] = []
        self.checker = invariants.Checker(self.w)
        self.twin_faults = self.w.twin.faults.snapshot()
        self.w.twin.faults.reset()

    # ---- running a rule as one invocation
    def _act(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` as one invocation: a domain refusal is an answer; an infrastructure error
        is expected only when a fault fired meanwhile."""
        before = sum(self.w.board.fired.values())
        twin_before = self.w.twin.faults.snapshot()
        ecs_before = self.w.ecs.throttles_armed
        try:
            return fn()
        except StewardError as exc:
            self.refusals.append(f"{type(exc).__name__}: {exc}")
            return None
        except EXPECTED_ERRORS as exc:
            if isinstance(exc, RuntimeApiError) and exc.status is not None and exc.status < 500:
                return None
            faulted = (
                sum(self.w.board.fired.values()) > before
                or self.w.twin.faults.snapshot() != twin_before
                or self.w.ecs.throttles_armed != ecs_before
            )
            if not faulted:
                raise
            return None
        finally:
            self._count_switches(twin_before, ecs_before)

    def _count_switches(self, twin_before: dict[str, int], ecs_before: int) -> None:
        after = self.w.twin.faults.snapshot()
        for name, count in twin_before.items():
            if after[name] < count:
                self.w.board.fired[f"twin:{name}"] += count - after[name]
        if self.w.ecs.throttles_armed < ecs_before:
            self.w.board.note("ecs_throttle")

    def _nested(self, name: str) -> Callable[[], None]:
        def action() -> None:
            try:
                self._act(getattr(self, f"_do_{name}"))
            except Exception as exc:  # reported after the outer rule, which it must not break
                self.failures.append(f"interleaved {name}: {type(exc).__name__}: {exc}")

        return action

    def _after_rule(self) -> None:
        ControlPlane.steps += 1
        self.w.clocks.advance(1)  # time passes between any two invocations
        self.w.adopt_launched()
        if self.failures:
            raise AssertionError("; ".join(self.failures))

    # ---- the person
    def _publish(self, slug: str, flaw: str = "") -> None:
        w, items, sequential = self.w, self.docs[slug], self.sequential.get(slug, False)
        repos = {"": w.repo, "b": w.repo_b, "x": w.unheld}
        markdown = document(items, self.attempts[slug], repos, sequential=sequential, flaw=flaw)
        if not flaw:  # what the person wrote, by the content hash it has once stored
            self.checker.documented(
                parse_document(markdown, w.plan_service.policy).content_hash,
                waits_for(items, sequential=sequential),
                {n: repos[item.repo] for n, item in enumerate(items, 1)},
            )
        plan = self._act(lambda: w.plan_service.publish(USER, slug, markdown))
        if plan is not None:
            assert not flaw, f"a document with {flaw} was published: {markdown}"
            self.hashes.setdefault(slug, []).append(plan.content_hash)

    def _new_document(
        self,
        slug: str,
        titles: list[str],
        max_attempts: int,
        *,
        layout: str,
        links: list[int],
        places: list[str],
    ) -> None:
        self.docs[slug], self.sequential[slug] = shaped(titles, layout, links, places)
        self.attempts[slug] = max_attempts

    @initialize(
        titles=st.lists(st.sampled_from(TITLES), min_size=1, max_size=2, unique=True),
        max_attempts=st.sampled_from((1, 2, 3)),
        layout=st.sampled_from(LAYOUTS),
        links=LINKS,
        places=PLACES,
        max_open_prs=st.sampled_from((5, 5, 5, 5, 2, 1)),
    )
    def first_plan(
        self,
        titles: list[str],
        max_attempts: int,
        *,
        layout: str = "flat",
        links: list[int] | None = None,
        places: list[str] | None = None,
        max_open_prs: int = 5,
    ) -> None:
        """Every schedule starts from a confirmed plan: the work the rules then disturb. The
        person may have set a low `max_open_prs` before (the end's ticks keep it)."""
        if max_open_prs != LoopSettings().max_open_prs:
            update = LoopSettingsUpdate(max_open_prs=max_open_prs)
            self.w.users.update_loop_settings(
                USER, update, now=self.w.clocks.of("api")(), clear_quiet_hours=False
            )
        self._new_document("p1", titles, max_attempts, layout=layout, links=links or [], places=places or [])
        self._publish("p1")
        assert "p1" in self.hashes, f"the first plan was refused: {self.refusals}"
        self._act(lambda: self.w.plan_service.confirm(USER, "p1", self.hashes["p1"][-1]))
        self._act(lambda: self.w.heartbeats["a"].tick(USER))  # the next tick spawns its work
        self._after_rule()

    @rule(
        slug=st.sampled_from(SLUGS),
        titles=st.lists(st.sampled_from(TITLES), min_size=1, max_size=3, unique=True),
        max_attempts=st.sampled_from((1, 2, 3)),
        layout=st.sampled_from(LAYOUTS),
        links=LINKS,
        places=PLACES,
        flaw=st.sampled_from(FLAWS),
    )
    def publish(
        self,
        slug: str,
        titles: list[str],
        max_attempts: int,
        *,
        layout: str = "flat",
        links: list[int] | None = None,
        places: list[str] | None = None,
        flaw: str = "",
    ) -> None:
        self._new_document(slug, titles, max_attempts, layout=layout, links=links or [], places=places or [])
        self._publish(slug, flaw)
        self._after_rule()

    @precondition(lambda self: bool(self.docs))
    @rule(
        pick=st.integers(0, 5),
        change=st.sampled_from(("edit", "insert", "delete", "check", "uncheck", "after", "repo", "order")),
    )
    def edit(self, pick: int, change: str) -> None:
        """A person's edit of one checkbox (its title, its place in the list, its mark, what it
        waits for, its repository) or of the plan's order. References follow the items they
        name, as a person renumbers them: inserting above #n makes it #n+1; deleting an item
        drops the references to it."""
        slug = sorted(self.docs)[pick % len(self.docs)]
        items = self.docs[slug]
        at = pick % len(items)
        item = items[at]
        if change == "edit":
            items[at] = retitled(item, "again")
        elif change == "insert":
            new = next((t for t in TITLES if t not in [i.title for i in items]), None)
            if new is not None:
                items[:] = [replace(i, after=tuple(r + (r > at) for r in i.after)) for i in items]
                items.insert(at, Item(new))
        elif change == "delete" and len(items) > 1:
            items.pop(at)
            gone = at + 1
            items[:] = [replace(i, after=tuple(r - (r > gone) for r in i.after if r != gone)) for i in items]
        elif change in ("check", "uncheck"):
            items[at] = replace(item, checked=change == "check")
        elif change == "after":  # wait for the item above, or no longer wait
            at = at or len(items) - 1
            items[at] = replace(items[at], after=() if items[at].after else (at,) if at else ())
        elif change == "repo":
            items[at] = replace(item, repo="" if item.repo else "b")
        elif change == "order":
            self.sequential[slug] = not self.sequential.get(slug, False)
        self._publish(slug)
        self._after_rule()

    @precondition(lambda self: bool(self.docs))
    @rule(pick=st.integers(0, 5))
    def submit(self, pick: int) -> None:
        slug = sorted(self.docs)[pick % len(self.docs)]
        self._act(lambda: self.w.plan_service.submit(USER, slug))
        self._after_rule()

    @precondition(lambda self: bool(self.hashes))
    @rule(pick=st.integers(0, 5), stale=st.booleans())
    def confirm(self, pick: int, stale: bool) -> None:
        """The person confirms the content they reviewed: the newest, or (`stale`) the first,
        after an edit in another session. A confirm approves exactly the content it names,
        if that is the content when its conditional write runs, or nothing (refused)."""
        slug = sorted(self.hashes)[pick % len(self.hashes)]
        hashes = self.hashes[slug]
        if stale and len(set(hashes)) == 1 and slug in self.docs:
            # The page a person reviewed, then an edit in another session: their confirm is stale.
            self.docs[slug][0] = retitled(self.docs[slug][0], "edited")
            self._publish(slug)
        digest = hashes[0] if stale else hashes[-1]
        if stale and digest != hashes[-1]:
            self.w.board.note("stale_confirm")
            before = self.w.plans.get(USER, slug)
            elsewhere = len(self.confirmed_elsewhere)
            answer = self._act(lambda: self.w.plan_service.confirm(USER, slug, digest))
            after = self.w.plans.get(USER, slug)
            # Interleaved rules run inside this one: a confirm of the current content in
            # another session (`confirm_awaiting`) may approve it meanwhile, and that is not
            # the stale confirm's approval. Neither is the reviewed content approved, should
            # it be the content again when the write runs (the confirm then rightly succeeds).
            may_approve = {before.approved_hash if before else None, digest}
            may_approve |= {h for s, h in self.confirmed_elsewhere[elsewhere:] if s == slug}
            assert after is None or after.approved_hash in may_approve, (
                "a confirmation of content no longer displayed approved the current content: "
                f"confirmed {digest[:12]}, approved {str(after.approved_hash)[:12]}"
            )
        else:
            answer = self._act(lambda: self.w.plan_service.confirm(USER, slug, digest))
        assert answer is None or answer.approved_hash == digest, (
            f"a confirm of {digest[:12]} approved other content: {str(answer.approved_hash)[:12]}"
        )
        self._after_rule()

    @precondition(lambda self: bool(self.docs))
    @rule(pick=st.integers(0, 5))
    def archive(self, pick: int) -> None:
        slug = sorted(self.docs)[pick % len(self.docs)]
        self._act(lambda: self.w.plan_service.archive(USER, slug))
        self._after_rule()

    def _task_rows(self, *statuses: str) -> list[dict[str, Any]]:
        rows = sorted(self.w.rows("tasks"), key=lambda r: (str(r["created_at"]), r["task_id"]))
        return [r for r in rows if not statuses or r["status"] in statuses]

    @rule(pick=st.integers(0, 7), action=st.sampled_from(("retry", "cancel")))
    def retry_or_cancel(self, pick: int, action: str) -> None:
        """A person's retry or cancel of a task; an acknowledged retry is owed an attempt
        (`Checker.lost_retries`, at the end)."""
        rows = self._task_rows()
        if rows:
            task_id = rows[pick % len(rows)]["task_id"]
            service = self.w.task_service
            if self._act(lambda: getattr(service, action)(USER, task_id)) is not None and action == "retry":
                self.checker.acknowledged_retry(task_id)
        self._after_rule()

    @rule(
        change=st.sampled_from(
            (
                "pause",
                "unpause",
                "quiet_now",
                "quiet_clear",
                "cap_0",
                "cap_1",
                "cap_20",
                "parallel_1",
                "parallel_3",
                "open_1",
                "open_2",
                "open_5",
            )
        )
    )
    def loop_settings(self, change: str) -> None:
        now = self.w.clocks.of("api")()
        values: dict[str, Any] = {
            "pause": {"paused": True},
            "unpause": {"paused": False},
            "quiet_now": {
                "quiet_hours": {"start": f"{now.hour:02d}:00", "end": f"{(now.hour + 1) % 24:02d}:00"}
            },
            "cap_0": {"daily_spawn_cap": 0},
            "cap_1": {"daily_spawn_cap": 1},
            "cap_20": {"daily_spawn_cap": 20},
            "parallel_1": {"max_parallel": 1},
            "parallel_3": {"max_parallel": 3},
            "open_1": {"max_open_prs": 1},
            "open_2": {"max_open_prs": 2},
            "open_5": {"max_open_prs": 5},
        }.get(change, {})
        update = LoopSettingsUpdate.model_validate(values)
        self._act(
            lambda: self.w.users.update_loop_settings(
                USER, update, now=now, clear_quiet_hours=change == "quiet_clear"
            )
        )
        self._after_rule()

    # ---- the loop
    @rule()
    def scheduler(self) -> None:
        users = self._act(lambda: list(LivenessIndex(self.w.tables).all_live_users())) or []
        for user in users:
            self._act(lambda user=user: self.w.heartbeats["a"].tick(user))
        self._after_rule()

    @rule(which=st.sampled_from(("a", "a", "b")))
    def heartbeat(self, which: str) -> None:
        self._act(lambda: self.w.heartbeats[which].tick(USER))
        self._after_rule()

    tick = heartbeat
    beat = heartbeat

    @rule()
    def reap(self) -> None:
        self._act(self._do_reap)
        self._after_rule()

    def _do_reap(self) -> None:
        now = self.w.clocks.of("reaper")()
        self.w.reaper.sweep(now)
        self.w.reaper.sweep_reservations(now)

    @rule(seconds=st.sampled_from((1, 5, 30, 61, 200, 900, 3600)))
    def advance(self, seconds: int) -> None:
        self.w.clocks.advance(seconds)
        self._after_rule()

    @rule(
        component=st.sampled_from(COMPONENTS),
        seconds=st.sampled_from((-5, -1, 1, 5)),
    )
    def skew(self, component: str, seconds: int) -> None:
        self.w.clocks.skew[component] = timedelta(seconds=seconds)
        self.w.board.note("clock_skew")
        self._after_rule()

    # ---- faults
    @rule(kind=st.sampled_from(DYNAMO_FAULTS), countdown=st.integers(0, 8))
    def arm_fault(self, kind: str, countdown: int) -> None:
        self.w.board.arm(kind, countdown)
        self._after_rule()

    @rule(action=st.sampled_from(INTERLEAVED), countdown=st.integers(0, 5))
    def arm_interleave(self, action: str, countdown: int) -> None:
        self.w.board.arm("interleave", countdown, self._nested(action), label=action)
        self._after_rule()

    meanwhile = arm_interleave
    interleave = arm_interleave  # nine actions to interleave: each needs its draws

    @rule(switch=st.sampled_from(TWIN_FAULTS))
    def twin_fault(self, switch: str) -> None:
        self.w.twin.faults.set(**{switch: 1})
        self._after_rule()

    github_fault = twin_fault

    @rule(kind=st.sampled_from(("ecs_throttle", "ecs_no_capacity")))
    def ecs_fault(self, kind: str) -> None:
        if kind == "ecs_throttle":
            self.w.ecs.throttle_next()
        else:
            self.w.ecs.fail_next_run()
            self.w.board.note("ecs_no_capacity")
        self._after_rule()

    # ---- runtimes
    @precondition(lambda self: any(r.alive for r in self.w.runtimes.values()))
    @rule(pick=st.integers(0, 7), stages=st.sampled_from((1, 3, 8, 8)), data=st.data())
    def runtime_step(self, pick: int, stages: int, data: st.DataObject) -> None:
        """One runtime goes through up to `stages` stages of the runner; what happens at each
        is drawn when it gets there."""
        alive = [r for r in self.w.runtimes.values() if r.alive]
        runtime = alive[pick % len(alive)]
        for _ in range(stages):
            if not runtime.alive:
                break
            outcome = data.draw(st.sampled_from(STAGE_OUTCOMES[runtime.stage]), label=runtime.stage)
            self._act(lambda outcome=outcome: self._step(runtime, outcome))
        self._after_rule()

    # The loop and the runtimes act far more often than a person does: more names, more draws.
    runtime_progress = runtime_step
    runtime_work = runtime_step
    runtime_more = runtime_step

    @precondition(lambda self: any(r.capability for r in self.w.runtimes.values()))
    @rule(pick=st.integers(0, 7))
    def runtime_beat(self, pick: int) -> None:
        held = [r for r in self.w.runtimes.values() if r.capability and r.alive]
        if held:
            runtime = held[pick % len(held)]
            beat = self._act(lambda: self.w.api.heartbeat(runtime.capability or "", runtime.runtime_id))
            if beat is not None and not beat.running:
                runtime.alive = False  # the runner stops once its task is no longer its to run
        self._after_rule()

    @precondition(lambda self: any(r.capability for r in self.w.runtimes.values()))
    @rule(pick=st.integers(0, 7))
    def zombie_call(self, pick: int) -> None:
        """A runtime whose task is no longer running (cancelled, superseded, failed, reaped)
        keeps calling: the relay and the token route refuse it."""
        held = [r for r in self.w.runtimes.values() if r.capability]
        runtime = held[pick % len(held)]
        status = self.checker.task_status(runtime.task_id)
        if status != TaskStatus.RUNNING.value:
            invariants.refused(self.w, runtime, status)
        self._after_rule()

    def _step(self, rt: Runtime, outcome: str) -> None:
        """One stage of the runner, as `steward.runner.run` orders them."""
        if outcome == "crash":
            rt.alive = False
            self.w.board.note("runtime_crash")
            return
        try:
            getattr(self, f"_stage_{rt.stage}")(rt, outcome)
        except RuntimeApiError as exc:
            if exc.status == 401:  # its capability expired: every later call is refused too
                rt.alive = False  # the runner ends (its task is the reaper's)
            raise

    def _stage_exchange(self, rt: Runtime, _outcome: str) -> None:
        try:
            exchanged = self.w.api.exchange(rt.ticket)
        except RuntimeApiError:
            rt.alive = False  # a ticket works once: a runtime that lost the answer cannot start
            raise
        rt.capability = exchanged.capability
        self.w.secrets.add(exchanged.capability)
        rt.stage = "claim"

    def _stage_claim(self, rt: Runtime, _outcome: str) -> None:
        try:
            self.w.api.claim(rt.capability or "", rt.runtime_id)
        except RuntimeApiError as exc:
            if exc.status == 409 or not exc.retryable:
                # another runtime holds it, it is no longer startable, or the capability is no
                # longer good (expired): the runner exits, as `steward.runner.main` does
                rt.alive = False
            raise
        rt.stage = "token"

    def _stage_token(self, rt: Runtime, _outcome: str) -> None:
        status = self.checker.task_status(rt.task_id)
        issued = self.w.api.github_token(rt.capability or "")
        assert status == TaskStatus.RUNNING.value, f"a GitHub token was issued to a task that is {status}"
        repo = self.w.task_repo(rt.task_id)
        assert issued.token.repository == repo, (
            f"task {rt.task_id[:12]} of {repo} was issued a GitHub token for {issued.token.repository}"
        )
        rt.token = issued.token.token
        rt.installation_id = issued.installation_id
        self.w.secrets.add(rt.token)
        rt.stage = "model"

    def _stage_push(self, rt: Runtime, outcome: str) -> None:
        w = self.w
        if not self._still_running(rt):
            return
        files = {f"change_{rt.task_id[-8:]}.py": f"# {rt.task_id}\n"}
        round_ = self.checker.is_round(rt.task_id)  # a follow-up round pushes on its pull request's head
        rt.head = w.twin.push(
            rt.token or "",
            w.task_repo(rt.task_id),
            self.checker.branch_of(rt.task_id),
            files,
            on_branch=round_,
        )
        self.checker.pushed[rt.task_id] = rt.head
        rt.stage = "pr"
        if outcome == "lose_stream":
            rt.alive = False
            w.board.note("stream_lost_after_push")

    def _stage_pr(self, rt: Runtime, outcome: str) -> None:
        w = self.w
        if not self._still_running(rt):
            return
        repo = w.task_repo(rt.task_id)
        with w.runtime_github(rt) as github:
            branch = self.checker.branch_of(rt.task_id)
            pull = github.find_pull(rt.installation_id or 0, repo, branch, state="all")
            if pull is None:
                if outcome == "pr_response_lost":  # created, and the answer never comes back
                    w.twin.faults.set(drop_response_after_pr_create=1)
                    w.board.note("twin:drop_response_after_pr_create")
                pull = github.open_pull(
                    rt.installation_id or 0,
                    repo,
                    head=branch,
                    base="main",
                    title="Simulated change",
                    body="",
                )
        rt.pull = pull
        rt.stage = "finish"

    def _stage_finish(self, rt: Runtime, _outcome: str) -> None:
        assert rt.pull is not None
        ending = {"status": "review", "pr_url": rt.pull.url, "pr_number": rt.pull.number, "summary": "done"}
        answer = self.w.api.finish(rt.capability or "", rt.runtime_id, ending)
        rt.stage, rt.alive = "done", False
        if self.checker.is_round(rt.task_id) and answer == TaskStatus.ANSWERED.value:
            self.w.board.note("round_answered")

    def _still_running(self, rt: Runtime) -> bool:
        """Publication's re-check before it pushes and before it opens a pull request."""
        beat = self.w.api.heartbeat(rt.capability or "", rt.runtime_id)
        if not beat.running:
            rt.alive = False
        return beat.running

    def _fail(self, rt: Runtime, classification: str, reason: str) -> None:
        ending = {"status": "failed", "classification": classification, "reason": reason}
        rt.stage, rt.alive = "done", False
        self.w.api.finish(rt.capability or "", rt.runtime_id, ending)

    def _stage_model(self, rt: Runtime, outcome: str) -> None:
        w = self.w
        status = self.checker.task_status(rt.task_id)
        request = {
            "messages": [{"role": "user", "content": [{"text": "Make the change."}]}],
            "inferenceConfig": {"maxTokens": 64},
        }
        if outcome == "over_report":
            w.provider.mode = "over_report"
            w.board.note("relay_over_report")
        elif outcome in ("provider_error", "provider_unknown"):
            w.provider.mode = "error" if outcome == "provider_error" else "unknown"
            w.board.note("provider_error" if outcome == "provider_error" else "provider_outcome_unknown")
        elif outcome == "concurrent":
            capability = rt.capability or ""

            def others() -> None:
                w.board.note("relay_concurrent")
                for _ in range(2):
                    with contextlib.suppress(StewardError):  # a refusal is an answer
                        w.relay.converse(f"Bearer {capability}", json.dumps(request))

            w.provider.during = others
        try:
            w.api.converse(rt.capability or "", request)
        except BudgetExhausted:
            self._fail(rt, "final", "the task's budget is spent")
            return
        assert status == TaskStatus.RUNNING.value, f"the relay admitted a call of a task that is {status}"
        rt.stage = "checks"  # the runner works on with the answer it got

    def _stage_checks(self, rt: Runtime, outcome: str) -> None:
        w = self.w
        secret = f" {rt.token} {rt.capability} {rt.ticket}" if outcome == "hostile" else ""
        failing = outcome == "fail_checks"
        for number, command in enumerate(CHECKS):
            code = 1 if failing and number == len(CHECKS) - 1 else 0
            w.api.event(
                rt.capability or "",
                rt.runtime_id,
                "check",
                {"command": command, "exit_code": code, "output": "ok" + secret},
            )
            if code == 0:
                self.checker.passed.setdefault(rt.task_id, set()).add(command)
        if failing:
            self._fail(rt, "final", "a required check failed" + secret)
            return
        rt.stage = "push"

    # ---- GitHub
    @rule(mode=st.sampled_from(("next", "any", "again", "drop")), pick=st.integers(0, 7))
    def deliver(self, mode: str, pick: int) -> None:
        self._act(lambda: self._deliver(mode, pick))
        self._after_rule()

    hookshot = deliver
    github_sends = deliver

    def _do_deliver_next(self) -> None:
        self._deliver("next", 0)

    def _deliver(self, mode: str, pick: int) -> None:
        w = self.w
        pending = w.pending_deliveries()
        if mode == "again":  # GitHub's redelivery: the same body and delivery id again
            sent = [*w.delivered, *sorted(w.dropped)]
            if not sent:
                return
            delivery = w.delivery(sent[pick % len(sent)])
            w.board.note("webhook_duplicated")
        elif not pending:
            return
        elif mode == "drop":
            w.dropped.add(pending[pick % len(pending)].delivery_id)
            w.board.note("webhook_withheld")
            return
        else:
            # "any": one made later than the oldest still pending, when there is one
            later = pending[1 + pick % (len(pending) - 1)] if len(pending) > 1 else pending[0]
            delivery = later if mode == "any" else pending[0]
            if delivery is not pending[0]:
                w.board.note("webhook_reordered")
        w.send(delivery)
        self.checker.after_acknowledged(delivery)

    @rule(pick=st.integers(0, 7), kind=st.sampled_from(ASKS))
    def ask(self, pick: int, kind: str) -> None:
        """A reviewer, CI or a person on an open pull request: a review requesting changes, a
        mention, a failing check on its head, a stranger's mention, a person's push."""
        self._act(lambda: self._ask(pick, kind))
        self._after_rule()

    def _ask(self, pick: int, kind: str) -> None:
        twin = self.w.twin
        open_pulls = [(repo, p) for repo, p in self.w.pulls() if p["state"] == "open"]
        if not open_pulls:
            return
        repo, pull = open_pulls[pick % len(open_pulls)]
        number = pull["number"]
        if kind == "review":
            twin.review(repo, number, body="Please change it.")
        elif kind in ("mention", "stranger"):
            twin.comment(
                repo,
                number,
                "@steward please change it",
                **({"login": "drive-by"} if kind == "stranger" else {}),
            )
        elif kind == "check":
            twin.check(repo, number, name="ci", conclusion="failure", output="1 failed")
        else:
            self.checker.person_heads.add(str(twin.person_push(repo, number)["head"]["sha"]))
        self.w.board.note("ask")
        self.w.board.note(f"ask:{kind}")

    @rule(pick=st.integers(0, 7), merge=st.booleans())
    def review(self, pick: int, merge: bool) -> None:
        self._act(lambda: self._review(pick, merge))
        self._after_rule()

    def _do_review_first(self) -> None:
        self._review(0, True)

    def _do_ask_first(self) -> None:
        self._ask(0, "review")

    def _review(self, pick: int, merge: bool) -> None:
        open_pulls = [(repo, p) for repo, p in self.w.pulls() if p["state"] == "open"]
        if open_pulls:
            repo, pull = open_pulls[pick % len(open_pulls)]
            (self.w.twin.merge if merge else self.w.twin.close)(repo, pull["number"])

    # ---- interleaved actions (run between two requests of another rule)
    def _do_heartbeat_b(self) -> None:
        self.w.heartbeats["b"].tick(USER)

    def _do_cancel_live(self) -> None:
        rows = self._task_rows("queued", "running", "review")  # a task in review is withdrawn
        if rows:
            self.w.task_service.cancel(USER, rows[0]["task_id"])

    def _do_retry_failed(self) -> None:
        rows = self._task_rows("failed", "cancelled", "closed")
        if rows:
            self.w.task_service.retry(USER, rows[-1]["task_id"])
            self.checker.acknowledged_retry(rows[-1]["task_id"])

    def _do_confirm_awaiting(self) -> None:
        for slug, hashes in sorted(self.hashes.items()):
            # Noted before the call: its write may apply and its answer be lost (a fault).
            self.confirmed_elsewhere.append((slug, hashes[-1]))
            self.w.plan_service.confirm(USER, slug, hashes[-1])

    def _do_edit_first(self) -> None:
        if self.docs:
            slug = sorted(self.docs)[0]
            self.docs[slug][0] = retitled(self.docs[slug][0], "again")
            self._publish(slug)

    # ---- invariants and the end
    @invariant()
    def holds(self) -> None:
        self.checker.check()

    def teardown(self) -> None:
        try:
            invariants.converge(self)
        finally:
            self.w.api.close()
