"""DLedgerServer: one member as a process: configuration -> gRPC transport + DLedgerNode +
gRPC server (+ Prometheus metrics), with a clean shutdown on SIGTERM / SIGINT.

Shutdown order: health turns NOT_SERVING and waiting client calls fail with gRPC
UNAVAILABLE ("shutting down; the outcome is unknown"); the server stops accepting calls
and lets running ones finish for a short grace period; the node stops its threads, fails
its pending appends, flushes and writes its checkpoint; the peer channels close.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from dledger.config import DLedgerConfig
from dledger.node import DLedgerNode
from dledger.security.tokens import TokenFile
from dledger.statemachine import StateMachine
from dledger.transport.grpc_client import GrpcTransport, member_tls
from dledger.transport.grpc_server import BindError, GrpcServer, ServiceLimits

log = logging.getLogger(__name__)
SERVING_LOG = "serving on"
"""The words of the log line a member writes once its port is bound and it serves
(`dledger cluster` tells its own members from another cluster's by it)."""

NodeFactory = Callable[[DLedgerConfig, GrpcTransport], DLedgerNode]


class DLedgerServer:
    """One member with its gRPC server.

    Args:
        config: the member's configuration; it listens on its own peer address.
        listen_address: listen here instead (e.g. `0.0.0.0:20911`).
        limits: gRPC worker and size limits (default: `ServiceLimits.of(config)`).
        metrics_port: serve Prometheus metrics on this port (None: off).
        node_factory: builds the node (tests); default `DLedgerNode(config, transport)`.
        reflection: serve gRPC server reflection too.
        repair: let the store's recovery cut a damaged log (see DLedgerNode).
        state_machine: the state machine the node applies committed entries to; default
            the one `config.state_machine` names (none: a plain log).

    Raises:
        ConfigError: `config.state_machine` cannot be loaded (dledger.statemachine.loader).

    With `config.tls_cert` / `tls_key` / `tls_ca` set the member serves and dials mutual
    TLS only (see `dledger.transport.guard` for who may call what).
    """

    def __init__(
        self,
        config: DLedgerConfig,
        *,
        listen_address: str | None = None,
        limits: ServiceLimits | None = None,
        metrics_port: int | None = None,
        node_factory: NodeFactory | None = None,
        reflection: bool = False,
        repair: bool = False,
        state_machine: StateMachine | None = None,
    ) -> None:
        self.config = config
        if state_machine is None and config.state_machine:
            from dledger.statemachine.loader import load_state_machine

            state_machine = load_state_machine(config.state_machine)
        self.state_machine = state_machine
        self.listen_address = listen_address or config.self_address
        self.limits = limits
        self.metrics_port = metrics_port
        self.reflection = reflection
        self._node_factory: NodeFactory = node_factory or (
            lambda cfg, transport: DLedgerNode(cfg, transport, repair=repair, state_machine=self.state_machine)
        )
        self.transport: GrpcTransport | None = None
        self.node: DLedgerNode | None = None
        self.grpc: GrpcServer | None = None
        self._metrics: Any = None
        self._shutdown_lock = threading.Lock()
        self._shut_down = False
        self._main_thread: int | None = None

    @property
    def port(self) -> int:
        """The port the gRPC server listens on (after `start`)."""
        if self.grpc is None:
            raise RuntimeError("not started")
        return self.grpc.port

    def start(self) -> DLedgerServer:
        """Open the store, bind the port and start the node and the server.

        Raises:
            BindError: the service or the metrics port cannot be bound (nothing is
                left running).
            DLedgerError, OSError: the store cannot be opened (e.g. CorruptStoreError).
            TlsError: the TLS files cannot be read (nothing is left running).
            TokenFileError: the tokens file cannot be read or is malformed.
        """
        tls = member_tls(self.config)
        if tls is not None:
            tls.read()  # a missing or unreadable file fails before the store opens
        tokens = TokenFile(self.config.tokens_file) if self.config.tokens_file else None
        self.transport = GrpcTransport(self.config)
        if self.state_machine is not None:
            name = self.config.state_machine or "given"
            log.info("state machine: %s (%s)", name, type(self.state_machine).__name__)
        try:
            self.node = self._node_factory(self.config, self.transport)
            self.grpc = GrpcServer(
                self.node,
                self.listen_address,
                self.limits,
                tls=tls,
                reflection=self.reflection,
                client_address=self.config.client_address,
                tokens=tokens,
            )
            if self.metrics_port is not None:
                if tls is not None:
                    self.node.metrics.watch_certificate(tls.cert)
                self._start_metrics(self.metrics_port)
        except BaseException:
            if self.node is not None:
                self.node.shutdown()
            self.transport.close()
            raise
        self.node.start()
        self.grpc.start()
        log.info(
            "%s of group %s " + SERVING_LOG + " %s (%s, store %s)",
            self.config.self_id,
            self.config.group,
            self.listen_address,
            "mutual TLS" if tls is not None else "plaintext",
            self.config.default_path,
        )
        if tokens is not None:
            log.info(
                "clients with bearer tokens: %s (TLS, %d tokens, the file read again when it changes)",
                self.config.client_address,
                len(tokens),
            )
        return self

    def _start_metrics(self, port: int) -> None:
        try:
            from dledger.metrics import start_metrics_server
        except ImportError:  # pragma: no cover - metrics are part of the package
            log.warning("dledger.metrics is not available; no metrics served")
            return
        assert self.node is not None
        try:
            self._metrics = start_metrics_server(self.node, port)
        except OSError as exc:
            raise BindError(f"metrics port {port} is already in use ({exc.strerror or exc})") from exc
        log.info("metrics on http://127.0.0.1:%d/metrics", self.metrics_bound_port)

    @property
    def metrics_bound_port(self) -> int | None:
        """The port metrics are served on (the one the system chose for port 0), None
        when not serving metrics."""
        if self._metrics is None:
            return None
        return int(getattr(self._metrics, "server_port", None) or self._metrics.server_address[1])

    def shutdown(self, grace_s: float = 2.0) -> None:
        """Stop serving and shut the node down (flush + checkpoint). Idempotent."""
        with self._shutdown_lock:
            if self._shut_down:
                return
            self._shut_down = True
        if self.grpc is not None:
            self.grpc.begin_shutdown()
            self.grpc.stop(grace_s)
        if self.node is not None:
            self.node.shutdown()
        if self.transport is not None:
            self.transport.close()
        if self._metrics is not None:
            self._metrics.shutdown()
        log.info("%s shut down", self.config.self_id)

    def run_until_signal(self, grace_s: float = 2.0) -> int:
        """Start, serve until SIGTERM or SIGINT (or `request_stop`), shut down; returns
        the signal number. Call it from the main thread instead of `start`.

        The two signals are blocked before any thread starts, so every thread (gRPC's
        and the node's inherit the mask) leaves them pending, and the main thread takes
        them with `sigwait`. A Python handler would not do: a signal delivered to another
        thread does not wake a main thread blocked on a lock. During shutdown both get
        their default action back, so a second Ctrl-C ends the process at once.
        """
        signals = {signal.SIGINT, signal.SIGTERM}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
        try:
            self._main_thread = threading.main_thread().ident
            self.start()
            signum = signal.sigwait(signals)
            log.info("%s: %s, shutting down", self.config.self_id, signal.Signals(signum).name)
            for sig in signals:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)
            self.shutdown(grace_s)
            return int(signum)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def request_stop(self) -> None:
        """Make `run_until_signal` shut down and return (from any thread)."""
        if self._main_thread is not None:
            signal.pthread_kill(self._main_thread, signal.SIGTERM)
