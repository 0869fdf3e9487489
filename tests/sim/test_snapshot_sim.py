"""The seeded snapshot simulation (tests/sim/snapshots.py): saves, compaction and
installs under crashes during each of them, with the state-machine invariant."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.sim.snapshots import Faults, SnapshotSim

pytestmark = pytest.mark.sim

SEEDS = range(6)


@pytest.mark.parametrize("strategy", ["RESET_ALL_SYNC", "RESET_BUT_KEEP_SOME_SYNC"])
def test_snapshots_compaction_and_installs_under_crashes(tmp_path: Path, strategy: str) -> None:
    totals: Counter[str] = Counter()
    for seed in SEEDS:
        sim = SnapshotSim(seed, tmp_path / f"{strategy}-{seed}", strategy=strategy)
        try:
            sim.run(8_000)
            sim.settle()
            totals.update(sim.stats)
        finally:
            sim.close()
    # the runs did what they are for (else the invariants were checked on nothing)
    assert totals["snapshots"] >= 20 and totals["appended"] >= 500, totals
    for kind in ("installs", "save_crashes", "install_crashes", "compaction_crashes", "wipes"):
        assert totals[kind] > 0, (kind, totals)


def test_the_state_machine_invariant_catches_a_wrong_machine(tmp_path: Path) -> None:
    """The invariant can fail: a member whose machine skips an entry is caught."""
    quiet = Faults(crash=0.0, crash_in_save=0.0, crash_in_install=0.0, crash_around_compaction=0.0)
    sim = SnapshotSim(99, tmp_path / "broken", faults=quiet)
    try:
        sim.run(500)
        victim = next(iter(sim.members.values()))
        assert victim.up and victim.caller is not None and victim.caller.applied_index > 0
        victim.machine.digest ^= 1  # as if it had skipped or garbled an entry
        with pytest.raises(AssertionError, match="not the sequential application"):
            sim.check()
    finally:
        sim.close()
