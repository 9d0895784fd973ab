"""Credentials Steward issues, and how to recognize one in text (docs/concepts/relay.md, docs/concepts/runner.md). Pure.

The relay refuses a body that carries one (it would hand it to a model provider), and the
runner redacts them from everything it sends to a model. Both need a test that is precise:
real repositories hold JWTs, hashes and random-looking 43-character strings in their
fixtures, and refusing those would break runs. So neither test looks for a shape alone:

* a ticket is `stwt_` followed by 43 base64url characters (`secrets.token_urlsafe(32)`,
  256 random bits). The prefix is what makes it recognizable, as GitHub's `ghs_` does for
  its tokens: without it a ticket looks like a SHA-256 digest in base64url, a PKCE
  verifier or a long test name;
* a capability is a JWT whose claims say it is one (`iss` Steward's issuer and `aud` the
  runtime audience, which the verifier requires of every capability), or whose header
  `kid` names one of the deployment's capability keys (which only the relay knows). Any
  other JWT is not Steward's.

GitHub's token patterns live in `steward.domain.redaction`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from collections.abc import Collection
from typing import Any

from steward.domain.capability import AUDIENCE, ISSUER

TICKET_PREFIX = "stwt_"
TICKET_RANDOM_BYTES = 32
TICKET_BODY_CHARS = 43  # base64url of 32 bytes, unpadded
TICKET_PATTERN = re.compile(rf"{TICKET_PREFIX}[A-Za-z0-9_-]{{{TICKET_BODY_CHARS}}}")
_MAX_SEGMENT_CHARS = 16_384  # a capability's header and claims are a few hundred characters


def new_ticket() -> str:
    """A fresh one-time ticket: `stwt_` + 43 base64url characters."""
    return TICKET_PREFIX + secrets.token_urlsafe(TICKET_RANDOM_BYTES)


def _segment(text: str) -> Any:
    """A JWT segment's JSON, or None when it is not base64url of JSON."""
    if not text or len(text) > _MAX_SEGMENT_CHARS:
        return None
    try:
        return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, RecursionError):  # UnicodeDecodeError, JSONDecodeError: ValueErrors
        return None


def is_capability(token: str, key_ids: Collection[str] = ()) -> bool:
    """Whether the JWT `token` (compact form, signature or not) is a Steward capability:
    its claims carry Steward's issuer and the runtime audience, or its header's `kid` is one
    of `key_ids`. The signature is not checked: a forged or expired capability is refused
    just the same."""
    parts = token.split(".")
    if len(parts) < 2:
        return False
    header = _segment(parts[0])
    if isinstance(header, dict) and isinstance(header.get("kid"), str) and header["kid"] in key_ids:
        return True
    claims = _segment(parts[1])
    if not isinstance(claims, dict) or claims.get("iss") != ISSUER:
        return False
    audience = claims.get("aud")
    return audience == AUDIENCE or (isinstance(audience, list) and AUDIENCE in audience)
