"""A write task's requests, shared by the at-least-once writes
(`dledger.spark.live.append_all`) and the exactly-once ones
(`dledger.spark.exactly_once.send_numbered`): the bodies cut in order into size-bounded
requests, sent one at a time from a thread of the task's own while the next request is
assembled (and Spark's next Arrow batch read). After a failure, of a request or of the
task's rows, nothing more is sent.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator

log = logging.getLogger(__name__)


def requests_of(chunks: Iterable[list[bytes]], batch_entries: int, batch_bytes: int) -> Iterator[list[bytes]]:
    """The bodies of `chunks`, in order, in requests of at most `batch_entries` bodies and
    `batch_bytes` bytes (at least one body each: a larger body goes alone). The
    boundaries depend only on the bodies, so a retried task cuts the same requests; a
    full request is yielded before the next chunk is read."""
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        k, n = 0, len(chunk)
        while k < n:
            take = chunk[k : k + batch_entries - len(pending)]
            sizes = list(itertools.accumulate(map(len, take)))  # cumulative
            fit = bisect.bisect_right(sizes, batch_bytes - size) or (0 if pending else 1)
            if fit:
                pending.extend(take[:fit])
                size += sizes[fit - 1]
                k += fit
            if k < n or len(pending) >= batch_entries:  # full: by count or by bytes
                yield pending
                pending, size = [], 0
    if pending:
        yield pending


class OrderedSender:
    """Calls `send(request)` for each queued request, in order, from a thread of its own;
    at most one request waits behind the one in flight. After the first failure, or
    `stop()`, queued requests are dropped, not sent.

    Args:
        send: sends one request (raises to fail the write).
        name: the thread's name.
    """

    def __init__(self, send: Callable[[list[bytes]], None], name: str) -> None:
        self.send = send
        self.requests: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.stopped = False  # the write failed: queued requests are dropped, not sent
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (request := self.requests.get()) is not None:
            if self.error is not None or self.stopped:
                continue  # drain: the writer learns of the error at its next put
            try:
                self.send(request)
            except BaseException as exc:
                self.error = exc

    def put(self, request: list[bytes]) -> None:
        """Queue a request (waits while one is queued already); raises an earlier failure."""
        if self.error is not None:
            raise self.error
        self.requests.put(request)

    def stop(self) -> None:
        """Send nothing more: the queued request is dropped, the one in flight completes
        (its failure is only logged: the caller's error is the one to report)."""
        self.stopped = True
        self.finish(raise_error=False)
        if self.error is not None:
            log.debug("a request failed while the write was failing: %s", self.error)

    def finish(self, raise_error: bool = True) -> None:
        """Wait for the queued requests (raises the first failure)."""
        self.requests.put(None)
        self.thread.join()
        if self.error is not None and raise_error:
            raise self.error


def send_all(requests: Iterable[list[bytes]], send: Callable[[list[bytes]], None], name: str) -> None:
    """`send` every request of `requests` in order through an `OrderedSender`.

    Raises:
        what `requests` raises (after `stop()`: nothing more is sent), else the first
        failure of `send` (the requests sent before it stay sent).
    """
    sender = OrderedSender(send, name)
    try:
        for request in requests:
            sender.put(request)
    except BaseException:
        sender.stop()  # the task fails: nothing more leaves it
        raise
    sender.finish()


__all__ = ["OrderedSender", "requests_of", "send_all"]
