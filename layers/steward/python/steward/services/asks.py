"""Recording a follow-up ask on a task in review, whoever found it: a webhook delivery or the
resync that reads what a lost delivery carried (docs/concepts/follow-ups.md).

An ask is recorded once per round key (pull request, head commit, kind) as a
`follow_up_asked` event with the key added to the task's `follow_up_keys` and the ask to
its `pending_asks`, waking the loop, in one transaction (with the delivery's mark when a
webhook found it); a review or a mention by someone who may not ask (not a collaborator,
or a bot) is recorded as a `follow_up_refused` event instead and decides a one-time reply.
Each GitHub object (a review, a comment, a check run, a status) is recorded at most once,
by whichever path sees it first (`ask_sources`), so a delivery and a resync of the same
review record one event. Asks are bounded by their keys (MAX_FOLLOW_UP_KEYS) and refusals
apart (MAX_REFUSALS: each recorded ask adds one source and one key, so the sources beyond
the keys are the refusals): a stranger's comments never use up what a collaborator may ask. Each write is conditional on the task as
it reads it: nothing is recorded on a task that left review meanwhile. The texts kept are
redacted.

Before its record, a review's inline comments are read from GitHub when the delivery did not
carry them (GitHub's `pull_request_review` never does), and a failing check is compared
with the same check on the base branch: one that fails there too is not the change's to fix
(`fails_on_base` on the ask: the loop refuses it and says so once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from steward.adapters.github import ConditionalRead, GitHubError
from steward.adapters.task_store import TaskStore
from steward.domain.follow_ups import (
    COLLABORATORS_ONLY,
    MAX_FOLLOW_UP_KEYS,
    MAX_INLINE_COMMENTS,
    MAX_PENDING_ASKS,
    MAX_REFUSALS,
    Trigger,
    TriggerKind,
    ask_problem,
    author_problem,
    fails_on,
    inline_comment,
    reply_added,
    trigger_record,
)
from steward.domain.models import Task, TaskStatus
from steward.domain.webhooks import WebhookOutcome

logger = logging.getLogger(__name__)


class AskReader(Protocol):
    """The part of the GitHub App an ask's record reads (`steward.adapters.github.GitHubApp`)."""

    def review_comments(
        self,
        installation_id: int,
        repo: str,
        number: int,
        *,
        review_id: int | None = None,
        since: str | None = None,
    ) -> list[dict[str, Any]]: ...

    def check_runs(
        self, installation_id: int, repo: str, ref: str, *, etag: str | None = None, name: str | None = None
    ) -> ConditionalRead: ...

    def commit_statuses(
        self, installation_id: int, repo: str, ref: str, *, etag: str | None = None
    ) -> ConditionalRead: ...

    def pull_base(self, installation_id: int, repo: str, number: int) -> str | None: ...

    def can_write(self, installation_id: int, repo: str, login: str) -> bool: ...


class _NotAsked(Exception):
    """A follow-up ask that the task, as the write reads it, does not take."""


@dataclass
class Asks:
    tasks: TaskStore
    github: Callable[[], AskReader] | None = None  # built on first use: the App's client is heavy
    calls: int = 0  # GitHub calls made so far (resync counts them within its bound)

    def record(
        self,
        task: Task,
        trigger: Trigger,
        *,
        now: datetime,
        origin: Mapping[str, Any],
        include: Sequence[Mapping[str, Any]] = (),
    ) -> WebhookOutcome:
        """Record `trigger` on `task` when it asks something of it (`ask_problem`). `origin`
        tells where it was found (a delivery's id, or resync); `include`: the delivery's
        mark, written with it."""
        number, head = task.pr_number, trigger.head_sha
        unasked = ask_problem(trigger, task)
        if unasked is not None or number is None or head is None:
            return WebhookOutcome("ignored", unasked or "names no commit")
        if trigger.source in task.ask_sources:
            return WebhookOutcome("unchanged", "this follow-up was recorded already")
        key = trigger.round_key(number, head)
        refused = author_problem(trigger)
        if refused is not None and self._writes(task, trigger):
            refused = None  # no association GitHub shows, but write access (through a team)
        if refused is None and key in task.follow_up_keys:  # before asking GitHub anything more
            return WebhookOutcome("unchanged", "this follow-up was asked for already")
        if refused is None:
            trigger = self._read_more(task, trigger)

        def admit(current: Task) -> None:
            # Judged again on the task as each write attempt reads it: the write is conditional
            # on that read, so nothing is recorded on a task that left review meanwhile.
            if current.status is not TaskStatus.REVIEW or current.pr_number != number:
                raise _NotAsked(f"the task is {current.status.value}, not in review")
            if trigger.source in current.ask_sources:
                raise _NotAsked("this follow-up was recorded already")
            if refused is not None and len(current.ask_sources) - len(current.follow_up_keys) >= MAX_REFUSALS:
                raise _NotAsked(f"the task holds {MAX_REFUSALS} refused follow-ups already")
            if refused is None and key in current.follow_up_keys:
                raise _NotAsked("this follow-up was asked for already")
            if refused is None and len(current.follow_up_keys) >= MAX_FOLLOW_UP_KEYS:
                raise _NotAsked(f"the task holds {MAX_FOLLOW_UP_KEYS} follow-up asks already")
            if refused is None and len(current.pending_asks) >= MAX_PENDING_ASKS:
                raise _NotAsked(
                    f"{MAX_PENDING_ASKS} follow-up asks of the task wait for their rounds already"
                )

        from steward.domain.redaction import Redactor  # noqa: PLC0415 - only a trigger on a task in review pays for it

        # People paste credentials into reviews and CI prints them: nothing stored keeps one.
        data = Redactor().clean(trigger_record(trigger) | dict(origin))
        if refused is None:
            event, recorded = "follow_up_asked", data | {"round_key": key}

            def sets(current: Task) -> dict[str, Any]:
                return {
                    "ask_sources": [*current.ask_sources, trigger.source],
                    "follow_up_keys": [*current.follow_up_keys, key],
                    "pending_asks": [*current.pending_asks, recorded],
                }
        else:
            event, recorded = "follow_up_refused", data | {"reason": refused}

            def sets(current: Task) -> dict[str, Any]:
                # A person is answered once that only collaborators can ask; a bot never is.
                replies = {} if trigger.author_is_bot else reply_added(current, COLLABORATORS_ONLY)
                return {"ask_sources": [*current.ask_sources, trigger.source], **replies}

        try:
            self.tasks.append_event(
                task,
                event,
                recorded,
                now=now,
                admit=admit,
                sets=sets,
                include=include,
                wake=refused is None or not trigger.author_is_bot,  # the loop starts the round or replies
            )
        except _NotAsked as exc:
            return WebhookOutcome("unchanged", str(exc))
        extra = {**origin, "task_id": task.id, "round_key": key}
        if refused is not None:
            logger.info("a follow-up refused: %s", refused, extra=extra)
            return WebhookOutcome("applied", refused)
        logger.info("a follow-up asked for", extra=extra)
        return WebhookOutcome("applied")

    def _writes(self, task: Task, trigger: Trigger) -> bool:
        """Whether a person (never a bot) whose association says nothing may write to the
        repository, as GitHub says; False without an answer (refused, as the association says)."""
        if (
            trigger.author_is_bot
            or not trigger.author
            or self.github is None
            or trigger.installation_id is None
        ):
            return False
        self.calls += 1
        try:
            return self.github().can_write(trigger.installation_id, task.repo, trigger.author)
        except GitHubError as exc:
            logger.warning("a follow-up's author is judged by their association alone: %s", exc.message)
            return False

    def _read_more(self, task: Task, trigger: Trigger) -> Trigger:
        """What the delivery did not carry, from GitHub: a review's inline comments, and
        whether a failing check fails on the base branch too. Without an answer the ask is
        kept as it is (a round without the comments still answers the review's body; a check
        not known to fail on the base is the change's to fix)."""
        github = self.github() if self.github is not None and trigger.installation_id is not None else None
        if github is None or task.pr_number is None or trigger.installation_id is None:
            return trigger
        installation, repo, number = trigger.installation_id, task.repo, task.pr_number
        try:
            if (
                trigger.kind is TriggerKind.REVIEW
                and not trigger.comments
                and trigger.source.startswith("review:")
            ):
                review_id = int(trigger.source.removeprefix("review:"))
                self.calls += 1
                raw = github.review_comments(installation, repo, number, review_id=review_id)
                return replace(trigger, comments=tuple(inline_comment(c) for c in raw[:MAX_INLINE_COMMENTS]))
            if (
                trigger.kind is TriggerKind.CHECK
                and trigger.check_name
                and not trigger.source.startswith("check_suite:")
            ):
                base = task.base or trigger.base_ref
                if base is None:
                    self.calls += 1
                    base = github.pull_base(installation, repo, number)
                if base is None:
                    return trigger
                self.calls += 1
                if trigger.source.startswith("status:"):
                    read = github.commit_statuses(installation, repo, base)
                else:
                    read = github.check_runs(installation, repo, base, name=trigger.check_name)
                return replace(trigger, fails_on_base=fails_on(trigger, read.items))
        except GitHubError as exc:
            logger.warning("a follow-up is recorded without what GitHub did not say: %s", exc.message)
        return trigger
