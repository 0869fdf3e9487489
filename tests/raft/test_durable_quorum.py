"""sync flush mode's commit rule in the core: the leader writes its copy in parallel with
replication and counts itself toward a quorum only up to its durable index (the Raft
thesis §10.2.1); async mode counts its whole log."""

from __future__ import annotations

import pytest

from dledger.config import DLedgerConfig, StoreConfig
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.store.memory import MemoryLogStore

PEERS = "n0-h:1;n1-h:2;n2-h:3"


class LaggingDisk(MemoryLogStore):
    """A log whose disk is behind: `durable` is the last index on it."""

    def __init__(self) -> None:
        super().__init__()
        self.durable = -1

    @property
    def durable_index(self) -> int:
        return min(self.durable, self.end_index)


def leader(flush_mode: str) -> tuple[QuorumAckChecker, LaggingDisk, MemberState]:
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS, store=StoreConfig(flush_mode=flush_mode))
    store = LaggingDisk()
    store.term = 1
    ms = MemberState(config, store, MemoryTermStore(1, "n0"))
    ms.change_to_leader(1)
    return QuorumAckChecker(config, ms), store, ms


def test_a_sync_leader_counts_itself_only_with_its_copy_durable() -> None:
    quorum, store, ms = leader("sync")
    first = store.append_many([b"a", b"b"])
    future = quorum.wait_ack(1, first, first + 1, now_ms=0)
    quorum.update_peer_water_mark(1, "n1", first + 1)  # one follower has both on disk
    assert not quorum.check(1) and not future.done()  # leader + n1 would be a quorum: not yet
    assert ms.committed_index == -1
    store.durable = first  # the leader's flush covered the first entry only
    assert quorum.check(2) and ms.committed_index == first and not future.done()
    store.durable = first + 1
    assert quorum.check(3) and future.result(0) == first + 1


def test_a_majority_of_followers_commits_without_the_leaders_flush() -> None:
    quorum, store, _ = leader("sync")
    last = store.append_many([b"a"])
    future = quorum.wait_ack(1, last, last, now_ms=0)
    quorum.update_peer_water_mark(1, "n1", last)
    quorum.check(1)
    assert not future.done()
    quorum.update_peer_water_mark(1, "n2", last)  # two of three on disk, the leader's still in flight
    assert quorum.check(2) and future.result(0) == last


@pytest.mark.parametrize("flush_mode", ["async", "sync"])
def test_a_leader_with_nothing_to_sync_counts_its_whole_log(flush_mode: str) -> None:
    quorum, store, _ = leader(flush_mode)
    store.durable = 10**9 if flush_mode == "sync" else -1  # async: the disk never matters
    last = store.append_many([b"a"])
    future = quorum.wait_ack(1, last, last, now_ms=0)
    quorum.update_peer_water_mark(1, "n1", last)
    assert quorum.check(1) and future.result(0) == last
