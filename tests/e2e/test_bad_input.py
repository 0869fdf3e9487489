"""FAULTS.md §4.4 against real server processes: each bad request gets a defined answer
(a DLedger code, or INVALID_ARGUMENT / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED), and the
cluster keeps serving with the same leader, term and identical committed logs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from dledger._native import impl
from dledger.codes import ResponseCode
from dledger.transport.convert import pb
from tests.e2e.harness import RPC_S, E2ECluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MAX_I64 = 2**63 - 1
Vote = pb.VoteResponse


@pytest.fixture(scope="module")
def cluster(shared_cluster: E2ECluster) -> Iterator[E2ECluster]:
    """The shared cluster with some data; after the module the leader, the term and the
    committed logs must be unchanged by everything sent."""
    shared_cluster.append([b"bad-input-%d" % k for k in range(20)])
    leader = shared_cluster.leader()
    yield shared_cluster
    assert shared_cluster.leader() == leader, "bad input changed the leader or the term"
    after = shared_cluster.append([b"still-serving"])
    members = list(shared_cluster.members)
    committed = shared_cluster.wait_converged(members, after.first_index)
    logs = [shared_cluster.read_all(m, committed + 1) for m in members]
    assert all(log == logs[0] for log in logs)


def roles(cluster: E2ECluster) -> tuple[str, str, int]:
    """(leader, a follower, term)."""
    leader, term = cluster.leader()
    return leader, next(m for m in cluster.members if m != leader), term


def peer_base(cluster: E2ECluster, target: str, sender: str, term: int, **extra: Any) -> dict[str, Any]:
    return {"group": "e2e", "remote_id": target, "local_id": sender, "leader_id": sender, "term": term, **extra}


# ----------------------------------------------------------------------- identity


def test_client_requests_for_another_group_or_member(cluster: E2ECluster) -> None:
    leader, _, _ = roles(cluster)
    stub = cluster.stub(leader)
    assert stub.Append(pb.AppendRequest(group="other", bodies=[b"x"]), timeout=RPC_S).code == 400
    assert stub.Append(pb.AppendRequest(remote_id="n9", bodies=[b"x"]), timeout=RPC_S).code == 401
    assert stub.Get(pb.GetRequest(group="other"), timeout=RPC_S).code == ResponseCode.UNKNOWN_GROUP
    assert stub.Metadata(pb.MetadataRequest(remote_id="nobody"), timeout=RPC_S).code == ResponseCode.UNKNOWN_MEMBER


def test_peer_requests_with_bad_identity(cluster: E2ECluster) -> None:
    leader, follower, term = roles(cluster)
    peer = cluster.peer_stub(follower)
    wrong_group = peer.HeartBeat(pb.HeartBeatRequest(**peer_base(cluster, follower, leader, term, group="x")))
    assert wrong_group.code == ResponseCode.UNKNOWN_GROUP
    wrong_target = peer.HeartBeat(pb.HeartBeatRequest(**peer_base(cluster, "n7", leader, term)), timeout=RPC_S)
    assert wrong_target.code == ResponseCode.UNKNOWN_MEMBER
    stranger = peer.HeartBeat(pb.HeartBeatRequest(**peer_base(cluster, follower, "zz", term)), timeout=RPC_S)
    assert stranger.code != 200
    to_itself = peer.HeartBeat(pb.HeartBeatRequest(**peer_base(cluster, follower, follower, term)), timeout=RPC_S)
    assert to_itself.code != 200
    # refused at the gRPC boundary (dledger.transport.validate), before the elector sees them
    unknown_candidate = peer.Vote(pb.VoteRequest(**peer_base(cluster, follower, "zz", MAX_I64)), timeout=RPC_S)
    assert (unknown_candidate.code, unknown_candidate.vote_result) == (ResponseCode.UNKNOWN_MEMBER, Vote.UNKNOWN)
    self_candidate = peer.Vote(pb.VoteRequest(**peer_base(cluster, follower, follower, term + 1)), timeout=RPC_S)
    assert (self_candidate.code, self_candidate.vote_result) == (ResponseCode.UNEXPECTED_MEMBER, Vote.UNKNOWN)


def test_proto3_defaults_get_defined_answers(cluster: E2ECluster) -> None:
    _, follower, _ = roles(cluster)
    peer = cluster.peer_stub(follower)
    assert peer.Vote(pb.VoteRequest(), timeout=RPC_S).code == ResponseCode.UNKNOWN_MEMBER
    assert peer.HeartBeat(pb.HeartBeatRequest(), timeout=RPC_S).code == ResponseCode.UNKNOWN_MEMBER
    assert peer.LeadershipTransfer(pb.LeadershipTransferRequest(), timeout=RPC_S).code != 200
    answer = peer.InstallSnapshot(iter([pb.InstallSnapshotRequest()]), timeout=RPC_S)  # a stream of one chunk
    assert answer.code == ResponseCode.UNKNOWN_MEMBER
    with pytest.raises(grpc.RpcError) as info:
        peer.Push(pb.PushEntryRequest(), timeout=RPC_S)  # no type
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    stub = cluster.stub(follower)
    assert stub.Metadata(pb.MetadataRequest(), timeout=RPC_S).code == 200
    assert stub.Append(pb.AppendRequest(), timeout=RPC_S).code == ResponseCode.REQUEST_WITH_EMPTY_BODYS


# -------------------------------------------------------------------------- terms


@pytest.mark.parametrize("bad_term", [-1, -(2**63), 0])
def test_stale_and_negative_terms_are_rejected(cluster: E2ECluster, bad_term: int) -> None:
    leader, follower, term = roles(cluster)
    stale = min(bad_term, term - 1)
    peer = cluster.peer_stub(follower)
    hb = peer.HeartBeat(pb.HeartBeatRequest(**peer_base(cluster, follower, leader, stale)), timeout=RPC_S)
    if stale < 0:  # refused at the gRPC boundary
        assert hb.code == ResponseCode.UNEXPECTED_ARGUMENT
    else:
        assert hb.code == ResponseCode.EXPIRED_TERM and hb.term == term
    vote = peer.Vote(
        pb.VoteRequest(**peer_base(cluster, follower, leader, stale, ledger_end_index=MAX_I64, ledger_end_term=term)),
        timeout=RPC_S,
    )
    # a ledger end term above the vote's term is refused at the boundary; else the elector rejects
    assert vote.vote_result != Vote.ACCEPT and (vote.code != 200 or vote.vote_result != Vote.UNKNOWN)
    push = peer.Push(
        pb.PushEntryRequest(**peer_base(cluster, follower, leader, stale, type=pb.PushEntryRequest.COMMIT)),
        timeout=RPC_S,
    )
    assert push.code != 200


def test_far_future_term_from_a_stranger_changes_nothing(cluster: E2ECluster) -> None:
    _, follower, term = roles(cluster)
    peer = cluster.peer_stub(follower)
    for sender in ("zz", ""):
        base = peer_base(cluster, follower, sender, MAX_I64)
        assert peer.HeartBeat(pb.HeartBeatRequest(**base), timeout=RPC_S).code != 200
        assert peer.Push(pb.PushEntryRequest(**base, type=pb.PushEntryRequest.APPEND), timeout=RPC_S).code != 200
    meta = cluster.metadata(follower, RPC_S)
    assert meta is not None and meta.term == term


def test_heartbeat_from_another_leader_in_the_same_term(cluster: E2ECluster) -> None:
    leader, follower, term = roles(cluster)
    impostor = next(m for m in cluster.members if m not in (leader, follower))
    answer = cluster.peer_stub(follower).HeartBeat(
        pb.HeartBeatRequest(**peer_base(cluster, follower, impostor, term)), timeout=RPC_S
    )
    assert answer.code == ResponseCode.INCONSISTENT_LEADER
    meta = cluster.metadata(follower, RPC_S)
    assert meta is not None and (meta.leader_id, meta.term) == (leader, term)


def test_vote_with_a_shorter_log_is_rejected(cluster: E2ECluster) -> None:
    leader, follower, term = roles(cluster)
    candidate = next(m for m in cluster.members if m not in (leader, follower))
    answer = cluster.peer_stub(follower).Vote(
        pb.VoteRequest(**peer_base(cluster, follower, candidate, term, ledger_end_index=0, ledger_end_term=0)),
        timeout=RPC_S,
    )
    assert answer.vote_result in (Vote.REJECT_EXPIRED_LEDGER_TERM, Vote.REJECT_SMALL_LEDGER_END_INDEX)


# --------------------------------------------------------------------- push states


def push(cluster: E2ECluster, follower: str, leader: str, term: int, kind: int, **fields: Any) -> Any:
    request = pb.PushEntryRequest(**peer_base(cluster, follower, leader, term, type=kind), **fields)
    return cluster.peer_stub(follower).Push(request, timeout=RPC_S)


def test_bad_pushes_from_the_leader_id(cluster: E2ECluster) -> None:
    leader, follower, term = roles(cluster)
    meta = cluster.metadata(follower, RPC_S)
    assert meta is not None
    end, committed = meta.end_index, meta.committed_index
    P = pb.PushEntryRequest
    gap = push(cluster, follower, leader, term, P.APPEND, first_index=end + 10, count=1, prev_index=end + 9,
               prev_term=term, last_term=term, entries=b"\x00" * 60)  # fmt: skip
    assert gap.code != 200
    garbage = push(cluster, follower, leader, term, P.APPEND, first_index=end + 1, count=2, prev_index=end,
                   prev_term=meta.end_term, last_term=term, entries=b"\xde\xad\xbe\xef" * 30)  # fmt: skip
    assert garbage.code != 200
    below_commit = push(cluster, follower, leader, term, P.TRUNCATE, first_index=0, prev_index=-1, prev_term=-1)
    # accepted or refused, a TRUNCATE never removes committed entries (the follower keeps them)
    assert below_commit.code != 200 or below_commit.end_index >= committed
    beyond = push(cluster, follower, leader, term, P.COMPARE, prev_index=end + 1000, prev_term=term)
    assert beyond.code != 200
    huge_commit = push(cluster, follower, leader, term, P.COMMIT, commit_index=MAX_I64, prev_index=end + 500,
                       prev_term=term)  # fmt: skip
    assert huge_commit.code != 200 or huge_commit.end_index <= end + 1
    for answer in (gap, garbage, below_commit, beyond, huge_commit):
        assert answer.code != ResponseCode.INTERNAL_ERROR
    after = cluster.metadata(follower, RPC_S)
    assert after is not None
    assert after.committed_index <= after.end_index, "commit index above the ledger end"
    assert after.committed_index >= committed and after.term == term


def test_pushes_over_committed_entries(cluster: E2ECluster) -> None:
    """APPEND at a committed index with another body and term must not replace it; the
    same entry again is harmless."""
    leader, follower, term = roles(cluster)
    entries = cluster.stub(follower).Get(pb.GetRequest(index=1, count=2), timeout=RPC_S).entries
    prev, target = entries[0], entries[1]
    P = pb.PushEntryRequest
    forged = impl.encode_entry(1, target.index, term + 5, target.pos, b"rewritten history")
    rewrite = push(cluster, follower, leader, term, P.APPEND, first_index=target.index, count=1,
                   prev_index=prev.index, prev_term=prev.term, last_term=term + 5, entries=forged)  # fmt: skip
    same = impl.encode_entry(target.magic, target.index, target.term, target.pos, target.body)
    duplicate = push(cluster, follower, leader, term, P.APPEND, first_index=target.index, count=1,
                     prev_index=prev.index, prev_term=prev.term, last_term=target.term, entries=same)  # fmt: skip
    for answer in (rewrite, duplicate):
        assert answer.code != ResponseCode.INTERNAL_ERROR
    again = cluster.stub(follower).Get(pb.GetRequest(index=target.index), timeout=RPC_S).entries[0]
    assert (again.body, again.term) == (target.body, target.term)


# ------------------------------------------------------------------- client append


def test_bad_appends(cluster: E2ECluster) -> None:
    leader, _, _ = roles(cluster)
    stub = cluster.stub(leader)
    assert stub.Append(pb.AppendRequest(), timeout=RPC_S).code == ResponseCode.REQUEST_WITH_EMPTY_BODYS
    big = stub.Append(pb.AppendRequest(bodies=[b"b" * (4 * 1024 * 1024)]), timeout=RPC_S)
    assert big.code == ResponseCode.UNEXPECTED_ARGUMENT and "at most" in big.message
    many = stub.Append(pb.AppendRequest(bodies=[b""] * 70_000), timeout=RPC_S)
    assert many.code == ResponseCode.UNEXPECTED_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        stub.Append(pb.AppendRequest(bodies=[b"h" * (16 << 20)] * 5), timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stub.Append(pb.AppendRequest(bodies=[b""]), timeout=RPC_S).code == 200  # an empty body is an entry


# --------------------------------------------------------------------------- get


def test_bad_gets(cluster: E2ECluster) -> None:
    leader, follower, _ = roles(cluster)
    for member in (leader, follower):
        stub = cluster.stub(member)
        meta = cluster.metadata(member, RPC_S)
        assert meta is not None
        assert stub.Get(pb.GetRequest(index=-1), timeout=RPC_S).code == ResponseCode.INDEX_OUT_OF_RANGE
        beyond = stub.Get(pb.GetRequest(index=meta.end_index + 1), timeout=RPC_S)
        assert beyond.code == ResponseCode.INDEX_OUT_OF_RANGE and not beyond.entries
        assert stub.Get(pb.GetRequest(index=-(2**63)), timeout=RPC_S).code == ResponseCode.INDEX_OUT_OF_RANGE
        assert stub.Get(pb.GetRequest(index=MAX_I64), timeout=RPC_S).code == ResponseCode.INDEX_OUT_OF_RANGE
        assert stub.Get(pb.GetRequest(index=0, count=-1), timeout=RPC_S).code == ResponseCode.UNEXPECTED_ARGUMENT
        assert len(stub.Get(pb.GetRequest(index=0, count=0), timeout=RPC_S).entries) == 1
        everything = stub.Get(pb.GetRequest(index=0, count=2**31 - 1), timeout=RPC_S)
        assert everything.code == 200 and everything.entries[-1].index <= everything.committed_index


# ---------------------------------------------------------------------- transport


@pytest.mark.parametrize("method", ["Ledger/Append", "Ledger/Get", "Ledger/ReadCommitted", "Peer/Vote", "Peer/Push"])
def test_garbage_bytes(cluster: E2ECluster, method: str) -> None:
    leader, _, _ = roles(cluster)
    channel = cluster.channel(leader)
    path = f"/dledger.v1.{method}"
    call = channel.unary_stream(path) if method.endswith("ReadCommitted") else channel.unary_unary(path)
    with pytest.raises(grpc.RpcError) as info:
        answer = call(b"\x0a\xff\xff\xff\xff\xff\xff", timeout=RPC_S)
        if method.endswith("ReadCommitted"):
            list(answer)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_expired_deadline_and_cancelled_calls(cluster: E2ECluster) -> None:
    leader, _, _ = roles(cluster)
    stub = cluster.stub(leader)
    with pytest.raises(grpc.RpcError) as info:
        stub.Append(pb.AppendRequest(bodies=[b"late"]), timeout=-1)  # already expired
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    follow = stub.ReadCommitted(pb.ReadCommittedRequest(from_index=0, follow=True), timeout=60)
    assert next(follow).code == 200
    follow.cancel()
    gate = threading.Event()

    def requests() -> Iterator[Any]:
        yield pb.AppendRequest(bodies=[b"stream-then-cancel"])
        gate.wait(10)

    stream = stub.AppendStream(requests(), timeout=60)
    assert next(stream).code == 200
    stream.cancel()
    gate.set()
    # nothing leaked: the member keeps serving streams and appends
    for _ in range(20):
        assert list(stub.ReadCommitted(pb.ReadCommittedRequest(from_index=0, to_index=1), timeout=RPC_S))
    eventually(lambda: stub.Append(pb.AppendRequest(bodies=[b"after-cancel"]), timeout=RPC_S).code == 200, 10, "append")
