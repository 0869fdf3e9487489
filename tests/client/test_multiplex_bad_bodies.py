"""One caller's bad bodies fail that caller only: a multiplexed client checks a call's
body types before it joins a shared request, and a shared request that cannot be built
is split per caller instead of failing everyone who shared it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dledger.client import DLedgerClient
from dledger.client import client as client_module
from dledger.entry import MAGIC_NORMAL
from tests.client.fake_ledger import FakeCluster
from tests.e2e.harness import eventually

pytestmark = pytest.mark.unit


@pytest.fixture
def mux(fake: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[DLedgerClient]:
    """A multiplexing client sending one shared Append at a time, the leader known."""
    monkeypatch.setattr(client_module, "APPENDS_IN_FLIGHT", 1)
    with DLedgerClient(fake.peers, timeout_s=30.0) as client:
        client.append(b"warm")
        yield client


class Calls:
    """Calls run in threads, each one's result or exception by name."""

    def __init__(self) -> None:
        self.out: dict[str, Any] = {}
        self.threads: dict[str, threading.Thread] = {}

    def start(self, name: str, call: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                self.out[name] = call()
            except BaseException as exc:
                self.out[name] = exc

        self.threads[name] = threading.Thread(target=run, name=name)
        self.threads[name].start()

    def join(self) -> None:
        for thread in self.threads.values():
            thread.join(30)
            assert not thread.is_alive()


def test_a_str_body_fails_its_caller_before_it_joins_a_shared_request(mux: DLedgerClient, fake: FakeCluster) -> None:
    assert mux._appends is not None
    queued = mux._appends.queued
    fake["n0"].unary_gate.clear()  # the first append stays in flight, the others queue
    calls = Calls()
    calls.start("a0", lambda: mux.append(b"a0"))
    eventually(lambda: fake["n0"].held == 1 or None, 10, "a0 in flight")
    calls.start("a1", lambda: mux.append(b"a1"))
    eventually(lambda: queued() == 1 or None, 10, "a1 queued")
    calls.start("bad", lambda: mux.append("oops"))  # type: ignore[arg-type]
    eventually(lambda: "bad" in calls.out or queued() == 2 or None, 10, "the bad call refused or queued")
    ahead = 1 if "bad" in calls.out else 2  # (unfixed, the bad call queues too)
    calls.start("a3", lambda: mux.append_many([b"a3", b"a4"]))
    eventually(lambda: queued() == ahead + 1 or None, 10, "a3 queued")
    fake["n0"].unary_gate.set()
    calls.join()
    out = calls.out
    assert (out["a0"], out["a1"], out["a3"]) == (1, 2, 3)
    assert fake.log.bodies == [b"warm", b"a0", b"a1", b"a3", b"a4"]
    assert isinstance(out["bad"], TypeError) and "body 0 is str, expected bytes" in str(out["bad"])
    assert [len(r) for r in fake["n0"].append_requests] == [1, 1, 3]  # a1 and a3 still shared one request


def test_a_shared_request_that_cannot_be_built_is_sent_per_caller(mux: DLedgerClient, fake: FakeCluster) -> None:
    """Past the check (the combiner called directly), a body protobuf refuses fails the
    shared request before anything is sent: each call goes alone, the bad one fails."""
    assert mux._appends is not None
    appends = mux._appends
    deadline = mux.members.deadline_ms()
    fake["n0"].unary_gate.clear()
    calls = Calls()
    calls.start("a0", lambda: mux.append(b"a0"))
    eventually(lambda: fake["n0"].held == 1 or None, 10, "a0 in flight")
    calls.start("a1", lambda: mux.append(b"a1"))
    eventually(lambda: appends.queued() == 1 or None, 10, "a1 queued")
    calls.start("bad", lambda: appends.call((["oops"], deadline, MAGIC_NORMAL), size=4, wait_s=30.0))
    eventually(lambda: appends.queued() == 2 or None, 10, "bad queued")
    calls.start("a3", lambda: mux.append(b"a3"))
    eventually(lambda: appends.queued() == 3 or None, 10, "a3 queued")
    fake["n0"].unary_gate.set()
    calls.join()
    out = calls.out
    assert isinstance(out["bad"], TypeError)
    assert (out["a0"], out["a1"], out["a3"]) == (1, 2, 3)
    assert fake.log.bodies == [b"warm", b"a0", b"a1", b"a3"]
    assert [len(r) for r in fake["n0"].append_requests] == [1, 1, 1, 1]  # the shared one was never sent


def test_sixteen_threads_some_with_str_bodies_each_get_their_own_outcome(mux: DLedgerClient, fake: FakeCluster) -> None:
    """The reported case: 16 threads append at once on one client, every fourth with a
    str body; the others' appends all succeed, at the indexes of their own bodies."""
    start = threading.Barrier(16)
    calls = Calls()
    for rounds in range(3):
        for k in range(16):
            body: Any = "oops" if k % 4 == 3 else b"r%d-%d" % (rounds, k)
            calls.start(f"r{rounds}-{k}", lambda body=body: (start.wait(10), mux.append(body))[1])
        calls.join()
        start.reset()
    for name, result in calls.out.items():
        k = int(name.split("-")[1])
        if k % 4 == 3:
            assert isinstance(result, TypeError), (name, result)
        else:
            assert isinstance(result, int), (name, result)
            assert fake.log.bodies[result] == name.encode()
    assert len(fake.log.bodies) == 1 + 3 * 12
