"""`steward`: the command line client of the API and of the local stack.

Human-readable tables by default, `--json` for scripts (errors too: `{"error": {"code",
"message", ...}}` on stdout, with a non-zero exit). The global options (`--json`, `--user`,
`--state-file`) work anywhere on the command line. The endpoint and token come from
STEWARD_API_URL / STEWARD_TOKEN, else from the local stack's state file, else from the
stored `steward login` (see `steward.adapters.api_client.resolve_endpoint`).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NoReturn

from steward.adapters import login
from steward.adapters.api_client import (
    DEFAULT_STATE_FILE,
    ApiClient,
    ApiError,
    local_login_code,
    resolve_endpoint,
)
from steward.cli_render import (
    by_item,
    render_loop,
    render_plan,
    render_plan_diff,
    render_plans,
    render_task,
    render_tasks,
    table,
)
from steward.domain.capability import MAX_LIFETIME_SECONDS
from steward.domain.errors import StewardError
from steward.domain.ids import SLUG_PATTERN, TASK_ID_PATTERN
from steward.domain.models import TERMINAL_PLAN_STATUSES, TERMINAL_TASK_STATUSES

Handler = Callable[[argparse.Namespace], int]

GLOBAL_DEFAULTS: dict[str, Any] = {"json": False, "user": None, "state_file": None}
MAX_FIXTURE_MINUTES = MAX_LIFETIME_SECONDS // 60  # a fixture lives no longer than its capability


class CliError(Exception):
    """A refusal the CLI itself decides (bad input, a missing local stack, AWS not set up):
    one line on stderr, or the JSON error on stdout under `--json`."""

    def __init__(self, code: str, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code


class UsageError(Exception):
    """What argparse refused; `main` shows it as argparse would, or as JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class StewardParser(argparse.ArgumentParser):
    """Every parser of the CLI (subcommands are built with the class of their parent)
    accepts the global options, so they work anywhere on the command line. Their defaults
    are SUPPRESS below the top level: a subcommand that was not given one leaves alone what
    an earlier position set (the top level sets the real defaults, GLOBAL_DEFAULTS)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        group = self.add_argument_group("global options (anywhere on the command line)")
        group.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON instead of tables"
        )
        group.add_argument(
            "--user",
            default=argparse.SUPPRESS,
            help="local dev identity to act as (default: alice, or STEWARD_USER)",
        )
        group.add_argument(
            "--state-file",
            type=Path,
            default=argparse.SUPPRESS,
            help=f"local stack state file; its directory holds the stack's state (default {DEFAULT_STATE_FILE})",
        )

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> int:
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else render(data))
    return 0


def _client(args: argparse.Namespace) -> ApiClient:
    return ApiClient(resolve_endpoint(args.user, args.state_file))


def _slug(value: str) -> str:
    """A plan slug as the API takes it, checked before any request (a `/` would name another route)."""
    if not SLUG_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"a slug is [a-z0-9][a-z0-9-]{{0,62}}, not {value[:80]!r}")
    return value


def _task_id(value: str) -> str:
    if not TASK_ID_PATTERN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"a task id is t and 24 hex digits, not {value[:80]!r}")
    return value


def _state_file(args: argparse.Namespace) -> Path:
    return Path(args.state_file or DEFAULT_STATE_FILE)


def _running_stack(args: argparse.Namespace) -> Path:
    """The running local stack's state file, or a CliError saying to start one."""
    state_file = _state_file(args)
    if not state_file.exists():
        raise CliError("no_stack", f"{state_file} not found: start `steward local up` first")
    return state_file


def _slug_from_path(path: Path) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")[:63]
    return slug or "plan"


def cmd_plan_publish(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        markdown = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError("unreadable", f"cannot read {path}: {exc}") from None
    slug = args.slug or _slug_from_path(path)
    plan = _client(args).request("PUT", f"/v1/plans/{slug}", {"markdown": markdown})
    return _emit(args, plan, render_plan)


def _plan_action(action: str) -> Handler:
    def run(args: argparse.Namespace) -> int:
        body = {"content_hash": args.content_hash} if getattr(args, "content_hash", None) else None
        plan = _client(args).request("POST", f"/v1/plans/{args.slug}/{action}", body)
        return _emit(args, plan, render_plan)

    return run


def cmd_plan_show(args: argparse.Namespace) -> int:
    """The plan as confirming it approves it: the front matter and every item's details."""
    plan = _client(args).request("GET", f"/v1/plans/{args.slug}")
    return _emit(args, plan, lambda p: render_plan(p, full=True))


def cmd_plan_diff(args: argparse.Namespace) -> int:
    """What changed since the plan's last confirmation."""
    changes = _client(args).request("GET", f"/v1/plans/{args.slug}/diff")
    return _emit(args, changes, lambda d: render_plan_diff(args.slug, d))


def cmd_plan_list(args: argparse.Namespace) -> int:
    plans = _client(args).paged("/v1/plans", "plans")
    return _emit(args, {"plans": plans}, lambda d: render_plans(d["plans"]))


def cmd_tasks(args: argparse.Namespace) -> int:
    client = _client(args)

    def read() -> Any:
        tasks = client.paged("/v1/tasks", "tasks", {"plan": args.plan})
        return {"tasks": by_item(tasks) if args.plan else tasks}

    if not args.watch:
        return _emit(args, read(), lambda d: render_tasks(d["tasks"]))
    return _watch(
        args, read, lambda d: render_tasks(d["tasks"]), lambda d: all(_terminal(t) for t in d["tasks"])
    )


def cmd_task_show(args: argparse.Namespace) -> int:
    return _emit(args, _client(args).request("GET", f"/v1/tasks/{args.id}"), render_task)


def cmd_task_cancel(args: argparse.Namespace) -> int:
    """Cancel a queued or running task; a task in review is withdrawn instead (closed, and
    the loop closes its pull request with a comment)."""
    result = _client(args).request("POST", f"/v1/tasks/{args.id}/cancel")

    def render(data: dict[str, Any]) -> str:
        task = data.get("task", data)
        if task.get("status") != "closed" or task.get("reason") != "withdrawn":
            return render_task(task)
        pull = task.get("pr_url") or "its pull request"
        then = (
            f"the loop closes {pull} with a comment at its next tick"
            if task.get("pr_close_pending")
            else f"the loop has closed {pull}"
        )
        return f"withdrawn: task {task['id']} (item #{task['ordinal']} of plan {task['plan_slug']}) is closed; {then}"

    return _emit(args, result, render)


def cmd_task_retry(args: argparse.Namespace) -> int:
    """Ask for another attempt of a finished task's item. The API answers with the task
    retried; the loop spawns attempt + 1 at its next tick, at once (an explicit retry is not bounded
    by max_attempts), unless the loop is paused or disabled."""
    client = _client(args)
    result = client.request("POST", f"/v1/tasks/{args.id}/retry")
    task = result.get("task", result)
    queued = result.get("queued_attempt") or int(task["attempt"]) + 1
    loop: dict[str, Any] = client.request("GET", "/v1/loop") or {}
    if loop.get("enabled") is False:
        when = "the loop is disabled: it spawns the attempt once enabled (`steward loop set --enabled true`)"
    elif loop.get("paused"):
        when = "the loop is paused: it spawns the attempt once resumed (`steward loop resume`)"
    else:  # a person's retry is not held back by the loop's interval
        when = "the loop starts it at its next tick, at once"
    data = {**result, "queued_attempt": queued}

    def render(_: Any) -> str:
        return (
            f"retry requested for item #{task['ordinal']} of plan {task['plan_slug']}: "
            f"attempt {queued} is queued (after {task['id']}, attempt {task['attempt']}); {when}"
        )

    return _emit(args, data, render)


def _terminal(task: dict[str, Any]) -> bool:
    return task.get("status") in {status.value for status in TERMINAL_TASK_STATUSES}


def cmd_task_events(args: argparse.Namespace) -> int:
    """The task's durable events in order; `--follow` keeps printing new ones until the task
    ends (a person's `tail -f`)."""
    client, after, seen = _client(args), 0, []
    while True:
        page = client.request("GET", f"/v1/tasks/{args.id}/events", params={"after": after, "limit": 100})
        for event in page["events"]:
            seen.append(event)
            if not args.json:
                print(
                    f"{event['seq']:>4}  {event['at']}  {event['type']:<12} {json.dumps(event.get('data') or {})}"
                )
        after = page["next"]
        if page["events"]:
            continue  # more may be waiting
        if not args.follow or _terminal(client.request("GET", f"/v1/tasks/{args.id}")):
            break
        time.sleep(args.interval)
    if args.json:
        print(json.dumps({"events": seen}, indent=2, ensure_ascii=False))
    return 0


_RUN_STATUSES = frozenset({"queued", "running"})  # its run has not ended yet


def cmd_task_logs(args: argparse.Namespace) -> int:
    """What the task's commands printed: the live output while it runs (where the stack keeps
    a stream: locally), the stored screen tail once it has ended. `--follow` waits for a
    queued task to start and prints until the run ends. `--json` prints one object at the
    end: `{"task_id", "status", "source": "live" | "screen" | null, "output"}`."""
    client = _client(args)

    def read() -> dict[str, Any]:
        return dict(client.request("GET", f"/v1/tasks/{args.id}"))

    def logs(source: str | None, output: str) -> int:
        shown = {"task_id": args.id, "status": task["status"], "source": source, "output": output}
        return _emit(args, shown, lambda _: "")

    task = read()
    while args.follow and task["status"] == "queued":
        time.sleep(args.interval)
        task = read()
    if task["status"] == "running" and client.stream_url is not None:
        if args.json:
            return logs("live", "".join(client.output(args.id, follow=args.follow)))
        for text in client.output(args.id, follow=args.follow):
            sys.stdout.write(text)
            sys.stdout.flush()
        return 0
    if task["status"] in _RUN_STATUSES and not args.follow:
        print(
            f"task {args.id} is {task['status']}: its screen tail is stored when it ends (`--follow` waits)",
            file=sys.stderr,
        )
        return logs(None, "") if args.json else 0
    while task["status"] in _RUN_STATUSES:
        time.sleep(args.interval)
        task = read()
    screen = str(client.request("GET", f"/v1/tasks/{args.id}/screen")["screen"])
    if not screen:
        print(f"task {args.id} stored no screen tail", file=sys.stderr)
    if args.json:
        return logs("screen", screen)
    sys.stdout.write(screen)
    return 0


def cmd_task_artifacts(args: argparse.Namespace) -> int:
    listed = _client(args).request("GET", f"/v1/tasks/{args.id}/artifacts")
    return _emit(
        args, listed, lambda d: table([(a["name"], a["size"]) for a in d["artifacts"]], ("artifact", "bytes"))
    )


def cmd_task_artifact(args: argparse.Namespace) -> int:
    """The artifact's bytes on stdout, or in `--output`. `--json` prints
    `{"task_id", "name", "size"}` with `"written_to"` (with `--output`), else its `"content"`
    and that content's `"encoding"` (`utf-8`, or `base64` for bytes that are not text)."""
    data = _client(args).artifact(args.id, args.name)
    about: dict[str, Any] = {"task_id": args.id, "name": args.name, "size": len(data)}
    if args.output:
        Path(args.output).write_bytes(data)
        if args.json:
            return _emit(args, {**about, "written_to": str(args.output)}, str)
        print(f"{args.name}: {len(data)} bytes written to {args.output}", file=sys.stderr)
    elif args.json:
        try:
            content = {"encoding": "utf-8", "content": data.decode("utf-8")}
        except UnicodeDecodeError:
            content = {"encoding": "base64", "content": base64.b64encode(data).decode("ascii")}
        return _emit(args, {**about, **content}, str)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def cmd_task_diff(args: argparse.Namespace) -> int:
    args.name, args.output = "diff.patch", None
    return cmd_task_artifact(args)


def cmd_task_open(args: argparse.Namespace) -> int:
    """The task's pull request: its URL, and a browser on it where one can open (never under
    `--json`, which prints `{"task_id", "pr_url"}`)."""
    task = _client(args).request("GET", f"/v1/tasks/{args.id}")
    url = task.get("pr_url")
    if not url:
        raise CliError("no_pull_request", f"task {args.id} has no pull request yet (status {task['status']})")
    _emit(args, {"task_id": args.id, "pr_url": url}, lambda d: str(d["pr_url"]))
    if sys.stdout.isatty() and not args.json:
        import webbrowser  # noqa: PLC0415 - only here

        webbrowser.open(url)
    return 0


def _watch(
    args: argparse.Namespace,
    read: Callable[[], Any],
    render: Callable[[Any], str],
    done: Callable[[Any], bool],
) -> int:
    """Render `read()` every `args.interval` seconds until `done`, Ctrl-C, or `args.rounds`."""
    rounds = 0
    try:
        while True:
            data = read()
            rounds += 1
            shown = json.dumps(data, ensure_ascii=False) if args.json else render(data)
            if sys.stdout.isatty() and not args.json:
                print("\x1b[H\x1b[2J", end="")  # redraw in place
            print(shown, flush=True)
            if done(data) or (args.rounds and rounds >= args.rounds):
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 130


def cmd_plan_watch(args: argparse.Namespace) -> int:
    client = _client(args)

    def read() -> Any:
        plan = client.request("GET", f"/v1/plans/{args.slug}")
        plan["tasks"] = by_item(client.paged("/v1/tasks", "tasks", {"plan": args.slug}))
        return plan

    def render(plan: Any) -> str:
        return render_plan(plan) + "\n\n" + render_tasks(plan["tasks"])

    # A blocked plan waits for a person (a retry, an edit): watching it longer shows nothing new.
    return _watch(
        args,
        read,
        render,
        lambda plan: plan["status"] in {s.value for s in TERMINAL_PLAN_STATUSES} or bool(plan.get("blocked")),
    )


def cmd_loop_pause(args: argparse.Namespace) -> int:
    return _emit(args, _client(args).request("PUT", "/v1/loop", {"paused": args.paused}), render_loop)


def cmd_loop_show(args: argparse.Namespace) -> int:
    return _emit(args, _client(args).request("GET", "/v1/loop"), render_loop)


MAX_REASON_CHARS = 500


def _reason(text: str) -> str:
    """A brake's reason: one line a person reads in `brake status`, bounded."""
    if not text.strip() or len(text) > MAX_REASON_CHARS or any(c in text for c in "\r\n\x00"):
        raise argparse.ArgumentTypeError(
            f"a reason is one non-empty line of at most {MAX_REASON_CHARS} characters"
        )
    return text


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def cmd_loop_set(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        k: v
        for k, v in {
            "enabled": args.enabled,
            "paused": args.paused,
            "interval_seconds": args.interval,
            "timezone": args.timezone,
            "daily_spawn_cap": args.daily_cap,
            "max_parallel": args.max_parallel,
            "max_open_prs": args.max_open_prs,
        }.items()
        if v is not None
    }
    if args.quiet_hours is not None:
        if args.quiet_hours == "none":
            body["quiet_hours"] = None
        else:
            start, _, end = args.quiet_hours.partition("-")
            body["quiet_hours"] = {"start": start, "end": end}
    if not body:
        raise CliError("usage", "nothing to set; see `steward loop set --help`", exit_code=2)
    return _emit(args, _client(args).request("PUT", "/v1/loop", body), render_loop)


def cmd_local_up(args: argparse.Namespace) -> int:
    from steward.local.stack import LocalStack  # noqa: PLC0415 - moto loads only for this command

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with LocalStack(  # refuses (StackAlreadyRunning) when a stack holds the state directory
        state_file=_state_file(args),
        tick_seconds=args.tick_seconds,
        reaper_seconds=args.reaper_seconds,
        resync_seconds=args.resync_seconds,
    ) as stack:
        print(f"steward local stack is up; state in {stack.state_file}", flush=True)
        for key, value in stack.state.items():  # every URL of the state file, and the CA to trust
            if key.endswith("_url") or key == "ca_bundle":
                print(f"  {key}: {value}", flush=True)
        print("  users: " + ", ".join(stack.state["users"]) + "  (Ctrl-C to stop)", flush=True)
        print("  web console: `steward local login alice` prints a sign-in link", flush=True)
        # Python runs a signal's handler in the main thread, but the kernel may deliver the
        # signal to any of the stack's threads: an untimed wait would never wake to run it.
        while not stop.wait(timeout=0.5):
            pass
        print("stopping", flush=True)
    return 0


def cmd_local_token(args: argparse.Namespace) -> int:
    from steward.local.dev_auth import DevIssuer  # noqa: PLC0415

    issuer = DevIssuer.load_or_create(_state_file(args).parent / "dev-jwt-key.pem")
    return _emit(args, {"user": args.name, "token": issuer.mint(args.name)}, lambda d: str(d["token"]))


def cmd_local_login(args: argparse.Namespace) -> int:
    """A console login link for any dev user: a one-time code (valid two minutes) in the
    link's fragment, exchanged by the page for a token; the token itself is never printed."""
    from steward.local.dev_auth import DevIssuer  # noqa: PLC0415

    state_file = _running_stack(args)
    state = json.loads(state_file.read_text())
    token = DevIssuer.load_or_create(state_file.parent / "dev-jwt-key.pem").mint(args.name)
    code = local_login_code(state["api_url"], token)
    link = {"url": f"{state['console_url']}#login={code['code']}", "expires_in": code["expires_in"]}
    if not args.json:  # stdout is the link alone (`URL=$(steward local login alice)`)
        print(f"(open it within {link['expires_in']} s; it signs in once)", file=sys.stderr)
    return _emit(args, link, lambda d: str(d["url"]))


def _decimal_arg(text: str) -> Decimal:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected a decimal amount, got {text!r}") from None
    if not value.is_finite() or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive amount, got {text!r}")
    return value


def cmd_local_capability(args: argparse.Namespace) -> int:
    """The task's owner is `--owner`, else the identity the CLI acts as (`--user`, else
    STEWARD_USER, else alice): both name a dev user of the local stack, so the old spelling
    `--user` keeps its meaning here."""
    from steward.local.fixtures import running_task_with_capability  # noqa: PLC0415

    state_file = _running_stack(args)
    owner = args.owner or args.user or os.environ.get("STEWARD_USER") or "alice"
    result = running_task_with_capability(
        state_file,
        user=owner,
        budget_usd=args.budget_usd,
        model=args.model,
        lifetime=timedelta(minutes=args.lifetime_minutes),
    )
    print(json.dumps(result))
    if not args.json:  # stdout stays the one JSON line; the person reads this on stderr
        print(
            f"fixture task {result['task_id']} of {owner} (plan {result['plan_slug']}, not in `plan list`) "
            f"lives {args.lifetime_minutes} min, until {result['expires_at']}: then the reaper cancels it "
            "and the capability expires. It holds none of the loop's slots and is never retried.",
            file=sys.stderr,
        )
    return 0


def _lifetime_minutes(text: str) -> int:
    try:
        minutes = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole minutes, got {text!r}") from None
    if not 1 <= minutes <= MAX_FIXTURE_MINUTES:
        raise argparse.ArgumentTypeError(f"a fixture lives 1 to {MAX_FIXTURE_MINUTES} minutes, got {minutes}")
    return minutes


def _twin_url(args: argparse.Namespace) -> str:
    """The running local stack's GitHub twin (a CliError when none runs)."""
    return str(json.loads(_running_stack(args).read_text())["github_url"])


def _github_action(action: str) -> Handler:
    def run(args: argparse.Namespace) -> int:
        from steward.local.github_twin import admin  # noqa: PLC0415

        repo, number, pull = _github_twin_call(args, getattr(admin, action))
        return _emit(args, pull, lambda d: f"{repo}#{number}: {d.get('state')} (merged: {d.get('merged')})")

    return run


def _inline_comment(text: str) -> dict[str, Any]:
    """`PATH:LINE:TEXT` -> an inline comment of a review."""
    path, _, rest = text.partition(":")
    line, _, body = rest.partition(":")
    if not path or not line.isdigit() or not body:
        raise argparse.ArgumentTypeError(f"expected PATH:LINE:TEXT, got {text!r}")
    return {"path": path, "line": int(line), "body": body}


def _github_twin_call(
    args: argparse.Namespace, call: Callable[[str, str, int], dict[str, Any]]
) -> tuple[str, int, dict[str, Any]]:
    from steward.local.github_twin import admin  # noqa: PLC0415

    url = _twin_url(args)
    try:
        repo, number = admin.parse_pull_ref(args.pull)
        return repo, number, call(url, repo, number)
    except admin.AdminError as exc:
        if exc.status == 404:
            raise CliError("github_twin", f"{args.pull}: no such pull request on the twin") from None
        raise CliError("github_twin", str(exc)) from None
    except ValueError as exc:
        raise CliError("github_twin", str(exc)) from None


def cmd_local_github_review(args: argparse.Namespace) -> int:
    from steward.local.github_twin import admin  # noqa: PLC0415

    # argparse lets exactly one of the three through
    verdicts = (("changes_requested", args.request_changes), ("approved", args.approve))
    state, body = next(((s, b) for s, b in verdicts if b is not None), ("commented", args.comment_body or ""))
    repo, number, review = _github_twin_call(
        args,
        lambda url, repo, number: admin.review(
            url, repo, number, state=state, body=body, comments=args.comment or [], login=args.as_login
        ),
    )
    return _emit(
        args, review, lambda d: f"{repo}#{number}: review {d['id']} by {d['user']['login']} ({d['state']})"
    )


def cmd_local_github_comment(args: argparse.Namespace) -> int:
    from steward.local.github_twin import admin  # noqa: PLC0415

    repo, number, comment = _github_twin_call(
        args, lambda url, repo, number: admin.comment(url, repo, number, args.body, login=args.as_login)
    )
    return _emit(args, comment, lambda d: f"{repo}#{number}: comment {d['id']} by {d['user']['login']}")


def cmd_local_github_check(args: argparse.Namespace) -> int:
    from steward.local.github_twin import admin  # noqa: PLC0415

    repo, number, run = _github_twin_call(
        args,
        lambda url, repo, number: admin.check(
            url,
            repo,
            number,
            name=args.name,
            conclusion=args.conclusion,
            output=args.output or "",
            ref=args.ref,
        ),
    )
    return _emit(
        args, run, lambda d: f"{repo}#{number}: check {d['name']} {d['conclusion']} on {d['head_sha'][:12]}"
    )


def cmd_local_github_push(args: argparse.Namespace) -> int:
    from steward.local.github_twin import admin  # noqa: PLC0415

    repo, number, pull = _github_twin_call(
        args, lambda url, repo, number: admin.push(url, repo, number, login=args.as_login)
    )
    return _emit(
        args, pull, lambda d: f"{repo}#{number}: {d['head']['ref']} is now at {d['head']['sha'][:12]}"
    )


def cmd_local_github_withhold(args: argparse.Namespace) -> int:
    from steward.local.github_twin import admin  # noqa: PLC0415

    url = _twin_url(args)
    try:
        on = admin.withhold(url, args.mode == "on")
    except admin.AdminError as exc:
        raise CliError("github_twin", str(exc)) from None
    return _emit(
        args, {"withholding": on}, lambda d: "webhooks withheld" if d["withholding"] else "webhooks delivered"
    )


def cmd_admin_link(args: argparse.Namespace) -> int:
    """`--owner` is required: a deployment's sub is not a local dev identity, and an
    installation decides whose repositories a task may touch, so the global `--user` (the
    identity the CLI acts as) is never taken for it."""
    from steward.adapters.operator_aws import failures_as_errors  # noqa: PLC0415
    from steward.services.admin import link_installation  # noqa: PLC0415
    from steward.wiring import operator_tables  # noqa: PLC0415

    if not args.owner:
        hint = (
            f"--user names the identity the CLI acts as, not the installation's owner: "
            f"say --owner {args.user} to link it to {args.user}"
            if args.user
            else "name the installation's owner: --owner SUB (the user's JWT sub)"
        )
        raise CliError("usage", hint, exit_code=2)
    with failures_as_errors():
        tables = operator_tables(_state_file(args))
        installation = link_installation(tables, args.installation_id, args.owner, force=args.force)
    return _emit(
        args,
        installation.model_dump(mode="json"),
        lambda d: f"installation {d['installation_id']} linked to {d['owner_sub']}",
    )


def cmd_admin_brake(args: argparse.Namespace) -> int:
    """The operators' global brake: `on` refuses every new model call (503 brake_engaged) and
    stops new spawns within 5 s; `off` releases it (and restarts the breaker's window)."""
    import getpass  # noqa: PLC0415

    from steward.adapters.brake_store import BrakeStore  # noqa: PLC0415
    from steward.adapters.operator_aws import failures_as_errors  # noqa: PLC0415
    from steward.domain.models import utcnow  # noqa: PLC0415
    from steward.wiring import operator_tables  # noqa: PLC0415

    by = f"operator {getpass.getuser()}"
    with failures_as_errors():
        store = BrakeStore(operator_tables(_state_file(args)))
        if args.mode == "on":
            brake, changed = store.engage(reason=args.reason, by=by, now=utcnow())
        elif args.mode == "off":
            brake, changed = store.release(by=by, now=utcnow())
        else:
            brake, changed = store.read(), False
    data = {
        "engaged": brake.engaged,
        "changed": changed,
        "reason": brake.reason,
        "by": brake.by,
        "since": brake.since.isoformat() if brake.since else None,
        "released_at": brake.released_at.isoformat() if brake.released_at else None,
    }
    return _emit(
        args,
        data,
        lambda _: f"brake {brake.describe()}" + ("" if changed or args.mode == "status" else " (unchanged)"),
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    """What is wrong with a deployment (`--stack NAME [--region R]`, the operator's AWS
    credentials) or the running local stack (`--local`, the default): one line per check as
    it completes (`--json`: the list at the end); exit 1 when any check failed."""
    from steward.adapters.deployment import aws_deployment, local_deployment  # noqa: PLC0415
    from steward.cli_render import render_doctor_result  # noqa: PLC0415
    from steward.domain.doctor import exit_code, run_checks  # noqa: PLC0415

    if args.stack and args.local:
        raise CliError("usage", "--stack checks a deployment, --local the local stack: give one", exit_code=2)
    if args.region and not args.stack:
        raise CliError("usage", "--region goes with --stack NAME", exit_code=2)
    if args.stack:
        probe = aws_deployment(args.stack, args.region)
    else:
        state_file = _running_stack(args)
        try:
            probe = local_deployment(state_file, os.environ)
        except (OSError, ValueError) as exc:
            raise CliError("no_stack", f"{state_file} is not a local stack's state file ({exc})") from None

    def stream(result: Any) -> None:
        print(render_doctor_result(result), flush=True)

    try:
        results = run_checks(probe, None if args.json else stream)
    finally:
        probe.close()
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2, ensure_ascii=False))
    return exit_code(results)


def cmd_login(args: argparse.Namespace) -> int:
    settings = login.LoginSettings.merge(
        {
            "api_url": args.api_url,
            "issuer": args.issuer,
            "client_id": args.client_id,
            "scopes": args.scopes,
            "port": args.port,
            "bearer": args.bearer,
        }
    )
    credentials = login.login(
        settings,
        open_browser=None if args.no_browser else login.default_browser,
        say=lambda text: print(text, file=sys.stderr, flush=True),
        timeout=args.timeout,
    )
    who = login.claims(credentials[f"{settings.bearer}_token"])
    summary = {
        "api_url": credentials["api_url"],
        "sub": who.get("sub"),
        "email": who.get("email"),
        "expires_at": credentials["expires_at"],
        "credentials_file": str(login.credentials_file()),
    }
    return _emit(
        args,
        summary,
        lambda d: (
            f"signed in to {d['api_url']} as {d['email'] or d['sub'] or 'unknown'}; "
            f"tokens kept in {d['credentials_file']}"
        ),
    )


def cmd_logout(args: argparse.Namespace) -> int:
    removed = login.logout()
    return _emit(
        args,
        {"removed": str(removed) if removed else None},
        lambda d: f"signed out (removed {d['removed']})" if d["removed"] else "not signed in",
    )


def _add_login_commands(sub: Any) -> None:
    p = sub.add_parser(
        "login",
        help="sign in to a deployed Steward (OIDC code + PKCE in the browser)",
        description="Sign in with the issuer's hosted UI. Flags given are saved in "
        f"{login.config_file()} and need not be given again.",
    )
    p.add_argument("--api-url", help="the deployment's API URL (https)")
    p.add_argument("--issuer", help="OIDC issuer, e.g. https://cognito-idp.REGION.amazonaws.com/POOL_ID")
    p.add_argument("--client-id", help="the app client id (a public client: no secret)")
    p.add_argument("--scopes", help=f"space-separated scopes (default {login.DEFAULT_SCOPES!r})")
    p.add_argument(
        "--port",
        type=int,
        help=f"loopback port of the callback http://localhost:PORT/callback, which the app client "
        f"must register (default {login.DEFAULT_PORT}; 0 picks a free one, for issuers that allow any port)",
    )
    p.add_argument(
        "--token", dest="bearer", choices=login.TOKEN_KINDS, help="which token the API gets (default id)"
    )
    p.add_argument("--no-browser", action="store_true", help="print the sign-in URL, open no browser")
    p.add_argument(
        "--timeout", type=float, default=login.DEFAULT_TIMEOUT_SECONDS, help="seconds to wait for the sign-in"
    )
    p.set_defaults(func=cmd_login)
    sub.add_parser("logout", help="remove the stored sign-in tokens").set_defaults(func=cmd_logout)


def cmd_demo(args: argparse.Namespace) -> int:
    from steward.local.demo import run_demo  # noqa: PLC0415

    return run_demo(state_file=args.state_file or Path(".steward/demo.json"), as_json=args.json)


def _add_plan_commands(sub: Any) -> None:
    plan = sub.add_parser("plan", help="Task Documents and their lifecycle").add_subparsers(
        dest="plan_command", required=True
    )
    p = plan.add_parser("publish", help="upsert a Task Document")
    p.add_argument("file", help="the Task Document: Markdown with YAML front matter")
    p.add_argument("--slug", type=_slug, help="plan slug (default: derived from the file name)")
    p.set_defaults(func=cmd_plan_publish)
    for action, text in (("submit", "ask for confirmation"), ("archive", "stop the plan")):
        p = plan.add_parser(action, help=text)
        p.add_argument("slug", type=_slug, help="the plan's slug")
        p.set_defaults(func=_plan_action(action))
    p = plan.add_parser("confirm", help="approve the plan's current content")
    p.add_argument("slug", type=_slug, help="the plan's slug")
    p.add_argument(
        "--content-hash",
        help="the content you reviewed (the 12 characters `plan show` prints, or the whole hash): "
        "fail if the plan changed since",
    )
    p.set_defaults(func=_plan_action("confirm"))
    p = plan.add_parser("show", help="one plan: what confirming it approves, its items and their details")
    p.add_argument("slug", type=_slug, help="the plan's slug")
    p.set_defaults(func=cmd_plan_show)
    p = plan.add_parser("diff", help="what changed since the plan's last confirmation")
    p.add_argument("slug", type=_slug, help="the plan's slug")
    p.set_defaults(func=cmd_plan_diff)
    p = plan.add_parser("watch", help="a live view of the plan and its tasks until it ends")
    p.add_argument("slug", type=_slug, help="the plan's slug")
    _watch_options(p)
    p.set_defaults(func=cmd_plan_watch)
    plan.add_parser("list", help="your plans").set_defaults(func=cmd_plan_list)


def _add_task_commands(sub: Any) -> None:
    p = sub.add_parser("tasks", help="list tasks")
    p.add_argument("--plan", type=_slug, help="only the tasks of this plan slug")
    _watch_options(p, flag="refresh the table until every task has ended")
    p.set_defaults(func=cmd_tasks)
    task = sub.add_parser("task", help="one task").add_subparsers(dest="task_command", required=True)
    p = task.add_parser(
        "show", help="one task: its status, why it waits or failed, its cost and pull request"
    )
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.set_defaults(func=cmd_task_show)
    p = task.add_parser("retry", help="ask the loop for another attempt of a finished task's item")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.set_defaults(func=cmd_task_retry)
    p = task.add_parser("cancel", help="cancel a queued or running task; withdraw one in review")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.set_defaults(func=cmd_task_cancel)
    p = task.add_parser("events", help="the task's events in order")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.add_argument("--follow", action="store_true", help="keep printing new events until the task ends")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_task_events)
    p = task.add_parser("logs", help="the task's output: live while it runs, its screen tail after")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.add_argument("--follow", action="store_true", help="wait for it to start and print until it ends")
    p.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_task_logs)
    p = task.add_parser("artifacts", help="the task's artifacts and their sizes")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.set_defaults(func=cmd_task_artifacts)
    p = task.add_parser("artifact", help="one artifact, to stdout or a file")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.add_argument(
        "name", help="bootstrap.json, harness.json, diff.patch, git-status.txt, publish.json, screen.txt"
    )
    p.add_argument("-o", "--output", help="write it to this file")
    p.set_defaults(func=cmd_task_artifact)
    p = task.add_parser("diff", help="the change the task made (its diff.patch)")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.set_defaults(func=cmd_task_diff)
    p = task.add_parser("open", help="the task's pull request (printed, and opened in a browser)")
    p.add_argument("id", type=_task_id, help="the task's id (as `tasks` lists it)")
    p.set_defaults(func=cmd_task_open)


def _watch_options(p: Any, *, flag: str | None = None) -> None:
    """A live view's options; `flag` adds `--watch` (for a command that is a list otherwise)."""
    if flag is not None:
        p.add_argument("--watch", action="store_true", help=flag)
    p.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    p.add_argument("--rounds", type=int, default=0, help=argparse.SUPPRESS)  # stop after N (tests)


def _add_loop_commands(sub: Any) -> None:
    loop = sub.add_parser("loop", help="your reconciliation loop settings").add_subparsers(
        dest="loop_command", required=True
    )
    loop.add_parser("show", help="your loop settings").set_defaults(func=cmd_loop_show)
    loop.add_parser("pause", help="stop spawning until resumed").set_defaults(
        func=cmd_loop_pause, paused=True
    )
    loop.add_parser("resume", help="spawn again").set_defaults(func=cmd_loop_pause, paused=False)
    p = loop.add_parser("set", help="change some of your loop settings (the others stay)")
    p.add_argument("--enabled", type=_bool, help="true or false: whether the loop runs for you at all")
    p.add_argument("--paused", type=_bool, help="true or false: as `loop pause` and `loop resume`")
    p.add_argument("--interval", type=int, help="seconds between reconciliations")
    p.add_argument("--quiet-hours", help="HH:MM-HH:MM in your time zone, or 'none'")
    p.add_argument("--timezone", help="IANA time zone, e.g. Europe/Berlin")
    p.add_argument("--daily-cap", type=int, help="task spawns per local day")
    p.add_argument("--max-parallel", type=int, help="tasks running at once")
    p.add_argument("--max-open-prs", type=int, help="pull requests awaiting review at most (new tasks wait)")
    p.set_defaults(func=cmd_loop_set)


def _add_local_github_commands(local: Any) -> None:
    """`steward local github ...`: a person's actions on the twin (a reviewer, a stranger, CI)."""
    github = local.add_parser("github", help="act on the GitHub twin as a reviewer").add_subparsers(
        dest="github_command", required=True
    )
    for action in ("merge", "close"):
        p = github.add_parser(action, help=f"{action} a pull request on the twin")
        p.add_argument("pull", help="OWNER/REPO#N")
        p.set_defaults(func=_github_action(action))
    p = github.add_parser("review", help="review a pull request on the twin as a person would")
    p.add_argument("pull", help="OWNER/REPO#N")
    verdict = p.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--request-changes", metavar="BODY", help="request changes, saying BODY")
    verdict.add_argument("--approve", metavar="BODY", help="approve, saying BODY")
    verdict.add_argument(
        "--comment-only", dest="comment_body", metavar="BODY", help="only comment, saying BODY"
    )
    p.add_argument(
        "--comment",
        action="append",
        type=_inline_comment,
        metavar="PATH:LINE:TEXT",
        help="an inline comment (repeatable)",
    )
    p.add_argument(
        "--as", dest="as_login", default=None, help="who reviews (default octo-reviewer, a collaborator)"
    )
    p.set_defaults(func=cmd_local_github_review)
    p = github.add_parser("comment", help="comment on a pull request's conversation on the twin")
    p.add_argument("pull", help="OWNER/REPO#N")
    p.add_argument("body", help="the comment (@steward or a line starting /steward addresses Steward)")
    p.add_argument("--as", dest="as_login", default=None, help="who comments (default octo-reviewer)")
    p.set_defaults(func=cmd_local_github_comment)
    p = github.add_parser("check", help="complete a check run on a pull request's head on the twin")
    p.add_argument("pull", help="OWNER/REPO#N")
    p.add_argument("--name", required=True, help="the check's name")
    p.add_argument(
        "--conclusion", required=True, choices=("failure", "success", "timed_out", "neutral", "cancelled")
    )
    p.add_argument("--output", default="", help="what the check printed")
    p.add_argument(
        "--ref", default=None, help="a branch whose head the check ran on (default the pull request's head)"
    )
    p.set_defaults(func=cmd_local_github_check)
    p = github.add_parser("push", help="push a commit onto a pull request's branch as a person taking over")
    p.add_argument("pull", help="OWNER/REPO#N")
    p.add_argument("--as", dest="as_login", default=None, help="who pushes (default octo-reviewer)")
    p.set_defaults(func=cmd_local_github_push)
    p = github.add_parser(
        "withhold", help="record webhook deliveries without sending them (on), or send again (off)"
    )
    p.add_argument("mode", choices=("on", "off"))
    p.set_defaults(func=cmd_local_github_withhold)


def _add_local_and_admin_commands(sub: Any) -> None:
    local = sub.add_parser("local", help="the embedded local stack").add_subparsers(
        dest="local_command", required=True
    )
    p = local.add_parser("up", help="start the local stack until Ctrl-C")
    p.add_argument("--tick-seconds", type=float, default=2.0, help="scheduler period (default 2)")
    p.add_argument("--reaper-seconds", type=float, default=5.0, help="reaper period (default 5)")
    p.add_argument(
        "--resync-seconds",
        type=int,
        help="how stale a review task's view of GitHub may get before the loop asks again (default 900)",
    )
    p.set_defaults(func=cmd_local_up)
    p = local.add_parser(
        "capability", help="create a running task for a user and print its capability (JSON)"
    )
    p.add_argument(
        "--owner",
        help="the task's owner, a dev user (default: the identity the CLI acts as, --user, else alice)",
    )
    p.add_argument("--budget-usd", type=_decimal_arg, required=True, help="the task's budget")
    p.add_argument("--model", default="scripted", help="a model id of the price table (default scripted)")
    p.add_argument(
        "--lifetime-minutes",
        type=_lifetime_minutes,
        default=10,
        help=f"how long the task and its capability live before the reaper ends it "
        f"(default 10, at most {MAX_FIXTURE_MINUTES})",
    )
    p.set_defaults(func=cmd_local_capability)
    _add_local_github_commands(local)
    p = local.add_parser("login", help="print a web console login link for a dev user")
    p.add_argument("name", help="the dev user (any name: alice, bob, ...)")
    p.set_defaults(func=cmd_local_login)
    p = local.add_parser("token", help="mint a dev bearer token")
    p.add_argument("name", help="the dev user (any name: alice, bob, ...)")
    p.set_defaults(func=cmd_local_token)

    admin = sub.add_parser("admin", help="operator commands (talk to AWS directly)").add_subparsers(
        dest="admin_command", required=True
    )
    p = admin.add_parser("link-installation", help="link a GitHub App installation to a user")
    p.add_argument("installation_id", type=int, help="the GitHub App installation's numeric id")
    p.add_argument("--owner", help="the user's JWT sub (required)")
    p.add_argument(
        "--force",
        action="store_true",
        help="move it from another user (never links an installation the GitHub App does not have)",
    )
    p.set_defaults(func=cmd_admin_link)
    p = admin.add_parser(
        "brake", help="the global brake: refuse every new model call and spawn (on), release it (off)"
    )
    p.add_argument("mode", choices=["on", "off", "status"])
    p.add_argument(
        "--reason", type=_reason, default="engaged by an operator", help="shown with the brake's status"
    )
    p.set_defaults(func=cmd_admin_brake)
    sub.add_parser("demo", help="run the demo on the local stack").set_defaults(func=cmd_demo)
    p = sub.add_parser(
        "doctor", help="check a deployment (--stack) or the local stack (--local, the default)"
    )
    p.add_argument("--stack", help="the CloudFormation stack's name (AWS credentials as boto3 finds them)")
    p.add_argument("--region", help="the stack's region (default: the configured region)")
    p.add_argument("--local", action="store_true", help="check the running local stack (its state file)")
    p.set_defaults(func=cmd_doctor)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("steward")
    except PackageNotFoundError:  # run from a tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = StewardParser(prog="steward", description=__doc__.split("\n")[0] if __doc__ else None)
    parser.set_defaults(**GLOBAL_DEFAULTS)
    parser.add_argument("--version", action="version", version=f"steward {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_plan_commands(sub)
    _add_task_commands(sub)
    _add_loop_commands(sub)
    _add_local_and_admin_commands(sub)
    _add_login_commands(sub)
    return parser


def _wants_json(argv: Sequence[str]) -> bool:
    """`--json` among the options (before a `--`), for errors found before parsing ends."""
    options = list(argv)
    if "--" in options:
        options = options[: options.index("--")]
    return "--json" in options


def _failure(exc: Exception) -> tuple[dict[str, Any], str, int] | None:
    """The JSON error, the line for stderr and the exit code of a refusal (None: not one)."""
    if isinstance(exc, ApiError):
        error: dict[str, Any] = {"code": exc.code, "message": exc.message}
        error |= {"status": exc.status} if exc.status else {}
        error |= {"field": exc.field} if exc.field else {}
        error |= {"line": exc.line} if exc.line is not None else {}
        named = [f"field: {exc.field}"] if exc.field else []
        named += [f"line {exc.line}"] if exc.line is not None else []
        where = f" ({', '.join(named)})" if named else ""
        status = f"{exc.status} " if exc.status else ""
        return error, f"error: {status}{exc.code}: {exc.message}{where}", 1
    if isinstance(exc, CliError):
        return {"code": exc.code, "message": exc.message}, f"error: {exc.message}", exc.exit_code
    if isinstance(exc, login.LoginError):
        return {"code": exc.code, "message": exc.message}, f"error: {exc.code}: {exc.message}", 1
    if isinstance(exc, StewardError):  # commands that act on storage directly (admin, local up)
        error = {"code": exc.code, "message": exc.message}
        error |= {"field": exc.field} if exc.field else {}
        pid = getattr(exc, "pid", None)  # StackAlreadyRunning names the running stack
        error |= {"pid": pid} if pid else {}
        return error, f"error: {exc.code}: {exc.message}", 1
    return None


def _fail(as_json: bool, error: dict[str, Any], human: str, exit_code: int) -> int:
    """An error: `{"error": {...}}` on stdout under --json, else one line on stderr."""
    if as_json:
        print(json.dumps({"error": error}, indent=2, ensure_ascii=False))
    else:
        print(human, file=sys.stderr)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        as_json = _wants_json(argv)
        if not as_json:
            exc.parser.print_usage(sys.stderr)
        error = {"code": "usage", "message": exc.message}
        return _fail(as_json, error, f"{exc.parser.prog}: error: {exc.message}", 2)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and friends
        sys.stderr.close()
        return 0
    except Exception as exc:
        failure = _failure(exc)
        if failure is None:
            raise
        return _fail(args.json, *failure)
    return code


if __name__ == "__main__":
    sys.exit(main())
