"""Runs the simulation's schedules: `--worker N` runs one worker's share in this process and
prints, as its last line, a JSON summary (schedules, steps, faults fired per kind, the
failure with its shrunk schedule if any); without `--worker` it starts `--workers` of them
(each schedule is one thread), waits, and prints the combined figures.

`tests/sim/test_control_plane.py` runs the CI profile's 4 workers as 4 test cases, one
worker each (so the suite's test processes share them out); `make sim` the long one:
`python -m tests.sim.runner --profile long --seed 7`. A failure names the command that
replays it (a worker's seed is `seed * 100 + worker`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

PROFILES = {
    # Per worker. Hypothesis runs more schedules than the valid ones it counts toward
    # `max_examples` (it abandons some as invalid); each of those was run, checked and
    # converged all the same and is counted, so 115 per worker make the CI profile's 4 workers
    # (one per test shard) run 500 and more (the test fails below 500).
    "ci": {"max_examples": 115, "stateful_step_count": 12},
    "long": {"max_examples": 2500, "stateful_step_count": 50},
}
# Workers per profile when `--workers` is not given.
WORKERS = {"ci": 4, "long": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim.runner")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--worker", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None, help="4 for ci, 2 for long")
    parser.add_argument("--examples", type=int, default=None, help="schedules per worker")
    args = parser.parse_args(argv)
    if args.worker is None:
        workers = args.workers if args.workers is not None else WORKERS[args.profile]
        summaries, seconds = run_workers(args.profile, args.seed, workers, args.examples)
        line, _ = report(summaries, seconds)
        print(line)
        failures = [str(s["failure"]) for s in summaries if s["failure"]]
        print("\n\n".join(failures), file=sys.stderr)
        return 1 if failures else 0
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ[name] = value
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)

    from hypothesis import HealthCheck, Phase, seed, settings  # noqa: PLC0415 - after the environment
    from hypothesis.stateful import run_state_machine_as_test  # noqa: PLC0415
    from moto import mock_aws  # noqa: PLC0415

    from tests.sim.machine import ControlPlane  # noqa: PLC0415
    from tests.sim.world import Run  # noqa: PLC0415

    profile = dict(PROFILES[args.profile])
    if args.examples is not None:
        profile["max_examples"] = args.examples
    worker_seed = args.seed * 100 + args.worker
    # No explain phase: it traces every line of a failing schedule again and again, minutes
    # here; the shrunk schedule says what happened.
    phases = (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)
    config = settings(
        **profile,
        database=None,
        deadline=None,
        print_blob=True,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )
    failure = None
    noise = io.StringIO()  # the handlers' own log output: not the summary's business
    with tempfile.TemporaryDirectory(prefix="steward-sim-") as root, mock_aws():
        run = Run(Path(root))
        try:
            with run.wired(), contextlib.redirect_stdout(noise):
                ControlPlane.run = run
                machine = seed(worker_seed)(type("Machine", (ControlPlane,), {}))
                try:
                    run_state_machine_as_test(machine, settings=config)
                except BaseException as exc:  # reported in the summary, with the shrunk schedule
                    failure = "".join(traceback.format_exception(exc))[-20000:]
                    failure += f"\nreplay: python -m tests.sim.runner --profile {args.profile} --seed {args.seed} --worker {args.worker}"
        finally:
            run.close()
    summary = {
        "worker": args.worker,
        "seed": worker_seed,
        "schedules": ControlPlane.schedules,
        "steps": ControlPlane.steps,
        "faults": dict(run.board.fired),
        "requests": run.board.requests,
        "failure": failure,
    }
    print(json.dumps(summary), flush=True)
    return 1 if failure else 0


def run_workers(
    profile: str, seed: int, workers: int = 2, examples: int | None = None, first: int = 0
) -> tuple[list[dict[str, Any]], float]:
    """Run workers `first` to `first + workers - 1` at once; their summaries and the wall time
    in seconds."""
    command = [sys.executable, "-m", "tests.sim.runner", "--profile", profile, "--seed", str(seed)]
    if examples is not None:
        command += ["--examples", str(examples)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="steward-sim-out-") as out:
        procs = []
        for n in range(first, first + workers):
            # Files, not pipes: a worker must never block on output nobody reads yet.
            stdout, stderr = (open(Path(out) / f"{n}.{kind}", "w+") for kind in ("out", "err"))  # noqa: SIM115
            procs.append(
                (
                    subprocess.Popen([*command, "--worker", str(n)], cwd=ROOT, stdout=stdout, stderr=stderr),
                    stdout,
                    stderr,
                )
            )
        summaries = []
        for proc, stdout, stderr in procs:
            proc.wait(timeout=3600)
            stdout.seek(0)
            stderr.seek(0)
            lines = [line for line in stdout.read().splitlines() if line.startswith("{")]
            if not lines:
                raise RuntimeError(
                    f"a simulation worker gave no summary (exit {proc.returncode}):\n{stderr.read()[-5000:]}"
                )
            summaries.append(json.loads(lines[-1]))
            stdout.close()
            stderr.close()
    return summaries, time.monotonic() - started


def report(summaries: list[dict[str, Any]], seconds: float) -> tuple[str, Counter[str]]:
    """`N schedules, M steps, faults: kind=count ...` and the faults fired per kind."""
    fired: Counter[str] = Counter()
    for s in summaries:
        fired.update(s["faults"])
    schedules = sum(int(s["schedules"]) for s in summaries)
    steps = sum(int(s["steps"]) for s in summaries)
    kinds = " ".join(f"{k}={fired[k]}" for k in sorted(fired))
    return f"{schedules} schedules, {steps} steps, faults: {kinds} ({seconds:.0f} s wall)", fired


if __name__ == "__main__":
    sys.exit(main())
