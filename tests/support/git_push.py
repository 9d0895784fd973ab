"""What a runtime does on GitHub, done by a test: clone over smart HTTP, commit, push a branch."""

from __future__ import annotations

from pathlib import Path

from steward.adapters.git import remote_git, run_git
from steward.adapters.github import GitHubApp


def push_branch(app: GitHubApp, installation: int, repo: str, tmp_path: Path, branch: str) -> str:
    """Clone `repo`, commit one file, push it as `branch` (token only in git's environment);
    the commit."""
    token = app.installation_token(installation, repo).token
    url = app.git_url(repo)
    clone = tmp_path / f"clone-{branch.replace('/', '-')}"
    run_git(["clone", "--quiet", url, str(clone)], cwd=tmp_path, token=token, token_url=url)
    (clone / "change.txt").write_text(f"{branch}\n")
    run_git(["add", "-A"], cwd=clone)
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    identity |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    run_git(["commit", "--quiet", "-m", "change"], cwd=clone, env=identity)
    head = run_git(["rev-parse", "HEAD"], cwd=clone).stdout.strip()
    remote_git(
        ["push", "--quiet", url, f"{head}:refs/heads/{branch}"], borrow=clone, token=token, token_url=url
    )
    return head
