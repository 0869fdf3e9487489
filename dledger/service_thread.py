"""ServiceThread: a named daemon thread whose body is `run_once()`, woken early by
`wakeup()` and stopped by `stop()` (DLedger's ShutdownAbleThread); `PeriodicPass`, the
work a component offers to whoever owns its threads."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dledger.codes import DLedgerError

log = logging.getLogger(__name__)

FAILURE_WAIT_MAX_S = 1.0
"""The longest pause after failures in a row (a pass that cannot persist a term on a
full disk tried again every 13 ms, with a 35-line traceback each time)."""
REPEAT_SAY_S = 30.0
"""A failure that repeats is said again at most this often, with its count."""


def failure_wait_s(interval_s: float, failures: int) -> float:
    """The pause after `failures` failed iterations in a row: the interval doubled for
    each, up to FAILURE_WAIT_MAX_S (never shorter than the interval)."""
    return max(interval_s, min(FAILURE_WAIT_MAX_S, interval_s * 2.0 ** min(failures, 30)))


class ServiceThread:
    """Runs `body()` every `interval_ms` (or sooner after `wakeup()`) until stopped.

    Args:
        name: thread name (shown in logs and py-spy).
        body: one iteration of work; it may return how many milliseconds until it
            wants to run again (sooner than `interval_ms`, or later when it has nothing
            to do and whoever gives it work calls `wakeup()`). An exception is logged
            (a traceback the first time, unless it is a DLedgerError; a repeat at most
            every REPEAT_SAY_S) and, when `on_error` is given, passed to it; the thread
            keeps running unless on_error stops it, pausing longer after each failure
            in a row (`failure_wait_s`).
        interval_ms: the pause between iterations when `body` returns None.
        on_error: called with the exception raised by `body`.
    """

    def __init__(
        self,
        name: str,
        body: Callable[[], float | None],
        interval_ms: float,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.name = name
        self._body = body
        self._interval_s = interval_ms / 1000.0
        self._on_error = on_error
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._failure = ""  # the failure said last, and when
        self._failure_said_at = 0.0
        self._repeats = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def wakeup(self) -> None:
        """Run the next iteration now."""
        self._wake.set()

    @property
    def running(self) -> bool:
        """True until stop() was called."""
        return not self._stopped.is_set()

    def stop(self, join_timeout_s: float = 5.0) -> None:
        """Stop after the current iteration and wait for the thread to end."""
        self._stopped.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(join_timeout_s)

    def _loop(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            wait_s = self._interval_s
            try:
                wanted_ms = self._body()
                if wanted_ms is not None:
                    wait_s = max(0.0, wanted_ms / 1000.0)
                failures = 0
            except BaseException as exc:  # a service thread must not die silently
                failures += 1
                self._say_failure(exc)
                if self._on_error is not None:
                    self._on_error(exc)
                wait_s = failure_wait_s(self._interval_s, failures)
            self._wake.wait(wait_s)
            self._wake.clear()

    def _say_failure(self, exc: BaseException) -> None:
        """Log a failure: a new one at once (its traceback unless it is a DLedgerError,
        an error the code raised on purpose), the same one again at most every
        REPEAT_SAY_S with how often it happened meanwhile."""
        said = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if said != self._failure:
            self._failure, self._failure_said_at, self._repeats = said, now, 0
            if isinstance(exc, DLedgerError):
                log.error("%s failed: %s", self.name, exc)
            else:
                log.exception("%s failed", self.name)
            return
        self._repeats += 1
        if now - self._failure_said_at >= REPEAT_SAY_S:
            log.error("%s failed %d more times since: %s", self.name, self._repeats, said)
            self._failure_said_at, self._repeats = now, 0


@dataclass(frozen=True)
class PeriodicPass:
    """Background work a component offers instead of starting a thread for it (a
    store's flush, warm-ahead and retention passes); its owner runs it.

    Attributes:
        name: the thread's name.
        run_once: one pass; may return how many milliseconds until it wants to run again
            (see `ServiceThread`).
        interval_ms: the pause between passes when `run_once` returns None.
        on_error: called with an exception the pass raised.
    """

    name: str
    run_once: Callable[[], float | None]
    interval_ms: float
    on_error: Callable[[BaseException], None] | None = None


def start_passes(passes: Iterable[PeriodicPass]) -> list[ServiceThread]:
    """Run each pass on a started `ServiceThread` of its own; stop them with `stop()`."""
    threads = [ServiceThread(p.name, p.run_once, p.interval_ms, p.on_error) for p in passes]
    for thread in threads:
        thread.start()
    return threads
