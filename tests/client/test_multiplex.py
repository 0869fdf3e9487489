"""The client's multiplexing against the fake Ledger: concurrent appends (and gets of
nearby indexes) share requests, each caller gets its own index or its own error, the
retry rules hold per request, and `multiplex=False` sends one RPC per call."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from dledger.client import DLedgerClient, IndeterminateError
from dledger.client import client as client_module
from dledger.client.members import Members
from dledger.client.reads import get_nearby
from dledger.codes import DLedgerError, ResponseCode
from tests.client.fake_ledger import Action, FakeCluster
from tests.e2e.harness import eventually

pytestmark = pytest.mark.unit


@pytest.fixture
def one_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients made in the test send one shared request at a time (a known order)."""
    monkeypatch.setattr(client_module, "APPENDS_IN_FLIGHT", 1)
    monkeypatch.setattr(client_module, "GETS_IN_FLIGHT", 1)


@pytest.fixture
def mux(fake: FakeCluster, one_in_flight: None) -> Iterator[DLedgerClient]:
    with DLedgerClient(fake.peers, timeout_s=30.0) as client:
        client.append(b"warm")  # the leader is known: no discovery inside the test
        yield client


def run_all(calls: dict[str, Callable[[], Any]], queued: Callable[[], int], hold: threading.Event) -> dict[str, Any]:
    """Start `calls` one by one (each queued before the next starts) while the member
    holds its answers, then let it answer; each call's result or exception by name."""
    out: dict[str, Any] = {}

    def run(name: str, call: Callable[[], Any]) -> None:
        try:
            out[name] = call()
        except BaseException as exc:
            out[name] = exc

    threads = []
    for n, (name, call) in enumerate(calls.items()):
        threads.append(threading.Thread(target=run, args=(name, call)))
        threads[-1].start()
        if n > 0:  # the first is in flight; the others queue behind it
            eventually(lambda n=n: queued() == n or None, 10, f"{name} queued")
    hold.set()
    for thread in threads:
        thread.join(30)
    return out


def held_first(fake: FakeCluster, node: str = "n0") -> threading.Event:
    """Make `node` hold the answers of its next calls; returns the event that releases them."""
    fake[node].unary_gate.clear()
    return fake[node].unary_gate


def test_concurrent_appends_share_one_request_and_each_gets_its_own_indexes(
    mux: DLedgerClient, fake: FakeCluster
) -> None:
    leader = fake["n0"]
    hold = held_first(fake)
    calls: dict[str, Callable[[], Any]] = {f"a{k}": (lambda k=k: mux.append(b"a%d" % k)) for k in range(6)}
    calls["many"] = lambda: mux.append_many([b"m0", b"m1", b"m2"])
    calls["batch"] = lambda: mux.append_batch([b"b0", b"b1"])
    assert mux._appends is not None
    out = run_all(calls, mux._appends.queued, hold)
    assert [len(r) for r in leader.append_requests] == [1, 1, 10]  # warm-up, the first, all the rest
    bodies = fake.log.bodies
    for k in range(6):
        assert bodies[out[f"a{k}"]] == b"a%d" % k
    assert bodies[out["many"] : out["many"] + 3] == [b"m0", b"m1", b"m2"]
    assert (out["batch"].count, bodies[out["batch"].first_index : out["batch"].last_index + 1]) == (2, [b"b0", b"b1"])
    assert len(bodies) == 1 + 6 + 3 + 2


def test_a_refused_shared_request_fails_each_caller_and_appends_nothing(mux: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(Action("code", ResponseCode.SUCCESS, append=True), Action("code", ResponseCode.UNKNOWN_GROUP))
    hold = held_first(fake)
    assert mux._appends is not None
    out = run_all({f"a{k}": (lambda k=k: mux.append(b"a%d" % k)) for k in range(4)}, mux._appends.queued, hold)
    assert out["a0"] == 1
    for k in (1, 2, 3):
        assert type(out[f"a{k}"]) is DLedgerError and out[f"a{k}"].code == ResponseCode.UNKNOWN_GROUP
    assert len({id(out[f"a{k}"]) for k in (1, 2, 3)}) == 3  # each thread raised its own error
    assert fake.log.bodies == [b"warm", b"a0"]


def test_an_argument_refusal_resends_each_caller_alone(mux: DLedgerClient, fake: FakeCluster) -> None:
    """One caller's bad bodies must not fail the others: UNEXPECTED_ARGUMENT on a shared
    request (nothing appended) sends each call on its own."""
    fake["n0"].script(
        Action("code", ResponseCode.SUCCESS, append=True),
        Action("code", ResponseCode.UNEXPECTED_ARGUMENT),  # the shared request
        Action("code", ResponseCode.SUCCESS, append=True),  # a1 alone
        Action("code", ResponseCode.UNEXPECTED_ARGUMENT),  # a2 alone: its own fault
        Action("code", ResponseCode.SUCCESS, append=True),  # a3 alone
    )
    hold = held_first(fake)
    assert mux._appends is not None
    out = run_all({f"a{k}": (lambda k=k: mux.append(b"a%d" % k)) for k in range(4)}, mux._appends.queued, hold)
    assert (out["a0"], out["a1"], out["a3"]) == (1, 2, 3)
    assert isinstance(out["a2"], DLedgerError) and out["a2"].code == ResponseCode.UNEXPECTED_ARGUMENT
    assert fake.log.bodies == [b"warm", b"a0", b"a1", b"a3"]
    assert [len(r) for r in fake["n0"].append_requests] == [1, 1, 3, 1, 1, 1]


def test_an_unknown_outcome_is_indeterminate_for_every_caller(mux: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(
        Action("code", ResponseCode.SUCCESS, append=True),
        Action("abort", status=grpc.StatusCode.INTERNAL, details="lost after append", append=True),
    )
    hold = held_first(fake)
    assert mux._appends is not None
    out = run_all({f"a{k}": (lambda k=k: mux.append(b"a%d" % k)) for k in range(3)}, mux._appends.queued, hold)
    assert out["a0"] == 1
    assert all(type(out[k]) is IndeterminateError for k in ("a1", "a2"))
    assert fake.log.bodies == [b"warm", b"a0", b"a1", b"a2"]  # appended once; the callers were told "unknown"


def test_redirects_hold_for_a_shared_request(mux: DLedgerClient, fake: FakeCluster) -> None:
    fake["n0"].script(Action("code", ResponseCode.SUCCESS, append=True), Action("not_leader", hint="n1"))
    hold = held_first(fake)
    assert mux._appends is not None
    fake.log.leader = "n1"
    out = run_all({f"a{k}": (lambda k=k: mux.append(b"a%d" % k)) for k in range(3)}, mux._appends.queued, hold)
    assert (out["a0"], sorted((out["a1"], out["a2"]))) == (1, [2, 3])
    assert [len(r) for r in fake["n1"].append_requests] == [2]  # the shared request, once, to the new leader


def test_without_multiplexing_every_call_is_its_own_request(fake: FakeCluster) -> None:
    with DLedgerClient(fake.peers, timeout_s=30.0, multiplex=False) as client:
        client.append(b"warm")
        hold = held_first(fake)
        threads = [threading.Thread(target=client.append, args=(b"x%d" % k,)) for k in range(5)]
        for thread in threads:
            thread.start()
        eventually(lambda: fake["n0"].held == 5 or None, 10, "five calls in flight at once")
        hold.set()
        for thread in threads:
            thread.join(30)
    assert [len(r) for r in fake["n0"].append_requests] == [1] * 6


def test_concurrent_gets_of_nearby_indexes_share_one_get(mux: DLedgerClient, fake: FakeCluster) -> None:
    mux.append_many([b"e%d" % k for k in range(1, 12)])  # indexes 0..11
    hold = held_first(fake)
    assert mux._gets is not None
    gets = mux._gets
    calls: dict[str, Callable[[], Any]] = {
        "first": lambda: mux.get(2),
        "pair": lambda: mux.get(3, count=2),
        "far": lambda: mux.get(9, count=5),  # runs past the committed index: fewer entries
        "beyond": lambda: mux.get(15),
    }
    out = run_all(calls, lambda: gets.queued((None, 0)), hold)
    assert fake["n0"].get_requests == [(2, 1), (3, 13)]
    assert [e.index for e in out["pair"]] == [3, 4] and [e.body for e in out["pair"]] == [b"e3", b"e4"]
    assert [e.index for e in out["far"]] == [9, 10, 11]
    assert isinstance(out["beyond"], DLedgerError) and out["beyond"].code == ResponseCode.INDEX_OUT_OF_RANGE
    assert [e.body for e in out["first"]] == [b"e2"]


def test_get_nearby_reads_alone_what_the_shared_answer_does_not_settle() -> None:
    fake = FakeCluster(3, page=4)  # at most 4 entries per Get answer
    try:
        fake.log.append([b"e%d" % k for k in range(20)])
        members = Members(fake.peers, "default", 10.0)
        results = get_nearby(members, [(0, 2), (2, 6), (10, 1)], None)
        members.close()
    finally:
        fake.close()
    assert [[e.index for e in r] for r in results if isinstance(r, list)] == [[0, 1], [2, 3, 4, 5, 6, 7], [10]]
    assert fake["n0"].get_requests[0] == (0, 11)  # the union first, then the rest alone


def test_a_big_append_goes_at_once_on_its_own(mux: DLedgerClient, fake: FakeCluster) -> None:
    """A request that amortises a call by itself is not queued behind a shared one."""
    big = [b"b" * 1024] * (client_module.ALONE_BYTES // 1024)
    hold = held_first(fake)
    small = threading.Thread(target=mux.append, args=(b"small",))
    small.start()
    eventually(lambda: fake["n0"].held == 1 or None, 10, "the small append in flight")
    alone = threading.Thread(target=mux.append_many, args=(big,))
    alone.start()
    eventually(lambda: fake["n0"].held == 2 or None, 10, "the big append in flight beside it")
    hold.set()
    small.join(30)
    alone.join(30)
    assert sorted(len(r) for r in fake["n0"].append_requests) == [1, 1, len(big)]
