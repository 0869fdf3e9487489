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


def inspect_snapshots(node: Path, begin_index: int | None = None) -> SnapshotFindings:
    """Verify every `snapshot_<N>` of a node directory; `begin_index` (the log's first
    index) adds a note when the newest valid snapshot does not reach the log."""
    found = SnapshotFindings()
    root = node / SNAPSHOT_DIR
    if not root.is_dir():
        return found
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        found.problems.append(f"cannot read {root}: {exc.strerror or exc}")
        return found
    indexed = sorted(((snapshot_index(n), n) for n in names if snapshot_index(n) is not None), reverse=True)
    for index, name in indexed:
        assert index is not None
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
    for name, what in ((TMP_DIR, "save"), (INSTALL_TMP_DIR, "install")):
        if (root / name).exists():
            found.notes.append(f"{root / name}: a snapshot {what} in progress or cut short (removed at the next start)")
    if begin_index is not None and begin_index > 0 and found.valid and found.valid[0][0] + 1 < begin_index:
        found.notes.append(
            f"the log begins at {begin_index}, after the newest valid snapshot ({found.valid[0][0]}): "
            f"entries {found.valid[0][0] + 1}..{begin_index - 1} are in neither"
        )
    return found


__all__ = ["SnapshotFindings", "inspect_snapshots"]
