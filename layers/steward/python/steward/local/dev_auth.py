"""Dev identities for the local stack, checked the way API Gateway's JWT authorizer checks them.

In AWS the caller's identity is the `sub` of a JWT from a real issuer (Cognito or any OIDC
provider), validated by API Gateway before the Lambda runs. Locally `DevIssuer` is that
issuer: it holds one ES256 (P-256) key in a PEM file (mode 0600) so tokens stay valid across
restarts, mints access tokens (`steward local token USER`), and verifies them with the same
strictness as the authorizer: one algorithm, issuer, audience, expiry and not-before with a
small clock leeway, required claims, and the key id in the header. Every failure becomes
`Unauthorized` with a message that names the reason and never echoes the token.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from steward.domain.errors import Unauthorized

ISSUER = "steward-local"
AUDIENCE = "steward"
ALGORITHM = "ES256"
LEEWAY_SECONDS = 30
DEFAULT_TTL_SECONDS = 12 * 3600
_REQUIRED = ["exp", "iat", "sub", "iss", "aud"]
_MAX_TOKEN_CHARS = 8192  # API Gateway caps header size too; a bigger token is not ours


class DevIssuer:
    """An ES256 issuer whose key lives in one PEM file; see the module docstring."""

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        if not isinstance(private_key.curve, ec.SECP256R1):
            raise ValueError("DevIssuer needs a P-256 key for ES256")
        self._private_key = private_key
        self._public_key = private_key.public_key()
        self._jwk = _public_jwk(self._public_key)
        self.kid = _thumbprint(self._jwk)

    @classmethod
    def generate(cls) -> DevIssuer:
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def load_or_create(cls, path: Path) -> DevIssuer:
        """Load the key at `path`, or create it (file 0600, new parent directory 0700).

        Creation writes a temporary file and hard-links it into place, so two processes
        starting at once agree on one key and neither reads a half-written file.
        """
        path = Path(path)
        if not path.exists():
            if not path.parent.exists():
                path.parent.mkdir(parents=True, mode=0o700)
                path.parent.chmod(0o700)  # mkdir's mode is filtered by the umask
            issuer = cls.generate()
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".devkey-")  # created 0600
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(issuer._private_pem())
                    handle.flush()
                    os.fsync(handle.fileno())
                with contextlib.suppress(FileExistsError):  # another process won: use its key
                    os.link(tmp, path)
            finally:
                os.unlink(tmp)
        return cls._load(path)

    @classmethod
    def _load(cls, path: Path) -> DevIssuer:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{path} does not hold an EC private key")
        return cls(key)

    def jwks(self) -> dict[str, object]:
        """The public key as a JWKS document, as an OIDC issuer would publish it."""
        return {"keys": [{**self._jwk, "kid": self.kid, "use": "sig", "alg": ALGORITHM}]}

    def mint(self, sub: str, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> str:
        """An access token for `sub`, valid from now for `ttl_seconds`."""
        if not sub:
            raise ValueError("sub must be a non-empty string")
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": sub,
            "iat": now,
            "nbf": now,
            "exp": now + ttl_seconds,
            "jti": uuid.uuid4().hex,
            "token_use": "access",
        }
        return jwt.encode(claims, self._private_key, algorithm=ALGORITHM, headers={"kid": self.kid})

    def verify(self, token: str) -> dict[str, object]:
        """The token's claims if it is ours and current; `Unauthorized` otherwise."""
        if not token or len(token) > _MAX_TOKEN_CHARS:
            raise Unauthorized("token is missing or too long")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthorized("token is malformed") from None
        if header.get("alg") != ALGORITHM:
            raise Unauthorized(f"token algorithm must be {ALGORITHM}")
        if header.get("kid") != self.kid:
            raise Unauthorized("token key id is not this issuer's key")
        try:
            claims: dict[str, object] = jwt.decode(
                token,
                self._public_key,
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                leeway=LEEWAY_SECONDS,
                options={"require": _REQUIRED},
            )
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(_reason(exc)) from None
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized("token subject is empty")
        return claims

    def _private_pem(self) -> bytes:
        return self._private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


_REASONS: tuple[tuple[type[jwt.InvalidTokenError], str], ...] = (
    (jwt.ExpiredSignatureError, "token has expired"),
    (jwt.ImmatureSignatureError, "token is not valid yet"),
    (jwt.InvalidAudienceError, "token audience is not accepted"),
    (jwt.InvalidIssuerError, "token issuer is not accepted"),
    (jwt.InvalidAlgorithmError, f"token algorithm must be {ALGORITHM}"),
    (jwt.InvalidSignatureError, "token signature is invalid"),
    (jwt.DecodeError, "token is malformed"),
)


def _reason(exc: jwt.InvalidTokenError) -> str:
    """A short, token-free explanation of why PyJWT rejected a token."""
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"token lacks the required claim {exc.claim!r}"
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return f"token is invalid ({type(exc).__name__})"


def _b64url_uint(value: int) -> str:
    return base64.urlsafe_b64encode(value.to_bytes(32, "big")).rstrip(b"=").decode("ascii")


def _public_jwk(key: ec.EllipticCurvePublicKey) -> dict[str, str]:
    numbers = key.public_numbers()
    return {"kty": "EC", "crv": "P-256", "x": _b64url_uint(numbers.x), "y": _b64url_uint(numbers.y)}


def _thumbprint(jwk: dict[str, str]) -> str:
    """RFC 7638 thumbprint: a stable key id derived from the public key itself."""
    canonical = json.dumps(
        {k: jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"), sort_keys=True
    )
    digest = hashlib.sha256(canonical.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
