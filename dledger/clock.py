"""Clocks: the only place that reads time or sleeps (the raft core takes `now_ms`)."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A monotonic millisecond clock."""

    def now_ms(self) -> int:
        """Milliseconds on a monotonic scale (not wall time)."""
        ...

    def sleep_ms(self, ms: int) -> None:
        """Wait `ms` milliseconds (a ManualClock just advances)."""
        ...


class MonotonicClock:
    """The real clock, from `time.monotonic_ns`."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def sleep_ms(self, ms: int) -> None:
        if ms > 0:
            time.sleep(ms / 1000.0)


class ManualClock:
    """A clock that only moves when told to: deterministic tests and simulations.

    Args:
        start_ms: the initial reading.
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def sleep_ms(self, ms: int) -> None:
        self.advance(max(0, ms))

    def advance(self, ms: int) -> int:
        """Move forward by `ms` (never backwards); returns the new reading."""
        if ms < 0:
            raise ValueError(f"a clock cannot go backwards ({ms} ms)")
        self._now_ms += ms
        return self._now_ms

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms` (must not be earlier than the current reading)."""
        if now_ms < self._now_ms:
            raise ValueError(f"a clock cannot go backwards ({now_ms} < {self._now_ms})")
        self._now_ms = now_ms


def perf_us() -> float:
    """A high-resolution timestamp in microseconds, for latency metrics only."""
    return time.perf_counter_ns() / 1000.0
