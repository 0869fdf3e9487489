"""The embedded API: a high-throughput local log in one process.

    import dledger

    with dledger.open_log("/var/lib/app/log") as log:
        first = log.append_many([b"a", b"b"])
        log.append(b"c")
        log.get(first).body           # b"a"
        for entry in log.iterate():    # every entry, in order
            ...

A local log is a single-node DLedger store: every appended entry counts as committed
and `checkpoint` is kept current, so offline readers (Spark, `dledger check`) see it.
"""

from __future__ import annotations

import os

from dledger.service_thread import ServiceThread, start_passes
from dledger.store import MmapLogStore, StoreConfig, SyncMmapLogStore, resolve_node_dir, sized_config


class _LocalLogBase(MmapLogStore):
    """What both local logs add to the file store: every appended entry is committed
    (a one-node group), and the log owns the threads that run its periodic passes
    (flush and checkpoint, warm-ahead, retention), started by `open_log` and stopped
    by `close()` before the log is flushed and closed."""

    _pass_threads: tuple[ServiceThread, ...] = ()

    @property
    def committed_index(self) -> int:
        """The end of the log: everything appended is committed."""
        return int(self.end_index)

    def update_committed_index(self, index: int) -> None:
        """Committed always follows the end of the log."""

    def _start_pass_threads(self) -> None:
        if not self._pass_threads:
            self._pass_threads = tuple(start_passes(self.periodic_passes()))

    def close(self) -> None:
        """Stop the pass threads, then flush, write the checkpoint and unmap."""
        threads, self._pass_threads = self._pass_threads, ()
        for thread in threads:
            thread.stop()
        super().close()


class LocalLog(_LocalLogBase):
    """A local log with async flushing (acknowledged before fsync, flushed every 10 ms)."""


class SyncLocalLog(_LocalLogBase, SyncMmapLogStore):
    """A local log whose appends return once durable (group commit)."""


def open_log(path: str | os.PathLike[str], config: StoreConfig | None = None) -> MmapLogStore:
    """Open (creating if needed) a local log in `path`, recover it and start its
    background passes (stopped by `close()`).

    Args:
        path: the node directory; created when missing. A storeBaseDir holding exactly
            one `dledger-*` directory is accepted too.
        config: store options (segment sizes, flush mode, CRCs, warm-ahead...). When
            omitted, an existing store's segment sizes are read off its files.

    Returns:
        The open log. Its `term` starts at the last entry's term (at least 1).
    """
    node_dir = resolve_node_dir(path)
    if config is None:
        config = sized_config(node_dir)
    cls = SyncLocalLog if config.flush_mode == "sync" else LocalLog
    log = cls(node_dir, config)
    log.term = max(1, log.end_term)
    log._start_pass_threads()
    return log
