"""NodeStatus: a snapshot of one member's state."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeStatus:
    """A snapshot of one member's state (what Metadata and `dledger status` show).

    Attributes:
        group, self_id: who this is.
        role: "LEADER", "FOLLOWER" or "CANDIDATE".
        term: the current term; leader_id: the leader this member knows (or None).
        peers: {id: address} of the group.
        begin_index, end_index, end_term: the local log.
        committed_index: the highest committed index known here.
        applied_index: the last index applied to the state machine (-1 without one).
        peer_match: on the leader, each member's match index in the current term.
        vote_hold: "" when the member votes freely, else why it holds its vote
            ("unclean", "rejoin", "founding" or "floor": see dledger.raft.vote_hold).
        snapshot_index: lastIncludedIndex of the member's newest snapshot (-1: none).
        producers: idempotent producers in the member's committed producer table (the
            leader refuses new ones at `max_producers`).
        store_health: "" while the member's store takes writes, else why not.
        machine_health: "" while the member's state machine applies (or it has none),
            else why it stopped for good.
    """

    group: str
    self_id: str
    role: str
    term: int
    leader_id: str | None
    peers: dict[str, str]
    begin_index: int
    end_index: int
    end_term: int
    committed_index: int
    applied_index: int
    peer_match: dict[str, int] = field(default_factory=dict)
    vote_hold: str = ""
    snapshot_index: int = -1
    producers: int = 0
    store_health: str = ""
    machine_health: str = ""
