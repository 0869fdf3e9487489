"""Producer over the fake Ledger servers: batching (size, count, linger), the in-flight
bound, resending what provably was not appended and reporting what may have been."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

import grpc
import pytest

from dledger.client import AppendResult, DLedgerClient, IndeterminateError, ProducerStamp, SendFuture
from dledger.client.producer import MAX_BODY_BYTES
from dledger.clock import ManualClock, MonotonicClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.record import STAMP_SIZE, Record
from tests.client.fake_ledger import Action, FakeCluster

pytestmark = pytest.mark.unit

CLOCK = MonotonicClock()


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll `predicate` until true or fail after `timeout_s`."""
    deadline = CLOCK.now_ms() + int(timeout_s * 1000)
    while not predicate():
        assert CLOCK.now_ms() < deadline, "condition not met in time"
        CLOCK.sleep_ms(2)


def test_batches_by_count_and_flush_sends_the_rest(client: DLedgerClient, fake: FakeCluster) -> None:
    with client.producer(linger_ms=60_000, max_batch_count=10) as producer:
        futures = [producer.send(b"%d" % i) for i in range(25)]
        wait_until(lambda: sum(fake["n0"].stream_batches) == 20)  # two full batches went at once
        assert not futures[24].done()  # the last 5 wait for linger or flush
        assert producer.flush(5)
    assert [f.result(0) for f in futures] == list(range(25))
    assert fake["n0"].stream_batches == [10, 10, 5]
    assert fake.log.bodies == [b"%d" % i for i in range(25)]
    assert fake["n0"].streams_opened == 1


def test_batches_by_bytes(client: DLedgerClient, fake: FakeCluster) -> None:
    with client.producer(linger_ms=60_000, max_batch_bytes=300) as producer:
        futures = [producer.send(b"x" * 100) for _ in range(7)]
        producer.flush(5)
    assert fake["n0"].stream_batches == [3, 3, 1]
    assert [f.result(0) for f in futures] == list(range(7))


def test_linger_sends_a_partial_batch_without_flush(fake: FakeCluster) -> None:
    clock = ManualClock()  # the batch lingers until the test moves time, however slowly it sends
    with DLedgerClient(fake.peers, timeout_s=10.0, clock=clock) as client:
        producer = client.producer(linger_ms=20)
        try:
            futures = [producer.send(b"a"), producer.send(b"b")]
            clock.advance(20)
            assert [f.result(5) for f in futures] == [0, 1]
            assert fake["n0"].stream_batches == [2]
        finally:
            producer.close()


def test_in_flight_batches_are_bounded(client: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].gate.clear()  # the fake holds its answers
    producer = client.producer(linger_ms=0, max_batch_count=1, max_in_flight=4)
    try:
        futures = [producer.send(b"%d" % i) for i in range(12)]
        wait_until(lambda: fake["n0"].stream_received == 4 and producer._inflight == 4)
        with producer.cond:
            assert producer._inflight == 4 and len(producer._ready) + len(producer._retry) > 0
        assert fake["n0"].stream_received == 4
        fake["n0"].gate.set()
        assert [f.result(5) for f in futures] == list(range(12))
    finally:
        producer.close()


def test_not_leader_batches_are_resent_to_the_new_leader(client: DLedgerClient, fake: FakeCluster) -> None:
    assert client.append(b"first") == 0  # the client knows n0
    fake.log.leader = "n1"  # n0 now answers NOT_LEADER naming n1
    with client.producer(linger_ms=0, max_batch_count=2) as producer:
        futures = [producer.send(b"%d" % i) for i in range(6)]
        producer.flush(5)
    assert sorted(f.result(0) for f in futures) == [1, 2, 3, 4, 5, 6]
    assert sorted(fake.log.bodies[1:]) == sorted(b"%d" % i for i in range(6))
    assert len(fake.log.bodies) == 7  # nothing appended twice
    assert fake["n1"].streams_opened >= 1


def test_a_dead_leader_is_resent_after_rediscovery(client: DLedgerClient, fake: FakeCluster) -> None:
    assert client.append(b"first") == 0
    fake["n0"].stop()
    fake.log.leader = "n2"
    with client.producer(linger_ms=0) as producer:
        future = producer.send(b"x")
        assert future.result(5) == 1
    assert fake.log.bodies == [b"first", b"x"]


def test_a_broken_stream_fails_in_flight_batches_as_indeterminate(client: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(Action("abort", status=grpc.StatusCode.UNAVAILABLE, details="Socket closed", append=True))
    with client.producer(linger_ms=0) as producer:
        future = producer.send(b"x")
        error = future.exception(5)
        assert isinstance(error, IndeterminateError)
        with pytest.raises(IndeterminateError):
            future.result(0)
        # the producer opens a new stream for what comes next
        assert producer.send(b"y").result(5) == 1
    assert fake.log.bodies == [b"x", b"y"]  # x was appended; the producer did not resend it


def test_quorum_timeout_answer_is_indeterminate_and_refusals_are_definite(
    client: DLedgerClient, fake: FakeCluster
) -> None:
    fake["n0"].script(
        Action("code", code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, append=True),
        Action("code", code=ResponseCode.UNEXPECTED_ARGUMENT),
    )
    with client.producer(linger_ms=0, max_batch_count=1, max_in_flight=1) as producer:
        first, second = producer.send(b"a"), producer.send(b"b")
        assert isinstance(first.exception(5), IndeterminateError)
        refused = second.exception(5)
        assert isinstance(refused, DLedgerError) and not isinstance(refused, IndeterminateError)
        assert refused.code is ResponseCode.UNEXPECTED_ARGUMENT


def test_pending_full_is_retried(client: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(Action("code", code=ResponseCode.LEADER_PENDING_FULL))
    with client.producer(linger_ms=0) as producer:
        assert producer.send(b"x").result(5) == 0
    assert fake.log.bodies == [b"x"]


def test_unsendable_batches_fail_definitely_at_the_delivery_timeout(fake: FakeCluster) -> None:
    fake.log.leader = None
    with DLedgerClient(fake.peers, timeout_s=0.3) as client:
        producer = client.producer(linger_ms=0)
        future = producer.send(b"x")
        error = future.exception(5)
        assert isinstance(error, DLedgerError) and not isinstance(error, IndeterminateError)
        producer.close()
    assert fake.log.bodies == []


def test_callbacks_as_future_and_closed_producer(client: DLedgerClient, fake: FakeCluster) -> None:
    seen: list[int] = []
    producer = client.producer(linger_ms=0)
    future = producer.send(b"x")
    future.add_done_callback(lambda f: seen.append(f.result()))
    real = producer.send(b"y").as_future()
    done, _ = concurrent.futures.wait([real], timeout=5)
    assert done and real.result() == 1
    assert future.result(5) == 0
    wait_until(lambda: seen == [0])
    late: list[SendFuture] = []
    future.add_done_callback(late.append)  # already done: called at once
    assert late == [future]
    producer.close()
    with pytest.raises(DLedgerError):
        producer.send(b"z")
    with pytest.raises(ValueError, match="at most"):
        client.producer().send(b"x" * (MAX_BODY_BYTES + 1))


def test_send_blocks_while_the_buffer_is_full(client: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].gate.clear()
    producer = client.producer(linger_ms=0, max_buffered_bytes=10)
    try:
        producer.send(b"x" * 8)
        with pytest.raises(DLedgerError) as info:
            producer.send(b"y" * 8, timeout_s=0.05)
        assert info.value.code is ResponseCode.LEADER_PENDING_FULL
        fake["n0"].gate.set()
        assert producer.send(b"y" * 8, timeout_s=5).result(5) == 1
    finally:
        fake["n0"].gate.set()
        producer.close()


def test_max_in_flight_defaults_to_what_the_producer_kind_allows(client: DLedgerClient) -> None:
    from dledger.client.producer import DEFAULT_IN_FLIGHT, MAX_IDEMPOTENT_IN_FLIGHT, Producer

    with Producer(client.members) as plain, Producer(client.members, idempotent=True, producer_id=7) as numbered:
        assert (plain.max_in_flight, numbered.max_in_flight) == (DEFAULT_IN_FLIGHT, MAX_IDEMPOTENT_IN_FLIGHT)
    with pytest.raises(ValueError, match="at most 5 batches in flight"):
        Producer(client.members, idempotent=True, producer_id=7, max_in_flight=6)


def test_a_body_that_is_not_bytes_is_refused_by_send_and_the_producer_goes_on(
    client: DLedgerClient, fake: FakeCluster
) -> None:
    """Before, `send("text")` was queued and the sender thread died encoding it: every
    later send and flush waited forever."""
    with client.producer(linger_ms=0) as producer:
        for bad in ("text", bytearray(b"x"), None, 5):
            with pytest.raises(TypeError, match="a body must be bytes"):
                producer.send(bad)  # type: ignore[arg-type]
        assert producer.send(b"after").result(5) == 0 and producer.flush(5)
    assert fake.log.bodies == [b"after"]


def test_a_batch_the_sender_cannot_encode_fails_alone(
    client: DLedgerClient, fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever goes wrong making one batch's request fails that batch with the cause;
    the sender thread and the batches after it carry on."""
    with client.producer(linger_ms=0) as producer:
        real = type(producer)._request
        broken = {"once": True}

        def request_once_broken(self: object, batch: object, request_id: int) -> object:
            if broken.pop("once", False):
                raise RuntimeError("injected encoding failure")
            return real(self, batch, request_id)  # type: ignore[arg-type]

        monkeypatch.setattr(type(producer), "_request", request_once_broken)
        first = producer.send(b"lost")
        with pytest.raises(DLedgerError, match="injected encoding failure") as info:
            first.result(5)
        assert not isinstance(info.value, IndeterminateError)  # never sent: nothing was appended
        assert producer.send(b"kept").result(5) == 0
        assert producer.stats.failed == 1 and producer.stats.acked == 1
    assert fake.log.bodies == [b"kept"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"linger_ms": float("nan")}, "linger_ms must be in"),
        ({"linger_ms": 10**12}, "linger_ms must be in"),
        ({"linger_ms": -1}, "linger_ms must be in"),
        ({"max_batch_count": 0}, "max_batch_count must be a whole number"),
        ({"max_batch_count": 65_537}, r"max_batch_count must be a whole number in \[1, 65,536\]"),
        ({"max_batch_bytes": (16 << 20) + 1}, "max_batch_bytes must be"),
        ({"max_batch_bytes": 1.5}, "max_batch_bytes must be"),
        ({"max_in_flight": 0}, "max_in_flight must be"),
        ({"max_buffered_bytes": 0}, "max_buffered_bytes must be"),
        ({"delivery_timeout_s": float("inf")}, "delivery_timeout_s must be a number of seconds"),
    ],
)
def test_producer_limits_out_of_range_are_refused_naming_them(
    client: DLedgerClient, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        client.producer(**options)  # type: ignore[arg-type]


def test_timeouts_that_are_no_number_of_seconds_are_refused(client: DLedgerClient) -> None:
    """inf, NaN or a value past gRPC's deadlines (which overflow past ~7e9 s: a client of
    1e10 s looked for a leader forever) are refused where they are given."""
    for bad in (float("inf"), float("nan"), 1e10, 0, -1, True, "5"):
        with pytest.raises(ValueError, match="timeout_s must be a number of seconds"):
            DLedgerClient("n0-127.0.0.1:1", timeout_s=bad)  # type: ignore[arg-type]
    with client.producer(linger_ms=0) as producer:
        for bad in (float("inf"), -1):
            with pytest.raises(ValueError, match="timeout_s must be a number of seconds"):
                producer.flush(bad)
            with pytest.raises(ValueError, match="timeout_s must be a number of seconds"):
                producer.send(b"x", timeout_s=bad)
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        client.query(b"x", timeout=float("inf"))


def test_append_many_takes_a_generator_once(client: DLedgerClient, fake: FakeCluster) -> None:
    """A generator was consumed summing its sizes and the request went out empty."""
    assert client.append_many(b"%d" % i for i in range(3)) == 0
    assert fake.log.bodies == [b"0", b"1", b"2"]


def test_a_refused_resend_of_a_batch_that_may_have_been_appended_stays_indeterminate(
    client: DLedgerClient, fake: FakeCluster
) -> None:
    """The first attempt may have been appended (here it was); the resend is refused.
    The batch failed with a definite error ("nothing was appended"), so a caller that
    sent its records again wrote them twice (helper H #2: no leader found in time for the
    resend, while the first attempt committed)."""
    fake["n0"].script(
        Action("code", code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, append=True),
        Action("code", code=ResponseCode.UNEXPECTED_ARGUMENT),
    )
    with client.producer(linger_ms=0, idempotent=True, producer_id=7) as producer:
        error = producer.send(b"a").exception(5)
    assert isinstance(error, IndeterminateError) and error.code is ResponseCode.UNEXPECTED_ARGUMENT
    assert "earlier attempt's outcome is unknown" in str(error) and "nothing was appended" not in str(error)
    assert len(fake.log.bodies) == 1


def test_append_records_whose_resend_is_refused_stays_indeterminate(client: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(
        Action("code", code=ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, append=True),
        Action("not_leader"),
        Action("code", code=ResponseCode.UNEXPECTED_ARGUMENT),
    )
    with pytest.raises(IndeterminateError) as unknown:
        client.append_records([Record(b"v")], stamp=ProducerStamp(7, 0, 0))
    assert unknown.value.code is ResponseCode.UNEXPECTED_ARGUMENT and len(fake.log.bodies) == 1


def test_the_last_index_of_a_stamped_result_is_the_end_of_its_last_run() -> None:
    """It was first_index + count - 1, another record's index when a retry's records sat
    in several runs, and 0 for an old duplicate with no runs (helper H #4)."""
    split = AppendResult(100, 5, 1, "n0", runs=((100, 2), (103, 3)))
    assert (split.first_index, split.last_index) == (100, 105)
    assert AppendResult(-1, 2, 1, "n0", duplicate=True).last_index == -1
    assert AppendResult(7, 3, 1, "n0").last_index == 9


def test_an_idempotent_producer_whose_batch_failed_for_good_stops_at_once(
    client: DLedgerClient, fake: FakeCluster
) -> None:
    """Every later sequence number follows the failed batch's gap, which the leader
    refuses for ever: the producer kept sending, and every later batch failed at its
    delivery timeout for the rest of its life (helper H #3). It now stops at once and
    says why; a new producer starts again."""
    fake["n0"].script(Action("code", code=ResponseCode.UNEXPECTED_ARGUMENT))
    producer = client.producer(linger_ms=0, idempotent=True, producer_id=7, max_batch_count=1, max_in_flight=1)
    first, second = producer.send(b"a"), producer.send(b"b")
    assert first.exception(5).code is ResponseCode.UNEXPECTED_ARGUMENT  # type: ignore[union-attr]
    stopped = second.exception(5)
    assert isinstance(stopped, DLedgerError) and not isinstance(stopped, IndeterminateError)
    assert "producer 7 (epoch 0) stopped: its batch at sequence 0 failed" in str(stopped)
    with pytest.raises(DLedgerError, match="make a new producer"):
        producer.send(b"c")
    producer.close()
    assert fake.log.bodies == []
    with client.producer(linger_ms=0, idempotent=True, producer_id=7, epoch=1) as again:
        again.send(b"d").result(5)
    assert len(fake.log.bodies) == 1


def test_an_idempotent_producer_refuses_a_body_its_stamp_would_make_too_large(client: DLedgerClient) -> None:
    """The leader adds a 36-byte stamp to a batch's first record; a body that fit the
    plain limit but not with the stamp failed the batch on the leader (helper H #3)."""
    with (
        client.producer(idempotent=True, producer_id=7) as producer,
        pytest.raises(ValueError, match=f"at most {MAX_BODY_BYTES - STAMP_SIZE}"),
    ):
        producer.send(b"x" * (MAX_BODY_BYTES - STAMP_SIZE))
