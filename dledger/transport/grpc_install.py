"""The gRPC side of the chunked InstallSnapshot (client-streaming `Peer.InstallSnapshot`).

Server: every chunk is parsed, checked against the caller's certificate (TLS) and by
`dledger.transport.validate` (addressing, member ids, term, the snapshot's index and
term, size, offset and chunk within the size) before the node sees it; the node reads
the chunks lazily (`InstallSnapshotStream`) and answers once for the stream. A refused
chunk ends the stream with the refusal's code (and the offset the follower expects
next). The client side is `GrpcTransport.send` of an `InstallSnapshotStream`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any

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

    def chunks(raw_chunks: Iterator[bytes], context: Any) -> Iterator[InstallSnapshotRequest]:
        """The chunks, decoded and checked (no `context.abort` here: the node reads
        them; a bad one raises DLedgerError, which ends the stream with its code)."""
        for raw in raw_chunks:
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
        stream = chunks(itertools.chain([raw_first], raw_chunks), context)
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


def _error(core: ServiceCore, code: int) -> Any:
    config = core.config
    out = pb.InstallSnapshotResponse(group=config.group, local_id=config.self_id, code=int(code), term=-1)
    leader = core.node.leader_id
    if leader is not None:
        out.leader_id = leader
    return out
