"""The sink's row encoding without Spark (pyarrow only): a value alone gives plain bodies,
key/timestamp/headers give record bodies, and bad rows are clear errors."""

from __future__ import annotations

import datetime
import importlib.util
import os

import pytest

if importlib.util.find_spec("pyarrow") is None:  # as tests/spark/conftest.py: required under CI
    if os.environ.get("CI"):
        raise ImportError("pyarrow is not installed (pip install -e '.[spark]')")
    pytest.skip("pyarrow is not installed", allow_module_level=True)

import pyarrow as pa

from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import decode_record, now_ms
from dledger.spark.records import MAX_TIMESTAMP_MS, bodies_of_rows
from dledger.spark.write_schema import HEADERS_TYPE, write_columns_of

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def test_a_value_alone_writes_plain_bodies() -> None:
    batch = pa.record_batch([pa.array(["a", "b"])], names=["body"])
    assert bodies_of_rows(batch, write_columns_of([("body", "string")])) == ([b"a", b"b"], MAGIC_NORMAL)


def test_record_columns_write_record_bodies() -> None:
    when = datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)
    batch = pa.record_batch(
        [
            pa.array([b"k", None]),
            pa.array([b"v1", b"v2"]),
            pa.array([when, None], pa.timestamp("us", tz="UTC")),
            pa.array([[{"key": "h", "value": b"1"}, {"key": "h", "value": b""}], None], HEADERS),
        ],
        names=["key", "value", "timestamp", "headers"],
    )
    columns = write_columns_of(
        [("key", "binary"), ("value", "binary"), ("timestamp", "timestamp"), ("headers", HEADERS_TYPE)]
    )
    before = now_ms()
    bodies, magic = bodies_of_rows(batch, columns)
    assert magic == MAGIC_RECORD
    assert decode_record(bodies[0]) == (int(when.timestamp() * 1000), b"k", [("h", b"1"), ("h", b"")], b"v1")
    stamp, key, headers, value = decode_record(bodies[1])
    assert (key, headers, value) == (None, [], b"v2") and stamp >= before  # null timestamp: the write time


def test_long_timestamps_are_milliseconds() -> None:
    batch = pa.record_batch([pa.array([b"v"]), pa.array([1234], pa.int64())], names=["value", "timestamp"])
    bodies, _ = bodies_of_rows(batch, write_columns_of([("value", "binary"), ("timestamp", "bigint")]))
    assert decode_record(bodies[0])[0] == 1234


@pytest.mark.parametrize(
    ("arrays", "names", "fields", "message"),
    [
        ([pa.array([None], pa.binary())], ["value"], [("value", "binary")], "column value, row 7: .* must not be null"),
        (
            [pa.array([b"v", b"w", None], pa.binary())],
            ["body"],
            [("body", "binary")],
            "column body, row 9: .* must not be null",
        ),
        (
            [pa.array([b"v"]), pa.array([-5], pa.int64())],
            ["value", "timestamp"],
            [("value", "binary"), ("timestamp", "bigint")],
            "timestamp must be >= 0",
        ),
        (
            [pa.array([b"v"]), pa.array([b"k" * 65537])],
            ["value", "key"],
            [("value", "binary"), ("key", "binary")],
            "over the limit of 65536",
        ),
        (
            [pa.array([b"v"]), pa.array([[{"key": None, "value": b"x"}]], HEADERS)],
            ["value", "headers"],
            [("value", "binary"), ("headers", HEADERS_TYPE)],
            "header key must not be null",
        ),
    ],
)
def test_bad_rows_are_clear_errors(
    arrays: list[pa.Array], names: list[str], fields: list[tuple[str, str]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        bodies_of_rows(pa.record_batch(arrays, names=names), write_columns_of(fields), first_row=7)


def test_spark_microsecond_times_are_cut_to_milliseconds() -> None:
    """Spark's timestamps are microseconds: a time between two milliseconds is written
    as the millisecond it falls in (before, such a row failed: a lossy Arrow cast)."""
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, 678_901, tzinfo=datetime.UTC)
    batch = pa.record_batch(
        [pa.array([b"v"] * 3), pa.array([when, None, when], pa.timestamp("us", tz="UTC"))], names=["value", "timestamp"]
    )
    before = now_ms()
    bodies, magic = bodies_of_rows(batch, write_columns_of([("value", "binary"), ("timestamp", "timestamp")]))
    stamps = [decode_record(body)[0] for body in bodies]
    assert magic == MAGIC_RECORD
    assert stamps[0] == stamps[2] == int(when.timestamp() * 1000) == 1_704_164_645_678
    assert stamps[1] >= before  # a null time: the write time


@pytest.mark.parametrize("unit", ["s", "ms", "ns"])
def test_every_timestamp_unit_is_written_in_milliseconds(unit: str) -> None:
    when = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    batch = pa.record_batch([pa.array([b"v"]), pa.array([when], pa.timestamp(unit))], names=["value", "timestamp"])
    bodies, _ = bodies_of_rows(batch, write_columns_of([("value", "binary"), ("timestamp", "timestamp")]))
    assert decode_record(bodies[0])[0] == int(when.timestamp() * 1000)


def test_a_sliced_batch_writes_only_its_own_rows() -> None:
    """Arrow batches may be views into a larger one (offsets that do not start at 0)."""
    full = pa.record_batch(
        [pa.array([b"k0", None, b"k2", b"k3"]), pa.array(["a", "bb", "ccc", "dddd"], pa.large_string())],
        names=["key", "value"],
    )
    part = full.slice(1, 2)
    columns = write_columns_of([("key", "binary"), ("value", "string")])
    bodies, _ = bodies_of_rows(part, columns)
    assert [decode_record(body)[1::2] for body in bodies] == [(None, b"bb"), (b"k2", b"ccc")]
    assert bodies_of_rows(part.select([1]), write_columns_of([("value", "string")])) == ([b"bb", b"ccc"], MAGIC_NORMAL)


def test_exactly_once_writes_a_value_alone_as_records_with_the_write_time() -> None:
    batch = pa.record_batch([pa.array([b"x", b""])], names=["value"])
    before = now_ms()
    bodies, magic = bodies_of_rows(batch, write_columns_of([("value", "binary")]), as_records=True)
    decoded = [decode_record(body) for body in bodies]
    assert magic == MAGIC_RECORD
    assert [(key, headers, value) for _, key, headers, value in decoded] == [(None, [], b"x"), (None, [], b"")]
    assert before <= decoded[0][0] == decoded[1][0] <= now_ms()


def test_an_empty_batch_writes_nothing() -> None:
    batch = pa.record_batch([pa.array([], pa.binary()), pa.array([], pa.binary())], names=["value", "key"])
    assert bodies_of_rows(batch, write_columns_of([("value", "binary")])) == ([], MAGIC_NORMAL)
    assert bodies_of_rows(batch, write_columns_of([("value", "binary"), ("key", "binary")])) == ([], MAGIC_RECORD)


def _bad_key_headers() -> pa.Array:
    """Row 0 without headers, row 1 with a header whose key is the byte C3 (not UTF-8)."""
    keys = pa.Array.from_buffers(
        pa.string(), 1, [None, pa.py_buffer(bytes([0, 0, 0, 0, 1, 0, 0, 0])), pa.py_buffer(b"\xc3")]
    )
    pairs = pa.StructArray.from_arrays([keys, pa.array([b"x"])], fields=list(HEADERS.value_type))
    return pa.ListArray.from_arrays(pa.array([0, 0, 1], pa.int32()), pairs, type=HEADERS)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (_bad_key_headers(), r"column headers, row 11: header key b'\\xc3' is not valid UTF-8"),
        (pa.array([[], [{"key": "a", "value": b"1"}, None]], HEADERS), "column headers, row 11: header 1 is null"),
        (
            pa.array([[], [{"key": "trace", "value": None}]], HEADERS),
            "column headers, row 11: header 'trace' has a null value; a record's header value cannot be null",
        ),
    ],
)
def test_bad_headers_name_the_column_and_row(headers: pa.Array, message: str) -> None:
    """A header key that is not UTF-8 (was a bare UnicodeDecodeError), a null header (was
    a TypeError) and a null header value (was written as an empty value)."""
    batch = pa.record_batch([pa.array([b"v0", b"v1"]), headers], names=["value", "headers"])
    columns = write_columns_of([("value", "binary"), ("headers", HEADERS_TYPE)])
    with pytest.raises(ValueError, match=message):
        bodies_of_rows(batch, columns, first_row=10)


def test_a_long_timestamp_past_what_spark_holds_names_the_column_and_row() -> None:
    assert MAX_TIMESTAMP_MS == 2**63 // 1000  # dledger.record's: the latest a Spark timestamp holds
    ok = pa.record_batch([pa.array([b"v"]), pa.array([MAX_TIMESTAMP_MS], pa.int64())], names=["value", "timestamp"])
    columns = write_columns_of([("value", "binary"), ("timestamp", "bigint")])
    assert decode_record(bodies_of_rows(ok, columns)[0][0])[0] == MAX_TIMESTAMP_MS
    for late in (MAX_TIMESTAMP_MS + 1, 10**16, 2**63 - 1):
        batch = pa.record_batch([pa.array([b"v", b"w"]), pa.array([1, late], pa.int64())], names=["value", "timestamp"])
        with pytest.raises(ValueError, match=rf"column timestamp, row 6: timestamp {late} ms is past the latest"):
            bodies_of_rows(batch, columns, first_row=5)
    seconds = pa.record_batch(
        [pa.array([b"v"]), pa.array([MAX_TIMESTAMP_MS // 1000 + 1], pa.timestamp("s"))], names=["value", "timestamp"]
    )
    # not wrapped around by the conversion to ms
    with pytest.raises(ValueError, match="column timestamp, row 0: timestamp 9223372036855000 ms is past"):
        bodies_of_rows(seconds, write_columns_of([("value", "binary"), ("timestamp", "timestamp")]))


def test_a_value_no_member_takes_fails_its_task_naming_the_row() -> None:
    """A 5 MiB value failed the job with the member's "a body of N bytes; at most M",
    naming no partition or row; the task now checks each body before it sends one."""
    from dledger.config import DLedgerConfig
    from dledger.spark.sink import MAX_BODY_BYTES, _bodies
    from dledger.transport.validate import RequestValidator

    config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:20911")
    assert RequestValidator(config, 1, 1).max_body_bytes == MAX_BODY_BYTES  # the member's default limit
    columns = write_columns_of([("value", "binary")])
    fits = pa.record_batch([pa.array([b"a", b"x" * MAX_BODY_BYTES])], names=["value"])
    big = pa.record_batch([pa.array([b"b", b"c", b"y" * (MAX_BODY_BYTES + 1)])], names=["value"])
    sent = _bodies(iter([fits, big]), columns, 3, False)
    assert [len(b) for b in next(sent)] == [1, MAX_BODY_BYTES]
    with pytest.raises(ValueError, match=rf"partition 3: row 4: its entry body would be {MAX_BODY_BYTES + 1} bytes"):
        next(sent)


def test_a_key_that_takes_a_record_past_the_limit_names_its_row() -> None:
    from dledger.spark.sink import MAX_BODY_BYTES, _bodies

    columns = write_columns_of([("value", "binary"), ("key", "binary")])
    batch = pa.record_batch(
        [pa.array([b"v", b"v" * (MAX_BODY_BYTES - 10)]), pa.array([b"k", b"k" * 20])], ["value", "key"]
    )
    with pytest.raises(ValueError, match=r"partition 0: row 1: its entry body would be"):
        next(_bodies(iter([batch]), columns, 0, False))
