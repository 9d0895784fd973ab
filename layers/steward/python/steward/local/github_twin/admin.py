"""Client of the twin's admin API, for the CLI (`steward local github merge|close OWNER/REPO#N`)
and for tests that drive a twin in another process."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import httpx

_PULL_REF = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*)/([A-Za-z0-9_.-]+)#([0-9]+)$")


class AdminError(Exception):
    """The twin refused an admin call (status and its message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def parse_pull_ref(text: str) -> tuple[str, int]:
    """`OWNER/REPO#N` -> (`OWNER/REPO`, N); ValueError for anything else."""
    match = _PULL_REF.match(text.strip())
    if match is None:
        raise ValueError(f"expected OWNER/REPO#NUMBER, got {text!r}")
    return f"{match.group(1)}/{match.group(2)}", int(match.group(3))


def merge(github_url: str, full_name: str, number: int) -> dict[str, Any]:
    """Merge as the reviewer; the pull request's JSON."""
    result: dict[str, Any] = _call(github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/merge")
    return result


def close(github_url: str, full_name: str, number: int) -> dict[str, Any]:
    """Close unmerged as the reviewer; the pull request's JSON."""
    result: dict[str, Any] = _call(github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/close")
    return result


def pulls(github_url: str, full_name: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = _call(github_url, "GET", f"{_repo_path(full_name)}/pulls")
    return result


def comments(github_url: str, full_name: str, number: int) -> list[dict[str, Any]]:
    """The comments of a pull request, oldest first."""
    result: list[dict[str, Any]] = _call(
        github_url, "GET", f"{_repo_path(full_name)}/pulls/{number}/comments"
    )
    return result


def review(
    github_url: str,
    full_name: str,
    number: int,
    *,
    state: str,
    body: str,
    comments: list[dict[str, Any]],
    login: str | None = None,
) -> dict[str, Any]:
    """Submit a review as `login` (default the collaborator octo-reviewer); the review."""
    payload = {"state": state, "body": body, "comments": comments, "login": login}
    result: dict[str, Any] = _call(
        github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/reviews", json=payload
    )
    return result


def comment(
    github_url: str, full_name: str, number: int, body: str, *, login: str | None = None
) -> dict[str, Any]:
    """Comment on a pull request's conversation as `login`; the comment."""
    payload = {"body": body, "login": login}
    result: dict[str, Any] = _call(
        github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/comments", json=payload
    )
    return result


def check(
    github_url: str,
    full_name: str,
    number: int,
    *,
    name: str,
    conclusion: str,
    output: str = "",
    ref: str | None = None,
) -> dict[str, Any]:
    """Complete a check run on the pull request's head (or `ref`'s); the check run."""
    payload = {"name": name, "conclusion": conclusion, "output": output, "ref": ref}
    result: dict[str, Any] = _call(
        github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/checks", json=payload
    )
    return result


def status(
    github_url: str,
    full_name: str,
    number: int,
    *,
    context: str,
    state: str,
    description: str = "",
    ref: str | None = None,
) -> dict[str, Any]:
    """Post a commit status `context` (error, failure, pending or success) on the pull
    request's head (or `ref`'s); the status."""
    payload = {"context": context, "state": state, "description": description, "ref": ref}
    result: dict[str, Any] = _call(
        github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/statuses", json=payload
    )
    return result


def push(github_url: str, full_name: str, number: int, *, login: str | None = None) -> dict[str, Any]:
    """Push one commit onto the pull request's branch as `login`; the pull request."""
    result: dict[str, Any] = _call(
        github_url, "POST", f"{_repo_path(full_name)}/pulls/{number}/push", json={"login": login}
    )
    return result


def deliveries(github_url: str) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = _call(github_url, "GET", "deliveries")
    return result


def set_faults(github_url: str, **values: int) -> dict[str, int]:
    result: dict[str, int] = _call(github_url, "POST", "faults", json=values)
    return result


def withhold(github_url: str, on: bool) -> bool:
    """While on, the twin records deliveries and never sends them (lost webhooks)."""
    return bool(_call(github_url, "POST", "withhold", json={"on": on})["withholding"])


def flush(github_url: str) -> int:
    return int(_call(github_url, "POST", "flush")["flushed"])


def configure_app(github_url: str, **changes: Any) -> dict[str, Any]:
    """Change the App's settings (`webhook_url`, `webhook_secret`, `events`, `private_key`:
    a PEM or "new"); the settings now (with the key's PEM when it changed)."""
    result: dict[str, Any] = _call(github_url, "PATCH", "app", json=changes)
    return result


def _repo_path(full_name: str) -> str:
    owner, _, name = full_name.partition("/")
    return f"repos/{quote(owner, safe='')}/{quote(name, safe='')}"


def _call(github_url: str, method: str, path: str, *, json: Any = None) -> Any:
    url = f"{github_url.rstrip('/')}/_twin/{path}"
    with httpx.Client(timeout=30.0, trust_env=False) as client:
        response = client.request(method, url, json=json)
    if response.is_error:
        try:
            message = str(response.json().get("message", response.text))
        except ValueError:
            message = response.text
        raise AdminError(response.status_code, message)
    return response.json()
