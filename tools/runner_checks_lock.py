"""Write containers/runner/checks.lock: what the runner image installs for plans' checks
(pytest and what it needs), pinned with hashes exactly as requirements-dev.lock pins them.

    .venv/bin/python tools/runner_checks_lock.py          (write the file)
    .venv/bin/python tools/runner_checks_lock.py --check  (exit 1 when it is stale)

The image installs it with `pip --require-hashes --no-deps`, like requirements.lock, so
nothing unpinned or altered gets into the runner. The closure of pytest's requirements is
read from the installed distributions' metadata (so this runs in .venv, which holds the dev
lock), with markers evaluated for the image's interpreter (CPython 3.12 on Linux); what
requirements.lock already installs in the image is left out. Run it after `make lock`: a
test fails while the file disagrees with the locks.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "containers" / "runner" / "checks.lock"
ROOTS = ("pytest",)  # what checks such as `python -m pytest -q` need in the image
# The image's interpreter (containers/runner/Dockerfile: python:3.12-slim-bookworm).
IMAGE_ENVIRONMENT = default_environment() | {
    "python_version": "3.12",
    "python_full_version": "3.12.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", re.MULTILINE)


def lock_entries(text: str) -> dict[str, str]:
    """Each pinned package of a uv lock file -> its whole entry (pin, hashes, `via` lines)."""
    starts = list(_ENTRY.finditer(text))
    entries = {}
    for index, match in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        block = text[match.start() : end].rstrip("\n").splitlines()
        kept = [line for line in block if not line.lstrip().startswith("#")]  # no `via` comments
        entries[canonicalize_name(match.group(1))] = "\n".join(kept) + "\n"
    return entries


def closure(roots: tuple[str, ...]) -> list[str]:
    """The canonical names of `roots` and everything they require in the image."""
    seen: list[str] = []
    pending = list(roots)
    while pending:
        name = canonicalize_name(pending.pop())
        if name in seen:
            continue
        seen.append(name)
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate(IMAGE_ENVIRONMENT):
                pending.append(requirement.name)
    return sorted(seen)


def render() -> str:
    dev = lock_entries((ROOT / "requirements-dev.lock").read_text())
    runtime = lock_entries((ROOT / "requirements.lock").read_text())
    missing = [name for name in closure(ROOTS) if name not in dev]
    if missing:
        raise SystemExit(f"requirements-dev.lock does not pin {', '.join(missing)}: run `make lock`")
    body = "".join(dev[name] for name in closure(ROOTS) if name not in runtime)
    return (
        "# What the runner image installs for plans' checks, pinned with hashes as\n"
        "# requirements-dev.lock pins them. Written by tools/runner_checks_lock.py: run it\n"
        "# after `make lock`, never edit by hand.\n" + body
    )


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.is_file() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run tools/runner_checks_lock.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
