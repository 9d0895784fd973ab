"""Hardened `git` subprocesses: the only place Steward runs git (DESIGN sections 6, 10).

A clone is untrusted input: the model edited its files and the plan's checks ran in it. So
every call runs with a scrubbed environment (no user or system config, a throwaway HOME, no
prompts), hooks, fsmonitor, credential helpers, proxies and redirects switched off at
command-line precedence (which beats the clone's own `.git/config`), and only the http(s)
transports allowed.

The installation token reaches git only through the environment
(`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`) as an `http.extraHeader` Basic
header: never in a URL, a config file or argv. When the caller names the remote URL the
header is scoped to it (`http.<url>.extraHeader`), so a `url.*.insteadOf` planted in the
clone's config cannot send the token anywhere else. Everything git prints is redacted
(`steward.domain.redaction.redact`) before it is returned or put in an exception.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from steward.domain.errors import StewardError
from steward.domain.redaction import redact

GIT_TIMEOUT_SECONDS = 120.0
BASIC_USER = "x-access-token"

# Command-line scope beats the clone's `.git/config`, so these hold whatever the clone says.
HARDENING: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("credential.helper", ""),  # an empty value resets the helper list
    ("protocol.allow", "never"),
    ("protocol.http.allow", "always"),
    ("protocol.https.allow", "always"),
    ("http.version", "HTTP/1.1"),
    ("http.followRedirects", "false"),  # extra headers must not follow a redirect
    ("http.proxy", ""),
    ("http.sslVerify", "true"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("advice.detachedHead", "false"),
    ("init.defaultBranch", "main"),
)
# Only identity variables may be added by a caller; anything else could change git's config.
_ALLOWED_EXTRA_ENV = re.compile(r"^GIT_(AUTHOR|COMMITTER)_(NAME|EMAIL|DATE)$")


def basic_header(token: str) -> str:
    """The header value git sends: GitHub's documented Basic form for installation tokens."""
    raw = f"{BASIC_USER}:{token}".encode()
    return "Authorization: Basic " + base64.b64encode(raw).decode("ascii")


class GitError(StewardError):
    """A git command failed or timed out. The message and `stderr` are redacted."""

    status = 502
    code = "git_error"

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


@dataclass(frozen=True)
class GitResult:
    """A finished git command; `stdout` and `stderr` are already redacted."""

    returncode: int
    stdout: str
    stderr: str = field(repr=False)


def _config_env(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def git_environment(
    home: str,
    *,
    token: str | None = None,
    token_url: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The whole environment of one git process (nothing inherited but PATH)."""
    for name in extra or {}:
        if not _ALLOWED_EXTRA_ENV.match(name):
            raise ValueError(f"git_environment accepts only identity variables, not {name}")
    pairs = list(HARDENING)
    if token is not None:
        if not token or any(c in token for c in "\r\n\0"):
            raise ValueError("the token is empty or has control characters")
        key = f"http.{token_url}.extraHeader" if token_url else "http.extraHeader"
        pairs.append((key, basic_header(token)))
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": home,
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_PAGER": "cat",
        **dict(extra or {}),
        **_config_env(pairs),
    }


def run_git(
    args: Sequence[str],
    *,
    cwd: Path | str,
    token: str | None = None,
    token_url: str | None = None,
    timeout: float = GIT_TIMEOUT_SECONDS,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    secrets: Iterable[str] = (),
) -> GitResult:
    """Run `git *args` in `cwd` with the hardening above.

    `token` (an installation token) is sent as the Basic header, only to `token_url` when
    given. `env` may add author/committer identity variables. `secrets` are redacted from
    the output besides the token. Raises GitError (redacted) on a non-zero exit when
    `check`, and always on a timeout (the whole process group is killed).
    """
    hidden = [*secrets, *([token] if token else [])]
    if token and any(token in a for a in args):
        raise ValueError("a token must never be passed in argv")
    name = args[0] if args else "git"
    with tempfile.TemporaryDirectory(prefix="steward-git-home-") as home:
        environment = git_environment(home, token=token, token_url=token_url, extra=env)
        process = subprocess.Popen(  # noqa: S603 - fixed executable, no shell, argv as a list
            ["git", *args],  # noqa: S607 - git from the scrubbed PATH
            cwd=cwd,
            env=environment,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills helpers too
        )
        try:
            out, err = process.communicate(
                input=input_text.encode() if input_text is not None else None, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            raise GitError(f"git {name} timed out after {timeout:g} s") from None
    stdout = redact(out.decode("utf-8", errors="replace"), hidden)
    stderr = redact(err.decode("utf-8", errors="replace"), hidden)
    if check and process.returncode != 0:
        tail = stderr.strip()[-800:]
        raise GitError(
            f"git {name} failed (exit {process.returncode})" + (f": {tail}" if tail else ""),
            returncode=process.returncode,
            stderr=stderr,
        )
    return GitResult(process.returncode, stdout, stderr)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
        os.killpg(process.pid, signal.SIGKILL)
