"""The leader side of heartbeats (DLedger's `maintainAsLeader` and heartbeat rounds): a
part of LeaderElector kept in its own module (mixed in), without threads or clocks."""

from __future__ import annotations

from collections.abc import Callable

from dledger.codes import ResponseCode
from dledger.config import DLedgerConfig
from dledger.raft.member_state import MemberState
from dledger.raft.messages import HeartBeatRequest, HeartBeatResponse
from dledger.raft.prevote import lost_quorum
from dledger.raft.rounds import HeartBeatRound, Outbound


class LeaderHeartbeats:
    """Heartbeat rounds of a leader; LeaderElector sets the attributes."""

    config: DLedgerConfig
    member_state: MemberState
    peers_live_table: dict[str, bool]
    last_send_heart_beat_time: int
    last_succ_heart_beat_time: int
    _hb_round: HeartBeatRound | None
    _now_ms: int
    on_quorum_round: Callable[[int, int], None] | None  # (term, started_ms): the lease (read_index)

    def change_role_to_candidate(self, term: int) -> None:
        raise NotImplementedError

    def _maintain_as_leader(self, now_ms: int) -> list[Outbound]:
        if lost_quorum(self.config, self.member_state, self.last_succ_heart_beat_time, now_ms):
            self.change_role_to_candidate(self.member_state.current_term)  # CheckQuorum: step down
            return []
        rnd = self._hb_round
        if rnd is not None and (rnd.all_answered or now_ms >= rnd.deadline_ms):
            self._finish_heartbeat_round(rnd, now_ms)
            if not self.member_state.is_leader:
                return []
        if self._hb_round is not None:
            return []
        if now_ms - self.last_send_heart_beat_time < self.config.heart_beat_time_interval_ms and (
            self.last_send_heart_beat_time != -1
        ):
            return []
        self.last_send_heart_beat_time = now_ms
        term = self.member_state.current_term
        requests = self.member_state.heartbeat_requests()
        # answers may take up to half an election timeout (a slow link): a round that ended
        # at the next heartbeat counted none of them, and CheckQuorum stepped down while every
        # follower answered (RTT 600 ms with 500 ms heartbeats); heartbeats still go out
        # at least every half election timeout
        interval = self.config.heart_beat_time_interval_ms
        deadline = now_ms + max(1, interval - 10, interval * self.config.max_heart_beat_leak // 2)
        self._hb_round = HeartBeatRound(term, deadline, requests, started_ms=now_ms)
        if not requests:  # a single-node group
            self._finish_heartbeat_round(self._hb_round, now_ms)
        return [Outbound(peer, req) for peer, req in requests.items()]

    def on_heartbeat_response(
        self, peer: str, request: HeartBeatRequest, response: HeartBeatResponse | None, now_ms: int
    ) -> None:
        """Record one heartbeat answer (None: network error)."""
        self._now_ms = now_ms
        self.peers_live_table[peer] = response is not None and response.code != ResponseCode.NETWORK_ERROR
        if response is not None and response.term > self.member_state.current_term and self.member_state.is_leader:
            # a higher term exists: step down at once (#247)
            self.change_role_to_candidate(response.term)
            return
        rnd = self._hb_round
        if rnd is None or not rnd.take_answer(peer, request):
            return
        if response is None:
            return
        if response.code == ResponseCode.SUCCESS:
            rnd.succ_num += 1
        elif response.code == ResponseCode.TERM_NOT_READY:
            rnd.not_ready_num += 1
        elif response.code == ResponseCode.INCONSISTENT_LEADER:
            rnd.inconsistent_leader = True
        if self.member_state.is_quorum(rnd.succ_num) and now_ms < rnd.deadline_ms:
            self._finish_heartbeat_round(rnd, now_ms)

    def _finish_heartbeat_round(self, rnd: HeartBeatRound, now_ms: int) -> None:
        self._hb_round = None
        if not self.member_state.is_leader or rnd.term != self.member_state.current_term:
            return
        leak_ms = self.config.max_heart_beat_leak * self.config.heart_beat_time_interval_ms
        if self.member_state.is_quorum(rnd.succ_num):
            self.last_succ_heart_beat_time = now_ms
            if self.on_quorum_round is not None:
                self.on_quorum_round(rnd.term, rnd.started_ms)
        elif self.member_state.is_quorum(rnd.succ_num + rnd.not_ready_num):
            self.last_send_heart_beat_time = -1  # resend at once
        elif rnd.inconsistent_leader or now_ms - self.last_succ_heart_beat_time > leak_ms:
            self.change_role_to_candidate(rnd.term)
