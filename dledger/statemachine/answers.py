"""The answers a state machine's `on_apply` gives, handed to whoever waits for them.

DLedger 0.4.0's `ApplyEntry.setResp`: `on_apply` may return one answer per entry. Only a
RAFT_LOG query (the read committed through the log) waits for the answer of its own
entry; every other answer is dropped at once. Since the waiter learns its entry's index
only after appending it, and the entry may be applied before the waiter asks, a waiter
first takes a ticket (`expect`, before it appends): while tickets are out, the answers
of entries applied from the oldest ticket's floor on are kept, and `take` hands one out
(once). Releasing the last ticket drops whatever nobody took.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence

from dledger.entry import Entry

log = logging.getLogger(__name__)


class AnswerBox:
    """Answers of applied entries kept for their waiters (thread-safe).

    Args:
        applied_index: returns the index applied so far (a ticket's floor is the next).
    """

    def __init__(self, applied_index: Callable[[], int]) -> None:
        self._applied_index = applied_index
        self._cond = threading.Lock()
        self._answers: dict[int, bytes] = {}
        self._floors: dict[int, int] = {}  # ticket -> the lowest index it may wait for
        self._tickets = itertools.count(1)
        self._floor = -1  # min of _floors (valid while there are tickets)

    def expect(self) -> int:
        """Take a ticket before appending the entries whose answers you want; returns it
        (give it back with `release`)."""
        with self._cond:
            ticket = next(self._tickets)
            self._floors[ticket] = self._applied_index() + 1
            self._floor = min(self._floors.values())
            return ticket

    def release(self, ticket: int) -> None:
        """Give a ticket back; answers no ticket can still wait for are dropped."""
        with self._cond:
            self._floors.pop(ticket, None)
            if not self._floors:
                self._answers.clear()
                return
            self._floor = min(self._floors.values())
            for index in [i for i in self._answers if i < self._floor]:
                del self._answers[index]

    def record(self, entries: Sequence[Entry], answers: Sequence[bytes] | None) -> None:
        """Keep the answers `on_apply` gave for `entries` (called on the apply thread,
        before the applied index moves past them); nothing is kept without tickets."""
        if not self._floors:  # a plain read: no lock when nobody waits
            return
        if answers is not None and len(answers) != len(entries):
            log.warning(
                "on_apply gave %d answers for %d entries; the extra or missing are b''", len(answers), len(entries)
            )
        with self._cond:
            if not self._floors:
                return
            floor = self._floor
            for k, entry in enumerate(entries):
                if entry.index >= floor:
                    answer = answers[k] if answers is not None and k < len(answers) else b""
                    self._answers[entry.index] = bytes(answer) if not isinstance(answer, bytes) else answer

    def take(self, index: int) -> bytes:
        """The answer of the entry at `index` (b"" when the machine gave none, or it was
        taken already). Call after the entry was applied, holding a ticket taken before
        it was appended."""
        with self._cond:
            return self._answers.pop(index, b"")
