"""How a member opens its log: the store its configuration names."""

from __future__ import annotations

from dataclasses import replace

from dledger.config import DLedgerConfig
from dledger.raft.log import LogStore
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore


def open_node_store(config: DLedgerConfig) -> LogStore:
    """Open (and recover) the store a node's configuration names: `MEMORY`, or the file
    store in `<store_base_dir>/dledger-<self_id>` with the options `config.store`. The
    node itself implements `flush_mode="sync"` (it syncs outside its lock), so the file
    store is opened async."""
    if config.store_type == "MEMORY":
        return MemoryLogStore()
    return MmapLogStore(config.default_path, replace(config.store, flush_mode="async"))
