"""`cdk synth` / `cdk deploy` entry point (cdk.json runs `python -m infra.app`)."""

from __future__ import annotations

import os
from pathlib import Path

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.functions import ROOT
from infra.stack import StewardStack

STACK = "Steward"  # the default; `-c stackName=...` deploys another stack beside it


def build(app: App, layer_dir: Path | None = None) -> StewardStack:
    """The stack in `app`, cdk-nag registered. `layer_dir`: the built dependency layers
    (default build/layers, which `make synth` builds; tests pass a small fake one)."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    account, region = os.environ.get("CDK_DEFAULT_ACCOUNT"), os.environ.get("CDK_DEFAULT_REGION")
    env = Environment(account=account, region=region) if account and region else None
    zones = os.environ.get("STEWARD_SYNTH_AZS")
    if env is not None and zones:
        # `make synth` synthesizes for a made-up account offline: the availability zones a
        # deploy would look up with credentials are given instead.
        app.node.set_context(f"availability-zones:account={account}:region={region}", zones.split(","))
    # The stack's name prefixes its tables, queue and dashboard (tablePrefix aside), so two
    # stacks of different names share an account and region without a name clash.
    name = str(app.node.try_get_context("stackName") or STACK)
    return StewardStack(app, name, layer_dir=layer_dir or ROOT / "build" / "layers", env=env)


def main() -> None:
    app = App()
    layer_dir = Path(os.environ.get("STEWARD_LAYER_DIR", ROOT / "build" / "layers"))
    if not (layer_dir / "common" / "python").is_dir():
        raise SystemExit(f"{layer_dir} has no built layers: run `make layer` (make synth does)")
    build(app, layer_dir)
    app.synth()


if __name__ == "__main__":
    main()
