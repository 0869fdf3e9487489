"""MmapLogStore: DLedger's DLedgerMmapFileStore — byte-compatible segmented mmap files.

The hot path (append, reads, scans) is inherited from the compiled `LogCore`, so
`store.append(body)` is one call into C. This module adds the files around it: opening
and recovery, the checkpoint, truncation and prefix deletion, group commit (sync mode),
and the background passes (async flush and checkpoint, warm-ahead of the next segments,
retention) that the store's owner runs on its threads (`periodic_passes`): the store
starts no thread of its own.
"""

from __future__ import annotations

import errno
import logging
import operator
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import StoreConfig as StoreConfig  # its home is dledger.config; re-exported
from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE, MAGIC_NORMAL, Entry
from dledger.service_thread import PeriodicPass
from dledger.store import failpoints, kvfile, truncate
from dledger.store.checkpoint import load_checkpoint
from dledger.store.clean import CleanSpaceService
from dledger.store.flusher import Durability
from dledger.store.layout import CHECKPOINT_FILE, DATA_DIR, INDEX_DIR, RESET_FILE, holds_store, make_store_dir
from dledger.store.layout import sized_config as sized_config  # re-exported: its old home
from dledger.store.lock import StoreLock
from dledger.store.recovery import Recovery, RecoveryReport, first_entry_header
from dledger.store.segment_list import SegmentList
from dledger.store.warm import WarmAhead

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

log = logging.getLogger(__name__)


class MmapLogStore(impl.LogCore, Durability):
    """The file store of one node: `<store_base_dir>/dledger-<selfId>/{data,index}` plus
    `checkpoint`. Use `MmapLogStore.open(node_dir, config)`.

    Thread-safe: appends, reads, truncation and the background passes share the core's
    lock; reads never see a partially written entry. The passes (`periodic_passes`) are
    run by the store's owner, which stops them before it closes the store.
    """

    config: StoreConfig

    def __init__(
        self, node_dir: str | os.PathLike[str], config: StoreConfig | None = None, *, repair: bool = False
    ) -> None:
        super().__init__()
        self._repair = repair
        self.cut_committed = False
        cfg = config or StoreConfig()
        if cfg.java_compat:
            cfg = replace(cfg, write_crc=False)
        self.config = cfg
        self.node_dir = Path(node_dir)
        self.write_crc = cfg.write_crc
        self.verify_crc = cfg.verify_crc
        self.max_entry_size = cfg.max_entry_size
        self.allow_noop = self.allow_records = not cfg.java_compat  # Java reads neither
        self.write_through = cfg.write_through and not cfg.read_only
        if "after_data_before_index" in failpoints.active():
            self.failpoint = impl.FAIL_AFTER_DATA_BEFORE_INDEX
        self._committed = -1
        self._retention_floor = 1 << 62
        self._flushed_data = 0
        self._flushed_index = 0
        self._durable_end_index = -1
        self._checkpointed = (-2, -2)
        self._last_checkpoint_ms = 0.0
        self._checkpoint_lock = threading.Lock()
        self._init_durability()
        self._closed = False
        self.failure: BaseException | None = None
        self.cleaner = CleanSpaceService(self, cfg)
        self.warmer = WarmAhead(self, cfg.warm_ahead_bytes)
        self._lock = StoreLock(self.node_dir, owner=self)
        try:
            self._open_files()
        except BaseException as exc:
            self._lock.release()
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                raise DLedgerError(
                    ResponseCode.DISK_FULL, f"no space left to open the store in {self.node_dir}"
                ) from exc
            raise

    @classmethod
    def open(
        cls, node_dir: str | os.PathLike[str], config: StoreConfig | None = None, *, repair: bool = False
    ) -> MmapLogStore:
        """Open (creating it unless read-only) and recover the store in `node_dir`: a
        `SyncMmapLogStore` when `config.flush_mode` is "sync". No thread is started: the
        caller runs `periodic_passes()` (see `dledger.service_thread.start_passes`).

        A writable open takes the store's lock (`store/lock.py`) until `close()`.
        `repair=True` lets recovery cut a damaged tail although no valid checkpoint says
        what is committed, or although it holds committed entries (`dledger check
        --repair`, `dledger server --repair`); otherwise that is refused. `cut_committed`
        then says whether committed entries were cut (the member must rejoin: see
        dledger.store.membership).

        Raises:
            DLedgerError: the store is locked by another writer, or cannot be opened.
            CorruptStoreError: damaged data recovery must not drop (file and offset).
        """
        cfg = config or StoreConfig()
        store_cls = SyncMmapLogStore if cfg.flush_mode == "sync" and cls is MmapLogStore else cls
        store: MmapLogStore = store_cls(node_dir, cfg, repair=repair)
        return store

    # -- opening

    def _open_files(self) -> None:
        cfg = self.config
        ro = cfg.read_only
        if not ro:
            make_store_dir(self.node_dir)
            # one writer per store: taken before anything is read or written
            self._lock.acquire()
        elif not self.node_dir.is_dir():
            raise DLedgerError(ResponseCode.DISK_ERROR, f"{self.node_dir} is not a store directory")
        created = not ro and not holds_store(self.node_dir)
        self.data_list = SegmentList(self.node_dir / DATA_DIR, cfg.data_file_size, ro, keep_fds=self.write_through)
        self.index_list = SegmentList(self.node_dir / INDEX_DIR, cfg.index_file_size, ro)
        self._init_core(self.data_list.table, self.index_list.table, self._roll, self._fail)
        self.data_list.load()
        self._load_index()
        self.checkpoint_info = load_checkpoint(self.node_dir)
        committed = self.checkpoint_info.committed
        reset = kvfile.read(self.node_dir / RESET_FILE)
        before_begin = kvfile.read_int(reset, "beforeBeginIndex", -1)
        self._acquire()
        try:
            checkpoint_end = self.checkpoint_info.end
            # entries up to the last reset are gone on purpose; only later ones must be there
            must_have = committed if committed > before_begin else -1
            recovery = Recovery(
                self, self.data_list, self.index_list, cfg.verify_crc, must_have, checkpoint_end, before_begin
            )
            # without a valid checkpoint nothing says which entries are committed: a
            # damaged entry is then refused, never cut on a guess (unless repairing)
            recovery.may_cut_unknown = self.checkpoint_info.known or self._repair
            recovery.may_cut_committed = self._repair
            self.recovery: RecoveryReport = recovery.run()
            self.cut_committed = recovery.cut_committed
            if self.begin_index < 0 and before_begin > self.end_index:
                # every entry after the last reset is gone: the log still ends there
                term = kvfile.read_int(reset, "beforeBeginTerm", -1)
                self._set_state(-1, before_begin, term, int(self.write_pos))
        finally:
            self._release()
        # Clamp to the ledger end (DLedger #316); a deleted prefix was committed.
        committed = min(max(committed, -1), self.end_index)
        if self.begin_index > 0:
            committed = max(committed, self.begin_index - 1)
        self._committed = committed
        if not ro:
            # What recovery accepted may sit in the page cache only (written before a
            # process crash, or rewritten by recovery): make it durable before the
            # checkpoint or a peer can take it as such.
            self._sync_recovered()
        self._flushed_data = int(self.write_pos)
        self._flushed_index = (self.end_index + 1) * INDEX_UNIT_SIZE
        self._durable_end_index = self.end_index
        if ro:
            self.state = impl.STATE_READ_ONLY
        elif created:
            # a new store records at once that nothing is committed: from here on a
            # missing checkpoint means a damaged store, never a new one (recovery.py)
            self.write_checkpoint()

    def _sync_recovered(self) -> None:
        try:
            for segments in (self.data_list, self.index_list):
                table = segments.table
                if table.count:
                    self._msync(segments, int(table.first_offset), int(table.end_offset))
        except OSError as exc:
            raise DLedgerError(ResponseCode.DISK_ERROR, f"cannot make the recovered log durable: {exc}") from exc

    def _load_index(self) -> None:
        try:
            self.index_list.load()
        except DLedgerError as exc:
            if self.index_list.read_only:
                raise
            log.warning("index files unusable (%s); rebuilding the index from the data", exc)
            self.index_list.close()
            for path in (self.node_dir / INDEX_DIR).glob("*"):
                path.unlink()
            self.index_list.load()

    def _roll(self, kind: int, offset: int) -> None:
        (self.data_list if kind == 0 else self.index_list).roll(offset)

    def periodic_passes(self) -> list[PeriodicPass]:
        """The background work of an open store, for its owner to run: the flush pass
        (async flush and the checkpoint), warm-ahead of the next pages and segments,
        and retention (`cleaner`). None when read-only."""
        if self.config.read_only:
            return []
        cfg = self.config
        passes = [PeriodicPass("dledger-flush", self._flush_once, cfg.flush_file_interval_ms, self._fail)]
        if cfg.warm_ahead_bytes > 0:
            passes.append(PeriodicPass("dledger-warm", self.warmer.run_once, 5, self._fail_warm))
        passes.append(PeriodicPass("dledger-clean", self.cleaner.run_once, cfg.clean_interval_ms))
        return passes

    # -- committed index and checkpoint

    @property
    def committed_index(self) -> int:
        """Highest committed index (from `checkpoint` at open, then as updated)."""
        return self._committed

    def update_committed_index(self, index: int) -> None:
        """Record the committed index (clamped to end_index; never decreases)."""
        self._committed = max(self._committed, min(index, self.end_index))

    def set_retention_floor(self, index: int) -> None:
        """Retention never deletes a segment holding entries at or above `index`."""
        self._retention_floor = index

    @property
    def retention_floor(self) -> int:
        """Entries at or above this index are never expired."""
        return min(self._retention_floor, self.committed_index + 1)

    def write_checkpoint(self) -> None:
        """Persist `committedIndex` and `endIndex` (only what is durable)."""
        with self._checkpoint_lock:
            end = self._durable_end_index
            committed = min(self.committed_index, end)
            if (committed, end) == self._checkpointed:
                return
            kvfile.write_atomic(
                self.node_dir / CHECKPOINT_FILE, {"committedIndex": str(committed), "endIndex": str(end)}
            )
            self._checkpointed = (committed, end)

    # -- durability (wait_durable, flush, the flush pass: flusher.py) and warm-ahead (warm.py)

    def _fail_warm(self, exc: BaseException) -> None:
        # no room for the next segment: the appends say DISK_FULL when they reach it (the
        # pass's thread has logged it once), and nothing has failed yet
        if not (isinstance(exc, DLedgerError) and exc.code == ResponseCode.DISK_FULL):
            self._fail(exc)

    def wait_warm(self) -> None:
        """Pre-fault the whole warm-ahead window now, in this thread (benchmarks, tests)."""
        self.warmer.warm_now()

    # -- reads

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:  # type: ignore[override]
        """Entries from `from_index` column-wise (see ColumnBatch; `dledger.record.with_records` adds records)."""
        return ColumnBatch.from_raw(super().read_columns(from_index, max_count, max_bytes))

    def read_records(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:  # type: ignore[override]
        """The entries of `read_columns` with their record columns and no bodies, straight
        from the data file (see `dledger.store.StoreView.read_records`)."""
        return ColumnBatch.from_record_raw(super().read_records(from_index, max_count, max_bytes))

    def get_range(self, from_index: int, to_index: int) -> list[Entry]:
        """Entries in [from_index, to_index) that exist."""
        lo, hi = max(from_index, self.begin_index), min(to_index, self.end_index + 1)
        return [self.get(i) for i in range(lo, hi)]

    def iterate(self, from_index: int | None = None, to_index: int | None = None) -> Iterator[Entry]:
        """Entries in [from_index, to_index) (default: the whole log), in order.
        For bulk reads prefer `read_columns`."""
        first = self.begin_index if from_index is None else max(from_index, self.begin_index)
        stop = self.end_index + 1 if to_index is None else min(to_index, self.end_index + 1)
        for index in range(max(first, 0), stop):
            yield self.get(index)

    # -- truncation and prefix deletion

    def truncate(self, from_index: int) -> None:
        """Delete entries [from_index, end_index]; their bytes are zeroed so recovery can
        never bring them back. The log then ends where entry from_index - 1 ends (a blank
        after it goes too), where the leader's entry from_index sits (an int: TypeError else)."""
        from_index = operator.index(from_index)
        self._check_writable_py()
        self._acquire()
        try:
            if from_index > self.end_index:
                return
            if from_index <= self.begin_index or self.begin_index < 0:
                self._truncate_all(from_index)
                return
            kept = self.get_locked(from_index - 1)
            new_end = kept.pos + kept.size
            old_index_end = (self.end_index + 1) * INDEX_UNIT_SIZE
            truncate.cut_data(self.data_list, new_end, int(self.write_pos))
            failpoints.hit("mid_truncate")
            cut = from_index * INDEX_UNIT_SIZE
            self.index_list.truncate_to(cut)
            self._zero_tail(self.index_list, cut, old_index_end)
            self._set_state(self.begin_index, from_index - 1, kept.term, new_end)
            self._after_shrink()
        finally:
            self._release()
        self.flush()
        self.write_checkpoint()

    def _truncate_all(self, from_index: int) -> None:
        term = -1
        if from_index == self.begin_index >= 0:
            # the log keeps its end position: the first entry's (after a reset's head blank)
            pos = self.get_locked(from_index).pos
            truncate.empty_data_at(self.data_list, pos, int(self.write_pos))
            # and its end term, the last reset's (a vote compares it: never -1 when known)
            reset = kvfile.read(self.node_dir / RESET_FILE)
            if kvfile.read_int(reset, "beforeBeginIndex", -1) == from_index - 1:
                term = kvfile.read_int(reset, "beforeBeginTerm", -1)
        else:
            self.data_list.drop_all()
            pos = 0
        self.index_list.drop_all()
        self._set_state(-1, from_index - 1, term, pos)
        self._after_shrink()

    def _zero_tail(self, segments: SegmentList, start: int, end: int) -> None:
        table = segments.table
        if table.count:
            segments.zero_range(start, min(end, table.end_offset))
            table.msync(start, min(end, table.end_offset))

    def _after_shrink(self) -> None:
        self._flushed_data = min(self._flushed_data, int(self.write_pos))
        self._flushed_index = min(self._flushed_index, (self.end_index + 1) * INDEX_UNIT_SIZE)
        self._durable_end_index = min(self._durable_end_index, self.end_index)
        self._committed = min(self._committed, self.end_index)
        self.warmer.reset()
        # bytes rewritten from here on go back to the kernel again once far enough behind
        self._released_data = min(self._released_data, int(self.write_pos))
        self._released_index = min(self._released_index, (self.end_index + 1) * INDEX_UNIT_SIZE)

    def get_locked(self, index: int) -> Entry:
        """`get` for callers that already hold the core lock."""
        header = impl.decode_index_unit(self.index_list.table.read(index * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))
        _, pos, size, idx, term = header
        raw = self.data_list.table.read(pos, size)
        magic, _, _, term, _, _, _, crc, _ = impl.decode_header(raw)
        return Entry(idx, term, pos, magic, raw[HEADER_SIZE:], crc)

    def term_locked(self, index: int) -> int:
        """Term of `index` for callers holding the lock (-1 below the log)."""
        if index < self.begin_index or index < 0:
            return -1
        return int(impl.decode_index_unit(self.index_list.table.read(index * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE))[4])

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        """Delete the prefix up to `before_begin_index` (DLedger 0.4.0 reset): whole
        segments are deleted and a blank record covers the dead part of the first kept
        data segment (up to the end of the log when every entry goes, so the next entry
        still lands at the log's end position, or at `next_pos` when given: the position
        of the leader's entry after an installed snapshot). Returns the new begin index.

        Raises:
            DLedgerError: UNSUPPORTED in `java_compat` mode: Java DLedger <= 0.3 cannot
                read the head blank this writes back (it reports begin 0, and recovers an
                empty log when one segment is left). Retention (whole segments) is safe.
        """
        if self.config.java_compat:
            raise DLedgerError(
                ResponseCode.UNSUPPORTED,
                "reset() is refused in java_compat mode: Java DLedger <= 0.3 misreads the head blank "
                "it writes; delete whole segments with retention instead, or open without java_compat",
            )
        self._check_writable_py()
        self._acquire()
        try:
            moved = next_pos not in (None, self.write_pos)  # an empty log placed at another position
            if before_begin_index < self.begin_index or (
                self.begin_index < 0 and (before_begin_index, moved) < (self.end_index, True)
            ):
                return int(max(self.begin_index, 0))
            kvfile.write_atomic(
                self.node_dir / RESET_FILE,
                {"beforeBeginIndex": str(before_begin_index), "beforeBeginTerm": str(before_begin_term)},
            )
            if before_begin_index >= self.end_index:
                end_pos = int(self.write_pos) if next_pos is None else next_pos
                truncate.empty_data_at(self.data_list, end_pos, max(end_pos, int(self.write_pos)))
                truncate.place_empty_at(self.data_list, end_pos)
                self.index_list.drop_all()
                self._set_state(-1, before_begin_index, before_begin_term, end_pos)
                self._after_shrink()
                return before_begin_index + 1
            new_begin = before_begin_index + 1
            start = self.get_locked(new_begin).pos
            self._delete_data_before(start)
            truncate.write_head_blank(self.data_list, start)
            self._delete_index_before(new_begin)
            self._set_state(new_begin, self.end_index, self.end_term, int(self.write_pos))
            return new_begin
        finally:
            self._release()
            self._committed = max(self._committed, min(before_begin_index, self.end_index))
            self.write_checkpoint()

    def _delete_data_before(self, pos: int) -> None:
        table = self.data_list.table
        while table.count > 1 and table.first_offset + table.file_size <= pos:
            self.data_list.drop_first()

    def _delete_index_before(self, begin: int) -> None:
        table = self.index_list.table
        floor = begin * INDEX_UNIT_SIZE
        while table.count > 1 and table.first_offset + table.file_size <= floor:
            self.index_list.drop_first()

    def delete_segments_before(self, pos: int) -> None:
        """Retention: delete whole data segments ending at or before `pos` and move the
        begin index to the first entry left. Caller holds the core lock."""
        self._delete_data_before(pos)
        table = self.data_list.table
        first = first_entry_header(table, self.data_list.directory, table.first_offset)
        if first is not None:
            begin = int(first[2])
            self._delete_index_before(begin)
            self._set_state(begin, self.end_index, self.end_term, int(self.write_pos))

    # -- lifecycle

    def _check_writable_py(self) -> None:
        if self.state == impl.STATE_READ_ONLY:
            raise DLedgerError(ResponseCode.DISK_ERROR, "store is read-only")
        if self.state == impl.STATE_DISK_ERROR:
            raise DLedgerError(ResponseCode.DISK_ERROR, "store failed after an I/O error")

    def close(self) -> None:
        """Flush, checkpoint, unmap (the owner stops `periodic_passes()` first); end_index is -1 after it."""
        if self._closed:
            return
        self._closed = True
        self.warmer.stop()
        try:
            if self.state not in (impl.STATE_DISK_ERROR, impl.STATE_READ_ONLY):  # failed, or a forked child's
                self.flush()
                self.try_checkpoint()
        finally:  # released whatever failed above
            self._acquire()
            try:  # read-only first: an append that waited for the lock re-checks it and refuses
                self.state = impl.STATE_READ_ONLY
                self.data_list.close()
                self.index_list.close()
                self._set_state(-1, -1, -1, 0)
            finally:
                self._release()
                self._lock.release()

    def __enter__(self) -> MmapLogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncMmapLogStore(MmapLogStore):
    """`flush_mode="sync"`: every append returns only once its bytes are durable.

    Concurrent appenders share msyncs (group commit, see flusher.py).
    """

    appends_wait = True

    def append(self, body: bytes) -> int:
        index = int(super().append(body))
        self.wait_durable()
        return index

    def append_many(self, bodies: Iterable[bytes], magic: int = MAGIC_NORMAL) -> int:
        first = int(super().append_many(bodies, magic))
        self.wait_durable()
        return first

    def append_noop(self) -> int:
        index = int(super().append_noop())
        self.wait_durable()
        return index

    def append_encoded(self, run: ReadableBuffer) -> int:
        count = int(super().append_encoded(run))
        self.wait_durable()
        return count
