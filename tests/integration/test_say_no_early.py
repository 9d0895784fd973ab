"""Say no early, with the real reason (issue 16, items 1 and 3), through the local stack as a
person uses it: publish (`PUT /v1/plans/{slug}`, the real API handler with its real stores,
installations and price table) refuses with 422 naming the field and its line what would
otherwise fail minutes later, and writes nothing; a run whose `setup` command fails keeps
that command's redacted output tail in `bootstrap.json`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import httpx
import pytest
from steward.adapters.artifact_store import ArtifactStore
from steward.adapters.dynamo import Tables
from steward.local.sample_repo import SAMPLE_REPO, SECOND_REPO
from steward.local.stack import LocalStack
from steward.runner.run import SETUP_TAIL_CHARS

from tests.support.installations import link_installation
from tests.support.stack import local_stack

CHECK = "python -m pytest -q"
SUSPENDED_REPO = "steward-demo/frozen"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with local_stack(tmp_path_factory.mktemp("say-no-early"), plays=[], runner={}) as stack:
        endpoint = {"endpoint_url": stack.state["aws_endpoint_url"], "region_name": stack.state["region"]}
        tables = Tables.connect(stack.state["table_prefix"], **endpoint)
        link_installation(tables, "alice", SUSPENDED_REPO, suspended=True)
        yield stack


@pytest.fixture(autouse=True)
def _stack_env(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stack's handlers read their endpoint from the environment at a cold start.
    monkeypatch.setenv("AWS_ENDPOINT_URL", stack.state["aws_endpoint_url"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")


def client(stack: LocalStack, user: str) -> httpx.Client:
    token = stack.state["users"][user]
    return httpx.Client(
        base_url=stack.state["api_url"], headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def front(*lines: str, repo: str | None = SAMPLE_REPO, checks: str | None = f"checks: [{CHECK}]") -> str:
    """A document whose YAML is `repo`, `checks`, then `lines` (document lines 2, 3, 4, ...)."""
    head = [f"repo: {repo}"] if repo else []
    head += [checks] if checks else []
    return "---\n" + "".join(f"{line}\n" for line in (*head, *lines)) + "---\n# Plan\n\n- [ ] Do it\n"


# One line per case: who publishes, the document, the field and line the 422 names, and
# what its message must say.
REFUSED: list[tuple[str, str, str, str, int, str]] = [
    # the repository: held by a live installation of the publishing user
    (
        "not installed",
        "alice",
        front(repo="octo/elsewhere"),
        "front_matter.repo",
        2,
        "no GitHub App installation",
    ),
    ("suspended", "alice", front(repo=SUSPENDED_REPO), "front_matter.repo", 2, "is suspended"),
    # an item's own repository (`repo:` in its details), checked as the front matter's is
    (
        "item repo not installed",
        "alice",
        front().replace("- [ ] Do it\n", "- [ ] Do it\n- [ ] Then this (after #1)\n  repo: octo/elsewhere\n"),
        "items[2].repo",
        8,
        "items: checkbox 2: repo octo/elsewhere: no GitHub App installation",
    ),
    (
        "item repo suspended",
        "alice",
        front().replace("- [ ] Do it\n", f"- [ ] Do it\n  repo: {SUSPENDED_REPO}\n"),
        "items[1].repo",
        7,
        "is suspended",
    ),
    ("another user's", "bob", front(), "front_matter.repo", 2, "linked to you"),
    # the model: priced
    ("unpriced model", "alice", front("model: gpt-9"), "front_matter.model", 4, "not in the price table"),
    ("model near miss", "alice", front("model: scripted-codr"), "front_matter.model", 4, "'scripted-coder'?"),
    # the budget: at least one call of 1 KiB in and the relay's 256 tokens out
    (
        "budget below a call",
        "alice",
        front("budget_usd: 0.002"),
        "front_matter.budget_usd",
        4,
        "0.002304 USD",
    ),
    (
        "budget below a pricey call",
        "alice",
        front("model: scripted-pricey", "budget_usd: 0.2"),
        "front_matter.budget_usd",
        5,
        "0.2304 USD",
    ),
    # checks and setup: run as argv, without a shell
    (
        "&&",
        "alice",
        front(checks=f"checks:\n  - {CHECK}\n  - ruff check . && mypy"),
        "front_matter.checks",
        5,
        "'&&'",
    ),
    ("||", "alice", front(checks="checks: [pytest || true]"), "front_matter.checks", 3, "'||'"),
    (";", "alice", front(checks="checks: ['pytest; ruff']"), "front_matter.checks", 3, "';'"),
    ("pipe", "alice", front(checks="checks: ['pytest | tee log']"), "front_matter.checks", 3, "'|'"),
    ("backticks", "alice", front(checks="checks: ['pytest `cat args`']"), "front_matter.checks", 3, "'`'"),
    ("$(", "alice", front(checks="checks: ['pytest $(cat args)']"), "front_matter.checks", 3, "'$('"),
    (">", "alice", front(checks="checks: ['pytest > out.txt']"), "front_matter.checks", 3, "'>'"),
    ("2>&1", "alice", front(checks="checks: ['pytest 2>&1']"), "front_matter.checks", 3, "'>'"),
    ("<", "alice", front(checks="checks: ['python < in.py']"), "front_matter.checks", 3, "'<'"),
    ("background &", "alice", front(checks="checks: ['pytest &']"), "front_matter.checks", 3, "'&'"),
    ("setup &&", "alice", front("setup:", "  - pip install -e . && npm ci"), "front_matter.setup", 5, "'&&'"),
    (
        "unsplittable",
        "alice",
        front(checks="checks: ['pytest \"-q']"),
        "front_matter.checks",
        3,
        "no closing quotation",
    ),
    # unknown keys: a near miss names the key it nearly is
    (
        "check",
        "alice",
        front("check: [pytest]", checks=None),
        "front_matter.check",
        3,
        "(did you mean 'checks'?)",
    ),
    ("budget", "alice", front("budget: 1"), "front_matter.budget", 4, "(did you mean 'budget_usd'?)"),
    (
        "Repo",
        "alice",
        front(f"Repo: {SAMPLE_REPO}", repo=None),
        "front_matter.Repo",
        3,
        "(did you mean 'repo'?)",
    ),
    ("max_attempt", "alice", front("max_attempt: 2"), "front_matter.max_attempt", 4, "'max_attempts'?"),
    ("not a near miss", "alice", front("colour: red"), "front_matter.colour", 4, "(known keys: repo, base,"),
    # YAML errors: the line where the YAML goes wrong
    ("unclosed list", "alice", front("setup: [pip install", "model: x"), "front_matter", 5, "invalid YAML"),
    ("bad indent", "alice", front(checks="checks:\n  - pytest\n - ruff"), "front_matter", 5, "invalid YAML"),
    ("tab", "alice", front("\tbase: main"), "front_matter", 4, "'\\t'"),
    ("duplicate", "alice", front(f"repo: {SAMPLE_REPO}"), "front_matter.repo", 4, "first on line 2"),
    ("bad value", "alice", front("base: 2024-13-45"), "front_matter.base", 4, "month must be in 1..12"),
    ("undefined alias", "alice", front("model: *nope"), "front_matter", 4, "undefined alias"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[case[0] for case in REFUSED])
def test_publish_refuses_what_would_fail_later_naming_field_and_line(
    stack: LocalStack, case: tuple[str, str, str, str, int, str]
) -> None:
    _, user, markdown, field, line, says = case
    api = client(stack, user)
    response = api.put("/v1/plans/refused", json={"markdown": markdown})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"], error["line"]) == ("invalid_document", field, line), error
    assert says in error["message"], error["message"]
    assert api.get("/v1/plans/refused").status_code == 404  # nothing written


def test_what_only_looks_like_a_refusal_is_published(stack: LocalStack) -> None:
    markdown = front(
        # shell syntax inside quotes is an argument (a shell the check runs itself sees it)
        checks="checks:\n  - sh -c 'pytest -q && ruff check .'\n  - pytest -k \"a or b\" ';'\n  - echo a\\;b",
        repo=SAMPLE_REPO.upper(),  # GitHub compares names case-insensitively
    ).replace("---\n# Plan", "budget_usd: 0.002304\n---\n# Plan")  # exactly one minimal call
    response = client(stack, "alice").put("/v1/plans/accepted", json={"markdown": markdown})
    assert response.status_code == 200, response.text
    assert response.json()["repo"] == SAMPLE_REPO.upper()
    # an item in the installation's other repository
    two = front().replace(
        "- [ ] Do it\n", f"- [ ] Do it\n- [ ] Then this (after #1)\n  repo: {SECOND_REPO}\n"
    )
    response = client(stack, "alice").put("/v1/plans/two-repos", json={"markdown": two})
    assert response.status_code == 200, response.text
    assert [(i["repo"], i["after"]) for i in response.json()["items"]] == [
        (SAMPLE_REPO, []),
        (SECOND_REPO, [1]),
    ]


def eventually(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.2)


def test_a_failed_setup_command_leaves_its_redacted_output_tail_in_bootstrap_json(stack: LocalStack) -> None:
    api = client(stack, "alice")
    assert api.put("/v1/loop", json={"interval_seconds": 1}).status_code == 200
    token = "ghp_" + "a" * 36
    # 6000 characters of noise, a token, then the reason on stderr; it exits 3.
    program = (
        "import sys; print('x' * 6000); print('leaked " + token[:4] + "' + 'a' * 36); "
        "print('no matching distribution for left-pad', file=sys.stderr); sys.exit(3)"
    )
    markdown = front("setup:", f'  - python -u -c "{program}"', "max_attempts: 1")
    published = api.put("/v1/plans/setup-fails", json={"markdown": markdown})
    assert published.status_code == 200, published.text
    api.post("/v1/plans/setup-fails/confirm")
    eventually(lambda: api.get("/v1/plans/setup-fails").json()["items"][0]["task_id"] is not None)
    task_id = api.get("/v1/plans/setup-fails").json()["items"][0]["task_id"]
    eventually(lambda: api.get(f"/v1/tasks/{task_id}").json()["status"] == "failed")
    task: dict[str, Any] = api.get(f"/v1/tasks/{task_id}").json()
    assert task["classification"] == "final"

    s3 = boto3.client("s3", endpoint_url=stack.state["aws_endpoint_url"], region_name=stack.state["region"])
    text = ArtifactStore("steward-artifacts", client=s3).read_text(task_id, "bootstrap.json")
    assert text is not None
    setup = next(stage for stage in json.loads(text)["stages"] if stage["stage"] == "setup 1")
    assert (setup["status"], setup["exit_code"]) == ("failed", 3)
    tail = setup["output_tail"]
    assert tail.rstrip().endswith("no matching distribution for left-pad")
    assert len(tail) <= SETUP_TAIL_CHARS
    assert tail.startswith("[truncated ")  # the head of the noise is cut, the end is kept
    assert token not in text
    assert "leaked [REDACTED]" in tail
