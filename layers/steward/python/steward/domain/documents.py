"""Task Documents (docs/concepts/lifecycle.md, docs/concepts/identity.md): Markdown plans whose top-level checkboxes are work.

Pure: text in, a validated `TaskDocument` out, or an `InvalidDocument` (422) that names the
field and the 1-based line, or `TooLarge` (413). Nothing here touches I/O.

Choices beyond the README's contract, written down because hashes and approvals depend on them:

* Lines end only at LF, CRLF or lone CR (never at U+2028, form feed and the like), so line
  numbers are the ones an editor shows.
* Item details are line-based, not full CommonMark: indented or blank lines after a checkbox
  belong to it, and any non-blank line at column 0 ends it, even inside a fence that the
  details opened (GitHub renders it the same way: the list item, and its code block, end
  there). A fence opened at column 0 to 3 spaces outside an item is opaque until it closes.
* Trailing spaces and tabs of detail lines are dropped: editors strip them silently, and a
  re-save must not turn approved work into new work.
* Optional front matter keys given as null (`model:`) take their default. The budget is
  canonicalized (2.50, 2.5 and "2.5" are one value, hence one content hash).
* YAML merge keys (`<<`) and non-string keys are rejected; so are lone surrogates in the
  markdown, which no storage layer can encode as UTF-8.
* Empty level-1 headings (`#`) are skipped when looking for the title.
* Commands (`checks`, `setup`) run as argv, without a shell (`steward.runner.sandbox`): each
  must split into arguments as `shlex.split` splits it (the runner's `parse_allowlist`
  rule), and shell syntax outside quotes (`&&`, `||`, `;`, `|`, `&`, `>`, `<`, backticks,
  `$(`) is refused: it would reach the program as text, so the check could never do what
  it reads as. Quoted, it is an argument (`sh -c 'a && b'` is a check that uses a shell).
* An unknown key is refused naming the known key it nearly is (`check` -> `checks`), even
  when that known key is missing too.
* What only the deployment knows is checked by `check_priced` (the model's price entry
  and a budget that pays for one minimal call) and by the plan service (the repository
  held by a live installation of the user); the parser alone stays deployment-free.
* Order (docs/concepts/task-document.md): a checkbox line may end with `(after #1)` or
  `(after #1, #3)`; the suffix is not part of the item's title (so renumbering a reference
  never makes the work new), references are validated here (existing items, no self
  reference, no cycle, with `order: sequential` counted) and covered by the content hash
  as the ordinals they name. A line ending in `(after #...)` that does not list `#n`
  references (`(after #1 and #2)`) is refused rather than read as title text: a person who
  wrote it meant order. `(after lunch)`, and `(after #n)` in an item's details, are text.
* An item's own repository is a `repo: owner/name` line at the top level of its details
  (one at most); the line stays in the details, so the text hash covers it.
* No item may store more than a whole document may hold (`DocumentPolicy.max_bytes`, its
  title and details in UTF-8): tabs in the indentation of details expand to spaces, so a
  document within the limit can still hold an item beyond it (413, naming the checkbox).
  A task snapshots its item's text, so this bound is what keeps every task one DynamoDB
  item; whether the plan as a whole fits is the plan store's check before it writes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Context, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from steward.domain.budget import MIN_CALL_INPUT_BYTES, MIN_OUTPUT_TOKENS, min_call_cost
from steward.domain.document_limits import DEFAULT_FOLLOW_UPS, MAX_ATTEMPTS, MAX_DOCUMENT_BYTES
from steward.domain.errors import InvalidDocument, TooLarge
from steward.domain.prices import PriceTable

if TYPE_CHECKING:
    import yaml

MAX_ITEMS = 100
MAX_FRONT_MATTER_BYTES = 16 * 1024  # bounds the YAML work, anchors and aliases included
MAX_COMMANDS = 20
MAX_COMMAND_CHARS = 1000


@dataclass(frozen=True)
class DocumentPolicy:
    """Deployment limits and defaults; the document can narrow them, never widen them."""

    max_budget_usd: Decimal = Decimal("10.00")
    default_budget_usd: Decimal = Decimal("2.00")
    default_model: str | None = "scripted"  # None: a plan must name its model
    max_bytes: int = MAX_DOCUMENT_BYTES
    max_items: int = MAX_ITEMS


_REPO = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")


def is_repo_name(value: object) -> TypeGuard[str]:
    """GitHub's `owner/name` shape (a name of only dots is no repository)."""
    return isinstance(value, str) and bool(_REPO.fullmatch(value)) and value.split("/")[1] not in {".", ".."}


# git check-ref-format, plus no whitespace and no leading '-' (it would read as an option).
_BAD_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock(?:/|$)|/\.")


def _shown(value: object) -> str:
    """A short, safe rendering of a rejected value for an error message."""
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float | Decimal):
        return str(value)[:60]
    if value is None:
        return "nothing"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else "a value"


# Longest first, so that `&&` is named rather than `&`.
_SHELL_OPERATORS = ("&&", "||", "$(", ">>", "<<", ";", "|", "&", ">", "<", "`")


def shell_syntax(command: str) -> str | None:
    """The first shell operator outside quotes in `command`, or None.

    Quotes and backslashes are read as `shlex.split` (POSIX mode) reads them: within single
    quotes everything is text, within double quotes a backslash escapes the next character,
    outside quotes a backslash makes the next character text. What this finds is syntax a
    shell would act on and an argv runner passes to the program as a plain argument.
    """
    quote: str | None = None
    index = 0
    while index < len(command):
        char = command[index]
        if quote == "'":
            quote = None if char == "'" else quote
        elif quote == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                quote = None
        elif char == "\\":
            index += 1
        elif char in "'\"":
            quote = char
        else:
            for operator in _SHELL_OPERATORS:
                if command.startswith(operator, index):
                    return operator
        index += 1
    return None


def command_argv(command: str) -> tuple[str, ...]:
    """The argv the runner executes for `command` (`steward.runner.sandbox:parse_allowlist`
    splits the same way); ValueError when it does not split or splits into nothing."""
    try:
        argv = tuple(shlex.split(command.strip()))
    except ValueError as exc:
        raise ValueError(f"does not split into arguments ({str(exc).lower()})") from None
    if not argv:
        raise ValueError("has no arguments once quotes are removed")
    return argv


class _CommandError(ValueError):
    """A rejected command, with its 1-based position in the list (for the error's line)."""

    def __init__(self, message: str, number: int) -> None:
        super().__init__(message)
        self.number = number


def _commands(key: str, value: object, *, required: bool) -> tuple[str, ...]:
    """Commands run verbatim by the runner, so each must be one unambiguous line."""
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list of commands, got {_shown(value)}")
    if required and not value:
        raise ValueError(f"{key} needs at least one command")
    if len(value) > MAX_COMMANDS:
        raise ValueError(f"{key} has {len(value)} commands, at most {MAX_COMMANDS} are allowed")
    for number, command in enumerate(value, start=1):
        where = f"{key} command {number}"
        if not isinstance(command, str):
            raise ValueError(f"{where} must be a string, got {_shown(command)}")
        if not command.strip():
            raise ValueError(f"{where} is empty")
        if len(command) > MAX_COMMAND_CHARS:
            raise ValueError(f"{where} is longer than {MAX_COMMAND_CHARS} characters")
        if any(ch in command for ch in "\n\r\x85\u2028\u2029"):
            raise ValueError(f"{where} must be a single line")
        if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in command):
            raise ValueError(f"{where} contains a control character")
        try:
            command_argv(command)
        except ValueError as exc:
            raise _CommandError(f"{where} {exc}", number) from None
        operator = shell_syntax(command)
        if operator is not None:
            message = (
                f"{where} uses shell syntax ({operator!r}), but commands run without a shell: "
                f"list each command on its own, quote the text if it is meant literally, "
                f"or run a shell explicitly (sh -c '...')"
            )
            raise _CommandError(message, number)
    return tuple(value)


def _canonical(amount: Decimal) -> Decimal:
    """One spelling per value (2.50 -> 2.5, 2.0 -> 2), computed exactly (no context rounding)."""
    if amount == amount.to_integral_value():
        return amount.quantize(Decimal(1))
    return amount.normalize(Context(prec=len(amount.as_tuple().digits)))


class FrontMatter(BaseModel):
    """The YAML header: which repository, which model, what it may spend, what must pass."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str
    base: str | None = None
    model: str
    budget_usd: Decimal
    checks: tuple[str, ...]
    setup: tuple[str, ...] = ()
    max_attempts: int = 3
    # Follow-up rounds each item may take on its pull request (docs/concepts/follow-ups.md),
    # each at budget_usd: confirming approves them with the rest.
    follow_ups: int = DEFAULT_FOLLOW_UPS
    # `sequential`: each item waits for the one above it (besides its own `(after #n)`).
    order: str | None = None
    # Run the required checks on the untouched clone before the first model call (docs/concepts/runner.md); false when the item is meant to make a failing check pass.
    baseline: bool = True

    @field_validator("baseline", mode="before")
    @classmethod
    def _baseline(cls, value: object) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"baseline must be true or false, got {_shown(value)}")
        return value

    @field_validator("order", mode="before")
    @classmethod
    def _order(cls, value: object) -> str:
        if value != "sequential":
            raise ValueError(f"order must be sequential (or left out), got {_shown(value)}")
        return "sequential"

    @field_validator("repo", mode="before")
    @classmethod
    def _repo(cls, value: object) -> str:
        if not is_repo_name(value):
            raise ValueError(f"repo must be owner/name, got {_shown(value)}")
        return value

    @field_validator("base", mode="before")
    @classmethod
    def _base(cls, value: object) -> str:
        if (
            not isinstance(value, str)
            or not value
            or len(value) > 255
            or value == "@"
            or _BAD_REF.search(value)
            or any(ch.isspace() for ch in value)
        ):
            raise ValueError(f"base must be a branch name, got {_shown(value)}")
        return value

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value: object) -> str:
        # Model ids include ARNs (':' and '/'), so only blanks and control characters are refused.
        if not isinstance(value, str) or not value or len(value) > 200 or not value.isprintable():
            raise ValueError(f"model must be a model id, got {_shown(value)}")
        if any(ch.isspace() for ch in value):
            raise ValueError(f"model must be a model id without spaces, got {_shown(value)}")
        return value

    @field_validator("budget_usd", mode="before")
    @classmethod
    def _budget(cls, value: object, info: ValidationInfo) -> Decimal:
        context = info.context if isinstance(info.context, dict) else {}
        policy = context.get("policy", DocumentPolicy())
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            raise ValueError(f"budget_usd must be a number of US dollars, got {_shown(value)}")
        try:
            amount = Decimal(str(value).strip())  # via str(): 2.5 stays 2.5, no float arithmetic
        except InvalidOperation:
            raise ValueError(f"budget_usd must be a number of US dollars, got {_shown(value)}") from None
        if not amount.is_finite() or not Decimal(0) < amount <= policy.max_budget_usd:
            raise ValueError(
                f"budget_usd must be more than 0 and at most {policy.max_budget_usd}, got {_shown(value)}"
            )
        return _canonical(amount)

    @field_validator("checks", mode="before")
    @classmethod
    def _checks(cls, value: object) -> tuple[str, ...]:
        return _commands("checks", value, required=True)

    @field_validator("setup", mode="before")
    @classmethod
    def _setup(cls, value: object) -> tuple[str, ...]:
        return _commands("setup", value, required=False)

    @field_validator("max_attempts", mode="before")
    @classmethod
    def _max_attempts(cls, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
            raise ValueError(
                f"max_attempts must be a whole number from 1 to {MAX_ATTEMPTS}, got {_shown(value)}"
            )
        return value

    @field_validator("follow_ups", mode="before")
    @classmethod
    def _follow_ups(cls, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
            raise ValueError(f"follow_ups must be a whole number from 0 to 10, got {_shown(value)}")
        return value


@dataclass(frozen=True)
class ParsedItem:
    """One top-level checkbox: a unit of work, later one task and one pull request."""

    ordinal: int
    line: int
    checked: bool
    title: str
    details: str
    # The ordinals its `(after #n, ...)` names, ascending (order: sequential aside).
    after: tuple[int, ...] = ()

    @property
    def repo(self) -> str | None:
        """The repository its details name (`repo: owner/name`), else None: the plan's."""
        return item_repo(self.details)

    @property
    def text_hash(self) -> str:
        """Identity of the work asked for; ticking the box by hand does not make it new work."""
        return hashlib.sha256(f"{self.title}\n{self.details}".encode()).hexdigest()


@dataclass(frozen=True)
class TaskDocument:
    """A parsed plan; `title` is for display only and is not part of what gets approved."""

    front_matter: FrontMatter
    title: str | None
    items: tuple[ParsedItem, ...]
    # Document line of each front matter key written (not part of what is approved).
    lines: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def line_of(self, key: str) -> int:
        """Where `key` is written, else line 1 (the front matter's '---': a default applies)."""
        return self.lines.get(key, 1)

    @property
    def content_hash(self) -> str:
        """What a confirmation approves: front matter and items in order, not layout or title."""
        return content_hash_of(self.front_matter.model_dump(mode="json"), self.items)

    def waits_for(self) -> dict[int, tuple[int, ...]]:
        """Each item's predecessors by ordinal (`waits_for`)."""
        return waits_for(self.items, sequential=self.front_matter.order == "sequential")


class _Ordered(Protocol):
    @property
    def ordinal(self) -> int: ...
    @property
    def after(self) -> tuple[int, ...]: ...


def waits_for(items: Iterable[_Ordered], *, sequential: bool) -> dict[int, tuple[int, ...]]:
    """ordinal -> the ordinals of the items it waits for: its `(after #n)` references, and
    with `order: sequential` the item above it."""
    return {
        item.ordinal: tuple(
            sorted({*item.after, *((item.ordinal - 1,) if sequential and item.ordinal > 1 else ())})
        )
        for item in items
    }


class _ItemText(Protocol):
    """What of an item is approved (a parsed checkbox and a stored plan item both have it)."""

    @property
    def checked(self) -> bool: ...
    @property
    def title(self) -> str: ...
    @property
    def details(self) -> str: ...
    @property
    def after(self) -> tuple[int, ...]: ...


def canonical_front_matter(front_matter: Mapping[str, Any]) -> dict[str, Any]:
    """A front matter as approvals compare it: a key added after plans were first approved
    is left out while it holds its default, so a plan approved before it existed still
    matches its approval (`follow_ups`: absent and 2 are the same approval; `baseline`:
    absent and true)."""
    canonical = dict(front_matter)
    if canonical.get("follow_ups", DEFAULT_FOLLOW_UPS) == DEFAULT_FOLLOW_UPS:
        canonical.pop("follow_ups", None)
    if canonical.get("order") is None:
        canonical.pop("order", None)
    if canonical.get("baseline", True) is True:
        canonical.pop("baseline", None)
    return canonical


def content_hash_of(front_matter: Mapping[str, Any], items: Iterable[_ItemText]) -> str:
    """The content hash of a front matter (as `FrontMatter.model_dump(mode="json")` gives it,
    the form a plan stores) and items in order: `TaskDocument.content_hash`, computed from
    what a stored plan or a kept document holds as well as from a parsed document."""
    canonical = {
        "front_matter": canonical_front_matter(front_matter),
        # An item's references only when it has some: a plan approved before order existed
        # keeps its hash.
        "items": [
            [item.checked, item.title, item.details, *([list(item.after)] if item.after else [])]
            for item in items
        ],
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_document(markdown: str, policy: DocumentPolicy = DocumentPolicy()) -> TaskDocument:
    """Parse and validate a Task Document; every rejection names a field and a line."""
    if len(markdown.encode("utf-8", "surrogatepass")) > policy.max_bytes:
        message = f"markdown: the document is larger than the limit of {policy.max_bytes} UTF-8 bytes"
        raise TooLarge(message, field="markdown")
    text = markdown.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    bad = re.search("[\x00\ud800-\udfff]", text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        what = "a NUL character" if bad.group() == "\x00" else "an unpaired surrogate (invalid Unicode)"
        raise InvalidDocument(f"markdown: line {line} contains {what}", field="markdown", line=line)
    lines = text.split("\n")
    front_matter, body_start, key_lines = _front_matter(lines, policy)
    title, items = _body(lines, body_start, policy)
    for item in items:
        stored = len(item.title.encode()) + len(item.details.encode())
        if stored > policy.max_bytes:
            message = (
                f"items: checkbox {item.ordinal} on line {item.line} takes {stored} bytes once stored "
                f"(tabs in the indentation of its details count as spaces), more than the "
                f"{policy.max_bytes} bytes one item may take"
            )
            raise TooLarge(message, field=f"items[{item.ordinal}]", line=item.line)
        _check_repo(item)
    document = TaskDocument(front_matter=front_matter, title=title, items=items, lines=key_lines)
    _check_order(document)
    return document


def parse_body(
    text: str, policy: DocumentPolicy = DocumentPolicy()
) -> tuple[str | None, tuple[ParsedItem, ...]]:
    """The title and the items of a document's body (what follows its front matter), read as
    `parse_document` reads them; line numbers count from the body's first line. For text
    Steward wrote itself (`steward.domain.plan_diff`), so only the item count is bounded."""
    return _body(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 0, policy)


def check_priced(document: TaskDocument, prices: PriceTable) -> None:
    """What the price table decides at publish (InvalidDocument, 422, naming the field): the
    model has an entry (else nothing can be minted for it), and the budget pays for one
    minimal call (`steward.domain.budget:min_call_cost`, the relay's floor)."""
    fm = document.front_matter
    entry = prices.models.get(fm.model)
    if entry is None:
        close = difflib.get_close_matches(fm.model, list(prices.models), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"priced: {_listed(sorted(prices.models))}"
        where = "" if "model" in document.lines else " (the deployment's default)"
        message = f"model {_shown(fm.model)}{where} is not in the price table ({hint})"
        raise _fm_error(message, document.line_of("model"), "model")
    floor = min_call_cost(entry)
    if fm.budget_usd < floor:
        message = (
            f"budget_usd {fm.budget_usd} cannot pay for one call of {fm.model}: one call with "
            f"{MIN_CALL_INPUT_BYTES} bytes of input and {MIN_OUTPUT_TOKENS} output tokens may cost "
            f"{_canonical(floor)} USD"
        )
        raise _fm_error(message, document.line_of("budget_usd"), "budget_usd")


def _listed(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# --- front matter -------------------------------------------------------------------------


def _fm_error(message: str, line: int, key: str | None = None) -> InvalidDocument:
    field = "front_matter" if key is None else f"front_matter.{key}"
    return InvalidDocument(f"front matter: {message}", field=field, line=line)


def _is_fence(line: str, *markers: str) -> bool:
    return line.rstrip(" \t") in markers


def _front_matter(lines: list[str], policy: DocumentPolicy) -> tuple[FrontMatter, int, dict[str, int]]:
    """Validate the YAML between the fences; returns it, the index of the first body line and
    the document line of each key."""
    if not _is_fence(lines[0], "---"):
        raise _fm_error("the document must start with a '---' line that opens the YAML front matter", 1)
    end = next((i for i in range(1, len(lines)) if _is_fence(lines[i], "---", "...")), None)
    if end is None:
        raise _fm_error("the '---' on line 1 is never closed by a '---' line", 1)
    source = "\n".join(lines[1:end])
    if len(source.encode()) > MAX_FRONT_MATTER_BYTES:
        raise _fm_error(f"longer than {MAX_FRONT_MATTER_BYTES} bytes", 1)
    data, key_lines, entry_lines = _load_yaml(source, lambda yaml_line: min(yaml_line + 2, end + 1))

    known = FrontMatter.model_fields
    unknown = next((key for key in data if key not in known), None)  # document order
    if unknown is not None:
        close = difflib.get_close_matches(unknown.lower(), list(known), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        raise _fm_error(f"unknown key {unknown!r} ({hint})", key_lines.get(unknown, 1), unknown)
    values = {key: value for key, value in data.items() if not (key in known and value is None)}
    if policy.default_model is not None:
        values.setdefault("model", policy.default_model)
    elif "model" not in values:
        raise _fm_error(
            "model is required: this deployment names no default model (name one of its price "
            "table, or `scripted` for a smoke test of the loop)",
            1,
            "model",
        )
    values.setdefault("budget_usd", policy.default_budget_usd)
    try:
        front_matter = FrontMatter.model_validate(values, context={"policy": policy})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = str(first["loc"][0]) if first["loc"] else None
        line = key_lines.get(key, 1) if key else 1
        error = (first.get("ctx") or {}).get("error")
        if key and isinstance(error, _CommandError):
            entries = entry_lines.get(key, ())
            line = entries[error.number - 1] if error.number <= len(entries) else line
        if first["type"] == "missing":  # unknown keys were refused above
            message = f"{key} is required"
        elif first["type"] == "value_error":
            message = str(first["ctx"]["error"])
        else:
            message = f"{key}: {first['msg']}"
        raise _fm_error(message, line, key) from None
    return front_matter, end + 1, key_lines


def _load_yaml(
    source: str, doc_line: Callable[[int], int]
) -> tuple[dict[str, Any], dict[str, int], dict[str, tuple[int, ...]]]:
    """safe_load, plus what it hides: duplicate keys and where each key is, and each entry of
    a list value (for error lines).

    `doc_line` turns a 0-based YAML line into a document line.
    """
    # PyYAML is loaded by the first front matter parsed, not with this module: the API's
    # services hold the parser, and most of their calls never parse a document.
    import yaml  # noqa: PLC0415

    node: yaml.Node | None = None
    try:
        loader = yaml.SafeLoader(source)
        node = loader.get_single_node()
        key_lines, entry_lines = _key_lines(node, doc_line)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "syntax error"
        raise _fm_error(f"invalid YAML: {problem}", doc_line(mark.line) if mark else 1) from None
    except yaml.reader.ReaderError as error:
        line = doc_line(source.count("\n", 0, error.position))
        raise _fm_error(f"invalid YAML: character U+{error.character:04X} is not allowed", line) from None
    except RecursionError:
        raise _fm_error("invalid YAML: nested too deeply", 1) from None
    except (yaml.YAMLError, ValueError) as error:  # e.g. a date 2024-13-45, a 5000-digit integer
        line, key = _failing_value(node, doc_line)
        reason = str(error).split(":")[0][:120]
        raise _fm_error(f"invalid YAML value ({reason})", line, key) from None
    if not isinstance(data, dict):
        line = doc_line(node.start_mark.line) if node is not None else 1
        raise _fm_error(f"must be a mapping of keys such as repo and checks, got {_shown(data)}", line)
    return data, key_lines, entry_lines


def _failing_value(node: yaml.Node | None, doc_line: Callable[[int], int]) -> tuple[int, str | None]:
    """The line and key of the top-level value (or list entry) that cannot be constructed,
    each constructed again on its own; else the front matter's first line."""
    import yaml  # noqa: PLC0415 - loaded by `_load_yaml` already

    def fails(value: yaml.Node) -> bool:
        try:
            yaml.SafeLoader("").construct_object(value, deep=True)
        except (yaml.YAMLError, ValueError, RecursionError):
            return True
        return False

    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if fails(value_node):
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                entries = value_node.value if isinstance(value_node, yaml.SequenceNode) else []
                where = next((entry for entry in entries if fails(entry)), value_node)
                return doc_line(where.start_mark.line), key
    return (doc_line(node.start_mark.line) if node is not None else 1), None


def _key_lines(
    node: yaml.Node | None, doc_line: Callable[[int], int]
) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """Document line of each top-level key, and of each entry of a list value; rejects
    duplicates and keys that are not plain names."""
    import yaml  # noqa: PLC0415 - loaded by `_load_yaml` already

    if not isinstance(node, yaml.MappingNode):
        return {}, {}
    lines: dict[str, int] = {}
    entries: dict[str, tuple[int, ...]] = {}
    for key_node, value_node in node.value:
        line = doc_line(key_node.start_mark.line)
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
            shown = _shown(key_node.value) if isinstance(key_node, yaml.ScalarNode) else "a collection"
            raise _fm_error(f"keys must be plain names, got {shown}", line)
        if key_node.value in lines:
            message = f"duplicate key {key_node.value!r} (first on line {lines[key_node.value]})"
            raise _fm_error(message, line, key_node.value)
        lines[key_node.value] = line
        if isinstance(value_node, yaml.SequenceNode):
            entries[key_node.value] = tuple(doc_line(entry.start_mark.line) for entry in value_node.value)
    return lines, entries


# --- body ---------------------------------------------------------------------------------

_CHECKBOX = re.compile(r"[-*+] \[(?P<mark>[ xX])\](?:[ \t](?P<text>.*))?")
_FENCE_OPEN = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(?P<fence>`{3,}|~{3,})[ \t]*")
_HEADING_1 = re.compile(r" {0,3}#(?P<text>[ \t].*)?")


def _blank(line: str) -> bool:
    return not line.strip(" \t")


def _opening_fence(line: str) -> str | None:
    match = _FENCE_OPEN.fullmatch(line)
    if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
        return None
    return match["fence"]


def _closes(line: str, fence: str) -> bool:
    match = _FENCE_CLOSE.fullmatch(line)
    return match is not None and match["fence"][0] == fence[0] and len(match["fence"]) >= len(fence)


def _heading_1(line: str) -> str | None:
    match = _HEADING_1.fullmatch(line)
    if match is None:
        return None
    text = (match["text"] or "").strip()
    return re.sub(r"(?:^|[ \t]+)#+$", "", text).strip() or None  # drop a closing '###'


def _dedent(lines: list[str]) -> str:
    """Details without their shared indentation.

    Tabs in the leading indentation expand to the next multiple of 4 columns (a tab is one
    level, like four spaces), then the common run of leading spaces is removed, as
    textwrap.dedent would. Tabs after the indentation are kept as written.
    """
    while lines and _blank(lines[0]):
        lines.pop(0)
    while lines and _blank(lines[-1]):
        lines.pop()
    expanded = []
    for line in lines:
        content = line.lstrip(" \t")
        indent = line[: len(line) - len(content)].expandtabs(4)
        expanded.append(indent + content.rstrip(" \t") if content.strip(" \t") else "")
    common = min((len(line) - len(line.lstrip(" ")) for line in expanded if line), default=0)
    return "\n".join(line[common:] for line in expanded)


def _body(lines: list[str], start: int, policy: DocumentPolicy) -> tuple[str | None, tuple[ParsedItem, ...]]:
    """Top-level checkboxes with their details, and the title; fenced code is opaque."""
    title: str | None = None
    items: list[ParsedItem] = []
    current: tuple[int, bool, str, tuple[int, ...]] | None = None  # line, checked, title, after
    details: list[str] = []
    fence: str | None = None

    def close_item() -> None:
        nonlocal current
        if current is not None:
            line, checked, item_title, after = current
            items.append(ParsedItem(len(items) + 1, line, checked, item_title, _dedent(details), after))
            details.clear()
            current = None

    for index in range(start, len(lines)):
        line, number = lines[index], index + 1
        if fence is not None:
            if _closes(line, fence):
                fence = None
            continue
        if current is not None and (_blank(line) or line[0] in " \t"):
            details.append(line)
            continue
        close_item()
        checkbox = _CHECKBOX.fullmatch(line)
        if checkbox and checkbox["text"] is not None:
            ordinal = len(items) + 1
            if ordinal > policy.max_items:
                message = f"items: a document may hold at most {policy.max_items} checkboxes"
                raise InvalidDocument(message, field="items", line=number)
            item_title, after = _after(checkbox["text"].strip(), ordinal, number)
            if not item_title:
                message = f"items: checkbox {ordinal} on line {number} has no text"
                raise InvalidDocument(message, field=f"items[{ordinal}].title", line=number)
            current = (number, checkbox["mark"] != " ", item_title, after)
            continue
        fence = _opening_fence(line)
        if fence is None and title is None:
            title = _heading_1(line)
    close_item()
    if not items:
        message = "items: the document has no top-level '- [ ]' checkbox"
        raise InvalidDocument(message, field="items", line=min(start + 1, len(lines)))
    return title, tuple(items)


# --- order and repositories ---------------------------------------------------------------

# `(after #`: order; `(after lunch)` stays a title's text.
_AFTER_SUFFIX = re.compile(r"[ \t]*\(after[ \t]+(?P<refs>#[^()]*)\)$", re.IGNORECASE)
_AFTER_REF = re.compile(r"[ \t]*#(?P<n>[0-9]{1,4})[ \t]*")
_ITEM_REPO = re.compile(r"repo:[ \t]*(?P<repo>\S*)[ \t]*")


def _after(text: str, ordinal: int, line: int) -> tuple[str, tuple[int, ...]]:
    """A checkbox line's title and the ordinals its trailing `(after #n, ...)` names."""
    match = _AFTER_SUFFIX.search(text)
    if match is None:
        return text, ()
    refs = match["refs"].split(",")
    parsed = [_AFTER_REF.fullmatch(ref) for ref in refs]
    if not all(parsed):
        message = (
            f"items: checkbox {ordinal} on line {line} ends with {match.group().strip()!r}: "
            "write the items it waits for as (after #1) or (after #1, #3)"
        )
        raise InvalidDocument(message, field=f"items[{ordinal}].after", line=line)
    return text[: match.start()].rstrip(" \t"), tuple(sorted({int(m["n"]) for m in parsed if m}))


def item_repo(details: str) -> str | None:
    """The `repo:` line's value at the top level of an item's details, else None."""
    for detail in details.split("\n"):
        match = _ITEM_REPO.fullmatch(detail)
        if match is not None:
            return match["repo"]
    return None


def _check_repo(item: ParsedItem) -> None:
    lines = [d for d in item.details.split("\n") if _ITEM_REPO.fullmatch(d)]
    field = f"items[{item.ordinal}].repo"
    if len(lines) > 1:
        message = (
            f"items: checkbox {item.ordinal} on line {item.line} names its repository {len(lines)} times"
        )
        raise InvalidDocument(message, field=field, line=item.line)
    if lines and not is_repo_name(item.repo):
        message = f"items: checkbox {item.ordinal} on line {item.line}: repo must be owner/name, got {_shown(item.repo)}"
        raise InvalidDocument(message, field=field, line=item.line)


def _check_order(document: TaskDocument) -> None:
    """References name existing items other than their own, and the order has no cycle."""
    count = len(document.items)
    for item in document.items:
        for ref in item.after:
            problem = (
                f"waits for itself (#{ref})"
                if ref == item.ordinal
                else f"waits for #{ref}, but the document has {count} checkboxes"
                if not 1 <= ref <= count
                else None
            )
            if problem:
                message = f"items: checkbox {item.ordinal} on line {item.line} {problem}"
                raise InvalidDocument(message, field=f"items[{item.ordinal}].after", line=item.line)
    graph = document.waits_for()
    state: dict[int, int] = {}  # 1: on the path being walked, 2: known to reach no cycle
    for start in graph:
        if start in state:
            continue
        path: list[int] = []
        stack = [(start, iter(graph[start]))]
        while stack:
            node, edges = stack[-1]
            if node not in state:
                state[node] = 1
                path.append(node)
            nxt = next(edges, None)
            if nxt is None:
                state[node] = 2
                path.pop()
                stack.pop()
            elif state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                item = document.items[cycle[0] - 1]
                shown = " -> ".join(f"#{n}" for n in cycle)
                message = (
                    f"items: checkbox {item.ordinal} on line {item.line} is in a cycle of order: {shown}"
                )
                raise InvalidDocument(message, field=f"items[{item.ordinal}].after", line=item.line)
            elif nxt not in state:
                stack.append((nxt, iter(graph[nxt])))
