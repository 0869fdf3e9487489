"""The Transport protocol: send a peer request, get its response (or an error) later."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol, runtime_checkable

from dledger.raft.messages import RequestOrResponse

RequestHandler = Callable[[RequestOrResponse], "Future[RequestOrResponse]"]
"""Server side: answers a request with a future response."""


@runtime_checkable
class Transport(Protocol):
    """Client side of the peer protocol for one member."""

    def send(self, target_id: str, request: RequestOrResponse) -> Future[RequestOrResponse]:
        """Send `request` to member `target_id`. The future completes with the response,
        or fails with DLedgerError(NETWORK_ERROR / TIMEOUT) when none arrives."""
        ...
