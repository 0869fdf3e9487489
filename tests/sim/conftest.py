"""Seeds and steps for the simulation tier, from the environment:

- DLEDGER_SIM_SEEDS: seeds per scenario (default 30: 240 seeds over the 8 scenarios);
- DLEDGER_SIM_FIRST_SEED: the first of them (default 1), to explore other seeds;
- DLEDGER_SIM_STEPS: 5 ms steps per seed before the final heal (default 1500: 7.5 s);
- DLEDGER_SIM_SEED: run just this seed (replaying a failure);
- DLEDGER_SIM_REPORT: append one JSON line of figures per seed to this file;
- DLEDGER_SIM_DIR: where the members' store directories go (default /dev/shm when
  writable: durability is modelled by the simulated disk, not by real fsyncs, so a
  tmpfs only saves time; otherwise pytest's tmp_path).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sim.disk import traced_segment_lists

DEFAULT_SEEDS = 30
DEFAULT_STEPS = 1500


def sim_seeds() -> list[int]:
    """The seeds to run (one when DLEDGER_SIM_SEED is set)."""
    one = os.environ.get("DLEDGER_SIM_SEED")
    if one:
        return [int(one)]
    first = int(os.environ.get("DLEDGER_SIM_FIRST_SEED", "1"))
    return list(range(first, first + int(os.environ.get("DLEDGER_SIM_SEEDS", str(DEFAULT_SEEDS)))))


def sim_root(tmp_path: Path) -> Path:
    """The directory each seed's store directories are created in."""
    configured = os.environ.get("DLEDGER_SIM_DIR")
    if configured:
        return Path(configured)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path


def sim_steps() -> int:
    return int(os.environ.get("DLEDGER_SIM_STEPS", str(DEFAULT_STEPS)))


@pytest.fixture(autouse=True)
def _traced_stores() -> Iterator[None]:
    """Every store opened by a simulation test reports its msyncs to the disk model."""
    with traced_segment_lists():
        yield
