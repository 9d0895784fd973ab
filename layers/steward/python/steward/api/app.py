"""Routes of the client API. Handlers stay thin: identify the caller, validate, call a
service, shape the answer. Every read and write is scoped to the JWT `sub`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel

from steward.api.answers import (
    ArtifactList,
    ArtifactUrl,
    ErrorAnswer,
    EventPage,
    LoopSettings,
    PlanDiffView,
    PlanList,
    PlanView,
    RetryAnswer,
    Screen,
    TaskList,
    TaskView,
)
from steward.api.http import install_error_handlers
from steward.api.http import json_response as _json
from steward.api.openapi import OPENAPI_PATH, body_of, document_text
from steward.api.requests import ConfirmBody, PublishBody, parse_body
from steward.api.rounds import RoundsAnswer, rounds_answer
from steward.domain import order, waiting
from steward.domain.errors import Unauthorized
from steward.domain.ids import SLUG_PATTERN
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


# Refusals every route may answer: no or a bad token (at the gateway, or no `sub`), bad input
# naming its field, an id that is not the caller's (or no such route).
_COMMON = (400, 401, 404)
_ERROR_TEXT = {
    400: "bad input: the error's `field` names it",
    401: "no valid token, or it names no user",
    404: "no such resource of the caller's (another user's ids answer 404 too)",
    409: "the lifecycle does not allow it, or a concurrent change won (`conflict`)",
    413: "the body or the document is too large",
    422: "an invalid Task Document: `field` and `line` name what",
}


def _answers(
    ok: type[BaseModel] | None,
    *errors: int,
    status: int = 200,
    description: str = "the answer",
    links: dict[str, Any] | None = None,
) -> dict[int, OpenAPIResponse]:
    """A route's `responses=`: its success answer and the documented JSON errors it gives."""
    success: OpenAPIResponse = {"description": description}
    if ok is not None:
        success["content"] = {"application/json": {"model": ok}}
    if links:
        success["links"] = links
    answers: dict[int, OpenAPIResponse] = {status: success}
    for code in sorted({*_COMMON, *errors}):
        answers[code] = {
            "description": _ERROR_TEXT[code],
            "content": {"application/json": {"model": ErrorAnswer}},
        }
    return answers


def _plan_link(operation_id: str, description: str) -> dict[str, Any]:
    """A link from an answer about the plan `{slug}` to another operation on it."""
    return {
        "operationId": operation_id,
        "parameters": {"slug": "$request.path.slug"},
        "description": description,
    }


# After a publish: the plan it made, to read, submit and confirm (schemathesis' stateful
# phase follows these; clients may too).
_PUBLISH_LINKS = {
    "GetPlan": _plan_link("get_plan", "the published plan"),
    "SubmitPlan": _plan_link("submit_plan", "submit it for confirmation"),
    "ConfirmPlan": _plan_link("confirm_plan", "confirm it"),
}

# Typed query parameters: Powertools validates them (a refusal is a 400 naming the parameter,
# `steward.api.http`) and the OpenAPI document declares them with their bounds.
Limit50 = Annotated[int, Query(ge=1, le=100, description="page size")]
# A plan's slug as the document declares it (a client, or a fuzzer, can tell a valid one);
# Powertools refuses any other with the documented 400 naming `slug`.
Slug = Annotated[str, Path(pattern=SLUG_PATTERN.pattern, description="the plan's slug")]
Cursor = Annotated[str | None, Query(max_length=2048, description="the `next` of the previous page")]


def create_app(
    services: Callable[[], Services], metrics: HandlerMetrics | None = None
) -> APIGatewayHttpResolver:
    """`services` is called per request (cached by the caller) so importing the app does not
    connect to AWS; `metrics` counts the refusals (`Refused<status>`, on the dashboard).

    Each route turns Powertools' validation on for itself (`enable_validation=True`) rather than
    the resolver for all: the resolver-wide flag also declares Powertools' own 422 error shape on
    every operation, which this API never answers (its refusals are `ErrorAnswer`)."""
    app = APIGatewayHttpResolver()

    def caller() -> str:
        claims = app.current_event.request_context.authorizer.jwt_claim or {}
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized("the request carries no authenticated user")
        return sub

    install_error_handlers(app, logger, metrics)

    # ---- plans
    @app.put(
        "/v1/plans/<slug>",
        operation_id="publish_plan",
        summary="Publish (upsert) a Task Document",
        responses=_answers(PlanView, 409, 413, 422, links=_PUBLISH_LINKS),
        enable_validation=True,
    )
    @body_of(PublishBody)
    def publish(slug: Slug) -> Response[str]:
        body = parse_body(app.current_event.body, PublishBody)
        return _json(200, _shown(services(), services().plans.publish(caller(), slug, body.markdown)))

    @app.post(
        "/v1/plans/<slug>/submit",
        operation_id="submit_plan",
        summary="draft -> awaiting_confirmation",
        responses=_answers(PlanView, 409),
        enable_validation=True,
    )
    def submit(slug: Slug) -> Response[str]:
        return _json(200, _shown(services(), services().plans.submit(caller(), slug)))

    @app.post(
        "/v1/plans/<slug>/confirm",
        operation_id="confirm_plan",
        summary="Approve the plan (optionally the content the person reviewed)",
        responses=_answers(PlanView, 409, 413),
        enable_validation=True,
    )
    @body_of(ConfirmBody, required=False)
    def confirm(slug: Slug) -> Response[str]:
        body = parse_body(app.current_event.body, ConfirmBody, optional=True)
        return _json(200, _shown(services(), services().plans.confirm(caller(), slug, body.content_hash)))

    @app.post(
        "/v1/plans/<slug>/archive",
        operation_id="archive_plan",
        summary="Stop the plan; running tasks are cancelled",
        responses=_answers(PlanView, 409),
        enable_validation=True,
    )
    def archive(slug: Slug) -> Response[str]:
        return _json(200, _shown(services(), services().plans.archive(caller(), slug)))

    @app.get(
        "/v1/plans",
        operation_id="list_plans",
        summary="The caller's plans",
        responses=_answers(PlanList),
        enable_validation=True,
    )
    def list_plans(limit: Limit50 = 50, cursor: Cursor = None) -> Response[str]:
        user = caller()
        plans, next_cursor = services().plans.list(user, limit=limit, cursor=cursor)
        seen = _view(services(), user)
        shown = [_shown(services(), p, seen, details=False) for p in plans]
        return _json(200, {"plans": shown, "next": next_cursor})

    @app.get(
        "/v1/plans/<slug>",
        operation_id="get_plan",
        summary="One plan",
        responses=_answers(PlanView),
        enable_validation=True,
    )
    def get_plan(slug: Slug) -> Response[str]:
        return _json(200, _shown(services(), services().plans.get(caller(), slug)))

    @app.get(
        "/v1/plans/<slug>/diff",
        operation_id="diff_plan",
        summary="What changed since the approved content",
        responses=_answers(PlanDiffView),
        enable_validation=True,
    )
    def plan_diff(slug: Slug) -> Response[str]:
        return _json(200, services().plans.diff(caller(), slug).to_api())

    # ---- tasks
    @app.get(
        "/v1/tasks",
        operation_id="list_tasks",
        summary="The caller's tasks",
        responses=_answers(TaskList),
        enable_validation=True,
    )
    def list_tasks(
        limit: Limit50 = 50,
        cursor: Cursor = None,
        plan: Annotated[str | None, Query(description="only this plan's tasks (its slug)")] = None,
    ) -> Response[str]:
        tasks, next_cursor = services().tasks.list(caller(), plan_slug=plan, limit=limit, cursor=cursor)
        return _json(200, {"tasks": [t.to_api() for t in tasks], "next": next_cursor})

    @app.get(
        "/v1/tasks/<task_id>",
        operation_id="get_task",
        summary="One task",
        responses=_answers(TaskView),
        enable_validation=True,
    )
    def get_task(task_id: str) -> Response[str]:
        return _json(200, _shown_task(services(), services().tasks.get(caller(), task_id)))

    @app.get(
        "/v1/tasks/<task_id>/events",
        operation_id="task_events",
        summary="The task's lifecycle events after `after`, in order",
        responses=_answers(EventPage),
        enable_validation=True,
    )
    def task_events(
        task_id: str,
        after: Annotated[int, Query(ge=0, description="the last seq already read")] = 0,
        limit: Annotated[int, Query(ge=1, le=1000, description="page size")] = 100,
    ) -> Response[str]:
        return _json(200, services().tasks.events_after(caller(), task_id, after=after, limit=limit))

    @app.get(
        "/v1/tasks/<task_id>/rounds",
        operation_id="task_rounds",
        summary="The task's follow-up rounds",
        responses=_answers(RoundsAnswer),
        enable_validation=True,
    )
    def task_rounds(task_id: str) -> Response[str]:
        parent, rounds = services().tasks.rounds(caller(), task_id)
        return _json(200, rounds_answer(parent, rounds))

    @app.get(
        "/v1/tasks/<task_id>/screen",
        operation_id="task_screen",
        summary="The bounded final screen tail",
        responses=_answers(Screen),
        enable_validation=True,
    )
    def task_screen(task_id: str) -> Response[str]:
        return _json(200, services().tasks.screen(caller(), task_id))

    @app.get(
        "/v1/tasks/<task_id>/artifacts",
        operation_id="task_artifacts",
        summary="The artifacts that exist, with their sizes",
        responses=_answers(ArtifactList),
        enable_validation=True,
    )
    def task_artifacts(task_id: str) -> Response[str]:
        return _json(200, {"artifacts": list(services().tasks.artifact_list(caller(), task_id))})

    artifact_answers = _answers(ArtifactUrl, description="the presigned URL (`redirect=false`)")
    artifact_answers[302] = {
        "description": "a redirect to the presigned URL (the default)",
        "headers": {"Location": {"description": "the presigned URL", "schema": {"type": "string"}}},
        "content": {"application/json": {"model": ArtifactUrl}},
    }

    @app.get(
        "/v1/tasks/<task_id>/artifacts/<name>",
        operation_id="task_artifact",
        summary="One artifact: a redirect to a short-lived presigned URL",
        responses=artifact_answers,
        enable_validation=True,
    )
    def task_artifact(
        task_id: str,
        name: str,
        redirect: Annotated[
            bool, Query(description="false: the URL in a 200 body (a page cannot follow it)")
        ] = True,
    ) -> Response[str]:
        url = services().tasks.artifact_url(caller(), task_id, name)
        if redirect:
            return _json(302, {"url": url}, headers={"Location": url})
        return _json(200, {"url": url})  # a page's fetch cannot read a cross-origin redirect

    @app.post(
        "/v1/tasks/<task_id>/retry",
        operation_id="retry_task",
        summary="Ask for another attempt of the task's item",
        responses=_answers(RetryAnswer, 409, status=202),
        enable_validation=True,
    )
    def retry_task(task_id: str) -> Response[str]:
        task = services().tasks.retry(caller(), task_id)
        return _json(202, {"task": task.to_api(), "retry": "requested"})

    @app.post(
        "/v1/tasks/<task_id>/cancel",
        operation_id="cancel_task",
        summary="Cancel a queued or running task; withdraw one in review",
        responses=_answers(TaskView, 409),
        enable_validation=True,
    )
    def cancel_task(task_id: str) -> Response[str]:
        return _json(200, services().tasks.cancel(caller(), task_id).to_api())

    # ---- loop settings
    @app.get(
        "/v1/loop",
        operation_id="get_loop",
        summary="The caller's loop settings",
        responses=_answers(LoopSettings),
        enable_validation=True,
    )
    def get_loop() -> Response[str]:
        return _json(200, services().users.loop_settings(caller()).model_dump(mode="json"))

    @app.put(
        "/v1/loop",
        operation_id="put_loop",
        summary="Change some loop settings (only the fields given)",
        responses=_answers(LoopSettings, 409, 413),
        enable_validation=True,
    )
    @body_of(LoopSettingsUpdate)
    def put_loop() -> Response[str]:
        raw = parse_body(app.current_event.body, LoopSettingsUpdate)
        clear = "quiet_hours" in raw.model_fields_set and raw.quiet_hours is None
        settings = services().users.update_loop_settings(caller(), raw, now=utcnow(), clear_quiet_hours=clear)
        return _json(200, settings.model_dump(mode="json"))

    # ---- the document itself
    served: list[str] = []  # generated on the first request: the routes are fixed by then

    @app.get(
        OPENAPI_PATH,
        operation_id="openapi",
        summary="This OpenAPI document",
        responses={
            200: {
                "description": "the document",
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            401: {"description": _ERROR_TEXT[401], "content": {"application/json": {"model": ErrorAnswer}}},
        },
        enable_validation=True,
    )
    def openapi() -> Response[str]:
        # No caller needed: it describes the API, says nothing of anyone's data, and is
        # committed in the repository. The gateway still asks for a token (its `/v1/*` route
        # is behind the JWT authorizer), as the document's `security` says.
        if not served:
            served.append(document_text(app))
        return Response(status_code=200, content_type="application/json", body=served[0])

    return app
