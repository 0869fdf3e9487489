"""Ctrl-C held back over a step that must not be cut in the middle.

Python raises KeyboardInterrupt in the main thread wherever that thread is. These places
must not see it there:

- a blocking unary gRPC call: cut inside gRPC's own code, it leaves a call that only the
  interrupted thread would have finished, and closing the channel then waits for that
  call forever (grpc/grpc#19973);
- starting any other call: gRPC may start the thread that completes a channel's calls
  right then, and cut before that thread runs, the call is never completed and closing
  the channel waits forever too (`dledger get --follow` hung on Ctrl-C so, once in a
  few dozen runs on a busy machine);
- the CLI's bookkeeping of what it printed or appended, so its report after Ctrl-C is
  exact.

`DeferredCtrlC` swaps the SIGINT handler for the step (masking the signal would not
do: the kernel hands a process's SIGINT to any thread that does not block it, gRPC's
too) and calls the real handler right after it. A blocking call ends by its deadline, so
the wait is bounded by the client's timeout. It costs about 10 us a call in the main
thread and nothing in others; making every unary call a future instead (cancelled on
any interruption) would cost 100-150 us a call (a Get on loopback: 550 against 690 us).

A block inside another block (a client call inside the CLI's step) leaves Ctrl-C to the
outer one, which thus sees every Ctrl-C of the step: given `on_repeat`, it calls it at a
second Ctrl-C, still inside the step (gRPC runs Python's handlers while it waits, every
200 ms or so), so that a user need not wait for a member that never answers: `dledger
append` then reports that the outcome is unknown and ends the process at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

Handler = Callable[[int, FrameType | None], Any]


class DeferredCtrlC:
    """Context manager: a SIGINT that arrives inside the block is handled right after it
    (by the handler that was in place: KeyboardInterrupt by default).

    Outside the main thread, or when SIGINT's handler is not a Python function (ignored,
    or the default that ends the process at once), the block runs as it is: only the
    main thread can set handlers, and only a Python handler raises inside the block.
    Inside another DeferredCtrlC's block it does nothing: the outer block holds Ctrl-C.

    Args:
        on_repeat: called (in the main thread, inside the block) at each SIGINT after
            the first one held: a second Ctrl-C that must not wait for the block (it
            usually ends the process). None: later ones are held as the first.
    """

    __slots__ = ("_held", "_on_repeat", "_previous")

    def __init__(self, on_repeat: Callable[[], object] | None = None) -> None:
        self._previous: Handler | None = None
        self._held = False
        self._on_repeat = on_repeat

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)
        if isinstance(getattr(previous, "__self__", None), DeferredCtrlC):
            return  # an enclosing block holds Ctrl-C (and knows what a second one does)
        if callable(previous):
            self._previous = previous
            signal.signal(signal.SIGINT, self._hold)

    def _hold(self, _signum: int, _frame: FrameType | None) -> None:
        if self._held and self._on_repeat is not None:
            self._on_repeat()
        self._held = True

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        previous, self._previous = self._previous, None
        if previous is None:
            return
        signal.signal(signal.SIGINT, previous)
        if self._held:
            self._held = False
            previous(signal.SIGINT, None)


__all__ = ["DeferredCtrlC"]
