"""The redactor (docs/concepts/runner.md, docs/testing.md, "Guarantees"): every pattern, what must survive, fail-closed
behaviour, and property tests that no part of a token leaks, whole, streamed or truncated."""

from __future__ import annotations

import base64
import itertools
import json
import re
import string
import sys
import threading
import unicodedata
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from steward.domain import redaction
from steward.domain.credentials import is_capability, new_ticket
from steward.domain.redaction import REDACTED, RedactionError, Redactor, StreamRedactor, redact

PROPERTIES = settings(
    derandomize=True,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
GHS = "ghs_" + "16C7e42F292c6912E7710c838347Ae178B4a" + "._-" + "Zq9" * 7
SHA = "3f2a9c1d8b7e4d2a6c5f0e1b9a8d7c6e5f4a3b2c"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _collapse(text: str) -> str:
    """Adjacent markers as one: a stream may split one redacted span in two."""
    return re.sub(r"(?:\[REDACTED\])+", REDACTED, text)


def _streamed(redactor: Redactor, chunks: list[str]) -> str:
    stream = redactor.stream()
    return "".join(stream.feed(chunk) for chunk in chunks) + stream.flush()


# ---- each pattern


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"x {GHS} y", "x [REDACTED] y"),
        ("ghp_" + "A" * 20, REDACTED),
        ("gho_" + "b1" * 30 + ".", REDACTED),  # installation-token characters include "."
        ("ghu_" + "c" * 520 + " end", "[REDACTED] end"),
        ("ghr_" + "d" * 36, REDACTED),
        ("ghs_short", "ghs_short"),  # fewer than 20: not a token
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", REDACTED),
        (f"token {SHA}", "token [REDACTED]"),
        (f"Token\t{SHA}!", "Token\t[REDACTED]!"),
        (f"https://x?access_token={SHA}&y=1", "https://x?access_token=[REDACTED]&y=1"),
        (f'{{"token": "{SHA}"}}', '{"token": "[REDACTED]"}'),
        (f"x {_b64('x-access-token:' + GHS)} y", "x [REDACTED] y"),
        ("eC1hY2Nlc3MtdG9rZW46" + "QUJD", REDACTED),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: [REDACTED]"),
        ("authorization: bearer abc.def", "authorization: [REDACTED]"),
        ("AUTHORIZATION: token abc\nnext", "AUTHORIZATION: [REDACTED]\nnext"),
        ("Proxy-Authorization: Negotiate YIIabc==", "Proxy-Authorization: [REDACTED]"),
        ("curl -H 'Authorization: token abc' https://x", "curl -H 'Authorization: [REDACTED]' https://x"),
        ('{"authorization": "Bearer xyz"}', '{"authorization": "[REDACTED]"}'),
        ("{'Authorization': 'Basic Zm9vOmJhcg=='}", "{'Authorization': '[REDACTED]'}"),
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830, Signature=5d672d79c15b13",
            "Authorization: [REDACTED]",
        ),
        ("authorization: 0123456789abcdefXYZ", "authorization: [REDACTED]"),  # no scheme
        ("using Bearer abcDEF123.x-y_z~+/= now", "using Bearer [REDACTED] now"),
        ("Bearer Bearer s3cr3tCredential", "Bearer Bearer [REDACTED]"),
        ("https://user:pw@host/x", "https://[REDACTED]@host/x"),
        ("git+ssh://x-access-token:ghs_abc@github.com/o/r", "git+ssh://[REDACTED]@github.com/o/r"),
        (f"jwt={JWT};", "jwt=[REDACTED];"),
        (JWT.rsplit(".", 1)[0] + " ok", "[REDACTED] ok"),  # no signature
        (JWT.rsplit(".", 1)[0] + ". ok", "[REDACTED] ok"),  # empty signature
        (f"eyJabcdefgh.{JWT} ok", "[REDACTED] ok"),  # a match cannot end inside another
        ("Authorization: x authorization': 's3cr3tCredential99'", "Authorization: [REDACTED]': '[REDACTED]'"),
        ("key AKIAIOSFODNN7EXAMPLE,", "key [REDACTED],"),
        ("ASIAY34FZKBOKMUTVV7A", REDACTED),
        ("AKIAIOSFODNN7EXAMPLE0123 x", "[REDACTED] x"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            "aws_secret_access_key = [REDACTED]\n",
        ),
        ("AWS_SECRET_ACCESS_KEY=abc123", "AWS_SECRET_ACCESS_KEY=[REDACTED]"),
        ('"aws_session_token": "FwoGZXIvYXdzE"', '"aws_session_token": [REDACTED]'),
    ],
)
def test_each_pattern_is_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_exact_secrets_and_their_encodings_are_redacted() -> None:
    secret = "s3cr3t/value+?="
    encodings = [
        secret,
        _b64(secret),
        _b64(secret).rstrip("="),
        base64.urlsafe_b64encode(secret.encode()).decode(),
        quote(secret, safe=""),
        _b64(f"user:{secret}"),  # inside a longer base64 text, at another alignment
        _b64(secret + "\n"),  # `echo secret | base64`
    ]
    for text in encodings:
        assert secret not in (out := redact(f"<{text}>", [secret]))
        assert text not in out, text
        assert REDACTED in out
    assert redact("held: s3cr3t-value.", ["s3cr3t-value"]) == "held: [REDACTED]."


def test_longer_and_overlapping_secrets_are_hidden_whole() -> None:
    assert redact("abcdefghij", ["abcdefgh", "cdefghij"]) == REDACTED
    assert redact("xx abcdefgh yy", ["abcdef", "abcdefgh"]) == "xx [REDACTED] yy"


def test_short_and_empty_secrets_are_ignored() -> None:
    redactor = Redactor(["", "abc", "12345", "REDACTED"])
    text = "abc 12345 ok REDACTED"
    assert redactor.redact(text) == text
    redactor.add("abcdef")
    assert redactor.redact("abcdef abc") == "[REDACTED] abc"


# ---- what must survive


REALISTIC_DIFF = f"""\
From {SHA} Mon Sep 17 00:00:00 2001
From: Steward <steward@example.com>
Subject: [PATCH] Pass the token to the client

commit 1b9a8d7c6e5f4a3b2c3f2a9c1d8b7e4d2a6c5f0e
Merge: 3f2a9c1 8b7e4d2
diff --git a/app/client.py b/app/client.py
index 3f2a9c1..8b7e4d2 100644
--- a/app/client.py
+++ b/app/client.py
@@ -1,12 +1,20 @@
 import base64
 import os
+from typing import Optional
+
+TOKEN_ENV = "GITHUB_TOKEN"  # the token comes from the environment
+REVISION = "{SHA}"
+
+
+def headers(authorization: str | None, token: Optional[str] = None) -> dict[str, str]:
+    \"\"\"Send `Authorization: Bearer <token>` (see docs); Bearer tokens expire.\"\"\"
+    if authorization:
+        return {{"Authorization": authorization}}
+    return {{"Authorization": f"Bearer {{token}}", "Accept": "application/json"}}
+
+
+def basic(user: str, password: str) -> str:
+    return "Authorization: Basic " + base64.b64encode(f"{{user}}:{{password}}".encode()).decode()
+
+
+def clone_url(owner: str, repo: str) -> str:
+    return f"https://github.com/{{owner}}/{{repo}}.git"  # or git@github.com:owner/repo.git
+
+
+aws = {{"aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"], "region": "eu-west-1"}}
+header = request.headers.get("authorization")
+token = os.environ[TOKEN_ENV]
+assert len("{SHA}") == 40 and "eyJ" and "gh" and "AKIA"
+data = "aGVsbG8gd29ybGQ="  # base64 of a greeting
diff --git a/README.md b/README.md
index 0000000..e69de29
--- a/README.md
+++ b/README.md
@@ -3 +3 @@
-Use a token.
+Use a GitHub App installation token; see https://docs.github.com/en/apps (Authorization header).
"""


def test_a_realistic_diff_without_secrets_is_returned_byte_identical() -> None:
    assert redact(REALISTIC_DIFF, ["not-in-this-diff"]) == REALISTIC_DIFF
    assert _streamed(Redactor(), [REALISTIC_DIFF[i : i + 7] for i in range(0, len(REALISTIC_DIFF), 7)]) == (
        REALISTIC_DIFF
    )


@pytest.mark.parametrize(
    "text",
    [
        SHA,
        f"HEAD is now at {SHA[:7]} ({SHA})",
        "def bearer_token(authorization: str | None) -> str:",
        'raise Unauthorized("send the capability as Authorization: Bearer <capability>")',
        "Bearer tokens are short-lived; a bearer token must be kept secret.",
        'env = {"AWS_SECRET_ACCESS_KEY": "${AWS_SECRET}"}',
        "ghs_ is the prefix of installation tokens; github_pat_ of fine-grained ones",
        "eyJ starts every JWT; AKIA every access key id.",
        "[REDACTED] already",
        "",
    ],
)
def test_ordinary_text_and_code_survive(text: str) -> None:
    assert redact(text) == text


# ---- clean, bounded


def test_clean_redacts_every_string_of_a_nested_structure_keys_included() -> None:
    value: Any = {
        "detail": {"stderr": f"fatal: {GHS}", GHS: [1, 2.5, None, True, (f"x {JWT}", "plain")]},
        "list": [{"k": "s3cr3t-value"}, "ok"],
        7: "seven",
    }
    cleaned = Redactor(["s3cr3t-value"]).clean(value)
    assert cleaned == {
        "detail": {"stderr": "fatal: [REDACTED]", REDACTED: [1, 2.5, None, True, ("x [REDACTED]", "plain")]},
        "list": [{"k": REDACTED}, "ok"],
        7: "seven",
    }
    assert value["detail"]["stderr"] == f"fatal: {GHS}"  # the input is not modified
    assert GHS not in json.dumps(cleaned)


def test_detect_finds_what_redact_would_replace_and_nothing_else() -> None:
    redactor = Redactor(["s3cr3t-value"])
    for text in (GHS, f"x {_b64('x-access-token:' + GHS)} y", "held s3cr3t-value", _b64("s3cr3t-value"), JWT):
        assert redactor.detect(text), text
        assert redactor.redact(text) != text
    for text in ("", "print('hello')", f"commit {SHA}", "Bearer token", "s3cr3t"):
        assert not redactor.detect(text), text
        assert redactor.redact(text) == text
    with pytest.raises(RedactionError):
        redactor.detect(b"bytes")  # type: ignore[arg-type]


def test_bounded_redacts_before_it_cuts_inside_a_token() -> None:
    redactor = Redactor()
    text = "x" * 40 + GHS + " " + "y" * 100
    for limit in range(41, 40 + len(GHS)):  # every cut that falls inside the token in `text`
        out = redactor.bounded(text, limit)
        assert len(out) <= limit
        assert "…[truncated " in out
        for window in (GHS[:4], GHS[10:18], GHS[-8:]):
            assert window not in out
    red = redactor.redact(text)
    out = redactor.bounded(text, 90)
    kept, note = out.split("…")
    assert kept == red[: len(kept)]
    assert kept.startswith("x" * 40 + REDACTED + " y")
    assert note == f"[truncated {len(red) - len(kept)} chars]"
    assert redactor.bounded("short", 100) == "short"


def test_bounded_never_splits_a_marker_and_keeps_the_tail_when_asked() -> None:
    redactor = Redactor()
    text = "a" * 20 + GHS + "b" * 20
    red = redactor.redact(text)
    for limit in range(len("…[truncated 00 chars]"), len(red)):
        head = redactor.bounded(text, limit)
        tail = redactor.bounded(text, limit, tail=True)
        assert len(head) <= limit
        assert len(tail) <= limit
        for out in (head, tail):
            assert "[RED" not in out.replace(REDACTED, "")  # whole markers only
        count = int(re.findall(r"truncated (\d+) chars", head)[0])
        assert head.startswith(red[: len(red) - count])
        count = int(re.findall(r"truncated (\d+) chars", tail)[0])
        assert tail.endswith(red[count:])
    assert redactor.bounded(text, 5) == "…[tru"
    with pytest.raises(ValueError, match="negative"):
        redactor.bounded(text, -1)


# ---- fail closed


def test_an_internal_failure_raises_without_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str, known: object, *rules: object) -> object:
        raise ValueError(f"cannot handle {text}")

    monkeypatch.setattr(redaction, "_scan", broken)
    redactor = Redactor(["s3cr3t-value"])
    for call in (
        lambda: redactor.redact(f"leak {GHS} s3cr3t-value"),
        lambda: redactor.clean({"k": f"leak {GHS}"}),
        lambda: redactor.bounded(f"leak {GHS}", 10),
        lambda: redact(f"leak {GHS}"),
    ):
        with pytest.raises(RedactionError) as caught:
            call()
        assert "leak" not in str(caught.value)
        assert GHS not in str(caught.value)
        assert "ValueError" in str(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__context__ is None


def test_a_secret_that_survives_is_caught_by_the_post_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redaction, "_render", lambda text, spans, start, stop: text[start:stop])
    redactor = Redactor(["s3cr3t-value"])
    with pytest.raises(RedactionError, match="survived") as caught:
        redactor.redact("a s3cr3t-value b")
    assert "s3cr3t" not in str(caught.value)
    assert redactor.redact("nothing held here") == "nothing held here"
    with pytest.raises(RedactionError):
        redactor.stream().feed("a s3cr3t-value b\n")


def test_a_failed_stream_stays_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = Redactor().stream()
    assert stream.feed("fine\n") == "fine\n"
    with monkeypatch.context() as patch:
        patch.setattr(redaction, "_scan", lambda text, known, *rules: 1 / 0)
        with pytest.raises(RedactionError, match="ZeroDivisionError"):
            stream.feed("x")
    with pytest.raises(RedactionError, match="unusable"):
        stream.feed("fine again")
    with pytest.raises(RedactionError):
        stream.flush()
    with pytest.raises(RedactionError):
        Redactor().redact(b"bytes")  # type: ignore[arg-type]


# ---- streams


def test_a_stream_holds_back_what_could_still_become_a_token() -> None:
    stream = Redactor().stream()
    assert stream.feed("clone with gh") == "clone with "
    assert stream.feed("s_" + GHS[4:30]) == ""
    assert stream.feed(GHS[30:] + " done, Authoriz") == "[REDACTED] done, "
    assert stream.feed("ation: Bearer abc") == ""
    assert stream.feed("\nok") == "Authorization: [REDACTED]\nok"
    assert stream.flush() == ""


def test_a_stream_redacts_a_token_cut_short_at_its_end_but_not_ordinary_endings() -> None:
    cases = {
        "x ghs_abc": "x [REDACTED]",
        "x github_pat_11AB": "x [REDACTED]",
        f"x {JWT[:12]}": "x [REDACTED]",
        "x eC1hY2Nlc3MtdG9rZW46QU": "x [REDACTED]",
        f"token {SHA[:12]}": "token [REDACTED]",
        "x AKIAIOSF": "x [REDACTED]",
        "see gh": "see gh",
        "see eyJ": "see eyJ",
        "the token": "the token",
        "Authorization:": "Authorization:",
        "https://github.com": "https://github.com",
    }
    for text, expected in cases.items():
        assert _streamed(Redactor(), list(text)) == expected, text
    assert _streamed(Redactor(["s3cr3t-value"]), ["x s3cr3t"]) == "x [REDACTED]"
    assert _streamed(Redactor(["s3cr3t-value"]), ["x s3cr"]) == "x s3cr"


def test_a_stream_uses_secrets_added_while_it_runs() -> None:
    redactor = Redactor()
    stream = redactor.stream()
    assert stream.feed("before s3cr3t-value\n") == "before s3cr3t-value\n"
    redactor.add("s3cr3t-value")
    assert stream.feed("after s3cr3t") + stream.feed("-value\n") == "after [REDACTED]\n"


def test_a_stream_that_holds_too_much_redacts_it_and_drops_the_rest_of_the_line() -> None:
    redactor = Redactor(["abcdef\nghijkl"])  # a secret that spans a line break
    stream = StreamRedactor(redactor, max_hold=64)
    out = stream.feed("ok\nAuthorization: Bearer " + "x" * 100)
    assert out == "ok\n" + REDACTED
    out += stream.feed("y" * 100 + "abcdef")
    out += stream.feed("\nghijkl tail\n")
    out += stream.flush()
    assert out == "ok\n[REDACTED][REDACTED] tail\n"
    for dropped in ("ghijkl", "x", "y"):
        assert dropped not in out


def test_a_large_chunk_is_streamed_as_the_whole_text_is_redacted() -> None:
    lines = [f"line {n} {GHS if n % 7 == 0 else SHA} Authorization: token {n}abc\n" for n in range(3000)]
    text = "".join(lines)
    redactor = Redactor(["line 1234 "])
    assert len(text) > 4 * redaction.MAX_HOLD_CHARS
    assert _collapse(_streamed(redactor, [text])) == _collapse(redactor.redact(text))
    assert _collapse(_streamed(redactor, [text[i : i + 999] for i in range(0, len(text), 999)])) == _collapse(
        redactor.redact(text)
    )


def test_a_long_held_line_fed_in_small_chunks_is_redacted_as_a_whole() -> None:
    line = "Authorization: Bearer " + " ".join(f"word{n}" for n in range(600)) + f" {GHS}\nnext {GHS} line\n"
    redactor = Redactor()
    out = _streamed(redactor, [line[i : i + 3] for i in range(0, len(line), 3)])
    assert _collapse(out) == _collapse(redactor.redact(line))
    assert GHS[-8:] not in out


def test_text_built_to_make_the_patterns_backtrack_is_redacted_without_leaving_a_token() -> None:
    # Quadratic scans of these took minutes; bench/bench_redaction.py prints the time now.
    adversarial = [
        "eyJ" * 20000,
        ("eyJ" * 2500 + "!x") * 8,
        ("ghs_" * 2000 + "!x") * 8,
        "authorization:" * 4000,
        "aws_session_token=" * 3000,
        "authorization: a " * 3000,
        "Bearer " * 8000 + "abc",
        "://" * 20000,
        "token" + " " * 60000 + "x",
        "Authorization: " + " " * 60000,
    ]
    redactor = Redactor()
    for text in adversarial:
        whole = redactor.redact(text + " ghs_" + "A" * 30)
        assert "ghs_AAAA" not in whole
        streamed = _streamed(redactor, [text[i : i + 1000] for i in range(0, len(text), 1000)])
        assert "ghs_AAAA" not in streamed


def test_add_is_thread_safe() -> None:
    redactor = Redactor()
    secrets = [f"secret-number-{n:04d}" for n in range(200)]
    text = " ".join(secrets)

    def add(part: list[str]) -> None:
        for secret in part:
            redactor.add(secret)
            redactor.redact(text)

    threads = [threading.Thread(target=add, args=(secrets[n::4],)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert redactor.redact(text) == " ".join([REDACTED] * len(secrets))


# ---- properties

_GH_BODY = string.ascii_letters + string.digits + "._-"
_PAT_BODY = string.ascii_letters + string.digits + "_"
_SURROUNDING = st.text(alphabet=string.printable, max_size=40)
_SECRET = st.text(alphabet=string.printable.replace("[", "").replace("]", ""), min_size=6, max_size=60)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


_GH = st.builds(
    lambda kind, body: f"gh{kind}_{body}",
    st.sampled_from("pousr"),
    st.text(_GH_BODY, min_size=20, max_size=520),
)
_PAT = st.text(_PAT_BODY, min_size=22, max_size=120).map(lambda body: "github_pat_" + body)
_JWT = st.builds(
    lambda alg, claims, signature, end: (
        f"{_b64url(json.dumps({'alg': alg, 'typ': 'JWT'}).encode())}.{_b64url(json.dumps(claims).encode())}"
        + ("" if signature is None else "." + _b64url(signature))
        + end
    ),
    st.sampled_from(["HS256", "RS256", "none"]),
    st.dictionaries(st.sampled_from(["sub", "iss", "aud", "exp", "scope"]), st.text(max_size=30), min_size=1),
    st.none() | st.binary(max_size=64),
    st.sampled_from(["", "."]),
)
_BASIC = st.builds(
    lambda token, header: (header, base64.b64encode(f"x-access-token:{token}".encode()).decode()),
    _GH,
    st.booleans(),
)


@st.composite
def _embedded(draw: st.DrawFn) -> tuple[Redactor, str, str, str, str]:
    """(redactor, prefix, shown, token, suffix): `token` is what must not leak, `shown` is how
    it appears in the text (`Authorization: Basic <token>` for a header)."""
    kind = draw(st.sampled_from(["gh", "pat", "jwt", "basic", "secret"]))
    redactor = Redactor()
    if kind == "gh":
        token = draw(_GH)
    elif kind == "pat":
        token = draw(_PAT)
    elif kind == "jwt":
        token = draw(_JWT)
    elif kind == "basic":
        header, token = draw(_BASIC)
        shown = f"Authorization: Basic {token}" if header else token
    else:
        token = draw(_SECRET)
        assume(token not in REDACTED)
        redactor.add(token)
    if kind != "basic":
        shown = token
    prefix, suffix = draw(_SURROUNDING), draw(_SURROUNDING)
    return redactor, prefix, shown, token, suffix


def _windows(token: str) -> list[str]:
    return [token[i : i + 8] for i in range(len(token) - 7)]


def _assume_no_coincidence(prefix: str, suffix: str, windows: list[str]) -> None:
    """A window that the surrounding text (or the marker) holds anyway is no leak."""
    assume(not any(w in prefix or w in suffix or w in REDACTED for w in windows))


@PROPERTIES
@given(_embedded())
def test_no_part_of_a_token_survives_redaction(case: tuple[Redactor, str, str, str, str]) -> None:
    redactor, prefix, shown, token, suffix = case
    middle = (len(token) - 8) // 2
    checks = [token[-8:], token[middle : middle + 8]]
    _assume_no_coincidence(prefix, suffix, checks)
    out = redactor.redact(prefix + shown + suffix)
    assert token not in out
    for window in checks:
        assert window not in out


@PROPERTIES
@given(_embedded(), st.lists(st.integers(min_value=0, max_value=700), max_size=20))
def test_no_window_of_a_token_survives_a_stream_split_anywhere(
    case: tuple[Redactor, str, str, str, str], cuts: list[int]
) -> None:
    redactor, prefix, shown, token, suffix = case
    windows = _windows(token)
    _assume_no_coincidence(prefix, suffix, windows)
    text = prefix + shown + suffix
    points = sorted({min(cut, len(text)) for cut in cuts} | {0, len(text)})
    out = _streamed(redactor, [text[a:b] for a, b in itertools.pairwise(points)])
    assert not [window for window in windows if window in out]


@PROPERTIES
@given(_embedded(), st.lists(st.integers(min_value=0, max_value=700), max_size=20))
def test_a_stream_redacts_as_the_whole_text_is_redacted(
    case: tuple[Redactor, str, str, str, str], cuts: list[int]
) -> None:
    redactor, prefix, shown, token, suffix = case
    assume("\n" not in token)  # nothing cut short at the end, where a stream redacts more
    text = prefix + shown + suffix + "\n"
    points = sorted({min(cut, len(text)) for cut in cuts} | {0, len(text)})
    out = _streamed(redactor, [text[a:b] for a, b in itertools.pairwise(points)])
    assert _collapse(out) == _collapse(redactor.redact(text))


@PROPERTIES
@given(_embedded(), st.integers(min_value=0, max_value=10_000), st.booleans())
def test_no_window_of_a_token_survives_truncation_inside_it(
    case: tuple[Redactor, str, str, str, str], where: int, tail: bool
) -> None:
    redactor, prefix, shown, token, suffix = case
    windows = _windows(token)
    _assume_no_coincidence(prefix, suffix, windows)
    text = prefix + shown + suffix
    start = text.index(token)
    cut = start + where % len(token)  # a cut inside the token
    limit = cut + 30 if not tail else len(text) - cut + 30
    out = redactor.bounded(text, limit, tail=tail)
    assert len(out) <= limit
    assert not [window for window in windows if window in out]


# ---- what the runner sends to a model, and what the relay refuses to forward


def _jwt(header: dict[str, Any], claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header)}.{part(claims)}.c2lnbmF0dXJl"


CAPABILITY = _jwt(
    {"alg": "ES256", "typ": "JWT", "kid": "key-1"},
    {"iss": "steward", "aud": "steward-runtime", "sub": "alice", "task_id": "t1"},
)
ISSUED = [  # (credential, the kind `issued_credential` names)
    (GHS, redaction.GITHUB_TOKEN),
    ("gho_" + "b1" * 18, redaction.GITHUB_TOKEN),
    ("ghp_" + "A1" * 18, redaction.GITHUB_TOKEN),
    ("ghu_" + "c2" * 18, redaction.GITHUB_TOKEN),
    ("ghr_" + "d3" * 18, redaction.GITHUB_TOKEN),
    ("github_pat_" + "11ABCDEFG0" * 8, redaction.GITHUB_TOKEN),
    (_b64("x-access-token:" + GHS), redaction.GITHUB_TOKEN),
    (new_ticket(), redaction.STEWARD_TICKET),
    (CAPABILITY, redaction.STEWARD_CAPABILITY),
    (
        _jwt({"alg": "ES256"}, {"iss": "steward", "aud": ["x", "steward-runtime"]}),
        redaction.STEWARD_CAPABILITY,
    ),
]
FIXTURES = [  # generic shapes real repositories hold: neither redacted for a model nor refused
    JWT,
    _jwt({"alg": "ES256", "kid": "key-1"}, {"iss": "https://id.example.com", "aud": "steward-runtime"}),
    "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "https://user:pass@host.example/repo.git",
    "Authorization: Bearer abcdef0123456789",
    f"token {SHA}",
    "x4Xb0yF1lT3m_hQ2-VQm9Xw8vN7kS6jR5uP4oI3eA2c",  # 43 urlsafe characters without the prefix
    "stwt_short",
]


def test_text_for_a_model_loses_held_secrets_and_issued_credentials_but_keeps_fixtures() -> None:
    redactor = Redactor(["held-ticket-value"])
    model = redactor.for_model()
    redactor.add("held-later-secret")  # a secret the runtime gets later reaches the view too
    for secret in [
        *(text for text, _ in ISSUED),
        "held-ticket-value",
        "held-later-secret",
        _b64("held-later-secret"),
    ]:
        shown = model.redact(f"title: fix it ({secret}).")
        assert secret not in shown, secret
        assert shown == f"title: fix it ({REDACTED}).", secret
    for fixture in FIXTURES:
        assert model.redact(f"x = {fixture!r}\n") == f"x = {fixture!r}\n", fixture
        assert model.clean({fixture: [fixture]}) == {fixture: [fixture]}, fixture
    assert redactor.redact(JWT) == REDACTED  # artifacts still lose every generic shape
    assert model.clean({"k": [f"a {GHS}"]}) == {"k": [f"a {REDACTED}"]}


def test_the_relay_recognizes_issued_credentials_and_nothing_generic() -> None:
    for credential, kind in ISSUED:
        assert redaction.issued_credential(f"see: {credential}\n") == kind, credential
    for fixture in FIXTURES:
        assert redaction.issued_credential(f"see: {fixture}\n") is None, fixture
    # A JWT under one of the deployment's key ids is a capability whatever its claims say.
    foreign = _jwt({"alg": "ES256", "kid": "key-1"}, {"iss": "elsewhere"})
    assert redaction.issued_credential(foreign) is None
    assert redaction.issued_credential(foreign, {"key-1"}) == redaction.STEWARD_CAPABILITY
    assert is_capability(CAPABILITY)
    assert not is_capability("eyJub3Q.anwt")
    assert not is_capability(_jwt({"kid": ["unhashable"]}, {"iss": "steward"}), {"key-1"})
    deep = base64.urlsafe_b64encode(b"[" * 5000).decode().rstrip("=")  # nested deeper than Python parses
    assert not is_capability(f"eyJhbGciOiJub25lIn0.{deep}.sig")


def test_tickets_carry_a_prefix_and_256_random_bits() -> None:
    tickets = {new_ticket() for _ in range(100)}
    assert len(tickets) == 100
    for ticket in tickets:
        assert re.fullmatch(r"stwt_[A-Za-z0-9_-]{43}", ticket)
        assert redact(ticket) == REDACTED


def _fullwidth(text: str) -> str:
    """ASCII letters, digits and `_` as their fullwidth forms (U+FF01..), which NFKC maps back."""
    return "".join(chr(ord(char) + 0xFEE0) if char.isalnum() or char == "_" else char for char in text)


GHP = "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8"
TICKET = "stwt_" + "Tq0x9Vb-Lr_4Zk2Wm8Ns6Py1Jc3Hd5Fg7Ae9Bh1Ci3D"
_ENCODED = _b64("config:\n" + "x" * 40 + f"\ntoken: {GHP}\n")
WRAPPED = "\n".join(_ENCODED[at : at + 76] for at in range(0, len(_ENCODED), 76))  # as `base64` prints it
# (how a credential is disguised, the text): each must still be refused by the relay.
EVASIONS = [
    ("base64", _b64(GHP)),
    ("base64 in a sentence", f"please remember {_b64('the token is ' + GHP)} for later"),
    ("urlsafe base64 without padding", base64.urlsafe_b64encode(GHS.encode()).decode().rstrip("=")),
    ("base64 glued to a word", "value" + _b64("x" + GHP)),
    ("base64 wrapped at 76 characters", WRAPPED),
    ("base64 of base64", _b64(_b64(GHP))),
    ("base64 of a ticket", _b64(TICKET)),
    ("base64 of a capability", _b64(CAPABILITY)),
    ("a zero-width space in the prefix", "gh\u200bp" + GHP[3:]),
    ("a zero-width joiner in the body", GHP[:10] + "\u200d" + GHP[10:]),
    ("a word joiner, a BOM and a soft hyphen", GHP[:2] + "\u2060" + GHP[2:8] + "\ufeff\u00ad" + GHP[8:]),
    ("a right-to-left override", "\u202e" + GHP[:4] + "\u202c" + GHP[4:]),
    ("zero-width spaces in a ticket", "\u200b".join(TICKET)),
    ("zero-width spaces in a capability", CAPABILITY[:20] + "\u200b" + CAPABILITY[20:]),
    ("a fullwidth prefix", _fullwidth("ghs_") + GHS[4:]),
    ("a fullwidth token", _fullwidth(GHP)),
    ("a fullwidth ticket", _fullwidth(TICKET)),
    ("an uppercase prefix", "GHP_" + GHP[4:]),
    ("a mixed-case prefix", "Ghs_" + GHS[4:]),
    ("a mixed-case fine-grained prefix", "GitHub_PAT_" + "11ABCDEFG0" * 8),
    ("an uppercase ticket prefix", "STWT_" + TICKET[5:]),
    ("a fullwidth uppercase prefix", _fullwidth("GHP_") + GHP[4:]),
    ("zero-width inside base64", "\u200b".join(_b64(GHP))),
]
# (what it is, the text): ordinary text the relay must forward.
BENIGN = [
    ("base64 of harmless text", _b64("Hello, world! This is an ordinary sentence, encoded for a test.")),
    ("base64 of binary data", base64.b64encode(bytes(range(256)) * 8).decode()),
    ("a wrapped base64 certificate-like blob", "\n".join([_b64("a" * 57)] * 6)),
    ("code with unicode", "def grüße(name: str) -> str:\n    return f'naïve café — ½ ﬁle, 日本語 {name}'\n"),
    (
        "emoji sequences with zero-width joiners",
        "family: 👨\u200d👩\u200d👧, flag: 🏳️\u200d🌈, rtl: \u202b\u05e9\u05dc\u05d5\u05dd\u202c",
    ),
    ("fullwidth prose", _fullwidth("fullwidth text with ghosts_and_ghouls")),
    ("a constant in capitals", "GHS_CONFIG_DIRECTORY_PATH_NAME = 'x'\nGHO_FALLBACK_ORGANIZATION_LOGIN = 'y'"),
    ("a long snake_case name", "def test_a_call_too_large_for_what_is_left_says_so(): pass"),
    ("a SHA-256 digest", "sha256:" + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    ("base64 of a JWT that is not a capability", _b64(JWT)),
    ("base64 of a prefix alone", _b64("the ghp_ prefix and the stwt_ prefix are documented")),
]


@pytest.mark.parametrize(("how", "text"), EVASIONS, ids=[how for how, _ in EVASIONS])
def test_the_relay_screen_sees_through_disguises(how: str, text: str) -> None:
    assert redaction.issued_credential(text) is not None, how


@pytest.mark.parametrize(("what", "text"), BENIGN, ids=[what for what, _ in BENIGN])
def test_the_relay_screen_lets_ordinary_text_through(what: str, text: str) -> None:
    assert redaction.issued_credential(text) is None, what


def test_the_screen_strips_every_format_character_of_this_pythons_unicode() -> None:
    """The screen's list of format characters (category Cf) is written out, for speed: every
    one this Python's Unicode has must be on it, or a new one would hide a token."""
    missing = [
        f"U+{point:04X}"
        for point in range(sys.maxunicode + 1)
        if unicodedata.category(chr(point)) == "Cf"
        and redaction.issued_credential(f"gh{chr(point)}p_" + GHP[4:]) is None
    ]
    assert missing == []
