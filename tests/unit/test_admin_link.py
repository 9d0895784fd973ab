"""`steward admin link-installation` links only an installation the GitHub App has: one the
installation sync recorded and that was not uninstalled since, `--force` or not; without AWS
settings, or when AWS fails, an operator command says so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from steward.adapters.dynamo import Tables
from steward.adapters.installation_store import InstallationStore
from steward.adapters.operator_aws import AwsFailure, AwsNotConfigured, failures_as_errors, require_configured
from steward.cli import main
from steward.domain.errors import Conflict
from steward.domain.installations import Installation
from steward.domain.models import utcnow
from steward.domain.webhooks import InstallationSync, sync_to_map
from steward.services.admin import UnknownInstallation, link_installation


def test_an_installation_the_app_does_not_have_is_refused_even_with_force(tables: Tables) -> None:
    for force in (False, True):
        with pytest.raises(UnknownInstallation, match="installation 42 is not one the GitHub App has"):
            link_installation(tables, 42, "alice", force=force)
    assert InstallationStore(tables).get(42) is None  # nothing recorded by the refusal


def test_an_uninstalled_installation_is_refused(tables: Tables) -> None:
    store = InstallationStore(tables)
    gone = Installation(installation_id=9, account="org", suspended=True)
    assert store.put_synced(gone, sync=sync_to_map(InstallationSync(deleted=True)), version=0, now=utcnow())
    with pytest.raises(UnknownInstallation, match="installation 9 was uninstalled"):
        link_installation(tables, 9, "alice", force=True)


def test_a_recorded_installation_is_linked_and_force_only_moves_it(tables: Tables) -> None:
    store = InstallationStore(tables)
    store.put(Installation(installation_id=7, account="org", repositories=("org/app",)), now=utcnow())
    assert link_installation(tables, 7, "alice", force=False).owner_sub == "alice"
    with pytest.raises(Conflict, match="another user"):
        link_installation(tables, 7, "bob", force=False)
    moved = link_installation(tables, 7, "bob", force=True)
    assert (moved.owner_sub, moved.repositories) == ("bob", ("org/app",))


def test_no_region_or_credentials_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(AwsNotConfigured, match="no AWS region or credentials configured: start"):
        require_configured("start it")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    with pytest.raises(AwsNotConfigured, match=r"region or credentials configured \(AWS_REGION is set, but"):
        require_configured("start it", aws_region_set=True)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with pytest.raises(AwsNotConfigured, match="no AWS credentials configured: start it"):
        require_configured("start it")
    monkeypatch.setenv("AWS_PROFILE", "missing")
    with pytest.raises(AwsNotConfigured, match=r"AWS settings unusable \(The config profile \(missing\)"):
        require_configured("start it")
    state_file = tmp_path / "local.json"
    assert main(["admin", "link-installation", "1", "--owner", "alice", "--state-file", str(state_file)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: not_configured: AWS settings unusable")
    assert f"`steward local up`, which writes {state_file}" in err


def test_botocore_failures_become_one_line() -> None:
    refused = ClientError({"Error": {"Code": "ResourceNotFoundException", "Message": "no table"}}, "GetItem")
    expected = r"^ResourceNotFoundException: no table \(is STEWARD_TABLE_PREFIX"
    with pytest.raises(AwsFailure, match=expected), failures_as_errors():
        raise refused
    with pytest.raises(AwsFailure, match="Could not connect to the endpoint URL"), failures_as_errors():
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
