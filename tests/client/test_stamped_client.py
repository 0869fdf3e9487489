"""Clients cannot send stamped records (record layout version 2, written by the leader
only): a real one-member group over loopback gRPC refuses them on Append and
AppendStream with UNEXPECTED_ARGUMENT and appends nothing; a plain entry's body that
happens to start with byte 2 is still opaque and accepted; a member whose log holds
stamped entries serves them as their records."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.client import DLedgerClient
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
from dledger.record import encode_record, stamp_record_body, with_records
from dledger.server import DLedgerServer
from dledger.store import MmapLogStore
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import free_ports

pytestmark = pytest.mark.unit

REFUSAL = "stamped records (version 2) are written by the leader, not sent by clients"


@pytest.fixture(scope="module")
def member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[DLedgerServer, DLedgerClient]]:
    (port,) = free_ports(1)
    peers = f"n0-127.0.0.1:{port}"
    store = member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096)
    base = Path(tmp_path_factory.mktemp("stamped"))
    server = DLedgerServer(DLedgerConfig(group="g", self_id="n0", peers=peers, store_base_dir=str(base), store=store))
    server.start()
    client = DLedgerClient(peers, "g", timeout_s=15.0)
    try:
        client.append(b"first")  # waits for the member to lead
        yield server, client
    finally:
        client.close()
        server.shutdown()


def _stub(client: DLedgerClient) -> tuple[object, pb_grpc.LedgerStub]:
    channel = open_channel(client.discover().address)
    return channel, pb_grpc.LedgerStub(channel)


GOOD = encode_record(b"value", b"key", 1_700_000_000_000, [("h", b"1")])
STAMPED = stamp_record_body(GOOD, 7, 0, 0, 2, 1_700_000_000_001)


def test_append_refuses_a_stamped_body_and_appends_nothing(member: tuple[DLedgerServer, DLedgerClient]) -> None:
    _, client = member
    end = client.metadata().end_index
    channel, stub = _stub(client)
    try:
        answer = stub.Append(pb.AppendRequest(group="g", bodies=[GOOD, STAMPED], magic=MAGIC_RECORD), timeout=10)
        replies = list(
            stub.AppendStream(iter([pb.AppendRequest(group="g", bodies=[STAMPED], magic=MAGIC_RECORD)]), timeout=10)
        )
    finally:
        channel.close()  # type: ignore[attr-defined]
    assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert f"body 1: {REFUSAL}" in answer.message and "nothing was appended" in answer.message
    assert [(r.code, REFUSAL in r.message) for r in replies] == [(ResponseCode.UNEXPECTED_ARGUMENT, True)]
    with pytest.raises(DLedgerError, match=re.escape(REFUSAL)) as err:
        client.append_batch([STAMPED], MAGIC_RECORD)
    assert err.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert client.metadata().end_index == end
    index = client.append_batch([GOOD], MAGIC_RECORD).first_index  # the member still takes good records
    assert index == end + 1
    assert client.get_record(index).value == b"value"


def test_a_plain_body_starting_with_byte_2_is_opaque(member: tuple[DLedgerServer, DLedgerClient]) -> None:
    _, client = member
    index = client.append_batch([STAMPED], MAGIC_NORMAL).first_index
    entry = client.get(index)[0]
    assert (entry.magic, entry.body) == (MAGIC_NORMAL, STAMPED)


def test_a_member_serves_stamped_entries_as_their_records(tmp_path: Path) -> None:
    """A member whose log holds stamped entries (as a leader wrote them) serves them as
    the records they carry: Get with decoded records, the client's get_record(s), and
    ReadCommitted's record columns; the raw body keeps the stamp."""
    (port,) = free_ports(1)
    peers = f"n0-127.0.0.1:{port}"
    store = member_store_config(data_file_size=1 << 20, index_file_size=32 * 4096)
    config = DLedgerConfig(group="g", self_id="n0", peers=peers, store_base_dir=str(tmp_path), store=store)
    log = MmapLogStore.open(config.default_path, store)
    try:
        log.term = 1
        log.append_many([STAMPED, GOOD], MAGIC_RECORD)
    finally:
        log.close()
    server = DLedgerServer(config).start()
    try:
        with DLedgerClient(peers, "g", timeout_s=15.0) as client:
            client.append(b"after")  # waits for the member to lead and commit the old entries
            assert client.get(0)[0].body == STAMPED
            assert [client.get_record(k).value for k in (0, 1)] == [b"value", b"value"]
            assert [r.headers for r in client.get_records(0, 2)] == [(("h", b"1"),)] * 2
            channel, stub = _stub(client)
            try:
                answer = stub.Get(pb.GetRequest(group="g", index=0, count=2, decode_records=True), timeout=10)
            finally:
                channel.close()  # type: ignore[attr-defined]
            assert answer.code == ResponseCode.SUCCESS
            decoded = [(e.record.key, e.record.timestamp, e.record.value) for e in answer.entries]
            assert decoded == [(b"key", 1_700_000_000_000, b"value")] * 2
            cols = with_records(next(iter(client.read_committed(0, 2)))).records
            assert cols is not None
            assert [(cols.key(k), int(cols.timestamps[k]), cols.value(k)) for k in (0, 1)] == [
                (b"key", 1_700_000_000_000, b"value")
            ] * 2
    finally:
        server.shutdown()
