"""The simulation's term-inflation invariant: a member cut off from every other member
(both ways: it can neither send nor receive) never raises its term while it stays cut off.
With Pre-Vote its pre-votes find no quorum, so it keeps its term; without Pre-Vote a
candidate whose rounds end in WAIT_TO_VOTE_NEXT would raise it round after round, and
disrupt the group when it rejoins. A pre-vote a quorum granted just before the cut
still lets it move to that one term (as in etcd), and so does a term it learned before
the cut that others had reached."""

from __future__ import annotations

from dledger.raft.core import RaftCore
from dledger.transport.inmem import InMemoryNetwork
from tests.sim.checker import Violation


class TermWatch:
    """Checked after every step (`check`)."""

    def __init__(self) -> None:
        self.term_when_cut: dict[str, int] = {}

    def check(self, net: InMemoryNetwork, cores: dict[str, RaftCore | None]) -> None:
        """`cores`: every member's core (None while it is down)."""
        for node_id, core in cores.items():
            others = [o for o in cores if o != node_id]
            cut = all(not net.can_talk(node_id, o) and not net.can_talk(o, node_id) for o in others)
            if not cut or core is None:
                self.term_when_cut.pop(node_id, None)
                continue
            term = core.member_state.current_term
            if node_id not in self.term_when_cut:
                # Messages on the wire when the cut came are still delivered: a pre-vote
                # round under way may have its quorum of grants there (its one real round,
                # term + 1, is allowed), and a request or answer from another member may
                # carry that member's term (any term another member had then is allowed).
                # A term it had already learned others reached is no inflation either.
                # (A founding member's first pre-vote asks for its founding's own term,
                # not term + 1: dledger.raft.vote_hold.founding_term.)
                elector = core.elector
                rnd = elector._vote_round
                pre = (rnd is not None and rnd.pre_vote) or elector._pre_vote_passed_term > term
                pre_term = max(term + 1, rnd.term if rnd is not None and rnd.pre_vote else 0) if pre else term
                pre_term = max(pre_term, elector._pre_vote_passed_term)
                seen = max((c.member_state.current_term for o, c in cores.items() if c is not None), default=0)
                known = core.member_state.known_max_term_in_group
                self.term_when_cut[node_id] = max(pre_term, seen, known)
            first = self.term_when_cut[node_id]
            if term > first:
                raise Violation(
                    f"term inflation: {node_id}, cut off from every member, went from term {first} to {term}"
                )
