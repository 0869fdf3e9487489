"""The exactly-once sink's logic without Spark or a cluster: a task's numbered requests
against a fake idempotent leader (retries, concurrent attempts, lost answers, refusals,
a bad row), the producer-id derivation, the row conversion and the commit/abort reports.
The same paths against Spark and a real cluster: test_sink_spark.py."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from dledger.client import IndeterminateError
from dledger.codes import DLedgerError, ResponseCode
from dledger.record import Record, encode_record
from dledger.spark.exactly_once import RESENDS, ProducerWriteError, TaskIds, send_numbered
from dledger.spark.live import append_all
from dledger.spark.options import parse_write_options
from dledger.spark.send_queue import OrderedSender
from dledger.spark.sink_report import abort_report, commit_report
from dledger.spark.target import OptionError
from tests.spark.fake_leader import FakeClient, FakeLeader

PID = TaskIds("job-1", -1, 0).producer_id()


def bodies(values: Iterable[bytes]) -> list[bytes]:
    """Record bodies of `values` (as `bodies_of_rows` makes them for exactly-once writes)."""
    return [encode_record(v.ljust(8, b"."), None, 1) for v in values]


def chunks(n: int, per_chunk: int = 7, tag: str = "r") -> Iterator[list[bytes]]:
    """The record bodies of `n` rows in Arrow-batch-sized chunks."""
    for lo in range(0, n, per_chunk):
        yield bodies(f"{tag}{k}".encode() for k in range(lo, min(n, lo + per_chunk)))


def values(n: int, tag: str = "r") -> list[bytes]:
    """The values `chunks` carries."""
    return [f"{tag}{k}".encode().ljust(8, b".") for k in range(n)]


def send(leader: FakeLeader, n: int, pid: int = PID, batch_entries: int = 5, tag: str = "r", epoch: int = 0) -> Any:
    return send_numbered(FakeClient(leader), chunks(n, tag=tag), batch_entries, 1 << 20, pid, epoch)


def test_rows_are_numbered_in_order_in_requests_of_batch_entries() -> None:
    leader = FakeLeader()
    out = send(leader, 23)
    assert leader.values() == values(23)
    assert [seq for _, seq, _ in leader.log] == list(range(23))
    assert leader.calls == 5  # 5 + 5 + 5 + 5 + 3
    assert (out.rows, out.appended, out.runs, out.first, out.last) == (23, 23, ((0, 23),), 0, 22)


def test_batch_bytes_split_requests_and_keep_one_record_at_least() -> None:
    leader = FakeLeader()
    size = len(bodies([b"r0"])[0])
    out = send_numbered(FakeClient(leader), chunks(10), 100, 2 * size + 1, PID)  # 2 per request
    assert leader.calls == 5 and out.rows == 10
    leader2 = FakeLeader()
    send_numbered(FakeClient(leader2), chunks(3), 100, size - 1, PID)  # larger than batchBytes: one each
    assert leader2.calls == 3 and leader2.values() == values(3)


def test_a_retried_task_resends_the_same_numbered_rows_and_nothing_lands_twice() -> None:
    leader = FakeLeader()

    def fail_third(call: int, stamp: Any, records: Any) -> BaseException | None:
        return DLedgerError(ResponseCode.NETWORK_ERROR, "member gone") if call == 3 else None

    leader.before = fail_third
    with pytest.raises(DLedgerError, match="member gone"):
        send(leader, 23)
    assert leader.values() == values(10)  # a prefix: requests 1 and 2
    leader.before = None
    out = send(leader, 23)  # the retry: same rows, same producer id
    assert leader.values() == values(23)
    assert (out.rows, out.appended) == (23, 13)
    assert out.runs == ((0, 23),)
    again = send(leader, 23)  # a third attempt after success: all duplicates
    assert (again.rows, again.appended) == (23, 0) and len(leader.log) == 23


def test_concurrent_attempts_of_one_partition_write_each_row_once() -> None:
    leader = FakeLeader()
    outs: list[Any] = []
    threads = [threading.Thread(target=lambda: outs.append(send(leader, 500, batch_entries=7))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert leader.values() == values(500)
    assert sorted(o.rows for o in outs) == [500, 500, 500]
    assert sum(o.appended for o in outs) == 500


def test_other_partitions_and_jobs_are_other_producers() -> None:
    leader = FakeLeader()
    send(leader, 10, TaskIds("job-1", -1, 0).producer_id(), tag="a")
    send(leader, 10, TaskIds("job-1", -1, 1).producer_id(), tag="b")
    send(leader, 10, TaskIds("job-2", -1, 0).producer_id(), tag="c")
    send(leader, 10, TaskIds("q", 4, 0).producer_id(), tag="d", epoch=4)
    send(leader, 10, TaskIds("q", 5, 0).producer_id(), tag="e", epoch=5)  # the next micro-batch: a new epoch
    assert Counter(v[:1] for v in leader.values()) == Counter({b"a": 10, b"b": 10, b"c": 10, b"d": 10, b"e": 10})
    assert len(leader.epochs) == 4  # the stream's partition is one producer for both batches


def test_a_leftover_attempt_of_an_earlier_micro_batch_is_fenced() -> None:
    leader = FakeLeader()
    batch4, batch5 = TaskIds("q", 4, 0), TaskIds("q", 5, 0)
    send(leader, 10, batch4.producer_id(), tag="d", epoch=batch4.epoch)
    send(leader, 10, batch5.producer_id(), tag="e", epoch=batch5.epoch)
    with pytest.raises(ProducerWriteError, match=r"PRODUCER_FENCED: a newer epoch .*a later micro-batch"):
        send(leader, 12, batch4.producer_id(), tag="d", epoch=batch4.epoch)  # a zombie of batch 4
    assert leader.values() == values(10, "d") + values(10, "e")
    again = send(leader, 10, batch5.producer_id(), tag="e", epoch=batch5.epoch)  # batch 5 replayed: duplicates
    assert again.appended == 0 and len(leader.log) == 20


def test_a_named_writer_keeps_one_producer_per_partition_across_jobs_and_fences_older_jobs() -> None:
    job1, job2 = TaskIds("nightly", -1, 0, writer_epoch=1_000), TaskIds("nightly", -1, 0, 1, writer_epoch=2_000)
    assert job1.producer_id() == job2.producer_id() and (job1.epoch, job2.epoch) == (1_000, 2_000)
    assert job1.producer_id() != TaskIds("nightly", -1, 1, writer_epoch=1_000).producer_id()  # another partition
    assert job1.producer_id() != TaskIds("nightly", -1, 0).producer_id()  # an unnamed job of that id
    assert 2**62 <= job1.producer_id() <= 2**63 - 1
    leader = FakeLeader()
    send(leader, 10, job1.producer_id(), tag="a", epoch=job1.epoch)
    send(leader, 10, job2.producer_id(), tag="b", epoch=job2.epoch)  # the next job numbers from 0 again
    assert leader.values() == values(10, "a") + values(10, "b") and len(leader.epochs) == 1
    with pytest.raises(ProducerWriteError, match=r"PRODUCER_FENCED: .*with writerName, a later job"):
        send(leader, 12, job1.producer_id(), tag="a", epoch=job1.epoch)  # a task of the first job, left over
    again = send(leader, 10, job2.producer_id(), tag="b", epoch=job2.epoch)  # job 2's task retried
    assert again.appended == 0 and len(leader.log) == 20


def test_writer_name_is_checked_when_the_write_is_made() -> None:
    base = {"peers": "n0-127.0.0.1:1", "writerName": "nightly-load"}
    assert parse_write_options(base, False).writer_name == "nightly-load"
    assert parse_write_options({"peers": "n0-127.0.0.1:1"}, False).writer_name is None
    for options, streaming, words in (
        (base, True, "writerName is for batch writes"),
        ({**base, "exactlyOnce": "false"}, False, "producers of exactly-once writes"),
        ({**base, "writerName": " "}, False, "option writerName is empty"),
        ({**base, "writerName": "x" * 257}, False, "1 to 256 printable characters"),
        ({**base, "writerName": "a\nb"}, False, "1 to 256 printable characters"),
    ):
        with pytest.raises(OptionError, match=words):
            parse_write_options(options, False, streaming)


def test_producer_ids_are_stable_in_range_and_ignore_the_attempt() -> None:
    ids = TaskIds("job-1", -1, 3, attempt=0)
    assert ids.producer_id() == TaskIds("job-1", -1, 3, attempt=2).producer_id()
    assert 2**62 <= ids.producer_id() <= 2**63 - 1
    others = {TaskIds("job-1", -1, 4), TaskIds("job-2", -1, 3), TaskIds("job-1", 0, 3), TaskIds("job-1", 0, 4)}
    assert len({o.producer_id() for o in others} | {ids.producer_id()}) == 5
    # a stream's partition: one producer id for every micro-batch, the batch id its epoch
    assert TaskIds("job-1", 0, 3).producer_id() == TaskIds("job-1", 7, 3, attempt=1).producer_id()
    assert [TaskIds("job-1", b, 3).epoch for b in (-1, 0, 7)] == [0, 0, 7]


def test_an_unknown_outcome_is_sent_again_and_lands_once() -> None:
    leader = FakeLeader(lose_answer={2, 4})
    out = send(leader, 12)
    assert leader.values() == values(12)
    assert out.rows == 12 and out.appended == 5  # the resent ones were found as duplicates
    assert leader.calls == 5  # 3 requests, 2 of them sent twice


def test_an_outcome_unknown_after_every_resend_fails_the_task() -> None:
    leader = FakeLeader(lose_answer=set(range(1, 100)))
    with pytest.raises(IndeterminateError):
        send(leader, 12)
    assert leader.calls == RESENDS + 1
    assert leader.values() == values(5)  # the first request, once; nothing after it


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (ResponseCode.OUT_OF_ORDER_SEQUENCE, "expects another sequence number"),
        (ResponseCode.UNKNOWN_PRODUCER, "no longer knows this task's producer id"),
        (ResponseCode.PRODUCER_FENCED, "newer epoch"),
        (ResponseCode.UNSUPPORTED, "exactlyOnce=false"),
    ],
)
def test_producer_refusals_fail_the_task_with_a_clear_message(code: ResponseCode, words: str) -> None:
    leader = FakeLeader()
    leader.before = lambda call, stamp, records: DLedgerError(code, "refused (fake)") if call == 2 else None
    with pytest.raises(ProducerWriteError, match=words) as info:
        send(leader, 23)
    assert "numbered from 5" in str(info.value) or code == ResponseCode.UNSUPPORTED
    assert leader.values() == values(5)
    assert leader.calls == 2  # nothing sent after the refusal


def test_a_gap_is_refused_by_the_leader() -> None:
    leader = FakeLeader()
    send(leader, 5)
    client = FakeClient(leader)
    from dledger.client import ProducerStamp

    with pytest.raises(DLedgerError, match="expected sequence number 5"):
        client.append_records([Record(b"x", None, 1)], stamp=ProducerStamp(PID, 0, 7))


def test_a_bad_row_stops_the_task_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request queued behind the one in flight is dropped, not sent (the task used
    to send it before failing: rows of a failed task appearing later)."""
    leader = FakeLeader()
    release = threading.Event()
    in_flight = threading.Event()

    def hold_first(call: int, stamp: Any, records: Any) -> None:
        if call == 1:
            in_flight.set()
            assert release.wait(60)
        return None

    leader.lock = threading.RLock()  # type: ignore[assignment]
    leader.before = hold_first

    def rows() -> Iterator[list[bytes]]:
        yield bodies(b"a%d" % k for k in range(5))  # request 1: sent, held
        yield bodies(b"b%d" % k for k in range(5))  # request 2: queued
        assert in_flight.wait(60)
        raise ValueError("value (body) must not be null")

    stop = OrderedSender.stop

    def stop_then_release(self: OrderedSender) -> None:
        self.stopped = True
        release.set()  # request 1 completes only once the task has decided to stop
        stop(self)

    monkeypatch.setattr(OrderedSender, "stop", stop_then_release)
    with pytest.raises(ValueError, match="must not be null"):
        send_numbered(FakeClient(leader), rows(), 5, 1 << 20, PID)
    assert leader.values() == [(b"a%d" % k).ljust(8, b".") for k in range(5)] and leader.calls == 1


class _PlainClient:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.release = threading.Event()
        self.in_flight = threading.Event()

    def append_many(self, bodies: list[bytes]) -> int:
        self.in_flight.set()
        assert self.release.wait(60)
        self.bodies.extend(bodies)
        return len(self.bodies) - len(bodies)


def test_an_at_least_once_task_also_stops_at_a_bad_row(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _PlainClient()

    def rows() -> Iterator[list[bytes]]:
        yield [b"a%d" % k for k in range(5)]
        yield [b"b%d" % k for k in range(5)]
        assert client.in_flight.wait(60)
        raise ValueError("value (body) must not be null")

    finish = OrderedSender.finish

    def release_then_finish(self: OrderedSender, raise_error: bool = True) -> None:
        client.release.set()  # the first batch completes only once the write is finishing
        finish(self, raise_error)

    monkeypatch.setattr(OrderedSender, "finish", release_then_finish)

    with pytest.raises(ValueError):
        append_all(client, rows(), 5, 1 << 20)  # type: ignore[arg-type]
    assert client.bodies == [b"a%d" % k for k in range(5)]


def test_write_options_exactly_once_by_default() -> None:
    base = {"peers": "n0-127.0.0.1:1"}
    assert parse_write_options(base, False).exactly_once
    assert parse_write_options(base, False).abort_wait_ms == 5000
    off = parse_write_options({**base, "exactlyOnce": "false", "abortWaitMs": "0"}, False)
    assert (off.exactly_once, off.abort_wait_ms) == (False, 0)
    with pytest.raises(OptionError, match="exactlyOnce"):
        parse_write_options({**base, "exactlyOnce": "maybe"}, False)
    with pytest.raises(OptionError, match="abortWaitMs"):
        parse_write_options({**base, "abortWaitMs": "-1"}, False)


class _Msg:
    def __init__(self, partition: int, count: int, appended: int, first: int, last: int, runs: Any = ()) -> None:
        self.partition, self.count, self.appended, self.first, self.last = partition, count, appended, first, last
        self.runs = runs


def test_the_abort_report_says_what_stayed_and_what_may_have() -> None:
    messages = [_Msg(0, 100, 100, 10, 109), None, _Msg(2, 50, 20, 200, 260, ((200, 30), (240, 20))), None]
    text = abort_report(messages, "dledger write", True, streaming=False)
    assert "2 of 4 tasks finished: their 150 rows stay in the log" in text
    assert "partition 0: 100 rows at indexes 10..109" in text
    assert "partition 2: 50 rows at indexes 200..260 (in 2 runs), 30 of them found in the log already" in text
    assert "2 tasks did not finish (partitions 1, 3): each may have appended a prefix of its rows" in text
    assert "running the job again appends these rows again" in text
    stream = abort_report(messages, "dledger stream batch 7", True, streaming=True)
    assert "same query id and batch id" in stream and "not appended twice" in stream
    assert "duplicates those" in abort_report([None], "w", False, streaming=False)
    assert "0 of 1 tasks finished: their 0 rows" in abort_report([None], "w", True, streaming=False)


def test_the_commit_report_counts_rows_found_as_duplicates() -> None:
    text = commit_report([_Msg(0, 100, 100, 0, 99), _Msg(1, 50, 0, -1, -1)], "dledger write")
    assert text.startswith("dledger write wrote 150 rows in 2 tasks (50 of them were found in the log already")
    assert "partition 1: 50 rows, 50 of them found in the log already" in text


def test_exactly_once_rows_are_records_even_for_a_value_alone() -> None:
    import pyarrow as pa  # type: ignore[import-untyped]

    from dledger.entry import MAGIC_RECORD
    from dledger.record import decode_record
    from dledger.spark.records import bodies_of_rows
    from dledger.spark.write_schema import write_columns_of

    batch = pa.record_batch([pa.array(["a", "bb"])], names=["value"])
    out, magic = bodies_of_rows(batch, write_columns_of([("value", "string")]), as_records=True)
    decoded = [decode_record(body) for body in out]
    assert magic == MAGIC_RECORD and [(key, headers, value) for _, key, headers, value in decoded] == [
        (None, [], b"a"),
        (None, [], b"bb"),
    ]
    assert decoded[0][0] == decoded[1][0] > 0  # one write time per Arrow batch
    nulls = pa.record_batch([pa.array(["a", None])], names=["value"])
    with pytest.raises(ValueError, match="must not be null"):
        bodies_of_rows(nulls, write_columns_of([("value", "string")]), as_records=True)


def test_reports_read_the_tasks_commit_messages() -> None:
    from dledger.spark.sink import AppendedMessage

    done = AppendedMessage(5, 9, 5, partition=0, attempt=1, appended=2, runs=((5, 5),), exactly_once=True)
    text = abort_report([done, None], "dledger write", True, streaming=False)
    assert "1 of 2 tasks finished: their 5 rows stay in the log (partition 0: 5 rows at indexes 5..9" in text
    assert "3 of them found in the log already" in text and "partitions 1)" in text


def test_a_write_outside_a_spark_task_is_refused_clearly() -> None:
    from dledger.spark.sink import task_ids

    with pytest.raises(ProducerWriteError, match="inside a Spark task"):
        task_ids("job")
    with pytest.raises(ProducerWriteError, match="inside a Spark task"):
        task_ids(None)


@pytest.mark.parametrize(
    ("streaming", "exactly_once", "messages", "waits"),
    [
        (False, True, [None, "done"], [5.0]),  # a batch job with a task left: waits for it
        (False, True, ["done", "done"], []),  # every task finished: none left running
        (True, True, [None], []),  # an exactly-once stream's batch runs again under the same ids
        (True, False, [None], [5.0]),  # an at-least-once stream waits like a batch job
    ],
)
def test_abort_waits_only_while_a_cancelled_task_may_still_append(
    monkeypatch: pytest.MonkeyPatch, streaming: bool, exactly_once: bool, messages: list[Any], waits: list[float]
) -> None:
    from dledger.spark import sink
    from dledger.spark.write_schema import write_columns_of

    waited: list[float] = []
    monkeypatch.setattr(sink, "_pause", waited.append)
    options = parse_write_options({"peers": "n0-127.0.0.1:1", "exactlyOnce": str(exactly_once).lower()}, False)
    done = sink.AppendedMessage(0, 0, 1, partition=0, appended=1)
    given = [done if m == "done" else None for m in messages]
    columns = write_columns_of([("value", "binary")])
    if streaming:
        sink.DLedgerStreamArrowWriter(options, FakeClient, columns).abort(given, 3)  # type: ignore[arg-type]
    else:
        sink.DLedgerArrowWriter(options, FakeClient, columns).abort(given)  # type: ignore[arg-type]
    assert waited == waits
