"""LeaderElector unit tests: DLedger's VoteRequestTest / HeartbeatRequestTest and the
candidate / leader / follower rules of DLEDGER.md §3.5."""

from __future__ import annotations

import random

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector
from dledger.raft.member_state import MemberState, MemoryTermStore, Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    ParseResult,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.store.memory import MemoryLogStore

pytestmark = pytest.mark.unit

PEERS3 = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


def make(
    self_id: str = "n0", peers: str = PEERS3, entries: list[int] | None = None, seed: int = 1, **cfg: object
) -> tuple[LeaderElector, MemberState, MemoryLogStore, MemoryTermStore]:
    config = DLedgerConfig(group="g", self_id=self_id, peers=peers, **cfg)  # type: ignore[arg-type]
    store = MemoryLogStore()
    for term in entries or []:
        store.term = term
        store.append(b"x")
    term_store = MemoryTermStore()
    ms = MemberState(config, store, term_store)
    return LeaderElector(config, ms, random.Random(seed)), ms, store, term_store


def vote(
    candidate: str | None, term: int, end_index: int = -1, end_term: int = -1, to: str = "n0", sender: str = "n1"
) -> VoteRequest:
    return VoteRequest(
        group="g",
        local_id=sender,
        remote_id=to,
        leader_id=candidate,
        term=term,
        ledger_end_index=end_index,
        ledger_end_term=end_term,
    )


def heartbeat(leader: str, term: int, to: str = "n0") -> HeartBeatRequest:
    return HeartBeatRequest(group="g", local_id=leader, remote_id=to, leader_id=leader, term=term)


# -- VoteRequestTest


def test_vote_normal() -> None:
    el, ms, _, ts = make(entries=[0, 0])  # ledger end index 1, term 0
    assert el.handle_vote(vote("n9", 0, 1, 0), 0).vote_result == VoteResult.REJECT_UNKNOWN_LEADER
    assert el.handle_vote(vote("n0", 0, 1, 0), 0).vote_result == VoteResult.REJECT_UNEXPECTED_LEADER
    assert el.handle_vote(vote("n1", 0, 1, -1), 0).vote_result == VoteResult.REJECT_EXPIRED_LEDGER_TERM
    assert el.handle_vote(vote("n1", 0, 0, 0), 0).vote_result == VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    # self vote through the local call
    self_resp = el.handle_vote(vote("n0", 0, 1, 0, sender="n0"), 0, self_call=True)
    assert self_resp.vote_result == VoteResult.ACCEPT
    assert ts.history[-1] == (0, "n0")
    # same term, voted for someone else, no leader known
    assert el.handle_vote(vote("n1", 0, 1, 0), 0).vote_result == VoteResult.REJECT_ALREADY_VOTED
    # a larger term: not ready, then accepted once the maintainer moved the term
    resp = el.handle_vote(vote("n1", 3, 1, 0), 0)
    assert resp.vote_result == VoteResult.REJECT_TERM_NOT_READY
    assert ms.current_term == 0
    assert el.tick(1) == []  # moves to term 3, sends nothing
    assert ms.current_term == 3 and ms.vote_for is None
    accepted = el.handle_vote(vote("n1", 3, 1, 0), 2)
    assert accepted.vote_result == VoteResult.ACCEPT and accepted.term == 3
    assert ts.history[-1] == (3, "n1")  # persisted before it was granted
    # repeated request for the same candidate is fine; a different one is rejected
    assert el.handle_vote(vote("n1", 3, 1, 0), 3).vote_result == VoteResult.ACCEPT
    assert el.handle_vote(vote("n2", 3, 1, 0, sender="n2"), 3).vote_result == VoteResult.REJECT_ALREADY_VOTED
    # an expired vote term
    expired = el.handle_vote(vote("n2", 2, 5, 0, sender="n2"), 3)
    assert expired.vote_result == VoteResult.REJECT_EXPIRED_VOTE_TERM and expired.term == 3
    # once the leader is known: already has leader
    assert el.handle_heartbeat(heartbeat("n1", 3), 4).code == ResponseCode.SUCCESS
    assert el.handle_vote(vote("n2", 3, 1, 0, sender="n2"), 5).vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER


def test_vote_checks_the_log_before_the_term() -> None:
    el, ms, _, _ = make(entries=[0, 2, 2])
    # a higher term does not help a shorter log, and the node does not move to that term
    assert el.handle_vote(vote("n1", 9, 5, 1), 0).vote_result == VoteResult.REJECT_EXPIRED_LEDGER_TERM
    assert el.handle_vote(vote("n1", 9, 1, 2), 0).vote_result == VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    assert ms.current_term == 0 and not el.need_increase_term_immediately


def test_vote_wrong_address_or_group() -> None:
    el, _, _, _ = make()
    assert el.handle_vote(vote("n1", 0, to="n2"), 0).code == ResponseCode.UNKNOWN_MEMBER
    req = vote("n1", 0)
    req.group = "other"
    assert el.handle_vote(req, 0).code == ResponseCode.UNKNOWN_GROUP


def test_vote_term_small_than_ledger_then_reelects_itself() -> None:
    # the log holds term-5 entries but the persisted term is 0 (e.g. a lost currterm file)
    el, ms, _, _ = make(self_id="n0", peers="n0-h:1", entries=[5, 5])
    resp = el.handle_vote(vote("n0", 0, 1, 5, sender="n0"), 0, self_call=True)
    assert resp.vote_result == VoteResult.REJECT_TERM_SMALL_THAN_LEDGER and resp.term == 5
    el.tick(0)  # self vote round: rejected, learns term 5
    assert el.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT
    assert ms.role is Role.CANDIDATE
    now = 0
    while not ms.is_leader and now < 10_000:
        now += 10
        el.tick(now)
    assert ms.is_leader and ms.current_term == 6  # above its log's last term, never in term 5 again


def test_vote_already_voted_then_recovers_to_leader() -> None:
    el, ms, _, ts = make(self_id="n0", peers="n0-h:1;n1-h:2")
    ms.set_vote_for("n1")  # voted for n1 in term 0
    assert el.handle_vote(vote("n0", 0, sender="n0"), 0, self_call=True).vote_result == VoteResult.REJECT_ALREADY_VOTED
    # n1 is gone; n0 keeps trying and wins with n1's vote in a later term
    out = el.tick(0)
    assert len(out) == 1 and out[0].target_id == "n1"
    req = out[0].request
    assert isinstance(req, VoteRequest)
    el.on_vote_response("n1", req, None, 1)
    el.tick(5000)  # round over: self rejected, n1 unreachable -> WAIT_TO_REVOTE
    now = 5000
    while not ms.is_leader and now < 20_000:
        now += 10
        for ob in el.tick(now):
            assert isinstance(ob.request, VoteRequest)
            granted = ob.request.term > 0
            el.on_vote_response(
                "n1",
                ob.request,
                VoteResponse(
                    term=ob.request.term, vote_result=VoteResult.ACCEPT if granted else VoteResult.REJECT_ALREADY_VOTED
                ),
                now,
            )
    assert ms.is_leader and ms.current_term >= 1
    assert ts.history[-1] == (ms.current_term, "n0")


def test_reject_taking_leadership() -> None:
    el, ms, _, _ = make(entries=[0], preferred_leader_ids="n0")
    ms.term_to_take_leadership = 0
    assert el.handle_vote(vote("n1", 0, 0, 0), 0).vote_result == VoteResult.REJECT_TAKING_LEADERSHIP
    # a longer log still gets the vote
    assert el.handle_vote(vote("n1", 0, 3, 0), 0).vote_result == VoteResult.ACCEPT


# -- HeartbeatRequestTest


def test_heartbeat() -> None:
    el, ms, _, _ = make()
    ms.next_term()
    ms.next_term()  # term 2
    assert el.handle_heartbeat(heartbeat("n3", 2), 0).code == ResponseCode.UNKNOWN_MEMBER
    assert el.handle_heartbeat(heartbeat("n0", 2), 0).code == ResponseCode.UNEXPECTED_MEMBER
    expired = el.handle_heartbeat(heartbeat("n1", 1), 0)
    assert expired.code == ResponseCode.EXPIRED_TERM and expired.term == 2
    assert el.handle_heartbeat(heartbeat("n1", 2), 0).code == ResponseCode.SUCCESS
    assert ms.role is Role.FOLLOWER and ms.leader_id == "n1"
    assert el.handle_heartbeat(heartbeat("n2", 2), 0).code == ResponseCode.INCONSISTENT_LEADER
    assert el.handle_heartbeat(heartbeat("n1", 2), 10).code == ResponseCode.SUCCESS
    # a larger term: TERM_NOT_READY first, SUCCESS after the maintainer ran (100 ms later)
    assert el.handle_heartbeat(heartbeat("n2", 3), 20).code == ResponseCode.TERM_NOT_READY
    assert ms.role is Role.CANDIDATE and ms.current_term == 2
    el.tick(120)
    assert ms.current_term == 3
    assert el.handle_heartbeat(heartbeat("n2", 3), 120).code == ResponseCode.SUCCESS
    assert ms.role is Role.FOLLOWER and ms.leader_id == "n2"


# -- candidate, leader and follower rules


def run_round(el: LeaderElector, now: int, answers: dict[str, VoteResponse | None]) -> ParseResult:
    out = el.tick(now)
    assert {o.target_id for o in out} == set(answers)
    for ob in out:
        assert isinstance(ob.request, VoteRequest)
        el.on_vote_response(ob.target_id, ob.request, answers[ob.target_id], now)
    el.tick(now + 1)
    return el.last_parse_result


@pytest.mark.parametrize(
    ("n1", "n2", "expected"),
    [
        (VoteResult.ACCEPT, VoteResult.REJECT_ALREADY_VOTED, ParseResult.PASSED),
        (VoteResult.REJECT_TERM_NOT_READY, VoteResult.REJECT_TERM_NOT_READY, ParseResult.REVOTE_IMMEDIATELY),
        (VoteResult.REJECT_ALREADY_VOTED, VoteResult.REJECT_ALREADY_VOTED, ParseResult.WAIT_TO_VOTE_NEXT),
        (VoteResult.REJECT_ALREADY_HAS_LEADER, VoteResult.ACCEPT, ParseResult.WAIT_TO_REVOTE),
        (VoteResult.REJECT_SMALL_LEDGER_END_INDEX, VoteResult.REJECT_EXPIRED_LEDGER_TERM, ParseResult.WAIT_TO_REVOTE),
        (None, None, ParseResult.WAIT_TO_REVOTE),
    ],
)
def test_candidate_parse_rules(n1: VoteResult | None, n2: VoteResult | None, expected: ParseResult) -> None:
    el, ms, _, _ = make()
    answers = {p: None if r is None else VoteResponse(term=0, vote_result=r) for p, r in (("n1", n1), ("n2", n2))}
    assert run_round(el, 0, answers) == expected
    assert ms.is_leader == (expected == ParseResult.PASSED)


def test_already_has_leader_waits_longer_and_bigger_term_is_adopted() -> None:
    el, _ms, _, _ = make()
    run_round(
        el,
        0,
        {
            "n1": VoteResponse(term=0, vote_result=VoteResult.REJECT_ALREADY_HAS_LEADER),
            "n2": VoteResponse(term=0, vote_result=VoteResult.ACCEPT),
        },
    )
    assert el.next_time_to_request_vote >= 1 + 300 + 2000 * 3
    el2, ms2, _, _ = make()
    run_round(
        el2,
        0,
        {
            "n1": VoteResponse(term=7, vote_result=VoteResult.REJECT_EXPIRED_VOTE_TERM),
            "n2": VoteResponse(term=0, vote_result=VoteResult.ACCEPT),
        },
    )
    assert el2.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT and ms2.known_max_term_in_group == 7
    now = 1
    while el2.tick(now) == [] and now < 5000:
        now += 1
    assert ms2.current_term == 7


def test_vote_interval_is_random_within_bounds_and_seeded() -> None:
    times = []
    for seed in (1, 1, 2):
        el, _, _, _ = make(seed=seed)
        run_round(el, 0, {p: VoteResponse(term=0, vote_result=VoteResult.REJECT_ALREADY_VOTED) for p in ("n1", "n2")})
        assert 1 + 300 <= el.next_time_to_request_vote < 1 + 1000
        times.append(el.next_time_to_request_vote)
    assert times[0] == times[1]


def test_single_node_becomes_leader_and_keeps_term_on_restart() -> None:
    el, ms, store, ts = make(self_id="n0", peers="n0-h:1")
    assert el.tick(0) == []
    assert ms.is_leader and ms.current_term == 0
    ms2 = MemberState(ms.config, store, ts)
    el2 = LeaderElector(ms.config, ms2, random.Random(3))
    el2.tick(0)
    assert ms2.is_leader and ms2.current_term == 0


def become_leader(el: LeaderElector, now: int = 0) -> None:
    run_round(el, now, {p: VoteResponse(term=0, vote_result=VoteResult.ACCEPT) for p in ("n1", "n2")})
    assert el.member_state.is_leader


def heartbeat_round(el: LeaderElector, now: int, codes: dict[str, ResponseCode | None], term: int = 0) -> None:
    out = el.tick(now)
    assert {o.target_id for o in out} == set(codes)
    for ob in out:
        assert isinstance(ob.request, HeartBeatRequest)
        code = codes[ob.target_id]
        el.on_heartbeat_response(
            ob.target_id, ob.request, None if code is None else HeartBeatResponse(code=code, term=term), now
        )


def test_leader_steps_down_after_missing_quorum_for_three_beats() -> None:
    el, ms, _, _ = make()
    become_leader(el)
    heartbeat_round(el, 1, {"n1": ResponseCode.SUCCESS, "n2": None})
    assert el.last_succ_heart_beat_time == 1
    now = 1
    while ms.is_leader:
        now += 2000
        heartbeat_round(el, now, {"n1": None, "n2": None})
        el.tick(now + 1990)
    assert ms.role is Role.CANDIDATE and ms.current_term == 0
    assert 6000 < now - 1 + 1990 <= 4 * 2000 + 1990
    assert el.peers_live_table == {"n1": False, "n2": False}


def test_leader_steps_down_on_a_higher_term() -> None:
    el, ms, _, _ = make()
    become_leader(el)
    heartbeat_round(el, 1, {"n1": ResponseCode.EXPIRED_TERM, "n2": ResponseCode.SUCCESS}, term=4)
    assert ms.role is Role.CANDIDATE and ms.known_max_term_in_group == 4


def test_leader_resends_at_once_when_followers_are_not_ready() -> None:
    el, ms, _, _ = make()
    become_leader(el)
    heartbeat_round(el, 1, {"n1": ResponseCode.TERM_NOT_READY, "n2": ResponseCode.TERM_NOT_READY})
    # the round is complete: it is evaluated and the heartbeats go out again at once
    assert len(el.tick(2)) == 2
    assert ms.is_leader and el.last_send_heart_beat_time == 2


def test_follower_times_out_after_max_heart_beat_leak() -> None:
    el, ms, _, _ = make()
    el.handle_heartbeat(heartbeat("n1", 0), 0)
    assert ms.is_follower
    el.tick(6000)
    assert ms.is_follower
    el.handle_heartbeat(heartbeat("n1", 0), 5000)
    el.tick(11000)
    assert ms.is_follower
    el.tick(11001)
    assert ms.role is Role.CANDIDATE and ms.current_term == 0
