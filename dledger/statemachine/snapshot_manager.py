"""SnapshotManager: when a node takes its state machine's snapshots, and how it loads one
(DLedger's SnapshotManager, two-phase).

- Save: after an apply batch (`StateMachineCaller.after_apply`, on the apply thread),
  once `applied - last snapshot index >= threshold` and no save is in flight, the
  machine's `on_snapshot_capture()` runs right there (state = exactly the applied
  index); `on_snapshot_save(writer)` then runs on the manager's snapshot thread while
  apply goes on, and the snapshot is committed under that index and term (retention
  of `max_reserved` snapshots is the store's). A failing capture or save drops that
  snapshot, is counted in `failures` and apply continues; the next attempt waits
  (`RETRY_FIRST_MS`, doubling up to `RETRY_MAX_MS` while they keep failing: a snapshot
  directory that cannot be written is not retried after every batch). The first failure
  of a run is logged with its traceback, each retry that fails again with one line.
  After a committed
  snapshot `on_saved(index, term)` runs on the snapshot thread (the node compacts its
  log there).
- Load (`load_newest`, before the first apply): the newest snapshot that verifies and
  loads; a damaged one is skipped by the store, one whose `on_snapshot_load` fails is
  skipped here, and one older than the log's first entry minus one (a gap no entry
  could fill) is not usable. With none left the log is replayed when it still starts at
  index 0, else the node must not start (LOAD_SNAPSHOT_ERROR).
- Companion state: a node may keep state beside the machine's that a snapshot must
  carry (the idempotent producers' table, `dledger.node_producers`). Its image at the
  snapshot's index is captured on the apply thread with the machine's view and written
  at the start of `data` (`COMPANION_MAGIC`, a 4-byte length, the image); the machine's
  bytes follow and its `on_snapshot_load` reads from there. A snapshot without it (an
  older one, or a machine's own) loads as before.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable
from typing import BinaryIO, Protocol

from dledger.clock import Clock, MonotonicClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.statemachine.caller import SnapshottingStateMachine
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import Snapshot

log = logging.getLogger(__name__)

COMPANION_MAGIC = b"DLCOMP01"
_LENGTH = struct.Struct(">I")
RETRY_FIRST_MS = 1_000
"""After a failed capture or save, no new attempt for this long..."""
RETRY_MAX_MS = 60_000
"""...doubled after each further failure, up to this."""


class SnapshotCompanion(Protocol):
    """State a snapshot carries beside the machine's (see the module docstring)."""

    def capture(self, index: int) -> bytes | None:
        """Its image at exactly `index` (apply thread); None: not this time."""

    def load(self, image: bytes) -> None:
        """Adopt an image a snapshot carried."""


def read_companion(reader: BinaryIO) -> bytes | None:
    """The companion image at the start of a snapshot's data (the reader is then at the
    machine's bytes), or None (the reader back at 0)."""
    head = reader.read(len(COMPANION_MAGIC) + _LENGTH.size)
    if len(head) == len(COMPANION_MAGIC) + _LENGTH.size and head.startswith(COMPANION_MAGIC):
        (length,) = _LENGTH.unpack_from(head, len(COMPANION_MAGIC))
        image = reader.read(length)
        if len(image) == length:
            return image
    reader.seek(0)
    return None


class SnapshotManager:
    """Takes and loads the snapshots of one state machine.

    Args:
        store: the node's snapshot store.
        machine: the state machine.
        threshold: entries applied since the last snapshot that trigger a new one
            (DLedger's `snapshotThreshold`).
        on_saved: called with (index, term) on the snapshot thread after each committed
            snapshot (compaction); its exceptions are logged.
        companion: state the snapshots carry beside the machine's.
        clock: what the retry delay after a failure is measured with (a monotonic
            clock by default).
    """

    def __init__(
        self,
        store: SnapshotStore,
        machine: SnapshottingStateMachine,
        threshold: int,
        on_saved: Callable[[int, int], None] | None = None,
        companion: SnapshotCompanion | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.store = store
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.companion = companion
        self.machine = machine
        self.threshold = threshold
        self.on_saved = on_saved
        self.last_index = -1
        """lastIncludedIndex of the newest snapshot taken, loaded or installed (-1: none)."""
        self.last_term = -1
        self.failures = 0
        """Snapshots dropped because a capture, a save or a commit failed."""
        self.failing = 0
        """Attempts that failed in a row (0 once one succeeds)."""
        self._retry_at_ms: int | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -- saving

    @property
    def saving(self) -> bool:
        """True while a save is in flight."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def after_apply(self, applied_index: int, applied_term: int) -> None:
        """The apply thread's hook after each batch: capture and start a save when due."""
        if applied_index - self.last_index >= self.threshold:
            self.save_now(applied_index, applied_term)

    def save_now(self, applied_index: int, applied_term: int) -> bool:
        """Capture at the applied (index, term) and start a save, whatever the threshold;
        the caller holds the caller's `apply_lock` (the apply thread after a batch, or a
        leader whose newest snapshot turned out damaged). False when none starts: stopped,
        a save in flight, or the pause after a failure."""
        if self._stopped or self.saving:
            return False
        retry_at = self._retry_at_ms
        if retry_at is not None and self.clock.now_ms() < retry_at:
            return False
        try:
            self.machine.on_snapshot_capture()
            image = self.companion.capture(applied_index) if self.companion is not None else None
        except Exception as exc:
            self._failed(f"snapshot capture at index {applied_index} failed; snapshot dropped", exc)
            return False
        thread = threading.Thread(
            target=self._save, args=(applied_index, applied_term, image), name="dledger-snapshot-save", daemon=True
        )
        with self._lock:
            self._thread = thread
        thread.start()
        return True

    def _save(self, index: int, term: int, image: bytes | None = None) -> None:
        try:
            writer = self.store.begin_save()
        except Exception as exc:
            self._failed(f"cannot begin snapshot {index}; snapshot dropped", exc)
            return
        try:
            if image is not None:
                writer.write(COMPANION_MAGIC + _LENGTH.pack(len(image)) + image)
            self.machine.on_snapshot_save(writer)
            snapshot = writer.commit(index, term)
        except Exception as exc:
            writer.abort()
            self._failed(f"saving snapshot {index} failed; snapshot dropped, the newest good one stays", exc)
            return
        self._succeeded()
        self.note(snapshot.index, snapshot.term)
        log.info("snapshot %d (term %d) saved: %s", index, term, snapshot.path)
        if self.on_saved is not None:
            try:
                self.on_saved(index, term)
            except Exception:
                log.exception("after snapshot %d", index)

    def _failed(self, what: str, exc: BaseException) -> None:
        """Count a failed attempt, log it (its traceback only for the first of a run)
        and put the next one off (`RETRY_FIRST_MS`, doubling up to `RETRY_MAX_MS`)."""
        with self._lock:
            self.failures += 1
            self.failing += 1
            delay_ms = min(RETRY_FIRST_MS << min(self.failing - 1, 16), RETRY_MAX_MS)
            self._retry_at_ms = self.clock.now_ms() + delay_ms
            failing = self.failing
        if failing == 1:
            log.error("%s (next try in %.0f s)", what, delay_ms / 1000, exc_info=exc)
        else:
            log.warning(
                "%s: %s: %s (%d failures in a row; next try in %.0f s)",
                what,
                type(exc).__name__,
                exc,
                failing,
                delay_ms / 1000,
            )

    def _succeeded(self) -> None:
        with self._lock:
            failing, self.failing, self._retry_at_ms = self.failing, 0, None
        if failing:
            log.info("snapshot saved again after %d failed attempts", failing)

    def note(self, index: int, term: int) -> None:
        """Record a snapshot at (index, term) as the newest (taken, loaded or installed)."""
        with self._lock:
            if index > self.last_index:
                self.last_index, self.last_term = index, term

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait for the save in flight (if any) to end; False on timeout."""
        with self._lock:
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Start no more saves and wait for the one in flight."""
        self._stopped = True
        if not self.wait_idle(timeout_s):
            log.warning("snapshot save still running after %.0f s at shutdown", timeout_s)

    # -- loading

    def load(self, snapshot: Snapshot) -> None:
        """Load `snapshot` into the machine (and its companion state, once the machine
        took it); the machine's errors propagate."""
        with snapshot.open() as reader:
            image = read_companion(reader)
            self.machine.on_snapshot_load(reader)
        if image is not None and self.companion is not None:
            self.companion.load(image)

    def load_newest(self, log_begin_index: int) -> Snapshot | None:
        """Load the newest usable snapshot into the machine (nothing else may run on it).

        Args:
            log_begin_index: the log's first live index (-1 when empty); entries before
                it are gone, so a snapshot below `log_begin_index - 1` cannot be used.

        Returns:
            The snapshot loaded (recorded as the newest), or None when the log must be
            replayed from index 0.

        Raises:
            DLedgerError: LOAD_SNAPSHOT_ERROR when no snapshot loads and the log no
                longer starts at index 0.
        """
        for snapshot in self.store.snapshots():
            if log_begin_index > 0 and snapshot.index < log_begin_index - 1:
                log.warning(
                    "snapshot %d is older than the log's first entry %d: entries in between are gone; not used",
                    snapshot.index,
                    log_begin_index,
                )
                continue
            try:
                self.load(snapshot)
            except Exception:
                log.exception("loading snapshot %s failed; trying an older one", snapshot.path)
                continue
            self.note(snapshot.index, snapshot.term)
            log.info("loaded snapshot %d (term %d)", snapshot.index, snapshot.term)
            return snapshot
        if log_begin_index > 0:
            raise DLedgerError(
                ResponseCode.LOAD_SNAPSHOT_ERROR,
                f"no snapshot in {self.store.root} could be loaded and the log starts at index "
                f"{log_begin_index}, not 0: the state machine cannot be rebuilt (restore a snapshot, or wipe "
                "this member's directory so that the leader installs one)",
            )
        return None
