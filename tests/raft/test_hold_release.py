"""How a vote hold ends (dledger.raft.vote_hold): the log-end floor that replaces an
unclean hold once every member reported its log end, the rejoin hold of a member that
lost its disk (no time limit, catches up past its recorded commit index), and the group
id every Vote, HeartBeat and Push carries."""

from __future__ import annotations

import random

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import VoteRequest, VoteResponse, VoteResult
from dledger.raft.vote_hold import VoteHold
from dledger.store.memory import MemoryLogStore
from tests.raft.test_vote_hold import HOLD_MS, PEERS3, heartbeat, vote

pytestmark = pytest.mark.unit


def member(
    entries: int = 2, *, unclean: bool = True, rejoin_index: int | None = None, group_id: str = "g1"
) -> tuple[LeaderElector, MemberState]:
    """n0 holding `entries` entries of term 1, as a candidate of term 1."""
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS3, max_vote_hold_ms=HOLD_MS)
    store = MemoryLogStore()
    store.term = 1
    for _ in range(entries):
        store.append(b"x")
    ms = MemberState(config, store, MemoryTermStore(term=1))
    ms.group_id = group_id
    elector = LeaderElector(config, ms, random.Random(1), unclean_restart=unclean, rejoin_index=rejoin_index)
    elector.change_role_to_candidate(1)
    return elector, ms


def probe(elector: LeaderElector, now: int) -> list[VoteRequest]:
    """Tick until the member asks every member for its log end; the requests."""
    for t in range(now, now + 1_000, 5):
        out = [o.request for o in elector.tick(t) if isinstance(o.request, VoteRequest)]
        if out:
            assert all(r.pre_vote for r in out)
            return out
    raise AssertionError("no probe")


def answer(elector: LeaderElector, request: VoteRequest, end: tuple[int, int] | None, now: int) -> None:
    response = None
    if end is not None:
        response = VoteResponse(
            local_id=request.remote_id,
            remote_id="n0",
            term=1,
            vote_result=VoteResult.ACCEPT,
            ledger_end_term=end[0],
            ledger_end_index=end[1],
        )
    elector.on_vote_response(request.remote_id, request, response, now)


def test_every_member_s_log_end_replaces_the_hold_by_a_floor() -> None:
    elector, _ = member(entries=2)  # n0 ends at (1, 1)
    requests = probe(elector, 0)
    ends = {"n1": (1, 5), "n2": (1, 3)}
    for request in requests:
        answer(elector, request, ends[request.remote_id], 10)
    elector.tick(20)
    hold = elector.vote_hold
    assert not hold.active and hold.floor == (1, 5)
    # it votes again, but only for a log that reaches the floor
    assert elector.handle_vote(vote("n2", 1, end_index=3), 30).vote_result == VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    assert elector.handle_vote(vote("n1", 1, end_index=5), 40).vote_result == VoteResult.ACCEPT
    # and never stands itself: its own log is below the floor
    for now in range(50, 3_000, 10):
        assert not any(isinstance(o.request, VoteRequest) and not o.request.pre_vote for o in elector.tick(now))


def test_a_quorum_of_log_ends_is_not_enough() -> None:
    """n0 and n2 are a quorum, but n1 (silent) may hold an entry both lack."""
    elector, _ = member(entries=2)
    for request in probe(elector, 0):
        answer(elector, request, (1, 1) if request.remote_id == "n2" else None, 10)
    elector.tick(20)
    assert elector.vote_hold.active and elector.vote_hold.floor is None
    assert elector.handle_vote(vote("n2", 1, end_index=1), 30).vote_result == VoteResult.REJECT_HOLDING_AFTER_RESTART


def test_the_member_with_the_highest_log_end_stands_at_once() -> None:
    elector, ms = member(entries=6)  # n0 ends at (1, 5): the highest
    for request in probe(elector, 0):
        answer(elector, request, (1, 3), 10)
    votes: list[VoteRequest] = []
    for now in range(20, 400, 5):
        out = elector.tick(now)
        votes += [o.request for o in out if isinstance(o.request, VoteRequest) and not o.request.pre_vote]
        for o in out:  # every member grants what it is asked
            if isinstance(o.request, VoteRequest):
                answer(elector, o.request, (1, 3), now)
        if ms.is_leader:
            break
    assert votes and ms.is_leader


def test_a_floor_ends_with_the_unclean_hold_s_maximum() -> None:
    hold = VoteHold(active=True, max_ms=100)
    assert hold.release(0, -1, None, 1)
    hold.on_log_ends([(1, 5), (1, 2)])
    assert not hold.admits((1, 4))
    assert not hold.release(99, -1, None, 1) and hold.floor == (1, 5)
    hold.release(100, -1, None, 1)
    assert hold.floor is None and hold.expired and hold.admits((0, -1))


def test_a_rejoin_hold_has_no_time_limit_and_asks_for_no_floor() -> None:
    elector, ms = member(entries=0, unclean=False, rejoin_index=7)
    rejoined: list[bool] = []
    elector.on_rejoined = lambda: rejoined.append(True)
    for now in range(0, 3 * HOLD_MS, 50):
        assert elector.tick(now) == []  # no probe, no vote
    assert elector.vote_hold.active
    assert elector.handle_vote(vote("n1", 1, end_index=9), 3 * HOLD_MS).vote_result == (
        VoteResult.REJECT_HOLDING_AFTER_RESTART
    )
    # a leader whose log ends at 4: catching up to 4 is not enough, the recorded commit index was 7
    now = 3 * HOLD_MS + 10
    elector.handle_heartbeat(heartbeat("n1", 1, 4), now)
    for _ in range(8):
        ms.store.append(b"y")
    ms.update_committed_index(4)
    assert elector.holding_vote(now + 1) and not rejoined
    ms.update_committed_index(7)
    assert not elector.holding_vote(now + 2)
    assert rejoined == [True]
    assert not elector.holding_vote(now + 3) and rejoined == [True]  # told once


def test_requests_of_another_group_id_are_refused() -> None:
    elector, ms = member(unclean=False, group_id="aaaa")
    request = vote("n1", 2, end_index=5)
    request.group_id = "bbbb"
    answer_ = elector.handle_vote(request, 0)
    assert answer_.code == ResponseCode.UNKNOWN_GROUP and ms.vote_for is None
    beat = heartbeat("n1", 1, 1)
    beat.group_id = "bbbb"
    assert elector.handle_heartbeat(beat, 1).code == ResponseCode.UNKNOWN_GROUP
    assert ms.leader_id is None
    beat.group_id = ""  # unknown (an older member): accepted
    assert elector.handle_heartbeat(beat, 2).code == ResponseCode.SUCCESS


def test_a_joining_member_adopts_its_first_leader_s_group_id() -> None:
    elector, ms = member(unclean=False, rejoin_index=-1, group_id="")
    adopted: list[str] = []
    elector.on_group_id = adopted.append
    beat = heartbeat("n1", 1, 1)
    beat.group_id = "cafe"
    assert elector.handle_heartbeat(beat, 0).code == ResponseCode.SUCCESS
    assert ms.group_id == "cafe" and adopted == ["cafe"]
    other = heartbeat("n2", 1, 1)
    other.group_id = "beef"
    assert elector.handle_heartbeat(other, 1).code == ResponseCode.UNKNOWN_GROUP
    assert adopted == ["cafe"]


def test_a_floor_ends_when_the_member_leads() -> None:
    """A quorum elected it with its log at least the floor: it holds nothing a leader
    could lack. Before, the floor stayed on the leader for `max_vote_hold_ms`, which
    then logged that entries "may be lost"."""
    elector, ms = member(entries=6)  # n0 ends at (1, 5): the highest
    for request in probe(elector, 0):
        answer(elector, request, (1, 3), 10)
    now = 20
    while not ms.is_leader:
        assert now < 400, "n0 was not elected"
        for o in elector.tick(now):
            if isinstance(o.request, VoteRequest):
                answer(elector, o.request, (1, 3), now)
        now += 5
    assert not elector.holding_vote(now)
    hold = elector.vote_hold
    assert not hold.pending and hold.released and not hold.expired
    assert not elector.holding_vote(now + 2 * HOLD_MS) and not hold.expired
