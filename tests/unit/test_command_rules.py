"""The publish-time rules for `checks` and `setup` (`steward.domain.documents`) against the
runner that executes them (`steward.runner.sandbox:parse_allowlist`: argv, no shell)."""

from __future__ import annotations

import pytest
from steward.domain.documents import command_argv, shell_syntax
from steward.runner.sandbox import parse_allowlist

# command -> the shell operator found outside quotes (None: none, the command is argv only)
SHELL: list[tuple[str, str | None]] = [
    ("pytest -q && ruff check .", "&&"),
    ("pytest || true", "||"),
    ("pytest; ruff", ";"),
    ("pytest | tee log", "|"),
    ("pytest `cat args`", "`"),
    ("pytest $(cat args)", "$("),
    ("pytest > out", ">"),
    ("pytest >> out", ">>"),
    ("python < in.py", "<"),
    ("cat <<EOF", "<<"),
    ("pytest 2>&1", ">"),
    ("pytest &", "&"),
    ("pip install foo>=1", ">"),  # a shell would redirect: quote it ('foo>=1')
    ('echo "a" && b', "&&"),  # after a closed quote
    ("echo 'it''s' | x", "|"),
    ("pytest -q", None),
    ("sh -c 'pytest && ruff'", None),
    ('sh -c "pytest; ruff"', None),
    ('sh -c "echo \\" ; still quoted"', None),  # an escaped quote does not close
    ("pip install 'foo>=1'", None),
    ("echo a\\;b \\| c", None),  # escaped outside quotes: plain characters
    ("pytest -k 'a or b' $HOME", None),  # only `$(` is command substitution here
]


@pytest.mark.parametrize(("command", "operator"), SHELL)
def test_shell_syntax_is_found_only_outside_quotes(command: str, operator: str | None) -> None:
    assert shell_syntax(command) == operator


@pytest.mark.parametrize("command", [c for c, operator in SHELL if operator is None])
def test_a_command_publish_accepts_is_the_argv_the_runner_runs(command: str) -> None:
    assert parse_allowlist([command]) == {command.strip(): command_argv(command)}


@pytest.mark.parametrize("command", ['pytest "-q', "pytest 'x", "pytest \\", "sh -c 'it''s"])
def test_a_command_that_does_not_split_is_refused_by_both(command: str) -> None:
    with pytest.raises(ValueError, match="does not split into arguments"):
        command_argv(command)
    with pytest.raises(ValueError, match="does not split into arguments"):
        parse_allowlist([command])
