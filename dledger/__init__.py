"""dledger-py: a Raft-replicated commit log, byte-compatible with RocketMQ's DLedger.

The embedded store::

    import dledger
    with dledger.open_log("/tmp/mylog") as log:
        index = log.append(b"hello")
        assert log.get(index).body == b"hello"

Importing dledger turns gRPC's fork handlers off (`dledger._fork`): import it before grpc.
"""

from dledger._fork import GRPC_FORK_HANDLERS_ON
from dledger.codes import CorruptStoreError, DLedgerError, ReadMode, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import StoreConfig
from dledger.embedded import LocalLog, open_log
from dledger.entry import Entry
from dledger.raft.log import LogStore
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore

__version__ = "0.1.0"

__all__ = [
    "GRPC_FORK_HANDLERS_ON",
    "ColumnBatch",
    "CorruptStoreError",
    "DLedgerError",
    "Entry",
    "LocalLog",
    "LogStore",
    "MemoryLogStore",
    "MmapLogStore",
    "ReadMode",
    "ResponseCode",
    "StoreConfig",
    "open_log",
]
