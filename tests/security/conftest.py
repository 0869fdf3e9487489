"""Real in-process members for the hostile-input tests: three `DLedgerServer`s (a
`DLedgerNode` behind a real `GrpcServer`) on free loopback ports, file stores in
tmp_path, and the generated `dledger.v1.Peer` / `Ledger` stubs as the hostile client."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import MAGIC_NOOP
from dledger.server import DLedgerServer
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from dledger.transport.grpc_server import ServiceLimits

TIMINGS: dict[str, Any] = {
    "heart_beat_time_interval_ms": 200,
    "max_heart_beat_leak": 3,
    "min_vote_interval_ms": 100,
    "max_vote_interval_ms": 400,
    "max_push_timeout_ms": 500,
    "rpc_timeout_ms": 400,
    "commit_push_interval_ms": 100,
    "max_wait_ack_time_ms": 5000,
}
GROUP = "g"
WAIT_S = 30.0


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll `predicate` until it returns something truthy; fail naming `what` after a
    generous deadline (never a speed assertion)."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        pause.wait(0.01)


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class EscapeCounter(logging.Handler):
    """Counts log records that carry a traceback or come from a failed handler: an
    exception that escaped a request handler (gRPC logs "Exception calling application"
    and the services log `log.exception`)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.warnings: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info is not None or "Exception" in record.getMessage():
            self.records.append(record)
        elif record.levelno >= logging.WARNING:
            self.warnings.append(record)

    def escapes(self) -> list[str]:
        """The offending records, formatted."""
        return [f"{r.name}: {r.getMessage()}" for r in self.records]


class Group:
    """Three members n0..n2 on loopback, each a real gRPC server over a file store.

    Args:
        base: the store base directory.
        limits: the servers' limits (default ServiceLimits()).
        overrides: DLedgerConfig fields beyond TIMINGS.
    """

    def __init__(self, base: Path, limits: ServiceLimits | None = None, **overrides: Any) -> None:
        self.base = base
        self.limits = limits
        self.ids = ["n0", "n1", "n2"]
        ports = free_ports(3)
        self.addresses = {node_id: f"127.0.0.1:{port}" for node_id, port in zip(self.ids, ports, strict=True)}
        self.peers = ";".join(f"{i}-{a}" for i, a in self.addresses.items())
        self.options = {**TIMINGS, **overrides}
        self.servers: dict[str, DLedgerServer] = {}
        self._channels: dict[str, Any] = {}
        for node_id in self.ids:
            self.start(node_id)

    def config(self, node_id: str) -> DLedgerConfig:
        """The member's configuration."""
        store = member_store_config(data_file_size=4 << 20, index_file_size=32 * 4096)
        return DLedgerConfig(
            group=GROUP, self_id=node_id, peers=self.peers, store_base_dir=str(self.base), store=store, **self.options
        )

    def start(self, node_id: str) -> DLedgerServer:
        """Start (or restart) a member."""
        server = DLedgerServer(self.config(node_id), limits=self.limits).start()
        self.servers[node_id] = server
        return server

    def stop(self, node_id: str) -> None:
        """Shut a member down cleanly."""
        server = self.servers.pop(node_id, None)
        if server is not None:
            server.shutdown(grace_s=0.5)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        for node_id in list(self.servers):
            self.stop(node_id)

    # -- the hostile client

    def channel(self, node_id: str) -> Any:
        if node_id not in self._channels:
            self._channels[node_id] = open_channel(self.addresses[node_id])
        return self._channels[node_id]

    def peer_stub(self, node_id: str) -> Any:
        """A raw `dledger.v1.Peer` stub to the member."""
        return pb_grpc.PeerStub(self.channel(node_id))

    def ledger_stub(self, node_id: str) -> Any:
        """A raw `dledger.v1.Ledger` stub to the member."""
        return pb_grpc.LedgerStub(self.channel(node_id))

    # -- state

    def node(self, node_id: str) -> Any:
        node = self.servers[node_id].node
        assert node is not None
        return node

    def leader(self) -> str | None:
        """The member all running members agree leads, if any."""
        views = {self.node(i).leader_id for i in self.servers}
        if len(views) != 1:
            return None
        (leader,) = views
        if leader is None or leader not in self.servers or self.node(leader).leader_id != leader:
            return None
        return leader if self.node(leader).status().role == "LEADER" else None

    def wait_leader(self) -> str:
        leader: str = wait_for(self.leader, "a leader all members agree on")
        return leader

    def append(self, bodies: list[bytes], timeout_s: float = WAIT_S) -> int:
        """Append through the leader with the plain stub and return the first index:
        refusals (nothing appended) are retried; an unknown outcome (WAIT_QUORUM_ACK_TIMEOUT,
        TERM_CHANGED on a loaded machine) is resolved by reading the log once it settled,
        so the bodies are never appended twice."""
        request = pb.AppendRequest(group=GROUP, bodies=bodies)

        def attempt() -> int | None:
            leader = self.leader()
            if leader is None:
                return None
            try:
                answer = self.ledger_stub(leader).Append(request, timeout=10)
            except grpc.RpcError:
                return None
            if answer.code == 200:
                return int(answer.first_index) + 1  # truthy even for index 0
            if answer.code in (501, 502):
                return self._resolve(bodies)
            assert answer.code in (404, 503, 505, 506, 416), f"append refused: {answer.code} {answer.message}"
            return None

        return int(wait_for(attempt, "an append to succeed", timeout_s)) - 1

    def settled_end(self) -> int:
        """The leader's ledger end once every member committed all of it."""

        def settled() -> int | None:
            leader = self.leader()
            if leader is None:
                return None
            end = self.node(leader).status().end_index
            done = all(self.node(m).committed_index == end for m in self.servers)
            return end + 2 if done else None  # truthy for -1

        return int(wait_for(settled, "every member to commit the leader's whole log")) - 2

    def _resolve(self, bodies: list[bytes]) -> int | None:
        """After an unknown outcome: first index + 1 when `bodies` are at the end of the
        log (a new leader's NOOPs may follow them), else None (not appended)."""
        end = self.settled_end()
        log = self.committed(self.wait_leader(), end) if end >= 0 else []
        n = len(bodies)
        for first in range(len(log) - n, max(-1, len(log) - n - 4), -1):
            if first >= 0 and log[first : first + n] == bodies and not any(log[first + n :]):
                return first + 1
        return None

    def committed(self, node_id: str, upto: int) -> list[bytes]:
        """Bodies 0..upto as the member serves them (committed only)."""
        return [bytes(e.body) for e in self.committed_entries(node_id, upto)]

    def written(self, node_id: str, first: int, last: int) -> list[bytes]:
        """The bodies clients wrote at indexes first..last (committed), without the NOOPs a
        new leader may append to commit its predecessors' entries."""
        entries = self.committed_entries(node_id, last)[first:]
        return [bytes(e.body) for e in entries if e.magic != MAGIC_NOOP]

    def committed_entries(self, node_id: str, upto: int) -> list[pb.Entry]:
        """Entries 0..upto as the member serves them (committed only)."""
        entries: list[pb.Entry] = []
        while len(entries) <= upto:
            # wait_for_ready: the channel to a member that was stopped may still be in its
            # reconnect backoff just after the member came back (failed once under load)
            answer = self.ledger_stub(node_id).Get(
                pb.GetRequest(group=GROUP, index=len(entries), count=upto + 1 - len(entries)),
                timeout=10,
                wait_for_ready=True,
            )
            assert answer.code == 200, f"get {len(entries)} from {node_id}: {answer.code} {answer.message}"
            entries.extend(answer.entries)
        return entries


@pytest.fixture
def escapes() -> Iterator[EscapeCounter]:
    """Records every logged traceback (gRPC's own and the services')."""
    counter = EscapeCounter()
    root = logging.getLogger()
    old_level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(counter)
    try:
        yield counter
    finally:
        root.removeHandler(counter)
        root.setLevel(old_level)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    """A running three-member group with a leader."""
    g = Group(tmp_path / "store")
    try:
        g.wait_leader()
        yield g
    finally:
        g.close()
