"""ServiceThread: a body can ask for its next run sooner or later than the interval;
`wakeup()` runs it at once."""

from __future__ import annotations

import threading

from dledger.service_thread import ServiceThread

WAIT_S = 10.0


def test_body_may_ask_to_run_again_sooner_than_the_interval() -> None:
    runs: list[int] = []
    second = threading.Event()

    def body() -> float | None:
        runs.append(len(runs))
        if len(runs) == 2:
            second.set()
        return 1.0 if len(runs) == 1 else None  # the first run asks for another in 1 ms

    thread = ServiceThread("sooner", body, interval_ms=600_000)
    thread.start()
    try:
        assert second.wait(WAIT_S)  # the interval alone would take ten minutes
    finally:
        thread.stop()
    assert runs == [0, 1]  # None keeps the interval: no third run before the stop


def test_body_may_sleep_longer_than_the_interval_until_woken() -> None:
    runs: list[int] = []
    first, second = threading.Event(), threading.Event()

    def body() -> float | None:
        runs.append(len(runs))
        (first if len(runs) == 1 else second).set()
        return 600_000.0  # nothing to do: sleep until woken

    thread = ServiceThread("idle", body, interval_ms=1)
    thread.start()
    try:
        assert first.wait(WAIT_S)
        # the 1 ms interval would have run it again by now; a slow machine only makes
        # this check weaker, never wrong
        assert not second.wait(0.2)
        thread.wakeup()
        assert second.wait(WAIT_S)
    finally:
        thread.stop()
    assert runs == [0, 1]
