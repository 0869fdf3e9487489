"""Calls that share one request each keep their own deadline (helper I #3): the shared
request is sent within the earliest caller's deadline, and a call with a 10 s timeout
failed after the 2 s of the call it shared a request with (NOT_LEADER: no leader known).
When the shared request runs out of the earliest caller's time with nothing done, the
calls with time left are sent on their own; a refusal before that fails every call."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from dledger.client import AppendResult, DLedgerClient
from dledger.client.queries import send_shared_queries
from dledger.clock import ManualClock
from dledger.codes import DLedgerError, ReadMode, ResponseCode
from tests.client.fake_ledger import FakeCluster

pytestmark = pytest.mark.unit


class SlowGroup:
    """A shared request (more than one request in it) gets no leader until its deadline;
    a request sent alone is answered."""

    def __init__(self, clock: ManualClock, refuse: ResponseCode | None = None) -> None:
        self.clock = clock
        self.refuse = refuse
        self.sent: list[tuple[int, int]] = []  # (requests in it, deadline)

    def send(self, size: int, deadline: int) -> None:
        self.sent.append((size, deadline))
        if self.refuse is not None:
            raise DLedgerError(self.refuse, "refused")
        if size > 1:
            self.clock.set(deadline)  # the whole time spent looking for a leader
            raise DLedgerError(ResponseCode.NOT_LEADER, "no leader known")


def test_shared_queries_with_time_left_are_sent_alone_after_the_earliest_deadline() -> None:
    clock = ManualClock(1_000)
    group = SlowGroup(clock)

    def write(_method: str, request: Any, deadline: int) -> Any:
        group.send(len(request.requests), deadline)
        return SimpleNamespace(answers=[b"ok:" + r for r in request.requests])

    members: Any = SimpleNamespace(group="g", clock=clock)
    calls = [(b"a", ReadMode.RAFT_LOG, 11_000), (b"b", ReadMode.RAFT_LOG, 3_000), (b"c", ReadMode.RAFT_LOG, 3_000)]
    out = send_shared_queries(members, write, calls)
    assert out[0] == b"ok:a"  # 10 s: sent alone once the shared request ran out of 2 s
    assert all(isinstance(o, DLedgerError) and o.code == ResponseCode.NOT_LEADER for o in out[1:])
    assert group.sent == [(3, 3_000), (1, 11_000)]


def test_a_shared_query_refused_before_its_deadline_fails_every_call() -> None:
    clock = ManualClock(1_000)
    group = SlowGroup(clock, refuse=ResponseCode.UNKNOWN_GROUP)

    def write(_method: str, request: Any, deadline: int) -> Any:
        group.send(len(request.requests), deadline)

    members: Any = SimpleNamespace(group="g", clock=clock)
    out = send_shared_queries(members, write, [(b"a", ReadMode.RAFT_LOG, 11_000), (b"b", ReadMode.RAFT_LOG, 3_000)])
    assert all(isinstance(o, DLedgerError) and o.code == ResponseCode.UNKNOWN_GROUP for o in out)
    assert group.sent == [(2, 3_000)]


def test_shared_appends_with_time_left_are_sent_alone_after_the_earliest_deadline(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1_000)
    group = SlowGroup(clock)

    def append_request(bodies: Sequence[bytes], deadline: int, magic: int, request: Any = None) -> AppendResult:
        group.send(len(bodies), deadline)
        return AppendResult(7, len(bodies), 1, "n0")

    with DLedgerClient(fake.peers, clock=clock) as client:
        monkeypatch.setattr(client, "_append_request", append_request)
        out = client._send_shared_appends([([b"a"], 3_000, 1), ([b"b"], 11_000, 1)])
    assert isinstance(out[0], DLedgerError) and out[0].code == ResponseCode.NOT_LEADER
    assert out[1] == AppendResult(7, 1, 1, "n0")
    assert group.sent == [(2, 3_000), (1, 11_000)]
