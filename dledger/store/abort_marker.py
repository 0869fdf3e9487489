"""The `abort` marker file: present while a member runs and removed by a clean shutdown,
so that a restart knows whether the previous run ended in a crash or a power loss
(RocketMQ's `abort` file), and the flush mode that run had. After an async run such a
member may have lost entries it acknowledged; the Raft core then holds its vote
(`dledger.raft.vote_hold`)."""

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
        flush_mode: this run's ("async" or "sync"), which the marker records.
    """

    def __init__(self, node_dir: str | os.PathLike[str], flush_mode: str = "async") -> None:
        self.path = Path(node_dir) / ABORT_FILE
        self.flush_mode = flush_mode

    def arm(self) -> bool:
        """Create the marker durably before the member runs, naming this run's flush
        mode; returns True when it was already there and its run flushed asynchronously:
        that run did not shut down cleanly and may have lost entries it acknowledged. A
        crashed sync run lost none (it acknowledged only what was on disk), whatever
        this run's mode (helper K: the new run's mode decided, so a member that crashed
        in async mode and came back in sync mode did not hold its vote). A marker that
        names no mode (an older version's, or one cut short by the crash) counts as async."""
        try:
            previous: str | None = self.path.read_bytes().decode("ascii", "replace")
        except FileNotFoundError:
            previous = None
        except OSError:
            previous = ""  # there, but unreadable: assume the worst
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kvfile.write_synced(self.path, kvfile.render({"flushMode": self.flush_mode}).encode("ascii"))
        kvfile.fsync_dir(self.path.parent)
        return previous is not None and kvfile.parse(previous).get("flushMode") != "sync"

    def clear(self) -> None:
        """Remove the marker after a clean shutdown (the store is flushed and closed)."""
        kvfile.remove_durably(self.path)
