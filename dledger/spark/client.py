"""The client that live Spark tasks use: `DLedgerClient`, with ReadCommitted streams from
a named member in the FIXED_WIDTH column layout, which the task maps into numpy and Arrow
without decoding one value at a time (the default PACKED layout costs the server about
0.2 µs per entry to encode).

Imported only inside `read()` / `write()` on executors and for planning on the driver
(through `dledger.spark.live.default_client_factory`): it imports grpc.
"""

from __future__ import annotations

from collections.abc import Iterator

from dledger.client import DLedgerClient
from dledger.client_reads import read_committed
from dledger.columns import ColumnBatch
from dledger.transport.convert import FIXED_WIDTH


class SparkClient(DLedgerClient):
    """A `DLedgerClient` whose reads from a named member use the FIXED_WIDTH layout."""

    def read_committed(
        self,
        from_index: int = 0,
        to_index: int | None = None,
        max_batch_bytes: int = 1024 * 1024,
        follow: bool = False,
        node_id: str | None = None,
        max_batch_count: int = 0,
    ) -> Iterator[ColumnBatch]:
        """Committed entries [from_index, to_index) of member `node_id` as column batches,
        ending early at that member's committed index; one stream, no retry (the Spark
        task moves on to the next member). Without `node_id`, or with `follow`, this is
        `DLedgerClient.read_committed`.

        Raises:
            DLedgerError: the member refused (INDEX_LESS_THAN_LOCAL_BEGIN...), sent a
                malformed batch (INCONSISTENT_STATE), or the stream broke.
        """
        if node_id is None or follow:
            return super().read_committed(from_index, to_index, max_batch_bytes, follow, node_id, max_batch_count)
        return read_committed(
            self, from_index, to_index, max_batch_bytes, False, node_id, max_batch_count, FIXED_WIDTH, retry=False
        )
