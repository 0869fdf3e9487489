"""What the gRPC services of a member share: the node protocol they use, their limits,
client-call slots, the shutdown signal and the request parsing helpers."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, NoReturn, Protocol, TypeVar

import grpc  # type: ignore[import-untyped]

from dledger.codes import ReadMode
from dledger.config import MAX_APPEND_BYTES, MAX_BODIES_PER_APPEND, DLedgerConfig
from dledger.raft.messages import RequestOrResponse
from dledger.security.identity import Identity, identity_of
from dledger.transport.convert import StatusLike
from dledger.transport.validate import Refusal, RefusalLog, RequestValidator

log = logging.getLogger(__name__)

T = TypeVar("T")
StreamMethod = Literal["AppendStream", "ReadCommitted"]
"""The Ledger streams, each with slots of its own (`ServiceLimits`)."""

TOO_MANY_STREAMS = "too many open streams: every %s slot is taken, try again later"
"""RESOURCE_EXHAUSTED details of a stream refused before reading anything (clients retry
on "too many open streams", `dledger.client.policy`)."""
CALLER_STREAMS = "too many open streams: %s holds %d %s streams, as many as one caller may"
"""RESOURCE_EXHAUSTED details of a stream refused because its named caller holds
`ServiceLimits.max_streams_per_caller` streams of the method already."""
TOO_MANY_CALLS = "too many client calls at once"
CALLER_CALLS = "too many client calls at once: %s has %d running, as many as one caller may"
"""The message of a unary call refused because its named caller has
`ServiceLimits.max_calls_per_caller` client calls running already."""


class QueryLike(Protocol):
    """The member's reads of its state machine (`dledger.node_reads.NodeReads`)."""

    def query(self, requests: Sequence[bytes], mode: ReadMode, timeout_s: float, max_bytes: int | None) -> Any: ...


class NodeLike(Protocol):
    """What the services need of a member (`dledger.node.DLedgerNode`)."""

    @property
    def config(self) -> DLedgerConfig: ...
    @property
    def leader_id(self) -> str | None: ...
    @property
    def term(self) -> int: ...
    @property
    def committed_index(self) -> int: ...
    def handle_peer_request(self, request: RequestOrResponse) -> Future[RequestOrResponse]: ...
    def append(self, bodies: list[bytes], magic: int = 1) -> Future[int]: ...
    def append_idempotent(self, bodies: list[bytes], producer_id: int, epoch: int, first_seq: int) -> StampedLike: ...
    def init_producer(self) -> int: ...
    def get(self, index: int, count: int = 1) -> list[Any]: ...
    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> Any: ...
    def wait_committed(self, above_index: int, timeout_s: float) -> int: ...
    def status(self) -> StatusLike: ...
    def leadership_transfer(self, transferee_id: str) -> Future[int]: ...
    @property
    def reads(self) -> QueryLike: ...
    def set_incoming_appends(self, probe: Callable[[], int]) -> None: ...


class StampedLike(Protocol):
    """The leader's answer to an idempotent producer's request (dledger.node_producers)."""

    @property
    def runs(self) -> tuple[tuple[int, int], ...]: ...
    @property
    def duplicate(self) -> bool: ...
    @property
    def future(self) -> Future[int]: ...


@dataclass(frozen=True)
class ServiceLimits:
    """Limits of one server (defaults suit a member on a small machine).

    Attributes:
        max_workers: gRPC worker threads.
        max_client_calls: client calls running at once (the rest of the workers serve
            peers); must be below max_workers.
        max_append_streams: open AppendStream calls (part of max_client_calls).
        max_read_streams: open ReadCommitted streams (part of max_client_calls). Readers
            and writers have slots of their own, so that readers (a Spark job's
            partitions, following streams) cannot keep producers out, nor the reverse.
        max_streams_per_caller: streams of one method one named caller (a client
            certificate or bearer token, a member) may hold at once, so that one
            identity cannot take every slot from the others; plaintext callers are not
            told apart and share the method's slots only.
        max_calls_per_caller: client calls (Append, Get, Query) one named caller may
            have running at once, so that one identity (a reader's slow queries) cannot
            take every client slot from the others; plaintext callers are not told apart.
        max_bodies_per_append: bodies in one append request.
        max_append_bytes: body bytes in one append request (more is refused with
            UNEXPECTED_ARGUMENT before anything is appended: a request must replicate
            well within the leader's quorum-ack wait, `max_wait_ack_time_ms`).
        stream_in_flight: appends of one AppendStream waiting for their commit.
        max_get_count / max_get_bytes: upper bounds of one Get answer.
        max_query_bytes: the answers of one Query (more: UNEXPECTED_ARGUMENT as soon as
            the machine's answers pass it, before they are all built).
        default_batch_bytes / max_batch_bytes / default_batch_count / max_batch_count:
            ReadCommitted batch sizes.
        append_wait_s: longest wait for a commit (the node times out sooner).
        peer_wait_s: longest wait for the node's answer to a peer request.
        transfer_wait_s: longest wait for a leadership transfer.
        follow_poll_s: how often a following ReadCommitted stream notices a cancel.
        max_install_streams: Peer.InstallSnapshot streams taken at once (a leader sends
            one at a time; the rest are refused RESOURCE_EXHAUSTED, so that streams
            that never end cannot hold every worker).
        install_idle_s: an InstallSnapshot stream that sends no chunk for this long is
            cancelled.
    """

    max_workers: int = 160
    max_client_calls: int = 128
    max_append_streams: int = 16
    max_read_streams: int = 16
    max_streams_per_caller: int = 12
    max_calls_per_caller: int = 96
    max_bodies_per_append: int = MAX_BODIES_PER_APPEND
    max_append_bytes: int = MAX_APPEND_BYTES
    stream_in_flight: int = 256
    max_get_count: int = 65_536
    max_get_bytes: int = 16 * 1024 * 1024
    max_query_bytes: int = 32 * 1024 * 1024
    default_batch_bytes: int = 1024 * 1024
    max_batch_bytes: int = 32 * 1024 * 1024
    default_batch_count: int = 65_536
    max_batch_count: int = 1_048_576
    append_wait_s: float = 30.0
    peer_wait_s: float = 5.0
    transfer_wait_s: float = 10.0
    follow_poll_s: float = 0.5
    max_install_streams: int = 2
    install_idle_s: float = 30.0

    @classmethod
    def of(cls, config: DLedgerConfig) -> ServiceLimits:
        """The defaults with the stream slots `config` sets (`max_append_streams`,
        `max_read_streams`, `max_streams_per_caller`: a config file's
        `maxAppendStreams`...)."""
        return cls(
            max_append_streams=config.max_append_streams,
            max_read_streams=config.max_read_streams,
            max_streams_per_caller=config.max_streams_per_caller,
        )


class ArrivalGauge:
    """How many client appends are on their way: calls gRPC has accepted
    (`arrived`, from its polling thread) whose handler has not started yet (`started`).

    A call cancelled before its handler runs never starts; its arrival is forgotten
    after `stale_s`. Lock-free: deque appends and pops are atomic.

    Args:
        stale_s: how long an arrival counts at most.
        clock: seconds, monotonic.
    """

    def __init__(self, stale_s: float = 0.05, clock: Callable[[], float] = time.monotonic) -> None:
        self._arrivals: deque[float] = deque()
        self._stale_s = stale_s
        self._clock = clock

    def arrived(self) -> None:
        """A client append call was accepted."""
        self._arrivals.append(self._clock())

    def started(self) -> None:
        """The handler of a client append call started (arrivals count, not identity)."""
        try:  # noqa: SIM105 -- once per client call: cheaper than contextlib.suppress
            self._arrivals.popleft()
        except IndexError:  # forgotten as stale meanwhile
            pass

    def __call__(self) -> int:
        """Calls on their way now."""
        arrivals = self._arrivals
        stale = self._clock() - self._stale_s
        try:
            while arrivals[0] < stale:
                arrivals.popleft()
        except IndexError:
            pass
        return len(arrivals)


class ShuttingDown(Exception):
    """The server is shutting down (answered with gRPC UNAVAILABLE)."""


def _caller_key(method: str, caller: Identity | None) -> tuple[str, Identity] | None:
    """Whose share of `method`'s streams (or of the client calls, "calls") a caller's call
    counts against: a named caller's own; None for a caller without a name (plaintext),
    who has no share."""
    return (method, caller) if caller is not None and caller.kind != "unknown" else None


def caller_certificate(context: Any) -> Identity:
    """The identity a call's peer certificate names ("unknown" without one)."""
    return identity_of(context.auth_context())


class ServiceCore:
    """What the Ledger and Peer services share: the node, the limits, the client-call
    slots and the shutdown signal.

    Args:
        node: the member.
        limits: the server's limits.
    """

    def __init__(self, node: NodeLike, limits: ServiceLimits) -> None:
        if limits.max_client_calls >= limits.max_workers:
            raise ValueError("max_client_calls must leave workers for peer traffic")
        self.node = node
        self.limits = limits
        self.config = node.config
        self.peers = node.config.peer_map
        self.validator = RequestValidator(node.config, limits.max_bodies_per_append, limits.max_append_bytes)
        self.refusals = RefusalLog(node.config.self_id)
        self.closing: Future[None] = Future()
        self._client_slots = threading.BoundedSemaphore(limits.max_client_calls)
        self._stream_slots = {
            "AppendStream": threading.BoundedSemaphore(limits.max_append_streams),
            "ReadCommitted": threading.BoundedSemaphore(limits.max_read_streams),
        }
        self.install_slots = threading.BoundedSemaphore(limits.max_install_streams)
        self._caller_shares: dict[tuple[str, Identity], int] = {}  # a named caller's streams and calls
        self._caller_shares_lock = threading.Lock()
        self._wakers: set[Callable[[], None]] = set()
        self._wakers_lock = threading.Lock()
        self.incoming_appends = ArrivalGauge()
        node.set_incoming_appends(self.incoming_appends)
        self.identify: Callable[[Any], Identity] = caller_certificate
        """Who a Ledger call's caller is (the TLS guard sets its own: bearer tokens)."""

    # -- lifecycle

    @property
    def is_closing(self) -> bool:
        """True once `close()` ran."""
        return self.closing.done()

    def close(self) -> None:
        """Fail waiting client calls with UNAVAILABLE and refuse new ones. Idempotent."""
        if not self.closing.done():
            self.closing.set_result(None)
        with self._wakers_lock:
            wakers = list(self._wakers)
        for waker in wakers:
            waker()

    def add_waker(self, waker: Callable[[], None]) -> None:
        """Call `waker` on close (streams waiting on their own conditions)."""
        with self._wakers_lock:
            self._wakers.add(waker)
        if self.is_closing:
            waker()

    def remove_waker(self, waker: Callable[[], None]) -> None:
        with self._wakers_lock:
            self._wakers.discard(waker)

    # -- slots

    def try_client_slot(self, caller: Identity | None = None) -> str | None:
        """Take a client-call slot and, for a named `caller`, one of its own
        (`ServiceLimits.max_calls_per_caller`: helper M's read-only certificate held every
        slot with slow queries, and writers got none); None when taken, else why not
        (release with `release_client_slot(caller)`)."""
        key = _caller_key("calls", caller)
        if key is None:  # no share to count (the plaintext hot path takes no lock)
            return None if self._client_slots.acquire(blocking=False) else TOO_MANY_CALLS
        with self._caller_shares_lock:
            held = self._caller_shares.get(key, 0)
            if held >= self.limits.max_calls_per_caller:
                return CALLER_CALLS % (key[1].describe(), held)
            if not self._client_slots.acquire(blocking=False):
                return TOO_MANY_CALLS
            self._caller_shares[key] = held + 1
        return None

    def release_client_slot(self, caller: Identity | None = None) -> None:
        """Give back what `try_client_slot(caller)` took."""
        self._client_slots.release()
        self._release_share(_caller_key("calls", caller))

    def _release_share(self, key: tuple[str, Identity] | None) -> None:
        if key is not None:
            with self._caller_shares_lock:
                left = self._caller_shares.pop(key, 0) - 1
                if left > 0:
                    self._caller_shares[key] = left

    def client_caller(self, context: Any) -> Identity | None:
        """Who a Ledger call's caller is, for its share of the slots: None in plaintext
        (callers are not told apart; nothing to look up on the hot path)."""
        return self.identify(context) if self.config.tls_enabled else None

    def try_stream_slot(self, method: StreamMethod, caller: Identity | None = None) -> str | None:
        """Take a client slot, a slot of `method`'s streams and, for a named `caller`, one
        of its own (`ServiceLimits.max_streams_per_caller`); None when taken, else why
        not (RESOURCE_EXHAUSTED details)."""
        key = _caller_key(method, caller)
        with self._caller_shares_lock:
            held = self._caller_shares.get(key, 0) if key is not None else 0
            if key is not None and held >= self.limits.max_streams_per_caller:
                return CALLER_STREAMS % (key[1].describe(), held, method)
            if not self._client_slots.acquire(blocking=False):
                return TOO_MANY_STREAMS % method
            if not self._stream_slots[method].acquire(blocking=False):
                self._client_slots.release()
                return TOO_MANY_STREAMS % method
            if key is not None:
                self._caller_shares[key] = held + 1
        return None

    def release_stream_slot(self, method: StreamMethod, caller: Identity | None = None) -> None:
        """Give back what `try_stream_slot(method, caller)` took."""
        self._stream_slots[method].release()
        self._client_slots.release()
        self._release_share(_caller_key(method, caller))

    # -- helpers

    def await_future(self, future: Future[T], timeout_s: float, context: Any) -> T:
        """`future.result()`, waiting at most `timeout_s` and the call's deadline.

        Raises:
            ShuttingDown: `close()` ran first.
            TimeoutError: no result in time.
            Exception: whatever the future failed with.
        """
        if not future.done():
            remaining = context.time_remaining() if context is not None else None
            if remaining is not None:
                timeout_s = max(0.0, min(timeout_s, remaining))
            # one plain lock as the wait (cheaper than concurrent.futures.wait on the
            # future and `closing`): released by the future's completion or by close()
            gate = threading.Lock()
            gate.acquire()
            release = partial(_open_gate, gate)
            self.add_waker(release)
            try:
                future.add_done_callback(release)
                gate.acquire(timeout=timeout_s)
            finally:
                self.remove_waker(release)
        if future.done():
            return future.result()
        if self.closing.done():
            raise ShuttingDown()
        raise TimeoutError(f"no answer within {timeout_s:.3f} s")

    def refuse(self, method: str, refusal: Refusal | None, context: Any) -> Refusal | None:
        """`refusal`, counted and logged (see `RefusalLog`) when there is one."""
        if refusal is not None:
            self.refusals.refused_call(method, refusal, context)
        return refusal

    def fill_header(self, out: Any, code: int, message: str = "") -> Any:
        """Set code, leader_id, term, leader_address and message of a client response."""
        out.code = int(code)
        leader, term = self.node.leader_id, self.node.term  # plain reads: no lock, no copies per answer
        if leader is not None:
            out.leader_id = leader
            out.leader_address = self.peers.get(leader, "")
        out.term = term
        if message:
            out.message = message
        return out


def _open_gate(gate: threading.Lock, *_: object) -> None:
    """Release `gate` unless it is open already (completion and close() may both come)."""
    try:  # noqa: SIM105 -- once per client call: cheaper than contextlib.suppress
        gate.release()
    except RuntimeError:
        pass


def abort(context: Any, status: Any, details: str) -> NoReturn:
    """End the call with a gRPC status (`context.abort` raises)."""
    context.abort(status, details)
    raise AssertionError("grpc context.abort returned")  # pragma: no cover


def guard_unary(method: str, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`fn` as a handler no exception escapes: one that did (a bug, never a bad request:
    those are refused by `dledger.transport.validate`) is logged with its traceback and
    the call ends with gRPC INTERNAL. `context.abort` passes through."""

    def handle(request: Any, context: Any) -> Any:
        try:
            return fn(request, context)
        except Exception:
            if context.code() is not None:  # context.abort(): the call ends with that status
                raise
            log.exception("%s failed", method)
            abort(context, grpc.StatusCode.INTERNAL, f"{method} failed on the server (see its log)")

    return handle


def guard_stream(method: str, fn: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Iterator[Any]]:
    """`guard_unary` for a handler that streams its answers."""

    def handle(request: Any, context: Any) -> Iterator[Any]:
        try:
            yield from fn(request, context)
        except Exception:
            if context.code() is not None:
                raise
            log.exception("%s failed", method)
            abort(context, grpc.StatusCode.INTERNAL, f"{method} failed on the server (see its log)")

    return handle


def parse(message_cls: Any, raw: bytes, context: Any) -> Any:
    """`message_cls` parsed from `raw`; aborts the call with INVALID_ARGUMENT when the
    bytes are not a valid message."""
    try:
        return message_cls.FromString(raw)
    except Exception as exc:  # google.protobuf.message.DecodeError
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"not a {message_cls.DESCRIPTOR.full_name}: {exc}")


def serialize(message: Any) -> bytes:
    """Response serializer of every handler."""
    data: bytes = message.SerializeToString()
    return data
