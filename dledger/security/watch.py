"""FileWatch: whether files a member read at start (tokens, TLS certificates) changed
since, looked at no more than once per `RECHECK_S` so that asking on every call is
cheap."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

RECHECK_S = 1.0
"""How often, at most, a member looks whether a watched file changed."""

Signature = tuple[int, int, int] | None
"""A file's inode, size and modification time (None: it cannot be looked at)."""


def signature(path: Path) -> Signature:
    """What `FileWatch` compares of `path`."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class FileWatch:
    """Files whose inode, size or modification time is compared with what it was.

    Args:
        paths: the files (a missing one counts as a state of its own).
        clock: seconds, monotonic (tests pass their own).
        recheck_s: the least time between two looks.
    """

    def __init__(
        self, paths: Iterable[str | Path], clock: Callable[[], float] = time.monotonic, recheck_s: float = RECHECK_S
    ) -> None:
        self.paths = tuple(Path(p) for p in paths)
        self._clock = clock
        self._recheck_s = recheck_s
        self._lock = threading.Lock()
        self._seen = self._look()
        self._checked = clock()

    def _look(self) -> tuple[Signature, ...]:
        return tuple(signature(p) for p in self.paths)

    def changed(self) -> bool:
        """True when `RECHECK_S` passed since the last look and a file changed since the
        look before (each change is reported once)."""
        now = self._clock()
        if now - self._checked < self._recheck_s:
            return False
        with self._lock:
            if now - self._checked < self._recheck_s:
                return False
            self._checked = now
            seen = self._look()
            if seen == self._seen:
                return False
            self._seen = seen
            return True
