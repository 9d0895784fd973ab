"""Capability tokens: ES256 JWTs signed by a KMS asymmetric key (docs/concepts/relay.md).

The private key never leaves KMS: the minter holds kms:Sign on it, the relay only
kms:GetPublicKey, so a compromised relay can read capabilities but not make them. KMS
signs ECDSA as DER; JOSE wants the raw r || s pair, so the signer converts.

Verification is strict and explicit rather than trusting library defaults: one algorithm,
a known `kid` chosen before any signature check, every claim required, and the time rules
(expiry, issue time, not-before, lifetime) checked here against one clock so that tests and
the relay share one notion of now. Refusals say why in a few words and never carry token
content.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import load_der_public_key, load_pem_public_key
from pydantic import ValidationError

from steward.adapters import aws
from steward.domain.capability import (
    AUDIENCE,
    ISSUER,
    LEEWAY_SECONDS,
    MAX_LIFETIME_SECONDS,
    REQUIRED_CLAIMS,
    Capability,
)
from steward.domain.errors import Unauthorized

if TYPE_CHECKING:
    from mypy_boto3_kms import KMSClient

ALGORITHM = "ES256"
KMS_SIGNING_ALGORITHM: Final = "ECDSA_SHA_256"
_COORDINATE_BYTES = 32  # P-256
_MAX_TOKEN_LENGTH = 4096  # a capability is ~600 characters; a much longer string is not one
_CHECKED_TOKENS = 1024  # signatures a verifier remembers as checked: far more than live tasks


def kms_client(**client_kwargs: Any) -> KMSClient:
    """A KMS client with the shared retry settings (the only place capabilities meet boto3)."""
    return aws.client("kms", **client_kwargs)  # type: ignore[no-any-return]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _json_part(value: Mapping[str, object]) -> str:
    return _b64url(json.dumps(dict(value), separators=(",", ":"), ensure_ascii=False).encode())


def _check_key_id(key_id: str) -> None:
    # The kid names one key for as long as tokens signed by it live; an alias can be
    # repointed to another key, so it cannot be a kid.
    if not key_id or "alias/" in key_id:
        raise ValueError("the capability key must be named by its key id or key ARN, not an alias")


def der_to_jose(signature: bytes) -> bytes:
    """KMS's DER ECDSA signature as the JOSE form: r || s, 32 bytes each, big-endian."""
    r, s = decode_dss_signature(signature)
    return r.to_bytes(_COORDINATE_BYTES, "big") + s.to_bytes(_COORDINATE_BYTES, "big")


class KmsCapabilitySigner:
    """Mints capabilities with a KMS ECC_NIST_P256 key; header `kid` = `key_id`."""

    def __init__(self, kms: KMSClient, key_id: str) -> None:
        _check_key_id(key_id)
        self._kms = kms
        self.key_id = key_id

    def mint(self, claims: Mapping[str, object]) -> str:
        """Sign `claims` as they are (build them with `capability_claims`); compact JWT."""
        header = {"alg": ALGORITHM, "typ": "JWT", "kid": self.key_id}
        signing_input = f"{_json_part(header)}.{_json_part(claims)}"
        signed = self._kms.sign(
            KeyId=self.key_id,
            Message=signing_input.encode("ascii"),
            MessageType="RAW",
            SigningAlgorithm=KMS_SIGNING_ALGORITHM,
        )
        return f"{signing_input}.{_b64url(der_to_jose(signed['Signature']))}"


def _p256(key: object) -> ec.EllipticCurvePublicKey:
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise ValueError("a capability key must be an EC P-256 public key")
    return key


class CapabilityVerifier:
    """Verifies capabilities with public keys only, chosen by `kid`."""

    def __init__(self, keys: Mapping[str, ec.EllipticCurvePublicKey]) -> None:
        if not keys:
            raise ValueError("a verifier needs at least one public key")
        for kid, key in keys.items():
            _check_key_id(kid)
            _p256(key)
        self._keys = dict(keys)
        # The header, signature, audience, issuer and required claims depend on the token and
        # the keys only, and the keys never change: a token that passed them passes again. A
        # runtime presents one capability for every model call, and the ECDSA check was most
        # of the relay's own work per call, so passes are remembered (an exception never is:
        # a refused token is checked again each time) and the time rules, which depend on
        # the clock, are checked on every call.
        self._checked = lru_cache(maxsize=_CHECKED_TOKENS)(self._checked_claims)

    @classmethod
    def from_kms(cls, kms: KMSClient, key_ids: Iterable[str]) -> CapabilityVerifier:
        """Load each key's public half once (kms:GetPublicKey is all the caller needs)."""
        keys: dict[str, ec.EllipticCurvePublicKey] = {}
        for key_id in key_ids:
            _check_key_id(key_id)
            found = kms.get_public_key(KeyId=key_id)
            if found.get("KeyUsage") != "SIGN_VERIFY" or KMS_SIGNING_ALGORITHM not in found.get(
                "SigningAlgorithms", []
            ):
                raise ValueError(f"KMS key {key_id} is not an {KMS_SIGNING_ALGORITHM} signing key")
            keys[key_id] = _p256(load_der_public_key(found["PublicKey"]))
        return cls(keys)

    @classmethod
    def from_pem(cls, kid: str, pem: bytes | str) -> CapabilityVerifier:
        raw = pem.encode("ascii") if isinstance(pem, str) else pem
        return cls({kid: _p256(load_pem_public_key(raw))})

    def verify(self, token: str, *, now: datetime | None = None) -> Capability:
        """The capability `token` carries, or Unauthorized saying briefly why not."""
        if not token or len(token) > _MAX_TOKEN_LENGTH:
            raise Unauthorized("capability is not a token")
        payload = dict(self._checked(token))  # a copy: the remembered claims stay as checked
        self._check_times(payload, now or datetime.now(UTC))
        payload.pop("nbf", None)  # checked above; the capability itself has no use for it
        try:
            return Capability.model_validate(payload)
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "claims"
            raise Unauthorized(f"capability claim {where} is invalid") from None

    def _checked_claims(self, token: str) -> dict[str, Any]:
        """The claims of a token whose header, signature and claim set pass (times aside)."""
        key = self._key_for(token)
        try:
            payload: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                leeway=LEEWAY_SECONDS,
                options={
                    "require": list(REQUIRED_CLAIMS),
                    "strict_aud": True,  # aud is exactly our audience, never a list holding it
                    # Time is checked below against `now`, one clock for mint, relay and tests.
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized(f"capability lacks the {exc.claim} claim") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("capability is for another audience") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("capability is from another issuer") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("capability signature does not verify") from None
        except jwt.PyJWTError:
            raise Unauthorized("capability is malformed") from None
        return payload

    def _key_for(self, token: str) -> ec.EllipticCurvePublicKey:
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, binascii.Error, ValueError):
            raise Unauthorized("capability is malformed") from None
        if header.get("alg") != ALGORITHM:
            raise Unauthorized(f"capability must be signed with {ALGORITHM}")
        if "crit" in header:
            raise Unauthorized("capability carries critical header extensions")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("capability names no key (kid)")
        key = self._keys.get(kid)
        if key is None:
            raise Unauthorized("capability is signed by an unknown key")
        return key

    @staticmethod
    def _check_times(payload: Mapping[str, Any], now: datetime) -> None:
        times: dict[str, int] = {}
        for name in ("iat", "exp", "nbf"):
            value = payload.get(name)
            if value is None and name == "nbf":
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise Unauthorized(f"capability claim {name} must be an integer time")
            times[name] = value
        at = now.timestamp()
        if times["exp"] <= times["iat"]:
            raise Unauthorized("capability expires before it is issued")
        if times["exp"] - times["iat"] > MAX_LIFETIME_SECONDS:
            raise Unauthorized(f"capability lifetime is over {MAX_LIFETIME_SECONDS} seconds")
        if times["iat"] > at + LEEWAY_SECONDS:
            raise Unauthorized("capability is issued in the future")
        if "nbf" in times and times["nbf"] > at + LEEWAY_SECONDS:
            raise Unauthorized("capability is not valid yet")
        if times["exp"] <= at - LEEWAY_SECONDS:
            raise Unauthorized("capability has expired")
