"""Helpers of the TLS tests: certificates made by `dledger certs init`'s code in a tmp
directory, and groups of real in-process `DLedgerServer`s speaking mutual TLS on
loopback."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dledger.client import DLedgerClient
from dledger.config import DLedgerConfig, member_store_config
from dledger.security.certs import CertPlan, write_dev_certs
from dledger.security.tls import TlsConfig
from dledger.server import DLedgerServer, NodeFactory
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import free_ports

GROUP = "g"
CLIENTS = {"admin": "admin", "writer": "write", "reader": "read"}
TIMINGS: dict[str, Any] = {
    "heart_beat_time_interval_ms": 200,
    "max_heart_beat_leak": 3,
    "min_vote_interval_ms": 50,
    "max_vote_interval_ms": 250,
    "max_push_timeout_ms": 1000,
    "rpc_timeout_ms": 1000,
}
WAIT_S = 30.0


def make_certs(directory: Path, group: str = GROUP, members: int = 3) -> Path:
    """A CA, members n0.. and the clients of CLIENTS in `directory`."""
    write_dev_certs(directory, CertPlan(group, tuple(f"n{k}" for k in range(members)), dict(CLIENTS)))
    return directory


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll `check` until it returns something true; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class TlsGroup:
    """Three in-process members with mutual TLS (certificates from `certs`); with
    `tokens_file`, each also serves a client port for bearer tokens (`client_peers`)."""

    def __init__(
        self,
        base: Path,
        certs: Path,
        n: int = 3,
        node_factory: NodeFactory | None = None,
        tokens_file: Path | None = None,
        **overrides: Any,
    ) -> None:
        self.base = base
        self.certs = certs
        self.node_factory = node_factory
        self.overrides = overrides
        self.tokens_file = tokens_file
        ports = free_ports(2 * n if tokens_file else n)
        self.ids = [f"n{k}" for k in range(n)]
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(self.ids, ports[:n], strict=True))
        self.client_addresses = {i: f"127.0.0.1:{p}" for i, p in zip(self.ids, ports[n:], strict=False)}
        self.client_peers = ";".join(f"{i}-{a}" for i, a in self.client_addresses.items())
        self.servers: dict[str, DLedgerServer] = {}
        for node_id in self.ids:
            self.start(node_id)

    def config(self, node_id: str) -> DLedgerConfig:
        tls = TlsConfig.in_directory(self.certs, node_id)
        return DLedgerConfig(
            group=GROUP,
            self_id=node_id,
            peers=self.peers,
            store_base_dir=str(self.base),
            store=member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096),
            tls_cert=tls.cert,
            tls_key=tls.key,
            tls_ca=tls.ca,
            client_address=self.client_addresses.get(node_id),
            tokens_file=str(self.tokens_file) if self.tokens_file else None,
            **{**TIMINGS, **self.overrides},
        )

    def start(self, node_id: str) -> DLedgerServer:
        """Start (or restart) member `node_id`."""
        server = DLedgerServer(self.config(node_id), node_factory=self.node_factory).start()
        self.servers[node_id] = server
        return server

    def stop(self, node_id: str) -> None:
        self.servers.pop(node_id).shutdown(0.5)

    def address(self, node_id: str) -> str:
        return self.servers[node_id].config.self_address

    def leader(self) -> str:
        """The id of the only leader, once every member knows it (waits)."""

        def one() -> str | None:
            nodes = [s.node for s in self.servers.values() if s.node is not None]
            leaders = [n.config.self_id for n in nodes if n.is_leader]
            if len(leaders) != 1 or any(n.leader_id != leaders[0] for n in nodes):
                return None
            return leaders[0]

        found: str = wait_for(one, "a single leader")
        return found

    def client(self, name: str, certs: Path | None = None) -> DLedgerClient:
        """A client with the certificate `client-<name>` (from `certs`, default ours)."""
        return DLedgerClient(self.peers, GROUP, 10.0, tls=TlsConfig.in_directory(certs or self.certs, f"client-{name}"))

    def channel(self, node_id: str, stem: str, certs: Path | None = None) -> Any:
        """A raw channel to a member presenting certificate `stem` (e.g. "n1", "client-admin")."""
        tls = TlsConfig.in_directory(certs or self.certs, stem)
        return open_channel(self.address(node_id), credentials=tls.channel_credentials())

    def peer_stub(self, node_id: str, stem: str) -> Any:
        return pb_grpc.PeerStub(self.channel(node_id, stem))

    def ledger_stub(self, node_id: str, stem: str) -> Any:
        return pb_grpc.LedgerStub(self.channel(node_id, stem))

    def metadata(self, node_id: str) -> Any:
        return self.ledger_stub(node_id, "client-reader").Metadata(pb.MetadataRequest(), timeout=5)

    def close(self) -> None:
        for server in self.servers.values():
            server.shutdown(0.5)
