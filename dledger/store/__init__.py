"""Log stores: the LogStore protocol, the in-memory store and the mmap file store."""

from dledger.store.base import ColumnBatch, LogStore
from dledger.store.memory import MemoryLogStore

__all__ = ["ColumnBatch", "LogStore", "MemoryLogStore"]
