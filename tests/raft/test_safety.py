"""Safety where DLedger is unsafe, one test per DLEDGER.md §10 item (and DESIGN.md §4):
APPEND prev check, current-term-only commit + NOOP, ledgerEndTerm = last entry's term
(#52), follower commit clamp, TRUNCATE never removes committed entries, vote persisted
before granted, #61 (wiped follower resynced), #316 (commit above ledger end), Raft
Figure 8. Every test says how it would fail on the unsafe behaviour."""

from __future__ import annotations

import random

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector
from dledger.raft.entry_handler import EntryHandler
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import (
    HeartBeatRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResult,
)
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.store.memory import MemoryLogStore
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction

PEERS = "n0-h:1;n1-h:2;n2-h:3"


def leader_state(terms: list[int], current_term: int) -> tuple[MemberState, QuorumAckChecker]:
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS)
    store = MemoryLogStore()
    for t in terms:
        store.term = t
        store.append(b"x")
    ms = MemberState(config, store, MemoryTermStore(current_term, "n0"))
    ms.change_to_leader(current_term)
    return ms, QuorumAckChecker(config, ms)


def test_old_term_entries_are_not_committed_by_counting() -> None:
    # Unsafe (DLedger 0.2.7, #4: water marks counted regardless of entry term): the first
    # check() would commit index 1, a term-2 entry held by a majority, and the assert fails.
    ms, q = leader_state([1, 2], current_term=4)  # index 1 is a term-2 entry
    q.update_peer_water_mark(4, "n1", 1)
    q.check(0)
    assert ms.committed_index == -1  # DLedger 0.2.7 would commit index 1 here
    ms.store.term = 4
    ms.store.append(b"current")  # index 2, term 4
    q.update_peer_water_mark(4, "n1", 2)
    q.check(0)
    assert ms.committed_index == 2  # the current-term entry commits the older ones with it


def test_pending_futures_complete_time_out_and_end_with_the_term() -> None:
    ms, q = leader_state([4, 4, 4], current_term=4)
    ok = q.wait_ack(4, 0, 0, now_ms=0)
    slow = q.wait_ack(4, 1, 2, now_ms=0)
    q.update_peer_water_mark(4, "n1", 0)
    q.check(10)
    assert ok.result() == 0 and not slow.done()
    q.check(2500)
    exc = slow.exception()
    assert isinstance(exc, DLedgerError) and exc.code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    later = q.wait_ack(4, 3, 3, now_ms=3000)
    ms.change_to_candidate(4)
    q.on_role_change(4, ms.role)
    exc = later.exception()
    assert isinstance(exc, DLedgerError) and exc.code == ResponseCode.TERM_CHANGED


def follower(terms: list[int], committed: int, term: int = 5) -> tuple[MemberState, EntryHandler]:
    config = DLedgerConfig(group="g", self_id="n1", peers=PEERS)
    store = MemoryLogStore()
    for t in terms:
        store.term = t
        store.append(b"x")
    ms = MemberState(config, store, MemoryTermStore(term, None))
    LeaderElector(config, ms, random.Random(0)).handle_heartbeat(
        HeartBeatRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=term), 0
    )
    ms.update_committed_index(committed)
    return ms, EntryHandler(config, ms)


def push(kind: PushType, prev_index: int, prev_term: int, commit: int, first: int = -1) -> PushEntryRequest:
    return PushEntryRequest(
        group="g",
        local_id="n0",
        remote_id="n1",
        leader_id="n0",
        term=5,
        type=kind,
        prev_index=prev_index,
        prev_term=prev_term,
        commit_index=commit,
        first_index=first,
    )


def process(handler: EntryHandler, req: PushEntryRequest) -> int:
    fut = handler.handle_push(req, 0)
    while handler.run_once(0):
        pass
    return fut.result().code


def test_truncate_never_removes_committed_entries() -> None:
    # Unsafe (truncate whatever the leader says): the first TRUNCATE would cut committed
    # index 2: end_index would be 1 and the committed index above the end (#316).
    ms, h = follower([1, 1, 2, 2, 2], committed=2)
    # a TRUNCATE below the commit index (a leader whose match point is stale): the
    # committed entries stay, only the uncommitted tail goes
    assert process(h, push(PushType.TRUNCATE, 1, 1, commit=4, first=2)) == ResponseCode.SUCCESS
    assert ms.store.end_index == 2 and ms.committed_index == 2
    assert [ms.store.term_at(i) for i in range(3)] == [1, 1, 2]
    assert process(h, push(PushType.TRUNCATE, 2, 2, commit=9, first=3)) == ResponseCode.SUCCESS
    assert ms.store.end_index == 2
    assert ms.committed_index == 2 <= ms.store.end_index  # #316: never above the ledger end


def test_commit_only_up_to_what_the_push_proved() -> None:
    # Unsafe (follower commit = min(ledgerEnd, request.commitIndex), DLedger): the first
    # COMMIT would commit 4, including the stale term-2 tail the leader does not have.
    # indexes 3..4 are a stale tail of term 2; the leader's log has term 3 there
    ms, h = follower([1, 1, 1, 2, 2], committed=1)
    assert process(h, push(PushType.COMMIT, 2, 1, commit=4)) == ResponseCode.SUCCESS
    assert ms.committed_index == 2  # not 4: indexes 3, 4 were not proven to match
    assert process(h, push(PushType.COMMIT, 4, 3, commit=4)) == ResponseCode.INCONSISTENT_STATE
    assert ms.committed_index == 2
    assert process(h, push(PushType.COMPARE, 3, 3, commit=4)) == ResponseCode.INCONSISTENT_STATE
    assert ms.committed_index == 2


def test_compare_reports_the_conflicting_term_start() -> None:
    # (not a §10 item: the leader's fast walk back over a conflicting term)
    _ms, h = follower([1, 2, 2, 2, 2], committed=0)
    fut = h.handle_push(push(PushType.COMPARE, 4, 3, commit=0), 0)
    h.run_once(0)
    resp = fut.result()
    assert resp.code == ResponseCode.INCONSISTENT_STATE and (resp.x_term, resp.x_index) == (2, 1)


def test_raft_figure_8() -> None:
    """S1 (A) holds an old-term entry X on a majority but must not commit it by counting;
    the later leader with a newer-term entry replaces it, and no committed entry is lost.

    Unsafe (commit by counting old-term replicas): step 3 commits X on A and C, then B
    overwrites it in step 4 — the asserts on the committed index in step 3 fail, and the
    cluster's invariant check (committed prefixes agree, commit never goes back) trips."""
    c = Cluster(3, seed=11, enable_fast_advance_commit_index=False)
    a = c.elect()
    f0 = c.append(b"base")
    c.run_until(f0.done)
    c.run_for(200)
    base = f0.result()
    # 1. A, isolated, appends X (term T1) that nobody receives
    c.net.isolate(a)
    fx = c.append(b"X", via=a)
    # 2. B wins among the others and is isolated at once; it appends Y (term T2) alone
    c.run_until(lambda: c.leader() not in (None, a))
    b = c.leader()
    assert b is not None
    cc = next(n for n in c.ids if n not in (a, b))
    c.net.isolate(b)
    fy = c.append(b"Y", via=b)
    assert c.members[cc].store.end_index == base
    # 3. A and C reconnect; A (longer log, same last term) wins and copies X to C
    c.net.heal()
    c.net.isolate(b)
    c.run_until(lambda: c.leader() == a and c.members[cc].store.end_index == base + 1, max_ms=10_000)
    c.run_for(500)
    assert c.members[cc].store.get_body(base + 1) == b"X"
    # X is on a majority (A, C) but is from an older term: not committed
    assert c.core(a).member_state.committed_index == base
    assert c.core(cc).member_state.committed_index == base
    # 4. A crashes, B comes back: B's log ends with a newer term, it wins and replaces X
    c.kill(a)
    c.net.heal()
    c.run_until(lambda: c.leader() == b, max_ms=10_000)
    fz = c.append(b"Z", via=b)
    c.run_until(fz.done)
    c.run_until(lambda: c.core(cc).member_state.committed_index == c.core(b).member_state.committed_index)
    assert c.bodies(b) == [b"base", b"Y", b"Z"] == c.bodies(cc)
    assert fy.done() and isinstance(fy.exception(), DLedgerError)  # acknowledged in no term: uncertain, not lost
    assert isinstance(fx.exception(), DLedgerError)


# -- APPEND carries the previous entry's index and term


def test_append_checks_the_previous_entry() -> None:
    # Unsafe (DLedger: APPEND without prevLog, only `index == ledgerEnd + 1`): the push
    # below has the right next index, so it would be appended after the follower's stale
    # term-2 entry, mixing two leaders' logs; the code would be SUCCESS and end 3.
    ms, h = follower([1, 1, 2], committed=1)
    leader = MemoryLogStore()
    for t in (1, 1, 3, 3):
        leader.term = t
        leader.append(b"L")
    run, count = leader.read_run(3, 1 << 20)
    req = push(PushType.APPEND, 2, 3, commit=3, first=3)
    req.count, req.entries, req.last_term = count, run, 3
    assert process(h, req) == ResponseCode.INCONSISTENT_STATE
    assert ms.store.end_index == 2 and ms.committed_index == 1


# -- a new leader commits older entries only through an entry of its own term (NOOP)


@pytest.mark.parametrize("fast_advance", [False, True])
def test_new_leader_commits_the_old_tail_through_its_noop(fast_advance: bool) -> None:
    # Unsafe (count old-term replicas): without fast advance the old tail would commit as
    # soon as the new leader saw a majority holding it: `committed == base` fails.
    # Unsafe (no NOOP at all): with fast advance the old tail would never commit without
    # a client write; the last run_until times out.
    c = Cluster(3, seed=21, enable_fast_advance_commit_index=fast_advance)
    old = c.elect()
    c.run_for(300)  # the followers matched: the dispatchers are in APPEND
    base = c.core(old).member_state.committed_index
    # the tail reaches the followers, but none of their acks comes back
    c.net.filter = lambda src, dst, msg: src != old and isinstance(msg, PushEntryResponse)
    tail = c.append(b"t1", b"t2")
    c.run_until(lambda: all(c.members[n].store.end_index >= base + 2 for n in c.ids))
    c.net.filter = None
    c.kill(old)
    c.run_until(lambda: c.leader() not in (None, old))
    new = c.leader()
    assert new is not None
    c.run_for(500)
    store = c.members[new].store
    if not fast_advance:
        assert c.core(new).member_state.committed_index == base  # a majority holds the tail: still not committed
        assert store.end_term < c.core(new).member_state.current_term
        f = c.append(b"t3")  # the first entry of the new term commits the tail with it
        c.run_until(f.done)
        assert c.bodies(new) == [b"t1", b"t2", b"t3"]
    else:
        assert store.get(store.end_index).is_noop and store.end_term == c.core(new).member_state.current_term
        c.run_until(lambda: c.core(new).member_state.committed_index == store.end_index)
        assert c.bodies(new) == [b"t1", b"t2"]
    assert not tail.done()  # the old leader died before it could tell the client


# -- ledgerEndTerm is the last entry's term (#52)


def test_ledger_end_term_is_the_last_entrys_term_not_the_current_term() -> None:
    # Unsafe (#52: ledgerEndTerm = currTerm): n2, isolated, raised its term many times;
    # its vote requests would carry that term as its log's last term, the others would
    # grant it, and n2 (without the committed entries) would lead and truncate them: the
    # asserts on the vote requests and on the winner fail, and the cluster's invariant
    # check (committed prefixes agree) trips.
    # seed 26: the lagging member stands after the heal before the old leader wins again
    # (with seed 22 pre-vote's extra round lets the old leader win first: nothing to check)
    c = Cluster(3, seed=26)
    leader = c.elect()
    lagging = next(n for n in c.ids if n != leader)
    c.net.isolate(lagging)
    f = c.append(b"c1", b"c2", b"c3")
    c.run_until(f.done)
    lag_ms = c.core(lagging).member_state
    for _ in range(5):  # its term moved on (e.g. rounds where the others had voted already)
        lag_ms.next_term()
    c.run_for(500)
    assert lag_ms.current_term >= c.core(leader).member_state.current_term + 5
    assert lag_ms.ledger_end_term < lag_ms.current_term
    assert lag_ms.ledger_end_term == c.members[lagging].store.end_term
    votes: list[VoteRequest] = []

    def spy(src: str, dst: str, msg: object) -> bool:
        if isinstance(msg, VoteRequest) and src == lagging:
            votes.append(msg)
        return False

    c.net.heal()
    c.net.filter = spy
    c.run_until(lambda: c.leader() is not None and c.bodies(lagging) == [b"c1", b"c2", b"c3"], max_ms=10_000)
    assert votes and all(v.ledger_end_term < v.term for v in votes)
    for n in c.ids:
        assert c.bodies(n) == [b"c1", b"c2", b"c3"]


# -- the vote is durable before it is granted


class FailingTermStore(MemoryTermStore):
    """Persist fails (a full or broken disk)."""

    def persist(self, term: int, vote_for: str | None) -> None:
        raise OSError("disk full")


def test_vote_is_persisted_before_it_is_granted() -> None:
    # Unsafe (grant first, persist later or not at all; DLedger does not fsync): the
    # failing store would not stop the ACCEPT (no exception), and after the restart
    # below the member would grant a second vote in the same term (ACCEPT for n2).
    config = DLedgerConfig(group="g", self_id="n1", peers=PEERS)
    ms = MemberState(config, MemoryLogStore(), FailingTermStore(3, None))
    el = LeaderElector(config, ms, random.Random(0))
    req = VoteRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=3)
    with pytest.raises(OSError):
        el.handle_vote(req, 0)
    assert ms.vote_for is None
    # the vote survives a restart: a rival in the same term is refused
    store, term_store = MemoryLogStore(), MemoryTermStore(3, None)
    el = LeaderElector(config, MemberState(config, store, term_store), random.Random(0))
    assert el.handle_vote(req, 0).vote_result == VoteResult.ACCEPT
    assert term_store.history == [(3, "n0")]
    restarted = LeaderElector(config, MemberState(config, store, term_store), random.Random(1))
    rival = VoteRequest(group="g", local_id="n2", remote_id="n1", leader_id="n2", term=3)
    assert restarted.handle_vote(rival, 0).vote_result == VoteResult.REJECT_ALREADY_VOTED
    assert restarted.handle_vote(req, 0).vote_result == VoteResult.ACCEPT  # the same candidate again


# -- #61: a wiped follower is brought back in sync


def test_wiped_follower_is_resynced() -> None:
    # Unsafe (#61: the leader stays in APPEND past the follower's end, INDEX_OUT_OF_RANGE
    # forever): if neither a failed APPEND nor a failed COMMIT sent the dispatcher back to
    # COMPARE, the wiped member would never get the entries and run_until times out.
    c = Cluster(3, seed=23)
    leader = c.elect()
    f = c.append(*[f"e{i}".encode() for i in range(20)])
    c.run_until(f.done)
    victim = next(n for n in c.ids if n != leader)
    c.run_until(lambda: c.core(victim).member_state.committed_index == f.result())
    c.kill(victim)
    c.restart(victim, wipe=True)
    assert c.members[victim].store.end_index == -1
    c.run_until(lambda: c.bodies(victim) == [f"e{i}".encode() for i in range(20)])
    f2 = c.append(b"after")
    c.run_until(f2.done)
    c.run_until(lambda: c.bodies(victim)[-1:] == [b"after"])


# -- #316: the committed index never exceeds the ledger end


class OverCommittedStore(MemoryLogStore):
    """A store whose checkpoint claims more committed entries than recovery kept."""

    @property
    def committed_index(self) -> int:
        return 20


def test_committed_index_never_exceeds_the_ledger_end() -> None:
    # Unsafe (#316): committedIndex 20 with ledgerEnd 4; as leader it would complete client
    # futures and serve reads for entries it does not hold: the first assert (20 > 4) fails.
    config = DLedgerConfig(group="g", self_id="n1", peers=PEERS)
    store = OverCommittedStore()
    store.term = 1
    store.append_many([b"x"] * 5)
    ms = MemberState(config, store, MemoryTermStore(1, None))
    assert ms.committed_index == 4
    assert not ms.update_committed_index(50) and ms.committed_index == 4
    ms.change_to_leader(1)
    assert ms.committed_index <= ms.ledger_end_index
    # a follower that truncates its tail keeps its commit at or below its end too
    _, h = follower([1, 1, 2, 2], committed=1)
    assert process(h, push(PushType.TRUNCATE, 1, 1, commit=9, first=2)) == ResponseCode.SUCCESS
    assert h.member_state.committed_index == 1 and h.member_state.store.end_index == 1


# -- findings of the simulation tier (tests/sim/test_findings.py R2, R3, R4)


def test_follower_whose_acks_were_lost_catches_up() -> None:
    # R2. Unsafe-for-liveness (refuse a TRUNCATE below the commit index): the leader's
    # match point is stale (the follower's acks were lost while it committed further),
    # COMPARE there succeeds, TRUNCATE is refused, COMPARE/TRUNCATE repeat forever and
    # the final run_until times out.
    c = Cluster(3, seed=24)
    leader = c.elect()
    c.run_for(300)
    f = next(n for n in c.ids if n != leader)

    def acks_lost(src: str, dst: str, msg: object) -> bool:
        return src == f and dst == leader and isinstance(msg, PushEntryResponse)

    c.net.filter = acks_lost  # f appends and commits, but its answers are lost
    first = c.append(b"1", b"2", b"3")
    c.run_until(first.done)
    second = c.append(b"4")  # carries the commit index of the first
    c.run_until(lambda: second.done() and c.core(f).member_state.committed_index >= first.result())
    assert c.core(leader).dispatchers[f].match_index < c.core(f).member_state.committed_index
    # then it misses heartbeats: as a candidate it answers the next push NOT_FOLLOWER
    c.net.filter = lambda src, dst, msg: (
        acks_lost(src, dst, msg) or (src == leader and dst == f and isinstance(msg, HeartBeatRequest))
    )
    c.run_until(lambda: c.core(f).member_state.is_candidate)
    c.run_for(300)
    c.net.filter = None
    third = c.append(b"5")
    c.run_until(third.done)
    assert third.exception() is None and c.leader() == leader
    c.run_until(lambda: all(c.bodies(n) == [b"1", b"2", b"3", b"4", b"5"] for n in c.ids), max_ms=3000)


def test_restarted_leader_never_leads_its_old_term_again() -> None:
    # R3. Unsafe (DLedger: a restarted member re-runs the vote in its current term): the
    # old leader, having lost its unflushed entry X (term T, index i) that `holder` kept,
    # wins term T again with its own and `voter`'s standing votes and writes a different
    # entry at (i, T): `holder` then matches it by (index, term) and keeps X under later
    # committed entries; the final body comparison fails.
    c = Cluster(3, seed=25)
    leader = c.elect()
    f0 = c.append(b"base")
    c.run_until(f0.done)
    c.run_for(300)
    term = c.core(leader).member_state.current_term
    voter = next(n for n in c.ids if n != leader and c.core(n).member_state.vote_for == leader)
    holder = next(n for n in c.ids if n not in (leader, voter))
    c.net.block(leader, voter)
    c.net.filter = lambda src, dst, msg: src == holder and isinstance(msg, PushEntryResponse)
    c.append(b"X", via=leader)
    index = c.members[leader].store.end_index
    c.run_until(lambda: c.members[holder].store.end_index == index)
    # power loss on the leader: its unflushed X is gone; it comes back at once, cut off
    # from `holder`, with `voter` still without a leader in this term
    c.kill(leader)
    c.members[leader].store.truncate(index)
    c.net.heal()
    c.net.filter = None
    c.net.block(leader, holder)
    c.core(voter).elector.change_role_to_candidate(term)  # it noticed the leader was gone
    c.restart(leader)
    c.run_until(lambda: c.leader() is not None)
    new = c.leader()
    assert new is not None and c.core(new).member_state.current_term > term  # nobody leads term T again
    fy = c.append(b"Y", via=new)
    c.run_until(fy.done)
    c.net.heal()
    c.run_until(lambda: all(c.bodies(n) == [b"base", b"Y"] for n in c.ids), max_ms=5000)
    for n in c.ids:
        store = c.members[n].store
        assert [store.term_at(i) for i in range(store.end_index + 1)] == [
            c.members[new].store.term_at(i) for i in range(store.end_index + 1)
        ]


def test_follower_that_lost_acknowledged_entries_is_repaired() -> None:
    # R4. Unsafe-for-liveness (a resent push restarts the follower's wait): the follower
    # lost entries it acknowledged; every push waits for them, every resend replaces the
    # waiting copy and restarts its timeout, the leader never compares again, and the
    # final run_until times out.
    c = Cluster(3, seed=26, max_push_timeout_ms=150, follower_push_timeout_ms=200)
    leader = c.elect()
    c.run_for(300)
    f = next(n for n in c.ids if n != leader)
    acked = c.append(b"1", b"2", b"3")
    c.run_until(lambda: acked.done() and c.members[f].store.end_index == acked.result())
    first = acked.result() - 2
    c.kill(f)  # a power loss takes what it acknowledged (still in its page cache)
    c.members[f].store.truncate(first)
    c.restart(f)
    later = c.append(b"4")
    c.run_until(later.done)
    c.run_until(lambda: c.bodies(f) == [b"1", b"2", b"3", b"4"], max_ms=5000)
