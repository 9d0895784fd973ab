"""The shapes of the client API's answers, for its OpenAPI document (`steward.api.openapi`).

The routes build their answers with the domain models' `to_api()` (DESIGN section 4 fixes
those outputs); these models describe them, field for field, so the document says what the
code answers and a schema-conformance check (tests/integration/test_api_fuzz.py) proves it.
Answers may gain fields ("more fields may be added"), so no model forbids extra keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from steward.domain.loop import LoopSettings
from steward.domain.models import Classification, ItemStatus, PlanStatus, TaskStatus

__all__ = [
    "ArtifactList",
    "ArtifactUrl",
    "ErrorAnswer",
    "EventPage",
    "LoopSettings",
    "PlanDiffView",
    "PlanList",
    "PlanView",
    "RetryAnswer",
    "Screen",
    "TaskList",
    "TaskView",
]

# A value of the Task Document's front matter as the author wrote it (validated at publish).
JsonValue = Any


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable, e.g. bad_request, not_found, lifecycle")
    message: str
    field: str | None = Field(default=None, description="the request field at fault, when one is")
    line: int | None = Field(default=None, description="the Task Document line at fault (422)")


class ErrorAnswer(BaseModel):
    """Every refusal and failure: `{"error": {"code", "message", "field"?, "line"?}}`."""

    error: ErrorDetail


class Waiting(BaseModel):
    reason: str
    until: str | None
    detail: str


class Failure(BaseModel):
    code: str
    remedy: str
    who: str
    detail: str | None


class EarlierReview(BaseModel):
    task_id: str
    revision: int
    attempt: int
    pr_url: str | None


class ItemRounds(BaseModel):
    used: int
    allowed: int


class PlanItemView(BaseModel):
    ordinal: int | None = Field(description="as displayed; null for a removed item")
    key: str
    title: str
    status: ItemStatus
    task_id: str | None
    revision: int
    checked: bool
    repo: str
    after: list[int]
    details: str | None = Field(default=None, description="left out by the list route")
    waiting: Waiting | None
    earlier_reviews: list[EarlierReview]
    rounds: ItemRounds | None


class MaxSpend(BaseModel):
    usd: str
    items: int
    budget_usd: str
    attempts: int
    follow_ups: int


class PlanView(BaseModel):
    """A plan (`Plan.to_api` and what `steward.api.app:_shown` adds)."""

    id: str
    slug: str
    status: PlanStatus
    repo: str
    title: str
    content_hash: str
    approved_hash: str | None
    kind: str
    front_matter: dict[str, JsonValue]
    base: JsonValue
    model: JsonValue
    budget_usd: JsonValue
    checks: list[str]
    setup: list[str]
    max_attempts: int
    follow_ups: int
    items: list[PlanItemView]
    created_at: str
    updated_at: str
    outcomes: dict[str, int]
    cost_usd: str
    max_spend: MaxSpend
    blocked: bool


class PlanList(BaseModel):
    plans: list[PlanView]
    next: str | None = Field(description="the cursor of the next page; null on the last")


class ItemChange(BaseModel):
    ordinal: int | None
    approved_ordinal: int | None
    title: str
    change: str
    fields: list[str]


class PlanDiffView(BaseModel):
    approved_hash: str | None
    current_hash: str
    front_matter: dict[str, list[JsonValue]] = Field(description="key: [approved value, current value]")
    items: list[ItemChange]


class TaskView(BaseModel):
    """A task (`Task.to_api`); the single-task route adds `waiting`."""

    id: str
    plan_slug: str
    ordinal: int
    item_key: str
    revision: int
    attempt: int
    kind: str
    title: str
    status: TaskStatus
    classification: Classification | None
    reason: str | None
    failure: Failure | None
    branch: str
    repo: str
    model: str
    budget_usd: str
    pr_url: str | None
    head_sha: str | None
    parent: str | None
    round: int
    rounds_used: int
    follow_ups: int | None
    pr_close_pending: bool
    cost_usd: str
    over_reported_usd: str
    created_at: str
    updated_at: str
    waiting: Waiting | None = Field(default=None, description="the single-task route only")


class TaskList(BaseModel):
    tasks: list[TaskView]
    next: str | None


class Event(BaseModel):
    seq: int
    type: str
    at: str
    data: dict[str, JsonValue]


class EventPage(BaseModel):
    events: list[Event]
    next: int = Field(description="the `after` of the next call")


class Screen(BaseModel):
    task_id: str
    screen: str


class Artifact(BaseModel):
    name: str
    size: int


class ArtifactList(BaseModel):
    artifacts: list[Artifact]


class ArtifactUrl(BaseModel):
    url: str = Field(description="a short-lived presigned URL")


class RetryAnswer(BaseModel):
    task: TaskView
    retry: str
