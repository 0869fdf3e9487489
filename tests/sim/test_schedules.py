"""The partition schedules of tests/sim/schedules.py: with Pre-Vote and CheckQuorum on
(the defaults) a member cut off for many election timeouts never raises its term and
rejoins without deposing the leader, and a bridge partition makes no leader flap; with
both turned off the same schedules break those invariants (so the checks can fail).

Seeds: the first DLEDGER_SIM_SCHEDULE_SEEDS (default 4) of `conftest.sim_seeds()`."""

from __future__ import annotations

import os

import pytest

from dledger.raft.messages import ParseResult
from tests.raft.cluster import Cluster
from tests.sim.checker import Violation
from tests.sim.conftest import sim_seeds
from tests.sim.schedules import ScheduleViolation, bridge, rejoin
from tests.sim.term_watch import TermWatch

pytestmark = pytest.mark.sim

OFF = {"pre_vote": False, "check_quorum": False}


def schedule_seeds() -> list[int]:
    return sim_seeds()[: int(os.environ.get("DLEDGER_SIM_SCHEDULE_SEEDS", "4"))]


@pytest.mark.parametrize("seed", schedule_seeds())
def test_a_member_cut_off_for_many_election_timeouts_keeps_its_term_and_rejoins_quietly(seed: int) -> None:
    out = rejoin(seed)
    assert out.max_term_of_cut_off == out.term_at_cut
    assert out.leader_changes == 0


@pytest.mark.parametrize("seed", schedule_seeds())
def test_without_pre_vote_the_cut_off_member_inflates_its_term(seed: int) -> None:
    with pytest.raises(ScheduleViolation, match="term inflation"):
        rejoin(seed, **OFF)


@pytest.mark.parametrize("seed", schedule_seeds())
def test_a_bridge_partition_makes_no_leader_flap(seed: int) -> None:
    assert bridge(seed).leader_changes <= 1


@pytest.mark.parametrize("seed", schedule_seeds())
def test_without_pre_vote_and_check_quorum_the_bridge_partition_flaps(seed: int) -> None:
    with pytest.raises(ScheduleViolation, match="leader flapping"):
        bridge(seed, **OFF)


@pytest.mark.parametrize("pre_vote", [True, False])
def test_the_simulations_term_watch_catches_inflation_without_pre_vote(pre_vote: bool) -> None:
    """TermWatch (run by every Simulation step) on an eager member cut off from all."""
    c = Cluster(3, seed=1, pre_vote=pre_vote)
    try:
        leader = c.elect()
        cut = next(n for n in c.ids if n != leader)
        c.net.isolate(cut)
        watch = TermWatch()
        for _ in range(2000 // c.step_ms):
            elector = c.core(cut).elector
            if c.core(cut).member_state.is_candidate and elector._vote_round is None:
                elector.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
            c.step()
            if pre_vote:
                watch.check(c.net, {n: c.core(n) for n in c.ids})
            else:
                try:
                    watch.check(c.net, {n: c.core(n) for n in c.ids})
                except Violation as exc:
                    assert "term inflation" in str(exc)
                    return
        assert pre_vote, "no inflation seen without pre-vote"
    finally:
        c.close()
