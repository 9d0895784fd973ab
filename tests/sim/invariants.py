"""What must hold after every step of every schedule, and at its end (issue: deterministic
simulation). State is read from moto's backend directly, so checking makes no request, fires
no hook and meets no fault.

Status changes are checked at every write, not only between steps: one step (a heartbeat, a
webhook with another rule interleaved) can make several, and each must be one transition of
the tables in `steward.domain.lifecycle`. So are a new task's order, repository and the
user's pull request load (`Checker.observe`): each is a promise about the moment the task is
created, which the state a step later no longer shows.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

from steward.adapters.runtime_api import RuntimeApiError
from steward.domain import lifecycle
from steward.domain.loop import LoopSettings, LoopSettingsUpdate
from steward.domain.models import ItemStatus, PlanStatus, TaskStatus

from tests.sim.world import USER, Runtime, World

if TYPE_CHECKING:
    from tests.sim.machine import ControlPlane

LIVE_TASKS = frozenset({"queued", "running", "review"})
ACTIVE_PLANS = frozenset({"confirmed", "in_progress"})
FINISHED_ITEMS = frozenset({"merged", "closed", "failed", "done", "removed"})
SATISFIED_ITEMS = frozenset({"merged", "done"})  # what an item waiting for another needs of it
DEFAULT_MAX_OPEN_PRS = LoopSettings().max_open_prs
CONVERGENCE_ROUNDS = 14  # ticks, each after a resync period and a reaper grace


class Checker:
    def __init__(self, world: World) -> None:
        self.w = world
        self.violations: list[str] = []
        self.approved: set[tuple[str, str, int]] = set()  # (slug, item key, revision) ever approved
        self.passed: dict[str, set[str]] = {}  # task id -> checks its runtime saw pass
        self.pushed: dict[str, str] = {}  # task id -> the commit its runtime pushed
        self.retried: list[dict[str, Any]] = []  # the task rows of every acknowledged retry (202)
        self.person_heads: set[str] = set()  # commits a person pushed onto a pull request
        # content hash -> ordinal -> the ordinals it waits for, as the person wrote the
        # document that has it (`ControlPlane._publish`)
        self.orders: dict[str, dict[int, tuple[int, ...]]] = {}
        self.places: dict[str, dict[int, str]] = {}  # content hash -> ordinal -> its repository
        # Work tasks queued, running or in review ever since they were created: what the
        # loop's spawns add to the user's pull request load (`_pull_request_load`).
        self._spawned_load: set[str] = set()
        self._load_allowance: int | None = None
        self._max_open_prs: int | None = None
        self._tasks: dict[str, str] = {}
        self._plans: dict[str, str] = {}
        self._items: dict[tuple[str, str], str] = {}
        self._logs_seen = world.logs_from
        world.on_write.append(self.observe)
        self.observe()

    # ---- reads
    def task_rows(self) -> dict[str, dict[str, Any]]:
        return {r["task_id"]: r for r in self.w.rows("tasks")}

    def task_status(self, task_id: str) -> str | None:
        row = self.task_rows().get(task_id)
        return None if row is None else str(row["status"])

    def branch_of(self, task_id: str) -> str:
        return str(self.task_rows()[task_id]["branch"])

    def is_round(self, task_id: str) -> bool:
        return bool(self.task_rows()[task_id].get("parent"))

    def documented(
        self, content_hash: str, waits: dict[int, tuple[int, ...]], places: dict[int, str]
    ) -> None:
        """The person published a document with `content_hash` whose items wait for these
        and work in these repositories."""
        self.orders[content_hash] = waits
        self.places[content_hash] = places

    def acknowledged_retry(self, task_id: str) -> None:
        """The API answered a retry of `task_id` with 202: another attempt is owed."""
        self.retried.append(dict(self.task_rows()[task_id]))

    def lost_retries(self) -> list[str]:
        """Acknowledged retries that never spawned an attempt. Owed: a later attempt of the
        same item revision, unless the person changed what was retried since (archived the
        plan, published it without confirming, edited, removed or checked the item) or the
        retried task came back to life through its pull request (reopened or revived: the
        item shows that pull request). A `closed` item is no excuse: that is how a retry
        was once lost (a repeated cancel projected `closed` onto the retried item)."""
        tasks = self.task_rows().values()
        plans = {str(r["slug"]): r for r in self.w.rows("plans")}
        lost: list[str] = []
        for row in self.retried:
            slug, key, revision = row["plan_slug"], row["item_key"], int(row["revision"])
            if any(
                (t["plan_slug"], t["item_key"], int(t["revision"])) == (slug, key, revision)
                and int(t["attempt"]) > int(row["attempt"])
                for t in tasks
            ):
                continue
            plan = plans.get(slug) or {}
            item = (plan.get("items") or {}).get(key) or {}
            changed_by_person = (
                plan.get("status") != PlanStatus.COMPLETED.value  # archived, or awaiting a confirm
                or plan.get("approved_hash") != plan.get("content_hash")
                or item.get("removed")
                or int(item.get("revision", -1)) != revision
                or item.get("status") == ItemStatus.DONE.value
            )
            revived = self.task_status(row["task_id"]) in (TaskStatus.REVIEW.value, TaskStatus.MERGED.value)
            if not (changed_by_person or revived):
                lost.append(
                    f"the acknowledged retry of {row['task_id'][:12]} ({row['status']}) spawned no attempt; "
                    f"its item is {item.get('status')}"
                )
        return lost

    # ---- every write
    def observe(self) -> None:
        """Each status change since the last write must be a transition of its table; each
        task created by the write must be due (its order, its repository, the load)."""
        created = self._observe_tasks()
        if created:
            plans = {str(r["slug"]): r for r in self.w.rows("plans")}
            tasks = self.task_rows()
            for row in created:
                self.violations += self._repository_held(row)
                if not row.get("parent"):
                    plan = plans.get(str(row["plan_slug"]))
                    self.violations += self._order_kept(row, plan)
                    self.violations += self._place_kept(row, plan)
                elif row["repo"] != (tasks.get(str(row["parent"])) or row)["repo"]:
                    self.violations.append(f"round {row['task_id'][:12]} is not in its parent's repository")
        self.violations += self._pull_request_load(created)
        self._observe_plans()

    def _observe_tasks(self) -> list[dict[str, Any]]:
        """Check each task's status change; the tasks created since the last look."""
        created: list[dict[str, Any]] = []
        for task_id, row in self.task_rows().items():
            new = str(row["status"])
            old = self._tasks.get(task_id)
            if old is None:
                created.append(row)
            if old is None and new != TaskStatus.QUEUED.value:
                self.violations.append(f"task {task_id[:12]} was created {new}, not queued")
            elif old is not None and not lifecycle.task_change_allowed(TaskStatus(old), TaskStatus(new)):
                self.violations.append(f"task {task_id[:12]} went {old} -> {new}")
            self._tasks[task_id] = new
            if old is None and not row.get("parent") and new in LIVE_TASKS:
                self._spawned_load.add(task_id)
            elif new not in LIVE_TASKS:
                self._spawned_load.discard(task_id)  # for good: a revival is not a spawn
        return created

    def _observe_plans(self) -> None:
        for row in self.w.rows("plans"):
            slug, new = str(row["slug"]), str(row["status"])
            old = self._plans.get(slug)
            if old is not None and not lifecycle.plan_change_allowed(PlanStatus(old), PlanStatus(new)):
                self.violations.append(f"plan {slug} went {old} -> {new}")
            self._plans[slug] = new
            for key, item in (row.get("items") or {}).items():
                status = str(item["status"])
                before = self._items.get((slug, key))
                if before is not None and not lifecycle.item_change_allowed(
                    ItemStatus(before), ItemStatus(status)
                ):
                    self.violations.append(f"item {slug}/{key[:8]} went {before} -> {status}")
                self._items[(slug, key)] = status
            if row.get("approved_hash") and row.get("approved_hash") == row.get("content_hash"):
                for key, item in (row.get("items") or {}).items():
                    if not item.get("removed"):
                        self.approved.add((slug, key, int(item["revision"])))

    # ---- each task as it is created
    def _order_kept(self, row: dict[str, Any], plan: dict[str, Any] | None) -> list[str]:
        """(a) A task for an item is created only while every item it waits for is merged or
        done, in the plan as stored when the task appears: the spawn's transaction checks
        exactly that (`plan_store.item_link_update`). What the item waits for: the
        references the person wrote (`self.orders`, by the plan's content hash), the
        references the plan stores (`after`), and with `order: sequential` the item above.
        A predecessor leaves merged only with a new revision, which changes the content hash
        the spawn is conditioned on: compared later, a stale plan could excuse or blame."""
        task, slug = row["task_id"][:12], row["plan_slug"]
        items = (plan or {}).get("items") or {}
        item = items.get(row["item_key"])
        if plan is None or item is None or item.get("removed"):
            return []  # a task for work nobody approved: `_check` names it
        active = {int(i["ordinal"]): str(k) for k, i in items.items() if not i.get("removed")}
        ordinal = int(item["ordinal"])
        keys = {str(k) for k in item.get("after") or ()}
        if (plan.get("front_matter") or {}).get("order") == "sequential" and ordinal - 1 in active:
            keys.add(active[ordinal - 1])
        written = self.orders.get(str(plan.get("content_hash")))
        if written is not None and set(written) != set(active):
            return [f"plan {slug} holds items {sorted(active)}, its document {sorted(written)}"]
        keys |= {active[n] for n in (written or {}).get(ordinal, ())}
        unmet = sorted(
            (int(items[k]["ordinal"]), str(items[k]["status"]))
            for k in keys
            if k in items and not items[k].get("removed") and items[k]["status"] not in SATISFIED_ITEMS
        )
        if not unmet:
            if keys:
                self.w.board.note("order_kept")
            return []
        waiting = ", ".join(f"#{n} ({status})" for n, status in unmet)
        return [
            f"task {task} was created for item #{ordinal} of plan {slug} while the items it "
            f"waits for were not all merged or done: {waiting}"
        ]

    def _place_kept(self, row: dict[str, Any], plan: dict[str, Any] | None) -> list[str]:
        """A task works in the repository its item names (`repo:` in its details), else in
        its plan's: as the person wrote the document (`self.places`), or as the plan stores
        it when the document is not known."""
        item = ((plan or {}).get("items") or {}).get(row["item_key"])
        if plan is None or item is None:
            return []
        written = self.places.get(str(plan.get("content_hash"))) or {}
        expected = written.get(int(item["ordinal"])) or item.get("repo") or plan["repo"]
        if row["repo"] == expected:
            return []
        return [
            f"task {row['task_id'][:12]} of item #{item['ordinal']} of plan {row['plan_slug']} was "
            f"created in {row['repo']}, its item's repository is {expected}"
        ]

    def _repository_held(self, row: dict[str, Any]) -> list[str]:
        """(b) A task is created only in a repository that a live installation of its owner
        holds, as the installations table says when it appears: publish refuses any other
        (422), and a task's repository is its item's, its plan's or (a round) its parent's.
        The sim never takes a repository from the installation, so "when it appears" and
        "while it lives" are the same here (the spawn itself does not look again: the mint
        refuses a ticket of a repository no longer held)."""
        repo, user = str(row["repo"]), str(row["user"])
        held = any(
            i.get("owner_sub") == user
            and not i.get("suspended")
            and repo.lower() in {str(r).lower() for r in i.get("repositories") or ()}
            for i in self.w.rows("installations")
        )
        if repo == self.w.repo_b:
            self.w.board.note("second_repo")
        if held:
            return []
        return [
            f"task {row['task_id'][:12]} was created in {repo}, which no live installation of {user} holds"
        ]

    def _pull_request_load(self, created: list[dict[str, Any]]) -> list[str]:
        """(c) The user's work tasks (not rounds) that have been queued, running or in review
        ever since their spawn number at most `max_open_prs`. When the person lowers the
        setting below that number, the bound is the number then, falling as they end, until
        it is within the setting again: no spawn while at or above the limit.

        What the product guarantees, and so what is counted. The loop spawns only while the
        load it read at the tick (`reconcile.pull_request_load`: work tasks queued, running
        or in review), plus what it spawned since in the same tick, is under the setting it
        read; the lease keeps a second tick from spawning on the same read. Nothing else is
        fenced: the spawn's transaction does not count the load again. So:
        * not Steward's open pull requests on GitHub: a withdrawn task's pull request stays
          open until the loop closes it, a failed task's (its runtime opened it, then died)
          is open while the task is not in the load, and a person may reopen a closed one;
        * not the whole load either: such a failed or closed task comes back to review (a
          webhook, resync) whenever GitHub is heard, also between a tick's read and its spawn,
          and the loop neither decides nor fences that.
        A task that left the load and came back is not counted, then: every task counted
        was in the read of each later spawn, or was spawned by the same tick, so the count
        at a spawn is at most the load that spawn was decided on."""
        user = next((r for r in self.w.rows("users") if r.get("user") == USER), {})
        setting = int(user.get("max_open_prs") or DEFAULT_MAX_OPEN_PRS)
        load = len(self._spawned_load)
        if self._max_open_prs is not None and setting < self._max_open_prs and load > setting:
            self.w.board.note("max_open_prs_below_load")
        self._max_open_prs = setting
        allowance = max(setting, self._load_allowance if self._load_allowance is not None else setting)
        if load <= allowance:
            self._load_allowance = max(setting, min(allowance, load))
            return []
        self._load_allowance = load  # named once
        new = [r["task_id"][:12] for r in created if not r.get("parent")]
        named = f"task {', '.join(new)} was created"  # only a spawn adds to the count
        return [
            f"{named} with {load} work tasks queued, running or in review since their spawn "
            f"({', '.join(sorted(t[:12] for t in self._spawned_load))}), over max_open_prs {setting}"
            + (f" (allowance {allowance} since it was lowered)" if allowance > setting else "")
        ]

    # ---- every step
    def check(self) -> None:
        with self.w.snapshot():
            self._check()

    def _check(self) -> None:
        w = self.w
        self.observe()
        problems = list(self.violations)
        tasks = self.task_rows()
        plans = {str(r["slug"]): r for r in w.rows("plans")}
        keys = Counter(
            (r["plan_id"], r["item_key"], int(r["revision"]), int(r["attempt"]))
            for r in tasks.values()
            if not r.get("parent")
        )
        problems += [
            f"{n} tasks for one item attempt {k[1][:8]}/r{k[2]}/a{k[3]}" for k, n in keys.items() if n > 1
        ]
        problems += self._rounds(tasks)
        for task_id, row in tasks.items():
            if (row["plan_slug"], row["item_key"], int(row["revision"])) not in self.approved:
                problems.append(f"task {task_id[:12]} exists for an item revision nobody confirmed")
            cap = Decimal(str(row["budget_usd"]))
            for name in ("committed_usd", "cost_usd"):
                if Decimal(str(row.get(name, 0))) > cap:
                    problems.append(f"task {task_id[:12]}: {name} {row.get(name)} over its cap {cap}")
        for run in w.ecs.runs:
            env = {
                e["name"]: e["value"]
                for e in run["overrides"]["containerOverrides"][0].get("environment", [])
            }
            if env.get("STEWARD_TASK_ID") not in tasks:
                problems.append("ECS started a runtime for no task")
        problems += self._pull_requests(tasks)
        problems += self._liveness(plans, tasks)
        problems += self._secrets()
        assert not problems, "; ".join(problems)

    def _rounds(self, tasks: dict[str, dict[str, Any]]) -> list[str]:
        """Follow-up rounds: at most `follow_ups` per task, one per (head, trigger), each on its
        parent's branch and pull request."""
        problems: list[str] = []
        rounds = [r for r in tasks.values() if r.get("parent")]
        # A round failing retryably is tried again (the same round, another attempt): rounds
        # are counted by their numbers; while a retry waits, its round is uncounted.
        numbers: dict[str, set[int]] = {}
        for r in rounds:
            numbers.setdefault(str(r["parent"]), set()).add(int(r["round"]))
        for parent, used in numbers.items():
            allowed = int(tasks[parent].get("follow_ups", 2)) if parent in tasks else 0
            if len(used) > allowed:
                problems.append(f"task {parent[:12]} has {len(used)} rounds, its approval allows {allowed}")
            counted = int(tasks[parent].get("rounds_used", 0)) if parent in tasks else len(used)
            if counted not in (len(used), len(used) - 1):
                problems.append(f"task {parent[:12]} counts {counted} rounds, has {len(used)}")
        by_ask: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rounds:
            by_ask.setdefault((str(r["parent"]), str((r.get("trigger") or {}).get("round_key"))), []).append(
                r
            )
        for (_, key), attempts in by_ask.items():
            attempts.sort(key=lambda r: int(r.get("attempt", 1)))
            if len({int(r["round"]) for r in attempts}) > 1 or any(
                not (r["status"] == "failed" and r.get("classification") == "retryable")
                for r in attempts[:-1]
            ):
                problems.append(f"{len(attempts)} rounds for one ask {key}, not one round's retries")
        problems += [
            f"round {r['task_id'][:12]} is not on its parent's branch"
            for r in rounds
            if r["parent"] in tasks and r["branch"] != tasks[r["parent"]]["branch"]
        ]
        return problems

    def _pull_requests(self, tasks: dict[str, dict[str, Any]]) -> list[str]:
        problems: list[str] = []
        by_branch = {str(r["branch"]): r for r in tasks.values() if not r.get("parent")}
        answers: dict[str, list[str]] = {}  # a task -> the tasks whose pushes its branch holds
        for r in tasks.values():
            answers.setdefault(str(r.get("parent") or r["task_id"]), []).append(str(r["task_id"]))
        open_per_item: Counter[tuple[str, str, int]] = Counter()
        bot = f"{self.w.twin.app_slug}[bot]"
        for repo, pull in self.w.pulls():
            row = by_branch.get(pull["head_ref"])
            if row is None:
                problems.append(f"pull request {repo}#{pull['number']} of no task")
                continue
            if row["repo"] != repo:
                problems.append(
                    f"pull request {repo}#{pull['number']} of task {row['task_id'][:12]}, whose "
                    f"repository is {row['repo']}"
                )
            if pull["state"] == "open":
                open_per_item[(row["plan_slug"], row["item_key"], int(row["revision"]))] += 1
                if row.get("reason") == "withdrawn" and not row.get("pr_close_pending"):
                    problems.append(
                        f"pull request {repo}#{pull['number']} open after its task's withdrawal closed it"
                    )
            # Steward's own (a person may well write the same mention twice)
            comments = [
                c["body"] for c in self.w.twin.comments(repo, pull["number"]) if c["user"]["login"] == bot
            ]
            if sum("steward:withdrawn" in c for c in comments) > 1:
                problems.append(f"pull request {repo}#{pull['number']} has more than one withdrawal comment")
            if len(comments) != len(set(comments)):
                problems.append(f"pull request {repo}#{pull['number']} has a comment of Steward's twice")
            # The head is the push of the task or of one of its rounds, whose checks passed on it;
            # a person's push (a commit no task pushed) is theirs to answer for.
            pushers = [t for t in answers.get(row["task_id"], []) if self.pushed.get(t) == pull["head_sha"]]
            if not pushers and pull["head_sha"] in self.person_heads:
                continue
            required = set(row.get("checks") or ())
            if not pushers:
                problems.append(
                    f"pull request {repo}#{pull['number']} is not of the tree its checks passed on"
                )
            elif not required <= self.passed.get(pushers[0], set()):
                problems.append(f"pull request {repo}#{pull['number']} without every required check passed")
        problems += [
            f"{n} open pull requests for item {k[1][:8]}/r{k[2]}" for k, n in open_per_item.items() if n > 1
        ]
        return problems

    def _liveness(self, plans: dict[str, dict[str, Any]], tasks: dict[str, dict[str, Any]]) -> list[str]:
        # a withdrawn task whose pull request the loop has yet to close is live work too
        live_tasks = any(r["status"] in LIVE_TASKS or r.get("pr_close_pending") for r in tasks.values())
        open_plans = any(
            p["status"] in ACTIVE_PLANS
            and any(
                not i.get("removed") and i["status"] not in FINISHED_ITEMS
                for i in (p.get("items") or {}).values()
            )
            for p in plans.values()
        )
        user = next((r for r in self.w.rows("users") if r.get("user") == USER), {})
        if (live_tasks or open_plans) and not user.get("live_shard"):
            return ["the user has live work but is not in the live index (stranded)"]
        return []

    def _secrets(self) -> list[str]:
        secrets = [s for s in self.w.secrets if s]
        if not secrets:
            return []
        texts = [
            json.dumps(self.w.rows(t), default=str)
            for t in ("tasks", "events", "plans", "deliveries", "users", "tickets")
        ]
        texts += self.w.run.logs.lines[self._logs_seen :]
        self._logs_seen = len(self.w.run.logs.lines)
        return [
            "a secret the run issued was persisted or logged" for s in secrets if any(s in t for t in texts)
        ][:1]

    def after_acknowledged(self, delivery: Any) -> None:
        """An acknowledged merge is recorded at once: never "200, then lose"."""
        if delivery.event != "pull_request":
            return
        payload = json.loads(delivery.body)
        pull = payload.get("pull_request") or {}
        if payload.get("action") != "closed" or not pull.get("merged"):
            return
        repo = (payload.get("repository") or {}).get("full_name")
        row = next(
            (
                r
                for r in self.w.rows("tasks")
                if r["branch"] == pull["head"]["ref"] and r["repo"] == repo and not r.get("parent")
            ),
            None,
        )
        if row is not None and row["status"] not in ("merged", "cancelled"):
            raise AssertionError(f"an acknowledged merge left its task {row['status']}")


def refused(w: World, runtime: Runtime, status: str | None) -> None:
    """The relay and the token route refuse a runtime whose task is not running."""
    request = {
        "messages": [{"role": "user", "content": [{"text": "More."}]}],
        "inferenceConfig": {"maxTokens": 16},
    }
    for call in (
        lambda: w.api.converse(runtime.capability or "", request),
        lambda: w.api.github_token(runtime.capability or ""),
    ):
        try:
            call()
        except RuntimeApiError:
            continue  # refused (or a fault answered): nothing was admitted
        raise AssertionError(f"a runtime of a task that is {status} was served")


def converge(machine: ControlPlane) -> None:
    """Faults stop (but for one GitHub already had in store, below); the person lets the
    loop run and a reviewer merges every pull request. A bounded number of rounds (each: a
    resync period and a reaper grace pass, a tick, the runtimes run, webhooks arrive) brings
    every confirmed plan to a terminal state, every merged pull request is recorded on its
    task, and every acknowledged retry spawned its attempt (`Checker.lost_retries`). Once,
    the person withdraws the oldest task in review instead of letting it be merged: the loop
    closes its pull request. An item that waits for one that ended unmerged (closed, failed
    for good) waits for the person: they retry that one, as the plan's status tells them
    (`_unblock`). The person's `max_open_prs` stays: merges free the room the loop needs."""
    w = machine.w
    w.board.reset()
    w.board.armed.clear()
    # A GitHub fault already armed (a rate limit GitHub is applying, a server error coming)
    # is GitHub's, not the schedule's: it still meets the next call, at the end's first round
    # (each is one occasion: `twin.faults`). Before the end, it would have met none.
    settings = LoopSettingsUpdate(paused=False, daily_spawn_cap=100, max_parallel=3)
    w.users.update_loop_settings(USER, settings, now=w.clocks.of("api")(), clear_quiet_hours=True)
    withdrew = False
    asked: dict[str, str] = {}  # the task a reviewer asked a change of -> its branch
    unblocked: set[str] = set()  # the tasks the person retried for the items waiting on them
    for _ in range(CONVERGENCE_ROUNDS):
        if _settled(machine):
            break
        _unblock(machine, unblocked)
        w.clocks.advance(200)
        machine._act(lambda: w.heartbeats["a"].tick(USER))
        w.adopt_launched()
        for runtime in list(w.runtimes.values()):
            for _ in range(10):
                if not runtime.alive:
                    break
                machine._act(lambda runtime=runtime: machine._step(runtime, "ok"))
        review = machine._task_rows("review")
        if review and not withdrew:
            withdrew = True
            machine._act(lambda review=review: w.task_service.cancel(USER, review[0]["task_id"]))
        closing = {str(r["branch"]) for r in w.rows("tasks") if r.get("pr_close_pending")}
        waiting = _ask_once(machine, asked, closing)
        for repo, pull in w.pulls():
            # withdrawn: the loop's to close; asked for a change: merged once its round ended
            if pull["state"] == "open" and pull["head_ref"] not in closing | waiting:
                w.twin.merge(repo, pull["number"])
        for pending in w.pending_deliveries():  # in order: each opening, then each merge
            machine._act(lambda pending=pending: w.send(pending))
        working = {r.task_id for r in w.runtimes.values() if r.alive}
        if any(r["status"] in ("queued", "running") and r["task_id"] not in working for r in w.rows("tasks")):
            machine._act(machine._do_reap)  # a runtime died: its task waits for the reaper
        machine.checker.check()
    assert _settled(machine), "no convergence: " + _describe(machine)
    lost = machine.checker.lost_retries()
    assert not lost, "; ".join(lost) + ": " + _describe(machine)


def _ended_unmerged(item: dict[str, Any], max_attempts: int) -> bool:
    """The item's work ended without a merge and the loop will not try it again by itself."""
    return item["status"] == "closed" or (
        item["status"] == "failed"
        and not (
            item.get("last_classification") == "retryable" and int(item.get("attempt", 0)) < max_attempts
        )
    )


def _unblock(machine: ControlPlane, unblocked: set[str]) -> None:
    """The person retries each item that ended unmerged while an item still to do waits for
    it (`(after #n)`, or the item above in a sequential plan): nothing else ends that wait."""
    w = machine.w
    for plan in w.rows("plans"):
        if plan["status"] not in ACTIVE_PLANS or plan.get("approved_hash") != plan.get("content_hash"):
            continue
        items = plan.get("items") or {}
        active = {int(i["ordinal"]): i for i in items.values() if not i.get("removed")}
        sequential = (plan.get("front_matter") or {}).get("order") == "sequential"
        max_attempts = int((plan.get("front_matter") or {}).get("max_attempts", 3))
        for ordinal, item in sorted(active.items()):
            if item["status"] != "pending":
                continue
            before = [items[k] for k in item.get("after") or () if k in items and not items[k].get("removed")]
            before += [active[ordinal - 1]] if sequential and ordinal - 1 in active else []
            for other in before:
                task_id = other.get("task_id")
                if task_id and task_id not in unblocked and _ended_unmerged(other, max_attempts):
                    unblocked.add(task_id)
                    w.board.note("order_blocked")
                    if machine._act(partial(w.task_service.retry, USER, task_id)) is not None:
                        machine.checker.acknowledged_retry(task_id)


def _ask_once(machine: ControlPlane, asked: dict[str, str], closing: set[str]) -> set[str]:
    """Once, a reviewer requests a change on a pull request of a task in review that may
    still take a round; the branches whose round has yet to end (not merged meanwhile): the
    ask is on its way (asked just now, or waiting on the task) or its round is live. An ask
    the loop refused (its task's item was removed or revised meanwhile) waits for nothing."""
    w = machine.w
    rows = {r["task_id"]: r for r in w.rows("tasks")}
    just: str | None = None
    if not asked:
        for row in machine._task_rows("review"):
            if row["branch"] in closing or int(row.get("rounds_used", 0)) >= int(row.get("follow_ups", 2)):
                continue
            repo = str(row["repo"])
            pull = next((p for p in w.twin.pull_states(repo) if p["head_ref"] == row["branch"]), None)
            if pull is not None and pull["state"] == "open" and row.get("head_sha") == pull["head_sha"]:
                just = str(row["task_id"])
                asked[just] = str(row["branch"])
                w.twin.review(repo, pull["number"], body="Please change it.")
                break
    waiting: set[str] = set()
    for task_id, branch in asked.items():
        live_round = any(
            r.get("parent") == task_id and r["status"] in ("queued", "running") for r in rows.values()
        )
        if rows[task_id]["status"] == "review" and (
            task_id == just or rows[task_id].get("pending_asks") or live_round
        ):
            waiting.add(branch)
    return waiting


def _settled(machine: ControlPlane) -> bool:
    w = machine.w
    if any(r["status"] in ACTIVE_PLANS for r in w.rows("plans")):
        return False
    if any(r.get("pr_close_pending") for r in w.rows("tasks")):
        return False  # a withdrawn pull request is still to be closed
    tasks = {str(r["branch"]): r for r in w.rows("tasks") if not r.get("parent")}
    for _, pull in w.pulls():
        row = tasks.get(pull["head_ref"])
        if pull["merged"] and row is not None and row["status"] not in ("merged", "cancelled"):
            return False
    return True


def _describe(machine: ControlPlane) -> str:
    w = machine.w
    plans = [
        (r["slug"], r["status"], {k[:6]: i["status"] for k, i in (r.get("items") or {}).items()})
        for r in w.rows("plans")
    ]
    tasks = [(r["task_id"][:8], r["status"], r.get("classification"), r["repo"]) for r in w.rows("tasks")]
    return f"plans {plans}; tasks {tasks}; pulls {w.pulls()}"
