"""What lets a threaded member's passes sleep while idle: `RaftDriver.idle_wait` and the
dispatcher pass name the passes that have no timer running (only an event can give them
work then), and the event that gives them work wakes them: an eager driver wakes the
entry handler when a push stays queued, and the threaded node wakes a new leader's
dispatchers and quorum pass (tests/node/test_node.py).

An idle member used to wake ~1,100 times a second (every pass every 10 ms, warm-ahead
every 5 ms): bench/idle_probe.py."""

from __future__ import annotations

import pytest

from dledger._store_py_codec import encode_entry
from dledger.raft.driver import HANDLER, IDLE_WAIT_MS, QUORUM, RaftDriver
from dledger.raft.messages import PushEntryRequest, PushType
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def _replicated_cluster() -> tuple[Cluster, str, str]:
    """A group with one entry everywhere; (cluster, leader, a follower)."""
    cluster = Cluster(3, seed=1)
    leader = cluster.elect()
    cluster.append(b"a")
    end = cluster.core(leader).member_state.ledger_end_index
    cluster.run_until(lambda: all(cluster.core(m).member_state.ledger_end_index == end for m in cluster.ids))
    return cluster, leader, next(m for m in cluster.ids if m != leader)


def test_passes_without_timers_ask_to_sleep_until_woken() -> None:
    cluster, leader, follower = _replicated_cluster()
    lead, follow, now = cluster.members[leader].driver, cluster.members[follower].driver, cluster.now
    assert lead.idle_wait(QUORUM) is None  # the leader's commit check times client requests out
    assert follow.idle_wait(QUORUM) == IDLE_WAIT_MS
    assert follow.dispatcher_pass(leader, now) == IDLE_WAIT_MS  # nothing to push unless leader
    assert lead.dispatcher_pass(follower, now) is None  # the leader's dispatchers keep their timers
    assert lead.idle_wait(HANDLER) == follow.idle_wait(HANDLER) == IDLE_WAIT_MS  # no push queued


def _append_push(cluster: Cluster, leader: str, follower: str, first: int) -> PushEntryRequest:
    """An APPEND of one entry at `first` from `leader`, in its term."""
    term = cluster.core(leader).member_state.current_term
    return PushEntryRequest(
        group="g",
        local_id=leader,
        remote_id=follower,
        leader_id=leader,
        term=term,
        type=PushType.APPEND,
        prev_index=first - 1,
        prev_term=term,
        commit_index=-1,
        first_index=first,
        count=1,
        entries=encode_entry(1, first, term, 0, b"x"),
        last_term=term,
    )


@pytest.mark.parametrize(("gap", "woken"), [(1, [HANDLER]), (0, [])])
def test_an_eager_driver_wakes_the_handler_for_a_push_left_queued(gap: int, woken: list[str]) -> None:
    """A push that must wait for an earlier one stays queued, and the handler's pass,
    asleep, must time it out; one handled at once needs nobody."""
    cluster, leader, follower = _replicated_cluster()
    core = cluster.core(follower)
    wakes: list[str] = []
    eager = RaftDriver(core, lambda _outbound: None, wakes.append, eager=True)
    end = core.member_state.ledger_end_index
    answer = eager.deliver(_append_push(cluster, leader, follower, end + 1 + gap), cluster.now)
    assert answer.done() is not bool(gap)  # queued, or handled in the caller's thread
    assert wakes == woken
    assert (eager.idle_wait(HANDLER) is None) is bool(gap)  # it polls while a push waits
