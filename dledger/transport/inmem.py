"""A deterministic, seeded in-memory network for single-threaded cluster simulation.

Messages are events on a time-ordered queue; `step()` delivers every event due at the
clock's current time (ManualClock in tests). Faults: partitions, isolation, random drop,
delay, duplication and reordering, plus a custom filter, all from one seeded Random.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from dledger.clock import Clock
from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.messages import RequestOrResponse
from dledger.transport.base import RequestHandler

LinkFilter = Callable[[str, str, RequestOrResponse], bool]
"""(source, target, message) -> True to drop the message."""


@dataclass
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    timed_out: int = 0


class InMemoryNetwork:
    """The network all in-memory transports share.

    Args:
        clock: time source; events are delivered by `step()` once due.
        seed: seeds every random fault decision.
        min_delay_ms / max_delay_ms: one-way latency range.
        rpc_timeout_ms: a request without an answer fails after this long.
    """

    def __init__(
        self, clock: Clock, seed: int = 0, min_delay_ms: int = 1, max_delay_ms: int = 1, rpc_timeout_ms: int = 3000
    ) -> None:
        self.clock = clock
        self.rng = random.Random(seed)
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self.rpc_timeout_ms = rpc_timeout_ms
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        self.reorder = False  # False: FIFO per direction of each link
        self.filter: LinkFilter | None = None
        self.stats = NetworkStats()
        self._handlers: dict[str, RequestHandler] = {}
        self._blocked: set[tuple[str, str]] = set()
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._link_last_ms: dict[tuple[str, str], int] = {}

    # -- membership

    def register(self, node_id: str, handler: RequestHandler) -> None:
        """Serve `node_id`'s requests with `handler` (a node starting)."""
        self._handlers[node_id] = handler

    def unregister(self, node_id: str) -> None:
        """Stop serving `node_id` (a node crashing): requests to it fail."""
        self._handlers.pop(node_id, None)

    def transport(self, node_id: str) -> InMemoryTransport:
        """The Transport `node_id` sends with."""
        return InMemoryTransport(self, node_id)

    # -- faults

    def block(self, a: str, b: str, both_ways: bool = True) -> None:
        """Drop every message from a to b (and b to a)."""
        self._blocked.add((a, b))
        if both_ways:
            self._blocked.add((b, a))

    def partition(self, *groups: Iterable[str]) -> None:
        """Split the network: members of different groups cannot talk."""
        sets = [set(g) for g in groups]
        for i, g1 in enumerate(sets):
            for g2 in sets[i + 1 :]:
                for a in g1:
                    for b in g2:
                        self.block(a, b)

    def isolate(self, node_id: str, others: Iterable[str] | None = None) -> None:
        """Cut `node_id` off from everyone (the registered members, or `others`)."""
        for other in others if others is not None else list(self._handlers):
            if other != node_id:
                self.block(node_id, other)

    def heal(self) -> None:
        """Remove every partition and block."""
        self._blocked.clear()

    def can_talk(self, a: str, b: str) -> bool:
        return (a, b) not in self._blocked

    # -- events

    def _schedule(self, at_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at_ms, self._seq, action))

    def _delivery_time(self, src: str, dst: str) -> int:
        now = self.clock.now_ms()
        at = now + self.rng.randint(self.min_delay_ms, self.max_delay_ms)
        if not self.reorder:
            at = max(at, self._link_last_ms.get((src, dst), now))
            self._link_last_ms[(src, dst)] = at
        return at

    def _lost(self, src: str, dst: str, msg: RequestOrResponse) -> bool:
        if not self.can_talk(src, dst):
            return True
        if self.drop_rate and self.rng.random() < self.drop_rate:
            return True
        return self.filter is not None and self.filter(src, dst, msg)

    def send(self, src: str, dst: str, request: RequestOrResponse) -> Future[RequestOrResponse]:
        """Send `request` from `src` to `dst` (see Transport.send)."""
        future: Future[RequestOrResponse] = Future()
        self.stats.sent += 1

        def timeout() -> None:
            if not future.done():
                self.stats.timed_out += 1
                future.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, f"{src}->{dst}: no response"))

        self._schedule(self.clock.now_ms() + self.rpc_timeout_ms, timeout)
        if self._lost(src, dst, request):
            self.stats.dropped += 1
            return future
        copies = 2 if self.duplicate_rate and self.rng.random() < self.duplicate_rate else 1
        self.stats.duplicated += copies - 1
        for _ in range(copies):
            self._schedule(self._delivery_time(src, dst), lambda: self._deliver(src, dst, request, future))
        return future

    def _deliver(self, src: str, dst: str, request: RequestOrResponse, future: Future[RequestOrResponse]) -> None:
        handler = self._handlers.get(dst)
        if not self.can_talk(src, dst):
            self.stats.dropped += 1
            return
        if handler is None:
            # nobody listens (a crashed member): the connection is refused at once
            self.stats.dropped += 1
            if not future.done():
                future.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, f"{src}->{dst}: connection refused"))
            return
        self.stats.delivered += 1
        answer = handler(request)

        def respond(done: Future[RequestOrResponse]) -> None:
            if done.exception() is not None or self._lost(dst, src, done.result()):
                self.stats.dropped += 1
                return
            response = done.result()
            self._schedule(self._delivery_time(dst, src), lambda: self._complete(src, dst, future, response))

        answer.add_done_callback(respond)

    def _complete(self, src: str, dst: str, future: Future[RequestOrResponse], response: RequestOrResponse) -> None:
        if future.done() or src not in self._handlers or not self.can_talk(dst, src):
            self.stats.dropped += 1
            return
        self.stats.delivered += 1
        future.set_result(response)

    def step(self) -> int:
        """Deliver every event due now (including ones that become due while
        delivering); returns how many ran."""
        now = self.clock.now_ms()
        ran = 0
        while self._events and self._events[0][0] <= now:
            _, _, action = heapq.heappop(self._events)
            action()
            ran += 1
        return ran

    def next_event_ms(self) -> int | None:
        """When the next event is due (None when idle)."""
        return self._events[0][0] if self._events else None


class InMemoryTransport:
    """One member's view of an InMemoryNetwork (implements Transport)."""

    def __init__(self, network: InMemoryNetwork, node_id: str) -> None:
        self.network = network
        self.node_id = node_id

    def send(self, target_id: str, request: RequestOrResponse) -> Future[RequestOrResponse]:
        return self.network.send(self.node_id, target_id, request)
