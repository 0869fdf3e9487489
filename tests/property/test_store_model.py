"""MmapLogStore behaves like MemoryLogStore under appends, truncation, prefix resets,
crashes with reopen, and corruption of the uncommitted tail."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dledger.codes import DLedgerError
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore, StoreConfig

pytestmark = pytest.mark.property

# checkpoints only on close/truncate/reset, so what a crash keeps does not depend on timing
CONFIG = StoreConfig(
    data_file_size=2048, index_file_size=256, warm_ahead_bytes=0, flush_file_interval_ms=5, checkpoint_interval_ms=10**9
)
bodies = st.binary(max_size=400)


class StoreModel(RuleBasedStateMachine):
    config = CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="dledger-model-"))
        self.store = MmapLogStore.open(self.dir, self.config)
        self.model = MemoryLogStore()
        self.store.term = self.model.term = 1

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def reopen(self) -> None:
        term = self.store.term
        self.store = MmapLogStore.open(self.dir, self.config)
        self.store.term = max(term, self.store.end_term)

    @rule(body=bodies)
    def append(self, body: bytes) -> None:
        assert self.store.append(body) == self.model.append(body)

    @rule(batch=st.lists(bodies, max_size=8))
    def append_many(self, batch: list[bytes]) -> None:
        assert self.store.append_many(batch) == self.model.append_many(batch)

    @rule(size=st.integers(600, CONFIG.data_file_size - 56))
    def append_large(self, size: int) -> None:
        # often does not fit the segment: a blank pads it, the entry opens the next one
        body = bytes([size % 251]) * size
        assert self.store.append(body) == self.model.append(body)

    @rule(step=st.integers(0, 2))
    def new_term(self, step: int) -> None:
        self.store.term += step
        self.model.term = self.store.term

    @rule()
    def noop(self) -> None:
        assert self.store.append_noop() == self.model.append_noop()

    @rule(back=st.integers(0, 10))
    def commit(self, back: int) -> None:
        target = self.model.end_index - back
        self.store.update_committed_index(target)
        self.model.update_committed_index(target)

    @precondition(lambda self: self.model.begin_index >= 0 and self.model.end_index > self.model.committed_index)
    @rule(data=st.data())
    def truncate_uncommitted(self, data: st.DataObject) -> None:
        lo = max(self.model.committed_index + 1, self.model.begin_index, 0)
        # entries that opened a segment (after a blank, when one precedes them) included
        openers = [i for i in range(max(lo, 1), self.model.end_index + 1) if self._opens_segment(i)]
        candidates = st.integers(lo, self.model.end_index)
        at = data.draw(st.one_of(candidates, st.sampled_from(openers)) if openers else candidates)
        self.store.truncate(at)
        self.model.truncate(at)

    def _opens_segment(self, index: int) -> bool:
        return index > self.store.begin_index and self.store.get(index).pos % self.config.data_file_size == 0

    @precondition(lambda self: self.model.committed_index > self.model.begin_index >= 0)
    @rule(data=st.data())
    def reset_prefix(self, data: st.DataObject) -> None:
        upto = data.draw(st.integers(self.model.begin_index, self.model.committed_index - 1))
        term = self.model.term_at(upto)
        # reset's checkpoint records only what is durable: flush first, so what a later
        # crash keeps does not depend on the flush thread's timing
        self.store.flush()
        assert self.store.reset(upto, term) == self.model.reset(upto, term)

    @rule()
    def close_and_reopen(self) -> None:
        self.store.close()
        self.reopen()

    @rule()
    def flush_pass(self) -> None:
        # what the owner's flush thread does every flush_file_interval_ms (async flush;
        # no checkpoint is due), at any point of the sequence
        self.store._flush_once()

    @rule()
    def crash_and_reopen(self) -> None:
        # a process crash: the page cache survives, nothing is flushed or checkpointed
        self.store.data_list.close()
        self.store.index_list.close()
        self.store._lock.release()  # the kernel drops a killed process's lock
        self.reopen()
        self.model._committed = min(self.model.committed_index, self.store.committed_index)

    @precondition(
        lambda self: (
            self.model.begin_index >= 0
            and self.model.end_index > max(self.model.committed_index, self.model.begin_index)
        )
    )
    @rule(data=st.data())
    def corrupt_uncommitted_body_and_reopen(self, data: st.DataObject) -> None:
        lo = max(self.model.committed_index + 1, self.model.begin_index)
        # damage more than a segment before the last one is refused, not cut (DLedger's
        # safety valve): stay within the last two segments
        fs = self.config.data_file_size
        last = self.store.get(self.model.end_index).pos
        lo = next(i for i in range(lo, self.model.end_index + 1) if self.store.get(i).pos >= last - last % fs - fs)
        victim = data.draw(st.integers(lo, self.model.end_index))
        entry = self.store.get(victim)
        self.store.close()
        segment = entry.pos - entry.pos % self.config.data_file_size
        path = self.dir / "data" / f"{segment:020d}"
        raw = bytearray(path.read_bytes())
        at = entry.pos % self.config.data_file_size + (48 if entry.body else 0)  # body byte, or the magic
        raw[at] ^= 0xFF
        path.write_bytes(bytes(raw))
        self.reopen()
        self.model.truncate(victim)
        assert self.store.recovery.problem

    @invariant()
    def same_log(self) -> None:
        s, m = self.store, self.model
        assert (s.begin_index, s.end_index) == (m.begin_index, m.end_index) or (
            m.begin_index == -1 and s.begin_index == -1
        )
        assert s.committed_index == m.committed_index
        if m.begin_index >= 0:
            assert s.end_term == m.end_term
            for index in range(m.begin_index, m.end_index + 1):
                a, b = s.get(index), m.get(index)
                assert (a.index, a.term, a.magic, a.body) == (b.index, b.term, b.magic, b.body)
            # both logs end where their last entry ends (never after a segment-end blank:
            # a follower's next entry must land where the leader's is)
            for store in (s, m):
                last = store.get(store.end_index)
                assert store.write_pos == last.pos + last.size
        try:
            s.get(m.end_index + 1)
            raise AssertionError("read past the end")
        except DLedgerError:
            pass


class WriteThroughStoreModel(StoreModel):
    """The same with appends written through the files (pwrite, the sync-mode default)."""

    config = replace(CONFIG, data_writes="pwrite")


StoreModel.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
WriteThroughStoreModel.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
TestStoreModel = StoreModel.TestCase
TestWriteThroughStoreModel = WriteThroughStoreModel.TestCase
