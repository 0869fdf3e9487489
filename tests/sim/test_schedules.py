"""The partition schedules of tests/sim/schedules.py: with Pre-Vote and CheckQuorum on
(the defaults) a member cut off for many election timeouts never raises its term and
rejoins without deposing the leader, and a bridge partition makes no leader flap; with
both turned off the same schedules break those invariants (so the checks can fail).

Seeds: the first DLEDGER_SIM_SCHEDULE_SEEDS (default 4) of `conftest.sim_seeds()`."""

from __future__ import annotations

import os

import pytest

from tests.sim.conftest import sim_seeds
from tests.sim.schedules import ScheduleViolation, bridge, rejoin

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
