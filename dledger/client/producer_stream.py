"""One AppendStream of an idempotent or plain `Producer` (dledger.client.producer)."""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any, Protocol

import grpc  # type: ignore[import-untyped]

from dledger.client.interrupts import DeferredCtrlC
from dledger.client.members import Members
from dledger.client.policy import status_details, status_name
from dledger.client.types import Batch, Target


class StreamOwner(Protocol):
    """What a stream needs of its producer (`dledger.client.producer.Producer`)."""

    cond: threading.Condition
    members: Members

    def on_answer(self, stream: ProducerStream, batch: Batch, answer: Any) -> None: ...

    def on_broken(self, stream: ProducerStream, status: str, details: str) -> None: ...

    def forget_stream(self, stream: ProducerStream) -> None: ...


class ProducerStream:
    """One AppendStream to one member: requests go through a queue, a reader thread
    matches the in-order answers with the in-flight batches."""

    def __init__(self, producer: StreamOwner, target: Target) -> None:
        self.producer = producer
        self.target = target
        self.requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.inflight: deque[tuple[int, Batch]] = deque()
        self.usable = True
        self.ended = False
        with DeferredCtrlC():  # starting a call is not to be cut (see dledger.client.interrupts)
            self.call = producer.members.stubs(target.address).AppendStream(self._requests())
        self.reader = threading.Thread(target=self._read, name=f"dledger-producer-{target.node_id}", daemon=True)

    def start(self) -> None:
        """Start reading answers (after the producer registered the stream)."""
        self.reader.start()

    def _requests(self) -> Iterator[Any]:
        return iter(self.requests.get, None)

    def end(self) -> None:
        """Half-close: no more requests (once, under the producer lock)."""
        if not self.ended:
            self.ended = True
            self.requests.put(None)

    def _read(self) -> None:
        producer = self.producer
        try:
            for answer in self.call:
                with producer.cond:
                    if not self.inflight:
                        break
                    request_id, batch = self.inflight.popleft()
                    if answer.request_id != request_id:
                        self.inflight.appendleft((request_id, batch))
                        raise _Mismatch(f"answer {answer.request_id} for request {request_id}")
                    producer.on_answer(self, batch, answer)
                    if not self.usable and not self.inflight:
                        self.end()
            status, details = "UNAVAILABLE", f"{self.target.node_id} ended the stream"
        except grpc.RpcError as exc:
            status, details = status_name(exc), status_details(exc)
        except _Mismatch as exc:
            status, details = "INTERNAL", str(exc)
            self.call.cancel()
        with producer.cond:
            self.usable = False
            self.end()
            producer.on_broken(self, status, details)
            producer.forget_stream(self)


class _Mismatch(Exception):
    """An answer that does not belong to the oldest in-flight request."""
