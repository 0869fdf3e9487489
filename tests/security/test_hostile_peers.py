"""Issue 16, findings 1-3, against three real members on loopback (plaintext): hostile
Peer-service calls made with the generated stubs are refused at the gRPC boundary
(`dledger.transport.validate`) before they reach the node, and the group keeps electing
and appending, also after a restart."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dledger._store_py_codec import encode_entry
from dledger.codes import ResponseCode
from dledger.raft.messages import MAX_TERM, RequestOrResponse
from dledger.store.term_store import CURRTERM_FILE
from dledger.transport.convert import pb
from dledger.transport.validate import MAX_TERM_STEP
from tests.security.conftest import GROUP, Group, wait_for

pytestmark = [pytest.mark.security, pytest.mark.timeout(300)]

MAX_I64 = 2**63 - 1
MIN_I64 = -(2**63)
Vote = pb.VoteResponse


class Delivered:
    """Records every peer request the node of a member was handed (wraps
    `handle_peer_request`): a refused request must never show up here."""

    def __init__(self, group: Group, node_id: str) -> None:
        self.requests: list[RequestOrResponse] = []
        node = group.node(node_id)
        original = node.handle_peer_request

        def spy(request: RequestOrResponse) -> Any:
            self.requests.append(request)
            return original(request)

        node.handle_peer_request = spy

    def from_sender(self, sender: str) -> list[RequestOrResponse]:
        return [r for r in self.requests if r.local_id == sender or r.leader_id == sender]

    def with_term(self, term: int) -> list[RequestOrResponse]:
        return [r for r in self.requests if r.term == term]


def roles(group: Group) -> tuple[str, str, str]:
    """(leader, follower, the other follower)."""
    leader = group.wait_leader()
    first, second = (m for m in group.ids if m != leader)
    return leader, first, second


def base(target: str, sender: str, term: int, **extra: Any) -> dict[str, Any]:
    """A well-addressed peer request from `sender` to `target`."""
    return {"group": GROUP, "remote_id": target, "local_id": sender, "leader_id": sender, "term": term, **extra}


def stored_term(group: Group, node_id: str) -> int:
    """The term in the member's `currterm` file (the raft layer's own format); 0 without
    one (a member that never left term 0: DLedger's first leader may lead term 0)."""
    path = Path(group.config(node_id).default_path) / CURRTERM_FILE
    if not path.exists():
        return 0
    text = path.read_text()
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "currTerm":
            return int(value)
    return -1


# ------------------------------------------------------------------ finding 2: terms


@pytest.mark.parametrize("term", [MAX_I64, MAX_TERM + 1, MIN_I64, -1])
def test_out_of_range_terms_are_refused_and_never_delivered(group: Group, term: int) -> None:
    leader, follower, _ = roles(group)
    delivered = Delivered(group, follower)
    peer = group.peer_stub(follower)
    hb = peer.HeartBeat(pb.HeartBeatRequest(**base(follower, leader, term)), timeout=10)
    vote = peer.Vote(pb.VoteRequest(**base(follower, leader, term, ledger_end_index=0, ledger_end_term=0)), timeout=10)
    push = peer.Push(pb.PushEntryRequest(**base(follower, leader, term, type=pb.PushEntryRequest.COMMIT)), timeout=10)
    for answer in (hb, vote, push):
        assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert vote.vote_result == Vote.UNKNOWN
    assert delivered.with_term(term) == []
    assert 0 <= group.node(follower).term < MAX_TERM


def test_a_term_far_above_the_members_is_refused(group: Group) -> None:
    leader, follower, _ = roles(group)
    delivered = Delivered(group, follower)
    current = group.node(follower).term
    too_far = current + MAX_TERM_STEP + 1
    hb = group.peer_stub(follower).HeartBeat(pb.HeartBeatRequest(**base(follower, leader, too_far)), timeout=10)
    assert hb.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert delivered.with_term(too_far) == []


def test_heartbeat_with_int64_max_term_does_not_brick_the_group(group: Group) -> None:
    """Finding 2: the group keeps electing and appending, also after a restart of all."""
    leader, follower, other = roles(group)
    for target in (follower, other, leader):
        sender = leader if target != leader else follower
        answer = group.peer_stub(target).HeartBeat(pb.HeartBeatRequest(**base(target, sender, MAX_I64)), timeout=10)
        assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT
    first = group.append([b"after the forged heartbeat"])
    for node_id in group.ids:
        group.stop(node_id)
    for node_id in group.ids:
        assert 0 <= stored_term(group, node_id) < MAX_TERM
        group.start(node_id)
    group.wait_leader()
    second = group.append([b"after the restart"])
    assert second > first
    # the leader after the restart may append a NOOP between them (to commit the first)
    assert group.written(group.wait_leader(), first, second) == [b"after the forged heartbeat", b"after the restart"]
    # and it still elects: hand leadership on, then append again
    leader = group.wait_leader()
    transferee = next(m for m in group.ids if m != leader)
    answer = group.ledger_stub(leader).LeadershipTransfer(
        pb.LeadershipTransferRequest(group=GROUP, transferee_id=transferee), timeout=30
    )
    assert answer.code == 200, answer.message
    assert group.append([b"under the new leader"]) > second


# ------------------------------------------------- identities: forged ids, groups


def _mutations(follower: str, leader: str, other: str) -> list[tuple[str, dict[str, Any], ResponseCode]]:
    """(name, fields changed on a valid request from the leader, expected code)."""
    return [
        ("foreign group", {"group": "other-group"}, ResponseCode.UNKNOWN_GROUP),
        ("empty group", {"group": ""}, ResponseCode.UNKNOWN_GROUP),
        ("addressed to a stranger", {"remote_id": "n9"}, ResponseCode.UNKNOWN_MEMBER),
        ("addressed to another member", {"remote_id": other}, ResponseCode.UNEXPECTED_MEMBER),
        ("from a non-member", {"local_id": "mallory", "leader_id": "mallory"}, ResponseCode.UNKNOWN_MEMBER),
        ("from nobody", {"local_id": "", "leader_id": ""}, ResponseCode.UNKNOWN_MEMBER),
        ("from the member itself", {"local_id": follower, "leader_id": follower}, ResponseCode.UNEXPECTED_MEMBER),
        ("for a non-member leader", {"leader_id": "mallory"}, ResponseCode.UNEXPECTED_MEMBER),
        ("for another member", {"leader_id": other}, ResponseCode.UNEXPECTED_MEMBER),
    ]


@pytest.fixture
def peer_group(group: Group) -> Iterator[tuple[Group, str, str, str, int]]:
    leader, follower, other = roles(group)
    yield group, leader, follower, other, group.node(leader).term


@pytest.mark.parametrize("rpc", ["Vote", "HeartBeat", "Push"])
def test_forged_ids_and_foreign_groups_are_refused(peer_group: tuple[Group, str, str, str, int], rpc: str) -> None:
    group, leader, follower, other, term = peer_group
    delivered = Delivered(group, follower)
    marker = term + 1000  # a term no real message of this test carries
    stub = group.peer_stub(follower)
    for name, change, code in _mutations(follower, leader, other):
        fields = {**base(follower, leader, marker), **change}
        if rpc == "Vote":
            answer = stub.Vote(pb.VoteRequest(**fields, ledger_end_index=10**6, ledger_end_term=marker), timeout=10)
            assert answer.vote_result == Vote.UNKNOWN, name
        elif rpc == "HeartBeat":
            answer = stub.HeartBeat(pb.HeartBeatRequest(**fields), timeout=10)
        else:
            answer = stub.Push(pb.PushEntryRequest(**fields, type=pb.PushEntryRequest.COMMIT), timeout=10)
        assert answer.code == code, f"{rpc} {name}: {answer.code}"
    assert delivered.with_term(marker) == [], "a refused request reached the node"
    assert group.node(follower).term < marker


def test_non_member_cannot_depose_the_leader_or_bump_terms(group: Group) -> None:
    """Finding 3 (its part without TLS): Vote/HeartBeat/Push from a process that is not a
    member are refused, so they cannot raise terms. A forged Vote/HeartBeat carrying a real
    member's id and a plausible term is well-formed and is accepted as that member's:
    closing it needs the TLS identity checks (a certificate naming the member) and Pre-Vote
    / CheckQuorum (leader stickiness), both other parts of issue 16."""
    roles(group)
    spies = {m: Delivered(group, m) for m in group.ids}
    terms = {m: group.node(m).term for m in group.ids}
    for target in group.ids:
        stub = group.peer_stub(target)
        for k in range(20):
            fields = base(target, "mallory", terms[target] + 1 + k)
            vote = pb.VoteRequest(**fields, ledger_end_index=10**9, ledger_end_term=1)
            assert stub.Vote(vote, timeout=10).code == 401
            assert stub.HeartBeat(pb.HeartBeatRequest(**fields), timeout=10).code == 401
            push = pb.PushEntryRequest(**fields, type=pb.PushEntryRequest.COMMIT, commit_index=10**9)
            assert stub.Push(push, timeout=10).code == 401
    for node_id, spy in spies.items():
        assert spy.from_sender("mallory") == [], node_id
    assert group.append([b"still appending"]) >= 0


# ----------------------------------------------------- finding 1: forged pushes


def test_forged_push_with_a_malformed_run_is_refused(group: Group) -> None:
    """Finding 1, as far as validation reaches: a Push with the real leader's id and term
    whose run is not what it claims (random bytes, a count the bytes cannot hold, a first
    entry at another index or term) is refused before the follower's log sees it. A
    well-formed forged APPEND with the real leader's id and term can only be told apart
    by who sent it: that is the mutual-TLS identity check (another part of issue 16)."""
    leader, follower, _ = roles(group)
    first = group.append([b"real-%d" % k for k in range(5)])
    last = first + 4
    wait_for(lambda: group.node(follower).committed_index >= last, "the follower to commit")
    delivered = Delivered(group, follower)
    term = group.node(leader).term
    status = group.node(follower).status()
    end, end_term = status.end_index, status.end_term
    stub = group.peer_stub(follower)
    append = pb.PushEntryRequest.APPEND
    good_entry = encode_entry(1, end + 1, term, 0, b"forged")
    cases = {
        "random bytes": {"count": 2, "entries": bytes(range(256)) * 3},
        "count beyond the bytes": {"count": 1000, "entries": good_entry},
        "negative count": {"count": -1, "entries": good_entry},
        "no entries": {"count": 1, "entries": b""},
        "another index": {"count": 1, "entries": encode_entry(1, end + 7, term, 0, b"forged")},
        "another term": {"count": 1, "entries": encode_entry(1, end + 1, term + 1, 0, b"forged")},
        "gap after prev": {"count": 1, "entries": good_entry, "first_index": end + 3},
    }
    for name, fields in cases.items():
        request = pb.PushEntryRequest(
            **base(follower, leader, term, type=append),
            **{"first_index": end + 1, "prev_index": end, "prev_term": end_term, "last_term": term, **fields},
        )
        try:
            answer = stub.Push(request, timeout=10)
        except grpc.RpcError as exc:  # a negative count is a malformed message
            assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            continue
        assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT, f"{name}: {answer.code}"
    assert [r for r in delivered.requests if getattr(r, "entries", b"")[-6:] == b"forged"] == []
    assert [r for r in delivered.requests if r.term == term and getattr(r, "count", 0) in (2, 1000)] == []
    assert group.committed(follower, last)[first:] == [b"real-%d" % k for k in range(5)]


def test_refusals_are_logged_once_with_the_callers_address(group: Group, caplog: pytest.LogCaptureFixture) -> None:
    _, follower, _ = roles(group)
    caplog.set_level(logging.WARNING, logger="dledger.transport.validate")
    stub = group.peer_stub(follower)
    for _ in range(5):
        assert stub.HeartBeat(pb.HeartBeatRequest(**base(follower, "mallory", 1)), timeout=10).code == 401
    lines = [r.getMessage() for r in caplog.records if "mallory" in r.getMessage()]
    assert len(lines) == 1, lines  # a flood is not logged line by line
    assert "HeartBeat" in lines[0] and "127.0.0.1" in lines[0] and "UNKNOWN_MEMBER" in lines[0]
    assert group.servers[follower].grpc is not None
    assert group.servers[follower].grpc.core.refusals.refused >= 5
