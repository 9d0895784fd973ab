"""Each Lambda function's code imports only what its layers hold (infra/layout.py LAYERS), in
`make test` (`make layer-check` proves the same against the built layers on Python 3.12, in
`make synth`). A fresh interpreter refuses to import the packages of the layers a function
lacks (githubkit and hishel for `github`; cryptography and PyJWT for `crypto`), then imports
the function's handler and every module its `steward.wiring` builders import, as a cold
start and its first requests would. It found the webhook function importing githubkit (a
mention's ask reads a person's permission from GitHub) with only the common layer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from check_layers import BUILDERS, LOCAL_ONLY, builder_imports  # noqa: E402

from infra.layout import LAYERS  # noqa: E402

# The top-level packages each optional layer alone provides (tools/build_layers.py).
ONLY_IN = {"github": ("githubkit", "hishel"), "crypto": ("cryptography", "jwt")}

REFUSE = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in this function's layers)")
        return None
sys.meta_path.insert(0, Refuse())
"""


@pytest.mark.parametrize("function", sorted(BUILDERS))
def test_a_functions_code_imports_nothing_outside_its_layers(function: str) -> None:
    refused = sorted(
        p for layer, packages in ONLY_IN.items() if layer not in LAYERS[function] for p in packages
    )  # type: ignore[index]
    modules = sorted(
        {m for b in BUILDERS[function] for m in builder_imports()[b] if not m.startswith(LOCAL_ONLY)}
    )
    code = (
        f"REFUSED = {refused!r}\n{REFUSE}\n"
        f"sys.path[:0] = [{str(ROOT / 'functions' / function)!r}]\n"
        "import importlib, handler\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{function} (layers {LAYERS[function]}):\n{result.stderr[-2000:]}"  # type: ignore[index]
