"""Query under mutual TLS: any reader may read, but a RAFT_LOG query appends entries,
so it needs a role that may append."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dledger.client import ReadMode
from dledger.codes import DLedgerError, ResponseCode
from dledger.transport.convert import pb
from tests.security.tls_support import TlsGroup, make_certs

pytestmark = pytest.mark.security


@pytest.fixture
def group(tmp_path: Path) -> Iterator[TlsGroup]:
    made = TlsGroup(tmp_path / "store", make_certs(tmp_path / "tls"))
    yield made
    made.close()


def test_a_reader_may_query_but_not_through_the_log(group: TlsGroup) -> None:
    leader = group.leader()
    stub = group.ledger_stub(leader, "client-reader")
    end = group.servers[leader].node.status().end_index  # type: ignore[union-attr]
    answer = stub.Query(pb.QueryRequest(requests=[b"get"]), timeout=10)
    assert answer.code == ResponseCode.UNSUPPORTED  # let in; these members run no state machine
    with pytest.raises(grpc.RpcError) as err:
        stub.Query(pb.QueryRequest(requests=[b"get"], mode=pb.QueryRequest.RAFT_LOG), timeout=10)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert group.servers[leader].node.status().end_index == end  # type: ignore[union-attr]
    with group.client("writer") as client, pytest.raises(DLedgerError) as refused:
        client.query(b"get", ReadMode.RAFT_LOG)
    assert refused.value.code == ResponseCode.UNSUPPORTED  # a writer passes the role check
