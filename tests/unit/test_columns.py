"""ColumnBatch.without_noops: NOOPs left out, bodies shared, the resume index kept."""

from __future__ import annotations

import pytest

from dledger.store.memory import MemoryLogStore

pytestmark = pytest.mark.unit


def _store() -> MemoryLogStore:
    store = MemoryLogStore()
    store.term = 1
    store.append_many([b"a", b""])  # an empty user body is not a NOOP
    store.term = 2
    store.append_noop()
    store.append_many([b"bc", b"d"])
    store.term = 3
    store.append_noop()
    return store


def test_drops_only_noops_and_keeps_offsets_consistent() -> None:
    store = _store()
    batch = store.read_columns(0, 100, 1 << 20).without_noops(lambda i: store.get(i).is_noop)
    assert batch.index.tolist() == [0, 1, 3, 4]
    assert [batch.body(k) for k in range(batch.count)] == [b"a", b"", b"bc", b"d"]
    assert batch.term.tolist() == [1, 1, 2, 2]
    assert batch.next_index(0) == 6  # the trailing NOOP counts as read


def test_a_batch_of_only_a_noop_is_empty_but_moves_the_reader_on() -> None:
    store = _store()
    batch = store.read_columns(5, 10, 1 << 20).without_noops(lambda i: store.get(i).is_noop)
    assert batch.count == 0
    assert batch.next_index(5) == 6


def test_without_noops_returns_the_same_batch_when_there_are_none() -> None:
    store = _store()
    batch = store.read_columns(3, 2, 1 << 20)
    assert batch.without_noops(lambda i: store.get(i).is_noop) is batch
    assert batch.next_index(3) == 5
    empty = store.read_columns(6, 10, 1 << 20)
    assert empty.next_index(6) == 6
