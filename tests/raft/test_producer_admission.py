"""What a caller can make a leader keep for idempotent producers, asking as often as it
likes: producer ids from committed blocks (unique across leaders and terms however many
are asked for, in [2^61, 2^62), a new block only from a newer committed entry of the
leader's own term), at most `max_producers` producers in the table, and saves of a large
table spaced by their cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import node_producers
from dledger.client.types import DERIVED_PRODUCER_IDS
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.entry import MAGIC_NOOP
from dledger.node_producers import NodeProducers
from dledger.raft import producer_ids
from dledger.raft.producer_ids import BLOCK_IDS, FIRST_ALLOCATED, MAX_BLOCK, ProducerIdBlocks
from dledger.raft.producers import ProducerTable, Stamp, Verdict
from dledger.record import encode_record
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.unit


def test_a_block_is_named_after_a_committed_entry_of_the_leaders_term() -> None:
    ids = ProducerIdBlocks(block_ids=2)
    assert ids.allocate(5, 9, 4) is None  # the commit index is an entry of an older term
    assert ids.allocate(5, 10, 5) == FIRST_ALLOCATED + (10 << 20)
    assert ids.allocate(5, 10, 5) == FIRST_ALLOCATED + (10 << 20) + 1
    assert ids.allocate(5, 10, 5) is None  # used up; index 10 is taken
    assert ids.allocate(5, 12, 5) == FIRST_ALLOCATED + (12 << 20)


def test_a_new_term_starts_without_a_block() -> None:
    ids = ProducerIdBlocks()
    assert ids.allocate(3, 7, 3) == FIRST_ALLOCATED + (7 << 20)
    assert ids.allocate(4, 7, 3) is None  # index 7 is term 3's, not the new leader's
    assert ids.allocate(4, 8, 4) == FIRST_ALLOCATED + (8 << 20)


def test_a_whole_block_is_given_before_the_next_is_needed() -> None:
    ids = ProducerIdBlocks()
    given = [ids.allocate(1, 0, 1) for _ in range(BLOCK_IDS)]
    assert given == list(range(FIRST_ALLOCATED, FIRST_ALLOCATED + BLOCK_IDS))
    assert ids.allocate(1, 0, 1) is None


def test_ids_stay_below_the_derived_ones_up_to_the_last_block() -> None:
    ids = ProducerIdBlocks(block_ids=BLOCK_IDS)
    ids.given = BLOCK_IDS - 1
    ids.term, ids.block = 9, MAX_BLOCK
    assert ids.allocate(9, MAX_BLOCK, 9) == DERIVED_PRODUCER_IDS - 1
    with pytest.raises(DLedgerError) as info:
        ids.allocate(9, MAX_BLOCK + 1, 9)
    assert info.value.code == ResponseCode.LEADER_PENDING_FULL


def test_a_block_size_out_of_range_is_refused() -> None:
    for bad in (0, BLOCK_IDS + 1):
        with pytest.raises(ValueError, match="block_ids"):
            ProducerIdBlocks(block_ids=bad)


@dataclass
class _Member:
    ids: ProducerIdBlocks
    term: int = -1
    commit_index: int = -1
    """What this member saw committed while it led `term` (it learns no more after)."""


@dataclass
class _Group:
    """A committed log (each index's term) and members that lead in turn."""

    members: list[_Member]
    log: list[int] = field(default_factory=list)
    term: int = 0
    leader: int = 0
    given: list[int] = field(default_factory=list)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.integers(1, 4)),
        st.tuples(st.just("elect"), st.integers(0, 2)),
        st.tuples(st.just("allocate"), st.integers(0, 2), st.integers(1, 7)),
    ),
    max_size=60,
)


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(ops=_OPS, block_ids=st.integers(1, 4))
def test_ids_are_unique_across_leaders_stale_leaders_and_terms(
    ops: list[tuple[int | str, ...]], block_ids: int
) -> None:
    """Leaders in turn commit entries of their terms; any member allocates with the view
    it had when it last led (a deposed leader still believes it leads): no id twice."""
    group = _Group([_Member(ProducerIdBlocks(block_ids)) for _ in range(3)])
    group.members[0].term = 0
    for op in ops:
        if op[0] == "commit":  # the leader commits entries of its term and sees them
            group.log += [group.term] * int(op[1])
            group.members[group.leader].commit_index = len(group.log) - 1
        elif op[0] == "elect":
            group.term += 1
            group.leader = int(op[1])
            member = group.members[group.leader]
            member.term, member.commit_index = group.term, len(group.log) - 1
        else:
            member = group.members[int(op[1])]
            if member.term < 0:
                continue
            index = member.commit_index
            committed_term = group.log[index] if index >= 0 else -1
            for _ in range(int(op[2])):
                producer_id = member.ids.allocate(member.term, index, committed_term)
                if producer_id is not None:
                    group.given.append(producer_id)
    assert len(set(group.given)) == len(group.given)
    assert all(FIRST_ALLOCATED <= i < DERIVED_PRODUCER_IDS for i in group.given)


# -- the leader's side (`NodeProducers.allocate` on a deterministic cluster)


def _producers(
    c: Cluster,
    node_id: str,
    wall_ms: Callable[[], int] | None = None,
    node_dir: Path | None = None,
    max_producers: int = 200_000,
    **store: object,
) -> NodeProducers:
    member = c.members[node_id]
    config = replace(member.config, store=replace(member.config.store, **store), max_producers=max_producers)
    committed = lambda: member.core.member_state.committed_index  # noqa: E731
    if wall_ms is None:
        return NodeProducers(member.store, node_dir, config, committed)
    return NodeProducers(member.store, node_dir, config, committed, wall_ms)


@pytest.mark.interaction
def test_a_quiet_leader_appends_a_noop_for_its_next_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_ids, "BLOCK_IDS", 2)
    c = Cluster(3, seed=3)
    leader = c.elect()
    producers, driver = _producers(c, leader), c.members[leader].driver
    store = c.members[leader].store
    given: list[int] = []
    noops = 0
    while len(given) < 7:
        end = store.end_index
        producer_id, noop = producers.allocate(driver, c.now)
        if producer_id is not None:
            given.append(producer_id)
            continue
        assert noop == (store.end_index == end + 1)  # a NOOP only when none was on its way
        noops += noop
        again, noop_again = producers.allocate(driver, c.now)  # before it commits: no second one
        assert again is None and not noop_again and store.end_index == end + noop
        c.run_until(lambda: c.core(leader).member_state.committed_index == store.end_index)
    assert noops == 4 and len(set(given)) == 7  # blocks of 2: four blocks, each after a NOOP
    assert [store.get(i).magic for i in range(store.end_index + 1)] == [MAGIC_NOOP] * 4
    blocks = sorted({(i - FIRST_ALLOCATED) >> 20 for i in given})
    assert blocks == list(range(4))  # named after the NOOPs' indexes
    # client entries of the term name blocks too: no NOOP while they keep committing
    assert producers.allocate(driver, c.now) == (FIRST_ALLOCATED + (3 << 20) + 1, False)  # block 3's last
    f = c.append(b"a")
    c.run_until(f.done)
    block = FIRST_ALLOCATED + (f.result() << 20)
    assert [producers.allocate(driver, c.now) for _ in range(2)] == [(block, False), (block + 1, False)]
    end = store.end_index
    f = c.append(b"b")  # in flight: the leader waits for it rather than append a NOOP
    assert producers.allocate(driver, c.now) == (None, False) and store.end_index == end + 1
    c.run_until(f.done)
    assert producers.allocate(driver, c.now) == (FIRST_ALLOCATED + (f.result() << 20), False)


@pytest.mark.interaction
def test_only_a_leader_allocates_and_a_noop_waits_out_a_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_ids, "BLOCK_IDS", 1)
    c = Cluster(3, seed=4)
    leader = c.elect()
    f = c.append(b"a")
    c.run_until(f.done)
    follower = next(n for n in c.ids if n != leader)
    for node_id, code in ((follower, ResponseCode.NOT_LEADER), (leader, ResponseCode.UNSUPPORTED)):
        with pytest.raises(DLedgerError) as info:
            _producers(c, node_id, java_compat=node_id == leader).allocate(c.members[node_id].driver, c.now)
        assert info.value.code == code
    producers, store = _producers(c, leader), c.members[leader].store
    assert producers.allocate(c.members[leader].driver, c.now)[0] is not None  # the block of entry "a"
    c.core(leader).leadership_transfer(follower, c.now)
    end = store.end_index
    with pytest.raises(DLedgerError) as info:  # a NOOP now would hold the transferee back
        producers.allocate(c.members[leader].driver, c.now)
    assert info.value.code == ResponseCode.LEADER_TRANSFERRING and store.end_index == end


# -- at most max_producers producers


def _stamped(c: Cluster, node_id: str, producers: NodeProducers, pid: int, epoch: int = 0, seq: int = 0) -> int:
    """Append one numbered record of `pid` as the leader, committed; its index."""
    answer = producers.append(c.members[node_id].driver, [encode_record(b"v")], pid, epoch, seq, c.now)
    c.run_until(answer.future.done)
    return answer.future.result()


def test_a_full_table_admits_its_producers_and_a_new_one_once_an_idle_one_is_forgotten() -> None:
    table = ProducerTable(expiration_ms=10_000)
    for pid, at in ((1, 1_000), (2, 2_000), (3, 3_000)):
        table.record(Stamp(pid, 0, 0, 1, at), first_index=pid)
    assert table.admits(2, 3, 4_000) and not table.admits(4, 3, 4_000)  # full; nobody idle long enough
    assert not table.admits(4, 3, 10_800)  # producer 1 idle 9,800 ms: still kept
    assert not table.admits(4, 3, 11_500)  # idle 10,500 ms, but a full table looked 700 ms ago
    assert table.admits(4, 3, 11_800) and len(table) == 2  # looked again: producer 1 forgotten
    assert table.check(Stamp(1, 0, 1, 1)).verdict is Verdict.UNKNOWN_PRODUCER


@pytest.mark.interaction
def test_the_leader_refuses_a_producer_past_max_producers_and_appends_nothing() -> None:
    c = Cluster(3, seed=5)
    leader = c.elect()
    wall = [1_000_000]
    producers = _producers(c, leader, wall_ms=lambda: wall[0], max_producers=2)
    store = c.members[leader].store
    _stamped(c, leader, producers, 101)
    _stamped(c, leader, producers, 102)
    end = store.end_index
    with pytest.raises(DLedgerError) as info:
        producers.append(c.members[leader].driver, [encode_record(b"v")], 103, 0, 0, c.now)
    assert info.value.code == ResponseCode.TOO_MANY_PRODUCERS and "maxProducers" in info.value.message
    assert store.end_index == end
    _stamped(c, leader, producers, 101, seq=1)  # a kept producer goes on,
    _stamped(c, leader, producers, 102, epoch=1)  # or starts a new epoch: no more producers
    wall[0] += DLedgerConfig().producer_id_expiration_ms + 1  # a day later by the leader's clock
    _stamped(c, leader, producers, 103)  # the idle ones were forgotten: room again


def test_a_large_table_is_saved_less_often(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Cluster(1, seed=6)
    leader = c.elect()
    wall = [1_000_000]
    producers = _producers(c, leader, wall_ms=lambda: wall[0], node_dir=tmp_path)
    took = iter([0.25, 0.001, 0.001])  # how long each save takes
    clock = {"now": 10.0, "calls": 0}

    def elapsed_s() -> float:  # called as a save starts and as it ends
        clock["calls"] += 1
        if clock["calls"] % 2 == 0:
            clock["now"] += next(took)
        return clock["now"]

    monkeypatch.setattr(node_producers, "_elapsed_s", elapsed_s)
    saves: list[int] = []

    def stamp_and_pass(pid: int, after_ms: int) -> None:
        _stamped(c, leader, producers, pid)
        wall[0] += after_ms
        before = (tmp_path / "producers").stat().st_mtime_ns if (tmp_path / "producers").exists() else 0
        while producers.fold_pass() == 0:
            pass
        saves.append(int((tmp_path / "producers").exists() and (tmp_path / "producers").stat().st_mtime_ns != before))

    stamp_and_pass(1, 1_000)  # saved: 250 ms
    assert producers.save_every_ms == 5_000
    stamp_and_pass(2, 4_000)  # 4 s after: not yet
    stamp_and_pass(3, 1_000)  # 5 s after: saved (1 ms)
    assert producers.save_every_ms == 1_000
    stamp_and_pass(4, 1_000)
    assert saves == [1, 0, 1, 1]
