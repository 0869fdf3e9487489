"""Combiner: calls that find a free slot send at once in their own thread; calls that
arrive while every slot is busy go together in the next request, sent by the oldest of
them; each caller gets its own result or error; unsent calls time out untouched."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dledger.client import IndeterminateError
from dledger.client.combiner import Combiner
from dledger.codes import DLedgerError, ResponseCode
from tests.e2e.harness import eventually

pytestmark = pytest.mark.unit


class Recorder:
    """A `send` that records each batch and the thread that sent it, answers item * 10
    (or the exception an item names), and can hold the first `hold` batches."""

    def __init__(self, hold: int = 0) -> None:
        self.batches: list[list[Any]] = []
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.hold = hold
        self.lock = threading.Lock()

    def __call__(self, items: list[Any]) -> list[Any]:
        with self.lock:
            self.batches.append(list(items))
            self.threads.append(threading.current_thread().name)
            held = len(self.batches) <= self.hold
        if held:
            self.gate.wait()
        return [item if isinstance(item, BaseException) else item * 10 for item in items]


def start(target: Callable[[], Any], name: str, out: dict[str, Any]) -> threading.Thread:
    """Run `target` in a thread named `name`; its result or exception lands in out[name]."""

    def run() -> None:
        try:
            out[name] = target()
        except BaseException as exc:
            out[name] = exc

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def queue_behind(
    combiner: Combiner[Any, Any], target: Callable[[], Any], name: str, out: dict[str, Any], key: str | None = None
) -> threading.Thread:
    """`start` a call that must queue on lane `key`, and wait until it has."""
    waiting = combiner.queued(key)
    thread = start(target, name, out)
    eventually(lambda: combiner.queued(key) == waiting + 1 or None, 10, f"{name} queued")
    return thread


def test_an_idle_call_is_sent_at_once_by_its_own_thread() -> None:
    send = Recorder()
    combiner: Combiner[int, int] = Combiner(send, max_in_flight=1)
    assert combiner.call(4) == 40
    assert send.batches == [[4]] and send.threads == [threading.current_thread().name]
    assert combiner.requests == 1 and combiner.queued() == 0


def test_calls_arriving_while_busy_share_the_next_request_sent_by_the_oldest() -> None:
    send = Recorder(hold=2)
    combiner: Combiner[int, int] = Combiner(send, max_in_flight=2)
    out: dict[str, Any] = {}
    busy = [start(lambda k=k: combiner.call(k), f"busy{k}", out) for k in (1, 2)]
    eventually(lambda: len(send.batches) == 2 or None, 10, "two requests in flight")
    # one after the other, so the oldest is known
    queued = [queue_behind(combiner, lambda k=k: combiner.call(k), f"queued{k}", out) for k in range(3, 9)]
    send.gate.set()
    for thread in busy + queued:
        thread.join(10)
    assert sorted(map(sorted, send.batches)) == [[1], [2], [3, 4, 5, 6, 7, 8]]
    assert send.threads[2] == "queued3"  # the oldest queued call sent the shared request
    assert {name: value for name, value in out.items()} == {f"busy{k}": k * 10 for k in (1, 2)} | {
        f"queued{k}": k * 10 for k in range(3, 9)
    }
    assert combiner.requests == 3 and combiner.queued() == 0


def test_each_caller_gets_its_own_error_and_the_others_their_results() -> None:
    send = Recorder(hold=1)
    combiner: Combiner[Any, Any] = Combiner(send, max_in_flight=1)
    out: dict[str, Any] = {}
    first = start(lambda: combiner.call(1), "first", out)
    eventually(lambda: send.batches or None, 10, "the first request in flight")
    refused = DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "this one")
    others = [
        queue_behind(combiner, lambda: combiner.call(2), "ok", out),
        queue_behind(combiner, lambda: combiner.call(refused), "bad", out),
    ]
    send.gate.set()
    for thread in [first, *others]:
        thread.join(10)
    assert out["first"] == 10 and out["ok"] == 20 and out["bad"] is refused
    assert send.batches[1][0] == 2 and send.batches[1][1] is refused


def test_an_exception_of_send_reaches_every_caller_of_that_request() -> None:
    def send(items: list[int]) -> list[int]:
        raise OSError("boom")

    combiner: Combiner[int, int] = Combiner(send)
    with pytest.raises(OSError, match="boom"):
        combiner.call(1)
    short: Combiner[int, int] = Combiner(lambda items: [])
    with pytest.raises(RuntimeError, match="0 results for 1 items"):
        short.call(1)


def test_a_queued_call_that_waits_too_long_leaves_unsent() -> None:
    send = Recorder(hold=1)
    combiner: Combiner[int, int] = Combiner(send, max_in_flight=1)
    out: dict[str, Any] = {}
    first = start(lambda: combiner.call(1), "first", out)
    eventually(lambda: send.batches or None, 10, "the first request in flight")
    with pytest.raises(DLedgerError) as info:
        combiner.call(2, wait_s=0.01)
    assert info.value.code == ResponseCode.TIMEOUT and "nothing was sent" in info.value.message
    assert combiner.queued() == 0
    send.gate.set()
    first.join(10)
    assert out["first"] == 10 and send.batches == [[1]]  # 2 was never sent
    assert combiner.call(3) == 30


def test_limits_split_requests_and_a_big_item_goes_alone() -> None:
    send = Recorder(hold=1)
    combiner: Combiner[int, int] = Combiner(send, max_in_flight=1, max_items=3, max_size=100)
    out: dict[str, Any] = {}
    threads = [start(lambda: combiner.call(0), "first", out)]
    eventually(lambda: send.batches or None, 10, "the first request in flight")
    sizes = {1: 10, 2: 10, 3: 10, 4: 10, 5: 500, 6: 10}
    for k, size in sizes.items():
        threads.append(queue_behind(combiner, lambda k=k, size=size: combiner.call(k, size=size), f"c{k}", out))
    send.gate.set()
    for thread in threads:
        thread.join(10)
    assert send.batches == [[0], [1, 2, 3], [4, 6], [5]]
    assert all(out[f"c{k}"] == k * 10 for k in sizes)


def test_lanes_do_not_wait_for_each_other() -> None:
    send = Recorder(hold=1)
    combiner: Combiner[int, int] = Combiner(send, max_in_flight=1)
    out: dict[str, Any] = {}
    threads = [start(lambda: combiner.call(0, key="a"), "first", out)]
    eventually(lambda: send.batches or None, 10, "lane a busy")
    assert combiner.call(7, key="b") == 70  # lane b is idle: sent at once
    threads.append(queue_behind(combiner, lambda: combiner.call(1, key="a"), "queued", out, key="a"))
    assert combiner.queued("b") == 0
    send.gate.set()
    for thread in threads:
        thread.join(10)
    assert send.batches == [[0], [7], [1]] and out == {"first": 0, "queued": 10}


def test_an_interrupted_sender_leaves_the_others_an_unknown_outcome() -> None:
    release = threading.Event()
    arrived = threading.Event()

    def send(items: list[int]) -> list[int]:
        if items == [0]:
            arrived.set()
            release.wait()
            return [0]
        raise KeyboardInterrupt

    combiner: Combiner[int, int] = Combiner(send, max_in_flight=1)
    out: dict[str, Any] = {}
    threads = [start(lambda: combiner.call(0), "first", out)]
    arrived.wait(10)
    threads += [queue_behind(combiner, lambda k=k: combiner.call(k), f"c{k}", out) for k in (1, 2, 3)]
    release.set()
    for thread in threads:
        thread.join(10)
    assert isinstance(out["c1"], KeyboardInterrupt)  # the sender itself
    assert all(isinstance(out[k], IndeterminateError) for k in ("c2", "c3"))
    assert combiner.call(0) == 0  # the slot was passed on: the combiner still works


def test_many_threads_each_item_sent_exactly_once_with_its_own_result() -> None:
    rng = random.Random(7)
    seen: list[int] = []
    lock = threading.Lock()

    def send(items: list[int]) -> list[int]:
        with lock:
            seen.extend(items)
        return [-item for item in items]

    combiner: Combiner[int, int] = Combiner(send, max_in_flight=2, max_items=5)
    results: dict[int, int] = {}

    def worker(base: int) -> None:
        for k in range(200):
            item = base * 1000 + k
            results[item] = combiner.call(item, key=rng.choice("xy"))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(seen) == sorted(results) and len(seen) == 16 * 200
    assert all(value == -item for item, value in results.items())
    assert combiner.queued("x") == combiner.queued("y") == 0


def test_max_in_flight_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_in_flight"):
        Combiner(lambda items: items, max_in_flight=0)
