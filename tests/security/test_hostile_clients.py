"""FAULTS.md §4.4 rows of the Ledger service (and the Peer LeadershipTransfer) against a
live group: every bad field gets its DLedger code, nothing is appended, and the member
keeps serving."""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pytest

from dledger.codes import ResponseCode
from dledger.raft.messages import MAX_INDEX, MAX_TERM
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.security.conftest import GROUP, Group, wait_for

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]

MAX_I64 = 2**63 - 1
R = ResponseCode

UNARY: list[tuple[str, str, Any, ResponseCode]] = [
    ("append: no bodies", "Append", pb.AppendRequest(group=GROUP), R.REQUEST_WITH_EMPTY_BODYS),
    ("append: foreign group", "Append", pb.AppendRequest(group="other", bodies=[b"x"]), R.UNKNOWN_GROUP),
    ("append: another member", "Append", pb.AppendRequest(remote_id="n9", bodies=[b"x"]), R.UNKNOWN_MEMBER),
    ("append: body over 4 MiB", "Append", pb.AppendRequest(bodies=[b"x" * (4 << 20)]), R.UNEXPECTED_ARGUMENT),
    ("append: too many bodies", "Append", pb.AppendRequest(bodies=[b""] * 65_537), R.UNEXPECTED_ARGUMENT),
    ("get: negative index", "Get", pb.GetRequest(index=-1), R.INDEX_OUT_OF_RANGE),
    ("get: int64 max index", "Get", pb.GetRequest(index=MAX_I64), R.INDEX_OUT_OF_RANGE),
    ("get: negative count", "Get", pb.GetRequest(index=0, count=-1), R.UNEXPECTED_ARGUMENT),
    ("get: negative max_bytes", "Get", pb.GetRequest(index=0, max_bytes=-1), R.UNEXPECTED_ARGUMENT),
    ("get: foreign group", "Get", pb.GetRequest(group="other"), R.UNKNOWN_GROUP),
    ("metadata: foreign group", "Metadata", pb.MetadataRequest(group="other"), R.UNKNOWN_GROUP),
    ("metadata: another member", "Metadata", pb.MetadataRequest(remote_id="n9"), R.UNKNOWN_MEMBER),
    ("transfer: no transferee", "LeadershipTransfer", pb.LeadershipTransferRequest(), R.UNEXPECTED_ARGUMENT),
    (
        "transfer: a stranger",
        "LeadershipTransfer",
        pb.LeadershipTransferRequest(transferee_id="mallory"),
        R.UNKNOWN_MEMBER,
    ),
    (
        "transfer: from a stranger",
        "LeadershipTransfer",
        pb.LeadershipTransferRequest(transferee_id="n0", transfer_id="mallory"),
        R.UNKNOWN_MEMBER,
    ),
    (
        "transfer: negative term",
        "LeadershipTransfer",
        pb.LeadershipTransferRequest(transferee_id="n0", term=-5),
        R.UNEXPECTED_ARGUMENT,
    ),
    (
        "transfer: term beyond MAX_TERM",
        "LeadershipTransfer",
        pb.LeadershipTransferRequest(transferee_id="n0", term=MAX_TERM + 1),
        R.UNEXPECTED_ARGUMENT,
    ),
]

STREAMED: list[tuple[str, Any, ResponseCode]] = [
    ("negative from_index", pb.ReadCommittedRequest(from_index=-1), R.UNEXPECTED_ARGUMENT),
    ("from_index over MAX_INDEX", pb.ReadCommittedRequest(from_index=MAX_INDEX + 1), R.UNEXPECTED_ARGUMENT),
    ("to_index before from_index", pb.ReadCommittedRequest(from_index=5, to_index=2), R.UNEXPECTED_ARGUMENT),
    ("negative batch bytes", pb.ReadCommittedRequest(max_batch_bytes=-1), R.UNEXPECTED_ARGUMENT),
    ("negative batch count", pb.ReadCommittedRequest(max_batch_count=-1), R.UNEXPECTED_ARGUMENT),
    ("unknown layout", pb.ReadCommittedRequest(layout=7), R.UNEXPECTED_ARGUMENT),
    ("foreign group", pb.ReadCommittedRequest(group="other"), R.UNKNOWN_GROUP),
]


def settled_ends(group: Group) -> dict[str, int]:
    def agree() -> dict[str, int] | None:
        ends = {m: group.node(m).status().end_index for m in group.ids}
        return ends if len(set(ends.values())) == 1 else None

    result: dict[str, int] = wait_for(agree, "the members' ledger ends to agree")
    return result


def test_every_bad_client_field_gets_its_code_and_appends_nothing(group: Group) -> None:
    first = group.append([b"kept-%d" % k for k in range(3)])
    before = settled_ends(group)
    leader = group.wait_leader()
    stub = group.ledger_stub(leader)
    for name, method, request, code in UNARY:
        answer = getattr(stub, method)(request, timeout=30)
        assert answer.code == code, f"{name}: {answer.code} {answer.message}"
        assert answer.message, f"{name}: no explanation"
    for name, request, code in STREAMED:
        answers = list(stub.ReadCommitted(request, timeout=30))
        assert [a.code for a in answers] == [code], name
    assert settled_ends(group) == before
    assert group.committed(leader, first + 2)[first:] == [b"kept-%d" % k for k in range(3)]
    assert stub.Metadata(pb.MetadataRequest(), timeout=30).code == 200


def test_garbage_bytes_on_every_method_are_invalid_argument(group: Group) -> None:
    channel = group.channel(group.wait_leader())
    methods = [f"/dledger.v1.Ledger/{m}" for m in ("Append", "Get", "Metadata", "LeadershipTransfer")]
    methods += [f"/dledger.v1.Peer/{m}" for m in ("Vote", "HeartBeat", "Push", "LeadershipTransfer", "InstallSnapshot")]
    for method in methods:
        with pytest.raises(grpc.RpcError) as info:
            channel.unary_unary(method)(b"\xff\xff\xff\xff\x0f garbage", timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method


def test_forged_peer_leadership_transfer_is_refused(group: Group) -> None:
    leader = group.wait_leader()
    follower, other = (m for m in group.ids if m != leader)
    term = group.node(leader).term
    stub = group.peer_stub(follower)

    def send(**fields: Any) -> int:
        request = {
            "group": GROUP,
            "remote_id": follower,
            "local_id": leader,
            "term": term,
            "transfer_id": leader,
            "transferee_id": follower,
            "take_leadership_ledger_index": 0,
            **fields,
        }
        return int(stub.LeadershipTransfer(pb.LeadershipTransferRequest(**request), timeout=30).code)

    assert send(transferee_id=other) == R.UNEXPECTED_MEMBER  # asks someone else to take over
    assert send(transfer_id=other) == R.UNEXPECTED_MEMBER  # speaks for another leader
    assert send(local_id="mallory", transfer_id="mallory") == R.UNKNOWN_MEMBER
    assert send(take_leadership_ledger_index=-2) == R.UNEXPECTED_ARGUMENT
    assert send(term=MAX_I64) == R.UNEXPECTED_ARGUMENT
    assert group.node(follower).term < MAX_TERM
    assert group.append([b"still appending"]) >= 0


def test_a_flood_of_connections_keeps_the_member_serving(group: Group) -> None:
    leader = group.wait_leader()
    address = group.addresses[leader]
    codes: list[int] = []

    def caller(k: int) -> None:
        channel = open_channel(address)
        try:
            ledger, peer = pb_grpc.LedgerStub(channel), pb_grpc.PeerStub(channel)
            for _ in range(3):
                codes.append(ledger.Metadata(pb.MetadataRequest(), timeout=60).code)
                ids = {"local_id": f"m{k}", "leader_id": f"m{k}"}
                hostile = pb.HeartBeatRequest(group=GROUP, remote_id=leader, term=9, **ids)
                codes.append(peer.HeartBeat(hostile, timeout=60).code)
        finally:
            channel.close()

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(48)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(codes)) == [200, ResponseCode.UNKNOWN_MEMBER] and len(codes) == 48 * 6
    assert group.append([b"after the flood"]) >= 0
