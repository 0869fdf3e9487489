"""ServiceThread: a body can ask for its next run sooner or later than the interval;
`wakeup()` runs it at once."""

from __future__ import annotations

import logging
import threading

from dledger.codes import DLedgerError, ResponseCode
from dledger.service_thread import FAILURE_WAIT_MAX_S, ServiceThread, failure_wait_s

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


def _run_until(body_results: list[BaseException | None]) -> list[logging.LogRecord]:
    """Run a thread whose body raises (or returns for None) each of `body_results` in
    turn; the log records of its failures."""
    done = threading.Event()
    results = iter(body_results)

    def body() -> float | None:
        outcome = next(results, None)
        if outcome is not None:
            raise outcome
        done.set()
        return 600_000.0

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("dledger.service_thread")
    logger.addHandler(handler)
    thread = ServiceThread("failing", body, interval_ms=1)
    thread.start()
    try:
        assert done.wait(WAIT_S)
    finally:
        thread.stop()
        logger.removeHandler(handler)
    return [r for r in records if r.getMessage().startswith("failing ")]  # not another test's threads


def test_a_failure_that_repeats_is_said_once_with_its_traceback() -> None:
    """A pass that could not persist its term on a full disk logged a 35-line traceback
    every 13 ms (22,855 lines in 10 s)."""
    records = _run_until([OSError(28, "No space left on device")] * 5)
    assert [(r.getMessage(), r.exc_info is not None) for r in records] == [("failing failed", True)]


def test_each_new_failure_is_said_and_a_dledger_error_without_a_traceback() -> None:
    records = _run_until([RuntimeError("a"), RuntimeError("b"), DLedgerError(ResponseCode.DISK_FULL, "no space")])
    assert [(r.getMessage(), r.exc_info is not None) for r in records] == [
        ("failing failed", True),
        ("failing failed", True),
        ("failing failed: DISK_FULL (415): no space", False),
    ]


def test_failures_in_a_row_pause_longer_up_to_a_second() -> None:
    assert [failure_wait_s(0.01, n) for n in (1, 2, 3)] == [0.02, 0.04, 0.08]
    assert failure_wait_s(0.01, 10) == failure_wait_s(0.01, 10_000) == FAILURE_WAIT_MAX_S == 1.0
    assert failure_wait_s(5.0, 1) == 5.0  # never shorter than the interval
