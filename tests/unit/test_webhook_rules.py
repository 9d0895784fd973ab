"""The pure webhook rules of `steward.domain.webhooks`: reading only what Steward uses from
real and hostile payloads, and the installation merge's tie rule."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from steward.domain.errors import BadRequest
from steward.domain.models import TaskStatus
from steward.domain.webhooks import (
    REPORT,
    SUSPEND,
    UNSUSPEND,
    InstallationChange,
    InstallationSync,
    branch_problem,
    installation_change,
    merge,
    pull_request_facts,
    sync_from_map,
    sync_to_map,
)

from tests.support.github_payloads import event_of, real_payload, real_payload_files

BRANCH = "steward/" + "a1" * 12


def test_the_rules_import_nothing_but_the_standard_library_pydantic_and_the_domain() -> None:
    code = (
        "import sys, steward.domain.webhooks\n"
        "print(sorted({m for m in sys.modules if m.split('.')[0] in "
        "{'boto3', 'botocore', 'githubkit', 'githubkit_schemas', 'httpx'} "
        "or m.startswith(('steward.adapters', 'steward.services', 'steward.local', 'steward.runner'))}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# ---- pull requests


def _pull_request_files() -> list[str]:
    return [p.name for p in real_payload_files() if event_of(p) == "pull_request"]


@pytest.mark.parametrize("name", _pull_request_files())
def test_every_real_pull_request_is_read(name: str) -> None:
    payload = real_payload(name)
    facts = pull_request_facts(payload)
    pr = payload["pull_request"]
    assert (facts.number, facts.url, facts.head_ref) == (pr["number"], pr["html_url"], pr["head"]["ref"])
    assert facts.merged is bool(pr.get("merged"))
    assert facts.repository == payload["repository"]["full_name"]
    assert branch_problem(facts) == "the head branch is not a canonical Steward branch"


def test_a_merged_real_pull_request_targets_merged_and_a_fork_is_not_stewards() -> None:
    merged = pull_request_facts(real_payload("reallyfastci.pull_request.closed.merged.fork.json"))
    assert (merged.merged, merged.target) == (True, TaskStatus.MERGED)
    closed = pull_request_facts(real_payload("octokit.pull_request.closed.json"))
    assert (closed.merged, closed.target) == (False, TaskStatus.CLOSED)
    fork = real_payload("reallyfastci.pull_request.opened.fork.json")
    fork["pull_request"]["head"]["ref"] = BRANCH
    assert branch_problem(pull_request_facts(fork)) == "the head branch lives in another repository (a fork)"


def _opened() -> dict[str, Any]:
    payload = copy.deepcopy(real_payload("octokit.pull_request.opened.json"))
    payload["pull_request"]["head"]["ref"] = BRANCH
    return payload


def _drop(*path: str) -> Callable[[dict[str, Any]], None]:
    def edit(payload: dict[str, Any]) -> None:
        node = payload
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


def _set(value: Any, *path: str) -> Callable[[dict[str, Any]], None]:
    def edit(payload: dict[str, Any]) -> None:
        node = payload
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


# Fields Steward never reads, or reads as optional: whatever happens to them, the payload is read.
TOLERATED: dict[str, tuple[Callable[[dict[str, Any]], None], Callable[[Any], bool]]] = {
    "label without archived_by (as GitHub sends it)": (
        lambda p: None,
        lambda f: f.target is TaskStatus.REVIEW,
    ),
    "no auto_merge": (_drop("pull_request", "auto_merge"), lambda f: f.target is TaskStatus.REVIEW),
    "merged absent on an open pull request": (_drop("pull_request", "merged"), lambda f: not f.merged),
    "merged null": (_set(None, "pull_request", "merged"), lambda f: not f.merged),
    "head repository of a deleted fork": (
        _set(None, "pull_request", "head", "repo"),
        lambda f: f.head_repository_id is None and branch_problem(f) is not None,
    ),
    "no installation (a repository hook)": (
        _drop("installation"),
        lambda f: branch_problem(f) == "the event names no installation",
    ),
    "installation null": (_set(None, "installation"), lambda f: f.installation_id is None),
    "labels of another shape": (_set([{"name": 5}], "pull_request", "labels"), lambda f: True),
    "no user": (
        _drop("pull_request", "user"),
        lambda f: True,
    ),
    "no sender": (_drop("sender"), lambda f: True),
    "a field GitHub adds tomorrow": (_set({"x": 1}, "pull_request", "new_thing"), lambda f: True),
}


@pytest.mark.parametrize("case", TOLERATED)
def test_fields_steward_does_not_need_never_refuse_a_pull_request(case: str) -> None:
    edit, check = TOLERATED[case]
    payload = _opened()
    edit(payload)
    assert check(pull_request_facts(payload)), case


# Fields Steward needs: a delivery lacking one is a 400 naming it.
UNUSABLE_PULL_REQUESTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "no pull_request": (_drop("pull_request"), "pull_request"),
    "pull_request null": (_set(None, "pull_request"), "pull_request"),
    "no head.ref": (_drop("pull_request", "head", "ref"), "pull_request.head.ref"),
    "head.ref null": (_set(None, "pull_request", "head", "ref"), "pull_request.head.ref"),
    "no base.repo": (_drop("pull_request", "base", "repo"), "pull_request.base.repo"),
    "no number": (_drop("pull_request", "number"), "pull_request.number"),
    "a state GitHub has not": (_set("merged", "pull_request", "state"), "pull_request.state"),
    "no html_url": (_drop("pull_request", "html_url"), "pull_request.html_url"),
    "no repository": (_drop("repository"), "repository"),
    "no repository.full_name": (_drop("repository", "full_name"), "repository.full_name"),
    "an installation without id": (_set({"node_id": "x"}, "installation"), "installation.id"),
}


@pytest.mark.parametrize("case", UNUSABLE_PULL_REQUESTS)
def test_a_pull_request_lacking_what_steward_needs_is_a_bad_request_naming_it(case: str) -> None:
    edit, where = UNUSABLE_PULL_REQUESTS[case]
    payload = _opened()
    edit(payload)
    with pytest.raises(BadRequest) as caught:
        pull_request_facts(payload)
    assert caught.value.field == where
    assert f"the pull_request payload's {where} " in caught.value.message


# ---- installations


def _installation_files() -> list[str]:
    return [p.name for p in real_payload_files() if event_of(p).startswith("installation")]


@pytest.mark.parametrize("name", _installation_files())
def test_every_real_installation_event_is_read(name: str) -> None:
    payload = real_payload(name)
    change = installation_change(event_of(name), payload)
    installation = payload["installation"]
    assert change.installation_id == installation["id"]
    assert change.account == installation["account"]["login"]
    assert change.stamp > 1_500_000_000_000  # milliseconds, after 2017
    assert change.suspended is (payload["action"] == "suspend")


def test_epoch_seconds_and_iso_stamps_agree_and_offsets_count() -> None:
    created = installation_change("installation", real_payload("octokit.installation.created.json"))
    assert created.stamp == 1557933591 * 1000
    suspend = installation_change("installation", real_payload("octokit.installation.suspend.json"))
    unsuspend = installation_change("installation", real_payload("octokit.installation.unsuspend.json"))
    assert (
        suspend.stamp
        == unsuspend.stamp
        == int(datetime(2021, 4, 29, 2, 32, 50, tzinfo=UTC).timestamp()) * 1000
    )
    assert (suspend.precedence, unsuspend.precedence) == (SUSPEND, UNSUSPEND)
    naive = copy.deepcopy(real_payload("octokit.installation.suspend.json"))
    naive["installation"]["updated_at"] = "2021-04-29T02:32:50"  # no offset: UTC, not the host's zone
    assert installation_change("installation", naive).stamp == suspend.stamp


@pytest.mark.parametrize(
    ("account", "expected"),
    [
        ({"login": "octo-org", "type": "Organization"}, "octo-org"),
        ({"slug": "octo-enterprise", "name": "Octo Enterprise"}, "octo-enterprise"),
        ({"name": "Octo Enterprise"}, "Octo Enterprise"),
        (None, None),
    ],
)
def test_an_account_is_a_user_an_organization_or_an_enterprise(
    account: dict[str, str] | None, expected: str | None
) -> None:
    payload = copy.deepcopy(real_payload("octocrab.installation.created.json"))
    payload["installation"]["account"] = account
    assert installation_change("installation", payload).account == expected


UNUSABLE_INSTALLATIONS: dict[str, tuple[str, str, Callable[[dict[str, Any]], None], str]] = {
    "no installation": (
        "installation",
        "octokit.installation.suspend.json",
        _drop("installation"),
        "installation",
    ),
    "installation null": (
        "installation",
        "octokit.installation.suspend.json",
        _set(None, "installation"),
        "installation",
    ),
    "no updated_at": (
        "installation",
        "octokit.installation.suspend.json",
        _drop("installation", "updated_at"),
        "installation.updated_at",
    ),
    "updated_at not a time": (
        "installation",
        "octokit.installation.suspend.json",
        _set("yesterday", "installation", "updated_at"),
        "installation.updated_at",
    ),
    "updated_at beyond any calendar": (
        "installation",
        "octokit.installation.created.json",
        _set(10**20, "installation", "updated_at"),
        "installation.updated_at",
    ),
    "no installation.id": (
        "installation",
        "octokit.installation.created.json",
        _drop("installation", "id"),
        "installation.id",
    ),
    "added without repositories_added": (
        "installation_repositories",
        "octokit.installation_repositories.added.json",
        _drop("repositories_added"),
        "repositories_added",
    ),
    "a listed repository's name not a string": (
        "installation_repositories",
        "octokit.installation_repositories.added.json",
        _set([{"full_name": 5}], "repositories_added"),
        "repositories_added[0].full_name",
    ),
}


@pytest.mark.parametrize("case", UNUSABLE_INSTALLATIONS)
def test_an_installation_event_lacking_what_steward_needs_is_a_bad_request_naming_it(case: str) -> None:
    event, name, edit, where = UNUSABLE_INSTALLATIONS[case]
    payload = copy.deepcopy(real_payload(name))
    edit(payload)
    with pytest.raises(BadRequest) as caught:
        installation_change(event, payload)
    assert caught.value.field == where
    assert f"the {event} payload's {where} " in caught.value.message


def test_removed_may_omit_the_added_list_and_a_nameless_entry_is_skipped() -> None:
    payload = copy.deepcopy(real_payload("octokit.installation_repositories.removed.json"))
    payload["repositories_added"] = None
    payload["repositories_removed"].append({"id": 1})
    change = installation_change("installation_repositories", payload)
    assert (change.added, change.removed) == ((), ("octocat/Hello-World",))


# ---- the tie rule


def _change(
    stamp: int, *, suspended: bool, precedence: int = REPORT, account: str | None = "octo", **extra: Any
) -> InstallationChange:
    return InstallationChange(
        installation_id=1, stamp=stamp, account=account, suspended=suspended, precedence=precedence, **extra
    )


def _fold(*changes: InstallationChange) -> InstallationSync:
    state = InstallationSync()
    for change in changes:
        state = merge(state, change)
    return state


SUSPEND_AT_5 = _change(5, suspended=True, precedence=SUSPEND)
UNSUSPEND_AT_5 = _change(5, suspended=False, precedence=UNSUSPEND)
REPORT_AT_5 = _change(5, suspended=False, added=("octo/a",))


@pytest.mark.parametrize(
    ("changes", "suspended", "refresh"),
    [
        # octokit's pair: the unsuspend undoes the suspend it shares a stamp with, in any order
        ((SUSPEND_AT_5, UNSUSPEND_AT_5), False, True),
        ((UNSUSPEND_AT_5, SUSPEND_AT_5), False, True),
        ((UNSUSPEND_AT_5, SUSPEND_AT_5, SUSPEND_AT_5), False, True),
        # a suspend stamped like an earlier report (a repository added that second) holds
        ((REPORT_AT_5, SUSPEND_AT_5), True, True),
        ((SUSPEND_AT_5, REPORT_AT_5), True, True),
        # a later stamp decides outright, and settles the dispute
        ((SUSPEND_AT_5, UNSUSPEND_AT_5, _change(6, suspended=True, precedence=SUSPEND)), True, False),
        ((_change(6, suspended=False, precedence=UNSUSPEND), SUSPEND_AT_5), False, False),
        ((SUSPEND_AT_5,), True, False),
        # two reports stamped alike that disagree: suspended, until re-read
        ((_change(5, suspended=True), _change(5, suspended=False)), True, True),
    ],
)
def test_a_tie_between_suspend_and_unsuspend_does_not_strand_the_installation(
    changes: tuple[InstallationChange, ...], suspended: bool, refresh: bool
) -> None:
    for order in (changes, tuple(reversed(changes))):
        state = _fold(*order)
        assert state.view(1, "alice").suspended is suspended, order
        assert state.needs_refresh is refresh, order
        assert ("suspended" in state.disputes()) is refresh


def test_disputed_repositories_and_accounts_are_flagged_and_resolved_conservatively() -> None:
    state = _fold(
        _change(5, suspended=False, added=("octo/a",)),
        _change(5, suspended=False, removed=("octo/a",)),
        InstallationChange(installation_id=1, stamp=5, account="octo-inc", suspended=False),
    )
    assert state.view(1, None).repositories == ()
    assert state.view(1, None).account == "octo-inc"
    assert state.disputes() == ("account", "repository octo/a")
    later = merge(state, _change(6, suspended=False, account=None, added=("octo/a",)))
    assert later.disputes() == ("account",)  # named no account: the login and its dispute stay
    assert later.view(1, None).repositories == ("octo/a",)
    renamed = merge(later, _change(7, suspended=False, account="octo"))
    assert (renamed.disputes(), renamed.view(1, None).account) == ((), "octo")
    deleted = merge(state, _change(7, suspended=True, deleted=True))
    assert not deleted.needs_refresh  # a deletion is final: nothing to re-read


def test_the_merge_state_round_trips_and_old_maps_still_read() -> None:
    state = _fold(SUSPEND_AT_5, UNSUSPEND_AT_5, _change(5, suspended=False, removed=("octo/a",)), REPORT_AT_5)
    stored = sync_to_map(state)
    assert stored["needs_refresh"] is True
    assert sync_from_map(stored, None) == state
    old = {  # written before disputes and precedence were recorded
        "repos": {"octo/a": {"name": "octo/a", "present": True, "stamp": 3}},
        "snapshot": 3,
        "suspended": {"stamp": 4, "value": True},
        "account": {"stamp": 4, "login": "octo"},
        "deleted": False,
    }
    read = sync_from_map(old, None)
    assert (read.view(1, None).suspended, read.needs_refresh) == (True, False)
    assert merge(read, UNSUSPEND_AT_5).view(1, None).suspended is False
