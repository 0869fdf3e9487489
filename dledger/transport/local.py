"""LocalNetwork: threaded in-process delivery between nodes of one process.

For tests and embedded multi-node setups of real `DLedgerNode`s (with their threads),
where the deterministic `InMemoryNetwork` (driven step by step) does not fit. Requests
are handed to the target's handler on a small thread pool, so a response never runs
inside the sender's call stack. Links can be cut to isolate or partition members.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.messages import RequestOrResponse
from dledger.transport.base import RequestHandler


class LocalNetwork:
    """The members of one process and the links between them.

    Args:
        workers: delivery threads shared by every link.
    """

    def __init__(self, workers: int = 4) -> None:
        self._handlers: dict[str, RequestHandler] = {}
        self._cut: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="dledger-local-net")

    def register(self, node_id: str, handler: RequestHandler) -> None:
        """Deliver requests for `node_id` to `handler`."""
        with self._lock:
            self._handlers[node_id] = handler

    def unregister(self, node_id: str) -> None:
        """`node_id` is gone: requests to it fail with NETWORK_ERROR."""
        with self._lock:
            self._handlers.pop(node_id, None)

    def isolate(self, node_id: str, others: list[str]) -> None:
        """Cut every link between `node_id` and `others`, both ways."""
        with self._lock:
            for other in others:
                self._cut.update({(node_id, other), (other, node_id)})

    def heal(self) -> None:
        """Restore every link."""
        with self._lock:
            self._cut.clear()

    def transport(self, node_id: str) -> LocalTransport:
        """The Transport `node_id` sends with."""
        return LocalTransport(self, node_id)

    def close(self) -> None:
        """Stop the delivery threads."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def deliver(self, source: str, target: str, request: RequestOrResponse) -> Future[RequestOrResponse]:
        """Send `request` from `source` to `target` (see LocalTransport.send)."""
        result: Future[RequestOrResponse] = Future()
        with self._lock:
            handler = None if (source, target) in self._cut else self._handlers.get(target)
        if handler is None:
            result.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, f"{target} is unreachable from {source}"))
            return result

        def run() -> None:
            try:
                answer = handler(request)
            except BaseException as exc:
                result.set_exception(exc)
                return
            answer.add_done_callback(lambda f: self._reply(source, target, f, result))

        try:
            self._pool.submit(run)
        except RuntimeError:  # the network is closed
            result.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, "network closed"))
        return result

    def _reply(
        self, source: str, target: str, answer: Future[RequestOrResponse], result: Future[RequestOrResponse]
    ) -> None:
        with self._lock:
            cut = (target, source) in self._cut
        if cut:
            result.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, f"reply from {target} lost"))
        elif answer.exception() is not None:
            result.set_exception(answer.exception())
        else:
            result.set_result(answer.result())


class LocalTransport:
    """One member's side of a LocalNetwork (implements `Transport`)."""

    def __init__(self, network: LocalNetwork, node_id: str) -> None:
        self.network = network
        self.node_id = node_id

    def send(self, target_id: str, request: RequestOrResponse) -> Future[RequestOrResponse]:
        """Deliver `request` to `target_id`; fails with NETWORK_ERROR when unreachable."""
        return self.network.deliver(self.node_id, target_id, request)
