"""Record entries (magic 16) in the stores and the embedded API: append, read back as
Records and as record columns, recovery, replication runs, java_compat refusal, and
bad bodies refused with nothing appended."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dledger
from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch, RecordColumns
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import Record, encode_record, record_of, with_records
from dledger.store import MemoryLogStore, MmapLogStore, StoreConfig, StoreView

pytestmark = pytest.mark.unit

SMALL = StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024)


def _fill(log: MmapLogStore) -> tuple[int, int, int]:
    plain = log.append(b"plain body")
    rec = log.append_record(b"value", key=b"key", timestamp=1_700_000_000_000, headers=[("h", b"1"), ("h", b"2")])
    nokey = log.append_record(b"", timestamp=0)
    return plain, rec, nokey


def test_embedded_records_round_trip_and_survive_reopen(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        plain, rec, nokey = _fill(log)
        assert log.get(rec).magic == MAGIC_RECORD
    with dledger.open_log(tmp_path, SMALL) as log:
        assert log.get_record(plain) == Record(b"plain body", None, None, (), plain, 1)
        assert log.get_record(rec) == Record(b"value", b"key", 1_700_000_000_000, (("h", b"1"), ("h", b"2")), rec, 1)
        assert log.get_record(nokey) == Record(b"", None, 0, (), nokey, 1)
        assert [r.index for r in log.iterate_records()] == [plain, rec, nokey]


def test_append_records_defaults_the_timestamp_to_now(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        before = dledger.record.now_ms()
        first = log.append_records([Record(b"a", key=b"1"), Record(b"b", timestamp=7)])
        got = [log.get_record(first), log.get_record(first + 1)]
    assert got[0].timestamp is not None and got[0].timestamp >= before
    assert (got[0].key, got[1].timestamp, got[1].value) == (b"1", 7, b"b")


def test_read_columns_with_records_builds_arrow_layouts(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        rec = _fill(log)[1]
        bare = log.read_columns(0, 10, 1 << 20)
        batch = log.read_columns(0, 10, 1 << 20, records=True)
    assert bare.records is None
    cols = batch.records
    assert cols is not None
    assert list(cols.timestamps) == [-1, 1_700_000_000_000, 0]
    assert list(cols.has_key()) == [False, True, False]
    assert [cols.key(k) for k in range(3)] == [None, b"key", None]
    assert [cols.value(k) for k in range(3)] == [b"plain body", b"value", b""]
    assert [cols.headers(k) for k in range(3)] == [[], [("h", b"1"), ("h", b"2")], []]
    assert list(cols.header_offsets) == [0, 0, 2, 2]
    assert batch.body(rec) == log_body(tmp_path, rec)  # the bodies stay as stored
    direct = log_records(tmp_path)
    assert direct.records is not None and bytes(direct.records.values) == b"plain bodyvalue"
    assert list(direct.records.timestamps) == list(cols.timestamps) and direct.bodies == bytearray()


def log_records(path: Path) -> ColumnBatch:
    with dledger.open_log(path, SMALL) as log:
        return log.read_records(0, 10, 1 << 20)


def log_body(path: Path, index: int) -> bytes:
    with StoreView.open(path) as view:
        return view.get(index).body


def test_plain_batches_reuse_their_buffers(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        log.append_many([b"a", b"bc"])
        batch = log.read_columns(0, 10, 1 << 20, records=True)
    assert batch.records is not None and batch.records.values is batch.bodies
    assert list(batch.records.timestamps) == [-1, -1]


def test_a_log_that_starts_with_records_reopens_and_reads_offline(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        log.append_records([Record(b"v%d" % k, key=b"k", timestamp=k) for k in range(300)])  # rolls segments
    with StoreView.open(tmp_path) as view:
        assert view.committed_index == 299
        cols = view.read_columns(0, 300, 1 << 20, records=True).records
    assert cols is not None and cols.key(1) == b"k" and list(cols.timestamps[:3]) == [0, 1, 2]
    with dledger.open_log(tmp_path, SMALL) as log:
        assert log.end_index == 299
        log.reset(149, 1)  # a prefix reset: the first entry left is a record too
    with dledger.open_log(tmp_path, SMALL) as log:
        assert (log.begin_index, log.get_record(150).value) == (150, b"v150")


def test_a_view_reads_record_columns_straight_from_the_data_file(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, SMALL) as log:
        _fill(log)
        log.append_records([Record(b"v%d" % k, key=b"k" * 130, timestamp=k) for k in range(400)])  # rolls segments
    with StoreView.open(tmp_path) as view:
        assert len(list((tmp_path / "data").iterdir())) > 1
        direct = view.read_records(0, 500, 1 << 20)
        split = view.read_columns(0, 500, 1 << 20, records=True)
    assert direct.count == split.count == 403
    assert direct.records is not None and split.records is not None
    for name in RecordColumns.__dataclass_fields__:
        assert bytes(getattr(direct.records, name)) == bytes(getattr(split.records, name)), name
    for name in ("index", "term", "pos", "magic"):
        assert list(getattr(direct, name)) == list(getattr(split, name))
    assert direct.records.key(3) == b"k" * 130 and direct.records.value(402) == b"v399"
    assert direct.bodies == bytearray() and not direct.offsets.any()  # no bodies column


def test_java_compat_refuses_records_and_appends_nothing(tmp_path: Path) -> None:
    cfg = StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024, java_compat=True)
    with dledger.open_log(tmp_path, cfg) as log:
        log.append(b"x")
        with pytest.raises(DLedgerError, match="Java DLedger cannot read them") as err:
            log.append_record(b"v", key=b"k")
        assert err.value.code == ResponseCode.UNSUPPORTED
        assert log.end_index == 0


def test_bad_record_bodies_are_refused_whole(tmp_path: Path) -> None:
    good = encode_record(b"v", b"k", 1)
    with dledger.open_log(tmp_path, SMALL) as log:
        with pytest.raises(DLedgerError, match=r"body 1: bad record body \(3 bytes\)") as err:
            log.append_many([good, good[:3]], MAGIC_RECORD)
        assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
        with pytest.raises(DLedgerError, match=r"magic 1 .* or 16 .*not 2"):
            log.append_many([b""], 2)
        assert log.end_index == -1
        with pytest.raises(ValueError, match="over the limit"):
            log.append_record(b"", key=b"k" * 70_000)
        assert log.end_index == -1


def test_record_entries_replicate_as_encoded_runs(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path / "a", SMALL) as leader:
        _fill(leader)
        run, count = leader.read_run(0, 1 << 20)
    with MmapLogStore.open(tmp_path / "b", SMALL) as follower:
        assert follower.append_encoded(run) == count == 3
        assert record_of(follower.get(1)).headers == (("h", b"1"), ("h", b"2"))


def test_memory_store_takes_records() -> None:
    store = MemoryLogStore()
    store.term = 1
    store.append_many([encode_record(b"v", None, 3)], MAGIC_RECORD)
    assert record_of(store.get(0)).timestamp == 3
    with pytest.raises(DLedgerError, match="body 0: bad record body"):
        store.append_many([b"\x01"], MAGIC_RECORD)
    cols = with_records(store.read_columns(0, 5, 1 << 20)).records
    assert cols is not None and list(cols.timestamps) == [3]


def test_a_lying_record_in_a_batch_is_a_clear_error() -> None:
    body = bytearray(encode_record(b"value", b"key", 1))
    body[9] = 0x7F  # the key claims 126 bytes
    offsets = np.array([0, len(body)], dtype=np.int32)
    magic = np.array([MAGIC_RECORD], dtype=np.int32)
    with pytest.raises(ValueError, match=r"entry 0 of the batch: bad record body .* truncated"):
        impl.split_records(1, offsets, body, magic)
    assert impl.split_records(1, offsets, body, np.array([MAGIC_NORMAL], dtype=np.int32))[1] is body
