"""StateMachine protocol and StateMachineCaller (DLedger 0.4.0's StateMachineCaller).

The caller applies committed entries in log order, a batch at a time, on its own thread:
`run_once()` reads `applied_index + 1 .. committed_index` from the store, hands the user
entries (NOOP entries of new leaders are filtered out) to `on_apply`, then records the
applied index. Snapshots will hook in here (save after apply, load before the first
apply), which is why the applied index and term are kept.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import BinaryIO, Protocol, runtime_checkable

from dledger.clock import perf_us
from dledger.entry import Entry
from dledger.raft.log import LogStore
from dledger.statemachine.answers import AnswerBox

log = logging.getLogger(__name__)

DEFAULT_APPLY_BATCH = 1024


@runtime_checkable
class StateMachine(Protocol):
    """User state built from the committed log."""

    def on_apply(self, entries: Sequence[Entry]) -> Sequence[bytes] | None:
        """Apply committed entries, in index order, each exactly once per process life.

        May return one answer per entry handed in (DLedger 0.4.0's `ApplyEntry.setResp`);
        None means no answers.

        Called on the node's state-machine thread only. An exception stops applying
        (the node keeps serving the log; `StateMachineCaller.error` tells why).

        Returns:
            One answer per entry (DLedger 0.4.0's `ApplyEntry.setResp`): a RAFT_LOG
            query gets the answer of its entry; or None: no answers (b"" for each).
        """
        ...


@runtime_checkable
class QueryableStateMachine(StateMachine, Protocol):
    """A StateMachine that answers reads (the `Query` RPC; without `query` it answers
    UNSUPPORTED). Implement it structurally: no need to import this class."""

    def query(self, request: bytes) -> bytes:
        """Answer a read from the current state.

        Called from gRPC threads, concurrently with `on_apply` (and other queries): the
        machine must make that safe. The read mode decides when it is called (UNSAFE: at
        once; READ_INDEX and LEASE: once the applied index reached the read index); an
        exception answers the Query call it belongs to with INTERNAL_ERROR (every request
        of that call: the client shares one call among concurrent reads).
        """
        ...


@runtime_checkable
class SnapshottingStateMachine(StateMachine, Protocol):
    """A StateMachine that can be snapshotted (DLedger's `onSnapshotSave` / `onSnapshotLoad`).

    Optional: a plain `StateMachine` stays valid. No caller uses these hooks yet (the
    node takes no snapshots so far); `dledger.statemachine.snapshot.SnapshotStore` is
    the storage they will be called with.
    """

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        """Write the state as of the last applied entry to `writer` (a binary file, the
        snapshot's `data`). The caller then commits it under that entry's index and term.

        An exception drops the snapshot; nothing already saved is touched.
        """
        ...

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        """Replace the whole state with the one read from `reader` (a snapshot's `data`,
        already checked against its checksum when it has one). Entries after the
        snapshot's last index are applied afterwards.

        An exception means the snapshot could not be loaded.
        """
        ...


class StateMachineCaller:
    """Applies committed entries to a StateMachine in order.

    Args:
        store: the node's log.
        committed_index: returns the node's current committed index.
        state_machine: the user's state machine.
        applied_index: the index already applied (e.g. restored from a snapshot).
        max_batch: the most entries handed to one `on_apply` call.
    """

    def __init__(
        self,
        store: LogStore,
        committed_index: Callable[[], int],
        state_machine: StateMachine,
        applied_index: int = -1,
        max_batch: int = DEFAULT_APPLY_BATCH,
    ) -> None:
        self.store = store
        self.state_machine = state_machine
        self._committed_index = committed_index
        self.max_batch = max_batch
        self.applied_index = applied_index
        self.applied_term = -1
        self.error: BaseException | None = None
        self.observer: Callable[[float, int], None] | None = None  # (latency µs, entries) per batch
        self._cond = threading.Condition()
        self.answers = AnswerBox(lambda: self.applied_index)
        """The `on_apply` answers of entries someone waits for (RAFT_LOG queries)."""

    def run_once(self) -> bool:
        """Apply one batch; returns True when something was applied."""
        if self.error is not None:
            return False
        committed = self._committed_index()
        if committed <= self.applied_index:
            return False
        first = max(self.applied_index + 1, self.store.begin_index)
        last = min(committed, first + self.max_batch - 1)
        entries = self.store.get_range(first, last + 1)
        if not entries:
            return False
        user = [e for e in entries if not e.is_noop]
        try:
            if user:
                start_us = perf_us()
                answers = self.state_machine.on_apply(user)
                self.answers.record(user, answers)
                if self.observer is not None:
                    self.observer(perf_us() - start_us, len(user))
        except BaseException as exc:
            log.exception("state machine failed at index %d; applying stopped", first)
            self.error = exc
            with self._cond:
                self._cond.notify_all()
            return False
        with self._cond:
            self.applied_index, self.applied_term = entries[-1].index, entries[-1].term
            self._cond.notify_all()
        return True

    def run_until_idle(self) -> None:
        """Apply everything committed so far (the caller thread's body)."""
        while self.run_once():
            pass

    def wait_applied(self, index: int, timeout_s: float) -> bool:
        """Wait until `index` is applied; False on timeout or after a failure."""
        with self._cond:
            return self._cond.wait_for(lambda: self.applied_index >= index or self.error is not None, timeout_s) and (
                self.applied_index >= index
            )
