"""The client of a DLedger group (the `dledger.v1.Ledger` gRPC service).

- `client`: `DLedgerClient`, unary appends, reads and leadership transfer;
- `members`: `Members`, the peers, their channels and the leader hint, shared by the
  writers and the readers;
- `policy`: when a request may be sent again (the decision table, pure logic);
- `producer`: `Producer`, client-side batching over AppendStream;
- `reads`: Get, Metadata, ReadCommitted streams and `iterate`;
- `records`: the record methods (`append_record`, `get_record`, ...);
- `types`: value types (targets, results, metadata, futures).

Example::

    from dledger.client import DLedgerClient

    with DLedgerClient("n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913") as client:
        first = client.append_many([b"a", b"b"])      # the batch is at first, first + 1
        assert [e.body for e in client.get(first, count=2)] == [b"a", b"b"]
"""

from dledger.client.client import DEFAULT_PEERS, DLedgerClient
from dledger.client.members import Members
from dledger.client.policy import IndeterminateError
from dledger.client.producer import MAX_BODY_BYTES, Producer
from dledger.client.types import (
    AppendResult,
    MemberInfo,
    NodeMetadata,
    ProducerStamp,
    ProducerStats,
    ReadMode,
    SendFuture,
    Target,
    derive_producer_id,
)
from dledger.config import DEFAULT_GROUP

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_PEERS",
    "MAX_BODY_BYTES",
    "AppendResult",
    "DLedgerClient",
    "IndeterminateError",
    "MemberInfo",
    "Members",
    "NodeMetadata",
    "Producer",
    "ProducerStamp",
    "ProducerStats",
    "ReadMode",
    "SendFuture",
    "Target",
    "derive_producer_id",
]
