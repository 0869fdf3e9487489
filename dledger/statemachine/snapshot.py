"""SnapshotStore: a node's snapshots on disk, in DLedger's layout (docs/FORMAT.md, "Snapshots").

The storage only: `dledger.statemachine.snapshot_manager` decides when to save and what
to load, `dledger.node_snapshots` compacts the log and installs snapshots with it.

- Saving: `begin_save()` gives a `SnapshotWriter`, a binary file (what
  `SnapshottingStateMachine.on_snapshot_save(writer)` gets) writing `tmp/data`; its owner
  then calls `commit(last_index, last_term)` (meta, fsyncs, rename to
  `snapshot_<last_index>/`, directory fsync, retention) or `abort()`.
- Loading: `latest()` is the newest snapshot whose checksum verifies; a damaged or
  half-written one is skipped with a warning and an older good one is used. Its
  `open()` is the reader for `on_snapshot_load(reader)`.
- Retention: after each commit or install only the `max_reserved` newest valid snapshots
  are kept; older and damaged ones are deleted.
- Receiving: `begin_install(last_index, last_term)` gives a `SnapshotInstall` writing
  `install_tmp/` chunk by chunk (dledger.statemachine.snapshot_install).

`tmp/` and `install_tmp/` are removed when the store opens: a save or an install cut
short by a crash starts again from zero.
"""

from __future__ import annotations

import io
import logging
import os
import threading
from pathlib import Path

from dledger.codes import DLedgerError, ResponseCode
from dledger.statemachine.snapshot_files import (
    DATA_FILE,
    INSTALL_TMP_DIR,
    SNAPSHOT_DIR,
    TMP_DIR,
    DamagedSnapshotError,
    Snapshot,
    file_ops,
    publish,
    read_meta,
    remove_tree,
    snapshot_index,
    verify,
)
from dledger.statemachine.snapshot_install import SnapshotInstall

log = logging.getLogger(__name__)

DEFAULT_MAX_RESERVED = 3


class SnapshotWriter(io.BufferedWriter):
    """The `data` file of a snapshot being saved into `tmp/` (a binary, writable file).

    The state machine writes its state and returns; the store's owner then calls
    `commit` or `abort`. Closing it early is allowed.
    """

    def __init__(self, store: SnapshotStore, directory: Path) -> None:
        super().__init__(io.FileIO(file_ops().open_new(directory / DATA_FILE), "wb"), buffer_size=1 << 20)
        self.directory = directory
        self._store = store
        self._ended = False

    def commit(self, last_index: int, last_term: int) -> Snapshot:
        """Publish what was written as `snapshot_<last_index>` (durably), then apply retention.

        Raises:
            DLedgerError: UNEXPECTED_ARGUMENT when the writer has ended, the index or
                term is out of range, or a valid snapshot at `last_index` or above exists
                (the save is dropped); DISK_ERROR when a file step failed (the save is
                dropped unless it was already renamed into place; the newest good
                snapshot before it stays).
        """
        if self._ended:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "this snapshot save has already ended")
        self._ended = True
        try:
            if not self.closed:
                self.close()
            snapshot = self._store._publish(self.directory, last_index, last_term)
        except BaseException:
            self._store._end_save(self, failed=True)
            raise
        self._store._end_save(self, failed=False)
        return snapshot

    def abort(self) -> None:
        """Drop the save and `tmp/` (nothing when it has already ended)."""
        if self._ended:
            return
        self._ended = True
        try:
            self.close()
        finally:
            self._store._end_save(self, failed=True)


class SnapshotStore:
    """The snapshots of one node directory (`<node_dir>/snapshot/`).

    Args:
        node_dir: the node directory (created when missing, with `snapshot/`).
        max_reserved: how many valid snapshots to keep (DLedger's
            `maxSnapshotReservedNum`, default 3).

    Raises:
        ValueError: max_reserved < 1.
    """

    def __init__(self, node_dir: str | os.PathLike[str], max_reserved: int = DEFAULT_MAX_RESERVED) -> None:
        if max_reserved < 1:
            raise ValueError(f"max_reserved must be at least 1, not {max_reserved}")
        self.root = Path(node_dir) / SNAPSHOT_DIR
        self.max_reserved = max_reserved
        self._lock = threading.RLock()
        self._writer: SnapshotWriter | None = None
        self._install: SnapshotInstall | None = None
        self._checked: dict[int, tuple[int, int, int]] = {}
        """Snapshots verified already, by index: their data's (inode, size, mtime) then.
        Published snapshots never change: while the file is the same one, unchanged,
        it is not read again (a leader streams its newest snapshot to every follower)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for name in (TMP_DIR, INSTALL_TMP_DIR):
            if remove_tree(self.root / name):
                what = "save" if name == TMP_DIR else "install"
                log.warning("removed %s: a snapshot %s cut short", self.root / name, what)

    def indexes(self) -> list[int]:
        """The indexes of every `snapshot_<N>` directory, newest first, valid or not."""
        found = []
        for entry in os.scandir(self.root):
            index = snapshot_index(entry.name)
            if index is not None and entry.is_dir(follow_symlinks=False):
                found.append(index)
        return sorted(found, reverse=True)

    def snapshots(self, limit: int | None = None) -> list[Snapshot]:
        """The snapshots that verify, newest first (at most `limit`); damaged ones are
        logged at WARNING and left out. Verification reads every `data` file checked.

        Runs under the store's lock, so no commit or install changes the directory
        meanwhile; a snapshot returned stays on disk until `max_reserved` newer ones
        have been published."""
        with self._lock:
            return self._verified(limit)

    def _verified(self, limit: int | None) -> list[Snapshot]:
        good: list[Snapshot] = []
        for index in self.indexes():
            if limit is not None and len(good) >= limit:
                break
            try:
                good.append(self._verify(index))
            except DamagedSnapshotError as exc:
                log.warning("snapshot %s is damaged and skipped: %s", self.root / f"snapshot_{index}", exc)
            except OSError as exc:
                log.warning("snapshot %s cannot be read and is skipped: %s", self.root / f"snapshot_{index}", exc)
        return good

    def latest(self) -> Snapshot | None:
        """The newest snapshot that verifies (see `snapshots`), or None."""
        found = self.snapshots(limit=1)
        return found[0] if found else None

    def begin_save(self) -> SnapshotWriter:
        """A writer for a new snapshot in a fresh `tmp/`.

        Raises:
            DLedgerError: UNEXPECTED_ARGUMENT when a save is already in progress.
        """
        with self._lock:
            if self._writer is not None:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "a snapshot is already being saved")
            directory = self.root / TMP_DIR
            remove_tree(directory)
            file_ops().mkdir(directory)
            self._writer = SnapshotWriter(self, directory)
            return self._writer

    def begin_install(self, last_index: int, last_term: int) -> SnapshotInstall:
        """The install of snapshot (last_index, last_term) into `install_tmp/`.

        The same (index, term) as the install in progress returns that install, so a
        sender whose stream broke resumes at its `resume_offset()`. A higher index
        supersedes the install in progress (which then answers
        NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST).

        Raises:
            DLedgerError: UNEXPECTED_ARGUMENT for an index or term out of range;
                NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST when an install of a higher index
                (or the same index in another term) is in progress;
                INSTALL_SNAPSHOT_ERROR when a valid snapshot at `last_index` or above
                exists already.
        """
        _check_range(last_index, last_term)
        with self._lock:
            current = self._install if self._install is not None and self._install.active else None
            if current is not None:
                if (current.last_index, current.last_term) == (last_index, last_term):
                    return current
                if current.last_index >= last_index:
                    raise DLedgerError(
                        ResponseCode.NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST,
                        f"installing snapshot {current.last_index} (term {current.last_term}) already",
                    )
            self._check_newer(last_index, ResponseCode.INSTALL_SNAPSHOT_ERROR)
            if current is not None:
                current.supersede()
                log.info("install of snapshot %d superseded by %d", current.last_index, last_index)
            directory = self.root / INSTALL_TMP_DIR
            self._install = SnapshotInstall(directory, last_index, last_term, self._lock, self._publish_install)
            return self._install

    def _check_newer(self, index: int, code: ResponseCode) -> None:
        for existing in self.indexes():
            if existing < index:
                return
            if self.is_valid(existing):
                raise DLedgerError(code, f"snapshot {existing} exists already, not older than {index}")

    def is_valid(self, index: int) -> bool:
        """True when `snapshot_<index>` exists and verifies."""
        try:
            self._verify(index)
        except (DamagedSnapshotError, OSError):
            return False
        return True

    def _verify(self, index: int) -> Snapshot:
        """`verify` `snapshot_<index>`, unless it verified before and its data is still
        the same, unchanged file (raises as `verify`)."""
        directory = self.root / f"snapshot_{index}"
        seen = _file_identity(directory / DATA_FILE)
        if seen is not None and self._checked.get(index) == seen:
            return Snapshot(directory, read_meta(directory))
        snapshot = verify(directory, index)
        if seen is not None:
            self._checked[index] = seen
        return snapshot

    def _publish_install(self, directory: Path, last_index: int, last_term: int, checksum: tuple[int, int]) -> Snapshot:
        return self._publish(directory, last_index, last_term, ResponseCode.INSTALL_SNAPSHOT_ERROR, checksum)

    def _publish(
        self,
        directory: Path,
        last_index: int,
        last_term: int,
        code: ResponseCode = ResponseCode.UNEXPECTED_ARGUMENT,
        checksum: tuple[int, int] | None = None,
    ) -> Snapshot:
        _check_range(last_index, last_term)
        with self._lock:
            self._check_newer(last_index, code)
            try:
                snapshot = publish(directory, self.root, last_index, last_term, checksum)
            except OSError as exc:
                raise DLedgerError(ResponseCode.DISK_ERROR, f"publishing snapshot {last_index}: {exc}") from exc
            seen = _file_identity(snapshot.data_path)  # its checksum is known: no need to read it again
            if seen is not None:
                self._checked[last_index] = seen
            self._retain(snapshot)
            return snapshot

    def _retain(self, newest: Snapshot) -> None:
        keep = {newest.index}
        for index in self.indexes():
            if len(keep) >= self.max_reserved:
                break
            if index < newest.index and self.is_valid(index):
                keep.add(index)
        for index in self.indexes():
            if index not in keep:
                self._checked.pop(index, None)
                try:
                    remove_tree(self.root / f"snapshot_{index}")
                except OSError as exc:
                    log.warning("cannot delete old snapshot %d: %s", index, exc)

    def _end_save(self, writer: SnapshotWriter, failed: bool) -> None:
        with self._lock:
            if self._writer is writer:
                self._writer = None
            if failed:
                try:
                    remove_tree(writer.directory)
                except OSError as exc:
                    log.warning("cannot remove %s: %s", writer.directory, exc)


def _check_range(last_index: int, last_term: int) -> None:
    for name, value in (("last index", last_index), ("last term", last_term)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"snapshot {name} {value!r} is out of range")


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of `path`, None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns
