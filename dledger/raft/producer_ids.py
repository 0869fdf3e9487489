"""ProducerIdBlocks: the producer ids a leader gives out (InitProducer), without I/O.

An id must never be given twice in a group, by any leader, in any term, and a caller
may ask for as many as it likes. Ids come in blocks of `BLOCK_IDS`; a block is named
after a log index the leader saw *committed with its own term*:

    id = FIRST_ALLOCATED + (block << 20) + n,   0 <= n < 2^20

Only one member ever leads a term, and a committed entry's term is the same in every
log that holds it, so no other leader (of an earlier or a later term) can name a block
after that index; the leader itself takes each index at most once (blocks only move
forward). So ids stay unique however many are asked for: a leader that has used up its
block takes the next one from a newer committed entry of its term. When none is
committed yet (a quiet group, or a leader whose own entries are still in flight), the
caller answers LEADER_NOT_READY, which clients retry, and makes sure an entry of the
term is on its way (`NodeProducers`: a NOOP when the leader's log ends in none).

The ids lie in [2^61, 2^62): below the derived ids (`dledger.client.derive_producer_id`,
[2^62, 2^63)) and above those of the earlier scheme, `(term << 20) + n`, for every term
below 2^41. Blocks stop at index 2^41 (LEADER_PENDING_FULL past it).
"""

from __future__ import annotations

from dledger.codes import DLedgerError, ResponseCode

BLOCK_BITS = 20
BLOCK_IDS = 1 << BLOCK_BITS
FIRST_ALLOCATED = 1 << 61
MAX_BLOCK = (1 << 41) - 1
"""The highest index a block can be named after (ids stay below 2^62)."""


class ProducerIdBlocks:
    """The leader's current block and how many of its ids it gave (reset each term).

    Args:
        block_ids: ids per block (default `BLOCK_IDS`; at most that, tests use fewer).
    """

    def __init__(self, block_ids: int | None = None) -> None:
        self.block_ids = BLOCK_IDS if block_ids is None else block_ids
        if not 1 <= self.block_ids <= BLOCK_IDS:
            raise ValueError(f"block_ids must be in 1..{BLOCK_IDS}")
        self.term = -1
        self.block = -1
        self.given = self.block_ids

    def allocate(self, term: int, committed_index: int, committed_term: int) -> int | None:
        """The next id of leader term `term`, or None when a new block is needed and no
        entry of `term` newer than the current block is committed: `committed_index`
        is the leader's commit index, `committed_term` the term of that entry (-1 when
        unknown).

        Raises:
            DLedgerError: LEADER_PENDING_FULL when the commit index is past `MAX_BLOCK`.
        """
        if term != self.term:
            self.term, self.block, self.given = term, -1, self.block_ids
        if self.given >= self.block_ids:
            if committed_term != term or committed_index <= self.block:
                return None
            if committed_index > MAX_BLOCK:
                raise DLedgerError(ResponseCode.LEADER_PENDING_FULL, f"no producer ids past log index {MAX_BLOCK}")
            self.block, self.given = committed_index, 0
        producer_id = FIRST_ALLOCATED + (self.block << BLOCK_BITS) + self.given
        self.given += 1
        return producer_id
