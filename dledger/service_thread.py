"""ServiceThread: a named daemon thread whose body is `run_once()`, woken early by
`wakeup()` and stopped by `stop()` (DLedger's ShutdownAbleThread); `PeriodicPass`, the
work a component offers to whoever owns its threads."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)


class ServiceThread:
    """Runs `body()` every `interval_ms` (or sooner after `wakeup()`) until stopped.

    Args:
        name: thread name (shown in logs and py-spy).
        body: one iteration of work; it may return how many milliseconds until it
            wants to run again (sooner than `interval_ms`, or later when it has nothing
            to do and whoever gives it work calls `wakeup()`). An exception is logged
            and, when `on_error` is given, passed to it (the thread keeps running unless
            on_error stops it).
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
        while not self._stopped.is_set():
            wait_s = self._interval_s
            try:
                wanted_ms = self._body()
                if wanted_ms is not None:
                    wait_s = max(0.0, wanted_ms / 1000.0)
            except BaseException as exc:  # a service thread must not die silently
                log.exception("%s failed", self.name)
                if self._on_error is not None:
                    self._on_error(exc)
            self._wake.wait(wait_s)
            self._wake.clear()


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
