"""Options and schema of the `dledger` Spark data source, parsed without Spark.

Everything here is plain Python so that it can be unit-tested in milliseconds; the
pyspark classes in `dledger.spark.source` only call these functions. Option names are
case-insensitive (Spark lower-cases them); values are strings, as Spark passes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dledger.config import MAX_APPEND_BYTES, MAX_BODIES_PER_APPEND
from dledger.spark.option_values import (
    MAX_ABORT_WAIT_MS,
    MAX_FETCH_BYTES,
    MAX_FETCH_ENTRIES,
    MAX_PARTITIONS,
    MAX_TIMEOUT_MS,
    check_known,
    index_option,
    parse_bool,
    parse_duration_ms,
    parse_int,
)
from dledger.spark.target import TARGET_OPTIONS, OptionError, Target, lower_keys, parse_target

COLUMNS: dict[str, str] = {
    "index": "bigint",
    "term": "bigint",
    "pos": "bigint",
    "body": "binary",
    "key": "binary",
    "value": "binary",
    "timestamp": "timestamp",
    "headers": "array<struct<key:string,value:binary>>",  # HEADERS_TYPE
    "magic": "int",
}
"""Every column a read can return: column name -> Spark type (simpleString). `body` is
`value` under its old name (a record's payload; a plain entry's body)."""

SCHEMA_DDL = (
    "key binary, value binary, index long, term long, pos long, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)
"""The default read schema as a DDL string (what `DataSource.schema()` returns): Kafka's
names where they mean the same thing (`value` is a plain entry's body; `index`, `term`,
`pos` say where the entry is). `body`, the old name of `value`, is not in it (it would
carry every payload twice): ask for it with an explicit schema
(`index long, term long, pos long, body binary` is the old default)."""

NOOP_SCHEMA_DDL = SCHEMA_DDL + ", magic int"
"""The default read schema with `includeNoops=true`: `magic` tells NOOP entries (2) from
normal ones (1)."""
ALL_COLUMNS_DDL = NOOP_SCHEMA_DDL + ", body binary"
"""Every column a read schema may name (`body`: `value` under its old name)."""

DEFAULT_MAX_PARTITION_BYTES = 256 << 20
DEFAULT_ENTRIES_PER_PARTITION = 1_000_000
"""Live reads: entries per task. Each task costs Spark a fixed overhead (the JVM hands a
Python worker a reader and a partition, opens an Arrow stream): on 2 cores, 2 M entries in
2 tasks took about 0.2 CPU-s less than in 4."""
DEFAULT_FETCH_MAX_BYTES = 4 << 20
DEFAULT_FETCH_MAX_ENTRIES = 65_536
DEFAULT_RPC_TIMEOUT_MS = 30_000
DEFAULT_CONNECT_TIMEOUT_MS = 5_000
"""Planning on the driver (the cluster's metadata) fails after this long when no member
answers, instead of waiting out `rpcTimeoutMs`."""
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
"""Kafka's `maxTriggerDelay` default (15 minutes)."""
DEFAULT_WRITE_BATCH_ENTRIES = 16384
DEFAULT_WRITE_BATCH_BYTES = 4 << 20
DEFAULT_ABORT_WAIT_MS = 5000
"""How long a failed write's abort waits for its cancelled tasks (Spark kills their Python
workers `spark.python.task.killTimeout`, 2 s, after cancelling them)."""
LOCAL_BATCH_ROWS = 1 << 16
"""Rows per Arrow record batch produced from a local store (the bigger, the less per-batch
overhead in Spark's Arrow path; 64 Ki rows of small bodies is a few MiB)."""
LOCAL_BATCH_BYTES = 32 << 20
"""Body bytes per Arrow record batch produced from a local store."""

ReadFrom = Literal["leader", "follower", "any"]
Start = int | Literal["earliest", "latest"]


# -- option tables (name as users write it, lower-cased key Spark passes)

READ_OPTIONS = (
    "startingIndex",
    "endingIndex",
    "startingTimestamp",
    "endingTimestamp",
    "failOnDataLoss",
    "minPartitions",
    "maxPartitionBytes",
    "entriesPerPartition",
    "readFrom",
    "fetchMaxBytes",
    "fetchMaxEntries",
    "rpcTimeoutMs",
    "connectTimeoutMs",
    "includeNoops",
)
MAX_PER_TRIGGER_OPTIONS = ("maxEntriesPerTrigger", "maxOffsetsPerTrigger")
MIN_PER_TRIGGER_OPTIONS = ("minEntriesPerTrigger", "minOffsetsPerTrigger")
STREAM_OPTIONS = (*MAX_PER_TRIGGER_OPTIONS, *MIN_PER_TRIGGER_OPTIONS, "maxTriggerDelay")
WRITE_OPTIONS = (
    "batchEntries",
    "batchBytes",
    "rpcTimeoutMs",
    "connectTimeoutMs",
    "exactlyOnce",
    "abortWaitMs",
    "writerName",
)
MAX_WRITER_NAME = 256
"""Longest `writerName` (characters)."""
BATCH_ONLY_OPTIONS = ("endingIndex", "endingTimestamp")


@dataclass(frozen=True)
class ReadOptions:
    """Parsed options of a batch or streaming read.

    Attributes:
        target: where the log is.
        starting: first index to read: "earliest", "latest" (streaming only) or a number.
        ending: batch only: exclusive end, "latest" (committed index + 1) or a number.
        starting_timestamp: start at the first record at or after this time (ms since the
            epoch; `dledger.timeindex`) instead of `starting`; None: not given.
        ending_timestamp: batch only: end before the first record at or after this time
            instead of `ending`; None: not given.
        fail_on_data_loss: fail when the start lies before the first kept entry (true), or
            skip ahead to it (false).
        min_partitions: at least this many Spark tasks for a large range (None: Spark's
            default parallelism, as captured by `register`).
        max_partition_bytes: offline: split data segments into tasks of about this size.
        entries_per_partition: live: split the range into tasks of this many entries.
        read_from: live: "any" member (default: tasks spread over every member, the
            leader first), the "leader" only, or the "follower"s serve the reads.
        fetch_max_bytes, fetch_max_entries: live: size of one streamed gRPC chunk.
        rpc_timeout_ms: live: per-RPC deadline.
        connect_timeout_ms: live: how long planning waits for the cluster's metadata.
        max_entries_per_trigger: streaming: rate limit per micro-batch (None: no limit).
        min_entries_per_trigger: streaming: no micro-batch until this many entries are
            committed, or `max_trigger_delay_ms` passed since the last one (None: none).
        max_trigger_delay_ms: streaming: see `min_entries_per_trigger`.
        include_noops: return the NOOP entries a new leader appends (default: only the
            entries clients appended, as a Kafka source returns only records).
    """

    target: Target
    starting: Start
    ending: int | Literal["latest"]
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    entries_per_partition: int = DEFAULT_ENTRIES_PER_PARTITION
    read_from: ReadFrom = "any"
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    fetch_max_entries: int = DEFAULT_FETCH_MAX_ENTRIES
    rpc_timeout_ms: int = DEFAULT_RPC_TIMEOUT_MS
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    max_entries_per_trigger: int | None = None
    min_entries_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    include_noops: bool = False
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None


@dataclass(frozen=True)
class WriteOptions:
    """Parsed options of a batch or streaming write.

    Attributes:
        target: the live cluster (writes always go through the leader).
        batch_entries: bodies per `append_many` call.
        batch_bytes: body bytes per `append_many` call (at least one body is sent).
        rpc_timeout_ms: per-RPC deadline.
        connect_timeout_ms: how long the driver's first contact with the cluster, in
            `writer()`, may take: unreachable peers fail the write before any task runs.
        exactly_once: number each task's rows for the idempotent producer (records);
            False: at-least-once (a value alone as plain entries).
        abort_wait_ms: how long a failed write's abort waits for its cancelled tasks.
        writer_name: a batch writer whose jobs follow one another (Kafka's
            `transactional.id`): each partition keeps one producer id from job to job, each
            job a newer epoch. None: a producer id per job and partition.
    """

    target: Target
    batch_entries: int = DEFAULT_WRITE_BATCH_ENTRIES
    batch_bytes: int = DEFAULT_WRITE_BATCH_BYTES
    rpc_timeout_ms: int = DEFAULT_RPC_TIMEOUT_MS
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    exactly_once: bool = True
    abort_wait_ms: int = DEFAULT_ABORT_WAIT_MS
    writer_name: str | None = None


# -- helpers


def _parse_either(opts: Mapping[str, str], names: Sequence[str]) -> int | None:
    """An integer option that has an alias (ours and Kafka's name), None when absent."""
    given = [name for name in names if name.lower() in opts]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(given)} mean the same: give one")
    return parse_int(opts, given[0], 0) if given else None


def _check_read_names(opts: Mapping[str, str]) -> None:
    """At load(), before the mode is known: names valid for a batch read or a stream."""
    check_known(opts, TARGET_OPTIONS + READ_OPTIONS, "read", STREAM_OPTIONS)


def check_options_at_load(options: Mapping[str, str]) -> None:
    """Validate read options when `load()` runs, before Spark knows whether the read is a
    batch or a stream: every value, and the combinations that are wrong either way.
    What depends on the mode (`endingIndex` on a stream) is checked when the reader is
    made.

    Raises:
        OptionError: naming the bad option.
    """
    opts = lower_keys(options)
    stream_given = [name for name in STREAM_OPTIONS if name.lower() in opts]
    ending_given = [name for name in BATCH_ONLY_OPTIONS if name.lower() in opts]
    if ending_given and stream_given:
        raise OptionError(
            f"option {ending_given[0]} is for batch reads and {stream_given[0]} for streams: a read cannot have both"
        )
    _check_read_names(opts)
    parse_read_options(opts, streaming=not ending_given)


def parse_start(raw: str | None, streaming: bool) -> Start:
    """`startingIndex`: "earliest", "latest" (streaming only) or a non-negative number.
    Defaults: earliest for batch reads, latest for streams (as Kafka's startingOffsets)."""
    if raw is None:
        return "latest" if streaming else "earliest"
    value = raw.strip().lower()
    if value == "earliest":
        return "earliest"
    if value == "latest":
        if not streaming:
            raise OptionError("startingIndex=latest is for streaming reads only (a batch read would be empty)")
        return "latest"
    return index_option("startingIndex", raw, "earliest, latest or an index")


def parse_end(raw: str | None) -> int | Literal["latest"]:
    """`endingIndex` (batch only, exclusive): "latest" (default) or a non-negative number."""
    if raw is None or raw.strip().lower() == "latest":
        return "latest"
    return index_option("endingIndex", raw, "latest or an index")


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    """Parse and validate the options of a read.

    Args:
        options: the options Spark passes (any key case).
        streaming: True for `readStream`.

    Raises:
        OptionError: with a message naming the bad option.
    """
    opts = lower_keys(options)
    allowed = TARGET_OPTIONS + READ_OPTIONS + (STREAM_OPTIONS if streaming else ())
    if not streaming:
        for name in STREAM_OPTIONS:
            if name.lower() in opts:
                raise OptionError(f"option {name} is for streaming reads only")
    else:
        for name in BATCH_ONLY_OPTIONS:
            if name.lower() in opts:
                raise OptionError(f"option {name} is for batch reads only (a stream has no end)")
    check_known(opts, allowed, "stream" if streaming else "read")
    target = parse_target(opts)
    read_from = opts.get("readfrom", "any").strip().lower()
    if read_from not in ("leader", "follower", "any"):
        raise OptionError(f"option readFrom must be leader, follower or any, got {opts['readfrom']!r}")
    max_per_trigger = _parse_either(opts, MAX_PER_TRIGGER_OPTIONS)
    min_per_trigger = _parse_either(opts, MIN_PER_TRIGGER_OPTIONS)
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError(
            f"option minEntriesPerTrigger ({min_per_trigger}) must not exceed maxEntriesPerTrigger ({max_per_trigger})"
        )
    if "maxtriggerdelay" in opts and min_per_trigger is None:
        raise OptionError("option maxTriggerDelay needs minEntriesPerTrigger (it bounds how long a batch may wait)")
    min_parts = parse_int(opts, "minPartitions", 0, maximum=MAX_PARTITIONS, why="Spark's limit")
    member = "a member's limit per batch"
    parsed = ReadOptions(
        target=target,
        starting=parse_start(opts.get("startingindex"), streaming),
        ending=parse_end(opts.get("endingindex")),
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        min_partitions=min_parts if "minpartitions" in opts else None,
        max_partition_bytes=parse_int(opts, "maxPartitionBytes", DEFAULT_MAX_PARTITION_BYTES),
        entries_per_partition=parse_int(opts, "entriesPerPartition", DEFAULT_ENTRIES_PER_PARTITION),
        read_from=read_from,  # type: ignore[arg-type]
        fetch_max_bytes=parse_int(opts, "fetchMaxBytes", DEFAULT_FETCH_MAX_BYTES, maximum=MAX_FETCH_BYTES, why=member),
        fetch_max_entries=parse_int(
            opts, "fetchMaxEntries", DEFAULT_FETCH_MAX_ENTRIES, maximum=MAX_FETCH_ENTRIES, why=member
        ),
        rpc_timeout_ms=_timeout_ms(opts, "rpcTimeoutMs", DEFAULT_RPC_TIMEOUT_MS),
        connect_timeout_ms=_timeout_ms(opts, "connectTimeoutMs", DEFAULT_CONNECT_TIMEOUT_MS),
        max_entries_per_trigger=max_per_trigger,
        min_entries_per_trigger=min_per_trigger,
        max_trigger_delay_ms=parse_duration_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        include_noops=parse_bool(opts, "includeNoops", False),
        starting_timestamp=_parse_timestamp(opts, "startingIndex", "startingTimestamp"),
        ending_timestamp=_parse_timestamp(opts, "endingIndex", "endingTimestamp"),
    )
    _check_order(parsed)
    return parsed


def _timeout_ms(opts: Mapping[str, str], name: str, default: int) -> int:
    return parse_int(opts, name, default, maximum=MAX_TIMEOUT_MS, why="the client's longest timeout, 1e6 s")


def _check_order(opts: ReadOptions) -> None:
    """A batch read's end must not come before its start (both indexes, or both times)."""
    if isinstance(opts.starting, int) and isinstance(opts.ending, int) and opts.ending < opts.starting:
        raise OptionError(
            f"option endingIndex ({opts.ending}) is before startingIndex ({opts.starting}): the end is exclusive "
            "and must be at or after the start"
        )
    start, end = opts.starting_timestamp, opts.ending_timestamp
    if start is not None and end is not None and end < start:
        raise OptionError(f"option endingTimestamp ({end}) is before startingTimestamp ({start})")


def _parse_timestamp(opts: Mapping[str, str], index_name: str, name: str) -> int | None:
    """`startingTimestamp` / `endingTimestamp`: ms since the epoch (>= 0), exclusive with
    the index option that says the same thing; None when absent."""
    if name.lower() not in opts:
        return None
    if index_name.lower() in opts:
        where = "starts" if name.startswith("starting") else "ends"
        raise OptionError(f"options {index_name} and {name} both say where the read {where}: give one")
    return parse_int(opts, name, 0, minimum=0)


def parse_write_options(options: Mapping[str, str], overwrite: bool, streaming: bool = False) -> WriteOptions:
    """Parse and validate the options of a write (always to a live cluster; `streaming`:
    of a streaming query).

    Raises:
        OptionError: overwrite mode, a store directory instead of peers, or a bad option.
    """
    if overwrite:
        raise OptionError(
            "a DLedger log is append-only: mode('overwrite') is not supported, use mode('append') "
            "(outputMode('append') for streams)"
        )
    opts = lower_keys(options)
    check_known(opts, TARGET_OPTIONS + WRITE_OPTIONS, "write")
    target = parse_target(opts)
    if not target.is_live:
        raise OptionError(
            "writes go through a live cluster: give option peers (e.g. n0-127.0.0.1:20911;...), "
            "not a store directory (use dledger.open_log to write a local log)"
        )
    exactly_once = parse_bool(opts, "exactlyOnce", True)
    member = "a member's limit per request"
    return WriteOptions(
        target=target,
        batch_entries=parse_int(opts, "batchEntries", DEFAULT_WRITE_BATCH_ENTRIES, 1, MAX_BODIES_PER_APPEND, member),
        batch_bytes=parse_int(opts, "batchBytes", DEFAULT_WRITE_BATCH_BYTES, maximum=MAX_APPEND_BYTES, why=member),
        rpc_timeout_ms=_timeout_ms(opts, "rpcTimeoutMs", DEFAULT_RPC_TIMEOUT_MS),
        connect_timeout_ms=_timeout_ms(opts, "connectTimeoutMs", DEFAULT_CONNECT_TIMEOUT_MS),
        exactly_once=exactly_once,
        abort_wait_ms=parse_int(opts, "abortWaitMs", DEFAULT_ABORT_WAIT_MS, 0, MAX_ABORT_WAIT_MS, "10 minutes"),
        writer_name=_writer_name(opts, exactly_once, streaming),
    )


def _writer_name(opts: Mapping[str, str], exactly_once: bool, streaming: bool) -> str | None:
    name = opts.get("writername")
    if name is None:
        return None
    if streaming:
        raise OptionError(
            "writerName is for batch writes: a streaming query's producers are named after the query already "
            "(one per partition, each micro-batch a new epoch)"
        )
    if not exactly_once:
        raise OptionError("writerName names the producers of exactly-once writes: drop it, or set exactlyOnce=true")
    if not name.strip() or len(name) > MAX_WRITER_NAME or not name.isprintable():
        raise OptionError(f"writerName must be 1 to {MAX_WRITER_NAME} printable characters, got {name!r}")
    return name


# -- schemas


def read_schema_ddl(options: Mapping[str, str]) -> str:
    """The default read schema for `options`: with `includeNoops=true` it adds `magic`."""
    return NOOP_SCHEMA_DDL if parse_bool(lower_keys(options), "includeNoops", False) else SCHEMA_DDL


def read_columns_of(fields: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Validate a read schema given as (name, Spark simpleString type) pairs: a subset
    or reordering of the columns of `COLUMNS`.

    Returns:
        The canonical column names, in the requested order.

    Raises:
        OptionError: an unknown or repeated column, or a wrong type.
    """
    if not fields:
        raise OptionError(f"the read schema has no columns; the dledger source provides: {ALL_COLUMNS_DDL}")
    seen: list[str] = []
    for name, type_name in fields:
        key = name.lower()
        if key not in COLUMNS:
            raise OptionError(
                f"unknown column {name!r} in the read schema; the dledger source provides only: {ALL_COLUMNS_DDL}"
            )
        if key in seen:
            raise OptionError(f"column {name!r} appears twice in the read schema")
        expected = COLUMNS[key]
        if type_name.lower() != expected:
            raise OptionError(
                f"column {name!r} must be {'long' if expected == 'bigint' else expected}, got {type_name} "
                f"(cast it after loading)"
            )
        seen.append(key)
    return tuple(seen)
