"""InstallSnapshot under mutual TLS: a follower behind a compacted log is brought back
by the chunked install between members' certificates, and a member certificate cannot
stream chunks that speak as another member."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dledger.config import DLedgerConfig
from dledger.node import DLedgerNode
from dledger.transport.convert import pb
from tests.node.snapmachine import SumMachine
from tests.security.tls_support import GROUP, TlsGroup, make_certs, wait_for

pytestmark = pytest.mark.security


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def group(tmp_path: Path, certs: Path) -> Iterator[tuple[TlsGroup, dict[str, SumMachine]]]:
    machines: dict[str, SumMachine] = {}

    def factory(config: DLedgerConfig, transport: Any) -> DLedgerNode:
        machine = machines[config.self_id] = SumMachine()
        return DLedgerNode(config, transport, state_machine=machine)

    made = TlsGroup(tmp_path / "store", certs, node_factory=factory, enable_snapshot=True, snapshot_threshold=20)
    yield made, machines
    made.close()


def node(group: TlsGroup, node_id: str) -> DLedgerNode:
    found = group.servers[node_id].node
    assert found is not None
    return found


def test_a_follower_behind_a_compacted_log_gets_the_snapshot_over_mutual_tls(
    group: tuple[TlsGroup, dict[str, SumMachine]],
) -> None:
    tls, machines = group
    leader = node(tls, tls.leader())
    for value in range(5):
        leader.append([str(value).encode()]).result(10)
    lagging = next(i for i in tls.ids if i != leader.config.self_id)
    wait_for(lambda: node(tls, lagging).applied_index >= 4, "the follower applied")
    tls.stop(lagging)
    value = 5
    while leader.store.begin_index <= 30:
        for _ in range(10):
            leader.append([str(value).encode()]).result(10)
            value += 1
        wait_for(lambda: leader.applied_index == leader.store.end_index, "apply")
    tls.start(lagging)
    follower = node(tls, lagging)
    wait_for(lambda: follower.applied_index >= leader.store.end_index, "caught up by install", 60)
    assert machines[lagging].loads, "an installed snapshot was loaded"
    assert machines[lagging].state() == machines[leader.config.self_id].state() == (sum(range(value)), value)


def test_a_member_certificate_cannot_stream_chunks_as_another_member(
    group: tuple[TlsGroup, dict[str, SumMachine]],
) -> None:
    tls, _ = group
    leader = tls.leader()
    target, liar = leader, next(i for i in tls.ids if i != leader)
    chunk = pb.InstallSnapshotRequest(
        group=GROUP,
        remote_id=target,
        local_id=leader,  # speaks as the leader, with another member's certificate
        leader_id=leader,
        term=node(tls, target).term,
        last_included_index=3,
        last_included_term=node(tls, target).term,
        total_size=3,
        total_crc32=zlib.crc32(b"abc"),
        data=b"abc",
        chunk_crc32=zlib.crc32(b"abc"),
        next_pos=-1,
    )
    with pytest.raises(grpc.RpcError) as info:
        tls.peer_stub(target, liar).InstallSnapshot(iter([chunk]), timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not list((Path(node(tls, target).config.default_path) / "snapshot").glob("snapshot_*"))
