"""When an idle follower is told of a new commit index: by the next APPEND, which carries
it, or by a COMMIT push `COMMIT_PUSH_DELAY_MS` after the dispatcher saw the commit, never
from the same pass that completed the client's request (its answer goes first)."""

from __future__ import annotations

import pytest

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.dispatcher import COMMIT_PUSH_DELAY_MS, DispatchState, EntryDispatcher
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import PushEntryRequest, PushEntryResponse, PushType
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.store.memory import MemoryLogStore

PEERS = "n0-h:1;n1-h:2;n2-h:3"
T0 = 10_000


def caught_up() -> tuple[MemberState, EntryDispatcher]:
    """A leader whose follower n1 holds its two entries and knows its commit index."""
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS, commit_push_interval_ms=1000)
    store = MemoryLogStore()
    store.term = 1
    store.append_many([b"a", b"b"])
    ms = MemberState(config, store, MemoryTermStore(1, "n0"))
    ms.change_to_leader(1)
    ms.update_committed_index(1)
    dispatcher = EntryDispatcher(config, ms, "n1", QuorumAckChecker(config, ms))
    dispatcher.reset(1)
    dispatcher.match_index = 1
    dispatcher._change_state(DispatchState.APPEND)
    assert [r.type for r in dispatcher.tick(T0)] == [PushType.COMMIT]  # due: the first one
    assert dispatcher.tick(T0) == []
    return ms, dispatcher


def commits(out: list[PushEntryRequest]) -> list[int]:
    return [r.commit_index for r in out if r.type is PushType.COMMIT]


def test_a_new_commit_index_goes_in_a_commit_push_after_the_delay() -> None:
    ms, dispatcher = caught_up()
    ms.store.append_many([b"c"])
    [append] = dispatcher.tick(T0)
    assert append.type is PushType.APPEND and append.commit_index == 1
    dispatcher.on_response(append, PushEntryResponse(code=ResponseCode.SUCCESS, term=1, end_index=2), T0)
    ms.update_committed_index(2)
    assert commits(dispatcher.tick(T0)) == []  # the pass that completed the request: nothing yet
    assert commits(dispatcher.tick(T0 + COMMIT_PUSH_DELAY_MS - 1)) == []
    assert commits(dispatcher.tick(T0 + COMMIT_PUSH_DELAY_MS)) == [2]
    assert commits(dispatcher.tick(T0 + 500)) == []  # told once
    assert commits(dispatcher.tick(T0 + 1000 + COMMIT_PUSH_DELAY_MS)) == [2]  # and every interval


def test_an_append_that_carries_the_commit_index_makes_the_commit_push_unneeded() -> None:
    ms, dispatcher = caught_up()
    ms.store.append_many([b"c"])
    [first] = dispatcher.tick(T0)
    dispatcher.on_response(first, PushEntryResponse(code=ResponseCode.SUCCESS, term=1, end_index=2), T0)
    ms.update_committed_index(2)
    assert commits(dispatcher.tick(T0)) == []
    ms.store.append_many([b"d"])  # the next client request, before the delay ran out
    [second] = dispatcher.tick(T0 + 1)
    assert second.type is PushType.APPEND and second.commit_index == 2
    dispatcher.on_response(second, PushEntryResponse(code=ResponseCode.SUCCESS, term=1, end_index=3), T0 + 1)
    assert commits(dispatcher.tick(T0 + 1)) == []
    assert commits(dispatcher.tick(T0 + 1 + COMMIT_PUSH_DELAY_MS)) == []  # n1 knows commit 2 already


@pytest.mark.parametrize("later", [COMMIT_PUSH_DELAY_MS, 50])
def test_a_commit_seen_while_pushes_are_in_flight_waits_for_them(later: int) -> None:
    ms, dispatcher = caught_up()
    ms.store.append_many([b"c"])
    [append] = dispatcher.tick(T0)
    ms.update_committed_index(2)  # (the other follower acknowledged it)
    assert commits(dispatcher.tick(T0 + later)) == []  # an APPEND is in flight: no COMMIT
    dispatcher.on_response(append, PushEntryResponse(code=ResponseCode.SUCCESS, term=1, end_index=2), T0 + later)
    assert commits(dispatcher.tick(T0 + later)) == []  # the pass after the answer (an eager driver's)
    assert commits(dispatcher.tick(T0 + later + COMMIT_PUSH_DELAY_MS)) == [2]
