"""dledger-py: a Raft-replicated commit log, byte-compatible with RocketMQ's DLedger.

The embedded store::

    import dledger
    with dledger.open_log("/tmp/mylog") as log:
        index = log.append(b"hello")
        assert log.get(index).body == b"hello"

gRPC's fork handlers are turned off for this process (GRPC_ENABLE_FORK_SUPPORT=false,
unless the environment sets it): with them on, a child forked to run a program (a
`subprocess.Popen` with `preexec_fn`, as PySpark starts its JVM) crashed with SIGABRT or
SIGSEGV before its exec in 5-6 % of forks once gRPC had been used (grpcio 1.85), and
dledger starts Spark, members and tools that way. No child of dledger uses gRPC
inherited from its parent, which is all that fork support is for.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

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
