"""What `steward.adapters.git.untrusted_tree` makes of a clone after the sandbox ran in it
(docs/testing.md): every spelling of `.git` a filesystem could honour is found, the
directories holding one are left out of staging, and no path can select a filter, diff or
merge driver. Filesystem only: no git process runs here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from steward.adapters.git import NEUTRAL_ATTRIBUTES, UntrustedGitDir, is_dot_git, untrusted_tree

DOT_GITS = [
    ".git",
    ".GIT",
    ".Git",
    ".git.",
    ".git ",
    ".git. .",
    ".git::$INDEX_ALLOCATION",
    "git~1",
    "GIT~1",
    ".g\u200cit",
]
NOT_DOT_GITS = ["git", ".gitignore", ".gitattributes", ".github", "x.git", ".git~1", "..git", "git~2"]


@pytest.mark.parametrize("name", DOT_GITS)
def test_every_spelling_of_dot_git_is_found(name: str) -> None:
    assert is_dot_git(name)


@pytest.mark.parametrize("name", NOT_DOT_GITS)
def test_ordinary_names_are_not_dot_git(name: str) -> None:
    assert not is_dot_git(name)


def test_nested_git_entries_are_left_out_and_attributes_neutralized(tmp_path: Path) -> None:
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    for where in ("evil/.git/objects", "a/b/c/.GIT", "deep/inside/repo/.git/refs"):
        (tmp_path / where).mkdir(parents=True)
    (tmp_path / "gitfile").mkdir()
    (tmp_path / "gitfile" / ".git").write_text("gitdir: /elsewhere\n")
    (tmp_path / "link").mkdir()
    os.symlink("/", tmp_path / "link" / ".git")
    (tmp_path / "git~1").write_text("")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / ".gitignore").write_text("*.pyc\n")

    tree = untrusted_tree(tmp_path)
    assert tree.nested == ("a/b/c", "deep/inside/repo", "evil", "gitfile", "git~1", "link")
    assert tree.pathspec()[:2] == ["--", "."]
    assert ":(exclude,top,literal)deep/inside/repo" in tree.pathspec()
    assert (tmp_path / ".git" / "info" / "attributes").read_text() == NEUTRAL_ATTRIBUTES
    assert untrusted_tree(tmp_path / "src" / "..").nested == tree.nested


def test_a_planted_info_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "clone" / ".git").mkdir(parents=True)
    os.symlink(outside, tmp_path / "clone" / ".git" / "info")
    untrusted_tree(tmp_path / "clone")
    assert list(outside.iterdir()) == []
    assert (tmp_path / "clone" / ".git" / "info" / "attributes").read_text() == NEUTRAL_ATTRIBUTES


@pytest.mark.parametrize("kind", ["missing", "file", "link"])
def test_a_git_directory_that_is_not_one_is_refused(tmp_path: Path, kind: str) -> None:
    clone = tmp_path / "clone"
    clone.mkdir()
    (tmp_path / "real").mkdir()
    if kind == "file":
        (clone / ".git").write_text("gitdir: /elsewhere\n")
    elif kind == "link":
        os.symlink(tmp_path / "real", clone / ".git")
    with pytest.raises(UntrustedGitDir):
        untrusted_tree(clone)
