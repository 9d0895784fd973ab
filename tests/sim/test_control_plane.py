"""The deterministic simulation's CI profile: at least 500 schedules of the control plane under faults
(`tests.sim.machine`), run as 4 shards of about 130 (`tests.sim.runner`, one worker process
each; a schedule is one thread). Each shard is its own test case, so the suite's test
processes share them out (tests/conftest.py) instead of one test holding two cores for the
whole profile. `make sim` runs the long profile and takes a seed.

A fixed seed and no example database: every CI run explores the same schedules, and a
failure prints the shrunk schedule as a script of rule calls and the command that replays
it. Over the whole profile every fault kind must fire, else the simulation no longer reaches
the dangerous paths it exists for, and the suite fails: each shard leaves its summary in the
test run's temporary directory, and the shard that finishes last checks them all together.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.sim.machine import FAULT_KINDS
from tests.sim.runner import WORKERS, report, run_workers

CI_SEED = 20261202
MIN_SCHEDULES = 500
SHARDS = WORKERS["ci"]


def _summaries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory every shard of this test run writes to: under pytest-xdist each test
    process's base directory is `<run>/popen-gwN`, so the run's is its parent."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "sim-ci-summaries"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.mark.timeout(900)
@pytest.mark.parametrize("shard", range(SHARDS), ids=lambda n: f"shard{n}")
def test_the_control_plane_keeps_its_invariants_and_converges_under_faults(
    shard: int, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = int(os.environ.get("STEWARD_SIM_SEED", str(CI_SEED)))
    summaries, seconds = run_workers("ci", seed, workers=1, first=shard)
    line, _ = report(summaries, seconds)
    with capsys.disabled():
        print(f"\nshard {shard}: {line}")
    # Written whole under another name, then renamed: a shard never reads half a summary.
    folder = _summaries(tmp_path_factory)
    partial = folder / f"{shard}.part"
    partial.write_text(json.dumps(summaries[0]))
    partial.rename(folder / f"{shard}.json")

    failures = [str(s["failure"]) for s in summaries if s["failure"]]
    assert not failures, "\n\n".join(failures)
    schedules = sum(int(s["schedules"]) for s in summaries)
    assert schedules * SHARDS >= MIN_SCHEDULES, (
        f"shard {shard} ran {schedules} schedules, fewer than its share of {MIN_SCHEDULES}"
    )

    # Every shard writes before it reads, so the last to finish sees all the summaries.
    done = sorted(folder.glob("*.json"))
    if len(done) < SHARDS:
        return
    profile = [json.loads(path.read_text()) for path in done]
    line, fired = report(profile, 0)
    with capsys.disabled():
        print(f"\nthe CI profile: {line}")
    total = sum(int(s["schedules"]) for s in profile)
    assert total >= MIN_SCHEDULES, f"the CI profile ran {total} schedules, fewer than {MIN_SCHEDULES}"
    missing = [kind for kind in FAULT_KINDS if fired[kind] == 0]
    assert not missing, f"fault kinds never fired over the profile: {missing}"
