"""The `abort` marker file: present while a member runs and removed by a clean shutdown,
so that a restart knows whether the previous run ended in a crash or a power loss
(RocketMQ's `abort` file). With async flush such a member may have lost entries it
acknowledged; the Raft core then holds its vote (`dledger.raft.vote_hold`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from dledger.store.kvfile import fsync_dir

ABORT_FILE = "abort"


class AbortMarker:
    """`<node_dir>/abort`.

    Args:
        node_dir: the member's store directory (`<storeBaseDir>/dledger-<selfId>`).
    """

    def __init__(self, node_dir: str | os.PathLike[str]) -> None:
        self.path = Path(node_dir) / ABORT_FILE

    def arm(self) -> bool:
        """Create the marker durably before the member runs; returns True when it was
        already there: the previous run did not shut down cleanly."""
        if self.path.exists():
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.path.parent)
        return False

    def clear(self) -> None:
        """Remove the marker after a clean shutdown (the store is flushed and closed)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            fsync_dir(self.path.parent)
