"""The checker's "a committed entry a member held is never overwritten or lost" invariant
across restarts (`Checker.check_reopen`), and the biased episodes: each fails on the
broken behaviour it guards against."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.store.mmap_store import MmapLogStore, SyncMmapLogStore
from tests.sim.checker import Violation
from tests.sim.harness import Scenario, Simulation
from tests.sim.test_findings import settled_sim

pytestmark = pytest.mark.sim


def _committed_follower(sim: Simulation) -> tuple[Simulation, int]:
    leader = sim.leader()
    assert leader is not None
    ops = [sim.append(leader, [sim._body() for _ in range(3)]) for _ in range(3)]
    sim.run_until(lambda: all(o.status == "ok" for o in ops) and sim._all_caught_up())
    return sim, len(sim.checker.ref_term) - 1


def test_a_member_that_loses_committed_entries_across_a_process_crash_fails_the_run(tmp_path: Path) -> None:
    with settled_sim(tmp_path, "sync") as sim:
        _, last = _committed_follower(sim)
        follower = next(n for n in sim.nodes.values() if n is not sim.leader())
        follower.down(power_loss=False)
        # behind the checker's back: recovery "loses" the last two committed entries
        store = SyncMmapLogStore(follower.dir, sim.store_config)
        store.truncate(last - 1)
        store.close()
        with pytest.raises(Violation, match=rf"lost committed entries {last - 1}..{last} it held across a process"):
            follower.open()


def test_a_member_whose_committed_entry_changed_across_a_restart_fails_the_run(tmp_path: Path) -> None:
    with settled_sim(tmp_path, "async") as sim:
        _, last = _committed_follower(sim)
        follower = next(n for n in sim.nodes.values() if n is not sim.leader())
        follower.down(power_loss=False)
        store = MmapLogStore(follower.dir, sim.store_config)
        store.truncate(last)
        store.term = store.end_term + 1  # any term from the last entry on
        store.append(b"u999999.other")  # another entry at a committed index
        store.close()
        with pytest.raises(Violation, match=rf"committed entry {last} \(term \d+\) it held is another entry"):
            follower.open()


def test_an_unflushed_tail_lost_to_a_power_loss_is_no_overwrite(tmp_path: Path) -> None:
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None
        follower = next(n for n in sim.nodes.values() if n is not leader)
        follower.next_flush_ms = 1 << 60  # its flush stalls: what it acknowledges stays unflushed
        _, last = _committed_follower(sim)
        follower.down(power_loss=True, torn="lost")
        follower.open()  # shorter, not different: accepted (the vote hold covers the rest)
        assert follower.store is not None and follower.store.end_index < last
        sim.run_until(sim._all_caught_up, max_ms=5000)


def test_biased_runs_start_episodes_and_skip_the_noop_in_some_seeds(tmp_path: Path) -> None:
    noops, episodes = set(), 0
    for seed in (1, 2, 3, 4):
        sim = Simulation(Scenario(3, "sync", biased=True), seed, tmp_path / str(seed))
        try:
            sim.run(600)
        finally:
            sim.close()
        noops.add(sim.leader_noop)
        episodes += sim.stats.episodes
        assert sim.stats.episodes == sum(t.endswith("starts") for t in sim.trace)
    assert episodes >= 2, "hardly any episode in 4 x 3 s"
    assert noops == {True, False}
    unbiased = Simulation(Scenario(3, "sync"), 1, tmp_path / "u")
    try:
        unbiased.run(600)
    finally:
        unbiased.close()
    assert unbiased.stats.episodes == 0 and unbiased.leader_noop
