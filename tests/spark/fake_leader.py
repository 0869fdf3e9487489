"""A fake idempotent leader for the sink's tests without a cluster: `append_records` with
a stamp keeps Kafka's producer table (next sequence number, the last requests' indexes),
answers duplicates, refuses gaps, and can be told to fail a call before or after it
appends (the outcome then unknown: `IndeterminateError`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dledger.client import IndeterminateError
from dledger.codes import DLedgerError, ResponseCode
from dledger.record import Record


@dataclass(frozen=True)
class Result:
    """An `AppendResult` as the contract describes it."""

    first_index: int
    count: int
    duplicate: bool = False
    runs: tuple[tuple[int, int], ...] = ()


@dataclass
class FakeLeader:
    """The log (records in index order, each with its producer id and sequence number)
    and the producer table; thread-safe."""

    log: list[tuple[int, int, Record]] = field(default_factory=list)
    next_seq: dict[int, int] = field(default_factory=dict)
    recent: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)  # (first_seq, count, first_index)
    epochs: dict[int, int] = field(default_factory=dict)
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # hook(call number, stamp, records) -> an exception to raise before appending, or None
    before: Callable[[int, Any, Sequence[Record]], BaseException | None] | None = None
    # call numbers whose outcome is lost after appending (IndeterminateError)
    lose_answer: set[int] = field(default_factory=set)

    def append(self, records: Sequence[Record], stamp: Any) -> Result:
        with self.lock:
            self.calls += 1
            call = self.calls
            if self.before is not None and (exc := self.before(call, stamp, records)) is not None:
                raise exc
            result = self._append(records, stamp)
            if call in self.lose_answer:
                raise IndeterminateError(ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, "answer lost (fake)")
            return result

    def _append(self, records: Sequence[Record], stamp: Any) -> Result:
        pid, seq, n = stamp.producer_id, stamp.first_seq, len(records)
        epoch = self.epochs.get(pid, -1)
        if stamp.epoch < epoch:
            raise DLedgerError(ResponseCode.PRODUCER_FENCED, f"producer {pid} is at epoch {epoch}")
        if stamp.epoch > epoch:  # a new epoch starts the producer afresh
            if seq != 0:
                raise DLedgerError(ResponseCode.UNKNOWN_PRODUCER, f"epoch {stamp.epoch} starts at 0, got {seq}")
            self.epochs[pid] = stamp.epoch
            self.next_seq.pop(pid, None)
            self.recent.pop(pid, None)
        expected = self.next_seq.get(pid, 0)
        if seq + n <= expected:
            runs = tuple((first, count) for s, count, first in self.recent.get(pid, []) if s == seq and count == n)
            return Result(runs[0][0] if runs else -1, n, duplicate=True, runs=runs)
        if seq != expected:
            raise DLedgerError(ResponseCode.OUT_OF_ORDER_SEQUENCE, f"expected sequence number {expected}, got {seq}")
        first = len(self.log)
        self.log.extend((pid, seq + k, r) for k, r in enumerate(records))
        self.next_seq[pid] = seq + n
        self.recent[pid] = [*self.recent.get(pid, [])[-4:], (seq, n, first)]
        return Result(first, n, runs=((first, n),))

    def values(self) -> list[bytes]:
        """The values in log order."""
        return [r.value for _, _, r in self.log]


class FakeClient:
    """What a write task uses of `DLedgerClient`, over a shared `FakeLeader`."""

    def __init__(self, leader: FakeLeader) -> None:
        self.leader = leader
        self.closed = False

    def append_records(self, records: Sequence[Record], *, stamp: Any = None) -> Result:
        """Append with a stamp (the fake only knows the idempotent path)."""
        assert stamp is not None
        return self.leader.append(list(records), stamp)

    def close(self) -> None:
        """Nothing to close."""
        self.closed = True
