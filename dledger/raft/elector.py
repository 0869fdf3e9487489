"""LeaderElector: DLedger's election and heartbeat decisions, without threads or clocks.

The shell calls `tick(now_ms)` often (DLedger's state maintainer runs every 10 ms), sends
the returned `Outbound` requests, and feeds every answer (or None for a network error)
back through `on_vote_response` / `on_heartbeat_response`. Incoming peer requests go to
`handle_vote` / `handle_heartbeat`.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.heartbeats import LeaderHeartbeats
from dledger.raft.member_state import MemberState, Role
from dledger.raft.messages import (
    HeartBeatRequest,
    HeartBeatResponse,
    ParseResult,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.raft.prevote import (
    answer_pre_vote,
    at_max_term,
    election_timeout_ms,
    in_lease,
    raises_own_term,
    term_out_of_range,
)
from dledger.raft.rounds import HeartBeatRound, Outbound, VoteRound
from dledger.raft.vote_hold import VoteHold, founding_term

__all__ = ["LeaderElector", "Outbound", "RoleChangeListener"]

RoleChangeListener = Callable[[int, Role], None]
log = logging.getLogger(__name__)


class LeaderElector(LeaderHeartbeats):
    """Election and heartbeat decisions of one member (DLedgerLeaderElector).

    Args:
        config: timings (heartbeat interval, leak, vote intervals).
        member_state: the member's state; every transition goes through it.
        rng: the source of the randomized vote interval (seeded in tests).
    """

    def __init__(
        self,
        config: DLedgerConfig,
        member_state: MemberState,
        rng: random.Random,
        unclean_restart: bool = False,
        rejoin_index: int | None = None,
        founding: bool = False,
    ) -> None:
        self.config = config
        self.member_state = member_state
        self.rng = rng
        self.last_leader_heart_beat_time = -1
        self.last_send_heart_beat_time = -1
        self.last_succ_heart_beat_time = -1
        self.next_time_to_request_vote = -1
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.last_vote_cost_ms = 0
        self.peers_live_table: dict[str, bool] = {}
        self._vote_round: VoteRound | None = None
        self._pre_vote_passed_term = -1  # a quorum would vote for this member in that term
        self._hb_round: HeartBeatRound | None = None
        self.on_quorum_round: Callable[[int, int], None] | None = None
        self._now_ms = 0
        self.listeners: list[RoleChangeListener] = []
        # A member that voted for itself before a restart may have led that term, and lost
        # entries it made then (async flush). Leading the same term again could put a
        # second, different entry at an (index, term) a follower holds, so it never leads
        # that term again: a won round there moves on to the next term at once. (DLedger
        # re-runs and may win the same term; a single member has nobody to diverge from.)
        restarted_candidate = member_state.vote_for == member_state.self_id and len(member_state.peer_map) > 1
        self.no_lead_term = member_state.current_term if restarted_candidate else -1
        group = len(member_state.peer_map) > 1  # a single member has nobody to catch up with
        self.vote_hold = VoteHold.at_start(group, config.max_vote_hold_ms, unclean_restart, rejoin_index, founding)
        self.on_rejoined: Callable[[], None] | None = None
        """Called once when a rejoin or founding hold ends (the shell removes the `rejoin` marker)."""
        self.on_group_exists: Callable[[], None] | None = None
        """Called when a founding member learns that its group exists (it rejoins: the marker stays)."""
        self.on_group_id: Callable[[str], None] | None = None
        """Called when a joining member adopts its leader's group id (the shell persists it)."""

    @property
    def now_ms(self) -> int:
        """The time given by the latest call (role-change listeners read it)."""
        return self._now_ms

    # -- role changes

    def _role_changed(self, term: int, role: Role) -> None:
        self._vote_round = None
        self._pre_vote_passed_term = -1
        self._hb_round = None
        for listener in self.listeners:
            listener(term, role)

    def change_role_to_leader(self, term: int) -> None:
        if self.member_state.current_term != term:
            return
        self.member_state.change_to_leader(term)
        self.peers_live_table.clear()  # liveness from an earlier leadership is stale
        self.last_send_heart_beat_time = -1
        self.last_succ_heart_beat_time = self._now_ms
        self._role_changed(term, Role.LEADER)

    def change_role_to_follower(self, term: int, leader_id: str) -> None:
        self.member_state.change_to_follower(term, leader_id)
        self.last_leader_heart_beat_time = self._now_ms
        self._role_changed(term, Role.FOLLOWER)

    def change_role_to_candidate(self, term: int) -> None:
        """Step down (or stay) candidate; a higher `term` is reached at the next round."""
        if term < self.member_state.current_term:
            return
        self.member_state.change_to_candidate(term)
        self._role_changed(term, Role.CANDIDATE)

    def take_leadership(self, now_ms: int) -> int:
        """Stand for election in the next term at once (the transferee of a leadership
        transfer). The term moves now rather than at the next maintainer pass, so that a
        heartbeat of the old leader arriving in between cannot make this member follow it
        again. Returns the term it stands in (`term_to_take_leadership`)."""
        self._now_ms = now_ms
        member = self.member_state
        self.change_role_to_candidate(member.current_term + 1)
        term = member.next_term()
        member.term_to_take_leadership = term
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.next_time_to_request_vote = now_ms
        return term

    def next_vote_time(self, now_ms: int) -> int:
        """now + a random interval (the short take-leadership one while this member is the
        transferee of a leadership transfer in its current term)."""
        if self.member_state.is_taking_leadership():
            lo, hi = self.config.min_take_leadership_vote_interval_ms, self.config.max_take_leadership_vote_interval_ms
        else:
            lo, hi = self.config.min_vote_interval_ms, self.config.max_vote_interval_ms
        return now_ms + lo + self.rng.randrange(hi - lo)

    # -- request handlers

    def own_log_end(self) -> tuple[int, int]:
        """This member's log end as (term, index)."""
        return self.member_state.ledger_end_term, self.member_state.ledger_end_index

    def handle_vote(self, req: VoteRequest, now_ms: int, self_call: bool = False) -> VoteResponse:
        """Answer a vote request, in DLedger's order (DLEDGER.md §3.5)."""
        self._now_ms = now_ms
        member = self.member_state

        def reply(result: VoteResult, term: int | None = None, code: int = ResponseCode.SUCCESS) -> VoteResponse:
            header = member.answer_header(req)
            if term is not None:
                header["term"] = term
            end_term, end_index = self.own_log_end()
            return VoteResponse(
                **header,
                code=code,
                vote_result=result,
                ledger_end_index=end_index,
                ledger_end_term=end_term,
                leader_seen=member.leader_seen or self.vote_hold.state == "rejoin",  # its group exists
            )

        if not self_call and (bad := member.check_addressing(req)) is not None:
            return reply(VoteResult.UNKNOWN, code=bad)
        if not member.is_peer_member(req.leader_id) or not member.is_peer_member(req.local_id):
            return reply(VoteResult.REJECT_UNKNOWN_LEADER, code=ResponseCode.UNKNOWN_MEMBER)
        if term_out_of_range(req):
            return reply(VoteResult.UNKNOWN, code=ResponseCode.UNEXPECTED_ARGUMENT)
        if not self_call and req.leader_id == member.self_id:
            return reply(VoteResult.REJECT_UNEXPECTED_LEADER)
        if not self_call:
            self.vote_hold.on_asked()  # a founding member then asks every member at once
        candidate = req.leader_id or ""  # a member (checked above)
        if member.is_diverged(candidate, now_ms):  # of another history (LOG_DIVERGED): never
            return reply(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        # a member holding a floor (see vote_hold) compares as if its log ended there
        end_term, end_index = max(self.own_log_end(), self.vote_hold.floor or (-1, -1))
        if req.ledger_end_term < end_term:
            return reply(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledger_end_term == end_term and req.ledger_end_index < end_index:
            return reply(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if not self_call and not req.leadership_transfer and candidate != member.leader_id and self._in_lease(now_ms):
            return reply(VoteResult.REJECT_ALREADY_HAS_LEADER)  # a live leader: never disrupt it
        if req.pre_vote:
            rival = not self_call and member.is_taking_leadership()
            if self.holding_vote(now_ms):
                return reply(VoteResult.REJECT_HOLDING_AFTER_RESTART)
            return reply(answer_pre_vote(member, req, rival))
        if req.term < member.current_term:
            return reply(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if req.term == member.current_term:
            if member.vote_for is not None and member.vote_for != candidate:
                if member.leader_id is not None:
                    return reply(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return reply(VoteResult.REJECT_ALREADY_VOTED)
        else:
            # stepped down by a larger term: move there first, vote in a later call
            self.change_role_to_candidate(req.term)
            self.need_increase_term_immediately = True
            return reply(VoteResult.REJECT_TERM_NOT_READY)
        if req.term < member.ledger_end_term:
            return reply(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, term=member.ledger_end_term)
        if (
            not self_call
            and member.is_taking_leadership()
            and req.ledger_end_term == member.ledger_end_term
            and member.ledger_end_index >= req.ledger_end_index
        ):
            return reply(VoteResult.REJECT_TAKING_LEADERSHIP)
        if self.holding_vote(now_ms):
            return reply(VoteResult.REJECT_HOLDING_AFTER_RESTART)
        member.set_vote_for(candidate)  # persisted before it is granted
        return reply(VoteResult.ACCEPT)

    def handle_heartbeat(self, req: HeartBeatRequest, now_ms: int) -> HeartBeatResponse:
        """Answer a leader's heartbeat (DLEDGER.md §3.5)."""
        self._now_ms = now_ms
        member = self.member_state

        def reply(code: ResponseCode) -> HeartBeatResponse:
            return HeartBeatResponse(**member.answer_header(req), code=code)

        if (bad := member.check_addressing(req)) is not None:
            return reply(bad)
        if not member.is_peer_member(req.leader_id) or not member.is_peer_member(req.local_id):
            return reply(ResponseCode.UNKNOWN_MEMBER)
        if term_out_of_range(req):
            return reply(ResponseCode.UNEXPECTED_ARGUMENT)
        if req.leader_id == member.self_id:
            return reply(ResponseCode.UNEXPECTED_MEMBER)
        leader = req.leader_id or ""  # a member (checked above)
        if member.is_diverged(leader, now_ms):  # of another history: let the others elect
            return reply(ResponseCode.LOG_DIVERGED)
        if req.term < member.current_term:
            return reply(ResponseCode.EXPIRED_TERM)
        if req.term == member.current_term:
            if member.leader_id is None:
                self.change_role_to_follower(req.term, leader)
            elif member.leader_id == leader:
                self.last_leader_heart_beat_time = now_ms
            else:
                return reply(ResponseCode.INCONSISTENT_LEADER)
            self.vote_hold.on_leader(leader, req.term, req.ledger_end_index)
            member.adopt_group_id(req.group_id, self.on_group_id)
            member.leader_floor = req.retention_floor  # its retention keeps what a lagging member needs
            return reply(ResponseCode.SUCCESS)
        # a larger term: become candidate there first, the next heartbeat then succeeds;
        # a leader exists (a founding member may not follow it for a heartbeat yet: vote_hold)
        member.saw_leader()
        self.change_role_to_candidate(req.term)
        self.need_increase_term_immediately = True
        return reply(ResponseCode.TERM_NOT_READY)

    def _in_lease(self, now_ms: int) -> bool:
        return in_lease(self.config, self.member_state, self.last_leader_heart_beat_time, now_ms)

    # -- the state maintainer

    def tick(self, now_ms: int) -> list[Outbound]:
        """One pass of DLedger's StateMaintainer; returns the requests to send."""
        self._now_ms = now_ms
        self.holding_vote(now_ms)  # ends the hold as soon as it can
        if self.member_state.is_leader:
            return self._maintain_as_leader(now_ms)
        if self.member_state.is_follower:
            self._maintain_as_follower(now_ms)
            return []
        if self.member_state.is_candidate:
            return self._maintain_as_candidate(now_ms)
        return []

    def _maintain_as_follower(self, now_ms: int) -> None:
        leak_ms = self.config.max_heart_beat_leak * self.config.heart_beat_time_interval_ms
        if now_ms - self.last_leader_heart_beat_time > leak_ms:
            self.change_role_to_candidate(self.member_state.current_term)

    def holding_vote(self, now_ms: int) -> bool:
        """Whether this member still holds its vote (see `dledger.raft.vote_hold`); ends
        the hold once it caught up or (unclean hold) `max_vote_hold_ms` passed."""
        hold = self.vote_hold
        if not hold.pending:
            return False
        member = self.member_state
        if hold.release(now_ms, member.committed_index, member.leader_id, member.current_term, member.is_leader):
            return True
        if hold.released:  # (a member that was elected itself leads: helper N read "with leader <itself>")
            caught_up = "leads" if member.is_leader else f"caught up with leader {member.leader_id}"
            log.info("%s: %s at index %d: votes again", member.self_id, caught_up, member.committed_index)
            if hold.kind != "unclean" and self.on_rejoined is not None:
                self.on_rejoined()
        elif hold.expired:
            log.warning(
                "%s: votes again after %d ms without catching up with a leader since its unclean restart; "
                "entries it acknowledged before (async flush) may be lost",
                member.self_id,
                hold.max_ms,
            )
        return False

    def _maintain_as_candidate(self, now_ms: int) -> list[Outbound]:
        rnd = self._vote_round
        if rnd is not None:
            if rnd.done(self.member_state) or now_ms >= rnd.deadline_ms:
                if not rnd.pre_vote:
                    self._parse_vote_round(rnd, now_ms)
                    return []
                self._parse_pre_vote_round(rnd, now_ms)  # passed: the real round starts now
            if self._vote_round is not None:
                return []
        member = self.member_state
        hold = self.vote_hold
        due = self.need_increase_term_immediately or hold.probe_due  # probe_due: asked by a peer (vote_hold)
        if now_ms < self.next_time_to_request_vote and not due:
            return []
        if (hold.active or not hold.admits(self.own_log_end())) and not self.need_increase_term_immediately:
            # it moves to the terms others reach (below), but neither stands nor votes;
            # an unclean hold asks every member for its log end (see vote_hold)
            self.next_time_to_request_vote = self.next_vote_time(now_ms)
            if hold.wants_log_ends:
                hold.asked = False
                return self._start_round(member.peek_next_term(), now_ms, pre_vote=True, probe=True)
            return []
        if not self.need_increase_term_immediately and member.stands_aside():
            self.next_time_to_request_vote = self.next_vote_time(now_ms)  # unfit to lead (its store, its machine):
            return []  # it moves to the terms others reach and votes, but does not stand (yet)
        if self.last_parse_result == ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term_immediately:
            if at_max_term(member):
                self.next_time_to_request_vote, self.need_increase_term_immediately = self.next_vote_time(now_ms), False
                return []
            if (
                self.config.pre_vote
                and not self.need_increase_term_immediately
                and raises_own_term(member)
                and self._pre_vote_passed_term != member.peek_next_term()
            ):
                return self._start_round(member.peek_next_term(), now_ms, pre_vote=True)
            term = member.next_term()
            self._pre_vote_passed_term = -1
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = member.current_term
        if self.need_increase_term_immediately:
            self.next_time_to_request_vote = self.next_vote_time(now_ms)
            self.need_increase_term_immediately = False
            return []
        return self._start_round(term, now_ms)

    def _start_round(self, term: int, now_ms: int, pre_vote: bool = False, probe: bool = False) -> list[Outbound]:
        """Ask every member (itself included) for its vote, or its pre-vote, in `term`
        (`probe`: a pre-vote round asked only for the members' log ends)."""
        member = self.member_state
        transfer = member.is_taking_leadership()
        deadline = (
            now_ms + self.config.heart_beat_time_interval_ms + self.rng.randrange(self.config.max_vote_interval_ms)
        )
        requests = {
            peer: VoteRequest(
                **member.request_header(peer),
                term=term,
                ledger_end_index=member.ledger_end_index,
                ledger_end_term=member.ledger_end_term,
                pre_vote=pre_vote,
                leadership_transfer=transfer,
            )
            for peer in member.peer_ids
        }
        known = member.current_term if pre_vote else term  # a pre-vote learns only of higher real terms
        rnd = VoteRound(term, deadline, requests, known_max_term=known, pre_vote=pre_vote, probe=probe)
        self._vote_round = rnd
        self.on_vote_response(
            member.self_id, requests[member.self_id], self.handle_vote(requests[member.self_id], now_ms, True), now_ms
        )
        if self._vote_round is rnd and rnd.done(self.member_state):
            if pre_vote:
                self._parse_pre_vote_round(rnd, now_ms)
            else:
                self._parse_vote_round(rnd, now_ms)
        return [Outbound(peer, req) for peer, req in requests.items() if peer != member.self_id]

    def on_vote_response(self, peer: str, request: VoteRequest, response: VoteResponse | None, now_ms: int) -> None:
        """Record one vote answer (None: network error)."""
        self._now_ms = now_ms
        rnd = self._vote_round
        if rnd is None or not rnd.take_answer(peer, request):
            return
        if response is None:
            return
        rnd.record(peer, response)

    def _parse_pre_vote_round(self, rnd: VoteRound, now_ms: int) -> None:
        """A quorum of pre-vote grants lets the real round for `rnd.term` start at once;
        otherwise the member keeps its term and tries again later."""
        self._vote_round = None
        member = self.member_state
        if rnd.probe:
            self._parse_probe(rnd, now_ms)
            return
        if not member.is_candidate or rnd.term != member.peek_next_term():
            return
        if member.is_quorum(rnd.accepted_num):
            self._pre_vote_passed_term = rnd.term
            self.next_time_to_request_vote = now_ms
            return
        if rnd.known_max_term > member.current_term:
            self.change_role_to_candidate(rnd.known_max_term)  # others are there: follow them
            self.next_time_to_request_vote = self.next_vote_time(now_ms)
        elif rnd.already_has_leader:
            self.next_time_to_request_vote = self.next_vote_time(now_ms) + election_timeout_ms(self.config)
        else:
            self.next_time_to_request_vote = self.next_vote_time(now_ms)

    def _parse_probe(self, rnd: VoteRound, now_ms: int) -> None:
        """The log ends a holding member asked for (see vote_hold): a founding member
        learns whether its group exists; with every member's, the floor replaces an
        unclean hold, and the member with the highest log end may then stand at once."""
        member = self.member_state
        if self.vote_hold.kind == "founding":
            quorum = member.is_quorum(len(rnd.ends))
            outcome = self.vote_hold.on_founding_answers(member.self_id, rnd.ends, rnd.leaders, quorum)
            if outcome == "founded" and max(member.current_term, member.known_max_term_in_group) == 0:
                member.min_next_term = founding_term(self.rng)  # its founding's own terms (see vote_hold)
                self.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT  # a pre-vote there first
            callback = {"exists": self.on_group_exists, "founded": self.on_rejoined}.get(outcome)
            if callback is not None:
                callback()
        elif len(rnd.ends) == len(member.peer_map):
            self.vote_hold.on_log_ends(list(rnd.ends.values()))
            log.info(
                "%s: every member reported its log end: votes again, for logs at least %s (term, index)",
                member.self_id,
                self.vote_hold.floor,
            )
            if self.vote_hold.admits(self.own_log_end()):
                self.next_time_to_request_vote = now_ms
                return
        if member.is_candidate and rnd.known_max_term > member.current_term:
            self.change_role_to_candidate(rnd.known_max_term)

    def _parse_vote_round(self, rnd: VoteRound, now_ms: int) -> ParseResult:
        self._vote_round = None
        member = self.member_state
        if not member.is_candidate or rnd.term != member.current_term:
            return self.last_parse_result
        interval_ms = self.config.heart_beat_time_interval_ms
        if rnd.known_max_term > rnd.term:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self.next_vote_time(now_ms)
            self.change_role_to_candidate(rnd.known_max_term)
        elif rnd.already_has_leader:
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self.next_vote_time(now_ms) + interval_ms * self.config.max_heart_beat_leak
        elif not member.is_quorum(rnd.valid_num):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self.next_vote_time(now_ms)
        elif not member.is_quorum(rnd.valid_num - rnd.bigger_ledger_num):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self.next_vote_time(now_ms) + self.config.max_vote_interval_ms
        elif member.is_quorum(rnd.accepted_num) and rnd.term == self.no_lead_term:
            result = ParseResult.WAIT_TO_VOTE_NEXT  # see no_lead_term: stand again, next term
            self.next_time_to_request_vote = now_ms
        elif member.is_quorum(rnd.accepted_num):
            result = ParseResult.PASSED
        elif member.is_quorum(rnd.accepted_num + rnd.not_ready_term_num):
            result = ParseResult.REVOTE_IMMEDIATELY
            self.next_time_to_request_vote = now_ms
        else:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self.next_vote_time(now_ms)
        self.last_parse_result = result
        if result == ParseResult.PASSED:
            self.change_role_to_leader(rnd.term)
        return result
