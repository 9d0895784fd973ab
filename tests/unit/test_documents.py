"""Task Document parsing (docs/concepts/lifecycle.md, docs/concepts/identity.md): what becomes an item, and every rejection."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from steward.config import Settings
from steward.domain.documents import (
    MAX_DOCUMENT_BYTES,
    MAX_ITEMS,
    DocumentPolicy,
    ParsedItem,
    TaskDocument,
    parse_document,
)
from steward.domain.errors import InvalidDocument, TooLarge

FRONT = "---\nrepo: octo/widgets\nchecks:\n  - pytest -q\n---\n"  # body starts on line 6


def doc(body: str, front: str = FRONT) -> str:
    return front + body


def front(*lines: str) -> str:
    """Front matter from YAML lines; the first YAML line is document line 2."""
    return "---\n" + "".join(line + "\n" for line in lines) + "---\n"


def reject(markdown: str, field: str, line: int, policy: DocumentPolicy | None = None) -> InvalidDocument:
    with pytest.raises(InvalidDocument) as info:
        parse_document(markdown, policy or DocumentPolicy())
    assert (info.value.field, info.value.line) == (field, line), info.value.message
    assert info.value.status == 422
    return info.value


def fm_reject(*yaml_lines: str, field: str, line: int) -> InvalidDocument:
    return reject(doc("- [ ] one\n", front(*yaml_lines)), field, line)


def titles(document: TaskDocument) -> list[str]:
    return [item.title for item in document.items]


# --- valid documents ----------------------------------------------------------------------

DESIGN_EXAMPLE = """---
repo: owner/name
base: main
model: anthropic.claude-sonnet
budget_usd: 2.00
checks:
  - pytest -q
  - ruff check .
---
# Free title

- [ ] First unit of work, one pull request.
  Indented lines and nested bullets are details of the item above.
- [ ] Second unit of work.
"""


def test_design_example() -> None:
    document = parse_document(DESIGN_EXAMPLE)
    fm = document.front_matter
    assert (fm.repo, fm.base, fm.model) == ("owner/name", "main", "anthropic.claude-sonnet")
    assert fm.budget_usd == Decimal("2.00")
    assert fm.checks == ("pytest -q", "ruff check .")
    assert (fm.setup, fm.max_attempts) == ((), 3)
    assert document.title == "Free title"
    assert document.items == (
        ParsedItem(
            1,
            12,
            False,
            "First unit of work, one pull request.",
            "Indented lines and nested bullets are details of the item above.",
        ),
        ParsedItem(2, 14, False, "Second unit of work.", ""),
    )


def test_defaults_come_from_the_policy() -> None:
    fm = parse_document(doc("- [ ] one\n")).front_matter
    assert (fm.model, fm.budget_usd, fm.base, fm.setup, fm.max_attempts) == ("scripted", 2, None, (), 3)
    assert fm.follow_ups == 2  # rounds on each pull request, unless the plan says otherwise
    policy = DocumentPolicy(default_model="m-1", default_budget_usd=Decimal("0.50"))
    fm = parse_document(doc("- [ ] one\n"), policy).front_matter
    assert (fm.model, fm.budget_usd) == ("m-1", Decimal("0.5"))


def test_a_deployment_without_a_default_model_refuses_a_plan_that_names_none() -> None:
    """In AWS without a `defaultModel` context (`STEWARD_DEFAULT_MODEL=none`), a plan names its
    model: the local stack's scripted model is never chosen for it."""
    none = DocumentPolicy(default_model=None)
    error = reject(doc("- [ ] one\n"), "front_matter.model", 1, none)
    assert "names no default model" in error.message
    named = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "model: scripted"))
    assert parse_document(named, none).front_matter.model == "scripted"  # a smoke test, named
    assert Settings.from_env({"STEWARD_DEFAULT_MODEL": "none"}).document_policy.default_model is None
    assert Settings.from_env({}).document_policy.default_model == "scripted"  # the local stack's


def test_null_optional_keys_take_their_defaults() -> None:
    markdown = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "model:", "budget_usd: ~", "setup:"))
    fm = parse_document(markdown).front_matter
    assert (fm.model, fm.budget_usd, fm.setup) == ("scripted", Decimal(2), ())


def test_all_keys_and_dots_closing_fence() -> None:
    markdown = (
        "---\nrepo: Org-1/my.repo_x\nbase: release/1.2\nmodel: 'arn:aws:bedrock:us-east-1::m/x'\n"
        "budget_usd: 10\nchecks: [make test]\nsetup: [pip install -e ., npm ci]\nmax_attempts: 10\n"
        "follow_ups: 0\n...\n- [ ] one\n"
    )
    document = parse_document(markdown)
    fm = document.front_matter
    assert fm.setup == ("pip install -e .", "npm ci")
    assert (fm.base, fm.budget_usd, fm.max_attempts, fm.follow_ups) == ("release/1.2", Decimal(10), 10, 0)
    assert document.items[0].line == 11


def test_crlf_and_lone_cr_give_the_same_document_and_lines() -> None:
    lf = doc("# T\n\n- [ ] one\n  detail\n\n- [x] two\n")
    expected = parse_document(lf)
    for newline in ("\r\n", "\r"):
        converted = parse_document(lf.replace("\n", newline))
        assert converted == expected
        assert [item.line for item in converted.items] == [8, 11]


def test_bom_is_stripped() -> None:
    assert parse_document("\ufeff" + doc("- [ ] one\n")).items[0].title == "one"


def test_details_are_dedented_and_trimmed() -> None:
    body = "- [ ] one   \n\n    first  \n\n      indented more\n    last\n\n\n- [ ] two\n"
    one, two = parse_document(doc(body)).items
    assert one.details == "first\n\n  indented more\nlast"
    assert (two.ordinal, two.line, two.details) == (2, 14, "")
    assert one.title == "one"


def test_tabs_in_indentation_are_one_level_of_four_columns() -> None:
    body = "- [ ] one\n\tcode\there\n    same level\n\t  deeper\n"
    assert parse_document(doc(body)).items[0].details == "code\there\nsame level\n  deeper"


def test_nested_checkboxes_are_details() -> None:
    body = "- [ ] parent\n  - [ ] child\n  - [x] done child\n\t- [ ] tab child\n- [ ] next\n"
    document = parse_document(doc(body))
    assert titles(document) == ["parent", "next"]
    assert document.items[0].details == "- [ ] child\n- [x] done child\n  - [ ] tab child"


def test_indented_checkbox_before_any_item_is_ignored() -> None:
    document = parse_document(doc("  - [ ] not top level\n\t- [ ] nor this\n- [ ] real\n"))
    assert [(item.ordinal, item.line, item.title) for item in document.items] == [(1, 8, "real")]


@pytest.mark.parametrize("fence", ["```", "~~~", "````", "~~~~~"])
def test_checkboxes_and_headings_in_fenced_code_are_opaque(fence: str) -> None:
    body = f"- [ ] one\n{fence} markdown\n# Not the title\n- [ ] not an item\n{fence}\n# Title\n- [ ] two\n"
    document = parse_document(doc(body))
    assert titles(document) == ["one", "two"]
    assert document.items[1].ordinal == 2
    assert document.title == "Title"


def test_fence_closes_only_with_same_char_and_enough_length() -> None:
    body = (
        "````\n```\n~~~~\n- [ ] hidden\n````\n- [ ] shown\nText.\n   ~~~\n- [ ] hidden\n   ~~~\n- [ ] last\n"
    )
    assert titles(parse_document(doc(body))) == ["shown", "last"]


def test_backtick_info_string_with_backtick_is_not_a_fence() -> None:
    assert titles(parse_document(doc("``` a`b\n- [ ] one\n"))) == ["one"]


def test_unclosed_fence_hides_the_rest() -> None:
    document = parse_document(doc("- [ ] one\n```\n- [ ] hidden\n"))
    assert titles(document) == ["one"]


def test_fence_inside_details_is_part_of_the_item() -> None:
    body = "- [ ] one\n  ```python\n  - [ ] not an item\n\n  # nor a title\n  ```\n- [ ] two\n"
    document = parse_document(doc(body))
    assert titles(document) == ["one", "two"]
    assert document.items[0].details == "```python\n- [ ] not an item\n\n# nor a title\n```"
    assert document.title is None


def test_unicode_is_kept_as_is() -> None:
    body = "# 計画 🚀\n- [ ] 日本語のタイトル 🎉\n  שלום עולם\n  cafe\u0301 and café\n- [ ] مرحبا بالعالم\n"
    document = parse_document(doc(body))
    assert document.title == "計画 🚀"
    assert titles(document) == ["日本語のタイトル 🎉", "مرحبا بالعالم"]
    assert document.items[0].details == "שלום עולם\ncafe\u0301 and café"


def test_checked_items_and_other_bullets() -> None:
    body = "- [x] done\n* [X] also done\n+ [ ] open\n* [ ] star\n"
    document = parse_document(doc(body))
    assert [(item.checked, item.title) for item in document.items] == [
        (True, "done"),
        (True, "also done"),
        (False, "open"),
        (False, "star"),
    ]


def test_headings_between_items_end_details_and_first_h1_is_title() -> None:
    body = "- [ ] one\n  detail\n## Section\n  not a detail\n# Late title\n- [ ] two\n# Second h1\n"
    document = parse_document(doc(body))
    assert document.title == "Late title"
    assert [(item.title, item.details) for item in document.items] == [("one", "detail"), ("two", "")]


def test_title_forms() -> None:
    assert parse_document(doc("- [ ] a\n")).title is None
    assert parse_document(doc("## Only h2\n#NoSpace\n- [ ] a\n")).title is None
    assert parse_document(doc("#\n   # Closed #  ##\n- [ ] a\n")).title == "Closed #"
    assert parse_document(doc("# C#\n- [ ] a\n")).title == "C#"


def test_paragraph_at_column_zero_ends_the_item() -> None:
    body = "- [ ] one\n  detail\nA paragraph.\n  indented after paragraph\n- [ ] two\n"
    assert [item.details for item in parse_document(doc(body)).items] == ["detail", ""]


@pytest.mark.parametrize("line", ["- [ ]", "-[ ] x", "- [y] x", "- [ ]x", "1. [ ] x", "-  [ ] x", "[ ] x"])
def test_lines_that_are_not_checkboxes(line: str) -> None:
    document = parse_document(doc(f"- [ ] one\n  detail\n{line}\n- [ ] two\n"))
    assert titles(document) == ["one", "two"]
    assert document.items[0].details == "detail"


def test_checkbox_text_is_stripped_and_a_tab_separator_is_accepted() -> None:
    assert titles(parse_document(doc("- [ ]   padded  \n- [x]\ttabbed\n"))) == ["padded", "tabbed"]


# --- hashes -------------------------------------------------------------------------------

BASE = doc("# T\n- [ ] one\n  detail\n- [x] two\n- [ ] three\n")


def hash_of(markdown: str) -> str:
    return parse_document(markdown).content_hash


def test_content_hash_is_stable() -> None:
    assert hash_of(BASE) == hash_of(BASE)
    assert len(hash_of(BASE)) == 64
    assert hash_of(BASE) == hash_of(BASE.replace("\n", "\r\n"))
    assert hash_of(BASE) == hash_of(BASE.replace("# T", "# Other title"))
    assert hash_of(BASE) == hash_of(BASE.replace("\n- [x]", "\n\n\n- [x]"))
    assert hash_of(BASE) == hash_of(BASE.replace("detail", "detail   "))


def test_content_hash_recipe() -> None:
    """Stored confirmations compare against this hash: its recipe must not drift."""
    front_matter = {
        "repo": "octo/widgets",
        "base": None,
        "model": "scripted",
        "budget_usd": "2",
        "checks": ["pytest -q"],
        "setup": [],
        "max_attempts": 3,
    }
    canonical = {"front_matter": front_matter, "items": [[False, "one", "d é"], [True, "two", ""]]}
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = hashlib.sha256(text.encode()).hexdigest()
    assert hash_of(doc("- [ ] one\n  d é\n- [x] two\n")) == expected
    # `follow_ups` came later: at its default it is left out, so plans approved before it
    # existed still match their approvals, and saying the default changes nothing.
    assert (
        hash_of(doc("- [ ] one\n  d é\n- [x] two\n", FRONT.replace("checks:", "follow_ups: 2\nchecks:")))
        == expected
    )


@pytest.mark.parametrize("rounds", ["-1", "11", "true", "'2'", "1.5", "[]"])
def test_bad_follow_ups(rounds: str) -> None:
    fm_reject("repo: a/b", "checks: [x]", f"follow_ups: {rounds}", field="front_matter.follow_ups", line=4)


def test_baseline_defaults_to_true_and_is_covered_by_the_hash_only_when_false() -> None:
    plain = doc("- [ ] one\n", front("repo: a/b", "checks: [x]"))
    assert parse_document(plain).front_matter.baseline is True
    said = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "baseline: true"))
    off = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "baseline: false"))
    nulled = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "baseline: ~"))
    assert parse_document(off).front_matter.baseline is False
    assert parse_document(nulled).front_matter.baseline is True
    # A plan approved before the key existed keeps its hash; turning the baseline off is new.
    assert hash_of(said) == hash_of(plain) == hash_of(nulled)
    assert hash_of(off) != hash_of(plain)


@pytest.mark.parametrize("value", ["'true'", "yes please", "1", "0", "[]", "{a: 1}"])
def test_bad_baseline(value: str) -> None:
    error = fm_reject("repo: a/b", "checks: [x]", f"baseline: {value}", field="front_matter.baseline", line=4)
    assert "baseline must be true or false" in error.message


def test_an_unknown_key_near_baseline_names_it() -> None:
    error = fm_reject("repo: a/b", "checks: [x]", "baselin: false", field="front_matter.baselin", line=4)
    assert "did you mean 'baseline'?" in error.message


@pytest.mark.parametrize(
    "changed",
    [
        BASE.replace("- [ ] one", "- [ ] one!"),
        BASE.replace("  detail", "  details"),
        BASE.replace("- [x] two", "- [ ] two"),
        BASE.replace("- [x] two\n- [ ] three", "- [ ] three\n- [x] two"),
        BASE.replace("pytest -q", "pytest"),
        BASE.replace("repo: octo/widgets", "repo: octo/widgets\nmax_attempts: 2"),
        BASE.replace("repo: octo/widgets", "repo: octo/widgets\nfollow_ups: 0"),
        BASE.replace("repo: octo/widgets", "repo: octo/widgets\nfollow_ups: 3"),
        BASE.replace("- [ ] three\n", ""),
        BASE.replace("  detail", "  detail\n\n  more"),
    ],
)
def test_content_hash_changes_with_approved_content(changed: str) -> None:
    assert hash_of(changed) != hash_of(BASE)


def test_equal_budgets_hash_alike() -> None:
    hashes = {
        hash_of(doc("- [ ] one\n", front("repo: a/b", "checks: [x]", f"budget_usd: {value}")))
        for value in ("2.50", "2.5", "'2.50'", '"2.5"', "2.500")
    }
    assert len(hashes) == 1
    omitted = hash_of(doc("- [ ] one\n", front("repo: a/b", "checks: [x]")))
    assert omitted == hash_of(doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "budget_usd: 2.00")))


def test_text_hash_excludes_checked() -> None:
    open_item, done_item = parse_document(doc("- [ ] same\n  d\n- [x] same\n  d\n")).items
    assert open_item.text_hash == done_item.text_hash
    assert open_item.text_hash == hashlib.sha256(b"same\nd").hexdigest()
    assert ParsedItem(1, 1, False, "same!", "d").text_hash != open_item.text_hash
    assert ParsedItem(1, 1, False, "same", "d!").text_hash != open_item.text_hash


# --- front matter errors ------------------------------------------------------------------


def test_missing_front_matter() -> None:
    reject("# Title\n- [ ] one\n", "front_matter", 1)
    reject("\n---\nrepo: a/b\n---\n- [ ] one\n", "front_matter", 1)
    reject("", "front_matter", 1)


def test_unterminated_front_matter() -> None:
    reject("---\nrepo: a/b\nchecks: [x]\n- [ ] one\n", "front_matter", 1)


def test_yaml_syntax_error_names_the_document_line() -> None:
    error = fm_reject("repo: a/b", "checks: [x]", "  bad: indent", field="front_matter", line=4)
    assert "invalid YAML" in error.message
    fm_reject("repo: a/b", "checks: [x", "base: main", field="front_matter", line=4)
    crlf = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "  bad: indent")).replace("\n", "\r\n")
    reject(crlf, "front_matter", 4)


@pytest.mark.parametrize(
    ("yaml_lines", "line"),
    [(("- a", "- b"), 2), (("just a string",), 2), (("",), 1), ((), 1), (("42",), 2)],
)
def test_front_matter_must_be_a_mapping(yaml_lines: tuple[str, ...], line: int) -> None:
    error = fm_reject(*yaml_lines, field="front_matter", line=line)
    assert "mapping" in error.message


def test_unknown_key() -> None:
    error = fm_reject("repo: a/b", "checks: [x]", "colour: red", field="front_matter.colour", line=4)
    assert "unknown key 'colour'" in error.message
    fm_reject("repo: a/b", "checks: [x]", "colour: ~", field="front_matter.colour", line=4)


def test_missing_required_keys() -> None:
    error = fm_reject("checks: [x]", field="front_matter.repo", line=1)
    assert error.message == "front matter: repo is required"
    fm_reject("repo: a/b", field="front_matter.checks", line=1)
    fm_reject("repo: ~", "checks: [x]", field="front_matter.repo", line=2)


@pytest.mark.parametrize(
    "repo",
    [
        "foo",
        "a/b/c",
        "-a/b",
        "a/.",
        "a/..",
        "a b/c",
        "''",
        "123",
        "a/",
        "/b",
        "a/b c",
        "a" * 40 + "/b",
        "[a/b]",
    ],
)
def test_bad_repo(repo: str) -> None:
    error = fm_reject("checks: [x]", f"repo: {repo}", field="front_matter.repo", line=3)
    assert error.message.startswith("front matter: repo must be owner/name, got ")


def test_repo_message_is_readable() -> None:
    error = fm_reject("repo: foo", "checks: [x]", field="front_matter.repo", line=2)
    assert error.message == "front matter: repo must be owner/name, got 'foo'"


@pytest.mark.parametrize(
    "budget", ["0", "-1", "0.00", "10.01", "true", "abc", "'NaN'", ".inf", "[1]", "'$2'"]
)
def test_bad_budget(budget: str) -> None:
    fm_reject("repo: a/b", "checks: [x]", f"budget_usd: {budget}", field="front_matter.budget_usd", line=4)


@pytest.mark.parametrize(
    ("budget", "expected"),
    [("'2.50'", Decimal("2.50")), ("2.5", Decimal("2.5")), ("2", Decimal(2)), ("10", Decimal(10)),
     ("0.1", Decimal("0.1")), ("'1e-2'", Decimal("0.01"))],
)  # fmt: skip
def test_budget_forms(budget: str, expected: Decimal) -> None:
    markdown = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", f"budget_usd: {budget}"))
    assert parse_document(markdown).front_matter.budget_usd == expected


def test_budget_is_canonical() -> None:
    amounts = [
        parse_document(
            doc("- [ ] one\n", front("repo: a/b", "checks: [x]", f"budget_usd: {value}"))
        ).front_matter.budget_usd
        for value in ("'2.50'", "2.0", "'10.00'")
    ]
    assert [str(amount) for amount in amounts] == ["2.5", "2", "10"]


def test_budget_limit_comes_from_the_policy() -> None:
    markdown = doc("- [ ] one\n", front("repo: a/b", "checks: [x]", "budget_usd: 20"))
    reject(markdown, "front_matter.budget_usd", 4)
    policy = DocumentPolicy(max_budget_usd=Decimal(50))
    assert parse_document(markdown, policy).front_matter.budget_usd == 20


@pytest.mark.parametrize(
    "checks",
    [
        "checks: []",
        "checks: pytest",
        "checks: {a: b}",
        'checks: ["pytest\\nrm -rf /"]',
        "checks: ['']",
        "checks: ['   ']",
        "checks: [1]",
        'checks: ["a\\tb"]',
        'checks: ["a\\u2028b"]',
        f"checks: [{'x' * 1001}]",
        f"checks: [{', '.join(['x'] * 21)}]",
    ],
)
def test_bad_checks(checks: str) -> None:
    fm_reject("repo: a/b", checks, field="front_matter.checks", line=3)


def test_check_with_newline_message() -> None:
    error = fm_reject("repo: a/b", "checks:", "  - ok", '  - "a\\nb"', field="front_matter.checks", line=3)
    assert error.message == "front matter: checks command 2 must be a single line"


def test_limits_on_checks_and_setup_are_inclusive() -> None:
    many = ", ".join(["x"] * 20)
    markdown = doc("- [ ] one\n", front("repo: a/b", f"checks: [{many}]", f"setup: [{'y' * 1000}]"))
    fm = parse_document(markdown).front_matter
    assert (len(fm.checks), len(fm.setup[0])) == (20, 1000)


@pytest.mark.parametrize("setup", ["setup: make", 'setup: ["a\\nb"]', f"setup: [{', '.join(['x'] * 21)}]"])
def test_bad_setup(setup: str) -> None:
    fm_reject("repo: a/b", "checks: [x]", setup, field="front_matter.setup", line=4)


@pytest.mark.parametrize("attempts", ["0", "11", "true", "'3'", "2.5", "-1"])
def test_bad_max_attempts(attempts: str) -> None:
    fm_reject(
        "repo: a/b", "checks: [x]", f"max_attempts: {attempts}", field="front_matter.max_attempts", line=4
    )


@pytest.mark.parametrize(
    "base", ["a b", "a..b", "-x", "x.lock", "x/", "a//b", ".hidden", "a~1", "a:b", "'@'", "''"]
)
def test_bad_base(base: str) -> None:
    fm_reject("repo: a/b", "checks: [x]", f"base: {base}", field="front_matter.base", line=4)


@pytest.mark.parametrize("model", ["'a b'", "''", "1", "[m]"])
def test_bad_model(model: str) -> None:
    fm_reject("repo: a/b", "checks: [x]", f"model: {model}", field="front_matter.model", line=4)


def test_duplicate_key_points_at_the_second_one() -> None:
    error = fm_reject("repo: a/b", "checks: [x]", "repo: c/d", field="front_matter.repo", line=4)
    assert "duplicate key 'repo'" in error.message


def test_keys_must_be_plain_names() -> None:
    fm_reject("repo: a/b", "checks: [x]", "1: one", field="front_matter", line=4)
    fm_reject("x: &x {repo: a/b}", "<<: *x", "checks: [x]", field="front_matter", line=3)


def test_yaml_object_tags_are_refused() -> None:
    fm_reject("repo: a/b", "checks: [x]", "model: !!python/object:os.system x", field="front_matter", line=4)


def test_oversized_or_deep_front_matter() -> None:
    fm_reject("repo: a/b", "checks: [x]", "# " + "x" * 16 * 1024, field="front_matter", line=1)
    fm_reject("repo: a/b", "checks: " + "[" * 2000 + "]" * 2000, field="front_matter", line=1)


def test_bad_yaml_values_are_invalid_documents() -> None:
    fm_reject("repo: a/b", "checks: [x]", "base: 2024-13-45", field="front_matter.base", line=4)
    fm_reject(
        "repo: a/b", "checks: [x]", "budget_usd: " + "1" * 5000, field="front_matter.budget_usd", line=4
    )
    fm_reject("repo: a/b", "checks:", "  - x", "  - 2024-13-45", field="front_matter.checks", line=5)


# --- body and whole-document errors -------------------------------------------------------


def test_nul_and_lone_surrogate() -> None:
    reject(doc("- [ ] one\n  de\x00tail\n"), "markdown", 7)
    reject(doc("- [ ] one\n- [ ] \ud800\n"), "markdown", 7)
    reject("---\r\nrepo: a/b\x00\r\n", "markdown", 2)


def test_empty_checkbox_text() -> None:
    error = reject(doc("- [ ] one\n- [x]   \n"), "items[2].title", 7)
    assert "no text" in error.message
    reject(doc("- [ ] \t\n"), "items[1].title", 6)


def test_no_items() -> None:
    reject(doc("# Title\n\nJust prose.\n  - [ ] indented only\n"), "items", 6)
    reject(doc("```\n- [ ] fenced only\n```\n"), "items", 6)
    reject(FRONT, "items", 6)
    reject(FRONT.rstrip("\n"), "items", 5)


def test_item_limit() -> None:
    hundred = "".join(f"- [ ] item {n}\n" for n in range(1, MAX_ITEMS + 1))
    document = parse_document(doc(hundred))
    assert [item.ordinal for item in document.items] == list(range(1, 101))
    assert document.items[-1].title == "item 100"
    error = reject(doc(hundred + "  details\n- [x] item 101\n"), "items", 6 + 101)
    assert "100" in error.message
    reject(doc("- [ ] a\n- [ ] b\n- [ ] c\n"), "items", 8, DocumentPolicy(max_items=2))


def test_size_limit_counts_utf8_bytes() -> None:
    base = doc("- [ ] one\n")
    exact = base + "a" * (MAX_DOCUMENT_BYTES - len(base.encode()))
    assert len(exact.encode()) == MAX_DOCUMENT_BYTES
    assert titles(parse_document(exact)) == ["one"]
    with pytest.raises(TooLarge) as info:
        parse_document(exact + "a")
    assert (info.value.field, info.value.status) == ("markdown", 413)
    multibyte = base + "é" * ((MAX_DOCUMENT_BYTES - len(base.encode())) // 2 + 1)
    assert len(multibyte) < MAX_DOCUMENT_BYTES
    with pytest.raises(TooLarge):
        parse_document(multibyte)


def test_too_large_comes_before_any_other_check() -> None:
    with pytest.raises(TooLarge):
        parse_document("no front matter\x00" * 20000)


# --- property -----------------------------------------------------------------------------

TITLE = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=40).filter(
    lambda text: bool(text.strip())
)


@settings(max_examples=200, deadline=None)
@given(st.lists(TITLE, min_size=1, max_size=30), st.sampled_from(["- [ ] ", "* [x] ", "+ [X] "]))
def test_generated_documents_parse_back(item_titles: list[str], bullet: str) -> None:
    markdown = doc("# Plan\n\n" + "".join(f"{bullet}{title}\n" for title in item_titles))
    document = parse_document(markdown)
    assert titles(document) == [title.strip() for title in item_titles]
    assert [item.ordinal for item in document.items] == list(range(1, len(item_titles) + 1))
    assert [item.line for item in document.items] == list(range(8, 8 + len(item_titles)))
