"""A mutual-TLS group of real in-process members on loopback: it elects and commits,
and every identity rule holds (members cannot speak as each other, clients cannot call
the Peer service, roles decide what clients may call, other CAs are refused)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dledger.codes import DLedgerError
from dledger.security.certs import issue_member_cert
from dledger.security.tls import TlsConfig
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.security.tls_support import GROUP, TlsGroup, make_certs, wait_for

pytestmark = pytest.mark.security


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def group(tmp_path: Path, certs: Path) -> Iterator[TlsGroup]:
    made = TlsGroup(tmp_path / "store", certs)
    try:
        yield made
    finally:
        made.close()


def _status(group: TlsGroup) -> list[tuple[int, int | None]]:
    """(term, leader) of every member, for "nothing changed" checks."""
    return [(s.node.term, s.node.leader_id) for s in group.servers.values() if s.node is not None]


def test_mutual_tls_group_elects_and_commits(group: TlsGroup) -> None:
    group.leader()
    with group.client("writer") as client:
        result = client.append_batch([b"a", b"b", b"c"])
        assert result.count == 3
        assert [e.body for e in client.get(result.first_index, 3)] == [b"a", b"b", b"c"]
    end = result.first_index + 2
    for node_id in group.ids:
        wait_for(lambda n=node_id: group.metadata(n).committed_index >= end, f"{node_id} commits")


def test_member_certificate_cannot_speak_as_another_member(group: TlsGroup) -> None:
    leader = group.leader()
    victim = next(i for i in group.ids if i != leader)
    liar = next(i for i in group.ids if i not in (leader, victim))
    with group.client("writer") as client:
        index = client.append(b"before")
    # the victim learns the commit with the leader's next push (an idle one: ms later)
    wait_for(lambda: group.metadata(victim).committed_index >= index, "the commit on the victim")
    committed = group.metadata(victim).committed_index
    before = _status(group)
    stub = group.peer_stub(victim, liar)
    huge = 1 << 40
    forged = [
        ("HeartBeat", pb.HeartBeatRequest(group=GROUP, local_id=leader, remote_id=victim, leader_id=leader, term=huge)),
        ("HeartBeat", pb.HeartBeatRequest(group=GROUP, local_id=liar, remote_id=victim, leader_id=leader, term=huge)),
        (
            "Push",
            pb.PushEntryRequest(group=GROUP, local_id=leader, remote_id=victim, leader_id=leader, term=huge, type=2),
        ),
        ("Push", pb.PushEntryRequest(group=GROUP, local_id=liar, leader_id=leader, term=huge, type=1, count=0)),
        ("Vote", pb.VoteRequest(group=GROUP, local_id=leader, remote_id=victim, leader_id=leader, term=huge)),
        (
            "LeadershipTransfer",
            pb.LeadershipTransferRequest(group=GROUP, local_id=leader, remote_id=victim, transferee_id=liar, term=huge),
        ),
    ]
    for method, request in forged:
        with pytest.raises(grpc.RpcError) as info:
            getattr(stub, method)(request, timeout=5)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
        assert f"member {GROUP}/{liar}" in info.value.details()
    assert _status(group) == before
    assert group.metadata(victim).committed_index == committed
    assert group.servers[victim].grpc is not None and group.servers[victim].grpc.guard is not None
    assert group.servers[victim].grpc.guard.refused == len(forged)


def test_a_member_speaking_as_itself_is_answered(group: TlsGroup) -> None:
    """The check refuses lies, not members: n1 asking n0 with its own id gets a Raft
    answer (here: a HeartBeat from a non-leader is refused by Raft, with a code)."""
    leader = group.leader()
    member = next(i for i in group.ids if i != leader)
    other = next(i for i in group.ids if i not in (leader, member))
    answer = group.peer_stub(other, member).HeartBeat(
        pb.HeartBeatRequest(group=GROUP, local_id=member, remote_id=other, leader_id=member, term=0), timeout=5
    )
    assert answer.code != 200


@pytest.mark.parametrize("client", ["admin", "writer", "reader"])
def test_a_client_certificate_cannot_call_the_peer_service(group: TlsGroup, client: str) -> None:
    leader = group.leader()
    stub = group.peer_stub(leader, f"client-{client}")
    for method, request in [
        ("HeartBeat", pb.HeartBeatRequest(group=GROUP, local_id=client, leader_id=client, term=1)),
        ("Vote", pb.VoteRequest(group=GROUP, local_id=client, term=1)),
        ("InstallSnapshot", pb.InstallSnapshotRequest(group=GROUP, local_id=client)),
    ]:
        with pytest.raises(grpc.RpcError) as info:
            getattr(stub, method)(iter([request]) if method == "InstallSnapshot" else request, timeout=5)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "only members" in info.value.details()


def test_a_read_identity_can_read_but_not_append(group: TlsGroup) -> None:
    group.leader()
    with group.client("writer") as writer:
        first = writer.append(b"kept")
    with group.client("reader") as reader:
        assert reader.get(first)[0].body == b"kept"
        assert len(reader.status()) == 3
        with pytest.raises(DLedgerError, match="PERMISSION_DENIED"):
            reader.append(b"forbidden")
        with pytest.raises(DLedgerError, match="PERMISSION_DENIED"):
            reader.leadership_transfer(group.ids[0])
    assert max(group.metadata(i).end_index for i in group.ids) == first


def test_write_cannot_transfer_leadership_admin_can(group: TlsGroup) -> None:
    leader = group.leader()
    target = next(i for i in group.ids if i != leader)
    with group.client("writer") as writer, pytest.raises(DLedgerError, match="PERMISSION_DENIED"):
        writer.leadership_transfer(target)
    assert group.leader() == leader
    with group.client("admin") as admin:
        admin.leadership_transfer(target)
    wait_for(lambda: group.leader() == target, "the transfer")


def test_a_certificate_of_another_ca_is_refused(group: TlsGroup, tmp_path: Path) -> None:
    other = make_certs(tmp_path / "other")
    leader = group.leader()
    for stem in ("client-admin", "n1"):  # same names, another CA
        stub = pb_grpc.LedgerStub(group.channel(leader, stem, other))
        with pytest.raises(grpc.RpcError) as info:
            stub.Metadata(pb.MetadataRequest(), timeout=5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    with group.client("admin", other) as client, pytest.raises(DLedgerError):
        client.append(b"x")
    assert max(group.metadata(i).end_index for i in group.ids) == -1


def test_a_member_certificate_of_another_group_is_refused(group: TlsGroup, certs: Path) -> None:
    """Same CA, same member id, another group: not a member of this one."""
    issue_member_cert(certs, "other", "n0", stem="other-n0")
    try:
        leader = group.leader()
        before = _status(group)
        stub = group.peer_stub(leader, "other-n0")
        with pytest.raises(grpc.RpcError) as info:
            stub.HeartBeat(pb.HeartBeatRequest(group=GROUP, local_id="n0", leader_id="n0", term=1 << 40), timeout=5)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "not a member of group 'g'" in info.value.details()
        assert _status(group) == before
    finally:
        for ext in ("crt", "key"):
            (certs / f"other-n0.{ext}").unlink()


def test_plaintext_is_refused_by_a_tls_member(group: TlsGroup) -> None:
    leader = group.leader()
    stub = pb_grpc.LedgerStub(open_channel(group.address(leader)))
    with pytest.raises(grpc.RpcError) as info:
        stub.Metadata(pb.MetadataRequest(), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_member_tls_files_are_checked_at_start(tmp_path: Path, certs: Path) -> None:
    from dledger.config import DLedgerConfig
    from dledger.security.tls import TlsError
    from dledger.server import DLedgerServer

    tls = TlsConfig.in_directory(certs, "n0")
    config = DLedgerConfig(
        group=GROUP,
        self_id="n0",
        peers="n0-127.0.0.1:1",
        store_base_dir=str(tmp_path),
        tls_cert=tls.cert,
        tls_key=str(tmp_path / "missing.key"),
        tls_ca=tls.ca,
    )
    with pytest.raises(TlsError, match="cannot read the TLS key"):
        DLedgerServer(config).start()
    assert not (tmp_path / "dledger-n0").exists()  # failed before the store was opened


@pytest.mark.parametrize(("stem", "said"), [("n1", "member g/n1"), ("other-n0", "member other/n0")])
def test_a_member_refuses_to_start_with_a_certificate_that_does_not_name_it(
    tmp_path: Path, certs: Path, stem: str, said: str
) -> None:
    """Before, n0 started with n1's files (or another group's) and served without a
    word; its peers refused each of its calls at run time (helper B's report)."""
    from dledger.config import DLedgerConfig
    from dledger.security.tls import TlsError
    from dledger.server import DLedgerServer

    if stem == "other-n0":
        issue_member_cert(certs, "other", "n0", stem=stem)
    try:
        tls = TlsConfig.in_directory(certs, stem)
        config = DLedgerConfig(
            group=GROUP, self_id="n0", peers="n0-127.0.0.1:1;n1-127.0.0.1:2", store_base_dir=str(tmp_path),
            tls_cert=tls.cert, tls_key=tls.key, tls_ca=tls.ca,
        )  # fmt: skip
        with pytest.raises(TlsError, match=f"names {said}, not member g/n0: its peers would refuse"):
            DLedgerServer(config).start()
        assert not (tmp_path / "dledger-n0").exists()  # refused before the store was opened
    finally:
        for ext in ("crt", "key"):
            (certs / f"other-n0.{ext}").unlink(missing_ok=True)
