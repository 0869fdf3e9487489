"""`dledger.v1.Ledger`: the client service (Append, AppendStream, Get, ReadCommitted,
Metadata, LeadershipTransfer, and Query: `ledger_query`) over a member. Part of `grpc_server.GrpcServer`.

Every answer carries a DLedger code; a follower answers appends with NOT_LEADER and the
leader's id and address. Reads are served by any member and never return entries above
its committed index.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import HEADER_SIZE, MAGIC_NORMAL, MAGIC_RECORD, MAX_ENTRY_SIZE
from dledger.transport.convert import columns_to_pb, entry_to_pb, pb, status_to_metadata
from dledger.transport.ledger_query import answer_query
from dledger.transport.service_core import (
    ArrivalGauge,
    ServiceCore,
    ShuttingDown,
    StampedLike,
    abort,
    guard_stream,
    guard_unary,
    parse,
    serialize,
)
from dledger.transport.validate import SHOWN_CHARS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Stamped:
    """An idempotent producer's request handed to the node: its answer."""

    answer: StampedLike


LEDGER_SERVICE = "dledger.v1.Ledger"
APPEND_METHOD = f"/{LEDGER_SERVICE}/Append"

MAX_BODY_BYTES = MAX_ENTRY_SIZE - HEADER_SIZE
"""Largest body of one entry."""

UNKNOWN_OUTCOME = frozenset({ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, ResponseCode.TERM_CHANGED})
"""Codes of an append the leader took but could not see committed: the entries may
still commit (clients report them as indeterminate, `dledger.client.IndeterminateError`)."""


class _Malformed:
    """A stream message that did not parse."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_Started = tuple[Any, "Future[int] | Any"]  # (request, future or finished response)


class _Pipeline:
    """The bounded queue between an AppendStream's reader thread and its responder."""

    def __init__(self, capacity: int) -> None:
        self._cond = threading.Condition()
        self._items: deque[_Started | _Malformed] = deque()
        self._capacity = capacity
        self._ended = False
        self._stopped = False

    def put(self, item: _Started | _Malformed) -> bool:
        """Queue `item`, waiting while full; False once the responder stopped."""
        with self._cond:
            self._cond.wait_for(lambda: len(self._items) < self._capacity or self._stopped)
            if self._stopped:
                return False
            self._items.append(item)
            self._cond.notify_all()
            return True

    def end(self) -> None:
        """No more items will come."""
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def take(self) -> _Started | _Malformed | None:
        """The next item, waiting for one; None at the end or after `stop`."""
        with self._cond:
            self._cond.wait_for(lambda: self._items or self._ended or self._stopped)
            if self._stopped or not self._items:
                return None
            item = self._items.popleft()
            self._cond.notify_all()
            return item

    def stop(self) -> None:
        """Wake and end both sides (call cancelled, server closing, responder done)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()


class LedgerService:
    """The client service.

    Args:
        core: the shared service state.
    """

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.node = core.node
        self.limits = core.limits

    def _closing_abort(self, context: Any, what: str = "") -> None:
        abort(
            context,
            grpc.StatusCode.UNAVAILABLE,
            f"{self.core.config.self_id} is shutting down{'; ' + what if what else ''}",
        )

    # -- Append

    def _append_error(self, request: Any, code: int, message: str) -> Any:
        out = pb.AppendResponse(request_id=request.request_id)
        return self.core.fill_header(out, code, message)

    def _start_append(self, request: Any, method: str, context: Any) -> Future[int] | Any:
        """Validate `request` and hand it to the node: the node's future, or a finished
        error response."""
        bodies = list(request.bodies)
        refusal = self.core.refuse(method, self.core.validator.append(request, bodies), context)
        if refusal is not None:
            return self._append_error(request, *refusal)
        try:
            if request.HasField("stamp"):
                if request.magic != MAGIC_RECORD:
                    return self._append_error(
                        request, ResponseCode.UNEXPECTED_ARGUMENT, "a stamped request carries records (magic 16)"
                    )
                stamp = request.stamp
                return _Stamped(
                    self.node.append_idempotent(bodies, stamp.producer_id, stamp.epoch, stamp.first_sequence)
                )
            return self.node.append(bodies, request.magic or MAGIC_NORMAL)
        except DLedgerError as exc:
            return self._append_error(request, exc.code, exc.message)
        except Exception as exc:
            log.exception("append failed")
            return self._append_error(request, ResponseCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    def _finish_append(self, request: Any, started: Future[int] | _Stamped | Any, context: Any) -> Any:
        stamped = started.answer if isinstance(started, _Stamped) else None
        if stamped is not None:
            started = stamped.future
        if not isinstance(started, Future):
            return started
        try:
            last = self.core.await_future(started, self.limits.append_wait_s, context)
        except ShuttingDown:
            self._closing_abort(context, "the outcome of this append is unknown")
        except DLedgerError as exc:
            message = exc.message
            if exc.code in UNKNOWN_OUTCOME:
                message = f"{message}; the outcome is unknown: the entries may still commit"
            return self._append_error(request, exc.code, message)
        except TimeoutError:
            return self._append_error(
                request, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, "no commit in time; the outcome is unknown"
            )
        except Exception as exc:
            log.exception("append failed")
            return self._append_error(request, ResponseCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
        count = len(request.bodies)
        if stamped is not None:
            runs = [pb.IndexRun(first_index=first, count=n) for first, n in stamped.runs]
            first = stamped.runs[0][0] if stamped.runs else -1
            out = pb.AppendResponse(
                request_id=request.request_id, first_index=first, count=count, duplicate=stamped.duplicate, runs=runs
            )
        else:
            out = pb.AppendResponse(request_id=request.request_id, first_index=last - count + 1, count=count)
        return self.core.fill_header(out, ResponseCode.SUCCESS)

    def append(self, raw: bytes, context: Any) -> Any:
        """Ledger.Append."""
        self.core.incoming_appends.started()
        request = parse(pb.AppendRequest, raw, context)
        if self.core.is_closing:
            self._closing_abort(context)
        caller = self.core.client_caller(context)
        no_slot = self.core.try_client_slot(caller)
        if no_slot is not None:
            return self._append_error(request, ResponseCode.LEADER_PENDING_FULL, no_slot)
        try:
            return self._finish_append(request, self._start_append(request, "Append", context), context)
        finally:
            self.core.release_client_slot(caller)

    def _read_appends(self, requests: Iterator[bytes], pipeline: _Pipeline, context: Any) -> None:
        try:
            for raw in requests:
                try:
                    request = pb.AppendRequest.FromString(raw)
                except Exception as exc:
                    pipeline.put(_Malformed(f"not a dledger.v1.AppendRequest: {exc}"))
                    return
                if not pipeline.put((request, self._start_append(request, "AppendStream", context))):
                    return
        except Exception as exc:  # the call ended (cancelled, deadline, shutdown)
            log.debug("append stream reader ended: %s", exc)
        finally:
            pipeline.end()

    def append_stream(self, requests: Iterator[bytes], context: Any) -> Iterator[Any]:
        """Ledger.AppendStream: one response per request, in request order."""
        if self.core.is_closing:
            self._closing_abort(context)
        caller = self.core.identify(context)
        no_slot = self.core.try_stream_slot("AppendStream", caller)
        if no_slot is not None:
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, no_slot)
        pipeline = _Pipeline(self.limits.stream_in_flight)
        self.core.add_waker(pipeline.stop)
        context.add_callback(pipeline.stop)
        try:
            reader = threading.Thread(
                target=self._read_appends, args=(requests, pipeline, context), name="dledger-append-stream", daemon=True
            )
            reader.start()
            while (item := pipeline.take()) is not None:
                if isinstance(item, _Malformed):
                    abort(context, grpc.StatusCode.INVALID_ARGUMENT, item.reason)
                request, started = item
                yield self._finish_append(request, started, context)
            if self.core.is_closing:
                self._closing_abort(context, "the outcome of unanswered appends is unknown")
        finally:
            pipeline.stop()
            self.core.remove_waker(pipeline.stop)
            self.core.release_stream_slot("AppendStream", caller)

    # -- reads

    def get(self, raw: bytes, context: Any) -> Any:
        """Ledger.Get: committed entries from `index`, at most `count` and `max_bytes`."""
        request = parse(pb.GetRequest, raw, context)
        out = pb.GetResponse()
        refusal = self.core.refuse("Get", self.core.validator.get(request), context)
        if refusal is not None:
            out.committed_index = self.node.committed_index
            return self.core.fill_header(out, *refusal)
        if context is not None and not context.is_active():
            return out  # its caller went away while it waited in the queue: skip the work
        caller = self.core.client_caller(context)
        no_slot = self.core.try_client_slot(caller)  # a Get costs up to a second: helper M's floods had none
        if no_slot is not None:
            out.committed_index = self.node.committed_index
            return self.core.fill_header(out, ResponseCode.LEADER_PENDING_FULL, no_slot)
        try:
            return self._answer_get(request, out)
        finally:
            self.core.release_client_slot(caller)

    def _answer_get(self, request: Any, out: Any) -> Any:
        count = min(request.count or 1, self.limits.max_get_count)
        max_bytes = min(request.max_bytes or self.limits.max_get_bytes, self.limits.max_get_bytes)
        index, size, chunk = request.index, 0, 16
        try:
            while len(out.entries) < count:
                want = min(chunk, count - len(out.entries))
                try:
                    entries = self.node.get(index, want)
                except DLedgerError as exc:
                    if len(out.entries) and exc.code == ResponseCode.INDEX_OUT_OF_RANGE:
                        break  # past the committed index: answer what was read
                    raise
                for entry in entries:
                    if len(out.entries) and size + len(entry.body) > max_bytes:
                        count = 0  # full
                        break
                    size += len(entry.body)
                    entry_to_pb(entry, out.entries.add(), request.decode_records)
                if len(entries) < want:
                    break
                index += len(entries)
                chunk = min(chunk * 4, 4096)
        except DLedgerError as exc:
            del out.entries[:]
            out.committed_index = self.node.committed_index
            return self.core.fill_header(out, exc.code, exc.message)
        out.committed_index = self.node.committed_index
        return self.core.fill_header(out, ResponseCode.SUCCESS)

    def read_committed(self, raw: bytes, context: Any) -> Iterator[Any]:
        """Ledger.ReadCommitted: column-wise batches of committed entries."""
        request = parse(pb.ReadCommittedRequest, raw, context)
        if self.core.is_closing:
            self._closing_abort(context)
        refusal = self.core.refuse("ReadCommitted", self.core.validator.read_committed(request), context)
        if refusal is not None:
            yield self.core.fill_header(pb.ReadCommittedResponse(), *refusal)
            return
        caller = self.core.identify(context)
        no_slot = self.core.try_stream_slot("ReadCommitted", caller)
        if no_slot is not None:
            abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, no_slot)
        try:
            yield from self._read_batches(request, context)
        finally:
            self.core.release_stream_slot("ReadCommitted", caller)

    def _read_batches(self, request: Any, context: Any) -> Iterator[Any]:
        limits = self.limits
        next_index = request.from_index
        end = request.to_index if request.HasField("to_index") else None
        max_bytes = min(request.max_batch_bytes or limits.default_batch_bytes, limits.max_batch_bytes)
        max_count = min(request.max_batch_count or limits.default_batch_count, limits.max_batch_count)
        while end is None or next_index < end:
            if self.core.is_closing:
                self._closing_abort(context)
            if not context.is_active():
                return
            want = max_count if end is None else min(max_count, end - next_index)
            try:
                batch = self.node.read_columns(next_index, want, max_bytes)
            except DLedgerError as exc:
                yield self.core.fill_header(pb.ReadCommittedResponse(), exc.code, exc.message)
                return
            if batch.count:
                out = pb.ReadCommittedResponse(committed_index=self.node.committed_index)
                columns_to_pb(batch, out.batch, request.layout)
                yield self.core.fill_header(out, ResponseCode.SUCCESS)
                next_index = int(batch.index[batch.count - 1]) + 1
            elif not request.follow:
                return
            else:
                self.node.wait_committed(next_index - 1, limits.follow_poll_s)

    # -- metadata and leadership

    def metadata(self, raw: bytes, context: Any) -> Any:
        """Ledger.Metadata: the answering member's view of the group."""
        request = parse(pb.MetadataRequest, raw, context)
        check = self.core.validator.client_target(request.group, request.remote_id)
        refusal = self.core.refuse("Metadata", check, context)
        if refusal is not None:
            return self.core.fill_header(pb.MetadataResponse(), *refusal)
        return status_to_metadata(self.node.status())

    def init_producer(self, raw: bytes, context: Any) -> Any:
        """Ledger.InitProducer: a producer id from the leader."""
        request = parse(pb.InitProducerRequest, raw, context)
        check = self.core.validator.client_target(request.group, request.remote_id)
        refusal = self.core.refuse("InitProducer", check, context)
        if refusal is not None:
            return self.core.fill_header(pb.InitProducerResponse(), *refusal)
        try:
            producer_id = self.node.init_producer()
        except DLedgerError as exc:
            return self.core.fill_header(pb.InitProducerResponse(), exc.code, exc.message)
        return self.core.fill_header(pb.InitProducerResponse(producer_id=producer_id), ResponseCode.SUCCESS)

    def leadership_transfer(self, raw: bytes, context: Any) -> Any:
        """Ledger.LeadershipTransfer: ask this member (the leader) to hand over."""
        request = parse(pb.LeadershipTransferRequest, raw, context)
        config = self.core.config
        caller = request.local_id[:SHOWN_CHARS]
        out = pb.LeadershipTransferResponse(group=config.group, local_id=config.self_id, remote_id=caller)
        refusal = self.core.refuse("LeadershipTransfer", self.core.validator.transfer(request), context)
        if refusal is not None:
            return self.core.fill_header(out, *refusal)
        if self.core.is_closing:
            self._closing_abort(context)
        mismatch = self._transfer_mismatch(request)
        if mismatch is not None:
            return self.core.fill_header(out, *mismatch)
        no_slot = self.core.try_client_slot()
        if no_slot is not None:
            return self.core.fill_header(out, ResponseCode.LEADER_PENDING_FULL, no_slot)
        try:
            try:
                future = self.node.leadership_transfer(request.transferee_id)
                term = self.core.await_future(future, self.limits.transfer_wait_s, context)
            except ShuttingDown:
                self._closing_abort(context)
            except DLedgerError as exc:
                return self.core.fill_header(out, exc.code, exc.message)
            except TimeoutError:
                return self.core.fill_header(out, ResponseCode.TIMEOUT, "the transferee did not take over in time")
            self.core.fill_header(out, ResponseCode.SUCCESS)
            out.leader_id = request.transferee_id
            out.leader_address = self.core.peers.get(request.transferee_id, "")
            out.term = term
            return out
        finally:
            self.core.release_client_slot()

    def _transfer_mismatch(self, request: Any) -> tuple[ResponseCode, str] | None:
        """On the leader: what a transfer request says of it that is not so, the leader
        (`transfer_id`) or its term (`term`, when not 0), as DLedger's --leader and --term
        guard a transfer (INCONSISTENT_LEADER, INCONSISTENT_TERM). Elsewhere None: the
        node answers NOT_LEADER, and the client asks the leader."""
        node, self_id = self.node, self.core.config.self_id
        if node.leader_id != self_id:
            return None
        if request.transfer_id and request.transfer_id != self_id:
            return ResponseCode.INCONSISTENT_LEADER, f"{self_id} leads, not {request.transfer_id}"
        term = node.term
        if request.term and request.term != term:
            return ResponseCode.INCONSISTENT_TERM, f"the leader's term is {term}, not {request.term}"
        return None

    def query(self, raw: bytes, context: Any) -> Any:
        """Ledger.Query (see `dledger.transport.ledger_query`)."""
        return answer_query(self.core, raw, context)

    def generic_handler(self) -> Any:
        """The gRPC handler of the service."""

        def unary(fn: Callable[[bytes, Any], Any]) -> Any:
            return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=serialize)

        handler = grpc.method_handlers_generic_handler(
            LEDGER_SERVICE,
            {
                "Append": unary(guard_unary("Ledger.Append", self.append)),
                "AppendStream": grpc.stream_stream_rpc_method_handler(
                    guard_stream("Ledger.AppendStream", self.append_stream),
                    request_deserializer=None,
                    response_serializer=serialize,
                ),
                "Get": unary(guard_unary("Ledger.Get", self.get)),
                "ReadCommitted": grpc.unary_stream_rpc_method_handler(
                    guard_stream("Ledger.ReadCommitted", self.read_committed),
                    request_deserializer=None,
                    response_serializer=serialize,
                ),
                "Metadata": unary(guard_unary("Ledger.Metadata", self.metadata)),
                "InitProducer": unary(guard_unary("Ledger.InitProducer", self.init_producer)),
                "LeadershipTransfer": unary(guard_unary("Ledger.LeadershipTransfer", self.leadership_transfer)),
                "Query": unary(guard_unary("Ledger.Query", self.query)),
            },
        )
        return _CountingAppends(handler, self.core.incoming_appends)


class _CountingAppends(grpc.GenericRpcHandler):  # type: ignore[misc]
    """The service's handler, counting Append calls as they arrive: gRPC looks up the
    handler on its polling thread, before a worker reads the request."""

    def __init__(self, handler: Any, gauge: ArrivalGauge) -> None:
        self._handler = handler
        self._gauge = gauge

    def service(self, handler_call_details: Any) -> Any:
        if handler_call_details.method == APPEND_METHOD:
            self._gauge.arrived()
        return self._handler.service(handler_call_details)
