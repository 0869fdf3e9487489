"""The embedded API: a high-throughput local log in one process.

    import dledger

    with dledger.open_log("/var/lib/app/log") as log:
        first = log.append_many([b"a", b"b"])
        log.append(b"c")
        log.get(first).body           # b"a"
        for entry in log.iterate():    # every entry, in order
            ...
        i = log.append_record(b"v", key=b"k", headers=[("h", b"1")])
        log.get_record(i).key         # b"k" (a Record: key, value, timestamp, headers, index, term)
        log.index_at_time(1_700_000_000_000)  # first record at or after a time (binary search)

A local log is a single-node DLedger store: every appended entry counts as committed
and `checkpoint` is kept current, so offline readers (Spark, `dledger check`) see it.
One writer at a time: the open log holds the store's `lock` until `close()`. A closed
log refuses reads and writes (and `with`) with ValueError, as a closed file does. A store
open_log creates carries a `locallog` marker; a store a Raft member or Java DLedger
wrote is only opened read-only (its commit state is never changed).
"""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import NoReturn

from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import Header, Record, encode_record, encode_record_objects, record_of, with_records
from dledger.service_thread import ServiceThread, start_passes
from dledger.store import (
    MmapLogStore,
    StoreConfig,
    SyncMmapLogStore,
    holds_store,
    kvfile,
    resolve_node_dir,
    sized_config,
)
from dledger.store.checkpoint import load_checkpoint
from dledger.store.layout import CURRTERM_FILE, LOCAL_LOG_FILE, keep_store_sizes
from dledger.timeindex import search_store

logger = logging.getLogger(__name__)

_CLOSED_REFUSES = (
    *("append", "append_encoded", "append_many", "append_noop", "append_record", "append_records"),
    *("get", "get_body", "get_locked", "get_range", "get_record", "term_at", "term_locked"),
    *("iterate", "iterate_records", "read_columns", "read_records", "read_run", "scan", "index_at_time"),
    *("truncate", "reset", "delete_segments_before", "write_units", "unit_conflicts"),
    *("flush", "write_checkpoint", "wait_durable", "wait_warm", "periodic_passes"),
)
"""The methods a closed local log refuses (its properties stay readable: end_index and
begin_index then read -1)."""


def _refuse_closed(node_dir: Path, method: str, *args: object, **kwargs: object) -> NoReturn:
    """What a closed local log's methods do."""
    raise ValueError(f"{method}: the log is closed ({node_dir})")


class RecordReads(MmapLogStore):
    """The record reads of a local log (`read_columns(..., records=True)`, `get_record`,
    `iterate_records`, `index_at_time`), also on a Raft member's or Java DLedger's store
    that `open_log` opened read-only (helper E: those reads were missing there)."""

    def read_columns(  # type: ignore[override]
        self, from_index: int, max_count: int, max_bytes: int, records: bool = False
    ) -> ColumnBatch:
        """Entries from `from_index` column-wise (see ColumnBatch); with `records`, their
        record columns too (key, timestamp, headers, value: `ColumnBatch.records`, built
        in C). Without, a read costs what a plain body read costs."""
        batch = super().read_columns(from_index, max_count, max_bytes)
        return with_records(batch) if records else batch

    def get_record(self, index: int) -> Record:
        """The entry at `index` as a Record (a plain entry: no key, no headers, no
        timestamp). DLedgerError INDEX_OUT_OF_RANGE outside the log."""
        return record_of(self.get(index))

    def iterate_records(self, from_index: int | None = None, to_index: int | None = None) -> Iterator[Record]:
        """Records in [from_index, to_index) (default: the whole log), in order. For bulk
        reads prefer `read_columns(..., records=True)`, or `read_records` (the record
        columns without the bodies, each field copied once)."""
        for entry in self.iterate(from_index, to_index):
            yield record_of(entry)

    def index_at_time(self, timestamp_ms: int) -> int:
        """The index of the first record whose event timestamp is at or after
        `timestamp_ms` (ms since the epoch), found by binary search (about log2(n) reads
        of 64 entries); `end_index + 1` when no record is. Exact when timestamps do not
        decrease along the log; plain entries count as older than any time (see
        `dledger.timeindex`).

        Raises:
            ValueError: a negative timestamp, or a record body that does not decode.
        """
        return search_store(self, timestamp_ms).index


class _LocalLogBase(RecordReads):
    """What both local logs add to the file store: every appended entry is committed
    (a one-node group), and the log owns the threads that run its periodic passes
    (flush and checkpoint, warm-ahead, retention), started by `open_log` and stopped
    by `close()` before the log is flushed and closed.

    Once closed, reads and writes (`append*`, `get*`, `iterate*`, `read_*`,
    `truncate`, `index_at_time`, `term_at`, `flush`...) and `with log:` raise
    ValueError("...the log is closed"), as a closed file does, instead of answering as
    an empty log. `close()` shadows those methods on the instance, so an open log's
    calls go straight to the compiled store at no extra cost (`append_many` adds one
    Python call, for the error of a batch that failed half way).
    """

    _pass_threads: tuple[ServiceThread, ...] = ()

    @property
    def committed_index(self) -> int:
        """The end of the log: everything appended is committed."""
        return int(self.end_index)

    def update_committed_index(self, index: int) -> None:
        """Committed always follows the end of the log."""

    def append_many(self, bodies: Iterable[bytes], magic: int = MAGIC_NORMAL) -> int:
        """Append `bodies` as consecutive entries of `magic` (1 normal, 16 record);
        returns the first index. Bad input appends nothing. A store failure half way (no
        room for the next segment) leaves the entries before it, and its error says so
        with where the log ended before the call and ends now (cutting them back could
        cut another thread's entries appended since: helper E saw 1,014 of 3,000 stay,
        and an error that did not say so)."""
        end = int(self.end_index)
        try:
            return int(super().append_many(bodies, magic))
        except DLedgerError as exc:
            now = int(self.end_index)
            if now <= end:
                raise
            raise DLedgerError(
                exc.code,
                f"{exc.message}; the log ended at index {end} before this call and ends at {now}: "
                "the entries before the failure stay",
            ) from exc

    def truncate(self, from_index: int) -> None:
        """Delete entries [from_index, end_index] for good (all of them from the begin
        index down); a negative index is refused, not taken for "every entry".

        Raises:
            TypeError: `from_index` is not a whole number (int or a numpy integer).
            ValueError: `from_index` < 0.
        """
        if isinstance(from_index, bool) or not hasattr(from_index, "__index__"):
            raise TypeError(f"truncate: from_index must be an int, not {type(from_index).__name__}")
        from_index = operator.index(from_index)
        if from_index < 0:
            raise ValueError(f"cannot truncate from index {from_index}: indexes start at 0")
        super().truncate(from_index)

    def append_record(
        self,
        value: bytes,
        *,
        key: bytes | None = None,
        timestamp: int | None = None,
        headers: Iterable[Header] = (),
    ) -> int:
        """Append one record (magic 16); returns its index.

        Args:
            value: the payload.
            key: the key (at most 65,536 bytes), or None.
            timestamp: event time in ms since the epoch (>= 0); None: now.
            headers: (str key, bytes value) pairs, repeats allowed, order kept (at most
                1,024; keys at most 1,024 UTF-8 bytes).

        Raises:
            ValueError / TypeError: a field over its limit or of the wrong type.
            DLedgerError: UNSUPPORTED in java_compat mode (Java cannot read records).
        """
        return int(self.append_many([encode_record(value, key, timestamp, headers)], MAGIC_RECORD))

    def append_records(self, records: Sequence[Record]) -> int:
        """Append records (their value, key, timestamp and headers; a None timestamp is
        now) as consecutive entries; returns the first index (errors: `append_record`;
        TypeError when `records` is not a sequence of Records; bad input appends none of
        them, a store failure half way keeps those before it: see `append_many`)."""
        return int(self.append_many(encode_record_objects(records, "append_records"), MAGIC_RECORD))

    def _start_pass_threads(self) -> None:
        if not self._pass_threads:
            self._pass_threads = tuple(start_passes(self.periodic_passes()))

    def close(self) -> None:
        """Stop the pass threads, then flush, write the checkpoint and unmap; from then
        on reads and writes raise ValueError. Idempotent."""
        threads, self._pass_threads = self._pass_threads, ()
        for thread in threads:
            thread.stop()
        try:
            super().close()
        finally:  # closed even when the last flush failed (a second close() returns at once)
            for method in _CLOSED_REFUSES:  # instance attributes hide the class's methods
                setattr(self, method, partial(_refuse_closed, self.node_dir, method))

    def __enter__(self) -> _LocalLogBase:
        """The log itself (ValueError once closed)."""
        if self._closed:
            raise ValueError(f"the log is closed ({self.node_dir})")
        return self


class LocalLog(_LocalLogBase):
    """A local log with async flushing (acknowledged before fsync, flushed every 10 ms)."""


class SyncLocalLog(_LocalLogBase, SyncMmapLogStore):
    """A local log whose appends return once durable (group commit)."""


def open_log(path: str | os.PathLike[str], config: StoreConfig | None = None) -> MmapLogStore:
    """Open (creating if needed) a local log in `path`, recover it and start its
    background passes (stopped by `close()`).

    Args:
        path: the node directory; created when missing. A storeBaseDir holding exactly
            one `dledger-*` directory is accepted too.
        config: store options (segment sizes, flush mode, CRCs, warm-ahead...). The
            segment sizes of an existing store are its own, read off its files: a
            config's sizes apply to a new store.

    Returns:
        The open log. Its `term` starts at the last entry's term (at least 1).

    Raises:
        TypeError: `path` is not a str or path, or `config` is not a StoreConfig.
        ValueError: `path` is empty (it would make the current directory a store; pass
            "." to mean it).
        DLedgerError: the store is locked by another writer (the message names its pid),
            or it was written by a replicated member or Java DLedger and `config` is not
            read-only (open_log never changes the commit state of such a store; with
            `read_only=True` it is opened as it is, committed as its checkpoint says).
        CorruptStoreError: damaged data recovery must not cut (see `dledger check`).
    """
    _check_open_args(path, config)
    node_dir = resolve_node_dir(path)
    config = sized_config(node_dir) if config is None else keep_store_sizes(node_dir, config)
    foreign = _foreign_store(node_dir)
    if foreign:
        if not config.read_only:
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT,
                f"{node_dir} is not a local log ({foreign}): open_log would mark every entry committed. "
                "Open it read-only with open_log(path, StoreConfig(read_only=True)), or serve it with "
                "`dledger server`",
            )
        return RecordReads(node_dir, config)  # committed as its checkpoint says
    created = not holds_store(node_dir)
    cls = SyncLocalLog if config.flush_mode == "sync" else LocalLog
    log = cls(node_dir, config)
    try:
        if not config.read_only and not (node_dir / LOCAL_LOG_FILE).exists():
            _write_marker(node_dir, created)
    except BaseException:
        log.close()
        raise
    log.term = max(1, log.end_term)
    log._start_pass_threads()
    return log


def _check_open_args(path: object, config: object) -> None:
    """Refuse what `open_log` must not take for a path or a config (see its Raises)."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"open_log: path must be a str or os.PathLike, not {type(path).__name__}")
    if os.fspath(path) == "":
        raise ValueError('open_log: path is empty (it would make the current directory a store; pass "." to mean it)')
    if config is not None and not isinstance(config, StoreConfig):
        hint = " (from a dict: StoreConfig(**options))" if isinstance(config, dict) else ""
        raise TypeError(f"open_log: config must be a StoreConfig, not {type(config).__name__}{hint}")


def _foreign_store(node_dir: Path) -> str:
    """Why the store in `node_dir` was written by a replicated member or Java DLedger
    (not by `open_log`), or "" when it is a local log or no store yet. A store carries
    the `locallog` marker from its creation by open_log; one without it (created before
    the marker existed) counts as local unless it has a `currterm` file (members and
    Java write one) or its checkpoint commits less than the log holds."""
    if not holds_store(node_dir) or (node_dir / LOCAL_LOG_FILE).exists():
        return ""
    if (node_dir / CURRTERM_FILE).exists() or (node_dir / (CURRTERM_FILE + ".bak")).exists():
        return f"it has a {CURRTERM_FILE} file, written by a Raft member"
    info = load_checkpoint(node_dir)
    if info.known and info.committed < info.end:
        return f"its checkpoint commits entries up to {info.committed} of {info.end}"
    return ""


def _write_marker(node_dir: Path, created: bool) -> None:
    how = "created" if created else "adopted"
    kvfile.write_synced(node_dir / LOCAL_LOG_FILE, f"{how} by dledger.open_log\n".encode("ascii"))
    kvfile.fsync_dir(node_dir)
