"""The founding hold (dledger.raft.vote_hold): a member started with an empty store and
`new` asks every member for its log end before it votes or stands, since it may be a
member that lost its whole directory. A quorum of empty answers founds the group; an
answer with an entry or a leader turns the hold into a rejoin hold."""

from __future__ import annotations

import random

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import VoteRequest, VoteResponse, VoteResult
from dledger.raft.vote_hold import FOUNDING_TERMS, VoteHold, founding_term
from dledger.store.memory import MemoryLogStore
from tests.raft.cluster import Cluster
from tests.raft.test_hold_release import probe
from tests.raft.test_vote_hold import HOLD_MS, PEERS3, heartbeat, vote

pytestmark = pytest.mark.unit


class Founder:
    """n0, new and empty, holding as a founding member; what its callbacks were told."""

    def __init__(self) -> None:
        config = DLedgerConfig(group="g", self_id="n0", peers=PEERS3, max_vote_hold_ms=HOLD_MS)
        self.member = MemberState(config, MemoryLogStore(), MemoryTermStore())
        self.elector = LeaderElector(config, self.member, random.Random(1), rejoin_index=-1, founding=True)
        self.calls: list[str] = []
        self.elector.on_rejoined = lambda: self.calls.append("ended")
        self.elector.on_group_exists = lambda: self.calls.append("exists")

    def answer(
        self,
        request: VoteRequest,
        end: tuple[int, int] | None,
        now: int,
        leader: str | None = None,
        leader_seen: bool = False,
    ) -> None:
        """`request`'s addressee answers with its log end (None: it is silent)."""
        response = None
        if end is not None:
            response = VoteResponse(
                local_id=request.remote_id,
                remote_id="n0",
                leader_id=leader,
                term=max(end[0], 0),
                vote_result=VoteResult.REJECT_HOLDING_AFTER_RESTART,
                ledger_end_term=end[0],
                ledger_end_index=end[1],
                leader_seen=leader_seen,
            )
        self.elector.on_vote_response(request.remote_id, request, response, now)

    def vote(self, candidate: str, term: int, now: int) -> VoteResult:
        """What it answers an empty candidate's vote in `term` (asked again after a tick:
        a request of a higher term first only moves it there)."""
        self.elector.handle_vote(vote(candidate, term, end_index=-1, end_term=-1), now)
        self.elector.tick(now)
        return self.elector.handle_vote(vote(candidate, term, end_index=-1, end_term=-1), now).vote_result

    def stands_within(self, start: int, ms: int) -> int | None:
        """The term it asks for real votes in (not a probe) within `ms`, or None; n1
        grants its pre-votes (the first tick also reads the answers of a round that ended)."""
        for now in range(start, start + ms, 5):
            for out in self.elector.tick(now):
                request = out.request
                if isinstance(request, VoteRequest) and not request.pre_vote:
                    return request.term
                if isinstance(request, VoteRequest) and out.target_id == "n1" and not self.elector.vote_hold.pending:
                    grant = VoteResponse(local_id="n1", remote_id="n0", term=0, vote_result=VoteResult.ACCEPT)
                    self.elector.on_vote_response("n1", request, grant, now)
        return None


EMPTY = (-1, -1)


def test_a_founding_member_holds_until_it_asked() -> None:
    founder = Founder()
    hold = founder.elector.vote_hold
    assert hold.active and hold.kind == "founding" and hold.state == "founding"
    assert founder.vote("n1", 1, 0) == VoteResult.REJECT_HOLDING_AFTER_RESTART


def test_a_quorum_of_empty_members_founds_the_group() -> None:
    """n1 answers empty (a founder holding too), n2 has not started: n0 and n1 are a
    quorum, and neither has an entry or a leader."""
    founder = Founder()
    for request in probe(founder.elector, 0):
        founder.answer(request, EMPTY if request.remote_id == "n1" else None, 10)
    term = founder.stands_within(2_000, 5_000)  # past the round's deadline: n2 stays silent
    assert term is not None and 1 <= term <= FOUNDING_TERMS  # its founding's own term, not term 0
    assert not founder.elector.vote_hold.pending
    assert founder.calls == ["ended"]  # the marker goes
    assert founder.vote("n1", term + 1, 7_000) == VoteResult.ACCEPT


def test_a_founding_member_that_hears_another_founders_term_adopts_it() -> None:
    """Its own random term is only for a term it raises itself: a vote request of another
    founder's term (here 5) moves it there, not past it."""
    founder = Founder()
    for request in probe(founder.elector, 0):
        founder.answer(request, EMPTY if request.remote_id == "n1" else None, 10)
    founder.elector.tick(2_000)  # reads the answers: founded, its own term is due
    assert founder.member.min_next_term >= 1
    assert founder.vote("n1", 5, 2_001) == VoteResult.ACCEPT
    assert founder.member.current_term == 5 and founder.member.min_next_term == 0


def test_a_leaders_heartbeat_of_a_higher_term_is_evidence_before_it_is_followed() -> None:
    """A founding leader leads a term of its own, so a founding member at term 0 answers
    its first heartbeat TERM_NOT_READY and follows only at the next. From the first one
    on it says that it has seen a leader: a member that lost its disk and asks it then
    rejoins instead of founding with it (chaos wipe-new lost 425 entries once in CI when
    the stale member was stopped in between)."""
    founder = Founder()
    seen: list[bool] = []
    founder.member.on_leader_seen = lambda: seen.append(True)
    answer = founder.elector.handle_heartbeat(heartbeat("n1", 700_001, -1), 10)
    assert answer.code == ResponseCode.TERM_NOT_READY and founder.member.leader_id is None
    assert founder.member.leader_seen and seen == [True]  # persisted before the answer
    ask = vote("n2", 0, end_index=-1, end_term=-1)
    ask.pre_vote = True
    assert founder.elector.handle_vote(ask, 11).leader_seen


def test_a_founding_member_that_heard_another_founding_term_stands_in_it() -> None:
    founder = Founder()
    founder.member.next_term()  # moved to term 1 by another founding member's vote request
    founder.member.change_to_candidate(founder.member.current_term)
    for request in probe(founder.elector, 0):
        founder.answer(request, EMPTY if request.remote_id == "n1" else None, 10)
    assert founder.stands_within(2_000, 5_000) == 1  # in the term it heard of, as before: no random one


def test_foundings_stand_in_terms_of_their_own() -> None:
    """Two foundings of one group hold different terms at their entries (but with a
    chance of 1 in FOUNDING_TERMS), so a member of the first finds the second's leader
    contradicting its committed entries (tests/raft/test_diverged.py)."""
    terms = {founding_term(random.Random(seed)) for seed in range(100)}
    assert len(terms) == 100 and all(1 <= t <= FOUNDING_TERMS for t in terms)


def test_a_founding_member_asked_by_a_peer_asks_every_member_at_once() -> None:
    """n0 asked while nobody was up; its next round is due 0.3-1 s later. A pre-vote of n1
    (a founding member standing) makes it ask at its next tick: n1 is up and founding,
    and its answer, given before any leader's first heartbeat, founds the group with n0.
    (Asking only at its next round, n0 learned of the leader n1 and n2 had meanwhile
    elected, and held its vote as a rejoining member until caught up: a leader lost in
    that window left no quorum.)"""
    founder = Founder()
    for request in probe(founder.elector, 0):
        founder.answer(request, None, 1)  # nobody is up yet
    assert founder.elector.tick(10) == []  # the round ended; the next is 0.3-1 s away
    ask = vote("n1", 700_001, end_index=-1, end_term=-1)
    ask.pre_vote = True
    assert founder.elector.handle_vote(ask, 20).vote_result == VoteResult.REJECT_HOLDING_AFTER_RESTART
    requests = [o.request for o in founder.elector.tick(25) if isinstance(o.request, VoteRequest)]
    assert sorted(r.remote_id for r in requests) == ["n1", "n2"] and all(r.pre_vote for r in requests)
    for request in requests:
        founder.answer(request, EMPTY if request.remote_id == "n1" else None, 27)
    founder.elector.tick(30)
    assert not founder.elector.vote_hold.pending and founder.calls == ["ended"]
    assert founder.elector.tick(35) == []  # asked once: the next round keeps its time


def test_only_a_founding_hold_asks_when_asked() -> None:
    """A rejoining member (or one without a hold) keeps its rounds' times when asked."""
    founder = Founder()
    founder.elector.vote_hold.kind = "rejoin"
    assert founder.elector.tick(0) == []  # a rejoin hold does not ask for log ends
    ask = vote("n1", 1, end_index=-1, end_term=-1)
    ask.pre_vote = True
    founder.elector.handle_vote(ask, 20)
    assert founder.elector.tick(25) == []


def test_its_own_answer_alone_is_not_a_quorum() -> None:
    founder = Founder()
    for request in probe(founder.elector, 0):
        founder.answer(request, None, 10)
    assert probe(founder.elector, 2_000)  # past the round's deadline: it asks again
    assert founder.elector.vote_hold.active and founder.elector.vote_hold.kind == "founding"
    assert founder.calls == []


@pytest.mark.parametrize(
    ("end", "leader", "seen"),
    [((3, 41), None, False), (EMPTY, "n2", False), ((1, 0), "n1", True), (EMPTY, None, True)],
    ids=["an entry", "a leader", "both", "a leader before"],
)
def test_an_answer_with_an_entry_or_a_leader_makes_it_rejoin(
    end: tuple[int, int], leader: str | None, seen: bool
) -> None:
    """It lost its directory (or joins late): the group exists. Before, it founded again:
    its lost vote and empty log elected a member without what it had acknowledged. "A
    leader before": a member of a group that never wrote an entry, which followed a
    leader once (`leader_seen`, persisted) and knows none now."""
    founder = Founder()
    for request in probe(founder.elector, 0):
        # the other one answers empty: a quorum of empty answers does not outweigh it
        answer_end = end if request.remote_id == "n1" else EMPTY
        n1 = request.remote_id == "n1"
        founder.answer(request, answer_end, 10, leader=leader if n1 else None, leader_seen=seen and n1)
    assert founder.stands_within(2_000, 3 * HOLD_MS) is None
    hold = founder.elector.vote_hold
    assert hold.active and hold.kind == "rejoin" and hold.state == "rejoin"
    assert founder.calls == ["exists"]  # the marker stays, without its founding mark
    assert not hold.wants_log_ends  # a rejoin waits for a leader, with no time limit
    assert founder.vote("n2", 9, 4 * HOLD_MS) == VoteResult.REJECT_HOLDING_AFTER_RESTART


def test_a_founding_member_that_follows_a_leader_ends_its_hold_by_catching_up() -> None:
    founder = Founder()
    for now in (10, 20):  # the others founded first and wrote nothing (the first one moves its term)
        founder.elector.handle_heartbeat(heartbeat("n1", 1, -1), now)
        founder.elector.tick(now)
    assert not founder.elector.holding_vote(21)
    assert founder.calls == ["ended"]


def test_the_answers_alone() -> None:
    hold = VoteHold(active=True, max_ms=0, kind="founding")
    assert hold.on_founding_answers("n0", {"n0": EMPTY}, {}, quorum=False) == ""
    assert hold.active and hold.kind == "founding"
    assert hold.on_founding_answers("n0", {"n0": EMPTY, "n1": EMPTY}, {}, quorum=True) == "founded"
    assert not hold.pending
    assert hold.on_founding_answers("n0", {"n0": EMPTY, "n1": (1, 0)}, {}, quorum=True) == ""  # decided once
    rejoin = VoteHold(active=True, max_ms=0, kind="rejoin")
    assert rejoin.on_founding_answers("n0", {"n0": EMPTY, "n1": EMPTY}, {}, quorum=True) == ""  # not founding
    assert rejoin.active and not rejoin.wants_log_ends


def test_a_member_remembers_that_it_followed_a_leader() -> None:
    """`leader_seen` is set, and handed to the shell to persist, when a member first
    follows or leads, before it answers; every vote answer carries it."""
    founder = Founder()
    persisted: list[bool] = []
    founder.member.on_leader_seen = lambda: persisted.append(founder.member.leader_seen)
    assert founder.elector.handle_vote(vote("n1", 0, end_index=-1, end_term=-1), 0).leader_seen is False
    for now in (10, 20):
        founder.elector.handle_heartbeat(heartbeat("n1", 1, -1), now)
        founder.elector.tick(now)
    founder.elector.handle_heartbeat(heartbeat("n1", 1, -1), 30)
    assert persisted == [True]  # once
    assert founder.elector.handle_vote(vote("n2", 1, end_index=-1, end_term=-1), 40).leader_seen is True


def test_a_rejoining_member_tells_others_that_its_group_exists() -> None:
    """Its answers say so (`leader_seen`), as a member that followed a leader does: a
    member that lost its disk too, started with `new`, must not count it as a founder."""
    founder = Founder()
    for request in probe(founder.elector, 0):
        founder.answer(request, (1, 4) if request.remote_id == "n1" else EMPTY, 10)
    founder.elector.tick(2_000)
    assert founder.elector.vote_hold.state == "rejoin" and not founder.member.leader_seen
    assert founder.elector.handle_vote(vote("n2", 0, end_index=-1, end_term=-1), 2_010).leader_seen is True


@pytest.mark.parametrize("seed", range(6))
def test_a_member_started_before_its_peers_founds_with_them_and_a_lost_leader_is_replaced(seed: int) -> None:
    """n2 starts first and asks while nobody is up; n0 and n1 start a moment later, found
    the group, elect and commit entries, while their leader's heartbeats and pushes do
    not reach n2 yet. n2 founds with them (it asks again when they ask it), so when that
    leader is lost, n2 and the other member elect a new one. Before, n2 learned only at
    its next round that the group existed and had a leader, and held its vote as a
    rejoining member until that leader brought it up to date: the leader lost then left
    n2 holding and no quorum (every seed here)."""
    cluster = Cluster(seed=seed, founding=True, min_vote_interval_ms=300, max_vote_interval_ms=1000)
    cluster.kill("n0")
    cluster.kill("n1")
    cluster.run_for(20)  # n2's first round: nobody answers
    cluster.net.filter = lambda src, dst, msg: dst == "n2" and type(msg).__name__ in LEADERS_MESSAGES
    for node_id in ("n0", "n1"):
        cluster.restart(node_id, founding=True)
    cluster.run_until(lambda: cluster.leader() is not None)
    first = cluster.leader()
    assert first is not None
    written = cluster.append(*(b"e%d" % k for k in range(20)))
    cluster.run_until(written.done)
    hold = cluster.core("n2").elector.vote_hold
    cluster.run_until(lambda: hold.state != "founding", 10_000)  # it asked again meanwhile
    assert hold.state == ""  # founded, not rejoining
    cluster.kill(first)
    cluster.net.filter = None
    cluster.run_until(lambda: cluster.leader() not in (None, first), 10_000)
    after = cluster.append(b"after")
    cluster.run_until(after.done)
    assert cluster.bodies(cluster.leader() or "") == [b"e%d" % k for k in range(20)] + [b"after"]


LEADERS_MESSAGES = {"HeartBeatRequest", "PushEntryRequest"}
