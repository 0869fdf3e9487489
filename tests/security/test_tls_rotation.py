"""Certificates, keys and the CA rotated under running members and a running client,
without a restart: each member's server takes its files again for new connections, its
connections to its peers are made again with them (`dledger.security.tls`,
`GrpcTransport`), and so are the client's (`dledger.client.members`)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import grpc
import pytest

from dledger.client import DLedgerClient
from dledger.codes import DLedgerError
from dledger.security.tls import TlsConfig
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.security.tls_support import GROUP, TlsGroup, make_certs, wait_for

pytestmark = pytest.mark.security

FRESH_CONNECTION = (("grpc.use_local_subchannel_pool", 1),)
"""A channel of its own connection (a new TLS handshake), not one shared with others."""


def _replace(path: Path, data: bytes) -> None:
    """Write `path` as an operator's tooling does: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o600)
    tmp.replace(path)


def _answers(group: TlsGroup, node_id: str, tls: TlsConfig) -> bool:
    """Whether a new connection with `tls` gets a Metadata answer from `node_id`."""
    with open_channel(group.address(node_id), FRESH_CONNECTION, tls.channel_credentials()) as channel:
        try:
            pb_grpc.LedgerStub(channel).Metadata(pb.MetadataRequest(), timeout=5)
        except grpc.RpcError:
            return False
    return True


def _reaches(client: DLedgerClient, node_id: str) -> bool:
    """Whether `client` gets `node_id`'s metadata (over its channel to that member)."""
    try:
        client.metadata(node_id)
    except DLedgerError:
        return False
    return True


def test_a_ca_is_rotated_under_running_members(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old, new = make_certs(tmp_path / "old"), make_certs(tmp_path / "new")  # two CAs
    live = tmp_path / "live"
    shutil.copytree(old, live)
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes((old / "ca.crt").read_bytes() + (new / "ca.crt").read_bytes())
    old_reader = TlsConfig.in_directory(old, "client-reader")
    new_reader = TlsConfig.in_directory(new, "client-reader")
    group = TlsGroup(tmp_path / "store", live)
    client_live = tmp_path / "client"  # the files of a client that runs through the whole rotation
    client_live.mkdir()
    for name in ("client-writer.crt", "client-writer.key", "ca.crt"):
        shutil.copy(old / name, client_live / name)
    running = DLedgerClient(group.peers, GROUP, 10.0, tls=TlsConfig.in_directory(client_live, "client-writer"))
    try:
        group.leader()
        running.append(b"before the rotation")
        assert _answers(group, "n0", old_reader) and not _answers(group, "n0", new_reader)
        # 1. the members trust both CAs
        _replace(live / "ca.crt", bundle.read_bytes())
        _replace(client_live / "ca.crt", bundle.read_bytes())
        new_cert_both_cas = TlsConfig(new_reader.cert, new_reader.key, str(bundle))
        for node_id in group.ids:
            wait_for(lambda n=node_id: _answers(group, n, new_cert_both_cas), f"{node_id} trusting the new CA")
        # 2. each member's key and certificate from the new CA. The key comes first: until
        # the certificate follows they do not match, and the member keeps its old pair
        _replace(live / "n0.key", (new / "n0.key").read_bytes())
        old_cert_both_cas = TlsConfig(old_reader.cert, old_reader.key, str(bundle))

        def server_kept_its_pair() -> bool:
            # a new connection first: the server looks at its files as one arrives
            return _answers(group, "n0", old_cert_both_cas) and any(
                r.name == "dledger.security.tls" and "is not the key of the certificate" in r.getMessage()
                for r in caplog.records
            )

        with caplog.at_level(logging.ERROR, logger="dledger.security.tls"):
            wait_for(server_kept_its_pair, "n0 keeping its old pair while its new key has no certificate yet")
        for stem, directory in [*((node_id, live) for node_id in group.ids), ("client-writer", client_live)]:
            _replace(directory / f"{stem}.key", (new / f"{stem}.key").read_bytes())
            _replace(directory / f"{stem}.crt", (new / f"{stem}.crt").read_bytes())
        for node_id in group.ids:
            wait_for(lambda n=node_id: _answers(group, n, new_reader), f"{node_id} presenting its new certificate")
        # 3. the old CA is no longer trusted
        _replace(live / "ca.crt", (new / "ca.crt").read_bytes())
        _replace(client_live / "ca.crt", (new / "ca.crt").read_bytes())
        old_cert_new_ca = TlsConfig(old_reader.cert, old_reader.key, str(bundle))
        for node_id in group.ids:
            wait_for(lambda n=node_id: not _answers(group, n, old_cert_new_ca), f"{node_id} refusing the old CA")
        # 4. a member restarted on the new files is reached by the others: their own
        # connections present the new certificates and trust the new CA only
        leader = group.leader()
        restarted = next(i for i in group.ids if i != leader)
        group.stop(restarted)
        group.start(restarted)
        with group.client("writer", new) as client:
            index = client.append(b"after the rotation")
        server = group.servers[restarted]
        wait_for(lambda: server.node is not None and server.node.committed_index >= index, f"{restarted} catching up")
        assert _answers(group, restarted, new_reader) and not _answers(group, restarted, old_reader)
        # 5. the client that ran through it all reaches the restarted member (which
        # knows only the new CA) over a connection made with its new files
        wait_for(lambda: _reaches(running, restarted), f"the running client reaching the restarted {restarted}")
        assert running.get(index, node_id=restarted)[0].body == b"after the rotation"
    finally:
        running.close()
        group.close()
