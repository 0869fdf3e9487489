"""The dispatcher's INSTALL_SNAPSHOT state (dledger.raft.snapshot_dispatch), I/O-free:
a follower whose match point is below the leader's compacted log gets the snapshot,
then the dispatcher COMPAREs from its last index; failures go back to COMPARE after a
pause; without a snapshot it stays in COMPARE; the retention floor stops waiting for a
follower a snapshot covers; the leader's compaction keeps what a live follower a few
entries behind needs (dledger.raft.log_floors)."""

from __future__ import annotations

import random

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.core import RaftCore
from dledger.raft.dispatcher import DispatchState, EntryDispatcher
from dledger.raft.match_search import REFUSED_RETRY_MS
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import InstallSnapshotRequest, InstallSnapshotResponse, PushEntryResponse, PushType
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.raft.snapshot_dispatch import INSTALL_RETRY_MS, INSTALL_SNAPSHOT_TIMEOUT_MS
from dledger.store.memory import MemoryLogStore

PEERS = "n0-h:1;n1-h:2;n2-h:3"
T0 = 10_000


def compacted_leader(
    entries: int = 50, reset_to: int = 29, snapshot: tuple[int, int] | None = (29, 1)
) -> tuple[MemberState, EntryDispatcher]:
    """A leader of term 1 holding `entries` entries, its log reset up to `reset_to`."""
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS, max_push_timeout_ms=300)
    store = MemoryLogStore()
    store.term = 1
    store.append_many([b"x"] * entries)
    store.reset(reset_to, 1)
    ms = MemberState(config, store, MemoryTermStore(1, "n0"))
    ms.change_to_leader(1)
    ms.update_committed_index(entries - 1)
    dispatcher = EntryDispatcher(config, ms, "n1", QuorumAckChecker(config, ms), latest_snapshot=lambda: snapshot)
    dispatcher.reset(1)
    return ms, dispatcher


def answer_compare(dispatcher: EntryDispatcher, follower_end: int, now: int = T0) -> None:
    """Answer the COMPARE in flight as a follower whose log (all of term 1) ends at
    `follower_end`."""
    [req] = dispatcher.tick(now)
    assert req.type is PushType.COMPARE
    ok = req.prev_index <= follower_end
    dispatcher.on_response(
        req,
        PushEntryResponse(
            code=ResponseCode.SUCCESS if ok else ResponseCode.INCONSISTENT_STATE, term=1, end_index=follower_end
        ),
        now,
    )


def test_a_follower_below_the_compacted_log_gets_the_snapshot_then_compares_after_it() -> None:
    _ms, dispatcher = compacted_leader()
    answer_compare(dispatcher, follower_end=10)  # the leader compares at its end: no
    answer_compare(dispatcher, follower_end=10)  # then at the floor (29, the snapshot's index): no
    assert dispatcher.state is DispatchState.INSTALL_SNAPSHOT
    [install] = dispatcher.tick(T0)
    assert isinstance(install, InstallSnapshotRequest)
    assert (install.last_included_index, install.last_included_term, install.term) == (29, 1, 1)
    assert install.data == b"" and install.remote_id == "n1" and install.leader_id == "n0"
    assert dispatcher.tick(T0 + INSTALL_SNAPSHOT_TIMEOUT_MS - 1) == []  # awaited, long
    done = InstallSnapshotResponse(code=ResponseCode.SUCCESS, term=1, last_included_index=29, end_index=29)
    dispatcher.on_install_response(install, done, T0 + 5)
    assert dispatcher.state is DispatchState.COMPARE
    [compare] = dispatcher.tick(T0 + 6)
    assert (compare.type, compare.prev_index, compare.prev_term) == (PushType.COMPARE, 29, 1)
    dispatcher.on_response(compare, PushEntryResponse(code=ResponseCode.SUCCESS, term=1, end_index=29), T0 + 6)
    assert dispatcher.state is DispatchState.APPEND and dispatcher.match_index == 29
    [append] = dispatcher.tick(T0 + 7)
    assert (append.type, append.first_index, append.prev_index, append.prev_term) == (PushType.APPEND, 30, 29, 1)


def test_a_follower_that_matches_at_the_floor_gets_no_snapshot() -> None:
    _ms, dispatcher = compacted_leader()
    answer_compare(dispatcher, follower_end=35)
    answer_compare(dispatcher, follower_end=35)
    assert dispatcher.state is DispatchState.APPEND and dispatcher.match_index == 35


def test_a_failed_or_lost_install_goes_back_to_compare_after_a_pause() -> None:
    _ms, dispatcher = compacted_leader()
    answer_compare(dispatcher, follower_end=3)
    answer_compare(dispatcher, follower_end=3)
    [install] = dispatcher.tick(T0)
    refused = InstallSnapshotResponse(code=ResponseCode.INSTALL_SNAPSHOT_ERROR, term=1, next_offset=4096)
    dispatcher.on_install_response(install, refused, T0 + 10)
    assert dispatcher.state is DispatchState.COMPARE
    assert dispatcher.tick(T0 + 10 + INSTALL_RETRY_MS - 1) == []
    answer_compare(dispatcher, follower_end=3, now=T0 + 10 + INSTALL_RETRY_MS)  # at the floor again: no
    [again] = dispatcher.tick(T0 + 200)
    assert isinstance(again, InstallSnapshotRequest)
    dispatcher.on_install_response(again, None, T0 + 300)  # no answer at all
    assert dispatcher.state is DispatchState.COMPARE
    # a stale answer (another request) and one of a higher term change nothing
    dispatcher.on_install_response(install, InstallSnapshotResponse(code=ResponseCode.SUCCESS, term=1), T0 + 301)
    assert dispatcher.state is DispatchState.COMPARE


def test_no_snapshot_keeps_comparing_as_dledger_does(caplog: pytest.LogCaptureFixture) -> None:
    _ms, dispatcher = compacted_leader(snapshot=None)
    answer_compare(dispatcher, follower_end=3)
    answer_compare(dispatcher, follower_end=3)
    assert dispatcher.state is DispatchState.COMPARE
    assert dispatcher.tick(T0 + INSTALL_RETRY_MS - 1) == []  # a pause, not a busy loop
    [compare] = dispatcher.tick(T0 + INSTALL_RETRY_MS)
    assert compare.type is PushType.COMPARE and compare.prev_index >= 29
    compares = 0
    for now in range(T0 + INSTALL_RETRY_MS, T0 + 10 * INSTALL_RETRY_MS, 5):
        for req in dispatcher.tick(now):
            compares += 1
            dispatcher.on_response(
                req, PushEntryResponse(code=ResponseCode.INCONSISTENT_STATE, term=1, end_index=3), now
            )
    said = [r for r in caplog.records if r.name == "dledger.raft.snapshot_dispatch" and "are gone" in r.getMessage()]
    assert compares >= 5 and len(said) == 1  # once, not at every retry (it was logged 10 times a second)


def test_compaction_under_an_appending_follower_moves_it_to_install() -> None:
    ms, dispatcher = compacted_leader(reset_to=9, snapshot=(9, 1))
    answer_compare(dispatcher, follower_end=20)
    answer_compare(dispatcher, follower_end=20)
    assert dispatcher.state is DispatchState.APPEND and dispatcher.write_index == 21
    ms.store.reset(40, 1)  # a newer snapshot compacted past the follower
    snapshot = (40, 1)
    dispatcher._latest_snapshot = lambda: snapshot
    assert dispatcher.tick(T0 + 400) == []
    assert dispatcher.state is DispatchState.INSTALL_SNAPSHOT and dispatcher.installing == (40, 1)


def test_a_follower_whose_match_point_lost_its_term_to_compaction_gets_the_snapshot() -> None:
    """RESET_BUT_KEEP_SOME_SYNC: the log starts at 20, the entry before it is not the
    snapshot's, so its term is not known. A follower matched at 19 was pushed entries with
    (prev 19, term -1), which it took for another history (the simulation's seed 2)."""
    _ms, dispatcher = compacted_leader(reset_to=9, snapshot=(29, 1))
    answer_compare(dispatcher, follower_end=19)
    answer_compare(dispatcher, follower_end=19)
    assert dispatcher.state is DispatchState.APPEND and dispatcher.write_index == 20
    dispatcher.store.reset(19, 1)  # the leader compacts to 19 (keeping 10 before the snapshot)
    assert dispatcher.tick(T0 + 400) == []
    assert dispatcher.state is DispatchState.INSTALL_SNAPSHOT and dispatcher.installing == (29, 1)


def test_the_floor_is_the_snapshot_index_with_reset_all_and_the_first_entry_with_keep_some() -> None:
    _ms, reset_all = compacted_leader(reset_to=29, snapshot=(29, 1))
    assert reset_all.floor_index() == 29
    _ms, keep_some = compacted_leader(reset_to=19, snapshot=(29, 1))  # kept 10 entries before it
    assert keep_some.floor_index() == 20
    _ms, emptied = compacted_leader(entries=30, reset_to=29, snapshot=(29, 1))
    assert emptied.floor_index() == 29 and emptied.readable_from() == 30


def leader_with_followers(matches: dict[str, int], live: dict[str, bool], **settings: int) -> RaftCore:
    """A leader of term 1 holding entries 0..99, its followers matched at `matches`."""
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS, **settings)
    store = MemoryLogStore()
    store.term = 1
    store.append_many([b"x"] * 100)
    core = RaftCore(config, store, MemoryTermStore(1, "n0"), random.Random(1))
    core.member_state.change_to_leader(1)
    core.member_state.update_committed_index(99)
    for peer, match in matches.items():
        core.dispatchers[peer].reset(1)
        core.dispatchers[peer].match_index = match
        core.dispatchers[peer].state = DispatchState.APPEND
    core.elector.peers_live_table.update(live)
    return core


def test_retention_no_longer_waits_for_a_follower_a_snapshot_covers() -> None:
    core = leader_with_followers({"n1": 95, "n2": 10}, {})
    assert core.retention_floor() == 11  # the slowest follower's next entry
    core.latest_snapshot = (60, 1)
    assert core.retention_floor() == 61  # n2 gets the snapshot: only what follows it is needed
    core.latest_snapshot = (99, 1)
    assert core.retention_floor() == 100  # both behind it: nothing of the log is needed by them


def test_compaction_keeps_what_a_live_follower_a_few_entries_behind_needs() -> None:
    core = leader_with_followers({"n1": 99, "n2": 93}, {"n1": True, "n2": True})
    assert core.compaction_floor(95) == 93  # n2's match point (its term is pushed): then entries
    assert core.compaction_floor(93) == 94  # matched at the snapshot: its term is the snapshot's
    assert core.compaction_floor(90) == 91  # both past the snapshot: nothing more is kept
    core.elector.peers_live_table["n2"] = False  # not answering: it gets the snapshot
    assert core.compaction_floor(95) == 96


def test_compaction_keeps_at_most_the_catch_up_entries_and_never_for_an_unmatched_follower() -> None:
    core = leader_with_followers({"n1": 99, "n2": 10}, {"n1": True, "n2": True}, snapshot_catch_up_entries=20)
    assert core.compaction_floor(95) == 76  # n2 is further behind than 20 entries: the snapshot
    core.dispatchers["n2"].state = DispatchState.COMPARE  # not matched in this term
    assert core.compaction_floor(95) == 96
    off = leader_with_followers({"n1": 99, "n2": 93}, {"n1": True, "n2": True}, snapshot_catch_up_entries=0)
    assert off.compaction_floor(95) == 96  # 0: DLedger's compaction, up to the snapshot
    follower = leader_with_followers({"n1": 99, "n2": 93}, {"n1": True, "n2": True})
    follower.member_state.change_to_follower(1, "n1")
    assert follower.compaction_floor(95) == 96  # a follower keeps nothing for others


def test_a_push_refused_as_malformed_is_said_once_and_paced(caplog: pytest.LogCaptureFixture) -> None:
    """Helper N: a follower of an older version refused every push holding a record
    (UNEXPECTED_ARGUMENT) and the leader compared and pushed again 400 times a second
    without a word. It says so once and asks again every REFUSED_RETRY_MS."""
    _ms, dispatcher = compacted_leader(reset_to=9, snapshot=(9, 1))
    answer_compare(dispatcher, follower_end=20)
    answer_compare(dispatcher, follower_end=20)
    now = T0
    for _ in range(3):
        [push] = dispatcher.tick(now)
        assert (push.type, push.first_index) == (PushType.APPEND, 21)
        refused = PushEntryResponse(code=ResponseCode.UNEXPECTED_ARGUMENT, term=1, end_index=20)
        dispatcher.on_response(push, refused, now)
        assert dispatcher.state is DispatchState.COMPARE
        assert dispatcher.tick(now + REFUSED_RETRY_MS - 1) == []  # paced
        now += REFUSED_RETRY_MS
        answer_compare(dispatcher, follower_end=20, now=now)  # matches again at 20
        now += 1
    said = [r.getMessage() for r in caplog.records if "refuses the entries pushed from index 21" in r.getMessage()]
    assert len(said) == 1
