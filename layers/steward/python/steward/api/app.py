"""Routes of the client API. Handlers stay thin: identify the caller, validate, call a
service, shape the answer. Every read and write is scoped to the JWT `sub`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from steward.api.http import install_error_handlers
from steward.api.http import json_response as _json
from steward.api.requests import (
    ArtifactQuery,
    ConfirmBody,
    EventsQuery,
    ListQuery,
    PublishBody,
    TaskListQuery,
    parse_body,
    parse_query,
)
from steward.api.rounds import rounds_answer
from steward.domain import order, waiting
from steward.domain.errors import Unauthorized
from steward.domain.loop import LoopSettingsUpdate
from steward.domain.models import Plan, Task, utcnow
from steward.domain.plans import earlier_reviews, max_spend, plan_outcomes
from steward.domain.reconcile import allowed_rounds
from steward.domain.waiting import WaitingView
from steward.observability import HandlerMetrics, logger_for
from steward.wiring import Services

logger = logger_for("api")


def _view(s: Services, user: str) -> WaitingView:
    """What the answer's waiting reasons are read from: one read of the user's loop, their
    live tasks and installations, per request."""
    return WaitingView(
        s.users.loop_state(user), s.tasks.live(user), s.installations.for_owner(user), utcnow()
    )


def _rounds(task: Task | None, plan: Plan) -> dict[str, int] | None:
    """The follow-up rounds of an item's task while it is live: used, and allowed."""
    if task is None or task.is_round:
        return None
    return {"used": task.rounds_used, "allowed": allowed_rounds(task, plan)}


def _shown(
    s: Services, plan: Plan, seen: WaitingView | None = None, *, details: bool = True
) -> dict[str, Any]:
    """A plan as the API shows it: each item says why it waits (or null) and which tasks of
    its earlier revisions still await review (their pull requests open); the plan its items'
    outcomes, what its tasks cost, and what confirming it may spend at most. `details` False
    leaves the items' details out (the list route: a page of plans must fit one Lambda answer)."""
    seen = seen or _view(s, plan.user)
    body = plan.to_api(details=details)
    items = {item.key: item for item in plan.items}
    earlier = earlier_reviews(plan, seen.live)
    live = {t.id: t for t in seen.live}
    for entry in body["items"]:
        waits = waiting.for_item(
            plan,
            items[entry["key"]],
            seen.state,
            seen.live,
            seen.now,
            installation_suspended=seen.suspended(entry["repo"]),
        )
        entry["waiting"] = None if waits is None else waits.to_api()
        entry["earlier_reviews"] = earlier.get(entry["key"], [])
        entry["rounds"] = _rounds(live.get(entry.get("task_id") or ""), plan)
    cost = s.tasks.plan_cost(plan.user, plan.slug)
    return {
        **body,
        "outcomes": plan_outcomes(plan),
        "cost_usd": str(cost),
        "max_spend": max_spend(plan),
        # Every item still to do waits on one that ended without a merge: only a person moves it.
        "blocked": order.blocked(plan),
    }


def _shown_task(s: Services, task: Task) -> dict[str, Any]:
    seen = _view(s, task.user)
    waits = waiting.for_task(
        task, seen.state, seen.live, seen.now, installation_suspended=seen.suspended(task.repo)
    )
    return {**task.to_api(), "waiting": None if waits is None else waits.to_api()}


def create_app(
    services: Callable[[], Services], metrics: HandlerMetrics | None = None
) -> APIGatewayHttpResolver:
    """`services` is called per request (cached by the caller) so importing the app does not
    connect to AWS; `metrics` counts the refusals (`Refused<status>`, on the dashboard)."""
    app = APIGatewayHttpResolver()

    def caller() -> str:
        claims = app.current_event.request_context.authorizer.jwt_claim or {}
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized("the request carries no authenticated user")
        return sub

    def query(model: Any) -> Any:
        return parse_query(app.current_event.query_string_parameters, model)

    install_error_handlers(app, logger, metrics)

    # ---- plans
    @app.put("/v1/plans/<slug>")
    def publish(slug: str) -> Response[str]:
        body = parse_body(app.current_event.body, PublishBody)
        return _json(200, _shown(services(), services().plans.publish(caller(), slug, body.markdown)))

    @app.post("/v1/plans/<slug>/submit")
    def submit(slug: str) -> Response[str]:
        return _json(200, _shown(services(), services().plans.submit(caller(), slug)))

    @app.post("/v1/plans/<slug>/confirm")
    def confirm(slug: str) -> Response[str]:
        body = parse_body(app.current_event.body, ConfirmBody, optional=True)
        return _json(200, _shown(services(), services().plans.confirm(caller(), slug, body.content_hash)))

    @app.post("/v1/plans/<slug>/archive")
    def archive(slug: str) -> Response[str]:
        return _json(200, _shown(services(), services().plans.archive(caller(), slug)))

    @app.get("/v1/plans")
    def list_plans() -> Response[str]:
        q = query(ListQuery)
        user = caller()
        plans, next_cursor = services().plans.list(user, limit=q.limit, cursor=q.cursor)
        seen = _view(services(), user)
        shown = [_shown(services(), p, seen, details=False) for p in plans]
        return _json(200, {"plans": shown, "next": next_cursor})

    @app.get("/v1/plans/<slug>")
    def get_plan(slug: str) -> Response[str]:
        return _json(200, _shown(services(), services().plans.get(caller(), slug)))

    @app.get("/v1/plans/<slug>/diff")
    def plan_diff(slug: str) -> Response[str]:
        return _json(200, services().plans.diff(caller(), slug).to_api())

    # ---- tasks
    @app.get("/v1/tasks")
    def list_tasks() -> Response[str]:
        q = query(TaskListQuery)
        tasks, next_cursor = services().tasks.list(caller(), plan_slug=q.plan, limit=q.limit, cursor=q.cursor)
        return _json(200, {"tasks": [t.to_api() for t in tasks], "next": next_cursor})

    @app.get("/v1/tasks/<task_id>")
    def get_task(task_id: str) -> Response[str]:
        return _json(200, _shown_task(services(), services().tasks.get(caller(), task_id)))

    @app.get("/v1/tasks/<task_id>/events")
    def task_events(task_id: str) -> Response[str]:
        q = query(EventsQuery)
        return _json(200, services().tasks.events_after(caller(), task_id, after=q.after, limit=q.limit))

    @app.get("/v1/tasks/<task_id>/rounds")
    def task_rounds(task_id: str) -> Response[str]:
        parent, rounds = services().tasks.rounds(caller(), task_id)
        return _json(200, rounds_answer(parent, rounds))

    @app.get("/v1/tasks/<task_id>/screen")
    def task_screen(task_id: str) -> Response[str]:
        return _json(200, services().tasks.screen(caller(), task_id))

    @app.get("/v1/tasks/<task_id>/artifacts")
    def task_artifacts(task_id: str) -> Response[str]:
        return _json(200, {"artifacts": list(services().tasks.artifact_list(caller(), task_id))})

    @app.get("/v1/tasks/<task_id>/artifacts/<name>")
    def task_artifact(task_id: str, name: str) -> Response[str]:
        url = services().tasks.artifact_url(caller(), task_id, name)
        if query(ArtifactQuery).redirect:
            return _json(302, {"url": url}, headers={"Location": url})
        return _json(200, {"url": url})  # a page's fetch cannot read a cross-origin redirect

    @app.post("/v1/tasks/<task_id>/retry")
    def retry_task(task_id: str) -> Response[str]:
        task = services().tasks.retry(caller(), task_id)
        return _json(202, {"task": task.to_api(), "retry": "requested"})

    @app.post("/v1/tasks/<task_id>/cancel")
    def cancel_task(task_id: str) -> Response[str]:
        return _json(200, services().tasks.cancel(caller(), task_id).to_api())

    # ---- loop settings
    @app.get("/v1/loop")
    def get_loop() -> Response[str]:
        return _json(200, services().users.loop_settings(caller()).model_dump(mode="json"))

    @app.put("/v1/loop")
    def put_loop() -> Response[str]:
        raw = parse_body(app.current_event.body, LoopSettingsUpdate)
        clear = "quiet_hours" in raw.model_fields_set and raw.quiet_hours is None
        settings = services().users.update_loop_settings(caller(), raw, now=utcnow(), clear_quiet_hours=clear)
        return _json(200, settings.model_dump(mode="json"))

    return app
