"""The record methods of `DLedgerClient` (a mixin): append records (key, timestamp,
headers, value; magic 16) and read entries back as `Record`s.

Records travel as record bodies in an Append request whose `magic` is 16; concurrent
record appends share requests through the client's combiner like plain appends (in a
lane of their own, since one request carries one magic).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from dledger.client.types import AppendResult
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD, Entry
from dledger.record import Header, Record, encode_record, record_of


class RecordMethods:
    """`append_record`, `append_records`, `get_record` and `get_records`."""

    if TYPE_CHECKING:

        def append_batch(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendResult: ...
        def get(self, index: int, count: int = 1, *, node_id: str | None = None) -> list[Entry]: ...

    def append_record(
        self,
        value: bytes,
        *,
        key: bytes | None = None,
        timestamp: int | None = None,
        headers: Iterable[Header] = (),
    ) -> int:
        """Append one record; returns its index once committed.

        Args:
            value: the payload.
            key: the key (at most 65,536 bytes), or None.
            timestamp: event time in ms since the epoch (>= 0); None: now.
            headers: (str key, bytes value) pairs, repeats allowed, order kept (at most
                1,024; keys at most 1,024 UTF-8 bytes).

        Raises:
            ValueError / TypeError: a field over its limit or of the wrong type (nothing
                was sent).
            DLedgerError / IndeterminateError: as `append_batch` (UNSUPPORTED from a
                java_compat group).
        """
        return self.append_batch([encode_record(value, key, timestamp, headers)], MAGIC_RECORD).first_index

    def append_records(self, records: Sequence[Record]) -> AppendResult:
        """Append records (value, key, timestamp (None: now), headers of each) as one
        request: consecutive indexes, all or nothing (errors: `append_record`)."""
        if not records:
            raise ValueError("nothing to append: records is empty")
        bodies = [encode_record(r.value, r.key, r.timestamp, r.headers) for r in records]
        return self.append_batch(bodies, MAGIC_RECORD)

    def get_record(self, index: int, *, node_id: str | None = None) -> Record:
        """The committed entry at `index` as a Record (a plain entry: no key, no headers,
        no timestamp). Errors: `get`; ValueError for a damaged record body."""
        return record_of(self.get(index, 1, node_id=node_id)[0])

    def get_records(self, index: int, count: int = 1, *, node_id: str | None = None) -> list[Record]:
        """Committed entries from `index` as Records, at most `count` (errors: `get`)."""
        return [record_of(entry) for entry in self.get(index, count, node_id=node_id)]
