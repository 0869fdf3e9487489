"""How much of the log a member keeps for the others: I/O-free decisions of the Raft core.

- `retention_floor`: the lowest index time-based retention keeps (what a lagging member
  may still need, up to the newest snapshot).
- `compaction_floor`: the lowest index a leader's compaction after a snapshot keeps, so
  that a live follower a few entries behind (a standby whose pushes wait
  `standbyPushMs`, a follower between two pushes) is sent those entries rather than the
  whole snapshot (helper L's soak: 12 of 13 installs went to a healthy follower). At most
  `snapshotCatchUpEntries` entries before the snapshot are kept for it (etcd keeps
  5,000); a follower further behind, unmatched or not answering heartbeats gets the
  snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dledger.config import DLedgerConfig
from dledger.raft.dispatcher import DispatchState, EntryDispatcher
from dledger.raft.member_state import MemberState


def retention_floor(
    member: MemberState, dispatchers: Iterable[EntryDispatcher], latest_snapshot: tuple[int, int] | None
) -> int:
    """The lowest log index some member may still need; retention must keep it
    (`store.set_retention_floor`). On the leader: the smallest follower match index + 1
    (a follower not matched yet in this term counts as needing everything), never above
    committed + 1, announced in its heartbeats; elsewhere: committed + 1, and never above
    what the leader last announced (0 before it did), so that a follower that leads next
    can still bring a lagging member back (helper K: followers of a plain log deleted what
    a member that was down needed, and when the leader failed too the group could not
    commit). A follower below the newest snapshot is not waited for: it gets the snapshot
    (it needs only the entries after the snapshot's last index)."""
    floor = member.committed_index + 1
    covered = latest_snapshot[0] + 1 if latest_snapshot is not None else 0
    if member.is_leader:
        for dispatcher in dispatchers:
            match = dispatcher.match_index if dispatcher.term == member.current_term else -1
            floor = min(floor, max(match + 1, covered))
    else:
        floor = min(floor, member.leader_floor)
    return max(floor, 0)


def compaction_floor(
    config: DLedgerConfig,
    member: MemberState,
    dispatchers: Mapping[str, EntryDispatcher],
    live: Mapping[str, bool],
    snapshot_index: int,
) -> int:
    """The lowest index the log keeps after snapshot `snapshot_index` (its strategy may
    keep more): on the leader the match point of its slowest follower that is matched in
    this term and answered the last heartbeat (`live`), but never below
    `snapshot_index + 1 - snapshot_catch_up_entries`; elsewhere `snapshot_index + 1`. A
    match point below the snapshot is kept itself: the pushes name its term, and the log
    knows the term of the entry before its first only when that is the snapshot's (a
    follower that committed an entry takes an unknown term there for another history)."""
    floor = snapshot_index + 1
    if not member.is_leader:
        return floor
    lowest = max(floor - config.snapshot_catch_up_entries, 0)
    for peer, dispatcher in dispatchers.items():
        matched = dispatcher.term == member.current_term and dispatcher.state is DispatchState.APPEND
        if matched and live.get(peer, False):
            match = dispatcher.match_index
            floor = min(floor, max(match + 1 if match >= snapshot_index else match, lowest))
    return floor
