"""The compiled `_store` and its pure-Python twin give identical bytes and results."""

from __future__ import annotations

import mmap
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import _store_py
from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAGIC_RECORD, MAX_TIMESTAMP_MS, ScanResult
from dledger.record import stamp_record_body
from tests.property.strategies import DATA_SEG, INDEX_SEG, bodies, ops

pytestmark = pytest.mark.property

if not getattr(impl, "COMPILED", False):  # pragma: no cover - twin-only runs compare the twin to itself
    pytest.skip("compiled extension disabled", allow_module_level=True)


class Harness:
    """One core over anonymous mappings, with a roller that maps fresh segments."""

    def __init__(self, mod: Any) -> None:
        self.mod = mod
        self.data = mod.MappedTable(DATA_SEG)
        self.index = mod.MappedTable(INDEX_SEG)
        self.core = mod.LogCore()
        self.core._init_core(self.data, self.index, self.roll)
        self.core.term = 1

    def roll(self, kind: int, offset: int) -> None:
        table = self.data if kind == 0 else self.index
        table.push(mmap.mmap(-1, table.file_size), offset)

    def image(self) -> list[bytes]:
        return [bytes(m) for m in self.data.segments()] + [bytes(m) for m in self.index.segments()]

    def state(self) -> tuple[int, ...]:
        c = self.core
        return (c.begin_index, c.end_index, c.end_term, c.write_pos)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except DLedgerError as exc:
        return ("err", exc.code)


@given(
    body=bodies,
    magic=st.sampled_from([1, 2]),
    index=st.integers(0, 2**40),
    term=st.integers(0, 2**40),
    pos=st.integers(0, 2**50),
    crc=st.booleans(),
)
def test_codecs_agree(body: bytes, magic: int, index: int, term: int, pos: int, crc: bool) -> None:
    encoded = impl.encode_entry(magic, index, term, pos, body, crc)
    assert encoded == _store_py.encode_entry(magic, index, term, pos, body, crc)
    assert impl.decode_header(encoded) == _store_py.decode_header(encoded)
    unit = impl.encode_index_unit(magic, pos, len(encoded), index, term)
    assert unit == _store_py.encode_index_unit(magic, pos, len(encoded), index, term)
    assert impl.decode_index_unit(unit) == _store_py.decode_index_unit(unit)
    assert impl.crc32(body) == _store_py.crc32(body)


@given(parts=st.lists(st.binary(max_size=700), max_size=6), seed=st.integers(0, 2**32 - 1))
def test_a_crc_continued_over_pieces_is_the_crc_of_the_whole(parts: list[bytes], seed: int) -> None:
    for mod in (impl, _store_py):
        running = 0
        for part in parts:
            running = mod.crc32(part, running)
        assert running == zlib.crc32(b"".join(parts))
        assert mod.crc32(b"".join(parts), seed) == zlib.crc32(b"".join(parts), seed)


@pytest.mark.parametrize("value", [-1, 2**32, 2**64])
def test_a_crc_value_out_of_range_is_refused_by_both(value: int) -> None:
    for mod in (impl, _store_py):
        with pytest.raises(OverflowError):
            mod.crc32(b"data", value)


@settings(max_examples=150, deadline=None)
@given(ops=ops, read_from=st.integers(0, 60), max_bytes=st.integers(1, 3000))
def test_cores_agree_on_appends_reads_and_scans(ops: list[tuple[str, Any]], read_from: int, max_bytes: int) -> None:
    a, b = Harness(impl), Harness(_store_py)
    for op, arg in ops:
        results = []
        for h in (a, b):
            if op == "append":
                results.append(outcome(h.core.append, arg))
            elif op == "many":
                results.append(outcome(h.core.append_many, arg))
            elif op == "noop":
                results.append(outcome(h.core.append_noop))
            elif op == "term":
                h.core.term = h.core.term + arg
                results.append(None)
            else:
                results.append(outcome(h.core.append, b"x" * (arg - 48)))
        assert results[0] == results[1]
        assert a.state() == b.state()
    assert a.image() == b.image()
    for fn in ("get", "get_body", "term_at"):
        assert outcome(getattr(a.core, fn), read_from) == outcome(getattr(b.core, fn), read_from)
    assert outcome(a.core.read_run, read_from, max_bytes) == outcome(b.core.read_run, read_from, max_bytes)
    ra = outcome(a.core.read_columns, read_from, 7, max_bytes)
    rb = outcome(b.core.read_columns, read_from, 7, max_bytes)
    assert ra == rb
    scans = [h.core.scan(0, -1, -1, True, True) for h in (a, b)]
    assert scans[0] == scans[1]
    assert all(type(scan) is ScanResult for scan in scans)
    assert scans[0].entry_count == (a.core.end_index + 1 if a.core.end_index >= 0 else 0)
    assert scans[0].last_index == a.core.end_index and scans[0].stop_reason == impl.STOP_END


@settings(max_examples=100, deadline=None)
@given(first=st.lists(bodies, min_size=1, max_size=20), max_bytes=st.integers(48, 2000), flip=st.integers(-1, 400))
def test_follower_append_of_a_leader_run_is_byte_identical(first: list[bytes], max_bytes: int, flip: int) -> None:
    leader = Harness(impl)
    leader.core.append_many(first)
    followers = (Harness(impl), Harness(_store_py))
    index = 0
    flipped = False
    while index <= leader.core.end_index:
        run, count = leader.core.read_run(index, max_bytes)
        assert count >= 1
        damaged = bytearray(run)
        if 0 <= flip < len(run) and index == 0:
            damaged[flip] ^= 0x01
            flipped = True
        results = [outcome(f.core.append_encoded, bytes(damaged)) for f in followers]
        assert results[0] == results[1]
        if results[0][0] == "err":
            assert followers[0].state() == followers[1].state()  # nothing was written
            return
        index += count
    assert followers[0].image() == followers[1].image()
    for f in followers:
        if not flipped:
            assert f.state() == leader.state()
            assert f.image() == leader.image()
        # an accepted flip hit a field no check covers: channel, chainCrc, or a term that
        # stays non-decreasing (headers have no CRC; the entry handler compares the run's
        # last term with the push's, tests/raft/test_replication.py)


@settings(max_examples=100, deadline=None)
@given(
    entries=st.lists(bodies, min_size=1, max_size=25),
    damage=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 31), st.integers(1, 255)), max_size=6),
    torn=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 31)), max_size=3),
)
def test_cores_agree_on_index_unit_conflicts(
    entries: list[bytes], damage: list[tuple[int, int, int]], torn: list[tuple[int, int]]
) -> None:
    """Damaged units (bit flips) and torn ones (zeros from some byte on) are classified
    the same way by both cores, and the compiled walk tells them apart."""
    a, b = Harness(impl), Harness(_store_py)
    for h in (a, b):
        h.core.append_many(entries)
    end = a.core.end_index
    ends = [e.pos + e.size for e in (a.core.get(i) for i in range(end + 1))]  # before the damage
    flipped: set[int] = set()
    for h in (a, b):
        segments = h.index.segments()
        for unit, byte, xor in damage:
            if unit <= end:
                off = unit * 32 + byte
                segment = segments[off // INDEX_SEG]
                segment[off % INDEX_SEG] ^= xor
                flipped.add(unit)
        for unit, byte in torn:
            if unit <= end and unit not in flipped:
                off = unit * 32
                segment = segments[off // INDEX_SEG]
                start = off % INDEX_SEG
                segment[start + byte : start + 32] = bytes(32 - byte)
    conflicts = a.core.unit_conflicts(0, 0, end, -1, -1)
    assert conflicts == b.core.unit_conflicts(0, 0, end, -1, -1)
    assert a.core.scan(0, -1, -1, True, True) == b.core.scan(0, -1, -1, True, True)
    assert {c[0] for c in conflicts} <= flipped  # torn units are missing, not conflicting
    for index, pos, prev_term, prev_end, next_term in conflicts:
        # the neighbours come from the data walk (every entry has term 1 here)
        assert (prev_term, next_term) == (-1 if index == 0 else 1, -1 if index == end else 1)
        if index == 0:
            assert (pos, prev_end) == (0, -1)
        else:
            assert ends[index - 1] == prev_end <= pos


record_rows = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.binary(max_size=100)),
        st.tuples(
            st.just("record"),
            st.binary(max_size=150),
            st.none() | st.binary(max_size=200),  # keys of 127+ bytes take a 2-byte length
            st.integers(0, MAX_TIMESTAMP_MS),
            st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=20)), max_size=3),
            st.booleans(),  # stamped (version 2)
        ),
        st.just(("noop",)),
    ),
    max_size=25,
)


def _append_row(core: Any, row: tuple[Any, ...]) -> None:
    if row[0] == "plain":
        core.append_many([row[1]])
    elif row[0] == "noop":
        core.append_noop()
    else:
        body = impl.encode_record(row[1], row[2], row[3], row[4])
        core.append_many([stamp_record_body(body, 7, 1, 0, 1, 5) if row[5] else body], MAGIC_RECORD)


def _as_bytes(result: tuple[Any, ...]) -> list[Any]:
    return [*result[:5], [bytes(column) for column in result[5]]]


@settings(max_examples=150, deadline=None)
@given(rows=record_rows, read_from=st.integers(0, 30), count=st.integers(-1, 30), max_bytes=st.integers(1, 3000))
def test_read_records_agrees_with_the_twin_and_with_split_records(
    rows: list[tuple[Any, ...]], read_from: int, count: int, max_bytes: int
) -> None:
    """`read_records` (the fields straight from the data file, across segments) gives
    what `read_columns` + `split_records` give, with the values copied, in both cores."""
    a, b = Harness(impl), Harness(_store_py)
    for row in rows:
        for h in (a, b):
            _append_row(h.core, row)
    got = [outcome(h.core.read_records, read_from, count, max_bytes) for h in (a, b)]
    assert got[0][0] == got[1][0]
    if got[0][0] == "err":
        assert got[0] == got[1]
        return
    assert _as_bytes(got[0][1]) == _as_bytes(got[1][1])
    n, index, term, pos, offsets, bodies, magic = a.core.read_columns(read_from, count, max_bytes)
    assert _as_bytes(got[0][1]) == _as_bytes(
        (n, index, term, pos, magic, impl.split_records(n, offsets, bodies, magic))
    )
    if n:
        assert got[0][1][5][1] is not bodies  # a copy, even of plain bodies


def test_read_records_names_a_bad_record_by_its_index_in_both_cores() -> None:
    """A record entry whose body (its CRC intact) is no valid record fails the read
    with the entry's index, and the cores are left as they were."""
    for mod in (impl, _store_py):
        h = Harness(mod)
        h.core.append_many([b"plain", b"\x01\x00\x00"])  # the second: a truncated record body
        entry = h.core.get(1)
        segment = h.data.segments()[entry.pos // DATA_SEG]
        segment[entry.pos % DATA_SEG : entry.pos % DATA_SEG + 4] = MAGIC_RECORD.to_bytes(4, "big")
        before = (h.state(), h.image())
        with pytest.raises(ValueError, match=r"^entry 1: bad record body \(3 bytes\): truncated at byte 0$"):
            h.core.read_records(0, 10, 1 << 20)
        assert (h.state(), h.image()) == before
        assert h.core.read_records(0, 1, 1 << 20)[0] == 1


@pytest.mark.parametrize("bad", [1.0, 1.9, "1", None])
def test_both_refuse_an_index_count_or_timestamp_that_is_not_whole(bad: Any) -> None:
    """A C-typed argument converted 1.9 to 1 (`get(1.9)` read entry 1, a record's
    timestamp 1.5 was stored as 1); both twins take ints and what has `__index__`
    (numpy integers, bool) and refuse the rest with TypeError, as Python's indexing does."""
    import numpy as np

    for mod in (impl, _store_py):
        h = Harness(mod)
        h.core.append_many([b"a", b"b", b"c"])
        assert h.core.get(np.int64(1)).body == h.core.get_body(True) == b"b"
        assert h.core.term_at(np.int32(2)) == 1 and h.core.read_columns(np.int64(0), 2, 100)[0] == 2
        core = h.core
        calls = (
            (core.get, (bad,)),
            (core.get_body, (bad,)),
            (core.term_at, (bad,)),
            (core.read_columns, (0, bad, 100)),
            (core.read_records, (bad, 1, 100)),
            (mod.encode_record, (b"v", None, bad)),
            (core.append_many, ([b"d"], bad)),
        )
        for call, args in calls:
            with pytest.raises(TypeError):
                call(*args)
        with pytest.raises(DLedgerError) as wide:  # past a C int: refused as any other magic
            core.append_many([b"d"], 2**40)
        assert wide.value.code == ResponseCode.UNEXPECTED_ARGUMENT and core.end_index == 2


def test_both_refuse_a_timestamp_no_timestamp_column_holds() -> None:
    """A record's timestamp (ms) is at most MAX_TIMESTAMP_MS, what an int64 of
    microseconds (Spark's timestamps) holds: past it a Spark read wrapped it around."""
    import numpy as np

    from dledger.entry import MAX_TIMESTAMP_MS

    offsets = np.array([0, 1, 2], dtype=np.int32).tobytes()
    for mod in (impl, _store_py):
        assert mod.decode_record(mod.encode_record(b"v", None, MAX_TIMESTAMP_MS))[0] == MAX_TIMESTAMP_MS
        with pytest.raises(ValueError, match="past the last one a timestamp column holds"):
            mod.encode_record(b"v", None, MAX_TIMESTAMP_MS + 1)
        stamps = np.array([1, MAX_TIMESTAMP_MS + 1], dtype=np.int64).tobytes()
        with pytest.raises(ValueError, match="row 1: record timestamp"):
            mod.encode_records(2, offsets, b"ab", b"", b"", b"", stamps, 0)
        with pytest.raises(ValueError, match="past the last one"):
            mod.encode_records(2, offsets, b"ab", b"", b"", b"", b"", MAX_TIMESTAMP_MS + 1)
