"""The idempotent producers' sequence table: verdicts, expiry by log time, images."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.raft.producers import MAX_ID, ProducerTable, Stamp, Verdict

pytestmark = pytest.mark.unit


def _write(table: ProducerTable, log: list[tuple[int, int]], stamp: Stamp) -> list[int]:
    """What a leader does with a stamped request: the indexes its records end up at."""
    check = table.check(stamp)
    if check.verdict is Verdict.DUPLICATE:
        return [first + i for first, count in check.runs for i in range(count)]
    assert check.verdict is Verdict.NEW, check
    first_index = len(log)
    log.extend((stamp.producer_id, stamp.first_seq + i) for i in range(stamp.count))
    table.record(stamp, first_index)
    return list(range(first_index, first_index + stamp.count))


def test_a_new_producer_starts_at_zero_and_continues_in_order() -> None:
    table = ProducerTable()
    assert table.check(Stamp(7, 0, 1, 3)).verdict is Verdict.UNKNOWN_PRODUCER
    assert table.check(Stamp(7, 0, 0, 3)).verdict is Verdict.NEW
    table.record(Stamp(7, 0, 0, 3), first_index=10)
    assert table.check(Stamp(7, 0, 3, 2)).verdict is Verdict.NEW
    check = table.check(Stamp(7, 0, 5, 1))
    assert (check.verdict, check.expected_seq) == (Verdict.OUT_OF_ORDER, 3)


def test_a_retry_is_answered_with_the_indexes_it_already_has() -> None:
    table = ProducerTable()
    table.record(Stamp(1, 0, 0, 3), first_index=10)
    table.record(Stamp(2, 0, 0, 1), first_index=13)  # another producer in between
    table.record(Stamp(1, 0, 3, 2), first_index=14)
    assert table.check(Stamp(1, 0, 0, 3)).runs == ((10, 3),)
    assert table.check(Stamp(1, 0, 3, 2)).runs == ((14, 2),)
    # a retry that spans two requests gets both runs, in sequence order
    check = table.check(Stamp(1, 0, 1, 4))
    assert (check.verdict, check.runs) == (Verdict.DUPLICATE, ((11, 2), (14, 2)))


def test_records_seen_and_new_in_one_request_are_a_partial_duplicate() -> None:
    """A new leader may hold only a prefix of a request: the retry's seen records get
    their indexes and the leader appends the rest (`expected_seq` on)."""
    table = ProducerTable(batches_kept=2)
    table.record(Stamp(1, 0, 0, 3), first_index=0)
    check = table.check(Stamp(1, 0, 2, 3))
    assert (check.verdict, check.runs, check.expected_seq) == (Verdict.PARTIAL, ((2, 1),), 3)
    table.record(Stamp(1, 0, 3, 1), first_index=5)
    table.record(Stamp(1, 0, 4, 1), first_index=6)  # the first request is no longer kept
    check = table.check(Stamp(1, 0, 0, 6))
    assert (check.verdict, check.runs, check.expected_seq) == (Verdict.PARTIAL, (), 5)


def test_requests_older_than_the_kept_ones_are_stale() -> None:
    table = ProducerTable(batches_kept=2)
    for seq in range(4):
        table.record(Stamp(1, 0, seq, 1), first_index=seq)
    assert table.check(Stamp(1, 0, 1, 1)).verdict is Verdict.STALE
    assert table.check(Stamp(1, 0, 2, 1)).runs == ((2, 1),)
    assert table.check(Stamp(1, 0, 1, 2)).verdict is Verdict.STALE


def test_a_new_epoch_restarts_the_numbers_and_fences_the_old_one() -> None:
    table = ProducerTable()
    table.record(Stamp(1, 4, 0, 2), first_index=0)
    assert table.check(Stamp(1, 5, 1, 1)).verdict is Verdict.UNKNOWN_PRODUCER
    table.record(Stamp(1, 5, 0, 1), first_index=2)
    check = table.check(Stamp(1, 4, 0, 2))
    assert (check.verdict, check.epoch) == (Verdict.FENCED, 5)
    assert table.check(Stamp(1, 5, 0, 1)).runs == ((2, 1),)


def test_an_idle_producer_expires_by_log_time_not_by_the_wall_clock() -> None:
    table = ProducerTable(expiration_ms=1000)
    table.record(Stamp(1, 0, 0, 1, append_time_ms=5000), first_index=0)
    table.record(Stamp(2, 0, 0, 1, append_time_ms=6000), first_index=1)
    assert table.check(Stamp(1, 0, 1, 1)).verdict is Verdict.NEW  # 1000 ms idle: still known
    table.record(Stamp(2, 0, 1, 1, append_time_ms=6001), first_index=2)
    assert table.check(Stamp(1, 0, 1, 1)).verdict is Verdict.UNKNOWN_PRODUCER
    assert table.check(Stamp(1, 0, 0, 1)).verdict is Verdict.NEW  # it may start over
    assert table.expire() == [1]
    assert len(table) == 1


def test_a_run_the_table_would_refuse_cannot_be_recorded() -> None:
    table = ProducerTable()
    table.record(Stamp(1, 0, 0, 2), first_index=0)
    with pytest.raises(ValueError, match="producer 1: a duplicate run at index 9"):
        table.record(Stamp(1, 0, 0, 2), first_index=9)
    assert table.check(Stamp(1, 0, 0, 2)).runs == ((0, 2),)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"producer_id": -1}, "producer_id"),
        ({"producer_id": MAX_ID + 1}, "producer_id"),
        ({"epoch": -1}, "epoch"),
        ({"first_seq": -5}, "first_seq"),
        ({"count": 0}, "count"),
        ({"first_seq": MAX_ID, "count": 2}, "count"),
        ({"append_time_ms": -1}, "append_time_ms"),
    ],
)
def test_stamps_out_of_range_are_refused(fields: dict[str, int], message: str) -> None:
    values = {"producer_id": 1, "epoch": 0, "first_seq": 0, "count": 1, **fields}
    with pytest.raises(ValueError, match=message):
        Stamp(**values)


def test_the_image_round_trips_and_refuses_damage() -> None:
    table = ProducerTable(expiration_ms=5000, batches_kept=3)
    for i in range(5):
        table.record(Stamp(i % 2, 1, i // 2, 1, append_time_ms=100 + i), first_index=i)
    image = table.encode()
    copy = ProducerTable.decode(image)
    assert copy == table and copy is not table
    assert copy.check(Stamp(0, 1, 1, 1)).runs == ((2, 1),)
    damaged = bytearray(image)
    damaged[20] ^= 1
    with pytest.raises(ValueError, match="damaged"):
        ProducerTable.decode(bytes(damaged))
    with pytest.raises(ValueError, match="too short"):
        ProducerTable.decode(image[:10])
    with pytest.raises(ValueError, match="damaged"):
        ProducerTable.decode(image[:-9] + image[-4:])


def test_a_copy_is_independent() -> None:
    table = ProducerTable()
    table.record(Stamp(1, 0, 0, 1), first_index=0)
    copy = table.copy()
    copy.record(Stamp(1, 0, 1, 1), first_index=1)
    assert table.check(Stamp(1, 0, 1, 1)).verdict is Verdict.NEW
    assert copy.check(Stamp(1, 0, 1, 1)).verdict is Verdict.DUPLICATE


@st.composite
def _sends(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """Producers sending requests, each maybe retried later: (producer, first_seq, count)."""
    next_seq = [0, 0, 0]
    sent: list[tuple[int, int, int]] = []
    for _ in range(draw(st.integers(1, 40))):
        if sent and draw(st.booleans()):
            sent.append(draw(st.sampled_from(sent)))  # a retry of an earlier request
            continue
        pid = draw(st.integers(0, 2))
        count = draw(st.integers(1, 4))
        sent.append((pid, next_seq[pid], count))
        next_seq[pid] += count
    return sent


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(_sends())
def test_retries_never_write_twice_and_get_their_first_indexes(sends: list[tuple[int, int, int]]) -> None:
    table = ProducerTable(batches_kept=100)
    log: list[tuple[int, int]] = []
    first_answer: dict[tuple[int, int, int], list[int]] = {}
    written: list[tuple[Stamp, int]] = []
    for pid, first_seq, count in sends:
        stamp = Stamp(pid, 0, first_seq, count)
        end = len(log)
        indexes = _write(table, log, stamp)
        if len(log) > end:
            written.append((stamp, end))
        assert first_answer.setdefault((pid, first_seq, count), indexes) == indexes
        assert [log[i] for i in indexes] == [(pid, first_seq + i) for i in range(count)]
    assert len(log) == len(set(log))
    # the table is a function of the log: folding the written runs in gives the same
    rebuilt = ProducerTable(batches_kept=100)
    for stamp, first_index in written:
        rebuilt.record(stamp, first_index)
    assert rebuilt == table
