"""`LogStore.reset(..., next_pos)`: an emptied log placed where the leader's next entry
starts (after an installed snapshot), so that the leader's encoded entries land at their
own positions; and it stays so after a reopen."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.config import member_store_config
from dledger.store import MemoryLogStore, MmapLogStore

CFG = member_store_config(data_file_size=4096, index_file_size=32 * 64)


def leader_store(path: Path, count: int) -> MmapLogStore:
    store = MmapLogStore(path, CFG)
    store.term = 2
    for i in range(count):
        store.append(b"x" * (50 + i % 7))
    return store


@pytest.mark.parametrize("follower_entries", [0, 3, 200], ids=["wiped", "short", "longer-than-leader"])
@pytest.mark.parametrize("snapshot_index", [30, 61, 89])
def test_emptied_log_takes_the_leaders_entries_at_their_positions(
    tmp_path: Path, follower_entries: int, snapshot_index: int
) -> None:
    leader = leader_store(tmp_path / "leader", 120)
    follower = MmapLogStore(tmp_path / "follower", CFG)
    follower.term = 1
    for _ in range(follower_entries):
        follower.append(b"y" * 30)
    next_pos = leader.get(snapshot_index + 1).pos
    if follower.end_index > snapshot_index:  # what the node does: an install drops the tail after it
        follower.truncate(snapshot_index + 1)
    follower.reset(snapshot_index, 2, next_pos)
    assert (follower.begin_index, follower.end_index, follower.end_term) == (-1, snapshot_index, 2)
    run, count = leader.read_run(snapshot_index + 1, 1 << 20)
    assert follower.append_encoded(run) == count
    follower.close()
    again = MmapLogStore(tmp_path / "follower", CFG)
    assert again.begin_index == snapshot_index + 1
    for index in (snapshot_index + 1, again.end_index):
        assert again.get(index).body == leader.get(index).body
        assert again.get(index).pos == leader.get(index).pos
    again.close()
    leader.close()


def test_reset_of_an_empty_log_to_its_end_without_a_position_changes_nothing(tmp_path: Path) -> None:
    store = leader_store(tmp_path / "s", 10)
    store.reset(9, 2)
    pos = store.write_pos
    assert store.reset(9, 2) == 0 and store.write_pos == pos
    assert store.reset(5, 2) == 0 and store.end_index == 9  # never backwards
    store.close()


def test_memory_store_takes_the_position_too() -> None:
    store = MemoryLogStore()
    store.term = 1
    store.append(b"a")
    store.reset(20, 3, next_pos=777)
    assert (store.end_index, store.end_term, store.write_pos) == (20, 3, 777)


@pytest.mark.parametrize("kind", ["mmap", "memory"])
def test_truncating_every_entry_after_a_reset_keeps_the_reset_term(tmp_path: Path, kind: str) -> None:
    """Found by the snapshot simulation: a follower compacted to snapshot (9, term 2),
    then the leader truncated every entry after it (a stale tail of its own). Its log end
    must stay (9, term 2): with term -1 it voted for a candidate whose log ended at an
    older index in term 2, which then overwrote committed entries."""
    store = leader_store(tmp_path / "s", 20) if kind == "mmap" else MemoryLogStore()
    if isinstance(store, MemoryLogStore):
        store.term = 2
        for _ in range(20):
            store.append(b"x" * 50)
    store.reset(9, 2)
    assert (store.begin_index, store.end_term) == (10, 2)
    store.truncate(10)
    assert (store.begin_index, store.end_index, store.end_term) == (-1, 9, 2)
    store.term = 3
    store.append(b"y" * 40)  # the leader's entry 10 follows
    assert (store.begin_index, store.end_index, store.end_term) == (10, 10, 3)
    store.close()
