"""The bounded tool loop: model turns through the relay, tools gated by phase (docs/concepts/runner.md).

Each turn offers only the tools of the current phase (`steward.domain.phases`). A call the
phase does not offer is answered with a recoverable error and never executed; the phase
machine counts it. Tool output reaches the model redacted and bounded, and the conversation
is kept under the relay's body bound by eliding the oldest tool results. The summary turn is
a fresh, tool-free conversation about the finished change, so no phase ever sees a tool
schema it may not use. Every turn, call, result and phase change goes to `harness.json`
through `record`, redacted of every credential shape (generic ones included).

What is sent to the model passes `Redactor.for_model` as a whole, every turn: the secrets the
runtime holds (its capability, its ticket, its GitHub tokens) and every GitHub token or
Steward credential are gone from the task's own text, the tool results and the model's own
earlier calls, so the relay, which refuses a body carrying one, never refuses the runner's.

What comes back is the model's, and no model output can break the run: text that is not
valid Unicode (a lone surrogate) is replaced by U+FFFD, and a tool call whose arguments hold
such text is answered as an invalid call and never run; a tool name or call id the relay
would refuse to see again is replaced by one it accepts.

A 400 from the relay is Steward's own fault (the harness built the request, and the relay
never refuses it for the model's text or the person's plan): the refused request goes to
`harness.json` (redacted, bounded) with the relay's error, and `RelayRefused` ends the run.

`max_seconds` holds inside a turn too: each model call gets the time left as its timeout
(a model that raises `TimeoutError` ends the run at its time limit), each tool's git
commands and each check are bounded by it, and no tool runs once it is spent.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import BaseModel

from steward.adapters.runtime_api import RuntimeApiError
from steward.domain.converse import is_valid_text, text_fields, valid_text
from steward.domain.follow_ups import round_prompt
from steward.domain.models import Task
from steward.domain.phases import (
    VERIFY_TOOL,
    WRITE_TOOLS,
    EndReason,
    HarnessLimits,
    Phase,
    RunState,
    admit,
    after_check,
    after_edit,
    after_text,
    begin_turn,
    refuse_arguments,
)
from steward.domain.redaction import Redactor
from steward.runner.sandbox import CommandRefused, CommandResult, Sandbox, VerifyArgs, parse_allowlist
from steward.runner.workspace import TOOL_ARGS, TOOL_DESCRIPTIONS, ToolError, Workspace

ELIDED = "[an earlier tool result, elided to keep the conversation within its bound]"
_RECORD_CHARS = 4000
_SUMMARY_CHARS = 6000
# How much of a request the relay refused harness.json keeps: its start shows the shape
# (system, the first messages, the inference settings) the relay objected to.
REFUSED_REQUEST_CHARS = 16_000
VERIFY_DESCRIPTION = (
    "Run one of the plan's required checks exactly as listed (no shell, no extra arguments), "
    "in a sandbox without network. Returns its exit code and output tail."
)

_LOG = logging.getLogger(__name__)


class Cancelled(Exception):
    """The task was cancelled (or lost to the reaper) while the run went on."""


class RelayRefused(Exception):
    """The relay answered 400 to one of the harness's own requests (recorded in harness.json)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class Model(Protocol):
    def __call__(self, request: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """The Converse reply to `request`; `TimeoutError` once `timeout` seconds passed."""
        ...


class _OutOfTime(Exception):
    """The run's `max_seconds` ran out inside a turn."""


Emit = Callable[[str, dict[str, Any]], None]


@dataclass
class Outcome:
    completed: bool
    summary: str = ""
    end: str = ""  # an EndReason value when not completed
    detail: str = ""
    turns: int = 0
    checks: list[dict[str, Any]] = field(default_factory=list)


def tool_config(names: Sequence[str]) -> dict[str, Any] | None:
    """The Converse toolConfig offering exactly `names`."""
    if not names:
        return None
    tools = []
    for name in names:
        model: type[BaseModel] = VerifyArgs if name == VERIFY_TOOL else TOOL_ARGS[name]
        description = VERIFY_DESCRIPTION if name == VERIFY_TOOL else TOOL_DESCRIPTIONS[name]
        tools.append(
            {
                "toolSpec": {
                    "name": name,
                    "description": description,
                    "inputSchema": {"json": model.model_json_schema()},
                }
            }
        )
    return {"tools": tools}


def system_prompt(task: Task) -> str:
    checks = "\n".join(f"- `{c}`" for c in task.checks)
    return (
        "You are Steward's coding agent. You change one git repository to complete one task, "
        "then a person reviews your change as a pull request. You act only through the tools "
        "offered in each turn; Steward commits, pushes and opens the pull request itself.\n\n"
        "The run has phases. In `edit` you inspect and change files (list_files, search_text, "
        "read_file, write_file, replace_in_file); end your turn without a tool call when the "
        "change is complete. In `verify` you run each required check with run_verification; a "
        "failing check returns you to `edit`. When all pass you write a short summary of the "
        "change for the pull request.\n\n"
        f"Required checks (all must pass):\n{checks}\n\n"
        "Paths are relative to the repository root. `.git` is off limits. replace_in_file "
        "needs text that occurs exactly once; read the file first."
    )


def task_text(task: Task) -> str:
    details = f"\n\nDetails:\n{task.details}" if task.details.strip() else ""
    return f"Task: {task.title}{details}"


def task_prompt(task: Task, failing: Sequence[str] = ()) -> str:
    """The first user message. `failing`: the required checks that failed on the clone as
    it was handed over (a follow-up round's baseline), said up front."""
    asked = f"\n\n{round_prompt(task.trigger or {}, task.round)}" if task.is_round else ""
    if failing:
        named = ", ".join(f"`{command}`" for command in failing)
        asked += f"\n\nBefore any change, these required checks fail on the branch: {named}."
    return f"{task_text(task)}{asked}\n\nStart by inspecting the repository."


class Harness:
    def __init__(
        self,
        task: Task,
        workspace: Workspace,
        sandbox: Sandbox,
        model: Model,
        redactor: Redactor,
        *,
        limits: HarnessLimits | None = None,
        record: Callable[[dict[str, Any]], None] = lambda _: None,
        emit: Emit = lambda _t, _d: None,
        on_output: Callable[[bytes], None] | None = None,
        cancel: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        failing_at_start: Sequence[str] = (),
    ) -> None:
        self.task = task
        self.failing_at_start = tuple(failing_at_start)
        self.workspace = workspace
        self.sandbox = sandbox
        self.model = model
        self.redactor = redactor
        self.outgoing = redactor.for_model()  # what every request to the model passes
        self.limits = limits or HarnessLimits()
        self.record = record
        self.emit = emit
        self.on_output = on_output
        self.cancel = cancel or threading.Event()
        self.clock = clock
        self.argv_of = parse_allowlist(task.checks)  # listed check -> its argv
        self.required = frozenset(self.argv_of)
        self.checks: list[dict[str, Any]] = []
        self._deadline = clock() + self.limits.max_seconds  # set again when the run starts

    # ---- the loop
    def run(self) -> Outcome:
        self._deadline = self.clock() + self.limits.max_seconds
        state = RunState()
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"text": task_prompt(self.task, self.failing_at_start)}]}
        ]
        self.emit("phase", {"phase": state.phase.value, "turn": 0})
        while not state.finished:
            self._check_cancel()
            if self._remaining() <= 0:
                state = replace(state, ended=EndReason.TIME_LIMIT, note="the run used its time")
                break
            state = begin_turn(state, self.limits)
            if state.ended is not None:
                break
            try:
                if state.phase is Phase.SUMMARY:
                    summary = self._summarize(state)
                    state = after_text(state, self.required, self.limits)
                    return self._outcome(state, completed=True, summary=summary)
                previous = state.phase
                reply = self._ask(state, messages)
            except _OutOfTime:
                state = replace(
                    state, ended=EndReason.TIME_LIMIT, note="the run used its time during a model call"
                )
                break
            blocks, unusable = _assistant_blocks(reply, turn=state.turns)
            messages.append({"role": "assistant", "content": blocks})
            uses = [b["toolUse"] for b in blocks if "toolUse" in b]
            turn: dict[str, Any] = {
                "kind": "turn",
                "turn": state.turns,
                "phase": state.phase.value,
                "stop_reason": reply.get("stopReason"),
                "cost_usd": (reply.get("steward") or {}).get("cost_usd"),
                "text": self._bounded(" ".join(b["text"] for b in blocks if "text" in b), _RECORD_CHARS),
                "calls": [],
            }
            if uses:
                state, content = self._calls(state, uses, unusable, turn["calls"])
            else:
                state, content = after_text(state, self.required, self.limits), []
            self.record(turn)
            if state.phase is not previous:
                self.record({"kind": "phase", "from": previous.value, "to": state.phase.value})
                self.emit("phase", {"phase": state.phase.value, "turn": state.turns})
            answered = {r["toolResult"]["toolUseId"] for r in content}
            for use in uses:  # every toolUse needs its result, even after the run ended
                if use["toolUseId"] not in answered:
                    content.append(_result(use["toolUseId"], "not run: the run ended", error=True))
            if state.note:
                content.append({"text": f"[{state.phase.value} phase] {state.note}"})
            if not content:
                content.append({"text": f"[{state.phase.value} phase] continue"})
            messages.append({"role": "user", "content": content})
        return self._outcome(state, completed=False)

    def _calls(
        self,
        state: RunState,
        uses: list[dict[str, Any]],
        unusable: Mapping[str, str],
        calls: list[dict[str, Any]],
    ) -> tuple[RunState, list[dict[str, Any]]]:
        """Run a turn's tool calls in order, until the run ends (its time included)."""
        content: list[dict[str, Any]] = []
        for use in uses:
            if self._remaining() <= 0:
                return replace(state, ended=EndReason.TIME_LIMIT, note="the run used its time"), content
            state, result = self._call(state, use, calls, unusable.get(use["toolUseId"]))
            content.append(result)
            if state.finished:
                break
        return state, content

    def _outcome(self, state: RunState, *, completed: bool, summary: str = "") -> Outcome:
        outcome = Outcome(
            completed=completed,
            summary=summary,
            end="" if completed else (state.ended.value if state.ended else "stopped"),
            detail=state.note,
            turns=state.turns,
            checks=self.checks,
        )
        self.record(
            {
                "kind": "end",
                "completed": completed,
                "end": outcome.end,
                "detail": state.note,
                "turns": state.turns,
                "invalid_calls": state.invalid_calls,
                "repair_rounds": state.repair_rounds,
                "summary": self._bounded(summary, _SUMMARY_CHARS),
            }
        )
        return outcome

    # ---- one model turn
    def _ask(self, state: RunState, messages: list[dict[str, Any]]) -> dict[str, Any]:
        self._bound(messages)
        request: dict[str, Any] = {
            "system": [{"text": system_prompt(self.task)}],
            "messages": messages,
            "inferenceConfig": {"maxTokens": self.limits.max_output_tokens},
        }
        config = tool_config(state.offered)
        if config is not None:
            request["toolConfig"] = config
        return self._send(request)

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        """One model call: the request redacted for the model as a whole, the time left as
        its timeout."""
        remaining = self._remaining()
        if remaining <= 0:
            raise _OutOfTime
        outgoing: dict[str, Any] = self.outgoing.clean(request)
        try:
            reply = self.model(outgoing, timeout=remaining)
        except TimeoutError:
            raise _OutOfTime from None
        except RuntimeApiError as exc:
            if exc.status != 400:
                raise
            error = self._bounded(str(exc), _RECORD_CHARS)
            text = _compact(outgoing)
            self.record(
                {
                    "kind": "refused",
                    "status": exc.status,
                    "code": exc.code,
                    "error": error,
                    "request_chars": len(text),
                    "request": self._bounded(text, REFUSED_REQUEST_CHARS),
                }
            )
            raise RelayRefused(error) from None
        self._check_cancel()
        return reply

    def _summarize(self, state: RunState) -> str:
        changed = self.workspace.changed_paths()
        checks = "\n".join(
            f"- `{c['command']}`: {'passed' if c['passed'] else 'failed'}" for c in self.checks[-10:]
        )
        prompt = (
            f"{task_text(self.task)}\n\n"
            f"Files changed: {', '.join(changed) or 'none'}\n"
            f"Checks:\n{checks or '- none run'}\n\n"
            "Write the pull request description: what changed and why, in a few sentences or "
            "bullets. Plain Markdown, no preamble."
        )
        request = {
            "system": [{"text": "You summarize a finished code change for its reviewers."}],
            "messages": [{"role": "user", "content": [{"text": prompt}]}],
            "inferenceConfig": {"maxTokens": min(self.limits.max_output_tokens, 1024)},
        }
        reply = self._send(request)
        blocks, _ = _assistant_blocks(reply, turn=state.turns)
        text = " ".join(b["text"] for b in blocks if "text" in b).strip()
        self.record(
            {
                "kind": "turn",
                "turn": state.turns,
                "phase": Phase.SUMMARY.value,
                "text": self._bounded(text, 4000),
            }
        )
        return self._bounded(text or self.task.title, _SUMMARY_CHARS)

    # ---- one tool call
    def _call(
        self,
        state: RunState,
        use: Mapping[str, Any],
        calls: list[dict[str, Any]],
        unusable: str | None = None,
    ) -> tuple[RunState, dict[str, Any]]:
        """Run one tool call; `unusable` names the argument whose text was not valid Unicode."""
        name, tool_id = str(use.get("name", "")), str(use.get("toolUseId", ""))
        given = use.get("input")
        raw: dict[str, Any] = given if isinstance(given, dict) else {}
        entry: dict[str, Any] = {"tool": name[:64], "input": self._bounded(_compact(raw), _RECORD_CHARS)}
        calls.append(entry)
        state, verdict = admit(state, name, self.limits)
        if verdict.allowed and unusable is not None:
            state, verdict = refuse_arguments(
                state,
                self.limits,
                f"{name}: the argument {unusable} is not valid UTF-8 text (a lone surrogate); "
                "the call was not run: call again with valid text",
            )
        if not verdict.allowed:
            entry |= {"allowed": False, "ok": False, "result": verdict.error}
            # The runtime's log says why a run ends on invalid calls without its artifacts
            # (repr: the model's text cannot forge a log line; the log handlers redact).
            _LOG.info(
                "refused %r (%d of %d): %r",
                name[:64],
                state.invalid_calls,
                self.limits.max_invalid_calls,
                verdict.error[:300],
            )
            return state, _result(tool_id, verdict.error, error=True)
        entry["allowed"] = True
        if name == VERIFY_TOOL:
            return self._verify(state, tool_id, raw, entry)
        try:
            text = self.workspace.call(name, raw, seconds=self._remaining())
        except ToolError as exc:
            message = self.outgoing.bounded(str(exc), self.limits.max_result_chars)
            _LOG.info("%r failed: %r", name[:64], message[:300])
            entry |= {"ok": False, "result": self._bounded(message, _RECORD_CHARS)}
            return state, _result(tool_id, message, error=True)
        if name in WRITE_TOOLS:
            state = after_edit(state)
        text = self.outgoing.bounded(text, self.limits.max_result_chars)
        entry |= {"ok": True, "result": self._bounded(text, _RECORD_CHARS)}
        return state, _result(tool_id, text)

    def _verify(
        self, state: RunState, tool_id: str, raw: Mapping[str, Any], entry: dict[str, Any]
    ) -> tuple[RunState, dict[str, Any]]:
        try:
            command = VerifyArgs.model_validate(raw).command
            result = self.sandbox.run(
                command, on_output=self.on_output, cancel=self.cancel, wall_seconds=self._remaining()
            )
        except (ValueError, CommandRefused) as exc:  # pydantic's ValidationError is a ValueError
            message = self.outgoing.bounded(f"run_verification refused: {exc}", 2000)
            entry |= {"ok": False, "result": message}
            return state, _result(tool_id, message, error=True)
        self._check_cancel()
        check = self.check_record(result, stage="loop")
        canonical = next((c for c, argv in self.argv_of.items() if argv == result.argv), command)
        if not result.passed and self._remaining() <= 0:
            # Stopped by the run's deadline, not by its own limit: not a failing check to repair.
            state = replace(state, ended=EndReason.TIME_LIMIT, note=f"the run used its time during {command}")
        else:
            state = after_check(state, canonical, result.passed, self.required, self.limits)
        output = self.outgoing.bounded(result.output, self.limits.max_result_chars - 200, tail=True)
        text = f"{_describe(result)}\n{output}"
        entry |= {"ok": result.passed, "result": self._bounded(text, _RECORD_CHARS), "check": check}
        return state, _result(tool_id, text, error=not result.passed)

    def check_record(self, result: CommandResult, *, stage: str) -> dict[str, Any]:
        """Record a check run (for the pull request body, events and harness.json)."""
        check = {
            "command": result.command,
            "passed": result.passed,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "output_truncated": result.output_truncated,
            "write_limit_exceeded": result.write_limit_exceeded,
            "duration_s": round(result.duration_s, 3),
            "stage": stage,
        }
        self.checks.append(check)
        self.emit("check", check)
        # The runtime's log says how each check ended, and a failed one's last lines: why a
        # run went back to editing is then readable without its artifacts (the handlers redact).
        _LOG.info(
            "check %r (%s) %s: exit %s%s%s%s, %.1f s",
            result.command,
            stage,
            "passed" if result.passed else "failed",
            result.exit_code,
            ", timed out" if result.timed_out else "",
            ", output limit" if result.output_truncated else "",
            ", write limit" if result.write_limit_exceeded else "",
            result.duration_s,
        )
        if not result.passed:
            _LOG.info("check %r output ends: %r", result.command, self._bounded(result.output[-600:], 600))
        return check

    # ---- helpers
    def _bounded(self, text: str, limit: int) -> str:
        """For records and the summary: every credential shape redacted (`self.outgoing`
        redacts what goes to the model, where fixtures must stay readable)."""
        return self.redactor.bounded(text, limit)

    def _remaining(self) -> float:
        return self._deadline - self.clock()

    def _bound(self, messages: list[dict[str, Any]]) -> None:
        """Elide the oldest tool results until the conversation fits its byte bound."""
        for message in messages:
            if len(_compact(messages).encode("utf-8", "surrogatepass")) <= self.limits.max_conversation_bytes:
                return
            for block in message["content"]:
                result = block.get("toolResult")
                if result and result["content"] != [{"text": ELIDED}]:
                    result["content"] = [{"text": ELIDED}]

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise Cancelled("the task was cancelled")


def _assistant_blocks(reply: Mapping[str, Any], *, turn: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The text and toolUse blocks of a Converse reply, as the relay accepts them back, and
    the calls whose arguments held text that is not valid Unicode (call id -> the argument).

    Such text is replaced by U+FFFD wherever it is (the blocks go back to the relay with the
    next turn, and into records); a call id or tool name the relay would refuse is replaced
    by one it accepts (a made-up name is then answered as an unknown tool)."""
    message = ((reply.get("output") or {}).get("message") or {}) if isinstance(reply, Mapping) else {}
    blocks: list[dict[str, Any]] = []
    unusable: dict[str, str] = {}
    seen: set[str] = set()
    content = message.get("content") if isinstance(message, Mapping) else None
    for index, block in enumerate(content if isinstance(content, list) else []):
        if isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"]:
            blocks.append({"text": valid_text(block["text"])})
        elif isinstance(block, dict) and isinstance(block.get("toolUse"), dict):
            use = block["toolUse"]
            given = use.get("input") if isinstance(use.get("input"), dict) else {}
            tool_id = valid_text(str(use.get("toolUseId", "")))
            if not _CONVERSE_NAME.fullmatch(tool_id) or tool_id in seen:
                tool_id = f"tooluse_steward_{turn}_{index}"
            seen.add(tool_id)
            name = valid_text(str(use.get("name", "")))
            if _deeper_than(given, _MAX_INPUT_DEPTH):
                unusable[tool_id] = f"input (nested deeper than {_MAX_INPUT_DEPTH} levels)"
                given = {}
            bad = next(
                (where for where, text in text_fields(given, "input") if not is_valid_text(text)), None
            )
            if bad is not None:
                unusable[tool_id] = bad
            blocks.append(
                {
                    "toolUse": {
                        "toolUseId": tool_id,
                        "name": name if _CONVERSE_NAME.fullmatch(name) else "invalid_tool_name",
                        "input": _valid(given),
                    }
                }
            )
    return blocks or [{"text": "(no answer)"}], unusable


_CONVERSE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # Bedrock's pattern for tool names and call ids
# No tool takes nesting anywhere near this; the bound keeps every recursive walk of a
# model's arguments (JSON, redaction, records) far from the interpreter's recursion limit.
_MAX_INPUT_DEPTH = 64


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether the JSON value nests containers more than `limit` deep (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _valid(value: Any) -> Any:
    """A JSON value with every string (keys too) made valid Unicode (`valid_text`)."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_text(str(k)): _valid(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid(v) for v in value]
    return value


def _result(tool_id: str, text: str, *, error: bool = False) -> dict[str, Any]:
    return {
        "toolResult": {
            "toolUseId": tool_id,
            "content": [{"text": text or "(empty)"}],
            "status": "error" if error else "success",
        }
    }


def _describe(result: CommandResult) -> str:
    if result.timed_out:
        status = "timed out (the whole process group was killed)"
    elif result.write_limit_exceeded:
        status = (
            "stopped: it wrote more into the repository than the bound allows (nothing it wrote was kept)"
        )
    elif result.output_truncated:
        status = "killed: its output exceeded the bound"
    else:
        status = f"exit code {result.exit_code}"
    return f"`{result.command}`: {status} after {result.duration_s:.1f} s"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
