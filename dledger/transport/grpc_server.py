"""The gRPC server of a member: the `dledger.v1.Ledger` and `dledger.v1.Peer` services on
one port, plus gRPC health checking (and reflection, when asked for).

With TLS (`dledger.security.TlsConfig`) the port speaks mutual TLS only and every call is
checked against the caller's certificate (`dledger.transport.guard`): Peer calls must
come from the member they speak as, Ledger calls need the role the method asks for;
refusals are gRPC PERMISSION_DENIED. A second, client-only port (`client_address`)
speaks server-side TLS: its callers present a bearer token of the tokens file instead of
a certificate (missing or unknown: UNAUTHENTICATED), and Peer calls there are refused.

Handlers are registered with raw-bytes request deserializers and parse the protobuf
themselves, so that bytes that are not a valid message get INVALID_ARGUMENT (gRPC's own
deserializer would answer INTERNAL). DLedger result codes travel in the response body;
gRPC status codes are used for malformed requests (INVALID_ARGUMENT), messages over the
size limit (RESOURCE_EXHAUSTED, from gRPC itself), too many concurrent streams
(RESOURCE_EXHAUSTED) and a server that is shutting down (UNAVAILABLE).

Workers: the sync server runs each call on a pool thread. Client calls may wait for a
commit, so at most `ServiceLimits.max_client_calls` of them run at once (further appends
get LEADER_PENDING_FULL at once); the remaining workers are kept for peer traffic, so a
burst of clients can never starve heartbeats and votes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection as grpc_reflection  # type: ignore[import-untyped]

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.messages import RequestOrResponse
from dledger.security.tls import TlsConfig
from dledger.security.tokens import TokenFile, TokenStore
from dledger.transport.convert import MalformedMessage, from_pb, pb, response_to_pb
from dledger.transport.grpc_client import MAX_MESSAGE_BYTES
from dledger.transport.grpc_install import install_handler
from dledger.transport.guard import Guard
from dledger.transport.ledger_service import LEDGER_SERVICE, LedgerService
from dledger.transport.service_core import (
    NodeLike,
    ServiceCore,
    ServiceLimits,
    ShuttingDown,
    abort,
    guard_unary,
    parse,
    serialize,
)
from dledger.transport.validate import SHOWN_CHARS, Refusal

log = logging.getLogger(__name__)

HEALTH_SHUTDOWN_S = 1.0
"""How long a shutdown waits for the health servicer to tell its watchers NOT_SERVING."""

__all__ = ["SERVER_OPTIONS", "BindError", "GrpcServer", "NodeLike", "PeerService", "ServiceLimits"]

PEER_SERVICE = "dledger.v1.Peer"

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    # a second process must not be able to bind a live member's port (FAULTS.md §3)
    ("grpc.so_reuseport", 0),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # accept the clients' 1 s keepalive pings, idle or not, without GOAWAY too_many_pings
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 500),
    ("grpc.http2.min_ping_interval_without_data_ms", 500),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.http2.max_pings_without_data", 0),
    # a connection that has not finished its HTTP/2 (and TLS) handshake by then is closed
    # (gRPC's default: 120 s): idle connections hold a descriptor each (helper M)
    ("grpc.server_handshake_timeout_ms", 20_000),
)


class PeerService:
    """`dledger.v1.Peer`: hands Vote, HeartBeat, Push, LeadershipTransfer and ReadIndex requests that
    pass `dledger.transport.validate` to the node (the others get the refusal's code);
    InstallSnapshot streams go to it chunk by chunk, each checked the same way
    (`dledger.transport.grpc_install`).

    Args:
        core: the shared service state.
        guard: the identity checks (TLS), or None (plaintext: no checks).
    """

    def __init__(self, core: ServiceCore, guard: Guard | None = None) -> None:
        self.core = core
        self.guard = guard

    def _handler(self, method: str, request_name: str, response_name: str) -> Callable[[bytes, Any], Any]:
        request_cls = getattr(pb, request_name)
        core = self.core
        guard = self.guard

        def handle(raw: bytes, context: Any) -> Any:
            caller = guard.peer_caller(context) if guard is not None else None
            message = parse(request_cls, raw, context)
            try:
                request = from_pb(message)
            except MalformedMessage as exc:
                core.refuse(method, Refusal(ResponseCode.UNEXPECTED_ARGUMENT, str(exc)), context)
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            if caller is not None:
                guard.check_speaks_as(caller, request, context)  # type: ignore[union-attr]
            refusal = core.refuse(method, core.validator.peer_request(request, core.node.term), context)
            if refusal is not None:
                return response_to_pb(self._error(request, refusal.code), response_name)
            try:
                answer = core.await_future(core.node.handle_peer_request(request), core.limits.peer_wait_s, context)
            except ShuttingDown:
                abort(context, grpc.StatusCode.UNAVAILABLE, f"{core.config.self_id} is shutting down")
            except DLedgerError as exc:
                answer = self._error(request, exc.code)
            except TimeoutError:
                answer = self._error(request, ResponseCode.TIMEOUT)
            except Exception:
                log.exception("%s from %s failed", request_name, request.local_id)
                answer = self._error(request, ResponseCode.INTERNAL_ERROR)
            return response_to_pb(answer, response_name)

        return guard_unary(f"Peer.{method}", handle)

    def _error(self, request: RequestOrResponse, code: int) -> RequestOrResponse:
        config = self.core.config
        return RequestOrResponse(
            group=config.group,
            local_id=config.self_id,
            remote_id=request.local_id[:SHOWN_CHARS],  # a refused caller's id: not echoed in full
            code=code,
            leader_id=self.core.node.leader_id,
            term=-1,
        )

    def generic_handler(self) -> Any:
        """The gRPC handler of the service."""

        def unary(fn: Callable[[bytes, Any], Any]) -> Any:
            return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=serialize)

        return grpc.method_handlers_generic_handler(
            PEER_SERVICE,
            {
                "Vote": unary(self._handler("Vote", "VoteRequest", "VoteResponse")),
                "HeartBeat": unary(self._handler("HeartBeat", "HeartBeatRequest", "HeartBeatResponse")),
                "Push": unary(self._handler("Push", "PushEntryRequest", "PushEntryResponse")),
                "LeadershipTransfer": unary(
                    self._handler("LeadershipTransfer", "LeadershipTransferRequest", "LeadershipTransferResponse")
                ),
                "InstallSnapshot": grpc.stream_unary_rpc_method_handler(
                    guard_unary("Peer.InstallSnapshot", install_handler(self.core, self.guard)),
                    request_deserializer=None,
                    response_serializer=serialize,
                ),
                "ReadIndex": unary(self._handler("ReadIndex", "ReadIndexRequest", "ReadIndexResponse")),
            },
        )


class BindError(OSError):
    """The listen address cannot be bound (in use: SO_REUSEPORT is off; or not local).

    Attributes:
        address: the address that could not be bound ("" when not known).
    """

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message)
        self.address = address


class HealthServicer(health.HealthServicer):  # type: ignore[misc]
    """grpc's health servicer, except that a status change reaches the Watch streams
    after its lock is released.

    The stock `set` sends to every Watch stream while it holds the servicer's lock, and a
    send waits until the server's polling thread has processed it. If that thread is at
    the same moment in another Watch stream's close callback, which takes the same lock,
    neither moves: a shutdown (`enter_graceful_shutdown`) then hung for good in a full
    test run (peers hold Watch streams open: dledger.transport.grpc_client).
    """

    def Watch(self, request: Any, context: Any, send_response_callback: Any = None) -> Any:
        """Stream `request.service`'s status: the current one first (sent outside the lock)."""
        if send_response_callback is None:  # a blocking server: the stock generator
            return super().Watch(request, context)
        service = request.service
        with self._lock:
            status = self._server_status.get(service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN)
            self._send_response_callbacks.setdefault(service, set()).add(send_response_callback)
            context.add_callback(self._on_close_callback(send_response_callback, service))
        send_response_callback(health_pb2.HealthCheckResponse(status=status))
        return None

    def set(self, service: str, status: int) -> None:
        """Record `status` for `service`, then tell its watchers (outside the lock)."""
        with self._lock:
            if self._gracefully_shutting_down:
                return
            self._server_status[service] = status
            watchers = list(self._send_response_callbacks.get(service, ()))
        for send in watchers:
            send(health_pb2.HealthCheckResponse(status=status))

    def enter_graceful_shutdown(self) -> None:
        """Every service NOT_SERVING for good (watchers told outside the lock)."""
        with self._lock:
            services = list(self._server_status)
        for service in services:
            self.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        with self._lock:
            self._gracefully_shutting_down = True


class GrpcServer:
    """A member's gRPC server: Ledger + Peer + health (+ reflection) on one port.

    Args:
        node: the member.
        address: `host:port` to listen on (port 0 picks a free one: see `port`).
        limits: worker and size limits.
        tls: serve mutual TLS with these files and check every caller's identity
            (None: plaintext, no checks).
        reflection: also serve gRPC server reflection.
        client_address: also listen here for clients with bearer tokens (server-side
            TLS; needs `tls` and `tokens`). See `client_port`.
        tokens: the bearer tokens accepted on `client_address`.

    Raises:
        BindError: an address cannot be bound.
        dledger.security.TlsError: the TLS files cannot be read.
        ValueError: `client_address` without `tls` and `tokens`.
    """

    def __init__(
        self,
        node: NodeLike,
        address: str,
        limits: ServiceLimits | None = None,
        *,
        tls: TlsConfig | None = None,
        reflection: bool = False,
        client_address: str | None = None,
        tokens: TokenStore | TokenFile | None = None,
    ) -> None:
        if client_address is not None and (tls is None or tokens is None):
            raise ValueError("a client port needs TLS and a tokens file")
        self.limits = limits or ServiceLimits.of(node.config)
        self.core = ServiceCore(node, self.limits)
        self.address = address
        self.health = HealthServicer(experimental_non_blocking=True)
        self._server = grpc.server(
            ThreadPoolExecutor(self.limits.max_workers, thread_name_prefix=f"grpc-{node.config.self_id}"),
            options=list(SERVER_OPTIONS),  # the same for TLS (docs/BENCHMARKS.md, "Mutual TLS")
        )
        credentials = tls.server_credentials() if tls is not None else None
        self.guard = Guard(node.config, tokens) if tls is not None else None
        ledger = LedgerService(self.core).generic_handler()
        if self.guard is not None:
            ledger = self.guard.ledger_handler(ledger)
            self.core.identify = self.guard.ledger_caller
        self._server.add_generic_rpc_handlers((ledger, PeerService(self.core, self.guard).generic_handler()))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._server)
        if reflection:
            services = [LEDGER_SERVICE, PEER_SERVICE, health.SERVICE_NAME, grpc_reflection.SERVICE_NAME]
            grpc_reflection.enable_server_reflection(services, self._server)
        for name in ("", LEDGER_SERVICE, PEER_SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        if credentials is not None:
            self.port: int = self._bind(address, lambda: self._server.add_secure_port(address, credentials))
        else:
            self.port = self._bind(address, lambda: self._server.add_insecure_port(address))
        self.client_port: int | None = None
        """The bound client-only port (None: none asked for)."""
        if client_address is not None:
            assert tls is not None
            client_credentials = tls.server_credentials(client_certificates=False)
            self.client_port = self._bind(
                client_address, lambda: self._server.add_secure_port(client_address, client_credentials)
            )
        self._stopped = False
        self._health_down = False

    @staticmethod
    def _bind(address: str, add_port: Callable[[], int]) -> int:
        try:
            port = add_port()
        except RuntimeError as exc:
            raise BindError(f"cannot listen on {address} (in use?): {exc}", address) from exc
        if not port:
            raise BindError(f"cannot listen on {address} (in use?)", address)
        return port

    def start(self) -> None:
        """Start serving; health turns SERVING."""
        self._server.start()
        for name in ("", LEDGER_SERVICE, PEER_SERVICE):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def begin_shutdown(self) -> None:
        """Health NOT_SERVING; waiting client calls end with UNAVAILABLE and new ones are
        refused. Peer calls are still answered until `stop`.

        The health servicer tells every Watch stream (peers hold one open); a stream whose
        write does not complete must not hold the shutdown, so that runs in a thread that
        gets `HEALTH_SHUTDOWN_S` (`stop` then cancels every stream anyway)."""
        if not self._health_down:
            self._health_down = True
            notifier = threading.Thread(
                target=self.health.enter_graceful_shutdown, name="dledger-health-shutdown", daemon=True
            )
            notifier.start()
            notifier.join(HEALTH_SHUTDOWN_S)
            if notifier.is_alive():
                log.warning("health NOT_SERVING not delivered within %.1f s; stopping anyway", HEALTH_SHUTDOWN_S)
        self.core.close()

    def stop(self, grace_s: float = 1.0) -> None:
        """`begin_shutdown`, then stop accepting calls and wait up to `grace_s` for
        running ones. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.begin_shutdown()
        self._server.stop(grace_s).wait()

    def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        """Block until the server stops (True) or the timeout passes (False)."""
        return not self._server.wait_for_termination(timeout_s)
