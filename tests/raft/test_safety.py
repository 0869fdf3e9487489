"""Safety where DLedger is unsafe (DLEDGER.md §10): Figure 8, #316, truncating committed
entries, commit beyond what a push proved."""

from __future__ import annotations

import random

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector
from dledger.raft.entry_handler import EntryHandler
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import HeartBeatRequest, PushEntryRequest, PushType
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
    ms, h = follower([1, 1, 2, 2, 2], committed=2)
    assert process(h, push(PushType.TRUNCATE, 1, 1, commit=4, first=2)) == ResponseCode.INCONSISTENT_STATE
    assert ms.store.end_index == 4 and ms.committed_index == 2
    assert process(h, push(PushType.TRUNCATE, 2, 2, commit=9, first=3)) == ResponseCode.SUCCESS
    assert ms.store.end_index == 2
    assert ms.committed_index == 2 <= ms.store.end_index  # #316: never above the ledger end


def test_commit_only_up_to_what_the_push_proved() -> None:
    # indexes 3..4 are a stale tail of term 2; the leader's log has term 3 there
    ms, h = follower([1, 1, 1, 2, 2], committed=1)
    assert process(h, push(PushType.COMMIT, 2, 1, commit=4)) == ResponseCode.SUCCESS
    assert ms.committed_index == 2  # not 4: indexes 3, 4 were not proven to match
    assert process(h, push(PushType.COMMIT, 4, 3, commit=4)) == ResponseCode.INCONSISTENT_STATE
    assert ms.committed_index == 2
    assert process(h, push(PushType.COMPARE, 3, 3, commit=4)) == ResponseCode.INCONSISTENT_STATE
    assert ms.committed_index == 2


def test_compare_reports_the_conflicting_term_start() -> None:
    _ms, h = follower([1, 2, 2, 2, 2], committed=0)
    fut = h.handle_push(push(PushType.COMPARE, 4, 3, commit=0), 0)
    h.run_once(0)
    resp = fut.result()
    assert resp.code == ResponseCode.INCONSISTENT_STATE and (resp.x_term, resp.x_index) == (2, 1)


def test_raft_figure_8() -> None:
    """S1 (A) holds an old-term entry X on a majority but must not commit it by counting;
    the later leader with a newer-term entry replaces it, and no committed entry is lost."""
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
    assert c.core(a).ms.committed_index == base
    assert c.core(cc).ms.committed_index == base
    # 4. A crashes, B comes back: B's log ends with a newer term, it wins and replaces X
    c.kill(a)
    c.net.heal()
    c.run_until(lambda: c.leader() == b, max_ms=10_000)
    fz = c.append(b"Z", via=b)
    c.run_until(fz.done)
    c.run_until(lambda: c.core(cc).ms.committed_index == c.core(b).ms.committed_index)
    assert c.bodies(b) == [b"base", b"Y", b"Z"] == c.bodies(cc)
    assert fy.done() and isinstance(fy.exception(), DLedgerError)  # acknowledged in no term: uncertain, not lost
    assert isinstance(fx.exception(), DLedgerError)
