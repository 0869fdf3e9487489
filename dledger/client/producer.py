"""Producer: batches bodies on the client side and pipelines them over AppendStream
(as Kafka's producer does: `linger_ms`, `max_batch_bytes`, `max_in_flight`).

`send(body)` returns at once with a `SendFuture` that resolves to the body's index once
its batch committed. A sender thread seals a batch when it is full or `linger_ms` old
and writes it to the leader's stream while fewer than `max_in_flight` batches await an
answer; one reader thread per stream completes them in order.

Retries follow `dledger.client.policy`: a batch answered NOT_LEADER (or refused before
appending: LEADER_PENDING_FULL...) or never sent (connection refused) is sent again, to
the hinted leader; a batch whose outcome is unknown (the stream broke after it was sent,
WAIT_QUORUM_ACK_TIMEOUT, TERM_CHANGED) fails with `IndeterminateError` and is never
resent. A resent batch can land after batches sent later, so with `max_in_flight > 1`
the log order of batches is the send order only when no batch is resent (the order of
bodies inside a batch always is).

An idempotent producer (`idempotent=True`, Kafka's `enable.idempotence`) sends records
(a body is the value of a record with no key) numbered under its producer id and epoch
(`ProducerStamp`): the leader appends only what it does not hold yet, so a batch whose
outcome is unknown is sent again instead of failing, and its bodies land once, in send
order. At most 5 batches are in flight (the requests a leader remembers per producer).
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
from collections import deque
from typing import Any

from dledger.client.members import Members, optional_timeout
from dledger.client.policy import (
    Decision,
    IndeterminateError,
    code_decision,
    rpc_code,
    rpc_decision,
    same_error,
    unknown_after_resend,
)
from dledger.client.producer_stream import ProducerStream
from dledger.client.types import Batch, ProducerStamp, ProducerStats, SendFuture, Target, finish_batch
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import MAX_APPEND_BYTES, MAX_BODIES_PER_APPEND
from dledger.entry import HEADER_SIZE, MAGIC_RECORD, MAX_ENTRY_SIZE
from dledger.record import STAMP_SIZE, encode_record
from dledger.transport.convert import pb

log = logging.getLogger(__name__)

MAX_BODY_BYTES = MAX_ENTRY_SIZE - HEADER_SIZE
"""Largest body of one entry (a bigger one would fail its whole batch on the server)."""
MAX_LINGER_MS = 3_600_000
"""The longest a batch may wait for more bodies (an hour, as `dledger bench --linger-ms`)."""

MAX_IDEMPOTENT_IN_FLIGHT = 5
DEFAULT_IN_FLIGHT = 8
"""A plain producer's `max_in_flight` when none is given."""


class Producer:
    """A batching, pipelining appender over AppendStream (use `DLedgerClient.producer`).

    `stats` counts the bodies by outcome (cheaper than a callback per body).

    Args:
        members: the group to write to (peers, channels, the leader hint).
        linger_ms: how long a batch waits for more bodies before it is sent.
        max_batch_bytes: a batch is sent once its bodies reach this size.
        max_batch_count: ... or this many bodies.
        max_in_flight: batches sent and not yet answered (all streams together);
            default 8, or MAX_IDEMPOTENT_IN_FLIGHT (5) for an idempotent producer.
        max_buffered_bytes: `send` blocks while this much is waiting or in flight.
        delivery_timeout_s: a batch not sent within this time fails (default: the
            members' `timeout_s`); once sent, the server's own deadline applies.
        idempotent: number the records (see above); `max_in_flight` is then at most 5.
        producer_id: the idempotent producer's id (`DLedgerClient.producer` registers
            for one with the leader; `derive_producer_id` makes a stable one; default
            here: a random one below 2^62); `epoch` its epoch (default 0).
    """

    def __init__(
        self,
        members: Members,
        *,
        linger_ms: int = 5,
        max_batch_bytes: int = 1024 * 1024,
        max_batch_count: int = 16384,
        max_in_flight: int | None = None,
        max_buffered_bytes: int = 64 * 1024 * 1024,
        delivery_timeout_s: float | None = None,
        idempotent: bool = False,
        producer_id: int | None = None,
        epoch: int = 0,
    ) -> None:
        if max_in_flight is None:
            max_in_flight = MAX_IDEMPOTENT_IN_FLIGHT if idempotent else DEFAULT_IN_FLIGHT
        if idempotent and max_in_flight > MAX_IDEMPOTENT_IN_FLIGHT:
            raise ValueError(f"an idempotent producer keeps at most {MAX_IDEMPOTENT_IN_FLIGHT} batches in flight")
        self.stamp = (
            ProducerStamp(secrets.randbits(62) if producer_id is None else producer_id, epoch, 0)
            if idempotent
            else None
        )
        """The idempotent producer's id and epoch (None: not idempotent)."""
        self._next_seq = 0
        _check_limits(linger_ms, max_batch_bytes, max_batch_count, max_in_flight, max_buffered_bytes)
        self.members = members
        self.clock = members.clock
        self.linger_ms = linger_ms
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_count = max_batch_count
        self.max_in_flight = max_in_flight
        self.max_buffered_bytes = max_buffered_bytes
        self.delivery_timeout_ms = int(
            (optional_timeout(delivery_timeout_s, "delivery_timeout_s") or members.timeout_s) * 1000
        )
        self.cond = threading.Condition(threading.Lock())
        self.stats = ProducerStats()
        self._open: Batch | None = None
        self._ready: deque[Batch] = deque()
        self._retry: deque[Batch] = deque()
        self._retry_after_ms = 0
        self._retry_wait_ms = 0
        self._inflight = 0
        self._buffered = 0
        self._unfinished = 0
        self._ids = itertools.count(1)
        self._stream: ProducerStream | None = None
        self._streams: set[ProducerStream] = set()
        self._target: Target | None = members.leader
        self._closed = False
        self._stopped: DLedgerError | None = None  # an idempotent producer's batch failed: see _stop_numbering
        self._sender = threading.Thread(target=self._send_loop, name="dledger-producer", daemon=True)
        self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the caller's side

    def send(self, body: bytes, timeout_s: float | None = None) -> SendFuture:
        """Queue `body`; returns its future index (see `SendFuture`).

        Blocks while `max_buffered_bytes` are waiting or in flight (at most `timeout_s`).

        Raises:
            DLedgerError: the producer is closed, or LEADER_PENDING_FULL when the buffer
                stayed full for `timeout_s`.
            TypeError: `body` is not bytes (checked here, not by the sender thread).
            ValueError: `body` is too large, or `timeout_s` is not a timeout.
        """
        if not isinstance(body, bytes):  # as `DLedgerClient.append` and the embedded store
            raise TypeError(f"a body must be bytes, not {type(body).__name__}")
        timeout_s = optional_timeout(timeout_s)
        if self.stamp is not None:
            body = encode_record(body)
        size = len(body)
        # the leader stamps the first record of each numbered request (STAMP_SIZE bytes more)
        limit = MAX_BODY_BYTES if self.stamp is None else MAX_BODY_BYTES - STAMP_SIZE
        if size > limit:
            raise ValueError(f"a body of {size} bytes; at most {limit}")
        with self.cond:
            if self._closed:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "the producer is closed")
            if self._stopped is not None:
                raise same_error(self._stopped)  # each caller its own exception object
            if (
                self._buffered
                and self._buffered + size > self.max_buffered_bytes
                and not self._wait_room(size, timeout_s)
            ):
                raise DLedgerError(ResponseCode.LEADER_PENDING_FULL, "the producer's buffer stayed full")
            batch = self._open
            if batch is None:
                now = self.clock.now_ms()
                batch = self._open = Batch(now, now + self.delivery_timeout_ms)
                self._unfinished += 1
                self.cond.notify_all()
            offset = len(batch.bodies)
            batch.bodies.append(body)
            batch.size += size
            self._buffered += size
            if batch.size >= self.max_batch_bytes or offset + 1 >= self.max_batch_count:
                self._open = None
                self._make_ready(batch)
        return SendFuture(batch, offset)

    def _make_ready(self, batch: Batch) -> None:
        """Under the lock: queue a sealed batch (numbered when idempotent)."""
        if self.stamp is not None:
            batch.first_seq = self._next_seq
            self._next_seq += len(batch.bodies)
        self._ready.append(batch)
        self.cond.notify_all()

    def _wait_room(self, size: int, timeout_s: float | None) -> bool:
        return self.cond.wait_for(
            lambda: self._buffered + size <= self.max_buffered_bytes or not self._buffered or self._closed, timeout_s
        )

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send what is buffered now and wait until every batch so far is answered;
        False on timeout."""
        timeout_s = optional_timeout(timeout_s)
        with self.cond:
            self._seal()
            return self.cond.wait_for(lambda: self._unfinished == 0, timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush (at most `timeout_s`), then stop; batches still unsent fail with
        DLedgerError, batches in flight with IndeterminateError. Idempotent."""
        flushed = self.flush(timeout_s)
        with self.cond:
            self._closed = True
            self.cond.notify_all()
            streams = list(self._streams)
        self._sender.join()
        for stream in streams:
            if not flushed:
                stream.call.cancel()
            stream.reader.join(timeout=max(1.0, self.members.timeout_s))

    def _seal(self) -> None:
        if self._open is not None and self._open.bodies:
            batch, self._open = self._open, None
            self._make_ready(batch)

    # -- the sender thread

    def _next_batch(self) -> Batch | None:
        """Under the lock: wait for a batch that may be sent now (None: closed)."""
        while True:
            now = self.clock.now_ms()
            if self._closed:
                return None
            wait_ms: int | None = None
            if self._inflight < self.max_in_flight:
                if self._retry and now >= self._retry_after_ms:
                    return self._retry.popleft()
                if self._retry:
                    wait_ms = self._retry_after_ms - now
                elif self._ready:
                    return self._ready.popleft()
                elif self._open is not None:
                    age = now - self._open.created_ms
                    if age >= self.linger_ms:
                        self._seal()
                        continue
                    wait_ms = self.linger_ms - age
            self.cond.wait(None if wait_ms is None else max(wait_ms, 1) / 1000)

    def _send_loop(self) -> None:
        while True:
            with self.cond:
                batch = self._next_batch()
                if batch is None:
                    self._abandon()
                    return
                if self.clock.now_ms() > batch.deadline_ms:
                    last = batch.last_refusal
                    code = last.code if last is not None else ResponseCode.TIMEOUT
                    if batch.maybe_appended:
                        text = f"not answered in time ({last.message if last else 'no stream'}); the outcome is unknown"
                        self._done(batch, error=IndeterminateError(code, text))
                    else:
                        text = f"not sent in time ({last.message if last else 'no stream'}); nothing was appended"
                        self._done(batch, error=DLedgerError(code, text))
                    continue
                self._inflight += 1
                stream = self._stream if self._stream is not None and self._stream.usable else None
            if stream is None:
                try:
                    stream = self._open_stream(batch.deadline_ms)
                except DLedgerError as exc:
                    with self.cond:
                        self._inflight -= 1
                        self._done(batch, error=exc)
                    continue
            with self.cond:
                if not stream.usable:  # it broke before this batch went out: nothing was sent
                    self._inflight -= 1
                    self._again(batch, DLedgerError(ResponseCode.NETWORK_ERROR, "the stream broke"), True, front=True)
                    continue
                request_id = next(self._ids)
                try:
                    request = self._request(batch, request_id)
                except Exception as exc:  # no batch takes the sender thread, and every caller, down with it
                    log.exception("a batch of %d bodies could not be made into a request", len(batch.bodies))
                    self._inflight -= 1
                    error = DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"the batch could not be sent: {exc!r}")
                    self._done(batch, error=error)
                    continue
                stream.inflight.append((request_id, batch))
                stream.requests.put(request)

    def _request(self, batch: Batch, request_id: int) -> Any:
        if self.stamp is None:
            return pb.AppendRequest(group=self.members.group, bodies=batch.bodies, request_id=request_id)
        stamp = pb.ProducerStamp(
            producer_id=self.stamp.producer_id, epoch=self.stamp.epoch, first_sequence=batch.first_seq
        )
        return pb.AppendRequest(
            group=self.members.group, bodies=batch.bodies, request_id=request_id, magic=MAGIC_RECORD, stamp=stamp
        )

    def _open_stream(self, deadline_ms: int) -> ProducerStream:
        target = self._target or self.members.discover(deadline_ms)
        stream = ProducerStream(self, target)
        with self.cond:
            self._streams.add(stream)
            old, self._stream, self._target = self._stream, stream, target
            if old is not None:
                old.usable = False
                if not old.inflight:
                    old.end()
        stream.start()
        return stream

    def _abandon(self) -> None:
        """Under the lock, on close: fail whatever was never sent; end the stream."""
        error = DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "the producer was closed before sending")
        for batch in [*self._retry, *self._ready, *([self._open] if self._open else [])]:
            self._done(batch, error=error)
        self._retry.clear()
        self._ready.clear()
        self._open = None
        if self._stream is not None:
            self._stream.usable = False
            if not self._stream.inflight:
                self._stream.end()

    # -- answers (reader threads, under the lock)

    def _done(self, batch: Batch, first_index: int = -1, error: BaseException | None = None) -> None:
        if batch.maybe_appended and isinstance(error, DLedgerError) and not isinstance(error, IndeterminateError):
            error = unknown_after_resend(error)  # a refused resend says nothing of the attempt before it
        self._buffered -= batch.size
        self._unfinished -= 1
        stats = self.stats
        count = len(batch.bodies)
        if error is None:
            stats.acked += count
            stats.batches += 1
        elif isinstance(error, IndeterminateError):
            stats.unknown += count
        else:
            stats.failed += count
        finish_batch(batch, first_index, error)
        self.cond.notify_all()
        if self.stamp is not None and isinstance(error, DLedgerError) and not isinstance(error, IndeterminateError):
            self._stop_numbering(batch, error)

    def _stop_numbering(self, failed: Batch, error: DLedgerError) -> None:
        """Under the lock: a numbered batch failed for good (nothing of it appended), so
        every later sequence number follows a gap the leader refuses for ever
        (OUT_OF_ORDER_SEQUENCE). Before, the producer kept sending and every later batch
        failed at its delivery timeout, for the producer's life. Now it stops at once:
        the batches not yet answered fail with one error naming the first failure, and
        `send` raises it. A new producer (a new id, or a higher epoch) starts again."""
        if self._stopped is not None:
            return
        assert self.stamp is not None
        self._stopped = DLedgerError(
            error.code,
            f"the idempotent producer {self.stamp.producer_id} (epoch {self.stamp.epoch}) stopped: its batch at "
            f"sequence {failed.first_seq} failed ({error.message}), and later records would follow a gap in its "
            "sequence numbers, so none was appended: make a new producer (a new id or a higher epoch)",
        )
        earlier = deque(b for b in self._retry if b.first_seq < failed.first_seq)  # still resent
        later = [b for b in self._retry if b.first_seq > failed.first_seq]
        for batch in [*later, *self._ready, *([self._open] if self._open else [])]:
            self._done(batch, error=same_error(self._stopped))
        self._retry = earlier
        self._ready.clear()
        self._open = None

    def _again(self, batch: Batch, refusal: DLedgerError, backoff: bool, front: bool = False) -> None:
        """Send `batch` again later (it provably appended nothing): after the batches
        already waiting to be resent, or before them with `front`."""
        batch.last_refusal = refusal
        if front:
            self._retry.appendleft(batch)
        else:
            self._retry.append(batch)
        if backoff:
            self._retry_wait_ms = min(200, max(5, self._retry_wait_ms * 2))
            self._retry_after_ms = self.clock.now_ms() + self._retry_wait_ms
        self.cond.notify_all()

    def on_answer(self, stream: ProducerStream, batch: Batch, answer: Any) -> None:
        """One AppendResponse for `batch` arrived on `stream`."""
        self._inflight -= 1
        decision = code_decision(answer.code)
        if decision is Decision.SUCCESS:
            self._retry_wait_ms = 0
            if self.stamp is not None:
                batch.runs = tuple((run.first_index, run.count) for run in answer.runs)
            self._done(batch, answer.first_index)
            return
        text = f"AppendStream to {stream.target.node_id}: {answer.message or ResponseCode.of(answer.code).name}"
        if self.stamp is not None and decision is Decision.INDETERMINATE:
            # safe to send again: the leader does not append what it holds twice
            batch.maybe_appended = True
            self._again(batch, IndeterminateError(answer.code, text), backoff=True)
            return
        if self.stamp is not None and answer.code == ResponseCode.OUT_OF_ORDER_SEQUENCE:
            if self._stopped is not None:  # an earlier batch failed for good: this one never follows it
                self._done(batch, error=same_error(self._stopped))
                return
            # an earlier batch is being sent again: this one follows it (until its deadline)
            self._again(batch, DLedgerError(answer.code, text), backoff=True)
            return
        if decision is Decision.FAIL:
            self._done(batch, error=DLedgerError(answer.code, text))
        elif decision is Decision.INDETERMINATE:
            self._done(batch, error=IndeterminateError(answer.code, text))
        else:
            stream.usable = False
            if decision is Decision.REDIRECT:
                self._target = self.members.redirect(answer, stream.target)
            refusal = DLedgerError(answer.code, text)
            self._again(batch, refusal, backoff=decision is Decision.RETRY or self._target is None)

    def forget_stream(self, stream: ProducerStream) -> None:
        """Under the lock: `stream` ended and answers nothing more."""
        self._streams.discard(stream)

    def on_broken(self, stream: ProducerStream, status: str, details: str) -> None:
        """`stream` failed or ended: its unanswered batches are sent again when they
        provably appended nothing, and fail as indeterminate otherwise."""
        decision = rpc_decision(status, details)
        again = decision in (Decision.REDIRECT, Decision.RETRY)
        text = f"AppendStream to {stream.target.node_id}: {status} {details}"
        while stream.inflight:
            _, batch = stream.inflight.popleft()
            self._inflight -= 1
            if self.stamp is not None and not again:  # idempotent: sent again, never appended twice
                batch.maybe_appended = True
                self._again(batch, IndeterminateError(rpc_code(status), text), backoff=True)
            elif again:
                self._again(batch, DLedgerError(ResponseCode.NETWORK_ERROR, text), backoff=True)
            else:
                self._done(batch, error=IndeterminateError(rpc_code(status), text))
        if decision is Decision.REDIRECT and self._target == stream.target:
            self._target = None
            self.members.leader = None
        self.cond.notify_all()


def _check_limits(linger_ms: float, batch_bytes: int, batch_count: int, in_flight: int, buffered: int) -> None:
    """A producer's limits: each within what a member takes and a thread can wait.

    Raises:
        ValueError: the first limit out of its range, named.
    """
    whole = {
        "max_batch_bytes": (batch_bytes, MAX_APPEND_BYTES),
        "max_batch_count": (batch_count, MAX_BODIES_PER_APPEND),
        "max_in_flight": (in_flight, 1 << 20),
        "max_buffered_bytes": (buffered, 1 << 62),
    }
    for name, (value, high) in whole.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
            raise ValueError(f"{name} must be a whole number in [1, {high:,}], not {value!r}")
    if isinstance(linger_ms, bool) or not isinstance(linger_ms, int | float) or not 0 <= linger_ms <= MAX_LINGER_MS:
        raise ValueError(f"linger_ms must be in [0, {MAX_LINGER_MS:,}], not {linger_ms!r}")
