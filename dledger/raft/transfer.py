"""Leadership transfer and the preferred leader (DLEDGER.md §4), without I/O.

Leader side: a LEADERSHIP_TRANSFER addressed to the leader (`transfer_id` = itself) is
checked (UNKNOWN_MEMBER, INCONSISTENT_TERM, NOT_LEADER, FALL_BEHIND_TOO_MUCH,
LEADER_TRANSFERRING), then `MemberState.transferee` is set, which makes client appends
fail with LEADER_TRANSFERRING. Once the transferee's water mark reaches the leader's
ledger end (nothing new is appended meanwhile) the request is forwarded to it with
`take_leadership_ledger_index`; its answer completes the caller's future. The leader
gives up with TAKE_LEADERSHIP_FAILED when the transferee does not catch up within
`leadership_transfer_wait_timeout_ms`, and with TIMEOUT when the forwarded request gets
no answer in time.

Transferee side: the forwarded request must come from the leader it follows
(INCONSISTENT_LEADER); it waits until its own ledger end reaches the given index (at most
`leadership_transfer_wait_timeout_ms`, else TAKE_LEADERSHIP_FAILED), then stands for
election in the next term at once (`term_to_take_leadership`, the short vote interval,
REJECT_TAKING_LEADERSHIP for rivals with no better log). The answer is SUCCESS when it
leads that term, TAKE_LEADERSHIP_FAILED when it follows someone or the election does not
end within the timeout, EXPIRED_TERM when the group moved past the target term.

Preferred leader: every `check_preferred_leader_interval_ms` a leader that is not itself
preferred hands leadership to the live preferred member that lags least, if it lags by
fewer than `max_leadership_transfer_wait_index` entries.

Unfit leader: a leader whose store takes no write (it failed, or its disk is full) or
whose state machine stopped (it answers no read or command) hands leadership to the live follower
that lags least, trying again every FAILED_STORE_RETRY_MS (`MemberState.unfit_to_lead`).
A transferee that is unfit itself refuses with ILLEGAL_MEMBER_STATE and is not asked
again for UNFIT_PEER_MS; when every follower refused, the leader keeps leading its log.
An unfit member does not stand for election either (`MemberState.stands_aside`).

Every outcome is a LeadershipTransferResponse with a code; the futures never raise.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector, Outbound
from dledger.raft.member_state import MemberState, Role
from dledger.raft.messages import LeadershipTransferRequest, LeadershipTransferResponse
from dledger.raft.quorum_ack import QuorumAckChecker

log = logging.getLogger(__name__)

FAILED_STORE_RETRY_MS = 1_000
"""How often a leader whose store failed tries again to hand leadership over."""

UNFIT_PEER_MS = 30_000
"""How long an unfit leader does not ask again a follower that refused as unfit itself."""


@dataclass
class _Handover:
    """A transfer this leader runs."""

    transferee_id: str
    term: int
    future: Future[LeadershipTransferResponse]
    deadline_ms: int
    forwarded: LeadershipTransferRequest | None = None


@dataclass
class _Takeover:
    """A transfer this member was asked to take over."""

    request: LeadershipTransferRequest
    future: Future[LeadershipTransferResponse]
    deadline_ms: int
    target_term: int = -1  # set once it stands for election


class LeadershipTransfer:
    """Both sides of a leadership transfer, plus the preferred-leader check.

    Args:
        config: the transfer limits and the preferred leader ids.
        member_state: the member's state (`transferee`, `term_to_take_leadership`).
        elector: used to stand for election and for the peers' liveness.
        quorum: the leader's per-term water marks (how far the transferee is behind).
    """

    def __init__(
        self, config: DLedgerConfig, member_state: MemberState, elector: LeaderElector, quorum: QuorumAckChecker
    ) -> None:
        self.config = config
        self.member_state = member_state
        self.elector = elector
        self.quorum = quorum
        self.handover: _Handover | None = None
        self.takeover: _Takeover | None = None
        self.last_check_preferred_ms: int | None = None
        self._failed_store_tried_ms = -FAILED_STORE_RETRY_MS
        self._unfit_peers: dict[str, int] = {}  # follower -> until when it is not asked (refused as unfit)

    # -- replies

    def _reply(self, req: LeadershipTransferRequest, code: ResponseCode) -> LeadershipTransferResponse:
        return LeadershipTransferResponse(**self.member_state.answer_header(req), code=code)

    def _done(self, req: LeadershipTransferRequest, code: ResponseCode) -> Future[LeadershipTransferResponse]:
        future: Future[LeadershipTransferResponse] = Future()
        future.set_result(self._reply(req, code))
        return future

    def fall_behind(self, peer_id: str) -> int:
        """How many entries `peer_id` lacks, as far as this leader knows."""
        member = self.member_state
        return member.ledger_end_index - self.quorum.peer_water_mark(member.current_term, peer_id)

    # -- intake

    def handle(self, req: LeadershipTransferRequest, now_ms: int) -> Future[LeadershipTransferResponse]:
        """Answer a LEADERSHIP_TRANSFER request (as the leader, or as the transferee)."""
        member = self.member_state
        if req.remote_id != member.self_id:
            return self._done(req, ResponseCode.UNKNOWN_MEMBER)
        if req.group != member.group:
            return self._done(req, ResponseCode.UNKNOWN_GROUP)
        if req.transfer_id in (member.self_id, ""):
            return self.start(req.transferee_id, req.term, now_ms, req)
        if req.transferee_id == member.self_id:
            return self._accept_takeover(req, now_ms)
        return self._done(req, ResponseCode.NOT_LEADER)

    def start(
        self, transferee_id: str, term: int, now_ms: int, req: LeadershipTransferRequest | None = None
    ) -> Future[LeadershipTransferResponse]:
        """As the leader of `term`, hand leadership to `transferee_id`."""
        member = self.member_state
        if req is None:
            req = LeadershipTransferRequest(
                group=member.group,
                local_id=member.self_id,
                remote_id=member.self_id,
                term=term,
                transferee_id=transferee_id,
            )
        if not member.is_peer_member(transferee_id):
            return self._done(req, ResponseCode.UNKNOWN_MEMBER)
        if term != member.current_term:
            return self._done(req, ResponseCode.INCONSISTENT_TERM)
        if not member.is_leader:
            return self._done(req, ResponseCode.NOT_LEADER)
        if transferee_id == member.self_id:
            return self._done(req, ResponseCode.SUCCESS)  # already there
        if self.fall_behind(transferee_id) >= self.config.max_leadership_transfer_wait_index:
            return self._done(req, ResponseCode.FALL_BEHIND_TOO_MUCH)
        if member.transferee is not None or self.handover is not None:
            return self._done(req, ResponseCode.LEADER_TRANSFERRING)
        member.transferee = transferee_id  # from now on client appends are rejected
        future: Future[LeadershipTransferResponse] = Future()
        deadline = now_ms + self.config.leadership_transfer_wait_timeout_ms
        self.handover = _Handover(transferee_id, term, future, deadline)
        return future

    def _accept_takeover(self, req: LeadershipTransferRequest, now_ms: int) -> Future[LeadershipTransferResponse]:
        member = self.member_state
        if req.transfer_id != member.leader_id:
            return self._done(req, ResponseCode.INCONSISTENT_LEADER)
        unfit = member.unfit_to_lead()
        if unfit:
            log.warning("%s: refuses to take leadership from %s: %s", member.self_id, req.transfer_id, unfit)
            return self._done(req, ResponseCode.ILLEGAL_MEMBER_STATE)
        if self.takeover is not None:
            return self._done(req, ResponseCode.LEADER_TRANSFERRING)
        future: Future[LeadershipTransferResponse] = Future()
        self.takeover = _Takeover(req, future, now_ms + self.config.leadership_transfer_wait_timeout_ms)
        self._progress_takeover(now_ms)
        return future

    # -- the periodic pass (part of the state maintainer)

    def tick(self, now_ms: int) -> list[Outbound]:
        """Advance both sides; returns the forwarded request when it is due."""
        out: list[Outbound] = []
        if self.takeover is not None:
            self._progress_takeover(now_ms)
        if self.handover is not None:
            forwarded = self._progress_handover(now_ms)
            if forwarded is not None:
                out.append(Outbound(forwarded.remote_id, forwarded))
        elif self.member_state.is_leader:
            if self.member_state.unfit_to_lead():
                self._hand_over_unfit(now_ms)
            else:
                self._check_preferred_leader(now_ms)
        return out

    def on_role_change(self, term: int, role: Role, now_ms: int) -> None:
        """Settle what a role change decides."""
        if self.takeover is not None and self.takeover.target_term != -1:
            self._progress_takeover(now_ms)
        handover = self.handover
        if handover is not None and handover.forwarded is None and role is not Role.LEADER:
            self._finish_handover(ResponseCode.NOT_LEADER)

    # -- leader side

    def _progress_handover(self, now_ms: int) -> LeadershipTransferRequest | None:
        handover = self.handover
        assert handover is not None
        member = self.member_state
        if handover.forwarded is not None:
            if now_ms >= handover.deadline_ms:
                self._finish_handover(ResponseCode.TIMEOUT)
            return None
        if not member.is_leader or member.current_term != handover.term:
            self._finish_handover(ResponseCode.NOT_LEADER)
            return None
        if self.fall_behind(handover.transferee_id) > 0:
            if now_ms >= handover.deadline_ms:
                self._finish_handover(ResponseCode.TAKE_LEADERSHIP_FAILED)
            return None
        handover.forwarded = LeadershipTransferRequest(
            group=member.group,
            local_id=member.self_id,
            remote_id=handover.transferee_id,
            leader_id=member.self_id,
            term=handover.term,
            transfer_id=member.self_id,
            transferee_id=handover.transferee_id,
            take_leadership_ledger_index=member.ledger_end_index,
        )
        # the transferee may wait for its log, then needs an election and the answer's trip
        cfg = self.config
        handover.deadline_ms = now_ms + 2 * cfg.leadership_transfer_wait_timeout_ms + cfg.rpc_timeout_ms
        return handover.forwarded

    def on_response(self, req: LeadershipTransferRequest, resp: LeadershipTransferResponse | None, now_ms: int) -> None:
        """The transferee's answer to the forwarded request (None: network error)."""
        handover = self.handover
        if handover is None or handover.forwarded is not req:
            return
        if resp is None:
            self._finish_handover(ResponseCode.NETWORK_ERROR)
            return
        if resp.code == ResponseCode.ILLEGAL_MEMBER_STATE:
            self._unfit_peers[handover.transferee_id] = now_ms + UNFIT_PEER_MS
        self._finish_handover(ResponseCode.of(resp.code), resp.leader_id, resp.term)

    def _finish_handover(self, code: ResponseCode, leader_id: str | None = None, term: int | None = None) -> None:
        handover = self.handover
        assert handover is not None
        self.handover = None
        member = self.member_state
        if member.transferee == handover.transferee_id:
            member.transferee = None  # appends are accepted again (if this is still the leader)
        # on SUCCESS: the new leader and its term, as the transferee answered
        resp = LeadershipTransferResponse(
            group=member.group,
            local_id=member.self_id,
            leader_id=leader_id if leader_id is not None else member.leader_id,
            term=max(member.current_term, term if term is not None else -1),
            code=code,
        )
        if not handover.future.done():
            handover.future.set_result(resp)

    def _check_preferred_leader(self, now_ms: int) -> None:
        interval = self.config.check_preferred_leader_interval_ms
        if self.last_check_preferred_ms is None:
            self.last_check_preferred_ms = now_ms  # the first check after one interval
            return
        if now_ms - self.last_check_preferred_ms < interval:
            return
        self.last_check_preferred_ms = now_ms
        member = self.member_state
        preferred = self.config.preferred_leader_id_list
        if not preferred or member.self_id in preferred or member.transferee is not None:
            return
        best = self._least_behind(p for p in preferred if member.is_peer_member(p) and p != member.self_id)
        if best is not None and self.fall_behind(best) < self.config.max_leadership_transfer_wait_index:
            self.start(best, member.current_term, now_ms)

    def _least_behind(self, candidates: Iterable[str]) -> str | None:
        """The live member among `candidates` whose log lags this leader's least (None:
        none is live): the transferee a leader picks by itself."""
        live = [p for p in candidates if self.elector.peers_live_table.get(p)]
        return min(live, key=self.fall_behind) if live else None

    def hands_over(self, now_ms: int) -> bool:
        """Whether this leader is handing leadership over, or is unfit and has a follower
        left to ask (one that did not refuse as unfit itself in the last UNFIT_PEER_MS):
        what an unfit leader's refusals tell clients, "ask again" (LEADER_TRANSFERRING)
        or a final error."""
        if self.handover is not None:
            return True
        member = self.member_state
        return bool(member.unfit_to_lead()) and any(
            self._unfit_peers.get(p, now_ms) <= now_ms for p in member.other_peer_ids
        )

    def _hand_over_unfit(self, now_ms: int) -> None:
        """A leader whose store failed takes no more writes, one whose state machine
        stopped answers no read: it hands leadership to the live follower closest to its
        log that did not refuse as unfit itself, trying again every FAILED_STORE_RETRY_MS
        (a transfer that times out, a follower that was not live yet). Before, such a
        leader kept leading while every append (or read) failed, though healthy members
        were there. Requests in flight settle first: the followers' copies commit them
        (sync mode's pushes went out before the leader's flush failed), or they time out."""
        member = self.member_state
        if member.transferee is not None or now_ms - self._failed_store_tried_ms < FAILED_STORE_RETRY_MS:
            return
        if self.quorum.pending_count(member.current_term):
            return
        self._failed_store_tried_ms = now_ms
        asked = (p for p in member.other_peer_ids if self._unfit_peers.get(p, now_ms) <= now_ms)
        best = self._least_behind(asked)
        if best is None:
            return
        log.error("%s: %s: hands leadership over to %s", member.self_id, member.unfit_to_lead(), best)
        self.start(best, member.current_term, now_ms)

    # -- transferee side

    def _progress_takeover(self, now_ms: int) -> None:
        takeover = self.takeover
        assert takeover is not None
        member = self.member_state
        if takeover.target_term == -1:
            if member.ledger_end_index >= takeover.request.take_leadership_ledger_index and member.is_follower:
                takeover.target_term = self.elector.take_leadership(now_ms)
                takeover.deadline_ms = now_ms + self.config.leadership_transfer_wait_timeout_ms
            elif now_ms >= takeover.deadline_ms:
                self._finish_takeover(ResponseCode.TAKE_LEADERSHIP_FAILED)
            return
        if member.current_term == takeover.target_term and member.is_leader:
            self._finish_takeover(ResponseCode.SUCCESS)
        elif member.is_follower:
            self._finish_takeover(ResponseCode.TAKE_LEADERSHIP_FAILED)
        elif member.current_term > takeover.target_term:
            self._finish_takeover(ResponseCode.EXPIRED_TERM)
        elif now_ms >= takeover.deadline_ms:
            self._finish_takeover(ResponseCode.TAKE_LEADERSHIP_FAILED)

    def _finish_takeover(self, code: ResponseCode) -> None:
        takeover = self.takeover
        assert takeover is not None
        self.takeover = None
        if self.member_state.term_to_take_leadership == takeover.target_term:
            self.member_state.term_to_take_leadership = -1
        takeover.future.set_result(self._reply(takeover.request, code))


def new_term_of(answer: Future[LeadershipTransferResponse], transferee_id: str) -> Future[int]:
    """A future of the new term a transfer's `answer` reports (its failure as a
    DLedgerError with the answer's code)."""
    result: Future[int] = Future()

    def done(f: Future[LeadershipTransferResponse]) -> None:
        try:
            response = f.result()
        except BaseException as exc:
            result.set_exception(exc)
            return
        if response.code == ResponseCode.SUCCESS:
            result.set_result(response.term)
        else:
            why = f" ({transferee_id} did not answer the leader)" if response.code == ResponseCode.NETWORK_ERROR else ""
            result.set_exception(DLedgerError(response.code, f"transfer to {transferee_id} failed{why}"))

    answer.add_done_callback(done)
    return result
