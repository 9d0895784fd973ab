"""Redaction: what every artifact, event, log line and stored screen tail passes before it is
written (docs/concepts/runner.md, docs/testing.md, "Guarantees"). Pure: no I/O.

It fails closed: a `RedactionError` means redaction could not be guaranteed, and the caller
must write nothing. Redacted are the exact values of the secrets the process holds (and their
base64 and URL encodings), GitHub tokens of every generation, Basic headers for
x-access-token, Authorization and Bearer credentials, userinfo in URLs, JWTs, AWS
credentials and Steward's tickets. Bare 40-hex strings are not: a diff is full of git SHAs.

Text bound for a model passes a narrower view (`Redactor.for_model`): the secrets held,
GitHub's tokens and the credentials Steward issues (tickets, capabilities), none of the
generic shapes, which repositories hold in fixtures the model must be able to read and edit.
`issued_credential` finds the same credentials for the relay, which refuses to forward them
(`steward.domain.credentials` says how a ticket or a capability is told from lookalikes).

Each rule is a sequence of pieces (literals and character runs) rather than a free regex, so
that one description yields both the regex that matches and one for every text that could
still grow into a match (its opening literal, then only characters the rule can hold).
`StreamRedactor` holds back such a tail, so a secret split across chunks of live output is
never emitted in halves. The patterns have no look-behind (every rule starts with a literal),
which makes the matches after a clean cut independent of the text before it; that is what
lets the stream emit early and still redact as much as `redact` on the whole text would.

Time stays linear in the text, whatever it holds (a diff is written by the model): no
pattern can backtrack quadratically, the JWT rule has a linear matcher of its own, a rule
tried at every start bounds its runs (or, `Bearer`, cannot scan one twice), and the tail a
stream holds is looked for only in the last run of characters that could belong to it.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import quote

from steward.domain.credentials import TICKET_BODY_CHARS, TICKET_PREFIX, is_capability

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 6  # shorter "secrets" would redact ordinary words
MAX_HOLD_CHARS = 8192  # the most a stream holds back before it redacts conservatively
_DEFER_FROM = 256  # a stream holding this much scans again only once a quarter more arrived

_T = TypeVar("_T")


class RedactionError(Exception):
    """Redaction could not be guaranteed; the caller must write nothing. The message never
    contains the input."""


# ---- rules


@dataclass(frozen=True)
class _Lit:
    text: str
    icase: bool = False


@dataclass(frozen=True)
class _Run:
    chars: str  # a regex character class (or an escaped single character)
    low: int
    high: int | None = None  # None: unbounded


_Piece = _Lit | _Run


@dataclass(frozen=True)
class _Rule:
    """`pieces[first:last]` is the credential that is replaced; the pieces around it are kept
    (so `Authorization: [REDACTED]`, `https://[REDACTED]@host`). `head`: once `pieces[:head]`
    are complete, a stream that ends inside the rest still redacts it (a token cut short).
    `keep`: a match whose credential this accepts is prose, not a secret. `overlapping`: try a
    match at every start, not only after the previous match; needed where a match beginning
    inside another could reach past its end (`Bearer Bearer <credential>`). A rule without it
    ends each match where a later one beginning inside it would end too: one run of a class
    that holds its own head. `finder`: the spans `finditer` would give (the credential being
    the whole match), found in linear time."""

    pieces: tuple[_Piece, ...]
    first: int = 0
    last: int | None = None
    head: int | None = None
    keep: Callable[[str], bool] | None = None
    overlapping: bool = False
    finder: Callable[[str], Iterator[tuple[int, int]]] | None = None  # what finditer gives, faster


def _quantifier(low: int, high: int | None) -> str:
    return f"{{{low},{'' if high is None else high}}}"


def _full(pieces: Iterable[_Piece]) -> str:
    parts = []
    for piece in pieces:
        if isinstance(piece, _Lit):
            text = re.escape(piece.text)
            parts.append(f"(?i:{text})" if piece.icase else text)
        else:
            parts.append(piece.chars + _quantifier(piece.low, piece.high))
    return "".join(parts)


def _literal_prefix(piece: _Lit, *, empty: bool) -> str:
    """Any prefix of the literal (the empty one only if `empty`)."""
    inner = ""
    for char in reversed(piece.text[1:]):
        inner = f"(?:{re.escape(char)}{inner})?"
    source = re.escape(piece.text[0]) + inner
    if empty:
        source = f"(?:{source})?"
    return f"(?i:{source})" if piece.icase else source


def _prefix(pieces: tuple[_Piece, ...]) -> str:
    """Any prefix, possibly empty, of a text the pieces match."""
    if not pieces:
        return ""
    first, rest = pieces[0], pieces[1:]
    if isinstance(first, _Lit):
        alone = _literal_prefix(first, empty=True)
    else:
        alone = first.chars + _quantifier(0, first.high)
    if not rest:
        return alone
    return f"(?:{_full([first])}{_prefix(rest)}|{alone})"


class _Compiled:
    """A rule as regexes: `full` (group `s` is the credential), `partial` (a cut-short
    credential at the very end, group `s`), and for a stream `growing`: a text that could still
    become a match, that is the opening literal (or the start of it) followed only by
    characters the rest of the rule can hold. That is more than the exact prefixes (a stream
    holds a little more than it must), but cheap: it is looked for only from `reach`
    characters before the last run of such characters (`trailing`, matched on the reversed
    text), where the first opening that fits succeeds at once."""

    def __init__(self, rule: _Rule) -> None:
        pieces = rule.pieces
        opening = pieces[0]
        if not isinstance(opening, _Lit) or not opening.text:
            raise ValueError("a rule starts with a literal: no look-behind, a cheap scan")
        last = len(pieces) if rule.last is None else rule.last
        self.keep = rule.keep
        self.overlapping = rule.overlapping
        self.finder = rule.finder
        self.full = re.compile(
            f"{_full(pieces[: rule.first])}(?P<s>{_full(pieces[rule.first : last])}){_full(pieces[last:])}"
        )
        held = sorted(
            {piece.chars for piece in pieces[1:] if isinstance(piece, _Run)}
            | {re.escape(char) for piece in pieces[1:] if isinstance(piece, _Lit) for char in piece.text}
        )
        universe = f"(?:{'|'.join(held)})"
        self.reach = len(opening.text)
        self.trailing = re.compile(f"{universe}*")
        self.growing = re.compile(
            f"(?:{_full([opening])}{universe}*|{_literal_prefix(opening, empty=False)})\\Z"
        )
        self.partial: re.Pattern[str] | None = None
        if rule.head is not None:
            if last != len(pieces):
                raise ValueError("only a credential at the end of its rule can be cut short")
            head = max(rule.head, rule.first)
            self.partial = re.compile(
                f"{_full(pieces[: rule.first])}(?P<s>{_full(pieces[rule.first : head])}"
                f"{_prefix(pieces[head:])})\\Z"
            )

    def reach_from(self, text: str, backwards: str) -> int:
        """Where a tail of `text` that could still grow into a match can start at the earliest
        (`backwards` is `text` reversed)."""
        run = self.trailing.match(backwards)
        return max(0, len(text) - (run.end() if run else 0) - self.reach)


_B64URL_RUN = re.compile("[A-Za-z0-9_-]*")
_JWT_RUN = re.compile("[A-Za-z0-9_.-]*")


def _run_end(run: re.Pattern[str], text: str, start: int) -> int:
    found = run.match(text, start)
    return found.end() if found else start


def _jwts(text: str) -> Iterator[tuple[int, int]]:
    """The JWT rule's matches, as `finditer` gives them, in linear time. The regex would scan a
    long base64url run again from every `eyJ` in it; but all of them meet the same first dot,
    so when the first fails, the run is skipped whole."""
    position = 0
    while (head := text.find("eyJ", position)) >= 0:
        dot = _run_end(_B64URL_RUN, text, head + 3)
        payload = _run_end(_B64URL_RUN, text, dot + 4) - dot - 4
        if dot - head - 3 >= 8 and text.startswith(".eyJ", dot) and payload >= 8:
            end = _run_end(_JWT_RUN, text, dot)
            yield head, end
            position = end
        else:
            position = max(dot, head + 1)


_GH_BODY = "[A-Za-z0-9._-]"  # installation tokens run to ~520 characters with `_ . -`
_B64 = "[A-Za-z0-9+/=_-]"
_B64URL = "[A-Za-z0-9_-]"
_HEX = "[0-9A-Fa-f]"
_QUOTE = "[\"']"
_BLANK = "[ \\t]"
_ASSIGN = "[:=]"
_CREDENTIAL_START = "[A-Za-z0-9._~+/-]"  # token68 (RFC 7235), which cannot start with "="
# Rules tried at every start bound their runs, so text built to repeat their opening costs a
# bounded scan per opening. Authorization values (Digest and AWS4 included) are far shorter,
# bare API keys shorter still, and a JWT is redacted whole by its own rule; AWS session tokens
# run to a few KB.
_HEADER_CAP = 1024
_BARE_CAP = 512
_AWS_CAP = 4096
# `key: value`, `key=value`, `"key": "value"`, `{'key': 'value'}`
_KEY_VALUE: tuple[_Piece, ...] = (_Run(_QUOTE, 0, 1), _Run(_BLANK, 0), _Run(_ASSIGN, 1, 1), _Run(_BLANK, 0))


def _not_bare_credential(value: str) -> bool:
    """A schemeless Authorization value that is code, not a credential: short, or no digit
    (`authorization: event.headers.get(...)`, `{"Authorization": authorization}`)."""
    return len(value) < 16 or not any(char.isdigit() for char in value)


def _not_bearer_credential(value: str) -> bool:
    """`Bearer token`, `bearer tokens`, `Bearer X`: prose. Credentials are longer than a few
    characters and not all lowercase letters."""
    return len(value) < 8 or (value.isascii() and value.isalpha() and value.islower())


def _not_aws_secret(value: str) -> bool:
    """`aws_secret_access_key=os.environ["KEY"]`, `=${KEY}`, `=<key>`: code or a placeholder.
    AWS secret keys are base64 and never contain these."""
    return any(char in value for char in "([{$<")


# GitHub tokens of every generation, and the base64 of "x-access-token:" (15 bytes encode to
# exactly these 20 characters: a Basic header of an installation token)
_GITHUB_RULES: tuple[_Rule, ...] = (
    _Rule((_Lit("gh"), _Run("[pousr]", 1, 1), _Lit("_"), _Run(_GH_BODY, 20)), head=3),
    _Rule((_Lit("github_pat_"), _Run("[A-Za-z0-9_]", 22)), head=1),
    _Rule((_Lit("eC1hY2Nlc3MtdG9rZW46"), _Run(_B64, 0)), head=1),
)
# Steward's one-time tickets (`steward.domain.credentials`): the prefix, then the random part
_TICKET_RULE = _Rule((_Lit(TICKET_PREFIX), _Run(_B64URL, TICKET_BODY_CHARS)), head=1)
# JWTs, with or without a signature, and whatever dotted segments follow (so that a match
# beginning inside one ends where it ends)
_JWT_RULE = _Rule(
    (
        _Lit("eyJ"),
        _Run(_B64URL, 4, 4),
        _Run(_B64URL, 4),
        _Lit("."),
        _Lit("eyJ"),
        _Run(_B64URL, 8),
        _Run("[A-Za-z0-9_.-]", 0),
    ),
    head=2,
    finder=_jwts,
)

_RULES: tuple[_Rule, ...] = (
    *_GITHUB_RULES,  # first: `_GITHUB_COMPILED` is their slice
    _TICKET_RULE,
    # Old 40-hex tokens, only after `token ` / `token=` / `access_token: ` and the like. The hex
    # run is split so that a stream cut short after 8 hex digits still redacts them.
    _Rule((_Lit("token", True), _Run(_BLANK, 1), _Run(_HEX, 8, 8), _Run(_HEX, 32)), first=2, head=3),
    _Rule(
        (_Lit("token", True), *_KEY_VALUE, _Run(_QUOTE, 0, 1), _Run(_HEX, 8, 8), _Run(_HEX, 32)),
        first=6,
        head=7,
    ),
    # `Authorization: <scheme> <credentials>`: the whole value, to the end of the line or string
    # (Digest and AWS4 credentials have blanks and commas). The credential must start like one,
    # so that code (`authorization: str | None`, `"Authorization": f"Bearer {token}"`,
    # `"Authorization: Basic " + ...`) and placeholders (`Bearer <token>`, `$TOKEN`) survive.
    # The runs on either side of each blank run are disjoint from it: no quadratic backtracking.
    _Rule(
        (
            _Lit("authorization", True),
            *_KEY_VALUE,
            _Run(_QUOTE, 0, 1),
            _Run("[A-Za-z]", 1, 1),
            _Run("[A-Za-z0-9_-]", 0),
            _Run(_BLANK, 1),
            _Run(_CREDENTIAL_START, 1, 1),
            _Run("[^\\r\\n'\"]", 0, _HEADER_CAP),
        ),
        first=6,
        overlapping=True,
    ),
    # `Authorization: <credentials>` without a scheme: only what looks like a credential.
    _Rule(
        (_Lit("authorization", True), *_KEY_VALUE, _Run(_QUOTE, 0, 1), _Run("[^\\s'\"]", 1, _BARE_CAP)),
        first=6,
        keep=_not_bare_credential,
        overlapping=True,
    ),
    _Rule(
        (_Lit("bearer", True), _Run(_BLANK, 1), _Run(_CREDENTIAL_START, 1), _Run("=", 0)),
        first=2,
        keep=_not_bearer_credential,
        overlapping=True,
    ),
    # userinfo in a URL; the scheme is not needed to recognize it, and without it no rule looks back
    _Rule((_Lit("://"), _Run("[^/@\\s]", 1), _Lit("@")), first=1, last=2),
    _JWT_RULE,
    # AWS access key ids (16 characters follow; the whole run is taken) and secret values
    _Rule((_Lit("A"), _Run("[KS]", 1, 1), _Lit("IA"), _Run("[A-Z0-9]", 16)), head=3),
    _Rule(
        (_Lit("aws_secret_access_key", True), *_KEY_VALUE, _Run("\\S", 1, _AWS_CAP)),
        first=5,
        keep=_not_aws_secret,
        overlapping=True,
    ),
    _Rule(
        (_Lit("aws_session_token", True), *_KEY_VALUE, _Run("\\S", 1, _AWS_CAP)),
        first=5,
        keep=_not_aws_secret,
        overlapping=True,
    ),
)
_COMPILED = tuple(_Compiled(rule) for rule in _RULES)
_GITHUB_COMPILED = _COMPILED[: len(_GITHUB_RULES)]
_TICKET_COMPILED = _Compiled(_TICKET_RULE)
_JWT_COMPILED = _Compiled(_JWT_RULE)
# What text bound for a model is redacted of (`Redactor.for_model`): GitHub's tokens and the
# credentials Steward issues, which the relay refuses to forward. Generic shapes (any JWT, AWS
# keys, URL userinfo, `token <hex>`) are left alone: repositories hold them in fixtures, and a
# model that reads `[REDACTED]` where the file has text cannot edit that file.
_MODEL_COMPILED = (
    *_GITHUB_COMPILED,
    _TICKET_COMPILED,
    _Compiled(replace(_JWT_RULE, keep=lambda token: not is_capability(token))),
)
# No rule matches across a line break, so after one nothing older can continue (see _swallow).
_LINE_BREAK = re.compile("[\\r\\n]")


# ---- exact secrets


def _forms(secret: str) -> set[str]:
    """The secret and its encodings: base64 (standard and urlsafe, padded or not, and the part
    fixed by the secret alone inside a longer base64 text at any alignment, as in a Basic
    header of `user:secret` or `echo secret | base64`) and URL-encoding."""
    raw = secret.encode("utf-8")
    forms = {secret, quote(secret, safe="")}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        forms.update((whole, whole.rstrip("=")))
        for shift in range(3):
            shifted = encode(b"\0" * shift + raw).decode("ascii")
            forms.add(shifted[(8 * shift + 5) // 6 : 8 * (shift + len(raw)) // 6])
    return {form for form in forms if len(form) >= MIN_SECRET_LENGTH}


@dataclass(frozen=True)
class _Known:
    """An immutable snapshot of the secrets: `add` swaps it whole, readers take no lock."""

    values: frozenset[str] = frozenset()
    forms: tuple[str, ...] = ()  # longest first

    @property
    def longest(self) -> int:
        return len(self.forms[0]) if self.forms else 0


def _partial_secret(text: str, form: str) -> int:
    """The length of the longest end of `text` that is a proper prefix of `form`."""
    if not text:
        return 0
    last = text[-1]
    index = form.rfind(last, 0, min(len(form) - 1, len(text)))
    while index >= 0:
        if text.endswith(form[: index + 1]):
            return index + 1
        index = form.rfind(last, 0, index)
    return 0


# ---- matching


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint spans; touching ones are joined (one marker, not two)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _matches(rule: _Compiled, text: str) -> Iterator[tuple[tuple[int, int], tuple[int, int], str]]:
    """(whole match, credential, credential text) of every match of `rule`."""
    if rule.finder is not None:
        for start, end in rule.finder(text):
            yield (start, end), (start, end), text[start:end]
        return
    if not rule.overlapping:
        for match in rule.full.finditer(text):
            yield match.span(), match.span("s"), match.group("s")
        return
    found = rule.full.search(text)
    while found is not None:
        yield found.span(), found.span("s"), found.group("s")
        found = rule.full.search(text, found.start() + 1)


def _scan(
    text: str, known: _Known, rules: tuple[_Compiled, ...] = _COMPILED
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(what to redact, what must not be cut): the credentials, and the whole matches (kept
    context and the prose that `keep` spared included) with every secret occurrence."""
    covered: list[tuple[int, int]] = []
    whole: list[tuple[int, int]] = []
    for rule in rules:
        for span, (start, end), credential in _matches(rule, text):
            whole.append(span)
            if end > start and (rule.keep is None or not rule.keep(credential)):
                covered.append((start, end))
    for form in known.forms:
        # every occurrence, overlapping ones too: two secrets that overlap are both hidden whole
        at = text.find(form)
        while at >= 0:
            covered.append((at, at + len(form)))
            at = text.find(form, at + 1)
    return _merge(covered), _merge(covered + whole)


def _render(text: str, spans: list[tuple[int, int]], start: int, stop: int) -> str:
    """`text[start:stop]` with every span in it replaced by one marker."""
    parts: list[str] = []
    position = start
    for span_start, span_end in spans:
        if span_end <= start or span_start >= stop:
            continue
        parts += (text[position : max(span_start, start)], REDACTED)
        position = min(span_end, stop)
    parts.append(text[position:stop])
    return "".join(parts)


def _verify(output: str, known: _Known) -> None:
    """The post-check: no known secret (in any of its forms) is left."""
    for form in known.forms:
        if form in output:
            raise RedactionError("a known secret survived redaction")


def _guarded(action: Callable[[], _T]) -> _T:
    """`action()`, any failure turned into a RedactionError that names only its type. It is
    raised outside the `except` block so that it has no `__context__` holding the input."""
    try:
        return action()
    except RedactionError:
        raise
    except Exception as error:  # every failure must fail closed
        failure = type(error).__name__
    raise RedactionError(f"redaction failed ({failure})")


def _note(count: int, *, tail: bool) -> str:
    return f"[truncated {count} chars]…" if tail else f"…[truncated {count} chars]"


def _off_marker(text: str, cut: int, *, forward: bool) -> int:
    """`cut`, moved out of a marker it would split."""
    start = text.find(REDACTED, max(0, cut - len(REDACTED) + 1))
    if 0 <= start < cut < start + len(REDACTED):
        return start + len(REDACTED) if forward else start
    return cut


# ---- the API


class Redactor:
    """Redacts with a set of secrets that may grow (`add` is thread-safe)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._known = _Known()
        self._rules: tuple[_Compiled, ...] = _COMPILED
        self._source: Redactor = self  # whose secrets this one uses (a view's, its parent's)
        self.add(*secrets)

    def for_model(self) -> Redactor:
        """A view for text sent to a model: the secrets this redactor holds (now and as they
        grow) and the credentials GitHub and Steward issue (tokens, tickets, capabilities:
        what the relay refuses to forward), but none of the generic rules (any JWT, AWS keys,
        URL userinfo, Authorization values), which would hide fixtures from the model."""
        view = type(self).__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._rules = _MODEL_COMPILED
        view._source = self._source
        return view

    def add(self, *secrets: str) -> None:
        """Hold `secrets` too. Values shorter than 6 characters are ignored (they would redact
        ordinary words), and so are parts of the marker itself (no output could pass)."""
        fresh = {
            secret
            for secret in secrets
            if isinstance(secret, str) and len(secret) >= MIN_SECRET_LENGTH and secret not in REDACTED
        }
        source = self._source
        with source._lock:
            known = source._known
            fresh -= known.values
            if not fresh:
                return
            forms = set(known.forms)
            for secret in fresh:
                forms |= _forms(secret)
            source._known = _Known(known.values | fresh, tuple(sorted(forms, key=lambda f: (-len(f), f))))

    def redact(self, text: str) -> str:
        """`text` without credentials. Raises RedactionError on any internal failure or if a
        known secret survives."""
        known = self._snapshot()

        def run() -> str:
            if not isinstance(text, str):
                raise TypeError("only text can be redacted")
            covered, _ = _scan(text, known, self._rules)
            output = _render(text, covered, 0, len(text))
            _verify(output, known)
            return output

        return _guarded(run)

    def detect(self, text: str) -> bool:
        """Whether `text` holds anything `redact` would replace: a held secret (in any of its
        forms) or a credential pattern. Raises RedactionError on any internal failure, so a
        caller that refuses on True refuses on failure too."""
        known = self._known

        def run() -> bool:
            if not isinstance(text, str):
                raise TypeError("only text can be scanned")
            covered, _ = _scan(text, known)
            return bool(covered)

        return _guarded(run)

    def clean(self, value: Any) -> Any:
        """A JSON-like structure with every string, keys included, redacted at any depth;
        other scalars unchanged."""
        return _guarded(lambda: self._clean(value))

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self._clean(key): self._clean(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._clean(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._clean(item) for item in value)
        return value

    def bounded(self, text: str, max_chars: int, *, tail: bool = False) -> str:
        """`text` redacted FIRST, then cut to at most `max_chars` with a `…[truncated N chars]`
        note at the end, so a cut can never expose part of a token. With `tail`, the end of
        the text is kept instead (a screen tail) and the note comes first."""
        if max_chars < 0:
            raise ValueError("max_chars must not be negative")
        redacted = self.redact(text)
        if len(redacted) <= max_chars:
            return redacted
        room = max_chars - len(_note(len(redacted), tail=tail))  # the longest note it could need
        if room <= 0:
            return _note(len(redacted), tail=tail)[:max_chars]
        if tail:
            start = _off_marker(redacted, len(redacted) - room, forward=True)
            return _note(start, tail=True) + redacted[start:]
        stop = _off_marker(redacted, room, forward=False)
        return redacted[:stop] + _note(len(redacted) - stop, tail=False)

    def stream(self) -> StreamRedactor:
        """A redactor for one stream of chunks (it uses the secrets held at each chunk)."""
        return StreamRedactor(self)

    def _snapshot(self) -> _Known:
        return self._source._known


class StreamRedactor:
    """Redacts a stream of chunks (live command output): a secret or token split across chunks
    is still redacted.

    It holds back the leftmost tail that could still grow into a match, and never cuts inside
    a match. What it emits, concatenated with `flush()`, is what `redact` gives for the whole
    text (a marker may be split in two), or more redacted: past `max_hold` characters held
    back (a longer secret raises it), the held text becomes one marker and the rest of that
    line is dropped, and a stream that ends inside a token has the cut-short token redacted.
    """

    def __init__(self, redactor: Redactor, max_hold: int = MAX_HOLD_CHARS) -> None:
        self._redactor = redactor
        self._max_hold = max_hold
        self._lock = threading.Lock()
        self._buffer = ""  # text not emitted yet, after `_context` characters already emitted
        self._context = 0
        self._pending = ""  # arrived after `_buffer` was scanned, not scanned yet
        self._swallowing = False  # dropping the rest of a line after a conservative cut
        self._dropped = ""  # the last characters dropped, for secrets that span the line break
        self._failed = False

    def feed(self, chunk: str) -> str:
        """The text that is safe to emit now."""
        return self._locked(lambda: self._feed(chunk))

    def flush(self) -> str:
        """The rest, redacted, a cut-short token at the end of the stream included. The
        stream can then be used again."""
        return self._locked(self._flush)

    def _locked(self, action: Callable[[], str]) -> str:
        with self._lock:
            if self._failed:
                raise RedactionError("an earlier failure left this stream unusable")
            try:
                return _guarded(action)
            except RedactionError:
                self._failed = True  # what was held is lost: fail closed from now on
                raise

    def _feed(self, chunk: str) -> str:
        if not isinstance(chunk, str):
            raise TypeError("only text can be redacted")
        known = self._redactor._snapshot()
        limit = max(self._max_hold, 2 * known.longest)
        # Slices bound the text each step scans, however large the chunk.
        return "".join(self._step(chunk[at : at + limit], known, limit) for at in range(0, len(chunk), limit))

    def _step(self, piece: str, known: _Known, limit: int) -> str:
        if self._swallowing:
            piece = self._swallow(piece, known)
            if self._swallowing:
                return ""
        pending = self._pending + piece
        # Scanning a long held tail again for every small chunk would cost its length each
        # time; waiting for a quarter more (or a line break, which ends every pattern's run)
        # keeps the total linear. Holding back longer is always safe.
        if (
            len(self._buffer) >= _DEFER_FROM
            and 4 * len(pending) < len(self._buffer)
            and _LINE_BREAK.search(piece) is None
        ):
            self._pending = pending
            return ""
        text, self._pending = self._buffer + pending, ""
        rules = self._redactor._rules
        covered, whole = _scan(text, known, rules)
        cut = len(text)
        backwards = text[::-1]
        for rule in rules:
            if (growing := rule.growing.search(text, rule.reach_from(text, backwards))) is not None:
                cut = min(cut, growing.start())
        for form in known.forms:
            cut = min(cut, len(text) - _partial_secret(text, form))
        for start, end in whole:  # disjoint: at most one holds the cut
            if start < cut < end:
                cut = start
                break
        start = self._context
        if len(text) - max(cut, start) > limit:
            # Too much held: one marker for all of it, and the rest of the line is dropped.
            output = _render(text, covered, start, max(cut, start)) + REDACTED
            self._dropped = text[-known.longest :] if known.longest else ""
            self._buffer, self._context, self._swallowing = "", 0, True
        else:
            output = _render(text, covered, start, max(cut, start))
            self._buffer, self._context = text[cut:], max(start - cut, 0)
        _verify(output, known)
        return output

    def _swallow(self, piece: str, known: _Known) -> str:
        """Drop `piece` up to the next line break; after one, return the rest with the last
        dropped characters before it as context (emitted, but a secret may span the break)."""
        found = _LINE_BREAK.search(piece)
        keep = max(known.longest - 1, 0)
        if found is None:
            self._dropped = (self._dropped + piece)[-keep:] if keep else ""
            return ""
        context = (self._dropped + piece[: found.start()])[-keep:] if keep else ""
        self._swallowing, self._dropped = False, ""
        self._buffer, self._context = context, len(context)
        return piece[found.start() :]

    def _flush(self) -> str:
        known = self._redactor._snapshot()
        text, start = self._buffer + self._pending, self._context
        self._buffer, self._pending, self._context, self._dropped = "", "", 0, ""
        if self._swallowing:
            self._swallowing = False
            return ""
        rules = self._redactor._rules
        covered, _ = _scan(text, known, rules)
        backwards = text[::-1]
        for rule in rules:
            if rule.partial is None:
                continue
            if (match := rule.partial.search(text, rule.reach_from(text, backwards))) is not None:
                covered.append(match.span("s"))
        for form in known.forms:
            length = _partial_secret(text, form)
            if length >= MIN_SECRET_LENGTH:
                covered.append((len(text) - length, len(text)))
        output = _render(text, _merge(covered), start, len(text))
        _verify(output, known)
        return output


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` without credentials: `Redactor(secrets).redact(text)`."""
    return Redactor(secrets).redact(text)


def issued_credential(text: str, key_ids: Collection[str] = ()) -> str | None:
    """The kind of the first credential GitHub or Steward issued that `text` holds
    (`GITHUB_TOKEN`, `STEWARD_TICKET`, `STEWARD_CAPABILITY`), or None. What the relay refuses
    to forward: the same GitHub rules as redaction (`gh[pousr]_...`, `github_pat_...`, the
    base64 of `x-access-token:`), tickets by their prefix, and JWTs that are capabilities by
    their claims or, with `key_ids`, by their header's key id
    (`steward.domain.credentials.is_capability`). Generic shapes (any other JWT, AWS keys,
    URL userinfo) are not looked for: repositories hold them in fixtures.

    A credential a model could still read back is found however it is disguised: in the text
    as NFKC normalizes it with format characters (Unicode category Cf: zero-width and
    bidirectional controls) removed, so `ghs_` in fullwidth letters (U+FF47...) or with a
    zero-width space (U+200B) inside is `ghs_`; with its prefix in another case (`GHS_`, `Stwt_`: then the rest must hold a digit, as a
    random token does and a constant's name such as `GHS_CONFIG_DIRECTORY` does not); and
    inside base64 (standard or urlsafe, at any alignment, line-wrapped, nested twice). A
    credential split across text blocks is the caller's to join (`steward.domain.converse:
    joined_texts`). ASCII text skips the normalization, and only runs of 32 or more base64
    characters are decoded (binary they decode to is searched only where it holds a run of
    characters as long as a credential), so ordinary text costs a few scans in C."""
    return _disguised(text, key_ids, _MAX_BASE64_DEPTH)


GITHUB_TOKEN = "a GitHub token"  # noqa: S105 - a kind of credential, not one
STEWARD_TICKET = "a Steward ticket"
STEWARD_CAPABILITY = "a Steward capability"
_MAX_BASE64_DEPTH = 2  # base64 of base64 of a credential is still found
# Runs of characters are found by C-level scans only (two translations and `find`): text
# without a run as long as the shortest credential looked for (`ghs_` and 20: 24 characters,
# 32 in base64) costs a few passes in C. Other bytes become blanks.
_BASE64_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/_-")
_BASE64_MASK = bytes(byte if byte in _BASE64_BYTES else 0x20 for byte in range(256))
# What an issued credential, or its base64, is written with: what binary is searched for.
_TOKEN_MASK = bytes(byte if byte in _BASE64_BYTES or byte in b".=" else 0x20 for byte in range(256))
_RUN_FLAT = bytes(0x20 if byte == 0x20 else 0x61 for byte in range(256))
_URLSAFE_TO_STANDARD = bytes.maketrans(b"-_", b"+/")
# Unicode's format characters (category Cf: soft hyphen, zero-width and bidirectional
# controls, tags...) as of Unicode 15, written out: finding them by category would cost a
# lookup per character. A test checks the running Python's Unicode has no other.
_FORMAT_CHARS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
# Rules whose opening literal a person (or a model) can write in another case and still mean.
_PREFIXED_COMPILED = (_GITHUB_COMPILED[0], _GITHUB_COMPILED[1], _TICKET_COMPILED)


def _issued(text: str, key_ids: Collection[str]) -> str | None:
    """The credential `text` holds as written."""
    for rule in _GITHUB_COMPILED:
        if rule.full.search(text) is not None:
            return GITHUB_TOKEN
    if _TICKET_COMPILED.full.search(text) is not None:
        return STEWARD_TICKET
    if "eyJ" in text:
        for _, _, token in _matches(_JWT_COMPILED, text):
            if is_capability(token, key_ids):
                return STEWARD_CAPABILITY
    return None


def _recased(lowered: str) -> str | None:
    """A credential whose prefix is written in another case, in `lowered` (the text in lower
    case; see `issued_credential`)."""
    for rule in _PREFIXED_COMPILED:
        for match in rule.full.finditer(lowered):
            if any(char.isdigit() for char in match.group()):
                return STEWARD_TICKET if rule is _TICKET_COMPILED else GITHUB_TOKEN
    return None


def _normalized(text: str) -> str:
    """`text` as NFKC normalizes it, without format characters (category Cf)."""
    if text.isascii():
        return text
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return _FORMAT_CHARS.sub("", text)


def _runs(data: bytes, mask: bytes, shortest: int, drop: bytes = b"") -> Iterator[bytes]:
    """Every run of `shortest` or more of the bytes `mask` keeps, once `drop` is removed."""
    masked = data.translate(mask, drop)
    flat = masked.translate(_RUN_FLAT)
    probe = b"a" * shortest
    start = flat.find(probe)
    while start >= 0:
        end = flat.find(b" ", start)
        end = len(flat) if end < 0 else end
        yield masked[start:end]
        start = flat.find(probe, end)


def _base64_decodings(data: bytes) -> Iterator[bytes]:
    """What every run of 32 or more base64 characters in `data` (text as UTF-8, or bytes
    decoded already) decodes to, standard or urlsafe, line breaks dropped (base64 is wrapped
    at 76), at each of the 4 alignments (a run glued to a word starts mid-quantum)."""
    for found in _runs(data, _BASE64_MASK, 32, b"\r\n"):
        run = found.translate(_URLSAFE_TO_STANDARD)
        for shift in range(min(4, len(run) - 31)):
            usable = len(run) - shift
            try:
                yield binascii.a2b_base64(run[shift : shift + usable - usable % 4])
            except binascii.Error:
                continue


def _disguised(text: str, key_ids: Collection[str], depth: int) -> str | None:
    kind = _issued(text, key_ids)
    normal = _normalized(text)
    if kind is None and normal is not text:
        kind = _issued(normal, key_ids)
    if kind is None:
        lowered = normal.lower()
        kind = _recased(lowered) if lowered != normal else None
    if kind is None and depth > 0:
        for decoded in _base64_decodings(normal.encode("utf-8", "surrogatepass")):
            if (kind := _decoded(decoded, key_ids, depth - 1)) is not None:
                break
    return kind


def _decoded(data: bytes, key_ids: Collection[str], depth: int) -> str | None:
    """The credential decoded base64 holds: as text when it is UTF-8; else (binary) in what
    is left once every byte a credential is not written with is a blank, looked at only when
    that leaves a run as long as the shortest credential (random bytes almost never do)."""
    try:
        return _disguised(data.decode("utf-8"), key_ids, depth)
    except UnicodeDecodeError:
        pass
    masked = data.translate(_TOKEN_MASK)
    if masked.translate(_RUN_FLAT).find(b"a" * 24) < 0:
        return None
    text = masked.decode("ascii")
    kind = _issued(text, key_ids) or _recased(text.lower())
    if kind is None and depth > 0:
        for decoded in _base64_decodings(masked):
            if (kind := _decoded(decoded, key_ids, depth - 1)) is not None:
                break
    return kind
