"""MemberState: role, term, vote and leader of this member, persisted through a TermStore."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.log import LogStore, TermStore
from dledger.raft.messages import MAX_TERM, AnswerHeader, HeartBeatRequest, RequestHeader, RequestOrResponse

log = logging.getLogger(__name__)

DIVERGED_HOLD_MS = 30_000
"""How long a member whose log contradicts committed entries is neither followed nor
voted for after the contradiction was last seen (`MemberState.mark_diverged`)."""

UNFIT_ROUNDS_ASIDE = 2
"""Election rounds a member whose disk is full or whose state machine stopped lets pass
before it stands (`MemberState.stands_aside`)."""


class Role(Enum):
    """`MemberState.Role`."""

    UNKNOWN = "UNKNOWN"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


class MemoryTermStore:
    """A TermStore kept in memory (tests, MEMORY stores). `history` records every persist
    so tests can check that a vote was persisted before it was granted."""

    def __init__(self, term: int = 0, vote_for: str | None = None) -> None:
        self.term = term
        self.vote_for = vote_for
        self.history: list[tuple[int, str | None]] = []

    def load(self) -> tuple[int, str | None]:
        return self.term, self.vote_for

    def persist(self, term: int, vote_for: str | None) -> None:
        self.term, self.vote_for = term, vote_for
        self.history.append((term, vote_for))


class MemberState:
    """The member's view of the group. Not thread-safe: the shell holds one lock around
    every transition (DLedger's `synchronized (memberState)`).

    Args:
        config: group, self id and peers.
        store: the log (ledger end index/term and committed index come from it).
        term_store: where term and vote are persisted.
    """

    def __init__(self, config: DLedgerConfig, store: LogStore, term_store: TermStore) -> None:
        self.config = config
        self.group = config.group
        self.self_id = config.self_id
        self.peer_map = config.peer_map
        self.store = store
        self.term_store = term_store
        term, vote_for = term_store.load()
        if not 0 <= term <= MAX_TERM:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"stored term {term} is outside 0..{MAX_TERM}")
        self._current_term = term
        self._vote_for = vote_for
        self.known_max_term_in_group = term
        self.role = Role.CANDIDATE
        self.leader_id: str | None = None
        self.transferee: str | None = None
        self.term_to_take_leadership = -1
        self.group_id = ""  # the group's id (dledger.store.membership); "" until known
        self.incarnation = ""  # this member's incarnation (a new one with every empty store)
        self.leader_seen = False  # it has followed or been a leader (its group exists; persisted)
        self.on_leader_seen: Callable[[], None] | None = None  # persists `leader_seen` (once)
        self._diverged: dict[str, int] = {}  # member -> until when it is neither followed nor voted for
        self.min_next_term = 0  # the lowest term next_term moves to (a founding's own: dledger.raft.vote_hold)
        self.machine_failure = ""  # why its state machine stopped ("" while it applies): machine_stopped
        self._rounds_aside = 0  # election rounds it let pass since it last followed a leader (stands_aside)
        self.leader_floor = 0  # the retention floor its leader last announced (0: keep everything)
        self.group_floor: Callable[[], int] = lambda: 0  # as leader: the one it announces (RaftCore sets it)
        # the log may have been truncated by recovery: never trust a commit above its end
        self._committed_index = min(store.committed_index, store.end_index)

    def unfit_to_lead(self) -> str:
        """Why this member should not lead ("" when it may): its store failed or its disk
        is full (it takes no write), or its state machine stopped applying (it answers no
        read or command). Such a member hands leadership over and does not stand
        (dledger.raft.transfer)."""
        if self.store.failure is not None:
            return f"its store failed ({self.store.failure})"
        health = self.store.health
        if health:
            return f"its store takes no write ({health})"
        if self.machine_failure:
            return f"its state machine stopped ({self.machine_failure})"
        return ""

    def machine_stopped(self, why: BaseException) -> None:
        """Its state machine stopped applying for good (see `unfit_to_lead`)."""
        self.machine_failure = f"{type(why).__name__}: {why}"

    def stands_aside(self) -> bool:
        """Whether this member lets an election round pass instead of standing (it still
        votes). A failed store never stands. A full disk or a stopped state machine lets
        UNFIT_ROUNDS_ASIDE rounds pass after its last leader, so that a member fit to
        lead is elected when one is there, and a group whose every disk is full or whose
        every machine stopped (the same entry fails everywhere) still elects a leader."""
        if self.store.failure is not None:
            return True
        if self.unfit_to_lead() and self._rounds_aside < UNFIT_ROUNDS_ASIDE:
            self._rounds_aside += 1
            return True
        return False

    # -- members of another history

    def mark_diverged(self, member_id: str | None, now_ms: int) -> None:
        """`member_id`'s log contradicts entries one of the two committed (LOG_DIVERGED,
        see `dledger.raft.entry_handler`): for DIVERGED_HOLD_MS this member neither
        follows it nor votes for it, so that the members that share a history elect
        among themselves. Marked again at every contradiction seen; kept in memory only."""
        if member_id is not None:
            self._diverged[member_id] = now_ms + DIVERGED_HOLD_MS

    def is_diverged(self, member_id: str | None, now_ms: int) -> bool:
        """Whether `member_id` was marked by `mark_diverged` less than DIVERGED_HOLD_MS ago."""
        return member_id is not None and self._diverged.get(member_id, now_ms) > now_ms

    # -- term and vote

    @property
    def current_term(self) -> int:
        """The current term (persisted)."""
        return self._current_term

    @property
    def vote_for(self) -> str | None:
        """Whom this member voted for in the current term (persisted)."""
        return self._vote_for

    def peek_next_term(self) -> int:
        """The term `next_term` would move to (nothing changes)."""
        term = (
            self.known_max_term_in_group
            if self.known_max_term_in_group > self._current_term
            else self._current_term + 1
        )
        return max(term, self.store.end_term + 1, self.min_next_term)

    def next_term(self) -> int:
        """Move to the next term (or straight to the highest term seen), clearing the vote.

        The new term is always above the log's last term: only a lost term file can leave
        the current term below it, and standing again in a term whose entries exist
        could make a second leader of that term.

        Raises:
            DLedgerError: ILLEGAL_MEMBER_STATE when that term would pass MAX_TERM
                (nothing is stored then).
        """
        term = self.peek_next_term()
        if term > MAX_TERM:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"term {term} would pass MAX_TERM {MAX_TERM}")
        self.term_store.persist(term, None)
        self._current_term, self._vote_for = term, None
        self.known_max_term_in_group = max(self.known_max_term_in_group, term)
        self.min_next_term = 0  # reached (or passed)
        return term

    def set_vote_for(self, candidate_id: str) -> None:
        """Record the vote; it is persisted before the caller may grant it."""
        if self._vote_for == candidate_id:
            return  # already durable
        self.term_store.persist(self._current_term, candidate_id)
        self._vote_for = candidate_id

    # -- roles

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def is_follower(self) -> bool:
        return self.role is Role.FOLLOWER

    @property
    def is_candidate(self) -> bool:
        return self.role is Role.CANDIDATE

    def change_to_leader(self, term: int) -> None:
        """Become leader of `term` (the current term)."""
        if term != self._current_term:
            raise DLedgerError(
                ResponseCode.ILLEGAL_MEMBER_STATE, f"leader of {term} but current term {self._current_term}"
            )
        self.role = Role.LEADER
        self.leader_id = self.self_id
        self.transferee = None
        self.saw_leader()

    def change_to_follower(self, term: int, leader_id: str) -> None:
        """Follow `leader_id` in `term` (the current term)."""
        if term != self._current_term:
            raise DLedgerError(
                ResponseCode.ILLEGAL_MEMBER_STATE, f"follower of {term} but current term {self._current_term}"
            )
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.transferee = None
        self.min_next_term = 0  # its group's terms are the leader's
        self._rounds_aside = 0
        self.saw_leader()

    def saw_leader(self) -> None:
        """The first leader it follows, is, or hears a heartbeat from (its group exists):
        persisted before it answers (see `leader_seen`)."""
        if not self.leader_seen:
            self.leader_seen = True
            if self.on_leader_seen is not None:
                self.on_leader_seen()

    def change_to_candidate(self, term: int) -> None:
        """Become candidate; `term` > current only raises the known max term (the next
        vote round then jumps to it)."""
        if term < self._current_term:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"candidate of {term} < current {self._current_term}")
        if term > MAX_TERM:
            raise DLedgerError(ResponseCode.ILLEGAL_MEMBER_STATE, f"candidate of {term} > MAX_TERM {MAX_TERM}")
        self.known_max_term_in_group = max(self.known_max_term_in_group, term)
        if term > self._current_term:
            self.min_next_term = 0  # another member's term: adopt it, never jump past it
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.transferee = None

    def is_taking_leadership(self) -> bool:
        """True while this member is taking over leadership in the current term (the
        transferee of a leadership transfer: a preferred leader or an admin's choice)."""
        return self.term_to_take_leadership == self._current_term

    # -- peers

    @property
    def peer_ids(self) -> list[str]:
        return list(self.peer_map)

    @property
    def other_peer_ids(self) -> list[str]:
        return [p for p in self.peer_map if p != self.self_id]

    def answer_header(self, req: RequestOrResponse) -> AnswerHeader:
        """The base fields of this member's answer to `req`: its group, id, leader and
        current term, addressed to the sender."""
        return AnswerHeader(
            group=self.group,
            local_id=self.self_id,
            remote_id=req.local_id,
            leader_id=self.leader_id,
            term=self.current_term,
        )

    def request_header(self, remote_id: str) -> RequestHeader:
        """The base fields of a Vote, HeartBeat or Push this member sends to `remote_id`."""
        return RequestHeader(
            group=self.group,
            local_id=self.self_id,
            remote_id=remote_id,
            leader_id=self.self_id,
            group_id=self.group_id,
            incarnation=self.incarnation,
        )

    def heartbeat_requests(self) -> dict[str, HeartBeatRequest]:
        """One HeartBeat of this leader's term to every other member (the heartbeat round
        and a ReadIndex round send the same), with its retention floor (`group_floor`,
        asked once for the round)."""
        term, end, floor = self.current_term, self.ledger_end_index, self.group_floor()
        return {
            peer: HeartBeatRequest(**self.request_header(peer), term=term, ledger_end_index=end, retention_floor=floor)
            for peer in self.other_peer_ids
        }

    def check_addressing(self, req: RequestOrResponse) -> ResponseCode | None:
        """UNKNOWN_MEMBER / UNKNOWN_GROUP when the request is not for this member (another
        group name, or another group id when both sides know theirs)."""
        if req.remote_id != self.self_id:
            return ResponseCode.UNKNOWN_MEMBER
        if req.group != self.group:
            return ResponseCode.UNKNOWN_GROUP
        if not self.accepts_group_id(getattr(req, "group_id", "")):  # Vote, HeartBeat and Push carry it
            return ResponseCode.UNKNOWN_GROUP
        return None

    def accepts_group_id(self, group_id: str) -> bool:
        """Whether a request carrying `group_id` may be of this group: yes unless both
        sides know their ids and they differ."""
        return not group_id or not self.group_id or group_id == self.group_id

    def adopt_group_id(self, group_id: str, persist: Callable[[str], None] | None) -> None:
        """A joining member takes the group id of the first leader it follows, persisted
        through `persist`."""
        if not self.group_id and group_id:
            self.group_id = group_id
            log.info("%s: joined group %s (id %s)", self.self_id, self.group, group_id)
            if persist is not None:
                persist(group_id)

    def is_peer_member(self, node_id: str | None) -> bool:
        return node_id is not None and node_id in self.peer_map

    def is_quorum(self, num: int) -> bool:
        """True when `num` members are a majority of the group."""
        return num >= len(self.peer_map) // 2 + 1

    # -- log

    @property
    def ledger_end_index(self) -> int:
        return self.store.end_index

    @property
    def ledger_end_term(self) -> int:
        """Term of the last entry (never the current term: DLedger #52)."""
        return self.store.end_term

    @property
    def committed_index(self) -> int:
        return self._committed_index

    def update_committed_index(self, index: int) -> bool:
        """Raise the committed index to `index`, clamped to the ledger end (#316); it never
        decreases. Returns True when it moved."""
        index = min(index, self.store.end_index)
        if index <= self._committed_index:
            return False
        self._committed_index = index
        self.store.update_committed_index(index)
        return True

    def __repr__(self) -> str:
        return (
            f"MemberState({self.self_id} {self.role.value} term={self._current_term} vote={self._vote_for} "
            f"leader={self.leader_id} end={self.ledger_end_index}/{self.ledger_end_term} "
            f"commit={self._committed_index})"
        )
