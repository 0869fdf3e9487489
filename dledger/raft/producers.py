"""The idempotent producers' sequence table (Kafka's idempotent producer), without I/O.

A producer has an id (`producer_id`, 0 .. 2^63 - 1) and an epoch, and numbers the
records it sends in that epoch 0, 1, 2, ... A request carries a `Stamp`: the producer,
its epoch, the sequence number of its first record and how many records follow, each
stored as one log entry at consecutive indexes. Before the leader appends a stamped
request it asks the table (`check`):

- the next sequence numbers of a known producer's current epoch: `NEW`, append them;
- sequence numbers the table has already seen in one of the last `batches_kept`
  requests: `DUPLICATE`, answered with the indexes they already have (`runs`), nothing
  appended; this is what makes a retry after an unknown outcome safe;
- a request whose first records the table has seen and whose last ones are new:
  `PARTIAL`, with the seen records' `runs` (empty when no longer kept) and
  `expected_seq`, the first new one; the leader appends only the new ones (a new leader
  may hold a prefix of a request its predecessor appended whole);
- a gap after the last sequence number: `OUT_OF_ORDER` (with `expected_seq`), refused;
- numbers already seen but older than the kept requests: `STALE`, refused (their
  indexes are no longer known);
- a lower epoch than the producer's: `FENCED`, refused (Kafka's INVALID_PRODUCER_EPOCH:
  a newer incarnation of that producer exists);
- a higher epoch, or a producer id the table does not know: only `first_seq == 0`
  starts it (`NEW`), anything else is `UNKNOWN_PRODUCER`.

The table is a pure function of the log: a member folds every stamped entry run into it
in index order (`record`), so a new leader rebuilds the leader's table from its own log
and restarts rebuild it from the log or a saved copy (`encode` / `decode`). Expiry uses
the log's own clock, the leader's append time carried in each stamp (`append_time_ms`):
a producer idle for `expiration_ms` of log time is forgotten, at the same index on every
member, whatever the members' clocks say. Before a request that would start one more
producer, the leader asks `admits`: the table holds at most as many producers as the
member's limit lets it (`max_producers`), so every member's copy stays that small.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

MAX_ID = 2**63 - 1
"""Producer ids, epochs and sequence numbers are int64 values from 0 to this."""

DEFAULT_EXPIRATION_MS = 86_400_000
"""Kafka's `producer.id.expiration.ms` default: one day of log time."""

DEFAULT_BATCHES_KEPT = 5
"""Kafka keeps the last five batches per producer (its `max.in.flight` limit for
idempotence); a client with more requests in flight may see `STALE` on a retry."""

ROOM_SWEEP_MS = 1000
"""A full table looks for idle producers to forget at most this often (`admits`)."""

_FORMAT_VERSION = 1
_HEADER = struct.Struct(">BqqII")  # version, clock, expiration, batches kept, producer count
_PRODUCER = struct.Struct(">qqqH")  # id, epoch, last time, kept batch count
_BATCH = struct.Struct(">qqq")  # first seq, last seq, first index
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a producer's request carries, and what the log keeps with its entries."""

    producer_id: int
    epoch: int
    first_seq: int
    count: int
    append_time_ms: int = 0
    """The leader's clock when it appended the request (set by the leader, not the
    client); the table's only clock."""

    def __post_init__(self) -> None:
        for name in ("producer_id", "epoch", "first_seq", "append_time_ms"):
            value = getattr(self, name)
            if not 0 <= value <= MAX_ID:
                raise ValueError(f"{name} must be in 0..{MAX_ID}, got {value}")
        if self.count < 1 or self.first_seq + self.count - 1 > MAX_ID:
            raise ValueError(f"count must be at least 1 and keep sequence numbers in range, got {self.count}")

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1


class Verdict(Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    PARTIAL = "partial"
    OUT_OF_ORDER = "out of order"
    STALE = "stale"
    FENCED = "fenced"
    UNKNOWN_PRODUCER = "unknown producer"


@dataclass(frozen=True, slots=True)
class Check:
    """The table's answer for one stamped request."""

    verdict: Verdict
    runs: tuple[tuple[int, int], ...] = ()
    """For DUPLICATE and PARTIAL: (first index, count) of each consecutive run holding
    the records seen, in sequence order (PARTIAL: empty when they are no longer kept)."""
    expected_seq: int = -1
    """For OUT_OF_ORDER and PARTIAL: the sequence number the table waits for."""
    epoch: int = -1
    """For FENCED: the producer's current epoch."""


@dataclass(frozen=True, slots=True)
class _Batch:
    first_seq: int
    last_seq: int
    first_index: int


class _Producer(NamedTuple):
    """One producer's state, never changed in place (a new one replaces it), so that a
    copy or an image of the table shares it."""

    epoch: int
    last_time_ms: int
    batches: tuple[_Batch, ...] = ()
    """The last `batches_kept` requests, oldest first."""

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class ProducerTable:
    """Per producer: its epoch, its last `batches_kept` requests and their indexes.

    Args:
        expiration_ms: log time after which an idle producer is forgotten.
        batches_kept: how many of a producer's latest requests are remembered.
    """

    def __init__(self, expiration_ms: int = DEFAULT_EXPIRATION_MS, batches_kept: int = DEFAULT_BATCHES_KEPT) -> None:
        if expiration_ms <= 0 or batches_kept <= 0:
            raise ValueError("expiration_ms and batches_kept must be positive")
        self.expiration_ms = expiration_ms
        self.batches_kept = batches_kept
        self.clock_ms = 0
        """The latest append time recorded: the table's notion of now."""
        self._producers: dict[int, _Producer] = {}
        self._next_sweep_ms = 0
        self._room_swept_ms: int | None = None

    def __len__(self) -> int:
        return len(self._producers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerTable):
            return NotImplemented
        return self.encode() == other.encode()

    __hash__ = None  # type: ignore[assignment]

    def _live(self, producer_id: int) -> _Producer | None:
        producer = self._producers.get(producer_id)
        if producer is not None and self.clock_ms - producer.last_time_ms > self.expiration_ms:
            return None
        return producer

    def check(self, stamp: Stamp) -> Check:
        """What to do with a request carrying `stamp` (nothing changes)."""
        producer = self._live(stamp.producer_id)
        if producer is None or stamp.epoch > producer.epoch:
            return Check(Verdict.NEW) if stamp.first_seq == 0 else Check(Verdict.UNKNOWN_PRODUCER)
        if stamp.epoch < producer.epoch:
            return Check(Verdict.FENCED, epoch=producer.epoch)
        last = producer.last_seq
        if stamp.first_seq == last + 1:
            return Check(Verdict.NEW)
        if stamp.first_seq > last + 1:
            return Check(Verdict.OUT_OF_ORDER, expected_seq=last + 1)
        if stamp.last_seq > last:  # part seen, part new: a prefix made it into the log
            return Check(Verdict.PARTIAL, runs=_runs_of(producer.batches, stamp.first_seq, last), expected_seq=last + 1)
        runs = _runs_of(producer.batches, stamp.first_seq, stamp.last_seq)
        return Check(Verdict.DUPLICATE, runs=runs) if runs else Check(Verdict.STALE)

    def record(self, stamp: Stamp, first_index: int) -> None:
        """Fold a stamped run written at `first_index ..` into the table (log order).

        Raises:
            ValueError: `check` would not have answered NEW for it (the log holds a run
                the leader must have refused: the table and the log disagree).
        """
        verdict = self.check(stamp).verdict
        if verdict is not Verdict.NEW:
            raise ValueError(f"producer {stamp.producer_id}: a {verdict.value} run at index {first_index}")
        self.clock_ms = max(self.clock_ms, stamp.append_time_ms)
        batch = _Batch(stamp.first_seq, stamp.last_seq, first_index)
        producer = self._live(stamp.producer_id)
        if producer is None or stamp.epoch > producer.epoch:
            self._producers[stamp.producer_id] = _Producer(stamp.epoch, stamp.append_time_ms, (batch,))
        else:
            batches = producer.batches
            kept = batches[max(0, len(batches) - self.batches_kept + 1) :]
            last_time_ms = max(producer.last_time_ms, stamp.append_time_ms)
            self._producers[stamp.producer_id] = _Producer(producer.epoch, last_time_ms, (*kept, batch))
        if self.clock_ms >= self._next_sweep_ms:
            self.expire()

    def expire(self, now_ms: int | None = None) -> list[int]:
        """Forget every producer idle for longer than `expiration_ms` at `now_ms`
        (default: the table's clock); their ids."""
        now = self.clock_ms if now_ms is None else max(now_ms, self.clock_ms)
        gone = [pid for pid, p in self._producers.items() if now - p.last_time_ms > self.expiration_ms]
        for pid in gone:
            del self._producers[pid]
        self._next_sweep_ms = self.clock_ms + max(1, self.expiration_ms // 8)
        return gone

    def admits(self, producer_id: int, max_producers: int, now_ms: int) -> bool:
        """Whether a request of `producer_id` appended at `now_ms` keeps the table at
        `max_producers` producers or fewer (the leader's check before a NEW request):
        always for a live producer; for another, when there is room once the producers
        idle for longer than `expiration_ms` at `now_ms` are forgotten, which is looked
        for at most once per `ROOM_SWEEP_MS` (a sweep walks the whole table)."""
        if len(self._producers) < max_producers or self._live(producer_id) is not None:
            return True
        swept = self._room_swept_ms
        if swept is None or now_ms - swept >= ROOM_SWEEP_MS or now_ms < swept:
            self._room_swept_ms = now_ms
            self.expire(now_ms)
        return len(self._producers) < max_producers

    def copy(self) -> ProducerTable:
        """An independent copy (the leader's view of its uncommitted tail starts as one),
        sharing the producers' states (never changed in place)."""
        table = ProducerTable(self.expiration_ms, self.batches_kept)
        table.clock_ms, table._next_sweep_ms = self.clock_ms, self._next_sweep_ms
        table._producers = dict(self._producers)
        return table

    def encode(self) -> bytes:
        """A versioned, checksummed image of the table (for snapshots and restarts);
        expired producers are left out, so equal tables have equal images whenever
        their sweeps ran."""
        return self.image().encode()

    def image(self) -> TableImage:
        """What `encode` writes, taken without packing it: a copy of the producers'
        map (their states are shared), so that a caller can take it under a lock and
        pack it outside."""
        return TableImage(self.clock_ms, self.expiration_ms, self.batches_kept, dict(self._producers))

    @classmethod
    def decode(cls, data: bytes) -> ProducerTable:
        """The table `encode` wrote.

        Raises:
            ValueError: the image is truncated, damaged or of an unknown version.
        """
        if len(data) < _HEADER.size + _CRC.size:
            raise ValueError(f"producer table image too short ({len(data)} bytes)")
        body, (crc,) = data[: -_CRC.size], _CRC.unpack_from(data, len(data) - _CRC.size)
        if zlib.crc32(body) != crc:
            raise ValueError("producer table image is damaged (checksum mismatch)")
        version, clock, expiration, kept, count = _HEADER.unpack_from(body)
        if version != _FORMAT_VERSION:
            raise ValueError(f"producer table image version {version} is not supported")
        table = cls(expiration, kept)
        table.clock_ms = clock
        offset = _HEADER.size
        try:
            for _ in range(count):
                pid, epoch, last_time, nbatches = _PRODUCER.unpack_from(body, offset)
                offset += _PRODUCER.size
                batches = []
                for _ in range(nbatches):
                    batches.append(_Batch(*_BATCH.unpack_from(body, offset)))
                    offset += _BATCH.size
                table._producers[pid] = _Producer(epoch, last_time, tuple(batches))
        except struct.error as exc:
            raise ValueError(f"producer table image is truncated: {exc}") from None
        if offset != len(body):
            raise ValueError(f"producer table image has {len(body) - offset} bytes after its last producer")
        table._next_sweep_ms = clock
        return table


@dataclass(frozen=True)
class TableImage:
    """A producer table's state at one moment (`ProducerTable.image`): its clock, its
    settings and its producers by id."""

    clock_ms: int
    expiration_ms: int
    batches_kept: int
    producers: dict[int, _Producer]

    def encode(self) -> bytes:
        """`ProducerTable.encode`'s bytes: the producers not expired at `clock_ms` (as
        if swept), by id."""
        now, expiration, producers = self.clock_ms, self.expiration_ms, self.producers
        live = sorted(pid for pid, p in producers.items() if now - p.last_time_ms <= expiration)
        parts = [_HEADER.pack(_FORMAT_VERSION, now, expiration, self.batches_kept, len(live))]
        for pid in live:
            epoch, last_time_ms, batches = producers[pid]
            parts.append(_PRODUCER.pack(pid, epoch, last_time_ms, len(batches)))
            parts.extend(_BATCH.pack(b.first_seq, b.last_seq, b.first_index) for b in batches)
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))


def _runs_of(batches: tuple[_Batch, ...], first_seq: int, last_seq: int) -> tuple[tuple[int, int], ...]:
    """The index runs holding sequence numbers first_seq..last_seq, if all are kept."""
    runs: list[tuple[int, int]] = []
    seq = first_seq
    for batch in batches:
        if batch.last_seq < seq:
            continue
        if batch.first_seq > seq:
            return ()  # the oldest kept batch starts after `seq`: older ones are gone
        end = min(batch.last_seq, last_seq)
        runs.append((batch.first_index + seq - batch.first_seq, end - seq + 1))
        seq = end + 1
        if seq > last_seq:
            return tuple(runs)
    return ()
