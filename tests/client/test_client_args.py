"""DLedgerClient refuses bad arguments with a TypeError naming them, before anything is
sent: peers and group that are not str (None was an AttributeError on `.split`, and
group=None appended to group 'default'), a body that is not bytes and records that are
not Records, with and without multiplexing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dledger.client import DLedgerClient
from dledger.record import Record
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("peers", [None, 123, b"n0-127.0.0.1:20911"])
def test_peers_that_are_not_a_str_are_a_type_error(peers: object) -> None:
    with pytest.raises(TypeError, match=f"peers must be a str .*, not {type(peers).__name__}"):
        DLedgerClient(peers)  # type: ignore[arg-type]


@pytest.mark.parametrize("group", [None, 5, b"default"])
def test_a_group_that_is_not_a_str_is_a_type_error(fake: FakeCluster, group: object) -> None:
    with pytest.raises(TypeError, match=f"group must be a str .*, not {type(group).__name__}"):
        DLedgerClient(fake.peers, group=group)  # type: ignore[arg-type]


@pytest.fixture(params=[True, False], ids=["multiplex", "one-rpc-per-call"])
def client(fake: FakeCluster, request: pytest.FixtureRequest) -> Iterator[DLedgerClient]:
    with DLedgerClient(fake.peers, timeout_s=10.0, multiplex=request.param) as c:
        c.append(b"warm")
        yield c


@pytest.mark.parametrize("body", [None, "text", 7])
def test_a_body_that_is_not_bytes_is_a_type_error_and_nothing_is_sent(
    fake: FakeCluster, client: DLedgerClient, body: object
) -> None:
    with pytest.raises(TypeError, match=f"body 0 is {type(body).__name__}, expected bytes"):
        client.append(body)  # type: ignore[arg-type]
    assert fake.log.bodies == [b"warm"]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ([b"x"], r"append_records: records\[0\] must be a Record \(dledger.record.Record\), not bytes"),
        (None, "append_records: records must be a sequence of Record objects, not NoneType"),
        (Record(b"one"), "append_records: records must be a sequence of Record objects, not Record"),
    ],
)
def test_records_that_are_not_records_are_a_type_error_and_nothing_is_sent(
    fake: FakeCluster, client: DLedgerClient, records: object, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        client.append_records(records)  # type: ignore[arg-type]
    assert fake.log.bodies == [b"warm"]
    with pytest.raises(ValueError, match="records is empty"):
        client.append_records([])
