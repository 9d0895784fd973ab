"""Plans table adapter: one item per plan, every write conditional.

Publish writes the whole plan with a condition on the `version` it read (optimistic
concurrency: two requests). Status transitions are single `UpdateItem`s whose conditions
encode the lifecycle, so concurrent confirms record one transition and the rest see it done.
Every write bumps `version`, so a publish that read stale state fails its condition and
merges again instead of overwriting a task link written in between.

This module writes every plan item, including the plan parts of the task store's
transactions (`item_link_update` for spawn, `item_reopen_update` for an explicit retry)
and the projection of a task's status onto its item (`PlanStore.project_item`).

A plan is one DynamoDB item (400 KB at most). `save` estimates the size of what it is about
to write (`steward.adapters.dynamo:item_size`) plus what later writes may add to it (task
links, classifications, the approval: `STORED_GROWTH_PER_ITEM`, `STORED_GROWTH_PER_PLAN`),
and refuses a plan over `MAX_STORED_PLAN_BYTES` with TooLarge (413) before any write. The
kept history is bounded by the publish rules (`steward.domain.plans`), so only a document
whose own items are too large is refused: the parser bounds each item, and a 256 KiB
document of a hundred items fits with its front matter at its limit and a full history.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from steward.adapters.dynamo import (
    DYNAMODB_ITEM_LIMIT,
    Tables,
    cancellation_reasons,
    decode_cursor,
    deserialize,
    encode_cursor,
    error_code,
    is_conditional_failure,
    item_size,
    old_item,
    plain,
)
from steward.adapters.user_store import wake_update
from steward.domain import lifecycle
from steward.domain.errors import Conflict, NoSuchContent, NotFound, TooLarge
from steward.domain.models import ItemStatus, Plan, PlanItem, PlanKind, PlanStatus, Task, iso
from steward.domain.plan_diff import resolve_content
from steward.tables import PLANS

# What writes after a publish may add to the stored plan: per item a task link (task_id,
# attempt), a classification, a retry request and a longer status; per plan the approval
# (approved_hash, confirmed_at, confirmations), archived_at and a longer version number.
STORED_GROWTH_PER_ITEM = 128
STORED_GROWTH_PER_PLAN = 512
# Below DynamoDB's limit by a margin for the estimate itself.
MAX_STORED_PLAN_BYTES = DYNAMODB_ITEM_LIMIT - 8 * 1024


def stored_size(plan: Plan) -> int:
    """The plan's item size as `save` would write it, plus the room later writes may take."""
    return item_size(plan_to_item(plan)) + STORED_GROWTH_PER_PLAN + STORED_GROWTH_PER_ITEM * len(plan.items)


def _refuse_if_too_large(plan: Plan) -> None:
    size = stored_size(plan)
    if size <= MAX_STORED_PLAN_BYTES:
        return
    largest = max(plan.active_items, key=lambda i: len(i.title.encode()) + len(i.details.encode()))
    raise TooLarge(
        f"markdown: the plan would take about {size} bytes once stored, more than the "
        f"{MAX_STORED_PLAN_BYTES} bytes one plan may take (DynamoDB's 400 KB item limit, less room "
        f"for task links); its largest checkbox is {largest.ordinal} "
        f"({len(largest.title.encode()) + len(largest.details.encode())} bytes). Shorten the items: "
        "tabs in the indentation of details are stored as spaces",
        field="markdown",
    )


# ---- the plan parts of the task store's transactions
def item_link_update(
    tables: Tables,
    task: Task,
    *,
    previous_task_id: str | None,
    now: datetime,
    after: tuple[str, ...] = (),
    content_hash: str | None = None,
) -> dict[str, Any]:
    """The plan part of spawning `task`: link it to its item and mark the item running and
    the plan in progress, on the condition that the plan still approves its current content
    with the item at this revision and not removed, and that the item is linked to
    `previous_task_id` (None: no task yet) and is pending (retried by a person) or failed
    (a retryable failure): never in review, where a webhook may have revived that task
    since the loop read it (`lifecycle.ITEM_CHANGES["spawn"]`). The item's `supersedes`
    goes: the loop fenced that task before this spawn (`steward.services.heartbeat`).

    Order (`steward.domain.order`): every item in `after` must still be merged or done, and
    with `content_hash` the plan must still hold the content the loop decided from (a
    republish confirmed meanwhile may have given the item other predecessors)."""
    names = {"#s": "status", "#v": "version", "#k": task.item_key, "#items": "items"}
    values: dict[str, Any] = {
        ":tid": task.id,
        ":running": ItemStatus.RUNNING.value,
        ":in_progress": PlanStatus.IN_PROGRESS.value,
        ":confirmed": PlanStatus.CONFIRMED.value,
        ":rev": task.revision,
        ":attempt": task.attempt,
        ":false": False,
        ":now": iso(now),
        ":one": 1,
    }
    values[":pending"] = ItemStatus.PENDING.value
    if previous_task_id is None:
        link_condition = "attribute_not_exists(#items.#k.task_id) AND #items.#k.#s = :pending"
    else:
        link_condition = "#items.#k.task_id = :prev AND #items.#k.#s IN (:pending, :failed)"
        values |= {":prev": previous_task_id, ":failed": ItemStatus.FAILED.value}
    if after:
        values |= {":merged": ItemStatus.MERGED.value, ":done": ItemStatus.DONE.value}
    for n, key in enumerate(after):
        names[f"#a{n}"] = key
        link_condition += f" AND #items.#a{n}.#s IN (:merged, :done)"
    if content_hash is not None:
        values[":seen"] = content_hash
        link_condition += " AND content_hash = :seen"
    return {
        "TableName": tables.name(PLANS),
        "Key": {"user": task.user, "slug": task.plan_slug},
        "UpdateExpression": "SET #items.#k.task_id = :tid, #items.#k.#s = :running, "
        "#items.#k.attempt = :attempt, #s = :in_progress, updated_at = :now ADD #v :one "
        "REMOVE #items.#k.retry_requested, #items.#k.last_classification, #items.#k.supersedes",
        "ConditionExpression": "#s IN (:confirmed, :in_progress) AND approved_hash = content_hash"
        " AND #items.#k.revision = :rev AND #items.#k.removed = :false AND " + link_condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def item_reopen_update(tables: Tables, task: Task, *, now: datetime) -> dict[str, Any]:
    """The plan part of an explicit retry of `task`: its item goes back to pending, still
    linked to `task` (the next spawn's previous task), on the condition that the plan
    approves its current content, `task` is the item's task at this revision and the item's
    checkbox was not deleted (a removed item is no work to reopen). A completed plan
    reopens: the retried item is work again."""
    return {
        "TableName": tables.name(PLANS),
        "Key": {"user": task.user, "slug": task.plan_slug},
        "UpdateExpression": "SET #items.#k.#s = :pending, #items.#k.retry_requested = :true, "
        "#s = :in_progress, updated_at = :now ADD #v :one",
        "ConditionExpression": "#s IN (:confirmed, :in_progress, :completed) "
        "AND approved_hash = content_hash "
        "AND #items.#k.task_id = :tid AND #items.#k.revision = :rev AND #items.#k.removed = :false",
        "ExpressionAttributeNames": {
            "#k": task.item_key,
            "#items": "items",
            "#s": "status",
            "#v": "version",
        },
        "ExpressionAttributeValues": {
            ":pending": ItemStatus.PENDING.value,
            ":true": True,
            ":now": iso(now),
            ":one": 1,
            ":confirmed": PlanStatus.CONFIRMED.value,
            ":in_progress": PlanStatus.IN_PROGRESS.value,
            ":completed": PlanStatus.COMPLETED.value,
            ":tid": task.id,
            ":rev": task.revision,
            ":false": False,
        },
    }


def plan_to_item(plan: Plan) -> dict[str, Any]:
    data = plan.model_dump(mode="json", exclude={"items", "id"})
    data["plan_id"] = plan.id
    if plan.kind is PlanKind.WORK:
        del data["kind"]  # absent is work: plans stored before kinds existed keep their meaning
    # Absent rather than NULL, so conditions can say attribute_not_exists(items.k.task_id).
    data["items"] = {i.key: i.model_dump(mode="json", exclude={"key"}, exclude_none=True) for i in plan.items}
    data["created_at"] = iso(plan.created_at)
    data["updated_at"] = iso(plan.updated_at)
    return data


def item_to_plan(item: dict[str, Any]) -> Plan:
    data = plain(item)
    items = [PlanItem(key=key, **fields) for key, fields in data.pop("items", {}).items()]
    items.sort(key=lambda i: (i.removed, i.ordinal))
    return Plan(id=data.pop("plan_id"), items=tuple(items), **data)


class PlanStore:
    def __init__(self, tables: Tables) -> None:
        self._tables = tables
        self._table = tables.table(PLANS)

    def get(self, user: str, slug: str) -> Plan | None:
        found = self._table.get_item(Key={"user": user, "slug": slug}, ConsistentRead=True)
        return item_to_plan(found["Item"]) if "Item" in found else None

    def require(self, user: str, slug: str) -> Plan:
        plan = self.get(user, slug)
        if plan is None:
            raise NotFound(f"no plan {slug!r}", field="slug")
        return plan

    def page(self, user: str, *, limit: int, cursor: str | None) -> tuple[list[Plan], str | None]:
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "#u = :u",
            "ExpressionAttributeNames": {"#u": "user"},
            "ExpressionAttributeValues": {":u": user},
            "Limit": limit,
        }
        start = decode_cursor(cursor, PLANS.page_key(), must_match={"user": user})
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = self._table.query(**kwargs)
        return [item_to_plan(i) for i in page["Items"]], encode_cursor(page.get("LastEvaluatedKey"))

    def save(self, plan: Plan, *, expected_version: int | None) -> Plan:
        """Write a whole plan. `expected_version` None means it must not exist yet. A plan
        that would not fit one DynamoDB item is refused (TooLarge) without a request."""
        stored = plan.model_copy(update={"version": (expected_version or 0) + 1})
        _refuse_if_too_large(stored)
        if expected_version is None:
            condition: dict[str, Any] = {
                "ConditionExpression": "attribute_not_exists(#u)",
                "ExpressionAttributeNames": {"#u": "user"},
            }
        else:
            condition = {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": expected_version},
            }
        try:
            self._table.put_item(Item=plan_to_item(stored), **condition)
        except ClientError as exc:
            if is_conditional_failure(exc):
                raise Conflict("the plan changed while it was being published; retry") from exc
            raise
        return stored

    def _transition(
        self,
        user: str,
        slug: str,
        *,
        allowed_from: frozenset[PlanStatus],
        target: PlanStatus,
        rule: Any,
        now: datetime,
        extra_set: str = "",
        extra_add: str = "",
        extra_condition: str = "",
        extra_values: dict[str, Any] | None = None,
        noop: Any = None,
        wake: bool = False,
        person: bool = False,
    ) -> Plan:
        """One conditional UpdateItem. On a failed condition the old item (returned with the
        failure, no extra read) decides: already there is success, anything else is the
        lifecycle error `rule` raises, or NotFound. `wake`: with the loop's wake-up, in one
        transaction; `person`: an approval that starts work at once (`wake_update`)."""
        names = {"#s": "status", "#v": "version", "#u": "user"}
        values: dict[str, Any] = {
            ":target": target.value,
            ":now": iso(now),
            ":one": 1,
            **{f":from{i}": s.value for i, s in enumerate(sorted(allowed_from))},
            **(extra_values or {}),
        }
        from_list = ", ".join(f":from{i}" for i in range(len(allowed_from)))
        update: dict[str, Any] = {
            "Key": {"user": user, "slug": slug},
            "UpdateExpression": f"SET #s = :target, updated_at = :now{extra_set} ADD #v :one{extra_add}",
            "ConditionExpression": f"attribute_exists(#u) AND #s IN ({from_list})" + extra_condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            if wake:
                return self._update_and_wake(user, update, person=person)
            result = self._table.update_item(**update, ReturnValues="ALL_NEW")
        except ClientError as exc:
            current = self._failed_condition_item(exc)
            if current is None:
                raise NotFound(f"no plan {slug!r}", field="slug") from exc
            plan = item_to_plan(current)
            rule(plan.status)  # raises the lifecycle error when the transition is not allowed
            if noop is not None:
                noop(plan)
            return plan
        return item_to_plan(result["Attributes"])

    def _update_and_wake(self, user: str, update: dict[str, Any], *, person: bool = False) -> Plan:
        """The plan update and the owner's loop wake-up in one transaction: the watermark
        advances (the loop will not take its no-progress shortcut) and the user joins the
        scheduler's liveness index, or neither happens (docs/concepts/loop.md). `person` (a
        confirm): the next tick is not held back by the interval gate either."""
        actions: list[Any] = [
            {"Update": {"TableName": self._tables.name(PLANS), **update}},
            {"Update": wake_update(self._tables, user, person=person)},
        ]
        self._tables.client.transact_write_items(TransactItems=actions)
        plan = self.get(user, update["Key"]["slug"])
        if plan is None:  # deleted in between: plans are never deleted, so this is a bug
            raise NotFound("plan vanished", field="slug")
        return plan

    @staticmethod
    def _failed_condition_item(exc: ClientError) -> dict[str, Any] | None:
        """The plan item a failed condition saw, from UpdateItem or a cancelled transaction;
        re-raises anything that is not a failed condition."""
        if is_conditional_failure(exc):
            return old_item(exc)
        if error_code(exc) == "TransactionCanceledException":
            reason = cancellation_reasons(exc)[0]
            if reason.get("Code") == "ConditionalCheckFailed":
                raw = reason.get("Item")
                return deserialize(raw) if raw else None
        raise exc

    def confirm(self, user: str, slug: str, *, content_hash: str | None, now: datetime) -> Plan:
        """Approve the plan's current content (or exactly the content `content_hash` names, if
        the caller says what it reviewed: the whole hash or a prefix of at least 12 hex
        characters, `steward.domain.plan_diff:given_hash`). Confirming a confirmed plan is a
        success that changes nothing. A hash that is not the current content's is refused
        with the item the failed condition returns (no extra read): "the plan changed"
        (Conflict) for one the plan had, "no such content" (NoSuchContent) for one it never
        had (`steward.domain.plan_diff:resolve_content`)."""
        extra_condition = " AND begins_with(content_hash, :seen)" if content_hash else ""

        def already(plan: Plan) -> None:
            if content_hash and not plan.content_hash.startswith(content_hash):
                if resolve_content(plan, content_hash) is None:
                    shown = content_hash if len(content_hash) <= 16 else content_hash[:12] + "\u2026"
                    raise NoSuchContent(
                        f"no such content: {shown} was never the content of plan {slug!r} "
                        f"(its content now is {plan.content_hash[:12]})",
                        field="content_hash",
                    )
                raise Conflict(
                    "the plan changed since you reviewed it; review it again", field="content_hash"
                )

        return self._transition(
            user,
            slug,
            allowed_from=lifecycle.CONFIRMABLE,
            target=PlanStatus.CONFIRMED,
            rule=lifecycle.confirm,
            now=now,
            extra_set=", approved_hash = content_hash, confirmed_at = :now",
            extra_add=", confirmations :one",
            extra_condition=extra_condition,
            extra_values={":seen": content_hash} if content_hash else None,
            noop=already,
            wake=True,
            person=True,  # an approval starts work at once
        )

    def submit(self, user: str, slug: str, *, now: datetime) -> Plan:
        return self._transition(
            user,
            slug,
            allowed_from=frozenset({PlanStatus.DRAFT}),
            target=PlanStatus.AWAITING_CONFIRMATION,
            rule=lifecycle.submit,
            now=now,
        )

    def archive(self, user: str, slug: str, *, now: datetime) -> Plan:
        return self._transition(
            user,
            slug,
            allowed_from=lifecycle.ARCHIVABLE,
            target=PlanStatus.ARCHIVED,
            rule=lifecycle.archive,
            now=now,
            extra_set=", archived_at = :now",
            wake=True,
        )

    # ---- the item projection of a task's status
    def project_item(self, task: Task, *, now: datetime) -> bool:
        """Copy a task's status onto its plan item, if the item still points at this task and
        its status is one the projection may move from (`lifecycle.PROJECTION_SOURCES`: a
        late or replayed projection never overwrites a newer status, e.g. a cancel repeated
        after a person's retry). The task is the truth; the loop repairs a lost projection."""
        item_status = lifecycle.ITEM_STATUS_OF[task.status]
        sources = sorted(lifecycle.PROJECTION_SOURCES[item_status])
        if not sources:
            return False
        source_values = {f":from{n}": status.value for n, status in enumerate(sources)}
        try:
            self._table.update_item(
                Key={"user": task.user, "slug": task.plan_slug},
                UpdateExpression="SET #items.#k.#s = :status, #items.#k.last_classification = :cls, "
                "updated_at = :now ADD #v :one",
                ConditionExpression=f"#items.#k.task_id = :tid AND #items.#k.#s IN ({', '.join(source_values)})",
                ExpressionAttributeNames={
                    "#items": "items",
                    "#k": task.item_key,
                    "#s": "status",
                    "#v": "version",
                },
                ExpressionAttributeValues={
                    ":status": item_status.value,
                    ":cls": task.classification.value if task.classification else None,
                    ":tid": task.id,
                    ":now": iso(now),
                    ":one": 1,
                    **source_values,
                },
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True

    # ---- loop
    def all_for_user(self, user: str) -> list[Plan]:
        """Every plan of the user (the heartbeat's desired state), all pages."""
        plans: list[Plan] = []
        cursor = None
        while True:
            page, cursor = self.page(user, limit=100, cursor=cursor)
            plans += page
            if cursor is None:
                return plans

    def mark_in_progress(self, user: str, slug: str, *, now: datetime) -> bool:
        return self._loop_update(user, slug, "#s = :confirmed", PlanStatus.IN_PROGRESS, now=now, values={})

    def complete(self, user: str, slug: str, *, version: int, now: datetime) -> bool:
        """Complete the plan only as it was judged complete: a publish or spawn in between
        bumps `version` and the next tick judges again."""
        return self._loop_update(
            user,
            slug,
            "#s IN (:confirmed, :in_progress) AND #v = :seen",
            PlanStatus.COMPLETED,
            now=now,
            values={":seen": version},
        )

    def _loop_update(
        self,
        user: str,
        slug: str,
        condition: str,
        target: PlanStatus,
        *,
        now: datetime,
        values: dict[str, Any],
    ) -> bool:
        try:
            self._table.update_item(
                Key={"user": user, "slug": slug},
                UpdateExpression="SET #s = :target, updated_at = :now ADD #v :one",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#s": "status", "#v": "version"},
                ExpressionAttributeValues={
                    ":target": target.value,
                    ":now": iso(now),
                    ":one": 1,
                    ":confirmed": PlanStatus.CONFIRMED.value,
                    **({":in_progress": PlanStatus.IN_PROGRESS.value} if ":in_progress" in condition else {}),
                    **values,
                },
            )
        except ClientError as exc:
            if is_conditional_failure(exc):
                return False
            raise
        return True
