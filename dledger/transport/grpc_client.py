"""GrpcTransport: the peer protocol over gRPC (one channel per peer, no thread per call).

Channel settings follow FAULTS.md §3: keepalive pings and a short reconnect backoff, so
a peer that restarts or comes back from a partition is reachable again within ~0.1 s,
and every call has a deadline below the election timeout, so a call into a blackhole
fails before the caller's view of the group goes stale.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from functools import partial
from typing import Any

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.messages import (
    HeartBeatRequest,
    InstallSnapshotStream,
    LeadershipTransferRequest,
    PushEntryRequest,
    ReadIndexRequest,
    RequestOrResponse,
    VoteRequest,
)
from dledger.raft.snapshot_dispatch import INSTALL_SNAPSHOT_TIMEOUT_MS
from dledger.security.identity import certificate_identity
from dledger.security.tls import TlsConfig, TlsError
from dledger.transport.convert import MalformedMessage, from_pb, pb_grpc, to_pb

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest gRPC message sent or received (client and server): a push batch is ~4 MiB, a
client batch append up to this."""

CLIENT_CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.enable_retries", 0),
)
"""Options of every channel a member or a client opens (FAULTS.md §3)."""

HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
"""The standing call a transport holds open on every peer channel (see `_keep_spinning`)."""
KEEPER_RETRY_S = 1.0
"""How often a failed standing call to a peer is tried again (on the next send)."""

# request dataclass -> Peer stub method
_METHODS: dict[type[RequestOrResponse], str] = {
    VoteRequest: "Vote",
    HeartBeatRequest: "HeartBeat",
    PushEntryRequest: "Push",
    LeadershipTransferRequest: "LeadershipTransfer",
    ReadIndexRequest: "ReadIndex",
}


log = logging.getLogger(__name__)


def peer_deadline_ms(config: DLedgerConfig) -> int:
    """The deadline of a peer call: `rpc_timeout_ms`, but always below the election
    timeout (`heart_beat_time_interval_ms * max_heart_beat_leak`): an answer that comes
    after `max_heart_beat_leak - 1` missed beats is of no use anyway."""
    heartbeat = config.heart_beat_time_interval_ms
    election = heartbeat * config.max_heart_beat_leak
    below = election - heartbeat if config.max_heart_beat_leak > 1 else election // 2
    return max(1, min(config.rpc_timeout_ms, below))


def open_channel(address: str, extra_options: tuple[tuple[str, Any], ...] = (), credentials: Any = None) -> Any:
    """A channel to `address` with CLIENT_CHANNEL_OPTIONS (+ `extra_options`): TLS with
    `credentials` (`TlsConfig.channel_credentials()`), else plaintext. TLS channels take
    the same options: 1 MiB HTTP/2 frames made TLS slower on a quiet machine
    (docs/BENCHMARKS.md, "Mutual TLS")."""
    options = [*CLIENT_CHANNEL_OPTIONS, *extra_options]
    if credentials is not None:
        return grpc.secure_channel(address, credentials, options=options)
    return grpc.insecure_channel(address, options=options)


def member_tls(config: DLedgerConfig) -> TlsConfig | None:
    """The TLS files of a member's configuration (None: plaintext).

    Raises:
        dledger.security.TlsError: only some of them are set.
    """
    return TlsConfig.from_options(config.tls_cert, config.tls_key, config.tls_ca)


def check_member_certificate(tls: TlsConfig, group: str, self_id: str) -> None:
    """Refuse to start with a certificate that does not name this member (`dledger://
    <group>/<self_id>`): its peers would refuse every call of this member, and it would
    run without a word (a copy of another member's files, another group's).

    Raises:
        dledger.security.TlsError: it names another member, group, a client or nobody.
    """
    named = certificate_identity(tls.read()[0])
    if named.kind != "member" or (named.group, named.name) != (group, self_id):
        said = {"member": f"member {named.group}/{named.name}", "client": f"client {named.name}"}.get(
            named.kind, "no member or client"
        )
        raise TlsError(
            f"the TLS certificate {tls.cert} names {said}, not member {group}/{self_id}: its peers would refuse "
            "this member (give it its own certificate: `dledger certs init` makes one per member)"
        )


def rpc_error(exc: BaseException, target: str) -> DLedgerError:
    """The DLedgerError for a failed call: TIMEOUT for a missed deadline, NETWORK_ERROR
    for everything else the transport reports."""
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        status = exc.code()
        details = exc.details() if hasattr(exc, "details") else ""
        code = ResponseCode.TIMEOUT if status == grpc.StatusCode.DEADLINE_EXCEEDED else ResponseCode.NETWORK_ERROR
        return DLedgerError(code, f"{target}: {status.name} {details or ''}".rstrip())
    return DLedgerError(ResponseCode.NETWORK_ERROR, f"{target}: {type(exc).__name__}: {exc}")


class GrpcTransport:
    """Implements `dledger.transport.base.Transport` over the `dledger.v1.Peer` service.

    Channels open lazily, one per peer, and stay open (gRPC reconnects them). `send`
    never blocks on the network: it starts the call with the stub's `.future()` and
    converts the answer in gRPC's callback thread.

    Args:
        config: the member's configuration (peers, timings, TLS files: with them the
            channels speak mutual TLS, presenting the member's certificate).
        deadline_ms: the per-call deadline (default: `peer_deadline_ms(config)`).
        channel_options: extra channel options (tests).

    Raises:
        dledger.security.TlsError: a TLS file cannot be read, the key is not the
            certificate's, or the certificate does not name this member of this group.
    """

    def __init__(
        self,
        config: DLedgerConfig,
        *,
        deadline_ms: int | None = None,
        channel_options: tuple[tuple[str, Any], ...] = (),
    ) -> None:
        self.config = config
        self.peers = config.peer_map
        self.deadline_s = (deadline_ms if deadline_ms is not None else peer_deadline_ms(config)) / 1000.0
        self._channel_options = channel_options
        self._lock = threading.RLock()  # a standing call that fails at once ends inside _keep_spinning
        self._stubs: dict[str, Any] = {}
        self._channels: dict[str, Any] = {}
        self._keepers: dict[str, Any] = {}  # peer -> the standing health Watch call
        self._keeper_tried: dict[str, float] = {}
        self._closed = False
        self._tls = member_tls(config)
        # the watch before the read: a change in between is seen at the first look
        self._tls_watch = self._tls.watch() if self._tls is not None else None
        self._credentials = self._tls.matching_credentials() if self._tls is not None else None
        if self._tls is not None:
            check_member_certificate(self._tls, config.group, config.self_id)

    def _renew_credentials(self) -> None:
        """The member's TLS files changed: later calls go over new channels presenting
        the new certificate and trusting the new CA; the old channels are closed, which
        fails their calls in flight (Raft sends again). Files that cannot be read, or a
        key that is not the certificate's (a rotation half done), keep the old ones."""
        assert self._tls is not None
        try:
            credentials = self._tls.matching_credentials()
        except TlsError as exc:
            log.error("%s; the member's connections keep the TLS files read before", exc)
            return
        log.info("TLS files changed: reconnecting to the peers with them")
        with self._lock:
            if self._closed:
                return
            self._credentials = credentials
            self._keeper_tried.clear()
            keepers, channels = self._drop_channels()
        _close(keepers, channels)

    def _drop_channels(self) -> tuple[list[Any], list[Any]]:
        """Under the lock: forget every channel; (their standing calls, the channels)."""
        keepers, channels = list(self._keepers.values()), list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        self._keepers.clear()
        return keepers, channels

    def _stub(self, target_id: str) -> Any:
        if self._tls_watch is not None and self._tls_watch.changed():
            self._renew_credentials()
        stub = self._stubs.get(target_id)
        if stub is not None and target_id in self._keepers:
            return stub
        with self._lock:
            if self._closed:
                raise DLedgerError(ResponseCode.NETWORK_ERROR, "transport closed")
            stub = self._stubs.get(target_id)
            if stub is None:
                address = self.peers.get(target_id)
                if address is None:
                    raise DLedgerError(ResponseCode.NETWORK_ERROR, f"{target_id} is not a member of the group")
                channel = open_channel(address, self._channel_options, self._credentials)
                self._channels[target_id] = channel
                stub = self._stubs[target_id] = pb_grpc.PeerStub(channel)
            self._keep_spinning(target_id)
            return stub

    def _keep_spinning(self, target_id: str) -> None:
        """Under the lock: hold one idle call open on the peer's channel (a health Watch,
        for which the server keeps no thread), unless one is open or was tried within
        KEEPER_RETRY_S. A sync gRPC channel runs a completion thread only while it has
        calls; without a standing call every push after a quiet moment (one in flight at
        a time) would start a new thread on the way."""
        if target_id in self._keepers:
            return
        now = time.monotonic()
        if now - self._keeper_tried.get(target_id, -KEEPER_RETRY_S) < KEEPER_RETRY_S:
            return
        self._keeper_tried[target_id] = now
        watch = self._channels[target_id].unary_stream(
            HEALTH_WATCH, health_pb2.HealthCheckRequest.SerializeToString, health_pb2.HealthCheckResponse.FromString
        )
        call = watch(health_pb2.HealthCheckRequest(service=""))
        self._keepers[target_id] = call
        call.add_done_callback(partial(self._keeper_ended, target_id))

    def _keeper_ended(self, target_id: str, call: Any) -> None:
        """Done callback of a standing call (gRPC passes the call): forget it, so that
        the next send opens another one."""
        with self._lock:
            if self._keepers.get(target_id) is call:
                del self._keepers[target_id]

    def send(self, target_id: str, request: RequestOrResponse) -> Future[RequestOrResponse]:
        """Send a Vote, HeartBeat, Push or LeadershipTransfer request to `target_id`.

        The future completes with the peer's response, or fails with
        DLedgerError(TIMEOUT) after the deadline and DLedgerError(NETWORK_ERROR) for any
        other transport failure (peer down, connection refused, transport closed).
        """
        result: Future[RequestOrResponse] = Future()
        method = _METHODS.get(type(request))
        if isinstance(request, InstallSnapshotStream):
            method = "InstallSnapshot"
        if method is None:
            result.set_exception(DLedgerError(ResponseCode.UNSUPPORTED, f"cannot send {type(request).__name__}"))
            return result
        try:
            if isinstance(request, InstallSnapshotStream):
                chunks = (to_pb(chunk) for chunk in request.chunks)  # read lazily, on gRPC's thread
                call = self._stub(target_id).InstallSnapshot.future(chunks, timeout=INSTALL_SNAPSHOT_TIMEOUT_MS / 1000)
            else:
                call = getattr(self._stub(target_id), method).future(to_pb(request), timeout=self.deadline_s)
        except DLedgerError as exc:
            result.set_exception(exc)
            return result
        except Exception as exc:  # grpc raises e.g. ValueError on a closed channel
            result.set_exception(rpc_error(exc, target_id))
            return result

        def done(call_future: Any) -> None:
            try:
                answer = call_future.result()
            except BaseException as exc:  # grpc.RpcError, FutureCancelledError
                result.set_exception(rpc_error(exc, target_id))
                return
            try:
                result.set_result(from_pb(answer))
            except (MalformedMessage, TypeError) as exc:
                result.set_exception(DLedgerError(ResponseCode.NETWORK_ERROR, f"{target_id}: bad answer: {exc}"))

        call.add_done_callback(done)
        return result

    def close(self) -> None:
        """Close every channel; later sends fail with NETWORK_ERROR. Idempotent."""
        with self._lock:
            self._closed = True
            keepers, channels = self._drop_channels()
        _close(keepers, channels)


def _close(keepers: list[Any], channels: list[Any]) -> None:
    """Cancel standing calls, then close channels (outside the transport's lock)."""
    for call in keepers:
        call.cancel()
    for channel in channels:
        channel.close()
