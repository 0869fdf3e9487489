"""Pre-Vote and leader stickiness in the LeaderElector, one member at a time: the
pre-vote round before a self-raised term, what a voter answers to a pre-vote (and that it
changes and persists nothing), the lease, the transferee's exemption, and CheckQuorum."""

from __future__ import annotations

from pathlib import Path

import pytest

from dledger.cli.server_cmds import load_config_file
from dledger.config import DLedgerConfig
from dledger.raft.elector import LeaderElector
from dledger.raft.messages import ParseResult, VoteRequest, VoteResponse, VoteResult
from tests.raft.test_elector import heartbeat, make, vote

pytestmark = pytest.mark.unit


def standing(**cfg: object) -> LeaderElector:
    """n0, a candidate in term 3 whose last round asked it to take the next term."""
    el, ms, _, _ = make(**cfg)
    el.change_role_to_candidate(3)
    ms.next_term()
    el.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
    el.next_time_to_request_vote = 0
    return el


def votes_of(out: list) -> list[VoteRequest]:  # type: ignore[type-arg]
    return [o.request for o in out if isinstance(o.request, VoteRequest)]


def answer(req: VoteRequest, result: VoteResult, term: int = 3) -> VoteResponse:
    return VoteResponse(group="g", local_id=req.remote_id, remote_id="n0", term=term, vote_result=result)


def test_a_self_raised_term_is_asked_for_in_a_pre_vote_first_and_nothing_is_persisted() -> None:
    el = standing()
    persisted = list(el.member_state.term_store.history)  # type: ignore[attr-defined]
    reqs = votes_of(el.tick(10))
    assert [(r.remote_id, r.term, r.pre_vote) for r in reqs] == [("n1", 4, True), ("n2", 4, True)]
    assert el.member_state.current_term == 3
    assert el.member_state.term_store.history == persisted  # type: ignore[attr-defined]


def test_a_quorum_of_pre_vote_grants_starts_the_real_round_at_once() -> None:
    el = standing()
    reqs = votes_of(el.tick(10))
    el.on_vote_response("n1", reqs[0], answer(reqs[0], VoteResult.ACCEPT), 12)
    real = votes_of(el.tick(13))
    assert [(r.term, r.pre_vote) for r in real] == [(4, False), (4, False)]
    assert el.member_state.current_term == 4 and el.member_state.vote_for == "n0"


@pytest.mark.parametrize(
    "result", [VoteResult.REJECT_ALREADY_HAS_LEADER, VoteResult.REJECT_SMALL_LEDGER_END_INDEX, VoteResult.UNKNOWN]
)
def test_a_failed_pre_vote_keeps_the_term_and_tries_again_later(result: VoteResult) -> None:
    el = standing()
    reqs = votes_of(el.tick(10))
    for req in reqs:
        el.on_vote_response(req.remote_id, req, answer(req, result), 12)
    assert votes_of(el.tick(13)) == []
    assert el.member_state.current_term == 3
    assert el.next_time_to_request_vote > 13
    again = votes_of(el.tick(el.next_time_to_request_vote))
    assert again and all(r.pre_vote and r.term == 4 for r in again)


def test_a_pre_vote_answer_with_a_higher_real_term_is_followed_without_pre_vote() -> None:
    el = standing()
    reqs = votes_of(el.tick(10))
    el.on_vote_response("n1", reqs[0], answer(reqs[0], VoteResult.REJECT_EXPIRED_VOTE_TERM, term=7), 12)
    el.on_vote_response("n2", reqs[1], None, 12)
    el.tick(13)
    real = votes_of(el.tick(el.next_time_to_request_vote))
    assert real and all(not r.pre_vote for r in real)
    assert el.member_state.current_term == 7


def test_without_pre_vote_the_term_is_raised_at_once() -> None:
    el = standing(pre_vote=False)
    reqs = votes_of(el.tick(10))
    assert [(r.term, r.pre_vote) for r in reqs] == [(4, False), (4, False)]
    assert el.member_state.current_term == 4


def test_the_transferee_skips_pre_vote_and_names_itself() -> None:
    el, _, _, _ = make()
    el.handle_heartbeat(heartbeat("n1", 0), 0)  # follows n1 in term 0 (moves there first)
    el.tick(1)
    el.handle_heartbeat(heartbeat("n1", 0), 2)
    term = el.take_leadership(3)
    reqs = votes_of(el.tick(4))
    assert reqs and all(r.term == term and r.leadership_transfer and not r.pre_vote for r in reqs)


def _following(**cfg: object) -> LeaderElector:
    """n0 following n1 in term 1 (heard at 0 ms)."""
    el, ms, _, _ = make(**cfg)
    el.change_role_to_candidate(1)
    ms.next_term()
    el.handle_heartbeat(heartbeat("n1", 1), 0)
    assert ms.is_follower
    return el


def test_a_pre_vote_changes_and_persists_nothing_at_the_voter() -> None:
    el = _following(check_quorum=False)
    ms = el.member_state
    before = (ms.current_term, ms.vote_for, ms.role, ms.leader_id, list(ms.term_store.history))  # type: ignore[attr-defined]
    req = vote("n2", 5, end_index=-1, end_term=-1, sender="n2")
    req.pre_vote = True
    assert el.handle_vote(req, 10).vote_result == VoteResult.ACCEPT
    assert (ms.current_term, ms.vote_for, ms.role, ms.leader_id, list(ms.term_store.history)) == before  # type: ignore[attr-defined]


def test_pre_vote_rules_follow_the_real_vote() -> None:
    el = _following(check_quorum=False)
    stale = vote("n2", 1, sender="n2")
    stale.pre_vote = True
    assert el.handle_vote(stale, 10).vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER  # same term, other leader
    old = vote("n2", 0, sender="n2")
    old.pre_vote = True
    assert el.handle_vote(old, 10).vote_result == VoteResult.REJECT_EXPIRED_VOTE_TERM


def test_the_lease_refuses_votes_until_an_election_timeout_passed_and_spares_the_transferee() -> None:
    el = _following()
    timeout = el.config.heart_beat_time_interval_ms * el.config.max_heart_beat_leak
    assert el.handle_vote(vote("n2", 2, sender="n2"), timeout).vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER
    transfer = vote("n2", 2, sender="n2")
    transfer.leadership_transfer = True
    assert el.handle_vote(transfer, 10).vote_result == VoteResult.REJECT_TERM_NOT_READY  # on its way to grant
    el2 = _following()
    assert el2.handle_vote(vote("n2", 2, sender="n2"), timeout + 1).vote_result == VoteResult.REJECT_TERM_NOT_READY
    assert el2.handle_vote(vote("n1", 2, sender="n1"), 10).vote_result != VoteResult.REJECT_ALREADY_HAS_LEADER


def test_check_quorum_makes_a_leader_without_answers_step_down_after_an_election_timeout() -> None:
    el, ms, _, _ = make()
    el.change_role_to_candidate(1)
    ms.next_term()
    el.handle_vote(vote("n0", 1, sender="n0"), 0, self_call=True)
    el.change_role_to_leader(1)
    timeout = el.config.heart_beat_time_interval_ms * el.config.max_heart_beat_leak
    el.tick(timeout)
    assert ms.is_leader
    el.tick(timeout + 1)
    assert ms.is_candidate and ms.current_term == 1


def test_yaml_keys_turn_the_features_off(tmp_path: Path) -> None:
    path = tmp_path / "dledger.yaml"
    path.write_text("group: g\nselfId: n0\npeers: n0-127.0.0.1:20911\npreVote: false\ncheckQuorum: false\n")
    settings = load_config_file(path)
    assert settings["pre_vote"] is False and settings["check_quorum"] is False
    assert DLedgerConfig().pre_vote and DLedgerConfig().check_quorum  # the defaults
