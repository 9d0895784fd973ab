"""Check that the lock files still satisfy pyproject.toml (`make install` and `make lint` run it).

requirements.lock must pin every runtime dependency; requirements-dev.lock every runtime and
dev dependency and the build requirements, at the same versions as requirements.lock. A
dependency with extras also needs what those extras pull in (read from the installed
distribution's metadata, so this runs in .venv). Pins outside pyproject's ranges, or missing,
mean pyproject.toml was edited without `make lock`.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def read_lock(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if m := PIN.match(line):
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def extra_requirements(req: Requirement) -> list[Requirement]:
    """What `req`'s extras add, from the installed distribution (empty when not installed)."""
    try:
        declared = importlib.metadata.requires(req.name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    added = []
    for line in declared:
        dep = Requirement(line)
        marker = dep.marker
        if marker is None or marker.evaluate({"extra": ""}):
            continue  # not behind an extra
        if any(marker.evaluate({"extra": extra}) for extra in req.extras):
            added.append(dep)
    return added


def problems(lock_name: str, pins: dict[str, str], wanted: list[str]) -> list[str]:
    found = []
    for spec in wanted:
        req = Requirement(spec)
        for dep in [req, *extra_requirements(req)]:
            name = canonicalize_name(dep.name)
            source = spec if dep is req else f"{dep} (via {spec})"
            if name not in pins:
                found.append(f"{lock_name} does not pin {dep.name}, which pyproject.toml asks for: {source}")
            elif not dep.specifier.contains(pins[name], prereleases=True):
                found.append(f"{lock_name} pins {dep.name}=={pins[name]}, outside pyproject.toml's {source}")
    return found


def main() -> int:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime = list(pyproject["project"]["dependencies"])
    dev = list(pyproject["project"]["optional-dependencies"]["dev"])
    build = list(pyproject["build-system"]["requires"])
    lock = read_lock(ROOT / "requirements.lock")
    dev_lock = read_lock(ROOT / "requirements-dev.lock")

    found = problems("requirements.lock", lock, runtime)
    found += problems("requirements-dev.lock", dev_lock, runtime + dev + build)
    for name, version in sorted(lock.items()):
        if dev_lock.get(name) != version:
            found.append(
                f"requirements.lock pins {name}=={version} but requirements-dev.lock "
                f"{'pins ' + dev_lock[name] if name in dev_lock else 'does not pin it'}"
            )
    if found:
        print("\n".join(found), file=sys.stderr)
        print("The lock files are stale: run `make lock` and commit them.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
