"""The producer table folded from a log: whole runs, runs cut short by a new leader's
term, runs split across reads, and the leader's own table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dledger.columns import ColumnBatch
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.raft.producer_log import StampFold
from dledger.raft.producers import ProducerTable, Stamp, Verdict
from dledger.record import encode_record, record_stamp, stamp_record_body

pytestmark = pytest.mark.unit


def _read_stamp(body: bytes) -> Stamp | None:
    fields = record_stamp(body)
    return Stamp(*fields) if fields is not None else None


class _Log:
    """A log as (term, magic, body) triples from index 0."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int, bytes]] = []

    def request(self, term: int, pid: int, first_seq: int, count: int, time_ms: int = 1) -> int:
        first = len(self.entries)
        for k in range(count):
            body = encode_record(b"v%d" % (first_seq + k), timestamp=5)
            if k == 0:
                body = stamp_record_body(body, pid, 0, first_seq, count, time_ms)
            self.entries.append((term, MAGIC_RECORD, body))
        return first

    def plain(self, term: int, count: int = 1) -> None:
        self.entries.extend((term, MAGIC_NORMAL, b"plain") for _ in range(count))

    def batch(self, start: int, stop: int) -> ColumnBatch:
        rows = self.entries[start:stop]
        offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        offsets[1:] = np.cumsum([len(body) for _, _, body in rows])
        return ColumnBatch(
            index=np.arange(start, stop, dtype=np.int64),
            term=np.array([t for t, _, _ in rows], dtype=np.int64),
            pos=np.zeros(len(rows), dtype=np.int64),
            offsets=offsets,
            bodies=bytearray(b"".join(body for _, _, body in rows)),
            magic=np.array([m for _, m, _ in rows], dtype=np.int32),
        )


def _fold(log: _Log, cuts: tuple[int, ...] = ()) -> StampFold:
    fold = StampFold(ProducerTable(), 0, _read_stamp)
    bounds = [0, *cuts, len(log.entries)]
    for start, stop in itertools.pairwise(bounds):
        fold.feed(log.batch(start, stop))
    return fold


def test_whole_runs_are_recorded_with_their_indexes() -> None:
    log = _Log()
    log.plain(1, 2)
    first = log.request(1, pid=7, first_seq=0, count=3)
    log.plain(1)
    second = log.request(1, pid=7, first_seq=3, count=2)
    table = _fold(log).table
    assert table.check(Stamp(7, 0, 0, 3)).runs == ((first, 3),)
    assert table.check(Stamp(7, 0, 3, 2)).runs == ((second, 2),)
    assert table.check(Stamp(7, 0, 5, 1)).verdict is Verdict.NEW


@pytest.mark.parametrize("cuts", [(), (3,), (2, 3, 4), (1, 2, 3, 4, 5, 6)])
def test_a_run_cut_by_a_new_leaders_term_holds_only_its_prefix(cuts: tuple[int, ...]) -> None:
    """The old leader appended 4 records; the new leader (term 2) has 2 and appends on:
    only sequence numbers 0 and 1 are in the log, whatever the read boundaries."""
    log = _Log()
    first = log.request(1, pid=3, first_seq=0, count=4)
    del log.entries[first + 2 :]
    log.plain(2, 3)
    fold = _fold(log, cuts)
    assert not fold.open_run
    check = fold.table.check(Stamp(3, 0, 0, 4))
    assert (check.verdict, check.runs, check.expected_seq) == (Verdict.PARTIAL, ((first, 2),), 2)


def test_a_run_at_the_end_of_what_was_read_stays_open_until_its_end_is_read() -> None:
    log = _Log()
    log.request(1, pid=3, first_seq=0, count=4)
    fold = StampFold(ProducerTable(), 0, _read_stamp)
    fold.feed(log.batch(0, 2))
    assert fold.open_run and len(fold.table) == 0
    fold.feed(log.batch(2, 4))
    assert not fold.open_run and fold.table.check(Stamp(3, 0, 0, 4)).verdict is Verdict.DUPLICATE


def test_finish_closes_an_open_run_with_what_the_log_holds() -> None:
    log = _Log()
    log.request(1, pid=3, first_seq=0, count=4)
    fold = StampFold(ProducerTable(), 0, _read_stamp)
    fold.feed(log.batch(0, 3))
    before = fold.encode()
    copy = fold.copy()
    assert copy.encode() == before
    copy.finish()
    assert copy.table.check(Stamp(3, 0, 3, 1)).verdict is Verdict.NEW  # 0..2 recorded
    assert fold.open_run and len(fold.table) == 0  # the copy is independent
    fed = fold.copy()
    fed.feed(log.batch(3, 4))  # the open run's last entry: counted and closed in the copy only
    assert not fed.open_run and fed.table.check(Stamp(3, 0, 0, 4)).verdict is Verdict.DUPLICATE
    assert fold.encode() == before


def test_a_fold_must_be_fed_in_order() -> None:
    log = _Log()
    log.plain(1, 4)
    fold = StampFold(ProducerTable(), 0, _read_stamp)
    with pytest.raises(ValueError, match="expects index 0"):
        fold.feed(log.batch(1, 4))


def test_a_damaged_stamp_is_skipped_and_the_rest_folds() -> None:
    log = _Log()
    first = log.request(1, pid=3, first_seq=0, count=2)
    term, magic, body = log.entries[first]
    log.entries[first] = (term, magic, body[:10])  # a stamp cut short
    second = log.request(1, pid=4, first_seq=0, count=1)
    table = _fold(log).table
    assert table.check(Stamp(3, 0, 0, 2)).verdict is Verdict.NEW
    assert table.check(Stamp(4, 0, 0, 1)).runs == ((second, 1),)


def test_an_image_taken_inside_a_run_folds_on_to_the_same_table() -> None:
    """A saved copy (or a snapshot's) may be taken between a run's stamp and its end: the
    open run travels with the image."""
    log = _Log()
    log.request(1, pid=3, first_seq=0, count=5)
    log.request(1, pid=4, first_seq=0, count=2)
    straight = _fold(log)
    for cut in range(1, len(log.entries)):
        fold = StampFold(ProducerTable(), 0, _read_stamp)
        fold.feed(log.batch(0, cut))
        again = StampFold.decode(fold.encode(), _read_stamp)
        assert (again.next_index, again.open_run) == (cut, fold.open_run)
        again.feed(log.batch(cut, len(log.entries)))
        assert again.table == straight.table, cut
    with pytest.raises(ValueError, match="truncated"):
        StampFold.decode(b"\x00" * 5, _read_stamp)
