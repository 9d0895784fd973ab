"""How the CLI (and the demo) show plans, tasks and loop settings as text tables."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from steward.domain.document_limits import DEFAULT_FOLLOW_UPS


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def _short(text: str | None, width: int = 48) -> str:
    text = text or ""
    return text if len(text) <= width else text[: width - 1] + "…"


def render_plan(plan: dict[str, Any], *, full: bool = False) -> str:
    """The plan's state and items; `full` (`steward plan show`) adds what confirming it
    approves: the front matter, and each item's whole title and details."""
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
            visible(_short(_where(i, plan) + i["title"])),
            i["task_id"] or "-",
            waiting_text(i.get("waiting")),
        )
        for i in plan["items"]
    ]
    outcomes = plan.get("outcomes")
    if outcomes is not None:
        head += f"\n  outcome: {_outcomes(outcomes)}\n  cost:    {plan.get('cost_usd', '0')} USD"
    if plan.get("blocked"):
        head += "\n  blocked: every item still to do waits on one that ended without a merge"
    shown = (
        table(rows, ("#", "status", "item", "task", "waiting"))
        + _earlier_reviews(plan["items"])
        + _rounds(plan["items"])
    )
    if not full:
        return head + "\n\n" + shown
    return head + "\n\n" + _approves(plan) + "\n\n" + shown + "\n\n" + _item_details(plan["items"])


def _where(item: dict[str, Any], plan: dict[str, Any]) -> str:
    """`owner/name: ` before the title of an item in a repository other than the plan's."""
    repo = item.get("repo")
    return f"{repo}: " if repo and repo != plan["repo"] else ""


def _rounds(items: list[dict[str, Any]]) -> str:
    """The follow-up rounds of each item in review: used of allowed."""
    lines = [
        f"  #{i['ordinal']}: {i['rounds']['used']} of {i['rounds']['allowed']} used"
        for i in items
        if i.get("rounds") and i["status"] == "review"
    ]
    return "\n\nfollow-up rounds:\n" + "\n".join(lines) if lines else ""


def _earlier_reviews(items: list[dict[str, Any]]) -> str:
    """The tasks of an item's earlier revisions whose pull requests are still open: the
    item's row names its new revision's task only."""
    lines = [
        f"  #{i['ordinal'] if i['ordinal'] is not None else '-'}: revision {r['revision']} "
        f"is still in review: task {r['task_id']}, {r['pr_url'] or 'its pull request'} "
        "(open until merged or closed)"
        for i in items
        for r in i.get("earlier_reviews") or ()
    ]
    return "\n\nearlier revisions awaiting review:\n" + "\n".join(lines) if lines else ""


def max_spend_text(spend: dict[str, Any]) -> str:
    """`at most 5.00 USD (2 pending items x 0.50 USD x (3 attempts + 2 follow-up rounds)), plus
    up to 0.50 USD per retry you ask for`."""
    items = "item" if spend["items"] == 1 else "items"
    attempts = "attempt" if spend["attempts"] == 1 else "attempts"
    rounds = int(spend.get("follow_ups", 0))
    runs = f"{spend['attempts']} {attempts}"
    if rounds:
        runs = f"({runs} + {rounds} follow-up round{'' if rounds == 1 else 's'})"
    return (
        f"at most {spend['usd']} USD ({spend['items']} pending {items} x {spend['budget_usd']} USD "
        f"x {runs}), plus up to {spend['budget_usd']} USD per retry you ask for"
    )


def visible(text: str) -> str:
    """`text` with the characters a terminal would act on or hide (controls, bidirectional
    and zero-width format characters) written as escapes, so what is reviewed is what is there."""
    return "".join(
        f"\\u{ord(c):04x}" if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf") else c for c in text
    )


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | dict):
        return visible(json.dumps(value, ensure_ascii=False))
    return visible(str(value))


def _approves(plan: dict[str, Any]) -> str:
    """The front matter as confirming approves it, one key a line (commands one a line)."""
    fm = plan.get("front_matter") or {}

    def key(name: str, default: Any = None) -> Any:
        return plan[name] if name in plan else fm.get(name, default)

    def commands(values: list[str] | None) -> str:
        return ("\n" + " " * 16).join(visible(c) for c in values) if values else "-"

    base = key("base")
    lines = [
        "what confirming approves:",
        f"  {'repo:':14}{_value(plan.get('repo'))}",
        f"  {'base:':14}{_value(base) if base else '- (the repository default branch)'}",
        f"  {'model:':14}{_value(key('model'))}",
        f"  {'budget_usd:':14}{_value(key('budget_usd'))} (per task)",
        f"  {'checks:':14}{commands(key('checks'))}",
        f"  {'setup:':14}{commands(key('setup'))}",
        f"  {'max_attempts:':14}{_value(key('max_attempts', 3))}",
        f"  {'follow_ups:':14}{_value(key('follow_ups', DEFAULT_FOLLOW_UPS))} (rounds per item on its pull request)",
    ]
    if plan.get("max_spend"):
        lines.append(f"  {'may spend:':14}{max_spend_text(plan['max_spend'])}")
    return "\n".join(lines)


def _item_details(items: list[dict[str, Any]]) -> str:
    """Every current item with its whole title and its details (the indented lines under its
    checkbox), as the document has them."""
    lines = ["items and their details:"]
    for item in items:
        if item.get("ordinal") is None:  # removed: history, not approved content
            continue
        box = "[x]" if item.get("checked") else "[ ]"
        head = f"  {item['ordinal']}. {box} "
        lines.append(head + visible(item["title"]))
        details = item.get("details") or ""
        lines += (
            [(" " * len(head) + visible(line)).rstrip() for line in details.split("\n")] if details else []
        )
    return "\n".join(lines)


def render_plan_diff(slug: str, diff: dict[str, Any]) -> str:
    """`steward plan diff`: the front matter keys and the items changed since the last
    confirmation, or that nothing changed."""
    approved, current = diff.get("approved_hash"), diff["current_hash"]
    if approved is not None and approved == current:
        return f"plan {slug}: no change since its last confirmation (content {current[:12]})"
    if approved is None:
        lines = [f"plan {slug}: never confirmed, so all of it is new", f"  current:  {current[:12]}"]
    else:
        lines = [
            f"plan {slug}: changed since its last confirmation",
            f"  approved: {approved[:12]}",
            f"  current:  {current[:12]}",
        ]
    changes = diff.get("front_matter") or {}
    if changes:
        width = max(len(k) for k in changes) + 3
        lines += ["", "front matter:"]
        lines += [
            f"  {(k + ':').ljust(width)}{_value(old)} -> {_value(new)}" for k, (old, new) in changes.items()
        ]
    rows = [
        (
            "-" if i.get("ordinal") is None else i["ordinal"],
            "-" if i.get("approved_ordinal") is None else i["approved_ordinal"],
            i["change"] + (f" ({', '.join(i['fields'])})" if i.get("fields") else ""),
            visible(_short(i["title"], 60)),
        )
        for i in diff.get("items") or []
    ]
    if rows:
        lines += ["", table(rows, ("#", "was", "change", "item"))]
    return "\n".join(lines)


def waiting_text(waiting: dict[str, Any] | None, now: datetime | None = None) -> str:
    """`quiet_hours until 2026-06-01T13:30:00Z: quiet hours (11:00-13:30 UTC)`, or `-`; a
    next tick whose time has passed is `next_tick due now: ...` (the tick is late, not past)."""
    if not waiting:
        return "-"
    until = f" until {waiting['until']}" if waiting.get("until") else ""
    if waiting["reason"] == "next_tick" and waiting.get("until"):
        due = datetime.fromisoformat(str(waiting["until"]).replace("Z", "+00:00"))
        if due <= (now or datetime.now(UTC)):
            until = " due now"
    return f"{waiting['reason']}{until}: {visible(waiting.get('detail') or '')}".rstrip(": ")


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
    if not rows:
        return "no plans yet: publish one with `steward plan publish FILE` (examples/demo-plan.md is one)"
    return table(rows, ("slug", "status", "repo", "finished", "outcome", "cost", "updated"))


def by_item(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A plan's tasks in the plan's order: by item, then revision and attempt."""
    return sorted(tasks, key=lambda t: (t["ordinal"], t.get("revision", 1), t["attempt"], t["id"]))


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
    lines = [f"{k + ':':16}{'-' if task.get(k) is None else visible(str(task[k]))}" for k in TASK_FIELDS]
    if task.get("parent"):
        lines.append(f"{'round:':16}follow-up round {task['round']} of task {task['parent']}")
    elif task.get("follow_ups") is not None:
        lines.append(
            f"{'rounds:':16}{task.get('rounds_used', 0)} of {task['follow_ups']} follow-up rounds used"
        )
    if "waiting" in task:
        lines.append(f"{'waiting:':16}{waiting_text(task['waiting'])}")
    if failure := task.get("failure"):
        lines.append(f"{'failure:':16}{visible(str(failure['code']))}")
        lines.append(
            f"{'what to do:':16}{visible(str(failure['remedy']))} (who: {visible(str(failure['who']))})"
        )
    return "\n".join(lines)


def render_loop(settings: dict[str, Any]) -> str:
    quiet = settings.get("quiet_hours")
    shown = dict(settings, quiet_hours=f"{quiet['start']}-{quiet['end']}" if quiet else "none")
    return "\n".join(f"{k + ':':18}{v}" for k, v in shown.items())


def render_doctor_result(result: Any) -> str:
    """One check of `steward doctor`: `ok` and what was found, or `FAIL`, what was found and
    the remedy (a `steward.domain.doctor.Result`)."""
    line = f"{'ok' if result.ok else 'FAIL':<4}  {result.check:<18}  {visible(result.detail)}"
    return line if result.ok else f"{line}. Fix: {visible(result.remedy)}"
