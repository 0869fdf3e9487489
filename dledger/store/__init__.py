"""Log stores: the in-memory store and the mmap file store (both implement
`dledger.raft.log.LogStore`)."""

from dledger.columns import ColumnBatch
from dledger.store.memory import MemoryLogStore

__all__ = ["ColumnBatch", "MemoryLogStore"]
