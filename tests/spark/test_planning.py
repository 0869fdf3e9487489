"""The Spark source's pure logic, without Spark: options, bounds and data loss, offsets,
range splitting (offline by segment, live across nodes)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from dledger.spark.options import (
    DEFAULT_ENTRIES_PER_PARTITION,
    check_options_at_load,
    parse_read_options,
    parse_write_options,
    read_columns_of,
)
from dledger.spark.planning import (
    MIN_SPLIT_BYTES,
    DataLossError,
    IndexRange,
    LogBounds,
    SegmentSpan,
    admit,
    assign_nodes,
    candidate_nodes,
    check_data_loss,
    first_index_at,
    make_offset,
    next_end,
    offset_index,
    plan_live,
    plan_local,
    resolve_end,
    resolve_range,
    resolve_start,
    split_even,
)
from dledger.spark.target import OptionError
from dledger.spark.write_schema import HEADERS_TYPE

pytestmark = pytest.mark.unit

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"


# -- options


def test_read_options_defaults_batch_and_stream() -> None:
    batch = parse_read_options({"path": "/x"}, streaming=False)
    assert batch.target.path == "/x" and batch.target.peers is None and batch.target.group == "default"
    assert batch.starting == "earliest" and batch.ending == "latest"
    assert batch.fail_on_data_loss and batch.min_partitions is None and batch.read_from == "any"
    assert batch.entries_per_partition == DEFAULT_ENTRIES_PER_PARTITION
    stream = parse_read_options({"peers": PEERS, "group": "g1"}, streaming=True)
    assert stream.starting == "latest" and stream.target.is_live and stream.target.group == "g1"
    assert stream.target.peer_map() == {"n0": "127.0.0.1:20911", "n1": "127.0.0.1:20912", "n2": "127.0.0.1:20913"}


def test_read_options_values_are_case_insensitive() -> None:
    opts = parse_read_options(
        {
            "PATH": "/x",
            "startingindex": "5",
            "EndingIndex": "9",
            "failOnDataLoss": "FALSE",
            "minPartitions": "4",
            "readFrom": "Follower",
        },
        streaming=False,
    )
    assert (opts.starting, opts.ending, opts.fail_on_data_loss) == (5, 9, False)
    assert (opts.min_partitions, opts.read_from) == (4, "follower")


def test_stream_limits_and_alias() -> None:
    assert parse_read_options({"path": "/x", "maxEntriesPerTrigger": "7"}, True).max_entries_per_trigger == 7
    assert parse_read_options({"path": "/x", "maxOffsetsPerTrigger": "8"}, True).max_entries_per_trigger == 8
    assert parse_read_options({"path": "/x", "startingIndex": "earliest"}, True).starting == "earliest"


def test_admission_control_options() -> None:
    opts = parse_read_options({"path": "/x", "minEntriesPerTrigger": "5", "maxTriggerDelay": "2 minutes"}, True)
    assert (opts.min_entries_per_trigger, opts.max_trigger_delay_ms) == (5, 120_000)
    opts = parse_read_options({"path": "/x", "minOffsetsPerTrigger": "3", "maxEntriesPerTrigger": "3"}, True)
    assert (opts.min_entries_per_trigger, opts.max_entries_per_trigger, opts.max_trigger_delay_ms) == (3, 3, 900_000)
    for raw, ms in (("500ms", 500), ("30s", 30_000), ("15m", 900_000), ("1h", 3_600_000), ("250", 250)):
        assert parse_read_options({"path": "/x", "minEntriesPerTrigger": "1", "maxTriggerDelay": raw}, True) == (
            parse_read_options({"path": "/x", "minEntriesPerTrigger": "1", "maxTriggerDelay": f"{ms}ms"}, True)
        )
    assert parse_read_options({"peers": PEERS}, False).connect_timeout_ms == 5000


def test_admission_waits_for_the_minimum_or_the_delay() -> None:
    assert not admit(0, None, 10**9, 1000)  # nothing new: never a batch
    assert admit(1, None, 0, 1000)
    assert not admit(4, 5, 999, 1000)
    assert admit(5, 5, 0, 1000)
    assert admit(4, 5, 1000, 1000)  # the delay passed: whatever is there
    assert not admit(0, 5, 5000, 1000)


def test_options_are_checked_at_load_whatever_the_mode() -> None:
    check_options_at_load({"path": "/x", "endingIndex": "5"})
    check_options_at_load({"path": "/x", "maxEntriesPerTrigger": "5", "startingIndex": "latest"})
    for options, message in (
        ({"path": "/x", "maxEntriesPerTrigger": "0"}, "must be >= 1"),
        ({"path": "/x", "endingIndex": "5", "maxEntriesPerTrigger": "5"}, "cannot have both"),
        ({"path": "/x", "fetchMaxBytes": "-3"}, "must be >= 1"),
        ({"path": "/x", "readFrom": "primary"}, "leader, follower or any"),
        ({"path": "/x", "endingTimestamp": "5", "maxEntriesPerTrigger": "5"}, "endingTimestamp is for batch"),
        ({"path": "/x", "startingIndex": "earliest", "startingTimestamp": "0"}, "both say where the read starts"),
        ({"path": "/x", "startingTimestamp": "x", "maxEntriesPerTrigger": "5"}, "must be an integer"),
    ):
        with pytest.raises(OptionError, match=message):
            check_options_at_load(options)


def test_timestamp_options_and_range() -> None:
    check_options_at_load({"path": "/x", "startingTimestamp": "0", "endingTimestamp": "1700000000000"})
    batch = parse_read_options({"path": "/x", "StartingTimestamp": "10", "endingTimestamp": "20"}, False)
    assert (batch.starting_timestamp, batch.ending_timestamp, batch.starting, batch.ending) == (
        10,
        20,
        "earliest",
        "latest",
    )
    stream = parse_read_options({"path": "/x", "startingTimestamp": "7"}, True)
    assert (stream.starting_timestamp, stream.ending_timestamp) == (7, None)
    bounds = LogBounds(5, 99, 90)
    at_time = {10: 40, 20: 95}.__getitem__  # 95: past the committed index (a stale answer)
    assert resolve_range(batch, bounds, at_time) == IndexRange(40, 91)
    only_start = parse_read_options({"path": "/x", "startingTimestamp": "10", "endingIndex": "60"}, False)
    assert resolve_range(only_start, bounds, at_time) == IndexRange(40, 60)
    plain = parse_read_options({"path": "/x", "startingIndex": "7"}, False)

    def never(ts: int) -> int:
        raise AssertionError("no timestamp option: no search")

    assert resolve_range(plain, bounds, never) == IndexRange(7, 91)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"path": "/x", "peers": PEERS}, False, "mutually exclusive"),
        ({}, False, "needs a store directory"),
        ({"group": "g"}, True, "needs a store directory"),
        ({"path": "/x", "startIndex": "3"}, False, "unknown option(s) for a dledger read: startindex"),
        ({"path": "/x", "startingIndex": "latest"}, False, "streaming reads only"),
        ({"path": "/x", "startingIndex": "-1"}, False, "must be >= 0"),
        ({"path": "/x", "startingIndex": "first"}, False, "earliest, latest or an index"),
        ({"path": "/x", "endingIndex": "x"}, False, "latest or an index"),
        ({"path": "/x", "endingIndex": "5"}, True, "batch reads only"),
        ({"path": "/x", "maxEntriesPerTrigger": "5"}, False, "streaming reads only"),
        ({"path": "/x", "maxEntriesPerTrigger": "0"}, True, "must be >= 1"),
        ({"path": "/x", "failOnDataLoss": "yes"}, False, "true or false"),
        ({"path": "/x", "readFrom": "primary"}, False, "leader, follower or any"),
        ({"path": "/x", "minPartitions": "two"}, False, "must be an integer"),
        ({"peers": "127.0.0.1:20911"}, False, "option peers"),
        ({"path": "/x", "minEntriesPerTrigger": "9", "maxEntriesPerTrigger": "5"}, True, "must not exceed"),
        ({"path": "/x", "maxEntriesPerTrigger": "5", "maxOffsetsPerTrigger": "5"}, True, "mean the same"),
        ({"path": "/x", "maxTriggerDelay": "5m"}, True, "needs minEntriesPerTrigger"),
        ({"path": "/x", "minEntriesPerTrigger": "2", "maxTriggerDelay": "soon"}, True, "positive duration"),
        ({"path": "/x", "minEntriesPerTrigger": "2", "maxTriggerDelay": "0s"}, True, "positive duration"),
        ({"path": "/x", "minEntriesPerTrigger": "2"}, False, "streaming reads only"),
        ({"peers": PEERS, "connectTimeoutMs": "0"}, False, "must be >= 1"),
        ({"path": "/x", "startingTimestamp": "-5"}, False, "option startingTimestamp must be >= 0"),
        ({"path": "/x", "startingTimestamp": "2024-01-01"}, True, "option startingTimestamp must be an integer"),
        ({"path": "/x", "endingTimestamp": "soon"}, False, "option endingTimestamp must be an integer"),
        ({"path": "/x", "endingTimestamp": "5"}, True, "option endingTimestamp is for batch reads only"),
        (
            {"path": "/x", "startingIndex": "3", "startingTimestamp": "5"},
            False,
            "options startingIndex and startingTimestamp both say where the read starts: give one",
        ),
        (
            {"path": "/x", "endingIndex": "3", "endingTimestamp": "5"},
            False,
            "options endingIndex and endingTimestamp both say where the read ends: give one",
        ),
    ],
)
def test_bad_read_options(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_read_options(options, streaming)


def test_write_options() -> None:
    opts = parse_write_options({"peers": PEERS, "batchEntries": "10"}, overwrite=False)
    assert opts.batch_entries == 10 and opts.target.is_live
    with pytest.raises(OptionError, match="append-only"):
        parse_write_options({"peers": PEERS}, overwrite=True)
    with pytest.raises(OptionError, match="live cluster"):
        parse_write_options({"path": "/x"}, overwrite=False)
    with pytest.raises(OptionError, match="unknown option"):
        parse_write_options({"peers": PEERS, "startingIndex": "1"}, overwrite=False)
    assert parse_write_options({"peers": PEERS, "batchEntries": "65536"}, overwrite=False).batch_entries == 65536
    with pytest.raises(OptionError, match=r"batchEntries must be <= 65536 \(a member's limit per request\)"):
        parse_write_options({"peers": PEERS, "batchEntries": "200000"}, overwrite=False)


def test_read_schema_subsets_and_errors() -> None:
    assert read_columns_of([("index", "bigint"), ("term", "bigint")]) == ("index", "term")
    assert read_columns_of([("BODY", "binary"), ("Index", "bigint")]) == ("body", "index")
    assert read_columns_of([("value", "binary"), ("headers", HEADERS_TYPE), ("timestamp", "timestamp")]) == (
        "value",
        "headers",
        "timestamp",
    )
    provided = r"key binary, value binary, index long.*magic int, body binary"
    with pytest.raises(OptionError, match=rf"unknown column 'offset'.*{provided}"):
        read_columns_of([("index", "bigint"), ("offset", "bigint")])
    with pytest.raises(OptionError, match="column 'timestamp' must be timestamp, got bigint"):
        read_columns_of([("timestamp", "bigint")])
    with pytest.raises(OptionError, match="column 'body' must be binary, got string"):
        read_columns_of([("body", "string")])
    with pytest.raises(OptionError, match="must be long"):
        read_columns_of([("index", "int")])
    with pytest.raises(OptionError, match="twice"):
        read_columns_of([("index", "bigint"), ("INDEX", "bigint")])
    with pytest.raises(OptionError, match="no columns"):
        read_columns_of([])


# -- bounds, data loss, offsets


def test_bounds_and_resolution() -> None:
    bounds = LogBounds(begin=58, end=139, committed=139)
    assert (bounds.earliest, bounds.latest) == (58, 140)
    assert resolve_start("earliest", bounds) == 58
    assert resolve_start("latest", bounds) == 140
    assert resolve_start(70, bounds) == 70
    assert resolve_end("latest", bounds) == 140
    assert resolve_end(100, bounds) == 100
    assert resolve_end(1000, bounds) == 140  # never past the committed index
    empty = LogBounds(-1, -1, -1)
    assert (empty.earliest, empty.latest) == (0, 0)
    reset_all = LogBounds(-1, 41, 41)  # every entry deleted by a reset: the log goes on at 42
    assert (reset_all.earliest, reset_all.latest) == (42, 42)


def test_data_loss() -> None:
    bounds = LogBounds(58, 139, 139)
    assert check_data_loss(60, bounds, True) == 60
    assert check_data_loss(10, bounds, False) == 58
    with pytest.raises(DataLossError, match=r"log now starts at index 58.*failOnDataLoss=false"):
        check_data_loss(10, bounds, True)


def test_offsets_and_micro_batch_end() -> None:
    offset = make_offset("g", 12)
    assert offset == {"group": "g", "index": 12}
    assert offset_index(offset, "g") == 12
    assert offset_index({"index": 3}, "g") == 3
    with pytest.raises(OptionError, match="group 'other'"):
        offset_index({"group": "other", "index": 3}, "g")
    with pytest.raises(OptionError, match="malformed"):
        offset_index({"group": "g"}, "g")
    assert next_end(10, 100, None, None) == 100
    assert next_end(10, 100, 25, None) == 35
    assert next_end(10, 100, None, 50) == 50  # availableNow target
    assert next_end(10, 100, 25, 30) == 30
    assert next_end(60, 100, None, 50) == 60  # past the target: no more data
    assert next_end(10, 5, None, None) == 10  # never backwards


# -- splitting


def test_split_even() -> None:
    assert split_even(0, 10, 3) == [IndexRange(0, 4), IndexRange(4, 7), IndexRange(7, 10)]
    assert split_even(5, 7, 4) == [IndexRange(5, 6), IndexRange(6, 7)]
    assert split_even(5, 5, 4) == []


def test_first_index_at() -> None:
    positions = [0, 10, 20, 35, 50]
    assert first_index_at(20, 0, 5, positions.__getitem__) == 2
    assert first_index_at(21, 0, 5, positions.__getitem__) == 3
    assert first_index_at(51, 0, 5, positions.__getitem__) == 5


def test_plan_local_one_task_per_segment() -> None:
    # 4 segments of 100 entries, 10 bytes each
    spans = [SegmentSpan(k * 100, k * 1000) for k in range(4)]

    def pos_of(i: int) -> int:
        return i * 10

    assert plan_local(spans, 0, 400, pos_of, min_partitions=2) == [IndexRange(k * 100, k * 100 + 100) for k in range(4)]
    assert plan_local(spans, 150, 320, pos_of) == [IndexRange(150, 200), IndexRange(200, 300), IndexRange(300, 320)]
    assert plan_local(spans, 10, 10, pos_of) == []


def test_plan_local_splits_big_segments_by_position() -> None:
    spans = [SegmentSpan(0, 0)]
    positions = [i * 100 + (i * i) % 7 for i in range(1001)]
    ranges = plan_local(spans, 0, 1000, positions.__getitem__, max_partition_bytes=30_000)
    assert len(ranges) == 4
    assert ranges[0].start == 0 and ranges[-1].end == 1000
    assert all(a.end == b.start for a, b in pairwise(ranges))
    for rng in ranges:
        assert positions[rng.end] - positions[rng.start] <= 30_000


def test_plan_local_spreads_a_large_range_over_min_partitions() -> None:
    n = 10_000
    entry = 4 * MIN_SPLIT_BYTES // n  # 4 MiB in one segment
    ranges = plan_local([SegmentSpan(0, 0)], 0, n, lambda i: i * entry, min_partitions=2)
    assert len(ranges) == 2 and ranges == [IndexRange(0, 5000), IndexRange(5000, 10_000)]
    # a small range keeps one task per segment
    assert plan_local([SegmentSpan(0, 0)], 0, 100, lambda i: i * entry, min_partitions=2) == [IndexRange(0, 100)]
    # larger than min_partitions * max bytes: whole waves of min_partitions tasks
    ranges = plan_local([SegmentSpan(0, 0)], 0, n, lambda i: i * entry, min_partitions=2, max_partition_bytes=1 << 20)
    assert len(ranges) == 4


def test_plan_live() -> None:
    assert plan_live(0, 10, 1, 4) == [IndexRange(0, 4), IndexRange(4, 7), IndexRange(7, 10)]
    assert plan_live(0, 10, 5, 100) == split_even(0, 10, 5)
    assert plan_live(0, 3, 8, 100) == split_even(0, 3, 3)
    assert plan_live(7, 7, 2, 100) == []


def test_candidates_and_assignment() -> None:
    nodes = ["n0", "n1", "n2"]
    assert candidate_nodes("leader", "n1", nodes) == ["n1"]
    assert candidate_nodes("follower", "n1", nodes) == ["n0", "n2"]
    assert candidate_nodes("any", "n1", nodes) == ["n1", "n0", "n2"]
    assert candidate_nodes("leader", None, nodes) == nodes
    assert candidate_nodes("follower", "n0", ["n0"]) == ["n0"]
    ranges = split_even(0, 9, 3)
    plan = assign_nodes(ranges, ["n0", "n2"], nodes, "n1")
    assert [order for _, order in plan] == [("n0", "n2", "n1"), ("n2", "n0", "n1"), ("n0", "n2", "n1")]
    plan = assign_nodes(ranges, ["n1"], nodes, "n1")
    assert all(order == ("n1", "n0", "n2") for _, order in plan)
