"""Bugs the simulation found, each reduced to a deterministic script. Marked
xfail(strict=True) while they are open: when one is fixed its test passes, fails as
XPASS, and the marker must go (and its tag leaves checker.KNOWN_ISSUES); fixed ones stay
as regression tests (see docs/SIMULATION.md, "Findings")."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

import pytest

from dledger.raft.messages import HeartBeatRequest, PushEntryRequest, PushEntryResponse, RequestOrResponse
from dledger.store.mmap_store import MmapLogStore, StoreConfig
from tests.sim.harness import Scenario, Simulation

pytestmark = pytest.mark.sim

SMALL = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, checkpoint_interval_ms=10**9)


@contextmanager
def settled_sim(tmp_path: Path, flush: str, forbid_deletion: bool | None = None) -> Iterator[Simulation]:
    """A 3-member simulation with seed 1 and no random faults, run until a leader is
    elected and every member caught up; closed afterwards. `forbid_deletion` None keeps
    the checker's default."""
    sim = Simulation(Scenario(3, flush, crash_in_msync=False), seed=1, base_dir=tmp_path)
    sim.faults_on = False
    if forbid_deletion is not None:
        sim.checker.forbid_deletion = forbid_deletion
    try:
        sim.run_until(lambda: sim.leader() is not None and sim._all_caught_up())
        yield sim
    finally:
        sim.close()


def _fill(store: MmapLogStore) -> None:
    """15 entries of 248 bytes: 376 bytes are left in the first 4 KiB segment."""
    store.term = 1
    for _ in range(15):
        store.append(b"x" * 200)


# B2 regression (fixed: truncate ends the log where the last kept entry ends, removing the
# blank after it, so the leader's entry that fits before the blank lands at its position)
def test_truncate_after_a_segment_end_blank_accepts_the_leaders_entry(tmp_path: Path) -> None:
    leader, follower = MmapLogStore(tmp_path / "leader", SMALL), MmapLogStore(tmp_path / "follower", SMALL)
    try:
        _fill(leader)
        _fill(follower)
        follower.term = 2
        follower.append(b"y" * 1000)  # does not fit: a blank at 3720, the entry at 4096
        leader.term = 3
        leader.append(b"z" * 100)  # fits: at 3720
        follower.truncate(15)  # the new leader's TRUNCATE
        assert follower.write_pos == 3720  # the end of entry 14, not the next segment's start
        assert not (tmp_path / "follower" / "data" / f"{4096:020d}").exists()
        run, _ = leader.read_run(15, 1 << 20)
        follower.append_encoded(run)  # was INCONSISTENT_STATE: "entry 15 has pos 3720 but lands at 4096"
        assert follower.get(15).pos == leader.get(15).pos == 3720
    finally:
        leader.close()
        follower.close()
    segment = f"data/{0:020d}"
    assert (tmp_path / "follower" / segment).read_bytes() == (tmp_path / "leader" / segment).read_bytes()
    follower = MmapLogStore(tmp_path / "follower", SMALL)
    try:
        assert (follower.end_index, follower.write_pos, follower.recovery.problem) == (15, 3720 + 148, "")
    finally:
        follower.close()


# B2 regression (fixed: recovery ends the log where the last entry ends, not after a blank
# whose next segment holds nothing; the blank is zeroed and the empty segment deleted)
def test_recovery_after_a_segment_end_blank_ends_at_the_last_entry(tmp_path: Path) -> None:
    store = MmapLogStore(tmp_path, SMALL)
    _fill(store)
    store.append(b"y" * 1000)  # a blank at 3720, entry 15 at 4096
    store.close()
    (tmp_path / "data" / f"{4096:020d}").write_bytes(bytes(4096))  # entry 15 never reached the disk
    store = MmapLogStore(tmp_path, SMALL)
    try:
        last = store.get(store.end_index)
        assert store.end_index == 14
        assert store.write_pos == last.pos + last.size  # 3720, not 4096
        assert not (tmp_path / "data" / f"{4096:020d}").exists(), "the empty next segment stays"
        store.term = 3
        assert store.append(b"z" * 100) == 15
        assert store.get(15).pos == 3720  # where a leader that never wrote the blank has it
    finally:
        store.close()
    store = MmapLogStore(tmp_path, SMALL)
    try:
        assert (store.end_index, store.get(15).body, store.recovery.problem) == (15, b"z" * 100, "")
    finally:
        store.close()


def test_async_single_power_loss_keeps_acknowledged_entries(tmp_path: Path) -> None:
    """R1, fixed by the vote hold (dledger.raft.vote_hold): a member that acknowledged
    entries and then lost them to a power loss voted at once, so it and a lagging member
    elected a leader without acknowledged, committed entries."""
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None
        acker, lagger = (n for n in sim.nodes.values() if n is not leader)
        sim.net.block(leader.node_id, lagger.node_id)  # the lagging member stops hearing the leader
        early = [sim.append(leader, [sim._body()]) for _ in range(5)]
        sim.run_until(lambda: all(op.status == "ok" for op in early))
        acker.next_flush_ms = 1 << 60  # its flush stalls: what it acknowledges stays in the page cache
        late = [sim.append(leader, [sim._body()]) for _ in range(5)]
        sim.run_until(lambda: all(op.status == "ok" for op in late))
        acker.down(power_loss=True, torn="lost")  # one member loses power...
        sim.net.block(leader.node_id, acker.node_id)  # ...and comes back not hearing the leader either
        acker.restart_at = sim.now
        sim.run_for(1000)  # the two elect a leader (the checker raises here: it lacks committed entries)
        sim.converge()


# R5 regression (fixed: the dispatcher searches the match point before truncating)
def test_a_follower_whose_acks_were_lost_catches_up(tmp_path: Path) -> None:
    with settled_sim(tmp_path, "sync", forbid_deletion=True) as sim:
        leader = sim.leader()
        assert leader is not None
        follower = next(n for n in sim.nodes.values() if n is not leader)
        lid, fid = leader.node_id, follower.node_id
        warmup = sim.append(leader, [sim._body()])  # replication to it runs (APPEND state)
        sim.run_until(lambda: warmup.status == "ok" and sim._all_caught_up())

        def acks_lost(src: str, dst: str, msg: RequestOrResponse) -> bool:
            return src == fid and dst == lid and isinstance(msg, PushEntryResponse)

        sim.net.filter = acks_lost  # the follower appends (and commits) but its answers are lost
        first = sim.append(leader, [sim._body() for _ in range(3)])
        sim.run_until(lambda: first.status == "ok")
        second = sim.append(leader, [sim._body()])  # carries the commit index of the first
        sim.run_until(lambda: second.status == "ok")
        sim.run_for(20)
        # then it misses heartbeats: as a candidate it answers the next push NOT_FOLLOWER
        sim.net.filter = lambda s, d, m: (
            acks_lost(s, d, m) or (s == lid and d == fid and isinstance(m, HeartBeatRequest))
        )
        sim.run_until(lambda: follower.core is not None and follower.core.member_state.is_candidate)
        sim.run_for(300)
        sim.net.filter = None  # healed
        third = sim.append(leader, [sim._body()])
        sim.run_until(lambda: third.status == "ok")
        sim.run_until(sim._all_caught_up, max_ms=3000)  # the follower stays behind forever


def test_a_leader_never_creates_two_entries_at_one_index_and_term(tmp_path: Path) -> None:
    """R3, fixed in a1c53ed: a leader that lost its unflushed tail to a power loss was
    elected again in the same term and wrote a second entry at an (index, term) a
    follower held. A restarted member now always votes in a new term."""
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None and leader.core is not None
        first = sim.append(leader, [sim._body()])
        sim.run_until(lambda: first.status == "ok" and sim._all_caught_up())
        lid = leader.node_id
        # `voter` voted for the leader in this term; `holder` will hold the lost entry
        voter = next(
            n
            for n in sim.nodes.values()
            if n.core is not None and n.core.member_state.vote_for == lid and n is not leader
        )
        holder = next(n for n in sim.nodes.values() if n is not leader and n is not voter)
        sim.net.block(lid, voter.node_id)
        sim.net.filter = lambda s, d, m: s == holder.node_id and d == lid and isinstance(m, PushEntryResponse)
        leader.next_flush_ms = 1 << 60  # the leader's flush stalls
        sim.append(leader, [sim._body()])  # reaches `holder` only, never commits
        sim.run_for(30)
        leader.down(power_loss=True, torn="lost")  # the leader loses it
        sim.net.heal()
        sim.net.filter = None
        sim.net.block(lid, holder.node_id)
        # the vote hold (R1's fix) would keep it from standing at all: this checks the guard
        # behind it, which still matters once a hold timed out
        leader.config.max_vote_hold_ms = 0
        leader.restart_at = sim.now
        sim.run_until(lambda: leader.core is not None and leader.core.member_state.is_leader, max_ms=2000)
        sim.append(leader, [sim._body()])  # a different entry at the same index, same term
        sim.run_for(20)
        sim.net.heal()
        sim.converge()


def test_a_follower_that_lost_acknowledged_entries_catches_up(tmp_path: Path) -> None:
    """R4, fixed in a1c53ed: a follower that lost entries it had acknowledged (power loss)
    was never repaired: each resend replaced the waiting push and restarted its timeout."""
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None
        follower = next(n for n in sim.nodes.values() if n is not leader)
        warmup = sim.append(leader, [sim._body()])
        sim.run_until(lambda: warmup.status == "ok" and sim._all_caught_up())
        follower.next_flush_ms = 1 << 60  # its flush stalls
        acked = sim.append(leader, [sim._body() for _ in range(3)])
        sim.run_until(lambda: acked.status == "ok" and sim._all_caught_up())
        follower.down(power_loss=True, torn="lost")  # it loses what it acknowledged (the others keep it)
        follower.open()  # restarts at once
        later = sim.append(leader, [sim._body()])  # pushed to it right away: a push is in flight
        sim.run_until(lambda: later.status == "ok")
        sim.run_until(sim._all_caught_up, max_ms=3000)  # the follower never gets the entries back


# R5 regression (fixed: the dispatcher searches the match point before truncating)
def test_truncate_never_deletes_committed_entries(tmp_path: Path) -> None:
    with settled_sim(tmp_path, "sync", forbid_deletion=True) as sim:
        old = sim.leader()
        assert old is not None
        new, lagger = (n for n in sim.nodes.values() if n is not old)
        warmup = sim.append(old, [sim._body()])
        sim.run_until(lambda: warmup.status == "ok" and sim._all_caught_up())
        sim.run_for(300)  # the checkpoints record the warmup commit...
        old.next_checkpoint_ms = 1 << 60  # ...and the old leader's stays there
        sim.net.block(old.node_id, lagger.node_id)
        committed = sim.append(old, [sim._body() for _ in range(10)])  # committed by `old` and `new`
        sim.run_until(lambda: committed.status == "ok")
        sim.net.block(old.node_id, new.node_id)
        sim.append(old, [sim._body() for _ in range(5)])  # only in the old leader's log
        sim.run_for(10)
        old.down(power_loss=False)
        old.restart_at = 1 << 60
        sim.net.heal()
        sim.net.filter = lambda s, d, m: d == lagger.node_id and isinstance(m, PushEntryRequest)  # votes, lags
        sim.run_until(lambda: new.core is not None and new.core.member_state.is_leader)
        sim.append(new, [sim._body() for _ in range(6)])  # new-term entries past the old leader's end
        sim.run_for(20)
        new.down(power_loss=False)  # `new` restarts and wins again: its dispatchers start at its end
        new.restart_at = sim.now
        sim.run_until(lambda: new.core is not None and new.core.member_state.is_leader)
        old.restart_at = sim.now  # the old leader comes back: COMPARE overshoots, TRUNCATE deletes
        sim.run_for(1000)


def test_a_follower_that_lost_entries_is_compared_again_despite_resends() -> None:
    """R6 (found by the biased `test_async_power_loss[async-group-5]` seed 18): a follower
    lost, to a power loss, entries it had acknowledged (the leader's match index 9, its log
    ends at 4). The leader's push of 10.. waits on the follower for its missing
    predecessors and is resent every `max_push_timeout_ms`; each copy replaces the waiting
    one (REPEATED_PUSH to the old copy). The follower's abnormal-push check (every ~1 s)
    answers the waiting copy INCONSISTENT_STATE so that the leader compares again; but
    when that check runs just before the newest copy arrives, the answer is for a copy the
    leader has already replaced, `EntryDispatcher._on_append` ignores it (only a SUCCESS of
    an older copy counts), and with the same phase every second the follower is never
    repaired (the healed cluster never converged: R4's signature)."""
    from dledger.raft.dispatcher import DispatchState
    from dledger.raft.messages import PushType
    from tests.raft.test_replication import follower_handler, leader_with_log

    _ms, dispatcher = leader_with_log(20, body=1, max_push_timeout_ms=100)
    dispatcher.match_index, dispatcher.write_index = 9, 10  # acknowledged up to 9 before the loss
    _fms, handler, store = follower_handler(5)
    assert store.end_index == 4
    waiting: list[tuple[PushEntryRequest, Future[PushEntryResponse]]] = []
    for now in range(0, 5000, 5):
        sent = dispatcher.tick(now)
        while handler.run_once(now):  # the follower's pass runs before this step's deliveries
            pass
        waiting += [(req, handler.handle_push(req, now)) for req in sent if req.type is PushType.APPEND]
        for req, fut in [w for w in waiting if w[1].done()]:
            waiting.remove((req, fut))
            dispatcher.on_response(req, fut.result(), now)
        if dispatcher.state is DispatchState.COMPARE:
            break
    assert dispatcher.state is DispatchState.COMPARE, "the leader never compares the follower again"


def test_a_majority_restarting_uncleanly_elects_the_longest_log_soon(tmp_path: Path) -> None:
    """H2 (issue 17 #2, seen by the biased `test_sim[async-single-3]`): S lags behind (cut
    off); the leader L and F commit entries F has not flushed; F loses power and L crashes
    at once, S rejoins. F (lost its tail) and L (kept everything) both hold their votes
    after their unclean restarts, S cannot win alone: nobody is elected until a hold times
    out (`max_vote_hold_ms`, 10 s here), and then F's timed-out hold may elect S without
    the entries only L holds. Safe and soon: L, whose log is the longest of a quorum, is
    elected within 2 s (a few election timeouts)."""
    with settled_sim(tmp_path, "async") as sim:
        leader = sim.leader()
        assert leader is not None
        lagging, follower = (n for n in sim.nodes.values() if n is not leader)
        sim.net.isolate(lagging.node_id)
        follower.next_flush_ms = 1 << 60  # its flush stalls
        acked = sim.append(leader, [sim._body() for _ in range(5)])
        sim.run_until(lambda: acked.status == "ok")
        sim.lose_power([follower], restart_in=0)  # loses what it acknowledged
        sim._take_down(leader, power_loss=False, restart_in=0)
        sim.net.heal()
        start = sim.now
        sim.run_until(lambda: sim.leader() is not None, max_ms=10_000)
        elected = sim.leader()
        assert elected is leader, f"{elected.node_id if elected else None} elected, not the longest log"
        assert sim.now - start <= 2000, f"no leader for {sim.now - start} ms after the restarts"
