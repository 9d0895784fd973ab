"""Login links for the web console on the local stack (`steward local login USER`).

The link carries a one-time code, never a token: the CLI asks the stack for a code with the
user's dev token (`POST /local/login-codes`), prints `<console_url>#login=<code>` (a
fragment: browsers never send it to a server, so it reaches no log), and the page exchanges
the code once, within two minutes, for a fresh dev token (`POST /local/login`). Codes live
in the stack's memory only. These are routes of the local stack's API origin, not of the
API function: a deployment signs people in with its OIDC issuer instead.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from steward.domain.capability import bearer_token
from steward.local.http_base import LocalHandler, Refused

CODES_PATH = "/local/login-codes"
LOGIN_PATH = "/local/login"
TTL_SECONDS = 120.0
MAX_OUTSTANDING = 1000
MAX_BODY_BYTES = 4096


class LoginCodes:
    def __init__(
        self,
        verify: Callable[[str], Mapping[str, Any]],
        mint: Callable[[str], str],
        *,
        ttl_seconds: float = TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.verify = verify
        self.mint = mint
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._codes: dict[str, tuple[str, float]] = {}  # code -> (sub, expires at)
        self._lock = threading.Lock()

    def issue(self, sub: str) -> str:
        code = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            self._codes = {c: v for c, v in self._codes.items() if v[1] > now}
            if len(self._codes) >= MAX_OUTSTANDING:
                raise Refused(429, "too_many_codes", "too many unused login codes: wait two minutes")
            self._codes[code] = (sub, now + self.ttl_seconds)
        return code

    def redeem(self, code: str) -> str | None:
        """The code's user, once; None for an unknown, used or expired code."""
        with self._lock:
            entry = self._codes.pop(code, None)
        if entry is None or entry[1] <= self.clock():
            return None
        return entry[0]

    def serve(self, handler: LocalHandler) -> bool:
        """Answer the two routes on `handler`; False when the request is neither."""
        path = urlsplit(handler.path).path
        if path not in (CODES_PATH, LOGIN_PATH):
            return False
        if handler.command != "POST":
            raise Refused(405, "method_not_allowed", f"{path} takes POST")
        if path == CODES_PATH:
            try:
                sub = str(self.verify(bearer_token(handler.headers.get("Authorization"))).get("sub", ""))
            except Exception:
                raise Refused(401, "unauthorized", "send the user's dev token as a bearer token") from None
            if not sub:
                raise Refused(401, "unauthorized", "the token names no user")
            handler.send_json(200, {"code": self.issue(sub), "expires_in": int(self.ttl_seconds)})
            return True
        try:
            body = json.loads(handler.read_body(MAX_BODY_BYTES))
            code = body["code"]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise Refused(400, "bad_request", 'send {"code": "..."} as JSON') from None
        user = self.redeem(code) if isinstance(code, str) else None
        if user is None:
            raise Refused(
                400, "invalid_code", "this login link is used or expired: run `steward local login` again"
            )
        handler.send_json(200, {"token": self.mint(user), "user": user}, [("Cache-Control", "no-store")])
        return True
