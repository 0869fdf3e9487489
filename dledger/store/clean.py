"""CleanSpaceService: DLedger's expired-file cleaning and disk-full detection.

Every pass measures how full the partition of the store is. Above
`disk_space_ratio_to_force_clean + 0.05` (max 0.95; 0.90 by default) the store refuses
appends with DISK_FULL until space comes back. Cleaning runs when the current hour is
in `delete_when` or usage is above `disk_space_ratio_to_check_expired`: data segments
older than `file_reserved_hours` are deleted oldest first (any age when usage is above
the force-clean ratio and `enable_disk_force_clean` is set: off by default, unlike
DLedger, since it deletes acknowledged entries), at most 10 per pass, never the last segment and never one that
holds entries at or above the store's retention floor (entries a peer still needs or
that are not committed).
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Protocol

from dledger._native import impl
from dledger.store.recovery import first_entry_header
from dledger.store.segment_list import SegmentList

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10


def disk_used_ratio(path: str | os.PathLike[str]) -> float:
    """DLedgerUtils.getDiskPartitionSpaceUsedPercent: ceil(used*100/(used+avail))/100."""
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    avail = st.f_bavail * st.f_frsize
    free = st.f_bfree * st.f_frsize
    used = total - free
    if used + avail <= 0:
        return 0.0
    return math.ceil(used * 100 / (used + avail)) / 100


class RetentionOptions(Protocol):
    """The retention options (StoreConfig's) the service reads."""

    @property
    def file_reserved_hours(self) -> int: ...

    @property
    def delete_when(self) -> str: ...

    @property
    def disk_space_ratio_to_check_expired(self) -> float: ...

    @property
    def disk_space_ratio_to_force_clean(self) -> float: ...

    @property
    def enable_disk_force_clean(self) -> bool: ...


class CleanedStore(Protocol):
    """What the service uses of the store it cleans (MmapLogStore)."""

    state: int
    """The compiled core's write state (impl.STATE_*): the service moves it between OK
    and DISK_FULL."""

    @property
    def node_dir(self) -> Path: ...

    @property
    def data_list(self) -> SegmentList: ...

    @property
    def begin_index(self) -> int: ...

    @property
    def retention_floor(self) -> int: ...

    def _acquire(self) -> None:
        """Take the core lock (for multi-step changes)."""

    def _release(self) -> None:
        """Release the core lock."""

    def delete_segments_before(self, pos: int) -> None: ...


class CleanSpaceService:
    """One pass of retention and disk-full detection per `run_once()` call."""

    def __init__(self, store: CleanedStore, config: RetentionOptions) -> None:
        self.store = store
        self.config = config
        self.disk_full_ratio = min(config.disk_space_ratio_to_force_clean + 0.05, 0.95)
        self.usage = disk_used_ratio
        self.now_s = time.time
        self.deleted_segments = 0

    def run_once(self) -> None:
        """Update the disk-full state and delete expired segments if cleaning is due."""
        ratio = self.usage(self.store.node_dir)
        store = self.store
        if ratio > self.disk_full_ratio and store.state == impl.STATE_OK:
            log.error("disk usage %.2f above %.2f: refusing appends (DISK_FULL)", ratio, self.disk_full_ratio)
            store.state = impl.STATE_DISK_FULL
        elif ratio <= self.disk_full_ratio and store.state == impl.STATE_DISK_FULL:
            log.warning("disk usage %.2f back below %.2f: accepting appends", ratio, self.disk_full_ratio)
            store.state = impl.STATE_OK
        hour = time.strftime("%H", time.localtime(self.now_s()))
        time_up = hour in {h.strip().zfill(2) for h in self.config.delete_when.split(";") if h.strip()}
        if not (time_up or ratio > self.config.disk_space_ratio_to_check_expired):
            return
        force = ratio > self.config.disk_space_ratio_to_force_clean and self.config.enable_disk_force_clean
        self.delete_expired(force)

    def delete_expired(self, force: bool) -> int:
        """Delete expired data segments (any age when `force`); returns how many."""
        store = self.store
        reserved_s = max(1, self.config.file_reserved_hours) * 3600
        deleted = 0
        store._acquire()
        try:
            table = store.data_list.table
            while deleted < DELETE_FILES_BATCH_MAX and table.count > 1:
                first = table.first_offset
                path = store.data_list.path_of(first)
                next_start = first + table.file_size
                if not force and os.path.getmtime(path) + reserved_s > self.now_s():
                    break
                next_first_index = self._first_index_at(next_start)
                if next_first_index is None or next_first_index > store.retention_floor:
                    break
                store.delete_segments_before(next_start)
                deleted += 1
        finally:
            store._release()
        self.deleted_segments += deleted
        if deleted:
            log.info("retention deleted %d data segment(s); begin index now %d", deleted, store.begin_index)
        return deleted

    def _first_index_at(self, seg_start: int) -> int | None:
        # First entry index of the segment at seg_start; None when it holds no entry.
        data = self.store.data_list
        header = first_entry_header(data.table, data.directory, seg_start)
        return None if header is None else int(header[2])
