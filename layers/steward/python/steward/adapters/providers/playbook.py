"""Playbooks for the scripted provider: a deterministic stand-in for a coding model.

A playbook is JSON: `{"plays": [{"match", "steps", "loop_from", "summary"}, ...]}`. The
play is the first whose `match` occurs (case-insensitively) in the conversation's first
user message — the runner's task prompt — and an empty `match` matches everything. Step `n`
answers the request that already holds `n` assistant messages; a step is either
`{"tool": name, "input": {...}}` (a toolUse) or `{"text": "..."}`. Past the last step the
play repeats from `loop_from` if set, else answers "done". A request offering no tools is
the runner's summary turn and gets the play's `summary`. A conversation no play matches is
refused (`ModelCannotAnswer`, 422): the scripted model can do nothing else, so the runner
ends the task `failed` `final` at its first call, saying to write a playbook or use a real
model (docs/getting-started/your-own-plan.md documents the format).

The reply is a pure function of the request, as the relay's budget tests need. The
packaged playbook (data/playbook.json) drives the demo's sample repository;
`STEWARD_SCRIPTED_PLAYBOOK` names a file that replaces it (tests use their own).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from steward.domain.converse import ConverseRequest, TextBlock
from steward.domain.errors import ModelCannotAnswer

PLAYBOOK_ENV = "STEWARD_SCRIPTED_PLAYBOOK"


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str | None = None
    input: dict[str, Any] = Field(default_factory=dict)
    text: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        if (self.tool is None) == (self.text is None):
            raise ValueError("a step is either a tool call or a text")
        return self


class Play(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    match: str = ""
    steps: tuple[Step, ...]
    loop_from: int | None = Field(default=None, ge=0)
    summary: str = "Made the requested change; the required checks pass."

    def step(self, index: int) -> Step:
        if index < len(self.steps):
            return self.steps[index]
        if self.loop_from is not None and self.loop_from < len(self.steps):
            span = len(self.steps) - self.loop_from
            return self.steps[self.loop_from + (index - len(self.steps)) % span]
        return Step(text="done")


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    plays: tuple[Play, ...]

    @classmethod
    def load(cls, environ: Mapping[str, str]) -> Playbook:
        """The playbook `STEWARD_SCRIPTED_PLAYBOOK` names, or the packaged one; read once per
        path (the relay builds a provider per call, and that must do no I/O)."""
        return _load(environ.get(PLAYBOOK_ENV, ""))

    def reply(self, request: ConverseRequest, *, source: str = "") -> dict[str, Any]:
        """The Converse content block this playbook answers `request` with;
        `ModelCannotAnswer` when no play matches (`source`: the playbook's file, empty for
        the packaged one)."""
        first = next((m for m in request.messages if m.role == "user"), None)
        prompt = " ".join(b.text for b in first.content if isinstance(b, TextBlock)) if first else ""
        play = next((p for p in self.plays if p.match.lower() in prompt.lower()), None)
        if play is None:
            raise ModelCannotAnswer(no_play(source))
        if request.toolConfig is None:
            return {"text": play.summary}
        turn = sum(1 for m in request.messages if m.role == "assistant")
        step = play.step(turn)
        if step.text is not None:
            return {"text": step.text}
        return {"toolUse": {"toolUseId": f"tooluse_play_{turn}", "name": step.tool, "input": step.input}}


def no_play(source: str) -> str:
    """Why the scripted model cannot answer, and what to do: short enough to reach the
    task's reason whole (the runner keeps 300 characters)."""
    which = f"the playbook {Path(source).name}" if source else "the packaged playbook (demo and smoke test)"
    return (
        f"the scripted model has no play for this task in {which}. Write a playbook whose "
        f"`match` is in the item's text, named by {PLAYBOOK_ENV}, or use a real model "
        "(docs/getting-started/your-own-plan.md)"
    )


@cache
def _load(path: str) -> Playbook:
    if path:
        raw = Path(path).read_text(encoding="utf-8")
    else:
        raw = resources.files("steward").joinpath("data/playbook.json").read_text(encoding="utf-8")
    return Playbook.model_validate(json.loads(raw))
