"""Runtime capabilities: ES256 JWTs signed by a KMS key (moto, in-process), verified with the
public key only; the ticket exchange that mints them after checking durable state; and the
runtime Lambda behind the local HTTP adapter (docs/concepts/relay.md, docs/concepts/runner.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_der_public_key,
)
from steward import runtime_handler, wiring
from steward.adapters.capability_signer import CapabilityVerifier, KmsCapabilitySigner, kms_client
from steward.adapters.installation_store import InstallationStore
from steward.adapters.task_store import TaskStore
from steward.adapters.ticket_store import TicketStore
from steward.domain.capability import (
    AUDIENCE,
    ISSUER,
    REQUIRED_CLAIMS,
    Capability,
    capability_claims,
)
from steward.domain.errors import Forbidden, LifecycleError, StewardError, Unauthorized
from steward.domain.installations import Installation
from steward.domain.models import Task, utcnow
from steward.local.http_adapter import LambdaHttpServer
from steward.services.mint import Minter
from steward.wiring import Services

from tests.conftest import REGION
from tests.support.plans import spawn_item

REPO = "octo/demo"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def part(value: dict[str, Any]) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def sign_raw(kms: Any, key_id: str, header: dict[str, Any], claims: dict[str, Any]) -> str:
    """A JWS built here, independently of the signer: for headers the signer never writes."""
    signing_input = f"{part(header)}.{part(claims)}"
    der = kms.sign(
        KeyId=key_id, Message=signing_input.encode(), MessageType="RAW", SigningAlgorithm="ECDSA_SHA_256"
    )["Signature"]
    r, s = decode_dss_signature(der)
    return f"{signing_input}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def now_s() -> int:
    return int(datetime.now(UTC).timestamp())


@pytest.fixture
def kms(aws: None) -> Any:
    return kms_client(region_name=REGION)


def new_key(kms: Any) -> str:
    return str(kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="ECC_NIST_P256")["KeyMetadata"]["KeyId"])


@pytest.fixture
def key_id(kms: Any) -> str:
    return new_key(kms)


@pytest.fixture
def signer(kms: Any, key_id: str) -> KmsCapabilitySigner:
    return KmsCapabilitySigner(kms, key_id)


@pytest.fixture
def verifier(kms: Any, key_id: str) -> CapabilityVerifier:
    return CapabilityVerifier.from_kms(kms, [key_id])


def claims(**changes: Any) -> dict[str, Any]:
    """Valid claims issued now, with `changes` applied (a value of None removes the claim)."""
    base: dict[str, Any] = capability_claims(
        sub="alice",
        task_id="t123",
        model_id="scripted",
        max_budget_usd=Decimal("2.50"),
        now=datetime.now(UTC),
    )
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


# ---- mint and verify


def test_round_trip_carries_exact_claims_and_verifies_with_the_public_key(
    kms: Any, key_id: str, signer: KmsCapabilitySigner, verifier: CapabilityVerifier
) -> None:
    issued = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    made = capability_claims(
        sub="alice",
        task_id="t1",
        model_id="scripted",
        max_budget_usd=Decimal("2.50"),
        now=issued,
        lifetime_seconds=1800,
        jti="j-1",
    )
    token = signer.mint(made)

    header_part, payload_part, signature_part = token.split(".")
    assert json.loads(unb64url(header_part)) == {"alg": "ES256", "typ": "JWT", "kid": key_id}
    payload = json.loads(unb64url(payload_part))
    iat = int(issued.timestamp())
    assert payload == {
        "sub": "alice",
        "task_id": "t1",
        "model_id": "scripted",
        "max_budget_usd": "2.50",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": iat,
        "exp": iat + 1800,
        "jti": "j-1",
    }

    # JOSE form: r || s, 32 bytes each, and it verifies with the KMS public key directly.
    signature = unb64url(signature_part)
    assert len(signature) == 64
    public = load_der_public_key(kms.get_public_key(KeyId=key_id)["PublicKey"])
    assert isinstance(public, ec.EllipticCurvePublicKey)
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    public.verify(der, f"{header_part}.{payload_part}".encode(), ec.ECDSA(hashes.SHA256()))

    capability = verifier.verify(token, now=issued + timedelta(minutes=5))
    assert capability == Capability(
        sub="alice",
        task_id="t1",
        model_id="scripted",
        max_budget_usd=Decimal("2.50"),
        iss=ISSUER,
        aud=AUDIENCE,
        iat=iat,
        exp=iat + 1800,
        jti="j-1",
    )
    assert capability.model_dump(mode="json")["max_budget_usd"] == "2.50"

    # The same public key as PEM verifies too (what a relay without KMS access would hold).
    pem = public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    assert CapabilityVerifier.from_pem(key_id, pem).verify(token, now=issued) == capability


def test_fresh_tokens_verify_against_the_real_clock(
    signer: KmsCapabilitySigner, verifier: CapabilityVerifier
) -> None:
    capability = verifier.verify(signer.mint(claims()))
    assert capability.max_budget_usd == Decimal("2.50")
    assert capability.exp - capability.iat == 3600
    # within the leeway: just expired, or issued a little ahead of this clock
    verifier.verify(signer.mint(claims(iat=now_s() - 3600, exp=now_s() - 10)))
    verifier.verify(signer.mint(claims(iat=now_s() + 10, exp=now_s() + 600)))


@pytest.mark.parametrize(
    ("amount", "text"),
    [(Decimal("2.5"), "2.5"), (Decimal(2), "2"), (Decimal("1E+1"), "10"), (Decimal("0.000001"), "0.000001")],
)
def test_budgets_are_plain_decimal_strings(amount: Decimal, text: str) -> None:
    made = capability_claims(sub="a", task_id="t", model_id="m", max_budget_usd=amount, now=datetime.now(UTC))
    assert made["max_budget_usd"] == text


@pytest.mark.parametrize(
    "change",
    [
        {"max_budget_usd": Decimal("-1")},
        {"max_budget_usd": Decimal("0.0000001")},
        {"max_budget_usd": Decimal("NaN")},
        {"lifetime_seconds": 7201},
        {"lifetime_seconds": 0},
        {"sub": ""},
    ],
)
def test_claims_the_relay_would_refuse_are_never_built(change: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {
        "sub": "a",
        "task_id": "t",
        "model_id": "m",
        "max_budget_usd": Decimal("1.00"),
        "now": datetime.now(UTC),
    }
    with pytest.raises(ValueError):  # noqa: PT011 - pydantic's ValidationError is a ValueError
        capability_claims(**{**arguments, **change})


def refused(verifier: CapabilityVerifier, token: str) -> str:
    with pytest.raises(Unauthorized) as caught:
        verifier.verify(token)
    message = caught.value.message
    assert token not in message
    assert all(len(segment) < 8 or segment not in message for segment in token.split("."))
    return message


def test_alg_none_is_refused(key_id: str, verifier: CapabilityVerifier) -> None:
    token = f"{part({'alg': 'none', 'typ': 'JWT', 'kid': key_id})}.{part(claims())}."
    assert "ES256" in refused(verifier, token)


def test_hs256_signed_with_the_public_key_is_refused(
    kms: Any, key_id: str, verifier: CapabilityVerifier
) -> None:
    public = load_der_public_key(kms.get_public_key(KeyId=key_id)["PublicKey"])
    pem = public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    signing_input = f"{part({'alg': 'HS256', 'typ': 'JWT', 'kid': key_id})}.{part(claims())}"
    mac = hmac.new(pem, signing_input.encode(), hashlib.sha256).digest()
    refused(verifier, f"{signing_input}.{b64url(mac)}")


def test_a_valid_signature_over_a_changed_payload_is_refused(
    signer: KmsCapabilitySigner, verifier: CapabilityVerifier
) -> None:
    header, _, signature = signer.mint(claims()).split(".")
    forged = f"{header}.{part(claims(max_budget_usd='999.00'))}.{signature}"
    assert "signature" in refused(verifier, forged)


@pytest.mark.parametrize("missing", REQUIRED_CLAIMS)
def test_each_required_claim_missing_is_refused(
    signer: KmsCapabilitySigner, verifier: CapabilityVerifier, missing: str
) -> None:
    assert missing in refused(verifier, signer.mint(claims(**{missing: None})))


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("expired", lambda n: {"iat": n - 3600, "exp": n - 31}),
        ("iat in the future", lambda n: {"iat": n + 300, "exp": n + 900}),
        ("nbf in the future", lambda n: {"nbf": n + 300}),
        ("lifetime over 2 h", lambda n: {"iat": n - 10, "exp": n - 10 + 7201}),
        ("exp before iat", lambda n: {"iat": n, "exp": n - 1}),
        ("wrong aud", lambda n: {"aud": "someone-else"}),
        ("aud as a list", lambda n: {"aud": [AUDIENCE]}),
        ("wrong iss", lambda n: {"iss": "mallory"}),
        ("budget as a float", lambda n: {"max_budget_usd": 2.5}),
        ("budget as an integer", lambda n: {"max_budget_usd": 2}),
        ("budget with 7 places", lambda n: {"max_budget_usd": "2.5000001"}),
        ("negative budget", lambda n: {"max_budget_usd": "-1"}),
        ("budget in exponent form", lambda n: {"max_budget_usd": "1e3"}),
        ("exp as a string", lambda n: {"exp": str(n + 600)}),
        ("iat as a float", lambda n: {"iat": n + 0.5}),
        ("sub not a string", lambda n: {"sub": 7}),
        ("unknown claim", lambda n: {"scope": "admin"}),
    ],
)
def test_bad_claims_are_refused(
    signer: KmsCapabilitySigner, verifier: CapabilityVerifier, name: str, change: Any
) -> None:
    refused(verifier, signer.mint(claims(**change(now_s()))))


def test_a_past_nbf_is_accepted(signer: KmsCapabilitySigner, verifier: CapabilityVerifier) -> None:
    assert verifier.verify(signer.mint(claims(nbf=now_s() - 5))).sub == "alice"


def test_unknown_kid_is_refused(kms: Any, verifier: CapabilityVerifier) -> None:
    # validly signed, by a real key the verifier was not given
    other = KmsCapabilitySigner(kms, new_key(kms))
    assert "unknown key" in refused(verifier, other.mint(claims()))


def test_a_known_kid_naming_another_key_fails_the_signature(
    kms: Any, key_id: str, verifier: CapabilityVerifier
) -> None:
    token = sign_raw(kms, new_key(kms), {"alg": "ES256", "typ": "JWT", "kid": key_id}, claims())
    assert "signature" in refused(verifier, token)


def test_missing_kid_is_refused(kms: Any, key_id: str, verifier: CapabilityVerifier) -> None:
    token = sign_raw(kms, key_id, {"alg": "ES256", "typ": "JWT"}, claims())
    assert "kid" in refused(verifier, token)
    # the same construction with the kid verifies, so the refusal is the kid's alone
    verifier.verify(sign_raw(kms, key_id, {"alg": "ES256", "typ": "JWT", "kid": key_id}, claims()))


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "a.b", "x" * 5000, "..", "e30.e30.e30"])
def test_garbage_is_refused(verifier: CapabilityVerifier, token: str) -> None:
    with pytest.raises(Unauthorized):
        verifier.verify(token)


def test_verifier_and_signer_refuse_unsuitable_keys(kms: Any) -> None:
    symmetric = kms.create_key()["KeyMetadata"]["KeyId"]
    with pytest.raises(ValueError, match="signing key"):
        CapabilityVerifier.from_kms(kms, [symmetric])
    with pytest.raises(ValueError, match="alias"):
        KmsCapabilitySigner(kms, "alias/steward-capability")
    rsa = kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec="RSA_2048")["KeyMetadata"]["KeyId"]
    with pytest.raises(ValueError, match="ECDSA_SHA_256"):
        CapabilityVerifier.from_kms(kms, [rsa])


# ---- exchange


@pytest.fixture
def minter(services: Services, signer: KmsCapabilitySigner) -> Minter:
    tables = services.tables
    return Minter(TicketStore(tables), TaskStore(tables), InstallationStore(tables), signer, prices=None)


def spawn_task(
    services: Services, *, user: str = "alice", budget: str = "2.50", model: str = "scripted"
) -> Task:
    markdown = (
        f'---\nrepo: {REPO}\nmodel: {model}\nbudget_usd: "{budget}"\nchecks:\n  - pytest -q\n---\n'
        "# Demo\n\n- [ ] Change the thing\n"
    )
    services.plans.publish(user, "demo", markdown)
    task, created = spawn_item(services, services.plans.confirm(user, "demo"), 1)
    assert created
    return task


def install(
    services: Services,
    owner: str = "alice",
    *,
    repositories: tuple[str, ...] = (REPO,),
    suspended: bool = False,
    installation_id: int = 7,
) -> None:
    store = InstallationStore(services.tables)
    installation = Installation(
        installation_id=installation_id, account="octo", repositories=repositories, suspended=suspended
    )
    store.put(installation, now=utcnow())
    store.link(installation_id, owner, now=utcnow())


def issue(services: Services, task: Task) -> str:
    return TicketStore(services.tables).issue(task.id, now=utcnow())


def test_exchange_returns_a_capability_for_the_task(
    services: Services, minter: Minter, verifier: CapabilityVerifier
) -> None:
    task = spawn_task(services, budget="2.50")
    install(services, repositories=("octo/other", "Octo/Demo"))  # GitHub names are case-insensitive
    result = minter.exchange(issue(services, task))

    assert set(result) == {"task_id", "capability", "expires_at"}
    assert result["task_id"] == task.id
    token = result["capability"]
    assert isinstance(token, str)
    capability = verifier.verify(token)
    assert (capability.sub, capability.task_id, capability.model_id) == ("alice", task.id, "scripted")
    assert capability.max_budget_usd == Decimal("2.50") == task.budget_usd
    assert json.loads(unb64url(token.split(".")[1]))["max_budget_usd"] == "2.5"
    assert capability.exp - capability.iat == 3600
    expires = datetime.fromisoformat(str(result["expires_at"]).replace("Z", "+00:00"))
    assert expires == datetime.fromtimestamp(capability.exp, UTC)


def test_a_running_task_can_exchange(
    services: Services, minter: Minter, verifier: CapabilityVerifier
) -> None:
    task = spawn_task(services)
    install(services)
    now = utcnow()
    TaskStore(services.tables).claim(task, runtime_id="r1", now=now, deadline=now + timedelta(minutes=5))
    capability = verifier.verify(str(minter.exchange(issue(services, task))["capability"]))
    assert capability.task_id == task.id


def test_a_ticket_is_exchanged_once(services: Services, minter: Minter) -> None:
    task = spawn_task(services)
    install(services)
    ticket = issue(services, task)
    minter.exchange(ticket)
    with pytest.raises(Unauthorized, match="ticket unknown, used or expired") as caught:
        minter.exchange(ticket)
    assert ticket not in str(caught.value)


def test_unknown_and_expired_tickets_are_refused(services: Services, minter: Minter) -> None:
    task = spawn_task(services)
    install(services)
    stale = TicketStore(services.tables).issue(task.id, now=utcnow() - timedelta(hours=1), ttl_seconds=60)
    for ticket in (stale, "not-a-ticket", ""):
        with pytest.raises(Unauthorized):
            minter.exchange(ticket)


def test_a_cancelled_task_is_refused_with_409(services: Services, minter: Minter) -> None:
    task = spawn_task(services)
    install(services)
    ticket = issue(services, task)
    services.tasks.cancel("alice", task.id)
    with pytest.raises(LifecycleError) as caught:
        minter.exchange(ticket)
    assert caught.value.status == 409
    with pytest.raises(Unauthorized):  # used up by the refused exchange
        minter.exchange(ticket)


@pytest.mark.parametrize("case", ["none", "suspended", "without the repo", "another user's"])
def test_no_live_installation_holding_the_repo_is_refused_with_403(
    services: Services, minter: Minter, case: str
) -> None:
    task = spawn_task(services)
    if case == "suspended":
        install(services, suspended=True)
    elif case == "without the repo":
        install(services, repositories=("octo/other",))
    elif case == "another user's":
        install(services, owner="bob")
    ticket = issue(services, task)
    with pytest.raises(Forbidden) as caught:
        minter.exchange(ticket)
    assert caught.value.status == 403
    assert REPO in caught.value.message
    assert "7" not in caught.value.message  # names the repository, not the installation
    with pytest.raises(Unauthorized):
        minter.exchange(ticket)


class NotPriced(Forbidden):
    pass


def test_a_model_without_a_price_is_refused_and_nothing_is_signed(
    services: Services, kms: Any, signer: KmsCapabilitySigner
) -> None:
    asked: list[str] = []

    def prices(model_id: str) -> object:
        asked.append(model_id)
        raise NotPriced(f"model {model_id} is not in the price table", field="model")

    signs: list[str] = []
    kms.meta.events.register("before-call.kms.Sign", lambda model, **_: signs.append(model.name))
    tables = services.tables
    minter = Minter(TicketStore(tables), TaskStore(tables), InstallationStore(tables), signer, prices=prices)
    task = spawn_task(services)
    install(services)
    with pytest.raises(Forbidden) as caught:
        minter.exchange(issue(services, task))
    assert caught.value.status == 403
    assert asked == ["scripted"]
    assert signs == []
    # an unpriced model is refused for good: the task ended, and cannot start again
    assert services.tasks.get("alice", task.id).status.value == "failed"
    # an exchange whose model is priced signs exactly once
    other = spawn_task(services, user="bob")
    install(services, owner="bob", installation_id=8)
    priced = Minter(TicketStore(tables), TaskStore(tables), InstallationStore(tables), signer, prices=None)
    priced.exchange(issue(services, other))
    assert signs == ["Sign"]


def test_ten_threads_exchanging_one_ticket_get_exactly_one_capability(
    services: Services, minter: Minter, verifier: CapabilityVerifier
) -> None:
    task = spawn_task(services)
    install(services)
    ticket = issue(services, task)
    barrier = threading.Barrier(10)

    def attempt() -> dict[str, object] | StewardError:
        barrier.wait()
        try:
            return minter.exchange(ticket)
        except StewardError as exc:
            return exc

    with ThreadPoolExecutor(10) as pool:
        outcomes = list(pool.map(lambda _: attempt(), range(10)))
    won = [o for o in outcomes if isinstance(o, dict)]
    assert len(won) == 1
    assert all(isinstance(o, Unauthorized) for o in outcomes if not isinstance(o, dict))
    assert verifier.verify(str(won[0]["capability"])).task_id == task.id


# ---- the runtime Lambda over HTTP


@pytest.fixture
def endpoint(services: Services, key_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaHttpServer]:
    monkeypatch.setenv("STEWARD_TABLE_PREFIX", services.tables.prefix)
    monkeypatch.setenv("STEWARD_CAPABILITY_KEY_ID", key_id)
    monkeypatch.setenv("STEWARD_CAPABILITY_LIFETIME", "900")
    wiring.reset()
    with LambdaHttpServer(
        runtime_handler.lambda_handler, kind="http_api", function_name="steward-runtime"
    ) as server:
        yield server
    wiring.reset()


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"])
    error: dict[str, Any] = body["error"]
    return error


def test_handler_exchanges_a_ticket(
    services: Services, endpoint: LambdaHttpServer, verifier: CapabilityVerifier
) -> None:
    task = spawn_task(services)
    install(services)
    ticket = issue(services, task)
    response = httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": ticket})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["task_id"] == task.id
    capability = verifier.verify(body["capability"])
    assert (capability.task_id, capability.max_budget_usd) == (task.id, Decimal("2.50"))
    assert capability.exp - capability.iat == 900  # STEWARD_CAPABILITY_LIFETIME

    again = httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": ticket})
    assert again.status_code == 401
    assert error_of(again)["code"] == "unauthorized"
    assert ticket not in again.text


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b"{not json", "body"),
        (b"", "body"),
        (b"[]", "body"),
        (b"{}", "ticket"),
        (b'{"ticket": 5}', "ticket"),
        (b'{"ticket": ""}', "ticket"),
        (b'{"ticket": "t", "task_id": "x"}', "task_id"),
    ],
)
def test_handler_refuses_bad_bodies_with_400(endpoint: LambdaHttpServer, content: bytes, field: str) -> None:
    response = httpx.post(
        f"{endpoint.url}/v1/runtime/exchange", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "bad_request"
    assert error["field"] == field


def test_handler_refuses_an_oversized_body_with_413(endpoint: LambdaHttpServer) -> None:
    response = httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": "x" * 5000})
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"


def test_handler_refuses_a_bad_ticket_with_401(services: Services, endpoint: LambdaHttpServer) -> None:
    response = httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": "forged-ticket-value"})
    assert response.status_code == 401
    error = error_of(response)
    assert error == {"code": "unauthorized", "message": "ticket unknown, used or expired"}
    assert "forged-ticket-value" not in response.text


def test_handler_maps_refusals_to_their_status(services: Services, endpoint: LambdaHttpServer) -> None:
    task = spawn_task(services)  # no installation
    response = httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": issue(services, task)})
    assert response.status_code == 403
    assert error_of(response) == {
        "code": "forbidden",
        "message": f"no live GitHub App installation of the task's owner holds {REPO}",
        "field": "repo",
    }


def test_handler_checks_the_real_price_table(services: Services, endpoint: LambdaHttpServer) -> None:
    task = spawn_task(services, model="no-such-model")
    install(services)
    ticket = issue(services, task)
    response = httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": ticket})
    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "unknown_model"
    assert "no-such-model" in error["message"]
    assert httpx.post(f"{endpoint.url}/v1/runtime/exchange", json={"ticket": ticket}).status_code == 401


def test_handler_answers_unknown_routes_with_a_json_404(endpoint: LambdaHttpServer) -> None:
    response = httpx.get(f"{endpoint.url}/v1/runtime/exchange")
    assert response.status_code in (404, 405)
    assert error_of(response)["code"] == "not_found"


def test_the_relay_key_needs_only_the_public_half(kms: Any, key_id: str) -> None:
    # from_kms calls GetPublicKey once per key; the key's private half is never asked for
    calls: list[str] = []
    client = boto3.client("kms", region_name=REGION)
    client.meta.events.register("before-call.kms.*", lambda model, **_: calls.append(model.name))
    CapabilityVerifier.from_kms(client, [key_id])
    assert calls == ["GetPublicKey"]


def priced_minter(services: Services, signer: KmsCapabilitySigner) -> Minter:
    """A minter that checks the packaged price table, as the runtime routes wire it."""
    from steward.adapters.price_file import load_price_table  # noqa: PLC0415

    tables = services.tables
    return Minter(
        TicketStore(tables),
        TaskStore(tables),
        InstallationStore(tables),
        signer,
        prices=load_price_table().entry,
    )


def test_a_task_that_can_never_start_ends_failed_final_at_once(
    services: Services, signer: KmsCapabilitySigner
) -> None:
    """No installation of the owner lists the repository, or the model is not priced: the
    task ends `failed` `final` with the reason (not `retryable` after the launch grace), its
    item shows it, and nothing retries it."""
    from steward.domain.models import ItemStatus, TaskStatus  # noqa: PLC0415
    from steward.domain.reconcile import next_spawn  # noqa: PLC0415

    minter = priced_minter(services, signer)
    task = spawn_task(services)
    with pytest.raises(Forbidden):
        minter.exchange(issue(services, task))
    ended = services.tasks.get("alice", task.id)
    assert (ended.status, ended.classification.value if ended.classification else None) == (
        TaskStatus.FAILED,
        "final",
    )
    assert ended.reason == f"cannot start: no live GitHub App installation of the task's owner holds {REPO}"
    assert ended.to_api()["failure"]["code"] == "installation_missing"
    assert ended.to_api()["failure"]["who"] == "the operator"
    item = services.plans.get("alice", "demo").active_items[0]
    assert item.status is ItemStatus.FAILED
    assert next_spawn(item, max_attempts=3) is None  # the loop does not retry it


def test_an_unpriced_model_ends_its_task_for_good_and_a_suspended_installation_does_not(
    services: Services, signer: KmsCapabilitySigner
) -> None:
    from steward.domain.models import TaskStatus  # noqa: PLC0415
    from steward.domain.prices import UnknownModel  # noqa: PLC0415

    minter = priced_minter(services, signer)
    install(services, suspended=True)
    task = spawn_task(services)
    with pytest.raises(Forbidden):
        minter.exchange(issue(services, task))
    assert services.tasks.get("alice", task.id).status is TaskStatus.QUEUED  # may be unsuspended: retried
    install(services)
    unpriced = spawn_task(services, user="bob", model="no-such-model")
    install(services, owner="bob", installation_id=8)
    with pytest.raises(UnknownModel):
        minter.exchange(issue(services, unpriced))
    ended = services.tasks.get("bob", unpriced.id)
    assert ended.status is TaskStatus.FAILED
    assert ended.reason is not None
    assert ended.reason.startswith("cannot start: model 'no-such-model' is not in the price table")
    assert ended.failure_code == "cannot_start"
