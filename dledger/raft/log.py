"""The storage the Raft layer uses, as the Raft layer sees it: the log (`LogStore`,
DLedger's DLedgerStore) and the durable term and vote (`TermStore`, the `currterm`
file). The implementations live in `dledger.store`; these protocols belong to their
user, so `raft/` never imports a store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from dledger.columns import ColumnBatch
from dledger.entry import Entry
from dledger.service_thread import PeriodicPass


@runtime_checkable
class LogStore(Protocol):
    """A role-agnostic Raft log (DLedgerStore). No leader checks happen inside.

    Indexes are 0-based and contiguous in [begin_index, end_index]; an empty log has
    begin_index == end_index + 1 semantics expressed as begin_index = -1, end_index = -1
    on a fresh store (DLedger's convention), and end_index = before-begin after a reset.
    """

    term: int
    """The term stamped on entries appended with `append` / `append_many` / `append_noop`."""

    failure: BaseException | None
    """Why the store failed (a failed msync: it takes no more writes until reopened), or
    None. A leader whose store failed hands leadership over (`dledger.raft.transfer`)."""

    @property
    def health(self) -> str:
        """ "" while the store takes writes, else why not (`dledger status` shows it)."""
        ...

    @property
    def begin_index(self) -> int:
        """First live index, or -1 when the log is empty."""
        ...

    @property
    def end_index(self) -> int:
        """Last index, or -1 when nothing was ever appended."""
        ...

    @property
    def end_term(self) -> int:
        """Term of the last entry (-1 when empty)."""
        ...

    @property
    def committed_index(self) -> int:
        """Highest index known committed (persisted in `checkpoint` by file stores)."""
        ...

    def append(self, body: bytes) -> int:
        """Leader append of one body with `term`; returns the new index."""
        ...

    def append_many(self, bodies: Sequence[bytes], magic: int = 1) -> int:
        """Leader append of several bodies as entries of `magic` (1 normal, 16 record);
        returns the first new index."""
        ...

    def append_noop(self) -> int:
        """Leader append of a NOOP entry (magic 2); returns its index."""
        ...

    def append_encoded(self, run: bytes) -> int:
        """Follower append of already-encoded entries (validated, written verbatim);
        returns how many were appended."""
        ...

    def get(self, index: int) -> Entry:
        """The entry at `index`; DLedgerError(INDEX_OUT_OF_RANGE) outside the log."""
        ...

    def get_body(self, index: int) -> bytes:
        """The body of the entry at `index`."""
        ...

    def get_range(self, from_index: int, to_index: int) -> list[Entry]:
        """Entries in [from_index, to_index) that exist."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`."""
        ...

    def read_run(self, from_index: int, max_bytes: int) -> tuple[bytes, int]:
        """Encoded entries from `from_index` (at least one) within `max_bytes`:
        (bytes, count). The bytes can be given to a follower's `append_encoded`."""
        ...

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        """Entries from `from_index` column-wise, at most `max_count` and about `max_bytes`."""
        ...

    def truncate(self, from_index: int) -> None:
        """Delete entries [from_index, end_index]. Committed entries are the caller's
        responsibility (the Raft layer never truncates them)."""
        ...

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        """Delete the prefix up to and including `before_begin_index` (snapshots,
        retention); returns the new begin index. When every entry goes, the next one
        lands at `next_pos` if given (an installed snapshot: where the leader's entry
        after it starts), else where the log ended."""
        ...

    def update_committed_index(self, index: int) -> None:
        """Record the committed index (clamped to end_index; never decreases)."""
        ...

    def set_retention_floor(self, index: int) -> None:
        """Retention never deletes entries at or above `index`."""
        ...

    @property
    def node_dir(self) -> Path | None:
        """The directory holding the store's files (None for a store in memory)."""
        ...

    def periodic_passes(self) -> Sequence[PeriodicPass]:
        """The background work the owner must run while the store is open (flush,
        warm-ahead, retention); empty when there is none."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable."""
        ...

    @property
    def durable_index(self) -> int:
        """The last index known durable (at most `end_index`): what flushes have covered;
        `end_index` where nothing needs syncing. Never blocks."""
        ...

    def wait_durable(self) -> None:
        """Block until everything appended so far is durable, sharing one flush with
        concurrent callers (group commit); at once where nothing needs syncing."""
        ...

    def close(self) -> None:
        """Flush and release resources."""
        ...


@runtime_checkable
class TermStore(Protocol):
    """Durable current term and vote (DLedger's `currterm` file)."""

    def load(self) -> tuple[int, str | None]:
        """(term, vote_for) as last persisted; (0, None) when nothing was written."""
        ...

    def persist(self, term: int, vote_for: str | None) -> None:
        """Make (term, vote_for) durable before returning (atomic replace + fsync)."""
        ...


def data_segment_size(store: object) -> int:
    """The data segment size of a file store; 0 for a store without segments (in memory).
    Entries sit at the same positions on every member, so members share this size."""
    segments = getattr(store, "data_list", None)
    return int(getattr(segments, "file_size", 0) or 0)


class LogEnds(Protocol):
    """What `first_readable` reads of a log (a LogStore, or a read-only StoreView)."""

    @property
    def begin_index(self) -> int: ...
    @property
    def end_index(self) -> int: ...


def first_readable(store: LogEnds) -> int:
    """The first index whose entry `store` holds: its begin index, or end + 1 when a
    compaction emptied it (begin -1), 0 for a log that never held one."""
    begin = store.begin_index
    return begin if begin >= 0 else store.end_index + 1
