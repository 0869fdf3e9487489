"""Idempotent producers in scripted simulations (deterministic): the leader fails in the
middle of replicating a numbered request, and the resent request lands once (the new
leader holds a prefix of it: only the rest is appended)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.record import encode_record, record_of
from tests.sim.harness import Scenario, Simulation

pytestmark = pytest.mark.sim

PID = 9


def _bodies(count: int) -> list[bytes]:
    return [encode_record(b"P%d.0.%d" % (PID, seq), timestamp=0) for seq in range(count)]


def test_a_leader_failing_in_the_middle_of_a_request_leaves_a_prefix_the_retry_completes(tmp_path: Path) -> None:
    sim = Simulation(Scenario(3, "sync", producers=600_000), seed=5, base_dir=tmp_path)
    try:
        sim.faults_on = False
        for node in sim.nodes.values():  # one small push at a time: the request goes out in pieces
            node.config.max_push_batch_bytes = 200
            node.config.max_push_in_flight_per_peer = 1
        sim.run_until(lambda: sim.leader() is not None and sim.leader().core.member_state.committed_index >= 0)  # type: ignore[union-attr]
        leader = sim.leader()
        assert leader is not None and leader.driver is not None and sim.producers is not None
        first = leader.store.end_index + 1  # type: ignore[union-attr]
        answer = sim.producers.member(leader).append(leader.driver, _bodies(12), PID, 0, 0, sim.now)
        followers = [n for n in sim.nodes.values() if n is not leader]

        def partial() -> bool:
            return all(first + 1 <= n.store.end_index < first + 11 for n in followers)  # type: ignore[union-attr]

        sim.run_until(partial, max_ms=2_000)
        held = min(n.store.end_index for n in followers) - first + 1  # type: ignore[union-attr]
        sim._take_down(leader, power_loss=False, restart_in=60_000)
        sim.run_until(lambda: sim.leader() is not None, max_ms=5_000)
        new = sim.leader()
        assert (new is not None and new.driver is not None and not answer.future.done()) or answer.future.exception()
        retry = sim.producers.member(new).append(new.driver, _bodies(12), PID, 0, 0, sim.now)
        assert not retry.duplicate and len(retry.runs) == 2, retry
        (old_first, old_count), (_, new_count) = retry.runs
        assert old_first == first and old_count >= held and old_count + new_count == 12
        sim.run_until(retry.future.done, max_ms=5_000)
        assert retry.future.exception() is None
        values = [record_of(e).value for e in new.store.get_range(first, new.store.end_index + 1)]  # type: ignore[union-attr]
        mine = [v for v in values if v.startswith(b"P%d." % PID)]
        assert mine == [b"P%d.0.%d" % (PID, seq) for seq in range(12)]  # each once, in order
    finally:
        sim.close()
