"""Producer ids from committed blocks: unique across leaders and terms however many are
asked for, in [2^61, 2^62), and a new block only from a newer committed entry of the
leader's own term."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.client.types import DERIVED_PRODUCER_IDS
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAGIC_NOOP
from dledger.node_producers import NodeProducers
from dledger.raft import producer_ids
from dledger.raft.producer_ids import BLOCK_IDS, FIRST_ALLOCATED, MAX_BLOCK, ProducerIdBlocks
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


def _producers(c: Cluster, node_id: str, **store: object) -> NodeProducers:
    member = c.members[node_id]
    config = replace(member.config, store=replace(member.config.store, **store))
    return NodeProducers(member.store, None, config, lambda: member.core.member_state.committed_index)


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
