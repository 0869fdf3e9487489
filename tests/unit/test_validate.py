"""dledger.transport.validate without a server: the rules at their edges, the refusal
log's rate limit, and the handler guard of service_core."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest

from dledger._store_py_codec import encode_entry
from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.messages import (
    MAX_INDEX,
    MAX_TERM,
    HeartBeatRequest,
    LeadershipTransferRequest,
    PushEntryRequest,
    PushType,
    ReadIndexRequest,
    VoteRequest,
)
from dledger.transport import validate
from dledger.transport.convert import pb
from dledger.transport.service_core import guard_unary
from dledger.transport.validate import MAX_TERM_STEP, Refusal, RefusalLog, RequestValidator

pytestmark = pytest.mark.unit

R = ResponseCode
CONFIG = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3")
FROM_N1: dict[str, Any] = {"group": "g", "remote_id": "n0", "local_id": "n1", "leader_id": "n1"}


@pytest.fixture
def v() -> RequestValidator:
    return RequestValidator(CONFIG, max_bodies_per_append=10, max_append_bytes=100)


def code(refusal: Refusal | None) -> int | None:
    return None if refusal is None else int(refusal.code)


def run(first: int, terms: list[int]) -> bytes:
    return b"".join(encode_entry(1, first + k, t, 0, b"body") for k, t in enumerate(terms))


def test_a_leaders_real_messages_pass(v: RequestValidator) -> None:
    assert v.peer_request(HeartBeatRequest(**FROM_N1, term=3, ledger_end_index=9), 3) is None
    assert v.peer_request(HeartBeatRequest(**FROM_N1, term=3, ledger_end_index=9, retention_floor=10), 3) is None
    assert v.peer_request(VoteRequest(**FROM_N1, term=4, ledger_end_index=9, ledger_end_term=3), 3) is None
    append = PushEntryRequest(
        **FROM_N1, term=3, first_index=5, count=2, prev_index=4, prev_term=2, last_term=3, entries=run(5, [2, 3])
    )
    assert v.peer_request(append, 3) is None
    for kind in (PushType.COMMIT, PushType.COMPARE):
        assert v.peer_request(PushEntryRequest(**FROM_N1, term=3, type=kind, prev_index=4, prev_term=2), 3) is None
    truncate = PushEntryRequest(**FROM_N1, term=3, type=PushType.TRUNCATE, first_index=5, prev_index=4, prev_term=2)
    assert v.peer_request(truncate, 3) is None
    transfer = LeadershipTransferRequest(**FROM_N1, term=3, transfer_id="n1", transferee_id="n0")
    assert v.peer_request(transfer, 3) is None


@pytest.mark.parametrize(
    ("group_id", "incarnation", "expected"),
    [
        ("0123456789abcdef", "fedcba9876543210", None),
        ("", "", None),  # unknown: a member still joining, or an older member
        ("x" * 65, "", R.UNEXPECTED_ARGUMENT),
        ("", "a b", R.UNEXPECTED_ARGUMENT),
        ("é", "", R.UNEXPECTED_ARGUMENT),
        ("", "\x00", R.UNEXPECTED_ARGUMENT),
    ],
)
def test_group_id_and_incarnation_are_short_words(
    v: RequestValidator, group_id: str, incarnation: str, expected: int | None
) -> None:
    ids = {"group_id": group_id, "incarnation": incarnation}
    assert code(v.peer_request(HeartBeatRequest(**FROM_N1, term=3, **ids), 3)) == expected
    assert code(v.peer_request(VoteRequest(**FROM_N1, term=4, ledger_end_term=3, **ids), 3)) == expected
    push = PushEntryRequest(**FROM_N1, term=3, type=PushType.COMMIT, prev_index=4, prev_term=2, **ids)
    assert code(v.peer_request(push, 3)) == expected


@pytest.mark.parametrize(
    ("term", "current", "expected"),
    [
        (MAX_TERM, MAX_TERM, None),
        (MAX_TERM + 1, MAX_TERM, R.UNEXPECTED_ARGUMENT),
        (2**63 - 1, 5, R.UNEXPECTED_ARGUMENT),
        (-1, 5, R.UNEXPECTED_ARGUMENT),
        (5 + MAX_TERM_STEP, 5, None),
        (5 + MAX_TERM_STEP + 1, 5, R.UNEXPECTED_ARGUMENT),
        (0, 5, None),  # stale: the elector answers EXPIRED_TERM
    ],
)
def test_term_bounds(v: RequestValidator, term: int, current: int, expected: int | None) -> None:
    assert code(v.peer_request(HeartBeatRequest(**FROM_N1, term=term), current)) == expected


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"prev_index": -2}, R.UNEXPECTED_ARGUMENT),
        ({"first_index": MAX_INDEX, "prev_index": MAX_INDEX - 1}, R.UNEXPECTED_ARGUMENT),  # ends beyond MAX_INDEX
        ({"count": 3}, R.UNEXPECTED_ARGUMENT),  # more than the bytes hold
        ({"count": 0}, R.UNEXPECTED_ARGUMENT),
        ({"entries": b"\x00" * 96}, R.UNEXPECTED_ARGUMENT),  # not an entry
        ({"entries": run(6, [2, 3])}, R.UNEXPECTED_ARGUMENT),  # another index
        ({"entries": run(5, [1, 3])}, R.UNEXPECTED_ARGUMENT),  # a term below prev_term
        ({"last_term": 4}, R.UNEXPECTED_ARGUMENT),  # above the request's term
        ({"last_term": 1}, R.UNEXPECTED_ARGUMENT),  # below prev_term
        ({"first_index": 7}, R.UNEXPECTED_ARGUMENT),  # a gap after prev_index
        ({"commit_index": -5}, R.UNEXPECTED_ARGUMENT),
    ],
)
def test_bad_append_runs(v: RequestValidator, fields: dict[str, Any], expected: int) -> None:
    good = {"term": 3, "first_index": 5, "count": 2, "prev_index": 4, "prev_term": 2, "last_term": 3}
    request = PushEntryRequest(**FROM_N1, **{**good, "entries": run(5, [2, 3]), **fields})
    assert code(v.peer_request(request, 3)) == expected


def test_control_pushes_carry_no_entries(v: RequestValidator) -> None:
    commit = PushEntryRequest(**FROM_N1, term=3, type=PushType.COMMIT, count=1, entries=run(0, [1]))
    assert code(v.peer_request(commit, 3)) == R.UNEXPECTED_ARGUMENT
    truncate = PushEntryRequest(**FROM_N1, term=3, type=PushType.TRUNCATE, first_index=-1, prev_index=-2)
    assert code(v.peer_request(truncate, 3)) == R.UNEXPECTED_ARGUMENT


def test_client_append_limits(v: RequestValidator) -> None:
    assert v.append(pb.AppendRequest(bodies=[b"x" * 50, b"y" * 50])) is None
    assert code(v.append(pb.AppendRequest(bodies=[b"x" * 50, b"y" * 51]))) == R.UNEXPECTED_ARGUMENT
    assert code(v.append(pb.AppendRequest(bodies=[b""] * 11))) == R.UNEXPECTED_ARGUMENT
    assert code(v.append(pb.AppendRequest())) == R.REQUEST_WITH_EMPTY_BODYS
    assert code(v.append(pb.AppendRequest(group="h", bodies=[b"x"]))) == R.UNKNOWN_GROUP


class FakeContext:
    def __init__(self, peer: str = "ipv4:10.0.0.9:5555") -> None:
        self._peer = peer
        self._code: Any = None

    def peer(self) -> str:
        return self._peer

    def code(self) -> Any:
        return self._code

    def abort(self, status: Any, details: str) -> None:
        self._code = status
        raise RuntimeError(details)


def test_refusals_are_logged_once_per_kind_then_counted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [0.0]
    monkeypatch.setattr(validate.time, "monotonic", lambda: clock[0])
    refusals = RefusalLog("n0", interval_s=10.0)
    caplog.set_level(logging.WARNING, logger="dledger.transport.validate")
    refusal = Refusal(R.UNKNOWN_MEMBER, "addressed to 'x'")
    for _ in range(3):
        refusals.refused_call("HeartBeat", refusal, FakeContext())
    refusals.refused_call("Vote", refusal, FakeContext())  # another kind: logged
    clock[0] = 11.0
    refusals.refused_call("HeartBeat", refusal, FakeContext("ipv4:10.0.0.9:6666"))  # same host, later
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and refusals.refused == 5
    assert "HeartBeat from ipv4:10.0.0.9:5555" in lines[0] and "UNKNOWN_MEMBER (401)" in lines[0]
    assert "Vote" in lines[1]
    assert "2 more like it not logged" in lines[2]


def test_guard_turns_an_escaping_exception_into_internal(caplog: pytest.LogCaptureFixture) -> None:
    def broken(request: Any, context: Any) -> Any:
        raise ZeroDivisionError("bug")

    context = FakeContext()
    with pytest.raises(RuntimeError):
        guard_unary("Ledger.Get", broken)(b"", context)
    assert context.code() == grpc.StatusCode.INTERNAL
    assert any(r.exc_info and "Ledger.Get failed" in r.getMessage() for r in caplog.records)

    def aborting(request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad")

    caplog.clear()
    context = FakeContext()
    with pytest.raises(RuntimeError):
        guard_unary("Ledger.Get", aborting)(b"", context)
    assert context.code() == grpc.StatusCode.INVALID_ARGUMENT and not caplog.records


def test_a_read_index_request_names_no_leader_but_this_member(v: RequestValidator) -> None:
    ask = {"group": "g", "remote_id": "n0", "local_id": "n1", "term": 3}
    assert v.peer_request(ReadIndexRequest(**ask), 3) is None  # as a follower sends it
    assert v.peer_request(ReadIndexRequest(**ask, leader_id="n0"), 3) is None
    for leader in ("bogus", "n2"):
        assert code(v.peer_request(ReadIndexRequest(**ask, leader_id=leader), 3)) == R.UNEXPECTED_MEMBER


@pytest.mark.parametrize("floor", [-1, MAX_INDEX + 2, 2**63 - 1])
def test_a_heartbeats_retention_floor_is_an_index_or_one_past_it(v: RequestValidator, floor: int) -> None:
    assert code(v.peer_request(HeartBeatRequest(**FROM_N1, term=3, retention_floor=floor), 3)) == R.UNEXPECTED_ARGUMENT
