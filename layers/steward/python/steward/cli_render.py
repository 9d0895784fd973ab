"""How the CLI (and the demo) show plans, tasks and loop settings as text tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _short(text: str | None, width: int = 48) -> str:
    text = text or ""
    return text if len(text) <= width else text[: width - 1] + "…"


def render_plan(plan: dict[str, Any]) -> str:
    fixture = ", local fixture" if plan.get("kind") == "fixture" else ""  # `steward local capability`
    head = (
        f"plan {plan['slug']}  ({plan['status']}{fixture})\n"
        f"  title:   {plan.get('title') or '-'}\n"
        f"  repo:    {plan['repo']}\n"
        f"  content: {plan['content_hash'][:12]}"
        + (
            "  (approved)"
            if plan.get("approved_hash") == plan["content_hash"]
            else "  (not approved)"
            if plan["status"] != "draft"
            else ""
        )
    )
    rows = [
        (
            i["ordinal"] if i["ordinal"] is not None else "-",
            i["status"],
            _short(i["title"]),
            i["task_id"] or "-",
            waiting_text(i.get("waiting")),
        )
        for i in plan["items"]
    ]
    outcomes = plan.get("outcomes")
    if outcomes is not None:
        head += f"\n  outcome: {_outcomes(outcomes)}\n  cost:    {plan.get('cost_usd', '0')} USD"
    return head + "\n\n" + table(rows, ("#", "status", "item", "task", "waiting"))


def waiting_text(waiting: dict[str, Any] | None) -> str:
    """`quiet_hours until 2026-06-01T13:30:00Z: quiet hours (11:00-13:30 UTC)`, or `-`."""
    if not waiting:
        return "-"
    until = f" until {waiting['until']}" if waiting.get("until") else ""
    return f"{waiting['reason']}{until}: {waiting.get('detail') or ''}".rstrip(": ")


def _outcomes(outcomes: dict[str, int]) -> str:
    """`2 merged, 1 failed`: the non-zero counts, or `-` before any item ended."""
    return ", ".join(f"{n} {status}" for status, n in outcomes.items() if n) or "-"


def render_plans(plans: list[dict[str, Any]]) -> str:
    rows = []
    for p in plans:
        done = sum(1 for i in p["items"] if i["status"] in ("merged", "closed", "failed", "done", "removed"))
        rows.append(
            (
                p["slug"],
                p["status"],
                p["repo"],
                f"{done}/{len(p['items'])}",
                _outcomes(p.get("outcomes") or {}),
                p.get("cost_usd", "-"),
                p["updated_at"],
            )
        )
    return table(rows, ("slug", "status", "repo", "finished", "outcome", "cost", "updated"))


def render_tasks(tasks: list[dict[str, Any]]) -> str:
    rows = [
        (t["id"], t["plan_slug"], t["ordinal"], t["attempt"], t["status"], t["cost_usd"], t["pr_url"] or "-")
        for t in tasks
    ]
    return table(rows, ("task", "plan", "#", "attempt", "status", "cost", "pr"))


TASK_FIELDS: tuple[str, ...] = (
    *("id", "plan_slug", "ordinal", "title", "revision", "attempt", "status", "classification", "reason"),
    *("branch", "repo", "model", "budget_usd", "cost_usd", "pr_url", "created_at", "updated_at"),
)


def render_task(task: dict[str, Any]) -> str:
    lines = [f"{k + ':':16}{'-' if task.get(k) is None else task[k]}" for k in TASK_FIELDS]
    if "waiting" in task:
        lines.append(f"{'waiting:':16}{waiting_text(task['waiting'])}")
    return "\n".join(lines)


def render_loop(settings: dict[str, Any]) -> str:
    quiet = settings.get("quiet_hours")
    shown = dict(settings, quiet_hours=f"{quiet['start']}-{quiet['end']}" if quiet else "none")
    return "\n".join(f"{k + ':':18}{v}" for k, v in shown.items())
