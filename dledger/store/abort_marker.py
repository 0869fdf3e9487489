"""The `abort` marker file: present while a member runs and removed by a clean shutdown,
so that a restart knows whether the previous run ended in a crash or a power loss
(RocketMQ's `abort` file). With async flush such a member may have lost entries it
acknowledged; the Raft core then holds its vote (`dledger.raft.vote_hold`)."""

from __future__ import annotations

import os
from pathlib import Path

from dledger.store import kvfile
from dledger.store.layout import ABORT_FILE

__all__ = ["ABORT_FILE", "AbortMarker"]


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
        kvfile.write_synced(self.path, b"")
        kvfile.fsync_dir(self.path.parent)
        return False

    def clear(self) -> None:
        """Remove the marker after a clean shutdown (the store is flushed and closed)."""
        kvfile.remove_durably(self.path)
