"""Concurrent calls that share requests (flat combining), the client's multiplexing.

Many threads of one process each calling `append(body)` pay one gRPC call each, and a
Python gRPC call costs far more than the bytes it carries. A `Combiner` lets such calls
share requests without adding a thread or a wait:

- A call that finds fewer than `max_in_flight` requests in flight (on its lane) sends at
  once, in its own thread: an idle client adds no latency and no thread hand-off.
- A call that finds `max_in_flight` requests in flight (on its lane) queues. When one of
  them is answered, the thread that sent it takes everything queued that fits into one
  request (oldest first, up to `max_items` items and `max_size` bytes) and hands that
  batch to its oldest caller, which sends it. The slot passes from one sender to the
  next, so queued calls never wait for a slot someone released without noticing them.
- The sender gets one result per item from `send` and delivers each caller its own:
  a value, or an exception raised in the caller's thread.

Lanes (`key`) are independent: reads of distant index ranges do not queue behind each
other, only calls that can share a request do.

A queued call that was not taken into a request before `wait_s` passes leaves the queue
and raises `DLedgerError(TIMEOUT)`: it was never sent, so nothing happened. Once taken,
a call waits for its request's outcome (the request has its own deadline). When the
sending thread is interrupted (Ctrl-C), the other callers of its request get an
`IndeterminateError`: the request may have been sent.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from dledger.client.policy import IndeterminateError
from dledger.codes import DLedgerError, ResponseCode

T = TypeVar("T")
R = TypeVar("R")

Send = Callable[[list[T]], Sequence["R | BaseException"]]
"""Sends the items as one request; returns one result (or exception) per item, in order."""


class _Call(Generic[T, R]):
    """One caller: its item, and what it gets back (a batch to send, or its result)."""

    __slots__ = ("batch", "done", "error", "item", "result", "size", "taken", "wake")

    def __init__(self, item: T, size: int) -> None:
        self.item = item
        self.size = size
        self.wake = threading.Event()
        self.batch: list[_Call[T, R]] | None = None
        self.taken = False
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class _Lane(Generic[T, R]):
    """The queue and the in-flight count of one key."""

    __slots__ = ("in_flight", "queue")

    def __init__(self) -> None:
        self.queue: deque[_Call[T, R]] = deque()
        self.in_flight = 0


class Combiner(Generic[T, R]):
    """Runs `send` for batches of concurrent calls (see the module docstring).

    Args:
        send: sends a batch as one request; returns one result or exception per item.
        max_in_flight: requests in flight per lane before calls queue (>= 1).
        max_items: items per request (a single bigger item is sent alone).
        max_size: summed sizes per request (likewise).
    """

    def __init__(
        self,
        send: Send[T, R],
        *,
        max_in_flight: int = 4,
        max_items: int = 4096,
        max_size: int = 4 << 20,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._send = send
        self._max_in_flight = max_in_flight
        self._max_items = max_items
        self._max_size = max_size
        self._lock = threading.Lock()
        self._lanes: dict[Hashable, _Lane[T, R]] = {}
        self.requests = 0
        """Requests sent so far (a call that shared one is not counted again)."""

    def queued(self, key: Hashable = None) -> int:
        """Calls of lane `key` waiting to be sent."""
        with self._lock:
            lane = self._lanes.get(key)
            return len(lane.queue) if lane is not None else 0

    def call(self, item: T, *, size: int = 1, key: Hashable = None, wait_s: float | None = None) -> R:
        """Send `item`, alone or with the items of concurrent calls; return its result.

        Args:
            item: what this call contributes to a request.
            size: its size, counted against `max_size`.
            key: the lane; only calls of the same lane share requests.
            wait_s: how long the call may wait in the queue before it is sent.

        Raises:
            DLedgerError: TIMEOUT when it waited `wait_s` without being sent; otherwise
                whatever `send` gave for this item.
        """
        me: _Call[T, R] = _Call(item, size)
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane()
            lane.queue.append(me)
            if lane.in_flight < self._max_in_flight:
                lane.in_flight += 1
                me.batch = self._take(lane)
        if me.batch is None and not self._wait(me, lane, wait_s):
            raise DLedgerError(ResponseCode.TIMEOUT, "waited too long for a request to join (nothing was sent)")
        if me.batch is not None:
            self._run(me.batch, lane, key)
        if me.error is not None:
            raise me.error
        return me.result  # type: ignore[return-value]

    def _wait(self, me: _Call[T, R], lane: _Lane[T, R], wait_s: float | None) -> bool:
        """Wait for a batch to send or a result; False when `wait_s` passed first and
        the call left the queue unsent."""
        if me.wake.wait(wait_s):
            return True
        with self._lock:
            if not me.taken:
                lane.queue.remove(me)
                return False
        me.wake.wait()
        return True

    def _take(self, lane: _Lane[T, R]) -> list[_Call[T, R]]:
        """Remove and return the calls of the next request: the oldest, then every
        other queued call that fits (lock held, queue not empty)."""
        first = lane.queue.popleft()
        first.taken = True
        batch, size = [first], first.size
        if not lane.queue:
            return batch
        kept: deque[_Call[T, R]] = deque()
        while lane.queue:
            call = lane.queue.popleft()
            if len(batch) < self._max_items and size + call.size <= self._max_size:
                call.taken = True
                batch.append(call)
                size += call.size
            else:
                kept.append(call)
        lane.queue = kept
        return batch

    def _run(self, batch: list[_Call[T, R]], lane: _Lane[T, R], key: Hashable) -> None:
        """Send `batch`, deliver every result, and pass the slot on."""
        try:
            results = self._send([call.item for call in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"send returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # every caller must hear of it
            results = [exc] * len(batch)
        except BaseException:  # Ctrl-C in the sending thread: the others cannot know the outcome
            self._deliver(batch, [_interrupted() for _ in batch], lane, key)
            raise
        self._deliver(batch, results, lane, key)

    def _deliver(
        self, batch: list[_Call[T, R]], results: Sequence[R | BaseException], lane: _Lane[T, R], key: Hashable
    ) -> None:
        """Pass the slot on (to the oldest queued call, with its batch) and wake every
        caller of `batch` but the sender with its result."""
        with self._lock:
            self.requests += 1
            if lane.queue:
                head = lane.queue[0]
                head.batch = self._take(lane)
                head.wake.set()
            else:
                lane.in_flight -= 1
                if lane.in_flight == 0 and self._lanes.get(key) is lane:
                    del self._lanes[key]
            for call, result in zip(batch, results, strict=True):
                if isinstance(result, BaseException):
                    call.error = result
                else:
                    call.result = result
                call.done = True
        for call in batch[1:]:
            call.wake.set()


def _interrupted() -> IndeterminateError:
    """What the other callers of a request get when its sender was interrupted."""
    return IndeterminateError(ResponseCode.UNKNOWN, "the thread sending this shared request was interrupted")
