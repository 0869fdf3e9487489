"""The `dledger` PySpark data source: batch and streaming reads, batch and streaming writes.

This module (and `dledger.spark.sink`) are the only ones that import pyspark. All the
decisions (options, bounds, offsets, task splitting) live in plain modules beside it:
`options`, `planning`, `local` (offline store directories) and `live` (a running cluster
through the gRPC client).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from dledger import allocator
from dledger.codes import DLedgerError
from dledger.raft.log import first_readable
from dledger.spark.arrow import record_batches
from dledger.spark.live import (
    ClientFactory,
    ClusterView,
    LedgerClient,
    LiveTask,
    client_factory_for,
    close_client,
    fetch_view,
    index_at_time,
    plan_batch_read,
    plan_tasks,
    read_task,
)
from dledger.spark.local import LocalTask, bounds_of, node_dir_of, open_store, plan_store
from dledger.spark.options import (
    LOCAL_BATCH_BYTES,
    LOCAL_BATCH_ROWS,
    ReadOptions,
    check_options_at_load,
    parse_read_options,
    read_columns_of,
    read_schema_ddl,
)
from dledger.spark.planning import (
    IndexRange,
    LogBounds,
    admit,
    behind_checkpoint,
    check_data_loss,
    check_same_log,
    make_offset,
    next_end,
    offset_index,
    resolve_range,
    resolve_start,
)
from dledger.spark.records import RECORD_COLUMNS
from dledger.spark.target import OptionError, Target
from dledger.store import checkpoint_committed
from dledger.timeindex import search_store

FORMAT = "dledger"
WORKER_TRIM_THRESHOLD = 64 << 20
"""Free heap a Python worker that reads keeps for reuse (see `keep_worker_memory`)."""
_worker_memory_kept = False


def keep_worker_memory() -> None:
    """Once per Python worker process: keep freed buffers in the heap for reuse
    (`dledger.allocator`, up to WORKER_TRIM_THRESHOLD of free heap). Every read batch
    allocates buffers of a few MiB (bodies, record columns) and frees them once Spark has
    them; with glibc's defaults the top of the heap went back to the kernel after most
    batches, so the next ones faulted their pages in again (14,000 page faults per 2 M
    plain rows, 24,000 for records, against about 2,500 kept), which costs 7-12 us each
    on VMs. glibc's own MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ settings win."""
    global _worker_memory_kept
    if not _worker_memory_kept:
        _worker_memory_kept = True
        allocator.keep_freed_memory(WORKER_TRIM_THRESHOLD)


def schema_fields(schema: StructType) -> list[tuple[str, str]]:
    """(name, simpleString type) of each field."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


class _ReadPlan:
    """What every reader shares: the parsed options, the projected columns, the Arrow
    schema Spark expects back, and the read side of both back-ends. Picklable (no
    connections, no open files); executors get a copy and call `read`."""

    def __init__(self, options: ReadOptions, schema: StructType, min_partitions: int, factory: ClientFactory) -> None:
        self.options = options
        self.columns = read_columns_of(schema_fields(schema))
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.min_partitions = max(1, options.min_partitions or min_partitions)
        self.factory = factory
        self.node_dir = str(node_dir_of(options.target.path)) if options.target.path else None

    @property
    def connect_timeout_s(self) -> float:
        """How long planning waits for a live cluster's metadata."""
        return min(self.options.connect_timeout_ms, self.options.rpc_timeout_ms) / 1000

    @property
    def timeout_s(self) -> float:
        """Per-operation deadline of live clients."""
        return self.options.rpc_timeout_ms / 1000

    @property
    def node_dir_path(self) -> Path:
        """The node directory of an offline read."""
        return Path(self.node_dir or "")

    @property
    def with_bodies(self) -> bool:
        """Whether a read needs the bodies (every column but index, term, pos, magic)."""
        return any(col not in ("index", "term", "pos", "magic") for col in self.columns)

    @property
    def with_records(self) -> bool:
        """Whether a read needs record columns (key, value, timestamp, headers)."""
        return any(col in RECORD_COLUMNS for col in self.columns)

    def local_partitions(self, start: int | None, end: int | None) -> list[InputPartition]:
        """Tasks over the store directory: [start, end), or the batch options' range."""
        assert self.node_dir is not None
        opts = self.options
        store = open_store(self.node_dir_path)
        try:
            bounds = bounds_of(store)
            if start is None or end is None:
                rng = resolve_range(opts, bounds, lambda ts: search_store(store, ts).index)
                start, end = rng.start, rng.end
            elif end > bounds.latest:
                raise RuntimeError(
                    f"entries up to {end - 1} of {self.node_dir} were seen committed but the store now ends at "
                    f"committed index {bounds.committed}"
                )
            plan = plan_store(store, start, end, opts.fail_on_data_loss, self.min_partitions, opts.max_partition_bytes)
        finally:
            store.close()
        return [
            InputPartition(
                LocalTask(self.node_dir, r.start, r.end, self.with_bodies, opts.fail_on_data_loss, self.with_records)
            )
            for r in plan.ranges
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one task (executor side)."""
        keep_worker_memory()
        task = partition.value
        if task is None:  # Spark reads one empty partition when there are none
            return iter(())
        if isinstance(task, LocalTask):
            batches = task.read(LOCAL_BATCH_ROWS, LOCAL_BATCH_BYTES)
        elif isinstance(task, LiveTask):
            batches = read_task(task, self.factory)
        else:
            raise TypeError(f"unexpected partition {task!r}")
        return record_batches(batches, self.columns, self.arrow_schema, self.options.include_noops)


class DLedgerBatchReader(DataSourceReader):
    """`spark.read.format("dledger")`: committed entries of [startingIndex, endingIndex)."""

    def __init__(self, plan: _ReadPlan) -> None:
        self.plan = plan

    def partitions(self) -> Sequence[InputPartition]:
        """Tasks by data segment (offline) or by index range over the nodes (live)."""
        plan = self.plan
        if plan.node_dir is not None:
            return plan.local_partitions(None, None)
        target = plan.options.target
        client = plan.factory(target.peers or "", target.group, plan.connect_timeout_s)
        try:
            view = fetch_view(target, client)
            tasks = plan_batch_read(view, plan.options, plan.min_partitions, lambda ts: index_at_time(client, view, ts))
        finally:
            close_client(client)
        return [InputPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one task."""
        return self.plan.read(partition)


class DLedgerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`spark.readStream.format("dledger")`: entries as they commit.

    Offsets are `{"group": g, "index": N}`, N the next index to read. A store directory is
    followed through its `checkpoint` (committed index); a cluster through its leader's
    metadata. availableNow reads up to the committed index seen when the query starts.

    Admission control as Kafka's: `maxEntriesPerTrigger` caps a micro-batch,
    `minEntriesPerTrigger` holds one back until that many entries are committed or
    `maxTriggerDelay` has passed since the last one started. Progress: PySpark gives a
    Python source no `metrics()` hook, so the lag travels in the reported latest offset:
    `{"group", "index", "entriesBehindLatest"}` (committed entries not yet in a batch).
    """

    clock = staticmethod(time.monotonic)
    """Seconds, for `maxTriggerDelay` (tests substitute a manual clock)."""

    def __init__(self, plan: _ReadPlan) -> None:
        self.plan = plan
        self.group = plan.options.target.group
        self._target: int | None = None
        self._client: LedgerClient | None = None  # driver side only, created lazily
        self._last_trigger = self.clock()
        self._planned_end: int | None = None
        self._initial: int | None = None  # the start initialOffset gave (may wait past the end)
        self._same_log_checked = False  # a checkpointed offset's term, against the log (once)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # channels never travel
        return state

    # -- where the log is

    def _bounds(self) -> LogBounds:
        plan = self.plan
        if plan.node_dir is not None:
            store = open_store(plan.node_dir_path)
            try:
                return bounds_of(store)
            finally:
                store.close()
        return self._view().bounds

    def _view(self) -> ClusterView:
        """The cluster's state. Until the cluster has answered once, a client with the
        connect timeout asks (unreachable peers fail the query fast); afterwards one with
        `rpcTimeoutMs` (a leader change while the query runs is waited out)."""
        plan = self.plan
        if self._client is not None:
            return fetch_view(plan.options.target, self._client)
        peers = plan.options.target.peers or ""
        first = plan.factory(peers, self.group, plan.connect_timeout_s)
        try:
            view = fetch_view(plan.options.target, first)
        finally:
            close_client(first)
        self._client = plan.factory(peers, self.group, plan.timeout_s)
        return view

    def _term_before(self, index: int) -> int | None:
        """The term of entry `index - 1` (-1 before the first entry), or None when it is
        no longer (or not yet) there."""
        if index <= 0:
            return -1
        if self.plan.node_dir is not None:
            with open_store(self.plan.node_dir_path) as store:
                return int(store.get(index - 1).term) if first_readable(store) <= index - 1 <= store.end_index else None
        if self._client is None:
            self._view()  # makes the client
        assert self._client is not None
        try:
            batch = next(iter(self._client.read_committed(index - 1, index, 1 << 16, max_batch_count=1)), None)
        except DLedgerError:  # compacted away, or not committed here
            return None
        return int(batch.term[0]) if batch is not None and batch.count else None

    def _check_same_log(self, offset: dict[str, Any]) -> None:
        """The first offset this reader gets from Spark (a checkpoint's after a restart)
        against the log (`check_same_log`)."""
        if not self._same_log_checked:
            self._same_log_checked = True
            if "term" in offset:
                check_same_log(offset, self._term_before(int(offset["index"])), self.plan.options.fail_on_data_loss)

    def _latest(self) -> int:
        if self.plan.node_dir is not None:
            return checkpoint_committed(self.plan.node_dir_path) + 1
        return int(self._view().bounds.latest)

    # -- offsets

    def initialOffset(self) -> dict[str, Any]:
        """startingIndex resolved: earliest, latest (default) or a number; or the first
        record at or after startingTimestamp (committed + 1 when none is)."""
        index = self._initial_index()
        self._initial, self._same_log_checked = index, True
        return make_offset(self.group, index, self._term_before(index))

    def _initial_index(self) -> int:
        starting_timestamp = self.plan.options.starting_timestamp
        if starting_timestamp is None:
            return resolve_start(self.plan.options.starting, self._bounds())
        if self.plan.node_dir is not None:
            with open_store(self.plan.node_dir_path) as store:
                return search_store(store, starting_timestamp).index
        view = self._view()
        assert self._client is not None
        return index_at_time(self._client, view, starting_timestamp)

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxEntriesPerTrigger as ReadMaxRows, else everything available."""
        limit = self.plan.options.max_entries_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an availableNow run: what is committed now."""
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch (committed + 1, capped by the limit), or
        `start` while admission control holds the batch back. A log that now ends before a
        checkpointed `start` is data loss (`behind_checkpoint`); a new stream's
        startingIndex past the end waits for the log to get there."""
        first = offset_index(start, self.group)
        latest = self._latest()
        if latest < first and first != self._initial:
            self._planned_end = behind_checkpoint(first, latest, self.plan.options.fail_on_data_loss)
            return make_offset(self.group, latest, self._term_before(latest))
        self._check_same_log(start)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_end(first, latest, max_rows, self._target)
        min_rows = None if self._target is not None else self.plan.options.min_entries_per_trigger
        now = self.clock()
        waited_ms = (now - self._last_trigger) * 1000
        if end > first and admit(latest - first, min_rows, waited_ms, self.plan.options.max_trigger_delay_ms):
            self._last_trigger = now
        else:
            end = first
        self._planned_end = end
        return dict(start) if end == first else make_offset(self.group, end, self._term_before(end))

    def reportLatestOffset(self) -> dict[str, Any]:
        """Committed + 1, and how many committed entries no batch has taken yet."""
        latest = self._latest()
        offset = make_offset(self.group, latest)
        if self._planned_end is not None:
            offset["entriesBehindLatest"] = max(0, latest - self._planned_end)
        return offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Tasks of [start, end)."""
        first, stop = offset_index(start, self.group), offset_index(end, self.group)
        self._check_same_log(start)
        if first >= stop:
            return []
        plan = self.plan
        if plan.node_dir is not None:
            return plan.local_partitions(first, stop)
        view = self._view()
        first = check_data_loss(first, view.bounds, plan.options.fail_on_data_loss)
        if first >= stop:
            return []
        tasks = plan_tasks(view, IndexRange(first, stop), plan.options, plan.min_partitions)
        return [InputPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one task."""
        return self.plan.read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the log keeps everything until retention."""

    def stop(self) -> None:
        """Close the metadata client."""
        if self._client is not None:
            close_client(self._client)
            self._client = None


class DLedgerDataSource(DataSource):
    """The `dledger` format. Register it with `dledger.spark.register(spark)`.

    Read schema: Kafka's names, `key binary, value binary, index long, term long, pos
    long, timestamp timestamp, headers array<struct<key: string, value: binary>>` (plus
    `magic int` with `includeNoops=true`); a user schema may pick a subset of these or
    reorder them, and may name `body binary`, `value` under its old name; with only
    index, term, pos and magic no body is read. NOOP entries are left out unless
    `includeNoops`. Writes take `value` (or `body`) and optionally `key`, `timestamp`,
    `headers`. Options are documented in docs/SPARK.md.
    """

    default_min_partitions: int | None = None
    """Spark's default parallelism, captured by `register` (planning runs in a Python
    worker that cannot ask Spark)."""

    @classmethod
    def name(cls) -> str:
        """The format name: "dledger"."""
        return FORMAT

    @classmethod
    def client_factory(cls, target: Target) -> ClientFactory:
        """How the clients of a live cluster `target` are made: plaintext, or mutual
        TLS with its tlsCert / tlsKey / tlsCa files (tests substitute a fake)."""
        return client_factory_for(target)

    def schema(self) -> str:
        """The read schema (see the class), plus `magic int` with `includeNoops=true`.
        Called by `load()`, so the options are checked here, where a bad one fails at
        once (not at a stream's `start()`)."""
        check_options_at_load(dict(self.options))
        return read_schema_ddl(dict(self.options))

    def _plan(self, schema: StructType, streaming: bool) -> _ReadPlan:
        options = parse_read_options(dict(self.options), streaming)
        fallback = type(self).default_min_partitions or os.cpu_count() or 1
        return _ReadPlan(options, schema, fallback, type(self).client_factory(options.target))

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader."""
        return DLedgerBatchReader(self._plan(schema, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader (one that raises what refused the query, see `_RefusedStream`)."""
        try:
            return DLedgerStreamReader(self._plan(schema, streaming=True))
        except Exception as exc:
            return _RefusedStream(exc)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """A batch writer (append only)."""
        from dledger.spark.sink import DLedgerArrowWriter, writer_setup

        return DLedgerArrowWriter(
            *writer_setup(dict(self.options), schema_fields(schema), overwrite, type(self).client_factory)
        )

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        """A streaming writer (append only)."""
        from dledger.spark.sink import DLedgerStreamArrowWriter, writer_setup

        return DLedgerStreamArrowWriter(
            *writer_setup(dict(self.options), schema_fields(schema), overwrite, type(self).client_factory, True)
        )


class _RefusedStream(DataSourceStreamReader):
    """A stream whose options or schema were refused when its query started: the first
    call raises that error. (PySpark 4's stream runner reports an error raised by
    `streamReader()` itself as its own UnboundLocalError, with ours buried above it.)"""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.error

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing was read."""

    def stop(self) -> None:
        """Nothing to release."""


__all__ = ["FORMAT", "DLedgerDataSource", "OptionError"]
