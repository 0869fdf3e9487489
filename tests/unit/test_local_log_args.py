"""The embedded log refuses bad arguments with an error naming them, and changes
nothing: `truncate` takes whole numbers only (1.5 was "header out of range"),
`append_records` takes Records (bytes were an AttributeError), and a header key that is
not valid Unicode text is a ValueError naming it (it was a bare UnicodeEncodeError)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dledger
from dledger.config import StoreConfig
from dledger.record import Record, encode_record
from dledger.store import MmapLogStore

pytestmark = pytest.mark.unit

SMALL = StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024)


@pytest.fixture(params=["async", "sync"])
def log(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MmapLogStore]:
    """A local log (LocalLog or SyncLocalLog) holding entries 0..4."""
    with dledger.open_log(tmp_path, replace(SMALL, flush_mode=request.param)) as opened:
        opened.append_many([b"e%d" % k for k in range(5)])
        yield opened


@pytest.mark.parametrize("bad", [1.5, 2.0, "2", None, True])
def test_truncate_takes_whole_numbers_only(log: MmapLogStore, bad: object) -> None:
    with pytest.raises(TypeError, match=f"truncate: from_index must be an int, not {type(bad).__name__}"):
        log.truncate(bad)  # type: ignore[arg-type]
    assert log.end_index == 4


def test_truncate_takes_numpy_integers(log: MmapLogStore) -> None:
    log.truncate(np.int64(3))
    assert log.end_index == 2


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([b"x"], r"append_records: records\[0\] must be a Record \(dledger.record.Record\), not bytes"),
        ([Record(b"ok"), "s"], r"append_records: records\[1\] must be a Record .*, not str"),
        (b"xy", "append_records: records must be a sequence of Record objects, not bytes"),
        (Record(b"one"), "append_records: records must be a sequence of Record objects, not Record"),
        (None, "append_records: records must be a sequence of Record objects, not NoneType"),
    ],
)
def test_append_records_takes_records_only(log: MmapLogStore, records: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        log.append_records(records)  # type: ignore[attr-defined]
    assert log.end_index == 4


def test_append_records_takes_any_iterable_of_records(log: MmapLogStore) -> None:
    first = log.append_records(Record(b"v%d" % k, timestamp=k) for k in range(2))  # type: ignore[attr-defined]
    assert [log.get_record(i).value for i in (first, first + 1)] == [b"v0", b"v1"]  # type: ignore[attr-defined]


def test_a_header_key_that_is_not_unicode_text_is_a_value_error_naming_it(log: MmapLogStore) -> None:
    message = r"header key '\\udc80' is not valid UTF-8 text"
    with pytest.raises(ValueError, match=message) as info:
        log.append_record(b"v", headers=[("ok", b""), ("\udc80", b"1")])  # type: ignore[attr-defined]
    assert type(info.value) is ValueError
    with pytest.raises(ValueError, match=message):
        log.append_records([Record(b"v", headers=(("\udc80", b"1"),))])  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=message):
        encode_record(b"v", None, 0, iter([("\udc80", b"1")]))
    assert log.end_index == 4


@pytest.mark.parametrize("bad", [1.5, "2", None])
def test_a_member_store_truncate_takes_whole_numbers_only(tmp_path: Path, bad: object) -> None:
    """A member's store (not the embedded log) said "header out of range" for 1.5 before."""
    store = MmapLogStore.open(tmp_path / "dledger-n0", SMALL)
    try:
        store.append_many([b"e%d" % k for k in range(5)])
        with pytest.raises(TypeError):
            store.truncate(bad)  # type: ignore[arg-type]
        assert [e.body for e in store.iterate()] == [b"e%d" % k for k in range(5)]
        store.truncate(np.int64(3))
        assert store.end_index == 2
    finally:
        store.close()


@pytest.mark.parametrize("index", [2**63, 2**200, -(2**63) - 1, -(2**64)])
def test_an_index_past_int64_is_outside_the_log(log: MmapLogStore, index: int) -> None:
    """It was a bare OverflowError ("Python int too large to convert to C long")."""
    for read in (log.get, log.get_body, log.term_at, log.get_record):  # type: ignore[attr-defined]
        with pytest.raises(dledger.DLedgerError) as info:
            read(index)
        assert info.value.code == dledger.ResponseCode.INDEX_OUT_OF_RANGE
    if index > 0:
        assert log.read_columns(index, 10, 1 << 20).count == 0  # past the end, as any index there
    else:
        with pytest.raises(dledger.DLedgerError, match="outside"):  # below the start, as -1 is
            log.read_columns(index, 10, 1 << 20)
    assert log.read_columns(0, 2**64, 2**70).count == 5  # counts and sizes past int64: no limit
    with pytest.raises(dledger.DLedgerError, match="append_many writes magic"):
        log.append_many([b"x"], 2**64)
    assert log.end_index == 4
