"""Stamped records (record layout version 2) in the stores: the store's append accepts
them (the leader's and the follower's paths), every reader reads them as the records
they carry (get + record_of, get_record, iterate_records, record columns, Arrow, offline
views), recovery keeps them, and bad stamps are refused whole with nothing appended, in
the compiled store and the twin alike."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger import _store_py
from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAGIC_RECORD, RECORD_STAMP_SIZE, RECORD_STAMPED, RECORD_VERSION
from dledger.record import Record, encode_record, record_of, record_stamp, stamp_record_body, with_records
from dledger.store import MemoryLogStore, StoreConfig, StoreView

pytestmark = pytest.mark.unit

SMALL = StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024)
STAMP = (7, 1, 100, 3, 1_700_000_000_999)


def _plain_records() -> list[bytes]:
    """One idempotent request's three records (version 1), then two more."""
    return [
        encode_record(b"first", b"k1", 1_700_000_000_000, [("h", b"1"), ("h", b"2")]),
        encode_record(b"second", None, 1_700_000_000_001),
        encode_record(b"", b"", 0),
        encode_record(b"v" * 300, b"k4", 5, [("trace", b"x" * 40)]),
        encode_record(b"last", b"k5", 6),
    ]


def _stamped(bodies: list[bytes]) -> list[bytes]:
    """`bodies` as the leader writes them: the request's first record stamped."""
    return [stamp_record_body(bodies[0], *STAMP), *bodies[1:]]


def _write(path: Path, bodies: list[bytes], rounds: int = 1) -> None:
    with dledger.open_log(path, SMALL) as log:
        log.append(b"plain body")
        for _ in range(rounds):
            log.append_many(bodies, MAGIC_RECORD)


def _expected(index: int, body: bytes) -> Record:
    timestamp, key, headers, value = impl.decode_record(body)
    return Record(value, key, timestamp, tuple(headers), index, 1)


def test_every_reader_reads_a_stamped_body_as_its_record(tmp_path: Path) -> None:
    plain, stamped = _plain_records(), _stamped(_plain_records())
    _write(tmp_path / "stamped", stamped)
    _write(tmp_path / "plain", plain)
    expected = [Record(b"plain body", index=0, term=1)] + [_expected(k + 1, b) for k, b in enumerate(plain)]
    with dledger.open_log(tmp_path / "stamped", SMALL) as log:
        assert log.get(1).body == stamped[0]  # stored verbatim: the stamp stays in the log
        assert record_stamp(log.get(1).body) == STAMP
        assert [record_stamp(log.get(k).body) for k in range(2, 6)] == [None] * 4
        assert [record_of(log.get(k)) for k in range(6)] == expected
        assert [log.get_record(k) for k in range(6)] == expected
        assert list(log.iterate_records()) == expected
        batch = log.read_columns(0, 10, 1 << 20, records=True)
    with dledger.open_log(tmp_path / "plain", SMALL) as log:
        unstamped = log.read_columns(0, 10, 1 << 20, records=True)
    cols, want = batch.records, unstamped.records
    assert cols is not None and want is not None
    assert [cols.value(k) for k in range(6)] == [r.value for r in expected]
    assert [cols.key(k) for k in range(6)] == [r.key for r in expected]
    assert [cols.headers(k) for k in range(6)] == [list(r.headers) for r in expected]
    assert list(cols.timestamps) == [-1, *(r.timestamp for r in expected[1:])]
    for name in ("value_offsets", "key_offsets", "timestamps", "header_offsets", "header_key_offsets"):
        assert getattr(cols, name).tolist() == getattr(want, name).tolist()
    for name in ("values", "keys", "key_valid", "timestamp_valid", "header_keys", "header_values"):
        assert bytes(getattr(cols, name)) == bytes(getattr(want, name))


def test_arrow_batches_of_stamped_and_plain_records_are_equal(tmp_path: Path) -> None:
    from dledger.spark.arrow import arrow_schema, to_record_batch

    _write(tmp_path / "stamped", _stamped(_plain_records()))
    _write(tmp_path / "plain", _plain_records())
    columns = ["index", "term", "key", "value", "timestamp", "headers", "body"]
    tables = []
    for name in ("stamped", "plain"):
        with StoreView.open(tmp_path / name) as view:
            tables.append(to_record_batch(view.read_columns(0, 10, 1 << 20), columns, arrow_schema(columns)))
    assert tables[0].equals(tables[1])
    assert tables[0].column(3).to_pylist()[1] == b"first"  # `value` is the payload, not the stamped body
    assert tables[0].column(6).to_pylist()[1] == b"first"


CRASH = """
import os, sys
import dledger
from dledger.entry import MAGIC_RECORD
from dledger.record import encode_record, stamp_record_body
from dledger.store import StoreConfig
log = dledger.open_log(sys.argv[1], StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024))
for k in range(40):
    first = encode_record(b"first", b"k1", 1_700_000_000_000, [("h", b"1"), ("h", b"2")])
    log.append_many([stamp_record_body(first, 7, 1, 100, 3, 1_700_000_000_999), encode_record(b"n", None, k)], 16)
os._exit(0)  # no close: the next open recovers from the files as the process left them
"""


def test_stamped_entries_survive_a_process_exit_without_close(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", CRASH, str(tmp_path / "crashed")], check=True, env=env, timeout=120)
    with dledger.open_log(tmp_path / "crashed", SMALL) as log:  # recovered without a clean close
        assert log.end_index == 79
        assert [record_stamp(log.get(2 * k).body) for k in range(40)] == [STAMP] * 40
        assert log.get_record(78) == Record(b"first", b"k1", 1_700_000_000_000, (("h", b"1"), ("h", b"2")), 78, 1)
        assert log.get_record(79).timestamp == 39


def test_stamped_entries_survive_reopen_and_a_prefix_reset(tmp_path: Path) -> None:
    stamped = _stamped(_plain_records())
    _write(tmp_path / "log", stamped, rounds=40)  # 201 entries over several segments
    with dledger.open_log(tmp_path / "log", SMALL) as log:
        assert log.end_index == 200
        assert [record_stamp(log.get(1 + 5 * k).body) for k in range(40)] == [STAMP] * 40
        assert log.get_record(196) == _expected(196, stamped[0])
    with dledger.open_log(tmp_path / "log", SMALL) as log:
        log.reset(195, 1)  # the first entry left (196) is a stamped record
    with StoreView.open(tmp_path / "log") as view:  # offline
        assert view.get(196).body == stamped[0]
        cols = view.read_columns(196, 5, 1 << 20, records=True).records
    assert cols is not None and cols.value(0) == b"first" and cols.key(0) == b"k1"
    with dledger.open_log(tmp_path / "log", SMALL) as log:
        assert (log.begin_index, log.get_record(196).value, record_stamp(log.get(196).body)) == (196, b"first", STAMP)


def test_a_follower_appends_stamped_entries_from_the_leaders_run(tmp_path: Path) -> None:
    stamped = _stamped(_plain_records())
    _write(tmp_path / "leader", stamped)
    with dledger.open_log(tmp_path / "leader", SMALL) as leader:
        run, count = leader.read_run(0, 1 << 20)
    with dledger.open_log(tmp_path / "follower", SMALL) as follower:
        assert follower.append_encoded(run) == count == 6
        assert follower.get(1).body == stamped[0]
        assert follower.get_record(1).value == b"first"


def _forged(fields: tuple[int, int, int, int, int], tail: bytes) -> bytes:
    return (
        bytes((RECORD_STAMPED,))
        + b"".join(v.to_bytes(4 if k == 3 else 8, "big", signed=k != 3) for k, v in enumerate(fields))
        + tail
    )


BAD_STAMPS = [
    ((-1, 0, 0, 1, 0), "negative stamp field at byte 1"),
    ((0, 0, 0, 0, 0), "stamp count not in 1..65536 at byte 25"),
    ((0, 0, 0, 65_537, 0), "stamp count not in 1..65536 at byte 25"),
    ((0, 0, 0, 1, -5), "negative stamp field at byte 29"),
]


@pytest.mark.parametrize(("fields", "fault"), BAD_STAMPS)
def test_the_store_refuses_bad_stamps_whole(tmp_path: Path, fields: tuple[int, int, int, int, int], fault: str) -> None:
    good = stamp_record_body(encode_record(b"v", b"k", 1), *STAMP)
    bad = _forged(fields, encode_record(b"v", b"k", 1)[1:])
    with dledger.open_log(tmp_path, SMALL) as log:
        log.append(b"x")
        with pytest.raises(DLedgerError, match=f"body 1: bad record body .*{fault}") as err:
            log.append_many([good, bad], MAGIC_RECORD)
        assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
        with pytest.raises(DLedgerError, match=r"body 0: bad record body .*truncated stamp at byte 1"):
            log.append_many([good[: 1 + RECORD_STAMP_SIZE - 1]], MAGIC_RECORD)
        assert log.end_index == 0


def test_the_memory_store_takes_stamped_records_and_refuses_bad_ones() -> None:
    store = MemoryLogStore()
    store.term = 1
    body = stamp_record_body(encode_record(b"v", None, 3), *STAMP)
    store.append_many([body], MAGIC_RECORD)
    assert record_of(store.get(0)) == Record(b"v", None, 3, (), 0, 1)
    with pytest.raises(DLedgerError, match=r"body 0: bad record body .*stamp count"):
        store.append_many([_forged((0, 0, 0, 0, 0), encode_record(b"v", None, 3)[1:])], MAGIC_RECORD)
    assert store.end_index == 0
    cols = with_records(store.read_columns(0, 5, 1 << 20)).records
    assert cols is not None and (list(cols.timestamps), cols.value(0)) == ([3], b"v")


class _Core:
    """A bare core of one module over anonymous mappings (the twin cannot back an
    MmapLogStore while the compiled module is loaded)."""

    def __init__(self, mod: Any) -> None:
        self.data, self.index = mod.MappedTable(1 << 16), mod.MappedTable(1 << 15)
        self.core = mod.LogCore()
        self.core._init_core(self.data, self.index, self._roll)
        self.core.term = 1

    def _roll(self, kind: int, offset: int) -> None:
        table = self.data if kind == 0 else self.index
        table.push(mmap.mmap(-1, table.file_size), offset)


@pytest.mark.parametrize("mod", [impl, _store_py], ids=["compiled", "twin"])
def test_compiled_and_twin_cores_take_and_read_stamped_records(mod: Any) -> None:
    stamped = _stamped(_plain_records())
    h = _Core(mod)
    assert h.core.append_many(stamped, MAGIC_RECORD) == 0
    assert h.core.get(0).body == stamped[0] and h.core.get(0).body[0] == RECORD_STAMPED
    assert h.core.get(1).body[0] == RECORD_VERSION
    count, _, _, _, offsets, bodies, magic = h.core.read_columns(0, 10, 1 << 20)
    raw = mod.split_records(count, offsets, bodies, magic)
    assert bytes(raw[1]).startswith(b"firstsecond")  # the values: no stamp bytes
    assert bytes(raw[3]).startswith(b"k1")  # the keys
    bad = _forged((0, -1, 0, 1, 0), b"")
    with pytest.raises(DLedgerError, match=r"body 2: bad record body \(37 bytes\): negative stamp field at byte 9"):
        h.core.append_many([stamped[0], stamped[1], bad], MAGIC_RECORD)
    assert h.core.end_index == 4
    follower = _Core(mod)
    run, count = h.core.read_run(0, 1 << 20)
    assert follower.core.append_encoded(run) == count == 5
    assert follower.core.get(0).body == stamped[0]
