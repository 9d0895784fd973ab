"""The deterministic simulation's CI profile: at least 500 schedules of the control plane under faults
(`tests.sim.machine`), run by two worker processes of about 260 (`tests.sim.runner`; one per core,
a schedule is one thread). `make sim` runs the long profile and takes a seed.

A fixed seed and no example database: every CI run explores the same schedules, and a
failure prints the shrunk schedule as a script of rule calls and the command that replays
it. Over the whole profile every fault kind must fire, else the simulation no longer reaches
the dangerous paths it exists for, and the suite fails.
"""

from __future__ import annotations

import os

import pytest

from tests.sim.machine import FAULT_KINDS
from tests.sim.runner import report, run_workers

CI_SEED = 20261202
MIN_SCHEDULES = 500


@pytest.mark.timeout(900)
def test_the_control_plane_keeps_its_invariants_and_converges_under_faults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    summaries, seconds = run_workers("ci", int(os.environ.get("STEWARD_SIM_SEED", str(CI_SEED))))
    line, fired = report(summaries, seconds)
    with capsys.disabled():
        print("\n" + line)
    failures = [str(s["failure"]) for s in summaries if s["failure"]]
    assert not failures, "\n\n".join(failures)
    schedules = sum(int(s["schedules"]) for s in summaries)
    assert schedules >= MIN_SCHEDULES, f"the CI profile ran {schedules} schedules, fewer than {MIN_SCHEDULES}"
    missing = [kind for kind in FAULT_KINDS if fired[kind] == 0]
    assert not missing, f"fault kinds never fired over the profile: {missing}"
