"""What `dledger append` has appended so far, and how it sends one request so that its
report after Ctrl-C is exact.

A first Ctrl-C during a request waits for the request's answer (at most --timeout), so
the report says what the request did instead of "unknown". A second one ends the process
at once (exit 130), saying that the outcome of the request in flight is unknown: a
member that accepts connections and never answers would otherwise keep the user waiting
for the whole timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dledger.cli.errors import interrupted_now
from dledger.client import DLedgerClient
from dledger.client.interrupts import DeferredCtrlC


def appended_text(appended: int, first: int, last: int) -> str:
    """`N entries were appended at indexes first..last` (`between indexes first and last,
    among other writers' entries` when they are not all of those indexes), or `nothing was
    appended`."""
    if appended == 0:
        return "nothing was appended"
    return f"{appended} entries were appended {indexes_text(appended, first, last)}"


def indexes_text(appended: int, first: int, last: int) -> str:
    """`at indexes first..last`, or, when other writers' entries came in between (each
    request's entries are consecutive, the requests need not be), `between indexes first
    and last, among other writers' entries`."""
    if last - first + 1 == appended:
        return f"at indexes {first}..{last}"
    return f"between indexes {first} and {last}, among other writers' entries"


class AppendTally:
    """The entries appended so far (`appended`, at `first`..`last`) and the bodies of
    the request in flight (`in_flight`, 0 between requests)."""

    def __init__(self) -> None:
        self.first = self.last = -1
        self.appended = self.in_flight = 0

    def done(self) -> str:
        """What was appended (see `appended_text`)."""
        return appended_text(self.appended, self.first, self.last)

    def report(self) -> str:
        """What was appended, and that the request in flight has an unknown outcome."""
        unknown = f"; the outcome of the last request ({self.in_flight} entries) is unknown" if self.in_flight else ""
        return self.done() + unknown

    def send(self, client: DLedgerClient, bodies: Sequence[bytes], magic: int, advance: Callable[[int], None]) -> None:
        """Append `bodies` as one request and count them (errors: `append_batch`). A
        first Ctrl-C is taken after the answer; a second one ends the process at once
        (`interrupted_now`: exit 130 with `report()`)."""
        self.in_flight = len(bodies)
        with DeferredCtrlC(on_repeat=lambda: interrupted_now(self.report())):
            result = client.append_batch(bodies, magic)
            self.in_flight = 0
            self.first = result.first_index if self.first < 0 else self.first
            self.last = result.last_index
            self.appended += result.count
            advance(result.count)


__all__ = ["AppendTally", "appended_text", "indexes_text"]
