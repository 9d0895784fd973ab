"""Import each Lambda function's code with only what Lambda would give it: Python 3.12, the
function's directory, its layers (infra/functions.py LAYERS) and boto3 as the runtime ships
it. Catches a module missing from a function's layers (say githubkit where the split left
it out) without an account.

    python tools/check_layers.py [LAYER_DIR]     (`make layer-check`; needs python3.12)

Each function imports its handler and every module its `steward.wiring` builders import
(read from wiring.py's source: the builders import lazily, on the first request).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "layers" / "steward" / "python"))

from build_layers import RUNTIME_PROVIDED  # noqa: E402

from infra.layout import LAYERS  # noqa: E402

WIRING = ROOT / "layers" / "steward" / "python" / "steward" / "wiring.py"
BUILDERS = {
    "api": ("settings", "tables", "api_services", "build"),
    "scheduler": ("settings", "tables", "scheduler"),
    "heartbeat": ("settings", "tables", "heartbeat", "resync", "launcher", "github_app"),
    "reaper": ("settings", "tables", "reaper", "launcher"),
    "relay": ("settings", "tables", "relay", "record_over_report", "capability_verifier", "price_table"),
    "webhook": ("settings", "tables", "webhook_receiver"),
    "runtime": (
        "settings",
        "tables",
        "minter",
        "runtime_service",
        "github_tokens",
        "github_app",
        "capability_verifier",
        "price_table",
    ),
}
# Never loaded on Lambda (the local launcher's branch).
LOCAL_ONLY = ("steward.local",)


def builder_imports() -> dict[str, set[str]]:
    tree = ast.parse(WIRING.read_text())
    found: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            modules = found.setdefault(node.name, set())
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module:
                    modules.add(inner.module)
    return found


def runtime_packages(target: Path) -> None:
    """boto3 and its dependencies, as the Lambda runtime provides them."""
    import boto3  # noqa: PLC0415

    site = Path(boto3.__file__).parent.parent
    names = {"boto3", "botocore", "s3transfer", "jmespath", "urllib3", "dateutil", "six.py"}
    assert {n.replace("python-", "") for n in RUNTIME_PROVIDED} >= {"boto3", "botocore"}
    for name in names:
        source = site / name
        if source.exists():
            (target / name).symlink_to(source)


def interpreter() -> str | None:
    """A real python3.12 (not a pyenv shim, which needs a version selected)."""
    for candidate in (
        shutil.which("python3.12"),
        *sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python3.12")),
    ):
        if candidate and "/shims/" not in str(candidate):
            return str(candidate)
    return None


def main() -> int:
    layer_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "layers"
    python = interpreter()
    if python is None:
        print(
            "layer check SKIPPED: no python3.12 on this machine (the layers are unchecked)", file=sys.stderr
        )
        return 0
    imports = builder_imports()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        runtime = Path(tmp)
        runtime_packages(runtime)
        for function, builders in BUILDERS.items():
            modules = sorted({m for b in builders for m in imports[b] if not m.startswith(LOCAL_ONLY)})
            path = [
                str(ROOT / "functions" / function),
                *(str(layer_dir / name / "python") for name in LAYERS[function]),  # type: ignore[index]
                str(ROOT / "layers" / "steward" / "python"),
                str(runtime),
            ]
            code = (
                "import importlib, sys\n"
                f"sys.path[:0] = {path!r}\n"
                "import handler\n"
                f"for m in {modules!r}: importlib.import_module(m)\n"
            )
            result = subprocess.run(  # noqa: S603 - our own interpreter and code
                [python, "-I", "-S", "-B", "-c", code], capture_output=True, text=True, check=False
            )
            status = "ok" if result.returncode == 0 else "FAILED"
            print(f"{function}: {status} ({len(modules)} modules, layers {', '.join(LAYERS[function])})")  # type: ignore[index]
            if result.returncode:
                failed += 1
                print(result.stderr.strip().splitlines()[-1], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
