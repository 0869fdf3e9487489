"""Issue 17's findings 1 and 2 as deterministic scripts on the simulation (real stores,
in-memory network, simulated time): a member that lost its disk must not elect a stale
member, and two crashes a few seconds apart must not stall the group for the whole vote
hold. Each fails on the code before the rejoin hold and the log-end floor
(dledger.raft.vote_hold), and passes after."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.raft.cluster import FAST
from tests.sim.harness import VOTE_HOLD_MS, SimNode, Simulation
from tests.sim.test_findings import settled_sim

pytestmark = pytest.mark.sim

ELECTION_TIMEOUT_MS = FAST["heart_beat_time_interval_ms"] * FAST["max_heart_beat_leak"]


def _acked(sim: Simulation, leader: SimNode, count: int) -> None:
    ops = [sim.append(leader, [sim._body()]) for _ in range(count)]
    sim.run_until(lambda: all(op.status == "ok" for op in ops))


@pytest.mark.parametrize("state", ["existing", "new"])
@pytest.mark.parametrize("flush", ["async", "sync"])
def test_a_wiped_member_does_not_elect_a_stale_one(tmp_path: Path, flush: str, state: str) -> None:
    """Finding 1: L leads, S and W follow. S stops; L and W acknowledge more; L and W
    are killed and W's disk is lost; S and the empty W come back. Before: W voted for S,
    which led and truncated what L and W had acknowledged once L returned. Also when W is
    started as if the group were new (`state="new"`): it asks first, S answers with
    entries, and W rejoins (before, it founded again and voted for S)."""
    with settled_sim(tmp_path, flush) as sim:
        stale_leader = sim.leader()
        assert stale_leader is not None
        leader = stale_leader
        stale, wiped = (n for n in sim.nodes.values() if n is not leader)
        _acked(sim, leader, 10)
        sim.net.isolate(stale.node_id)  # SIGSTOP S: it hears nothing and says nothing
        _acked(sim, leader, 30)  # acknowledged by L and W only
        leader.down(power_loss=False)
        leader.restart_at = 1 << 60  # L stays down for now
        wiped.down(power_loss=False)
        wiped.wipe(state)
        sim.net.heal()
        wiped.restart_at = sim.now  # W comes back empty; L stays down for now
        sim.run_for(VOTE_HOLD_MS + 2 * ELECTION_TIMEOUT_MS)  # longer than any unclean hold
        assert sim.leader() is None, f"a leader without the acknowledged entries: {sim.describe()}"
        assert wiped.core is not None and wiped.core.elector.vote_hold.active
        assert wiped.core.elector.vote_hold.kind == "rejoin"  # `new` too: S's entries showed the group
        leader.restart_at = sim.now
        sim.converge()  # the checker: every acknowledged entry present, exactly once, on every member
        sim.run_for(ELECTION_TIMEOUT_MS)
        assert wiped.core is not None and not wiped.core.elector.vote_hold.pending
        assert not (wiped.dir / "rejoin").exists()  # caught up: the marker is gone


def test_a_rejoin_hold_survives_a_restart_before_catching_up(tmp_path: Path) -> None:
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None
        _acked(sim, leader, 5)
        member = next(n for n in sim.nodes.values() if n is not leader)
        member.down(power_loss=False)
        member.wipe()
        sim.net.isolate(member.node_id)
        member.restart_at = sim.now
        sim.run_for(ELECTION_TIMEOUT_MS)
        assert member.core is not None and member.core.elector.vote_hold.kind == "rejoin"
        member.down(power_loss=False)  # crashes again before any leader reached it
        member.restart_at = sim.now
        sim.run_for(VOTE_HOLD_MS + ELECTION_TIMEOUT_MS)  # longer than any unclean hold lasts
        assert member.core is not None and member.core.elector.vote_hold.active
        sim.converge()
        sim.run_for(ELECTION_TIMEOUT_MS)
        assert not member.core.elector.vote_hold.pending


def test_two_crashes_in_a_row_do_not_stall_the_group(tmp_path: Path) -> None:
    """Finding 2 (async flush): kill the leader A and restart it 2 s later; as soon as B
    is elected, kill B and restart it 2 s later. Both restart uncleanly and hold their
    votes; before, the third member could not win alone until the hold ran out."""
    restart_after_ms = 20 * FAST["heart_beat_time_interval_ms"]  # "2 s" at a 100 ms heartbeat
    with settled_sim(tmp_path, "async") as sim:
        first = sim.leader()
        assert first is not None
        _acked(sim, first, 10)
        first.down(power_loss=False)
        first.restart_at = sim.now + restart_after_ms
        sim.run_until(lambda: sim.leader() not in (None, first))
        second = sim.leader()
        assert second is not None
        second.down(power_loss=False)
        second.restart_at = sim.now + restart_after_ms
        sim.run_until(lambda: second.up)
        restarted = sim.now
        assert first.core is not None and first.core.elector.vote_hold.active  # both hold: no leader to follow
        sim.run_until(lambda: sim.leader() is not None, max_ms=VOTE_HOLD_MS)
        took = sim.now - restarted
        assert took <= 2 * ELECTION_TIMEOUT_MS, f"no leader for {took} ms after the second restart"
        sim.converge()


def test_a_majority_restart_elects_once_every_member_is_back(tmp_path: Path) -> None:
    """All three members crash at once (async flush) and come back: every one holds, and
    they elect within 2 election timeouts of the last restart, losing nothing."""
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None
        _acked(sim, leader, 10)
        nodes = list(sim.nodes.values())
        for k, node in enumerate(nodes):
            node.down(power_loss=False)
            node.restart_at = sim.now + 5 * k * FAST["heart_beat_time_interval_ms"]
        sim.run_until(lambda: all(n.up for n in nodes))
        back = sim.now
        sim.run_until(lambda: sim.leader() is not None, max_ms=VOTE_HOLD_MS)
        took = sim.now - back
        assert took <= 2 * ELECTION_TIMEOUT_MS, f"no leader for {took} ms after the last restart"
        sim.converge()
