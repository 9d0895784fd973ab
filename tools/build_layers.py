"""Build the Lambda layers from requirements.lock with host pip: no Docker.

    python tools/build_layers.py [OUT]      (default build/layers; `make layer` runs it)

Three dependency layers, each `OUT/<name>/python/...` as Lambda expects:
  common   every locked runtime dependency except what the Lambda Python 3.12 runtime
           already ships (boto3 and its dependencies), the signatures and the GitHub client;
  crypto   cryptography and PyJWT, for the functions that verify or sign (relay, runtime,
           heartbeat: the App's JWT);
  github   githubkit and what only it needs (its generated schemas are ~56 MB unzipped),
           for the two functions that talk to GitHub (runtime: the token route; heartbeat:
           the resync).
The steward package is a third layer straight from layers/steward (no build step).

pip installs for the Lambda platform (`--platform manylinux2014_x86_64 --only-binary=:all:
--python-version 3.12`), `--no-compile` (pip would otherwise write ~40 MB of .pyc for the
host's Python, useless on 3.12), `--require-hashes --no-deps`: the lock is the resolution.
Prints each layer's unzipped size and fails above the budget (common <= 30 MB; a function's
layers together <= 60 MB). A stamp named by the lock's content skips an up-to-date build.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
# What the Lambda Python 3.12 runtime provides (boto3, botocore and their dependencies).
RUNTIME_PROVIDED = frozenset(
    {"boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil", "six"}
)
# The GitHub client's roots: githubkit and its schema packages (which name each other, a
# cycle the "only via" rule below cannot enter), and hishel, pinned only for githubkit.
GITHUB_ROOTS = frozenset({"hishel"})
GITHUB_PREFIX = "githubkit"
# Signatures (capabilities, the App's JWT): cryptography's Rust core alone is ~15 MB.
CRYPTO_ROOTS = frozenset({"cryptography", "pyjwt"})
LAYERS = ("common", "crypto", "github")
MB = 1024 * 1024
COMMON_BUDGET = 30 * MB
FUNCTION_BUDGET = 60 * MB


def parse_lock(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (its requirement block, the names it is required via)."""
    blocks: dict[str, tuple[str, set[str]]] = {}
    name = ""
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)==", line)
        if match:
            name = match.group(1).lower()
            blocks[name] = (line + "\n", set())
        elif name and line.startswith("    --hash"):
            block, via = blocks[name]
            blocks[name] = (block + line + "\n", via)
        elif (
            name
            and (m := re.match(r"^    #(?: via)?\s+([A-Za-z0-9._-]+)", line))
            and m.group(1) not in ("-c", "via")
        ):
            blocks[name][1].add(m.group(1).lower())
    return blocks


def closure(blocks: dict[str, tuple[str, set[str]]], roots: set[str]) -> set[str]:
    """`roots` and every package required only via members of the set."""
    members = roots & blocks.keys()
    changed = True
    while changed:
        changed = False
        for name, (_, via) in blocks.items():
            if name not in members and via and via <= members:
                members.add(name)
                changed = True
    return members


def groups(blocks: dict[str, tuple[str, set[str]]]) -> dict[str, list[str]]:
    github = closure(blocks, set(GITHUB_ROOTS) | {n for n in blocks if n.startswith(GITHUB_PREFIX)})
    crypto = closure(blocks, set(CRYPTO_ROOTS)) - github
    common = [n for n in blocks if n not in github | crypto and n not in RUNTIME_PROVIDED]
    return {"common": sorted(common), "crypto": sorted(crypto), "github": sorted(github)}


def size(path: Path) -> int:
    """Unzipped bytes, less bytecode (the assets exclude __pycache__)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


def build(out: Path) -> dict[str, int]:
    text = LOCK.read_text()
    blocks = parse_lock(text)
    stamp = out / f".built-{hashlib.sha256((text + Path(__file__).read_text()).encode()).hexdigest()[:16]}"
    sizes: dict[str, int] = {}
    if stamp.exists():
        return {name: size(out / name) for name in LAYERS}
    shutil.rmtree(out, ignore_errors=True)
    for name, members in groups(blocks).items():
        target = out / name / "python"
        target.mkdir(parents=True)
        requirements = out / f"requirements-{name}.txt"
        requirements.write_text("".join(blocks[m][0] for m in members))
        subprocess.run(  # noqa: S603 - our own pip, our own lock
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--platform",
                "manylinux2014_x86_64",
                "--implementation",
                "cp",
                "--python-version",
                "3.12",
                "--only-binary=:all:",
                "--no-compile",
                "--require-hashes",
                "--no-deps",
                "--target",
                str(target),
                "-r",
                str(requirements),
            ],
            check=True,
        )
        sizes[name] = size(out / name)
    stamp.touch()
    return sizes


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "layers"
    sizes = build(out)
    steward = size(ROOT / "layers" / "steward")
    for name, value in (*sizes.items(), ("steward", steward)):
        print(f"layer {name}: {value / MB:.1f} MB unzipped")
    widest = sum(sizes.values()) + steward
    print(f"largest function (all layers: runtime, heartbeat): {widest / MB:.1f} MB unzipped")
    if sizes["common"] > COMMON_BUDGET or widest > FUNCTION_BUDGET:
        print("over the layer budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
