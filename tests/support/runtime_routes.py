"""The runtime function's routes served on loopback, bound to the test's tables, bucket and
a fresh capability key, as the composition root would bind them in AWS; and the GitHub they
check a review ending's pull request on (the twin, with alice's installation)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from steward import runtime_handler, wiring
from steward.adapters.capability_signer import kms_client
from steward.adapters.github import GitHubApp, PullRef
from steward.adapters.installation_store import InstallationStore
from steward.config import Settings
from steward.domain.installations import Installation
from steward.domain.models import utcnow
from steward.local.github_twin import GitHubTwin
from steward.local.http_adapter import LambdaHttpServer
from steward.wiring import Services

from tests.conftest import REGION


def new_capability_key() -> str:
    kms = kms_client(region_name=REGION)
    return str(kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"])


@contextmanager
def runtime_server(
    services: Services, settings: Settings, monkeypatch: pytest.MonkeyPatch, key_id: str
) -> Iterator[LambdaHttpServer]:
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", services.tables.prefix)
    monkeypatch.setenv("STEWARD_ARTIFACTS_BUCKET", settings.artifacts_bucket)
    monkeypatch.setenv("STEWARD_CAPABILITY_KEY_ID", key_id)
    wiring.reset()
    try:
        with LambdaHttpServer(
            runtime_handler.lambda_handler, kind="http_api", function_name="steward-runtime"
        ) as server:
            yield server
    finally:
        wiring.reset()


@dataclass
class RuntimeGitHub:
    """The twin the runtime routes ask, its App and the installation linked to the owner."""

    twin: GitHubTwin
    app: GitHubApp
    installation: int

    def pull(self, repo: str, branch: str) -> PullRef:
        """What a runtime does before its review ending: push `branch`, open its pull request."""
        token = self.app.installation_token(self.installation, repo).token
        self.twin.push(token, repo, branch, {f"{branch.replace('/', '-')}.txt": "done\n"})
        return self.app.open_pull(self.installation, repo, head=branch, base="main", title="Change", body="")


@contextmanager
def runtime_github(
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    repos: tuple[str, ...] = ("octo/demo",),
    owner: str = "alice",
) -> Iterator[RuntimeGitHub]:
    """The twin with `repos`, its installation linked to `owner`, and the App settings the
    runtime routes read (enter it before their first request)."""
    with GitHubTwin(root / "twin") as twin:
        for repo in repos:
            twin.create_repo(repo, {"README.md": "# demo\n"})
        installation = twin.create_installation(repos[0].split("/")[0], list(repos))
        store = InstallationStore(services.tables)
        store.put(
            Installation(installation_id=installation, account=repos[0].split("/")[0], repositories=repos),
            now=utcnow(),
        )
        store.link(installation, owner, now=utcnow(), force=True)
        monkeypatch.setenv("STEWARD_GITHUB_APP_ID", str(twin.app_id))
        monkeypatch.setenv("STEWARD_GITHUB_PRIVATE_KEY", twin.app_private_key_pem.decode())
        monkeypatch.setenv("STEWARD_GITHUB_API_URL", twin.url)
        wiring.reset()
        with GitHubApp(twin.app_id, twin.app_private_key_pem, base_url=twin.url) as app:
            yield RuntimeGitHub(twin, app, installation)
