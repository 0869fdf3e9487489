"""The record methods of `DLedgerClient` (a mixin): append records (key, timestamp,
headers, value; magic 16) and read entries back as `Record`s.

Records travel as record bodies in an Append request whose `magic` is 16; concurrent
record appends share requests through the client's combiner like plain appends (in a
lane of their own, since one request carries one magic).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from dledger.client.members import Members
from dledger.client.policy import IndeterminateError, unknown_after_resend
from dledger.client.types import AppendResult, ProducerStamp
from dledger.clock import Clock
from dledger.codes import DLedgerError
from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD, Entry
from dledger.record import Header, Record, encode_record, encode_record_objects, record_of
from dledger.transport.convert import pb

RESEND_PAUSE_MS = 50
"""Pause before an idempotent request is sent again after an unknown outcome."""


class RecordMethods:
    """`append_record`, `append_records`, `get_record` and `get_records`."""

    if TYPE_CHECKING:

        def append_batch(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> AppendResult: ...
        def get(self, index: int, count: int = 1, *, node_id: str | None = None) -> list[Entry]: ...
        def _write(self, method: str, request: Any, deadline: int, appends: bool = True) -> Any: ...

        members: Members

        @property
        def group(self) -> str: ...
        @property
        def clock(self) -> Clock: ...

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

    def append_records(self, records: Sequence[Record], *, stamp: ProducerStamp | None = None) -> AppendResult:
        """Append records (value, key, timestamp (None: now), headers of each) as one
        request: consecutive indexes, all or nothing (errors: `append_record`).

        With a `stamp` the request is an idempotent producer's: its records are numbered
        stamp.first_seq, +1, ... and sent on their own (never shared with other calls);
        records the leader holds already are not appended again (the result's
        `duplicate` and `runs` say where they are). Resending the same records with the
        same stamp is always safe: this method does it itself after an unknown outcome,
        until the client's timeout.

        Raises:
            TypeError: `records` is not a sequence of Records (nothing was sent).
            DLedgerError: also OUT_OF_ORDER_SEQUENCE (a gap before first_seq),
                PRODUCER_FENCED (an older epoch) and UNKNOWN_PRODUCER (first_seq > 0 for
                a producer the leader does not know, e.g. after it expired).
        """
        bodies = encode_record_objects(records, "append_records")
        if not bodies:
            raise ValueError("nothing to append: records is empty")
        return self.append_record_bodies(bodies, stamp=stamp)

    def append_record_bodies(self, bodies: Sequence[bytes], *, stamp: ProducerStamp | None = None) -> AppendResult:
        """`append_records` for records encoded already (`dledger.record.encode_record`):
        the bodies go as they are (a writer that encodes rows in bulk, such as the Spark
        sink, saves building `Record`s). Errors: `append_records`; a body that is not a
        record body is refused by the leader (UNEXPECTED_ARGUMENT, nothing appended)."""
        if not bodies:
            raise ValueError("nothing to append: bodies is empty")
        if stamp is None:
            return self.append_batch(bodies, MAGIC_RECORD)
        return self._append_stamped(bodies, stamp)

    def init_producer(self) -> int:
        """A producer id of its own for an idempotent producer, allocated by the leader
        (Kafka's InitProducerId): unique in the group, in [2^61, 2^62).

        Raises:
            DLedgerError: no leader answered in time.
        """
        request = pb.InitProducerRequest(group=self.group)
        return int(self._write("InitProducer", request, self.members.deadline_ms(), appends=False).producer_id)

    def _append_stamped(self, bodies: Sequence[bytes], stamp: ProducerStamp) -> AppendResult:
        request = pb.AppendRequest(
            group=self.group,
            bodies=bodies,
            magic=MAGIC_RECORD,
            stamp=pb.ProducerStamp(producer_id=stamp.producer_id, epoch=stamp.epoch, first_sequence=stamp.first_seq),
        )
        deadline = self.members.deadline_ms()
        resent = False
        while True:
            try:
                answer = self._write("Append", request, deadline)
                break
            except IndeterminateError:  # safe to send again: what the leader has is not appended twice
                if self.clock.now_ms() + RESEND_PAUSE_MS >= deadline:
                    raise
                self.clock.sleep_ms(RESEND_PAUSE_MS)
                resent = True
            except DLedgerError as exc:
                if resent:  # a refused resend says nothing of the attempt before it
                    raise unknown_after_resend(exc) from exc
                raise
        runs = tuple((run.first_index, run.count) for run in answer.runs)
        first = runs[0][0] if runs else -1
        return AppendResult(first, len(bodies), answer.term, answer.leader_id or "", answer.duplicate, runs)

    def get_record(self, index: int, *, node_id: str | None = None) -> Record:
        """The committed entry at `index` as a Record (a plain entry: no key, no headers,
        no timestamp). Errors: `get`; ValueError for a damaged record body."""
        return record_of(self.get(index, 1, node_id=node_id)[0])

    def get_records(self, index: int, count: int = 1, *, node_id: str | None = None) -> list[Record]:
        """Committed entries from `index` as Records, at most `count` (errors: `get`)."""
        return [record_of(entry) for entry in self.get(index, count, node_id=node_id)]
