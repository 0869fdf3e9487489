"""Seeded random simulations of 3- and 5-member clusters on real stores (see
docs/SIMULATION.md). Each test runs every seed of `conftest.sim_seeds()`; a failing seed
is reported with the command that replays just it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import traceback
from pathlib import Path

import pytest

from tests.sim.checker import KnownIssue, Violation
from tests.sim.conftest import sim_root, sim_seeds, sim_steps
from tests.sim.harness import Scenario, Simulation, Stats

pytestmark = pytest.mark.sim

STRICT = {
    # sync: acks wait for msync, so any number of members may lose power at once (and,
    # now and then, one member its disk: the LostDisk episode)
    "sync-3": Scenario(3, "sync", power_loss="any", biased=True, disk_loss=True),
    "sync-5": Scenario(5, "sync", power_loss="any", biased=True, disk_loss=True),
    # async (ack before fsync): process crashes (also inside store calls), no power loss
    "async-3": Scenario(3, "async", power_loss="none", biased=True, disk_loss=True),
    "async-5": Scenario(5, "async", power_loss="none", biased=True, disk_loss=True),
    # async, one member at a time loses power: nothing acknowledged may be lost either
    "async-single-3": Scenario(3, "async", power_loss="single", biased=True),
    "async-single-5": Scenario(5, "async", power_loss="single", biased=True),
}

READS = {
    # ReadIndex reads on whoever believes it leads, checked against the acknowledged
    # appends, under the faults of the strict scenarios (tests.sim.reads)
    "reads-sync-3": Scenario(3, "sync", power_loss="any", biased=True, reads=True),
    "reads-async-5": Scenario(5, "async", power_loss="none", biased=True, reads=True),
}

PRODUCERS = {
    # idempotent producers resending numbered requests through crashes, power losses and
    # leader changes; idle ones expire after 2.5 s of log time (tests.sim.producers)
    "producers-sync-3": Scenario(3, "sync", power_loss="any", biased=True, producers=2500),
    "producers-async-3": Scenario(3, "async", power_loss="none", biased=True, producers=2500),
}

MEASURED = {
    # async, a majority or all members lose power at once: losses are allowed only at
    # indexes a power-lost member really lost, and are counted
    "async-group-3": Scenario(3, "async", power_loss="group", allow_loss=True, biased=True),
    "async-group-5": Scenario(5, "async", power_loss="group", allow_loss=True, biased=True),
}


@dataclasses.dataclass
class SeedResult:
    seed: int
    stats: Stats
    losses: list[dict[str, int]]


def run_seeds(
    request: pytest.FixtureRequest, tmp_path: Path, name: str, scenario: Scenario, seeds: list[int] | None = None
) -> list[SeedResult]:
    """Run every seed; fail with replay commands for broken invariants, xfail when every
    failure has the signature of a reported bug."""
    steps = sim_steps()
    results: list[SeedResult] = []
    failures: list[str] = []
    known: list[str] = []
    root = sim_root(tmp_path)
    stop_first = bool(os.environ.get("DLEDGER_SIM_STOP_FIRST"))  # tests/mutants.py: the first failure is enough
    for seed in sim_seeds() if seeds is None else seeds:
        base = Path(tempfile.mkdtemp(prefix=f"dledger-sim-{seed}-", dir=root))
        sim = Simulation(scenario, seed, base)
        replay = f"DLEDGER_SIM_SEED={seed} DLEDGER_SIM_STEPS={steps} .venv/bin/python -m pytest '{request.node.nodeid}'"
        try:
            stats = sim.run(steps)
        except KnownIssue as exc:
            known.append(f"seed {seed}: {exc}\n  replay: {replay}")
        except Exception as exc:  # any failure at all is reported with its replay command
            trace = "\n".join(sim.trace[-40:])
            where = "".join(traceback.format_exception(exc, limit=-3)) if not isinstance(exc, Violation) else ""
            failures.append(
                f"{name} seed {seed} failed at {sim.now} ms: {type(exc).__name__}: {exc}\n{where}"
                f"cluster: {sim.describe()}\nlast events:\n{trace}\nreplay: {replay}"
            )
            if stop_first:
                break
        else:
            losses = [dataclasses.asdict(loss) for loss in sim.checker.losses]
            results.append(SeedResult(seed, stats, losses))
            _report(name, seed, steps, stats, losses)
        finally:
            sim.close()
            shutil.rmtree(base, ignore_errors=True)
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)
    if known:
        pytest.xfail("known, reported bug:\n" + "\n".join(known))
    return results


def _report(name: str, seed: int, steps: int, stats: Stats, losses: list[dict[str, int]]) -> None:
    path = os.environ.get("DLEDGER_SIM_REPORT")
    if not path:
        return
    line = {"scenario": name, "seed": seed, "steps": steps, **dataclasses.asdict(stats), "losses": losses}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


@pytest.mark.parametrize("name", list(STRICT))
def test_sim(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> None:
    """Every invariant holds after every step, nothing acknowledged is ever lost, and
    the healed cluster converges and commits new appends."""
    results = run_seeds(request, tmp_path, name, STRICT[name])
    for result in results:
        assert not result.losses
        assert result.stats.ok > 0, f"seed {result.seed}: no append was acknowledged"
    if STRICT[name].power_loss != "none":
        assert sum(r.stats.power_losses for r in results) > 0 or len(results) < 3


@pytest.mark.parametrize("name", list(MEASURED))
def test_async_power_loss(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> None:
    """Async mode under power loss: every other invariant still holds, a power loss never
    takes what the store had flushed, and acknowledged entries are lost only at indexes
    a power-lost member lost (its last unflushed `flush_file_interval_ms` of appends)."""
    results = run_seeds(request, tmp_path, name, MEASURED[name])
    events = sum(r.stats.power_losses for r in results)
    lost = sum(loss["acked_lost"] for r in results for loss in r.losses)
    print(f"\n{name}: {len(results)} seeds, {events} power losses, {lost} acknowledged entries lost")


@pytest.mark.parametrize("name", list(READS))
def test_sim_reads(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> None:
    """Every read index a member confirms covers the appends acknowledged before it was
    asked, whatever the faults (and every other invariant holds)."""
    results = run_seeds(request, tmp_path, name, READS[name])
    assert all(r.stats.ok > 0 for r in results)
    assert sum(r.stats.reads_confirmed for r in results) > 0


@pytest.mark.parametrize("name", list(PRODUCERS))
def test_sim_producers(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> None:
    """Every producer's records land once, in sequence order, whatever was resent after
    which fault; every member folds the same producer table and reads its saved copy
    back; idle producers expire at the same index everywhere (and start a new epoch)."""
    seeds = sim_seeds()[: int(os.environ.get("DLEDGER_SIM_PRODUCER_SEEDS", "12"))]
    results = run_seeds(request, tmp_path, name, PRODUCERS[name], seeds)
    totals: dict[str, int] = {}
    for result in results:
        for key, value in result.stats.producers.items():
            totals[key] = totals.get(key, 0) + value
    print(f"\n{name}: {len(results)} seeds, {totals}")
    assert totals.get("acked", 0) > 0, totals
    if len(results) >= 10:  # enough runs for what the test is about: resent duplicates, expiry
        assert totals.get("duplicates", 0) > 0 and totals.get("expired", 0) > 0, totals
