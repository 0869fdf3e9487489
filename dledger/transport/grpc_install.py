"""The gRPC side of the chunked InstallSnapshot (client-streaming `Peer.InstallSnapshot`).

Server: every chunk is parsed, checked against the caller's certificate (TLS) and by
`dledger.transport.validate` (addressing, member ids, term, the snapshot's index and
term, size, offset and chunk within the size) before the node sees it; the node reads
the chunks lazily (`InstallSnapshotStream`) and answers once for the stream. A refused
chunk ends the stream with the refusal's code (and the offset the follower expects
next). The client side is `GrpcTransport.send` of an `InstallSnapshotStream`.

A member takes `ServiceLimits.max_install_streams` streams at once (more are refused
RESOURCE_EXHAUSTED) and cancels one that sends no chunk for `install_idle_s`: a stream
waiting for its next chunk holds a gRPC worker, and streams that never end would hold
them all.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.messages import InstallSnapshotRequest, InstallSnapshotStream, RequestOrResponse
from dledger.transport.convert import from_pb, pb, response_to_pb
from dledger.transport.guard import Guard
from dledger.transport.service_core import ServiceCore, parse

log = logging.getLogger(__name__)

RESPONSE = "InstallSnapshotResponse"


def install_handler(core: ServiceCore, guard: Guard | None) -> Any:
    """The stream-unary handler body `(request_iterator, context) -> response` for
    `Peer.InstallSnapshot` (wrap it with `guard_unary`)."""

    def chunks(raw_chunks: Iterator[bytes], context: Any, watch: _IdleWatch) -> Iterator[InstallSnapshotRequest]:
        """The chunks, decoded and checked (no `context.abort` here: the node reads
        them; a bad one raises DLedgerError, which ends the stream with its code)."""
        for raw in raw_chunks:
            watch.touch()
            try:
                chunk = from_pb(pb.InstallSnapshotRequest.FromString(raw))
            except Exception as exc:  # google.protobuf.message.DecodeError, MalformedMessage
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"not an InstallSnapshotRequest: {exc}") from None
            assert isinstance(chunk, InstallSnapshotRequest)
            refusal = core.refuse("InstallSnapshot", core.validator.peer_request(chunk, core.node.term), context)
            if refusal is not None:
                raise DLedgerError(refusal.code, refusal.reason)
            yield chunk

    def handle(raw_chunks: Iterator[bytes], context: Any) -> Any:
        if not core.install_slots.acquire(blocking=False):
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many InstallSnapshot streams at once")
        watch = _IdleWatch(context, core.limits.install_idle_s)
        try:
            return take(raw_chunks, context, watch)
        finally:
            watch.stop()
            core.install_slots.release()

    def take(raw_chunks: Iterator[bytes], context: Any, watch: _IdleWatch) -> Any:
        caller = guard.peer_caller(context) if guard is not None else None
        try:
            raw_first = next(raw_chunks, None)
        except Exception:  # the caller went away before its first chunk
            return _error(core, ResponseCode.NETWORK_ERROR)
        if raw_first is None:
            return _error(core, ResponseCode.UNEXPECTED_ARGUMENT)
        message = parse(pb.InstallSnapshotRequest, raw_first, context)  # aborts: not a message
        if guard is not None and caller is not None:  # later chunks must speak as the first (the node checks)
            guard.check_speaks_as(caller, RequestOrResponse(local_id=message.local_id), context)
        stream = chunks(itertools.chain([raw_first], raw_chunks), context, watch)
        try:
            first = next(stream)
        except DLedgerError as exc:
            return _error(core, exc.code)
        whole = InstallSnapshotStream(
            group=first.group,
            remote_id=first.remote_id,
            local_id=first.local_id,
            leader_id=first.leader_id,
            term=first.term,
            chunks=itertools.chain([first], stream),
        )
        answer = core.node.handle_peer_request(whole).result()
        return response_to_pb(answer, RESPONSE)

    return handle


class _IdleWatch:
    """Cancels a call once `idle_s` pass without a `touch()` (one timer thread at a
    time, re-armed for what is left of the wait), until `stop()`."""

    def __init__(self, context: Any, idle_s: float) -> None:
        self._context = context
        self._idle_s = idle_s
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._arm(idle_s)

    def touch(self) -> None:
        """A chunk arrived."""
        self._last = time.monotonic()

    def stop(self) -> None:
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _arm(self, wait_s: float) -> None:
        timer = threading.Timer(wait_s, self._check)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _check(self) -> None:
        with self._lock:
            if self._timer is None:
                return  # stopped
            left = self._last + self._idle_s - time.monotonic()
            if left > 0:
                self._arm(left)
                return
            self._timer = None
        log.warning("an InstallSnapshot stream sent no chunk for %.0f s: cancelled", self._idle_s)
        self._context.cancel()


def _error(core: ServiceCore, code: int) -> Any:
    config = core.config
    out = pb.InstallSnapshotResponse(group=config.group, local_id=config.self_id, code=int(code), term=-1)
    leader = core.node.leader_id
    if leader is not None:
        out.leader_id = leader
    return out
