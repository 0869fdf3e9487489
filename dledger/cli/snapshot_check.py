"""`dledger check`'s look at a node's snapshots (`<node dir>/snapshot/`, DLedger's layout):
every `snapshot_<N>` verified by its checksum (dledger.statemachine's snapshot files),
read only: nothing is created, removed or repaired."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dledger.statemachine.snapshot_files import (
    INSTALL_TMP_DIR,
    SNAPSHOT_DIR,
    TMP_DIR,
    DamagedSnapshotError,
    snapshot_index,
    verify,
)
from dledger.store import RESET_FILE


@dataclass
class SnapshotFindings:
    """What `inspect_snapshots` found.

    Attributes:
        valid: (index, term, data bytes or None for a Java-written meta) of each snapshot
            that verifies, newest first.
        problems: one line per damaged snapshot, naming its directory.
        notes: what is worth knowing but not wrong (a save cut short, no checksum).
    """

    valid: list[tuple[int, int, int | None]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The facts for the report: how many verified and the newest one."""
        if not self.valid:
            return {"snapshots": "none" if not self.problems else "none valid"}
        index, term, size = self.valid[0]
        shown = f"{size} B" if size is not None else "size unknown"
        return {"snapshots": f"{len(self.valid)} valid, newest {index} (term {term}, {shown})"}


def inspect_snapshots(node: Path, begin_index: int | None = None, end_index: int | None = None) -> SnapshotFindings:
    """Verify every `snapshot_<N>` of a node directory as a starting member sees it.

    What a member refuses to start with is a problem: `snapshot` that is not a directory
    (or a link to one), a directory that cannot be read, and a compacted log (its first
    live index, `begin_index`, or `end_index + 1` when it is empty, above 0) that no
    valid snapshot covers when this member took snapshots (see `_check_coverage`). What
    a member ignores is a note: a `snapshot_<N>` that is a file or a symbolic link
    rather than a directory (`SnapshotStore.indexes`).
    """
    found = SnapshotFindings()
    root = node / SNAPSHOT_DIR
    if os.path.lexists(root) and not root.is_dir():
        kind = "a dangling symbolic link" if root.is_symlink() else "not a directory"
        found.problems.append(
            f"{root} is {kind}: a member cannot create its snapshot directory there and refuses to start"
        )
        return found
    taken = False
    if root.is_dir():
        try:
            entries = list(os.scandir(root))
        except OSError as exc:
            found.problems.append(f"cannot read {root}: {exc.strerror or exc}")
            return found
        taken = _verify_all(root, entries, found)
    _check_coverage(node, _first_live(begin_index, end_index), found, taken)
    return found


def _verify_all(root: Path, entries: list[os.DirEntry[str]], found: SnapshotFindings) -> bool:
    """Verify the `snapshot_<N>` directories among `entries`, newest first; True when
    there is any (or a save or an install under way)."""
    indexed: list[tuple[int, str]] = []
    for entry in entries:
        index = snapshot_index(entry.name)
        if index is None:
            continue
        if entry.is_dir(follow_symlinks=False):
            indexed.append((index, entry.name))
        else:
            kind = "a symbolic link" if entry.is_symlink() else "not a directory"
            found.notes.append(f"{root / entry.name} is {kind}: ignored (a member does not load it)")
    for index, name in sorted(indexed, reverse=True):
        path = root / name
        try:
            snapshot = verify(path, index)
        except DamagedSnapshotError as exc:
            found.problems.append(f"snapshot {path} is damaged: {exc}")
            continue
        except OSError as exc:
            found.problems.append(f"snapshot {path} cannot be read: {exc.strerror or exc}")
            continue
        meta = snapshot.meta
        if not meta.verified:
            found.notes.append(f"snapshot {path} has no checksum (a Java DLedger meta): only its data file was found")
        found.valid.append((snapshot.index, snapshot.term, meta.size))
    taken = bool(indexed)
    for name, what in ((TMP_DIR, "save"), (INSTALL_TMP_DIR, "install")):
        if os.path.lexists(root / name):
            taken = True
            found.notes.append(f"{root / name}: a snapshot {what} in progress or cut short (removed at the next start)")
    return taken


def _first_live(begin_index: int | None, end_index: int | None) -> int | None:
    """The log's first live index as a starting member computes it (an empty log: after
    its end, which is past the last reset), None when unknown."""
    if begin_index is None or begin_index >= 0:
        return begin_index
    return end_index + 1 if end_index is not None else None


def _check_coverage(node: Path, first_live: int | None, found: SnapshotFindings, taken: bool) -> None:
    """The log's prefix is compacted and no valid snapshot reaches it: a member whose
    state machine takes snapshots refuses to start (LOAD_SNAPSHOT_ERROR), a plain log
    does not. A problem when this member took snapshots (`taken`: a `snapshot_<N>` or a
    save is there, or the prefix was dropped by a reset, what compaction after a
    snapshot does), else a note (older segments deleted by retention)."""
    if first_live is None or first_live <= 0:
        return
    if any(index >= first_live - 1 for index, _term, _size in found.valid):
        return
    root = node / SNAPSHOT_DIR
    newest = found.valid[0][0] if found.valid else None
    have = f"the newest valid snapshot is {newest}" if newest is not None else f"{root} holds no valid snapshot"
    fact = f"the log starts at index {first_live} (its prefix compacted) and {have}: entries before {first_live}"
    if taken or os.path.lexists(node / RESET_FILE):
        found.problems.append(
            f"{fact} are in neither, and a member whose state machine takes snapshots refuses to start "
            "(LOAD_SNAPSHOT_ERROR; restore a snapshot, or wipe this member's directory so that the leader installs one)"
        )
    else:
        found.notes.append(
            f"{fact} are gone (retention): fine for a plain log, but a member whose state machine takes "
            "snapshots would refuse to start (LOAD_SNAPSHOT_ERROR)"
        )


__all__ = ["SnapshotFindings", "inspect_snapshots"]
