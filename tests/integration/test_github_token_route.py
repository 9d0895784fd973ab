"""`POST /v1/runtime/github-token`: a runtime's capability (KMS-signed, moto) for an
installation token of the GitHub twin, scoped to its task's repository, issued only while
the task runs and its owner's installation is live and holds the repository (docs/concepts/runner.md)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from steward import runtime_handler, wiring
from steward.adapters.capability_signer import CapabilityVerifier, KmsCapabilitySigner, kms_client
from steward.adapters.git import GitError, remote_git
from steward.adapters.github import GitHubApp, GitHubError
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.domain.capability import capability_claims
from steward.domain.errors import Forbidden, LifecycleError, Unauthorized
from steward.domain.installations import Installation
from steward.domain.models import Task, utcnow
from steward.local.github_twin import GitHubTwin
from steward.local.http_adapter import LambdaHttpServer
from steward.services.github_tokens import GitHubTokens
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.documents import document
from tests.support.plans import spawn_item

REPO = "octo/demo"


@dataclass
class Kit:
    services: Services
    twin: GitHubTwin
    app: GitHubApp
    signer: KmsCapabilitySigner
    key_id: str
    installation: int
    tokens: GitHubTokens
    root: Path

    def task(self, *, user: str = "alice", slug: str = "demo", running: bool = True) -> Task:
        self.services.plans.publish(user, slug, document("Change the thing", repo=REPO))
        task, _ = spawn_item(self.services, self.services.plans.confirm(user, slug), 1)
        if not running:
            return task
        now = utcnow()
        return TaskStore(self.services.tables).claim(
            task, runtime_id="r1", now=now, deadline=now + timedelta(hours=1)
        )

    def capability(self, task: Task, **changes: Any) -> str:
        claims = capability_claims(
            sub=task.user, task_id=task.id, model_id=task.model, max_budget_usd=task.budget_usd, now=utcnow()
        )
        return self.signer.mint({**claims, **changes})

    def link(
        self, owner: str = "alice", *, repositories: tuple[str, ...] = (REPO,), suspended: bool = False
    ) -> None:
        store = InstallationStore(self.services.tables)
        store.put(
            Installation(
                installation_id=self.installation,
                account="octo",
                repositories=repositories,
                suspended=suspended,
            ),
            now=utcnow(),
        )
        store.link(self.installation, owner, now=utcnow(), force=True)

    def reaches(self, token: str, repo: str) -> bool:
        url = self.app.git_url(repo)
        try:
            remote_git(["ls-remote", url], token=token, token_url=url)
        except GitError:
            return False
        return True


@pytest.fixture
def kit(services: Services, tmp_path: Path) -> Iterator[Kit]:
    kms = kms_client(region_name=REGION)
    key_id = str(kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"])
    with GitHubTwin(tmp_path / "twin") as twin:
        twin.create_repo(REPO, {"README.md": "# demo\n"})
        twin.create_repo("octo/other", {"README.md": "# other\n"})
        installation = twin.create_installation("octo", [REPO, "octo/other"])
        with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url) as app:
            tables = services.tables
            tokens = GitHubTokens(
                CapabilityVerifier.from_kms(kms, [key_id]).verify,
                TaskStore(tables),
                InstallationStore(tables),
                app,
            )
            signer = KmsCapabilitySigner(kms, key_id)
            yield Kit(services, twin, app, signer, key_id, installation, tokens, tmp_path)


# ---- the service


def test_a_running_task_gets_a_token_for_its_repository_only(kit: Kit) -> None:
    task = kit.task()
    kit.link()
    before = datetime.now(UTC)
    answer = kit.tokens.issue(f"Bearer {kit.capability(task)}")

    assert set(answer) == {"token", "expires_at", "repository", "installation_id", "api_url", "clone_url"}
    assert answer["repository"] == REPO
    assert answer["installation_id"] == kit.installation
    assert answer["api_url"] == kit.twin.url
    assert answer["clone_url"] == f"{kit.twin.url}/{REPO}.git"
    expires = datetime.fromisoformat(answer["expires_at"].replace("Z", "+00:00"))
    assert before + timedelta(minutes=58) < expires <= before + timedelta(minutes=61)
    assert answer["expires_at"].endswith("Z")
    assert kit.reaches(answer["token"], REPO)
    assert not kit.reaches(answer["token"], "octo/other")  # the installation holds it; the token does not
    # Asking again (at push time) gives a fresh token.
    assert kit.tokens.issue(f"bearer {kit.capability(task)}")["token"] != answer["token"]


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Basic abc", "Token x", "Bearer not-a-jwt"]
)
def test_without_a_valid_bearer_capability_it_is_401(kit: Kit, header: str | None) -> None:
    kit.link()
    with pytest.raises(Unauthorized):
        kit.tokens.issue(header)


def test_an_expired_or_forged_capability_is_401(kit: Kit) -> None:
    task = kit.task()
    kit.link()
    old = int((datetime.now(UTC) - timedelta(hours=2)).timestamp())
    with pytest.raises(Unauthorized, match="expired"):
        kit.tokens.issue(f"Bearer {kit.capability(task, iat=old, exp=old + 600)}")
    header, payload, signature = kit.capability(task).split(".")
    forged = kit.capability(task, task_id="t" + "0" * 24).split(".")[1]
    with pytest.raises(Unauthorized):
        kit.tokens.issue(f"Bearer {header}.{forged}.{signature}")
    assert payload != forged


def test_an_unknown_task_is_401(kit: Kit) -> None:
    task = kit.task()
    kit.link()
    with pytest.raises(Unauthorized, match="no longer exists"):
        kit.tokens.issue(f"Bearer {kit.capability(task, task_id='t' + 'f' * 24)}")


def test_another_users_capability_is_403(kit: Kit) -> None:
    task = kit.task()
    kit.link()
    with pytest.raises(Forbidden, match="another user"):
        kit.tokens.issue(f"Bearer {kit.capability(task, sub='bob')}")


def test_a_task_that_is_not_running_is_409(kit: Kit) -> None:
    queued = kit.task(running=False)
    kit.link()
    with pytest.raises(LifecycleError, match="queued"):
        kit.tokens.issue(f"Bearer {kit.capability(queued)}")
    running = kit.task(slug="second")
    kit.services.tasks.cancel("alice", running.id)
    with pytest.raises(LifecycleError, match="cancelled") as caught:
        kit.tokens.issue(f"Bearer {kit.capability(running)}")
    assert caught.value.status == 409


def test_a_superseded_task_gets_no_token(kit: Kit) -> None:
    task = kit.task()
    kit.link()
    assert kit.tokens.issue(f"Bearer {kit.capability(task)}")["token"]
    kit.services.plans.publish("alice", "demo", document("Change the thing, differently", repo=REPO))
    kit.services.plans.confirm("alice", "demo")
    with pytest.raises(LifecycleError, match="cancelled") as refused:
        kit.tokens.issue(f"Bearer {kit.capability(task)}")
    assert refused.value.status == 409


@pytest.mark.parametrize("case", ["none", "suspended", "without the repo", "another user's"])
def test_no_live_installation_holding_the_repo_is_403(kit: Kit, case: str) -> None:
    task = kit.task()
    if case == "suspended":
        kit.link(suspended=True)
    elif case == "without the repo":
        kit.link(repositories=("octo/other",))
    elif case == "another user's":
        kit.link("bob")
    with pytest.raises(Forbidden) as caught:
        kit.tokens.issue(f"Bearer {kit.capability(task)}")
    assert caught.value.message == f"no live GitHub App installation of the task's owner holds {REPO}"


def test_an_installation_github_no_longer_has_is_a_502_without_a_token(kit: Kit) -> None:
    task = kit.task()
    kit.link()
    kit.twin.suspend(kit.installation)  # GitHub knows before the webhook updated our table
    with pytest.raises(GitHubError) as caught:
        kit.tokens.issue(f"Bearer {kit.capability(task)}")
    assert (caught.value.status, caught.value.upstream_status) == (502, 403)
    assert "ghs_" not in str(caught.value)


# ---- the route in the runtime Lambda


@pytest.fixture
def endpoint(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaHttpServer]:
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", kit.services.tables.prefix)
    monkeypatch.setenv("STEWARD_CAPABILITY_KEY_ID", kit.key_id)
    monkeypatch.setenv("STEWARD_GITHUB_APP_ID", str(kit.twin.app_id))
    monkeypatch.setenv("STEWARD_GITHUB_PRIVATE_KEY", kit.twin.app_private_key_pem.decode())
    monkeypatch.setenv("STEWARD_GITHUB_API_URL", kit.twin.url)
    wiring.reset()
    with LambdaHttpServer(
        runtime_handler.lambda_handler, kind="http_api", function_name="steward-runtime"
    ) as server:
        yield server
    wiring.reset()


def test_the_route_issues_a_token_and_keeps_it_out_of_logs(
    kit: Kit, endpoint: LambdaHttpServer, capsys: pytest.CaptureFixture[str]
) -> None:
    task = kit.task()
    kit.link()
    url = f"{endpoint.url}/v1/runtime/github-token"
    capability = kit.capability(task)
    response = httpx.post(url, headers={"Authorization": f"Bearer {capability}"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["repository"] == REPO
    assert kit.reaches(body["token"], REPO)

    # The ticket exchange beside it still works (and still refuses a bad ticket).
    ticket = TicketStore(kit.services.tables).issue(kit.task(slug="other", running=False).id, now=utcnow())
    assert httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": ticket}).status_code == 200
    assert httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": ticket}).status_code == 401

    logged = capsys.readouterr()
    assert body["token"] not in logged.out + logged.err
    assert capability not in logged.out + logged.err


def test_the_route_maps_refusals_to_json_errors(kit: Kit, endpoint: LambdaHttpServer) -> None:
    task = kit.task()
    url = f"{endpoint.url}/v1/runtime/github-token"
    missing = httpx.post(url)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"

    forbidden = httpx.post(url, headers={"Authorization": f"Bearer {kit.capability(task)}"})  # not linked
    assert forbidden.status_code == 403
    assert forbidden.json()["error"] == {
        "code": "forbidden",
        "message": f"no live GitHub App installation of the task's owner holds {REPO}",
        "field": "repo",
    }

    kit.link()
    kit.services.tasks.cancel("alice", task.id)
    cancelled = httpx.post(url, headers={"Authorization": f"Bearer {kit.capability(task)}"})
    assert cancelled.status_code == 409
    assert cancelled.json()["error"]["code"] == "lifecycle"

    too_big = httpx.post(url, content=b"x" * 5000, headers={"Authorization": "Bearer x"})
    assert too_big.status_code == 413


def test_the_runtime_lambda_loads_no_github_client_until_a_token_is_asked_for() -> None:
    # The ticket exchange shares the runtime function's cold start; githubkit costs it ~150 ms.
    code = "import sys, steward.runtime_handler; print(sorted(m for m in sys.modules if m.startswith('githubkit')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
