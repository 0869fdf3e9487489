"""Log stores, and the one way into a store directory for everything outside this package.

- `MemoryLogStore` and the mmap file store `MmapLogStore` (`SyncMmapLogStore` in sync
  mode) both implement `dledger.raft.log.LogStore`. `MmapLogStore.open(node_dir,
  config)` opens and recovers a store (read-only with `StoreConfig(read_only=True)`:
  nothing is written) and starts no thread: its owner runs `periodic_passes()`.
- `StoreView.open(node_dir)`: a read-only view of the committed entries without
  recovery, for offline readers of a directory another process may be writing.
- The node-directory layout (`dledger.store.layout`): `resolve_node_dir`,
  `infer_segment_sizes`, `sized_config`, the file names.
- `load_checkpoint(node_dir)`: the validated checkpoint (or its .bak), or unknown.
- The one-writer lock: `lock_holder(node_dir)` names the pid writing a store.
- Record decoding for tools: `decode_entry_header`, `decode_index_unit`.
"""

from dledger.columns import ColumnBatch
from dledger.config import StoreConfig
from dledger.store.checkpoint import CheckpointInfo, load_checkpoint
from dledger.store.layout import (
    CHECKPOINT_FILE,
    DATA_DIR,
    IDENTITY_FILE,
    INDEX_DIR,
    RESET_FILE,
    holds_store,
    infer_segment_sizes,
    is_segment_name,
    resolve_node_dir,
)
from dledger.store.lock import lock_holder
from dledger.store.membership import clear_rejoin, mark_before_repair, mark_repaired
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore, SyncMmapLogStore, sized_config
from dledger.store.view import (
    EntryHeader,
    IndexUnit,
    StoreView,
    checkpoint_committed,
    decode_entry_header,
    decode_index_unit,
)

__all__ = [
    "CHECKPOINT_FILE",
    "DATA_DIR",
    "IDENTITY_FILE",
    "INDEX_DIR",
    "RESET_FILE",
    "CheckpointInfo",
    "ColumnBatch",
    "EntryHeader",
    "IndexUnit",
    "MemoryLogStore",
    "MmapLogStore",
    "StoreConfig",
    "StoreView",
    "SyncMmapLogStore",
    "checkpoint_committed",
    "clear_rejoin",
    "decode_entry_header",
    "decode_index_unit",
    "holds_store",
    "infer_segment_sizes",
    "is_segment_name",
    "load_checkpoint",
    "lock_holder",
    "mark_before_repair",
    "mark_repaired",
    "resolve_node_dir",
    "sized_config",
]
