"""StateMachine protocol and StateMachineCaller (DLedger 0.4.0's StateMachineCaller).

The caller applies committed entries in log order, a batch at a time, on its own thread:
`run_once()` reads `applied_index + 1 .. committed_index` from the store, hands the user
entries (NOOP entries of new leaders are filtered out) to `on_apply`, then records the
applied index and term. Snapshots hook in after a batch (`after_apply`: the node's
`dledger.statemachine.snapshot_manager.SnapshotManager` captures the state there when
enough entries were applied since the last snapshot, and saves it on its own thread);
a snapshot load (at startup, or an installed one) holds `apply_lock` so that no batch
runs meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import BinaryIO, Protocol, runtime_checkable

from dledger.clock import perf_us
from dledger.codes import DLedgerError, ResponseCode
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
    """A StateMachine that can be snapshotted (DLedger's `onSnapshotSave` / `onSnapshotLoad`),
    in two phases so that saving never stops apply.

    Optional: a plain `StateMachine` stays valid. With `DLedgerConfig.enable_snapshot`
    the node calls, once `snapshot_threshold` entries were applied since the last
    snapshot, `on_snapshot_capture()` on the apply thread between two `on_apply` calls,
    then `on_snapshot_save(writer)` on a snapshot thread while `on_apply` keeps running;
    at most one capture/save pair is in flight. The saved snapshot is published under
    the applied index and term of the capture (`dledger.statemachine.snapshot`).
    """

    def on_snapshot_capture(self) -> None:
        """Capture a point-in-time view of the state, exactly as of the last applied entry
        (apply thread; no `on_apply` runs meanwhile). Must be cheap: copy-on-write, a
        frozen or persistent map, a reference to an immutable structure...

        An exception drops this snapshot (logged); apply continues.
        """
        ...

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        """Write the view captured by the last `on_snapshot_capture` to `writer` (a
        binary file, the snapshot's `data`). Called on the snapshot thread, concurrently
        with `on_apply`: it must not read the live state. The caller then commits it
        under the captured index and term.

        An exception drops the snapshot (logged); nothing already saved is touched.
        """
        ...

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        """Replace the whole state with the one read from `reader` (a snapshot's `data`,
        already checked against its checksum when it has one). Entries after the
        snapshot's last index are applied afterwards. Called at startup before the first
        `on_apply`, or when a snapshot was installed from the leader; nothing else runs
        on the machine meanwhile (no `on_apply`, no save in flight).

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
        self.on_stop: Callable[[BaseException], None] | None = None
        """Called once when applying stops for good (`stop`), with why."""
        self.observer: Callable[[float, int], None] | None = None  # (latency µs, entries) per batch
        self.after_apply: Callable[[int, int], None] | None = None
        """Called on the apply thread after each batch with the applied (index, term),
        under `apply_lock` (the snapshot trigger)."""
        self.apply_lock = threading.Lock()
        """Held while a batch is applied; a snapshot load holds it to keep apply out."""
        self._cond = threading.Condition()
        self.answers = AnswerBox(lambda: self.applied_index)
        """The `on_apply` answers of entries someone waits for (RAFT_LOG queries)."""

    def run_once(self) -> bool:
        """Apply one batch; returns True when something was applied."""
        with self.apply_lock:
            return self._apply_batch()

    def _apply_batch(self) -> bool:
        if self.error is not None:
            return False
        committed = self._committed_index()
        if committed <= self.applied_index:
            return False
        first = self.applied_index + 1
        begin = self.store.begin_index
        if begin > first:
            gone = f"entries {first}..{begin - 1} left the log before they were applied (no snapshot covers them)"
            log.error("%s; applying stopped", gone)
            return self.stop(DLedgerError(ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, gone))
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
            return self.stop(exc)
        self.set_applied(entries[-1].index, entries[-1].term)
        if self.after_apply is not None:
            self.after_apply(self.applied_index, self.applied_term)
        return True

    def stop(self, exc: BaseException) -> bool:
        """Stop applying for good (`error`: an apply or a snapshot load failed), waking
        every waiter and telling `on_stop`; returns False."""
        first = self.error is None
        self.error = exc
        with self._cond:
            self._cond.notify_all()
        if first and self.on_stop is not None:
            self.on_stop(exc)
        return False

    def set_applied(self, index: int, term: int) -> None:
        """Record (index, term) as applied (after a batch, or a snapshot load) and wake
        `wait_applied` callers."""
        with self._cond:
            self.applied_index, self.applied_term = index, term
            self._cond.notify_all()

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
