"""Invariants of the simulated cluster, checked incrementally after every step, and the
final history check (FAULTS.md §2.2).

The reference log `ref` is the cluster's committed prefix as observed so far: the
longest committed prefix any node has shown. Every node's committed prefix must be a
prefix of it, every acknowledged append must sit in it at its index, every body in it
must come from an append that was invoked and not definitely failed, and no body may be
in it twice. Its last entry must be held by a majority at all times, and no member may
delete an entry of it that it holds.

Power loss in async mode (ack before fsync) can legitimately lose committed entries.
Only when the scenario allows it (`allow_loss`) is a conflict with `ref` accepted, and
then only at an index some power-lost node really lost (a "loss window": the node's log
end before the power loss down to the end recovered from disk). The conflict is counted
as a loss event and the reference switches to the newer history; nodes still holding
the older committed entries are marked divergent (they refuse to truncate committed
entries, so they need an operator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dledger.entry import Entry
from dledger.raft.vote_hold import VoteHold
from dledger.store.layout import IDENTITY_FILE, REJOIN_FILE

if TYPE_CHECKING:
    from tests.sim.harness import SimNode


class Violation(AssertionError):
    """An invariant broke (the message names it and the evidence)."""


class KnownIssue(Violation):
    """A failure with the signature of a reported, not yet fixed bug."""


KNOWN_ISSUES = {
    # Reported bugs the simulation still hits (see test_findings.py and docs/SIMULATION.md).
    # A failure with one of these signatures makes a simulation test xfail instead of
    # fail; remove a tag once its bug is fixed, so the signature fails loudly again.
    # Fixed: R2 (COMPARE/TRUNCATE livelock), R3 (same-term re-election after power loss),
    # R4 (a follower that lost acknowledged entries never repaired), R5 (TRUNCATE deleting
    # entries that match the leader's: the dispatcher now searches the match point), B2
    # (the write position after a segment-end blank: truncate and recovery now end the
    # log where its last entry ends), R1 (a member that lost acknowledged entries to a
    # power loss in async mode voted at once: it now holds its vote until caught up), R6
    # (an INCONSISTENT_STATE answer to an earlier copy of a resent push was ignored), H2
    # (every member held its vote after a majority restarted uncleanly: the log-end floor).
}


def broken(tag: str, what: str) -> Violation:
    """The exception for a failure with the signature of bug `tag`: KnownIssue while
    the bug is listed in KNOWN_ISSUES, Violation otherwise."""
    if tag in KNOWN_ISSUES:
        return KnownIssue(f"{what} [{tag}: {KNOWN_ISSUES[tag]}; see test_findings.py]")
    return Violation(f"{what} [the signature of {tag}, which is not listed as open any more]")


@dataclass
class Op:
    """One client append attempt (a request of one or more bodies, each a fresh uid)."""

    uids: list[int]
    node: str
    invoke_ms: int
    status: str = "pending"  # ok | fail (never appended) | info (indeterminate)
    index: int = -1  # last index, when ok
    complete_ms: int = -1


@dataclass
class LossWindow:
    """Entries (lo..hi] a node lost to a power loss (`event` numbers the power loss)."""

    event: int
    node: str
    lo: int
    hi: int

    def covers(self, index: int) -> bool:
        return self.lo < index <= self.hi


@dataclass
class LossEvent:
    """A committed history replaced at `index` (async power loss), with the acknowledged
    entries it took away."""

    event: int
    index: int
    acked_lost: int
    ms: int


def uid_of(body: bytes) -> int:
    """The uid a simulation body starts with (b"u<uid>." + filler); -1 for a NOOP."""
    if not body.startswith(b"u"):
        return -1
    return int(body[1 : body.index(b".")])


@dataclass
class Checker:
    """Cluster-wide invariants (see the module docstring)."""

    majority: int
    allow_loss: bool = False
    ref_term: list[int] = field(default_factory=list)
    ref_body: list[bytes] = field(default_factory=list)
    ref_commit_term: list[int] = field(default_factory=list)
    ref_uids: set[int] = field(default_factory=set)
    ops: dict[int, Op] = field(default_factory=dict)  # uid -> op
    acked: dict[int, int] = field(default_factory=dict)  # index -> uid, for ok ops
    leaders: dict[int, str] = field(default_factory=dict)  # term -> the one leader
    entry_ids: dict[tuple[int, int], tuple[bytes, int]] = field(default_factory=dict)  # (i, t) -> (body, prev t)
    windows: list[LossWindow] = field(default_factory=list)
    losses: list[LossEvent] = field(default_factory=list)
    lost_uids: set[int] = field(default_factory=set)
    superseded: set[tuple[int, int, bytes]] = field(default_factory=set)  # committed, then replaced
    checks: int = 0
    # A member deleting a committed entry it holds fails the run, except while R5 is open:
    # then such deletions are only counted, and the majority check below is what fails.
    forbid_deletion: bool = field(default_factory=lambda: "R5" not in KNOWN_ISSUES)
    deletions: int = 0
    deleted: list[tuple[int, int]] = field(default_factory=list)  # committed ranges members deleted
    nodes: list[SimNode] = field(default_factory=list)

    # -- per node, every step

    def check_node(self, node: SimNode, now_ms: int) -> None:
        """Per-node invariants plus the incremental comparisons with `ref`."""
        core, store = node.core, node.store
        assert core is not None and store is not None
        self.checks += 1
        ms = core.member_state
        c, end = ms.committed_index, store.end_index
        if c > end:
            raise Violation(f"{node.node_id}: committed index {c} above ledger end {end}")
        if c < node.last_commit:
            raise Violation(f"{node.node_id}: committed index went back {node.last_commit} -> {c} in one lifetime")
        if ms.current_term < node.max_term:
            raise Violation(f"{node.node_id}: term went back {node.max_term} -> {ms.current_term}")
        node.max_term = ms.current_term
        node.last_commit = c
        if ms.is_leader:
            self._check_leader(node, now_ms)
        self._scan_log(node)
        self._scan_committed(node, now_ms)

    def _check_leader(self, node: SimNode, now_ms: int) -> None:
        assert node.core is not None
        term = node.core.member_state.current_term
        other = self.leaders.setdefault(term, node.node_id)
        if other != node.node_id:
            raise Violation(f"two leaders in term {term}: {other} and {node.node_id}")
        if node.led_term != term:
            node.led_term = term
            if node.divergent_at >= 0:
                # a member holding a replaced history leads again: whatever it commits from
                # now on is the newer decision (its history wins back), compare it again
                node.divergent_at, node.verified = -1, -1
            self._check_completeness(node, term, now_ms)

    def _check_completeness(self, node: SimNode, term: int, now_ms: int) -> None:
        """A new leader of `term` holds every entry committed in an earlier term, and
        every entry committed in `term` itself: only it can have committed those, in an
        earlier life (a member may win the same term again after a restart).
        `ref_commit_term` is the observer's term when an entry was first seen committed,
        never below the term it was committed in, so this never asks too much."""
        store = node.store
        assert store is not None
        required = len(self.ref_commit_term) - 1
        while required >= 0 and self.ref_commit_term[required] > term:
            required -= 1
        if required > store.end_index:
            self._conflict(node, store.end_index + 1, f"new leader of term {term} lacks committed {required}", now_ms)
            return
        for i in range(max(store.begin_index, 0), required + 1):
            entry = store.get(i)
            if entry.term != self.ref_term[i] or entry.body != self.ref_body[i]:
                self._conflict(node, i, f"new leader of term {term} holds another entry at committed {i}", now_ms)
                return

    def check_replication(self, nodes: list[SimNode]) -> None:
        """Every committed entry is held by a majority (Raft's commit rule, and what
        makes a later leader hold it). Checking the last one is enough: logs that hold
        it hold the prefix (log matching is checked separately). A member that is down
        counts with the log it had when it went down; one that lost power is counted
        again once it has recovered whatever its disk kept. A member holding its vote after
        an unclean restart (`dledger.raft.vote_hold`) counts too: it cannot help elect a
        leader that lacks the entry, and it holds the entry once its hold ends by catching
        up (a hold that ends by timing out stops counting at once); so does one whose hold
        gave way to a floor at or above the entry (it votes only for logs that reach it),
        and so does a member that lost its disk and will rejoin (it holds its vote until
        a leader brought it up to date)."""
        last = len(self.ref_term) - 1
        if last < 0:
            return
        key = (self.ref_term[last], uid_of(self.ref_body[last]))
        holders = []
        for node in nodes:
            if node.store is not None:
                held = node.store.end_index >= last and node.store.term_at(last) == key[0]
                held = held and uid_of(node.store.get(last).body) == key[1]
                held = held or (node.core is not None and _hold_covers(node.core.elector.vote_hold, key[0], last))
            else:
                # a member that went down holding its vote holds it again after the restart
                held = last <= node.down_verified or node.down_log.get(last) == key or node.down_holding
                held = held or _will_rejoin(node)
            if held:
                holders.append(node.node_id)
        if len(holders) < self.majority and not self._excused(last):
            if any(lo <= last <= hi for lo, hi in self.deleted):
                raise broken(
                    "R5",
                    f"committed entry {last} (term {key[0]}, uid {key[1]}) is held by {holders} only, not by a "
                    f"majority of {self.majority}, after a member deleted it",
                )
            what = (
                f"committed entry {last} (term {key[0]}, uid {key[1]}) is held by {holders} only, "
                f"not by a majority of {self.majority}"
            )
            timed_out = [n.node_id for n in nodes if n.core is not None and n.core.elector.vote_hold.expired]
            if timed_out and any(w.covers(last) for w in self.windows):
                raise broken("H2", f"{what}, after the vote hold of {timed_out} timed out")
            self._fail(what, last)

    def _scan_log(self, node: SimNode) -> None:
        """Log matching over whole logs: one (index, term) is one entry, with one
        previous term (so equal (index, term) means equal prefixes); and no member ever
        deletes an entry of the committed prefix it holds (Raft only truncates entries
        that conflict with the leader's, and committed ones never do)."""
        store = node.store
        assert store is not None
        end = store.end_index
        agree = node.agree
        if agree > end or (agree >= 0 and store.term_at(agree) != self.ref_term[agree]):
            lost = min(end + 1, agree)
            while lost > 0 and store.term_at(lost - 1) != self.ref_term[lost - 1]:
                lost -= 1
            if not self._excused(lost):
                what = f"{node.node_id} deleted committed entries {lost}..{agree} it held (its log now ends at {end})"
                self.deletions += 1
                self.deleted.append((lost, agree))
                if self.forbid_deletion:
                    raise broken("R1" if any(w.covers(lost) for w in self.windows) else "R5", what)
            agree = lost - 1
        limit = min(end, len(self.ref_term) - 1)
        while agree < limit:
            entry = store.get(agree + 1)
            if entry.term != self.ref_term[agree + 1] or entry.body != self.ref_body[agree + 1]:
                break
            agree += 1
        node.agree = agree
        seen = min(node.seen_end, end)
        if seen >= 0 and seen >= store.begin_index:
            entry = store.get(seen)
            known = self.entry_ids.get((seen, entry.term))
            if known is None or known[0] != entry.body:
                seen = min(node.verified, seen - 1)  # the tail changed under us: look again
        for i in range(max(seen + 1, store.begin_index, 0), end + 1):
            entry = store.get(i)
            prev = store.term_at(i - 1) if i > max(store.begin_index, 0) else -2
            known = self.entry_ids.setdefault((i, entry.term), (entry.body, prev))
            if known[0] != entry.body or (prev != -2 and known[1] != -2 and known[1] != prev):
                if not self._excused(i):
                    self._fail(
                        f"{node.node_id}: log matching broken at ({i}, term {entry.term}): "
                        f"uid {uid_of(entry.body)} (prev term {prev}) vs uid {uid_of(known[0])} (prev term {known[1]})",
                        i,
                    )
                self.entry_ids[(i, entry.term)] = (entry.body, prev)
        node.seen_end = end

    def check_reopen(self, node: SimNode, power_loss: bool) -> None:
        """Across a restart a member keeps every committed entry it held when it went
        down (`down_agree`): the same entry at each index, never another one; after a
        process crash all of them (the page cache survives), after a power loss all but
        an unflushed tail (then its log is shorter, never different). With log matching
        (checked over the whole log after every restart) the entry at the last such index
        stands for the prefix."""
        store = node.store
        assert store is not None
        kept = min(node.down_agree, len(self.ref_term) - 1)
        if kept < 0:
            return
        if store.end_index < kept and not power_loss and not self._excused(kept):
            self._fail(
                f"{node.node_id}: lost committed entries {store.end_index + 1}..{kept} it held across a process crash",
                kept,
            )
        last = min(kept, store.end_index)
        if last < max(store.begin_index, 0):
            return
        entry = store.get(last)
        if (entry.term != self.ref_term[last] or entry.body != self.ref_body[last]) and not self._excused(last):
            self._fail(
                f"{node.node_id}: committed entry {last} (term {self.ref_term[last]}) it held is another entry "
                f"(term {entry.term}, uid {uid_of(entry.body)}) after its restart",
                last,
            )

    def _scan_committed(self, node: SimNode, now_ms: int) -> None:
        core, store = node.core, node.store
        assert core is not None and store is not None
        c = core.member_state.committed_index
        if node.divergent_at >= 0:
            return
        i = max(node.verified + 1, store.begin_index, 0)
        while i <= c:
            entry = store.get(i)
            if i < len(self.ref_term):
                if entry.term != self.ref_term[i] or entry.body != self.ref_body[i]:
                    self._conflict(node, i, "committed entry differs from the cluster's", now_ms)
                    if node.divergent_at >= 0:
                        return
                    continue  # the reference switched to this node's history: compare again
            else:
                self._extend(entry.term, entry.body, core.member_state.current_term)
            i += 1
        node.verified = max(node.verified, c)

    def _extend(self, term: int, body: bytes, commit_term: int) -> None:
        index = len(self.ref_term)
        uid = uid_of(body)
        if uid >= 0:
            op = self.ops.get(uid)
            if op is None or op.status == "fail":
                raise Violation(
                    f"phantom: uid {uid} committed at {index} but {'never sent' if op is None else 'failed'}"
                )
            if uid in self.ref_uids:
                raise Violation(f"duplicate: uid {uid} committed twice (again at {index})")
            self.ref_uids.add(uid)
        acked = self.acked.get(index)
        if acked is not None and acked != uid and not self._excused(index):
            self._fail(f"acknowledged uid {acked} at {index} replaced by uid {uid}", index)
        self.superseded.discard((index, term, body))
        self.ref_term.append(term)
        self.ref_body.append(body)
        self.ref_commit_term.append(commit_term)

    # -- conflicts and power loss

    def _fail(self, what: str, index: int) -> None:
        """Raise for a broken invariant at `index`; when a power loss in async mode took
        that index from a member, it has the signature of the reported bug R1."""
        if any(w.covers(index) for w in self.windows):
            raise broken("R1", f"{what} (index {index} was lost to a power loss in async mode)")
        raise Violation(what)

    def _excused(self, index: int) -> bool:
        return self.allow_loss and any(w.covers(index) for w in self.windows)

    def _conflict(self, node: SimNode, index: int, what: str, now_ms: int) -> None:
        """`node`'s committed history disagrees with `ref` at `index`."""
        assert node.core is not None and node.store is not None
        if not self._excused(index):
            self._fail(f"{node.node_id}: {what} (index {index}, ref has {len(self.ref_term)} entries)", index)
        # An entry `ref` already replaced is an older decision: the node carries the old
        # history (and refuses to truncate it). Anything else is a newer decision, and
        # so is whatever a leader holds.
        store = node.store
        old = index <= store.end_index and self._entry_key(index, store.get(index)) in self.superseded
        if old and not node.core.member_state.is_leader:
            node.divergent_at = index
        else:
            self._switch(index, node, now_ms)

    @staticmethod
    def _entry_key(index: int, entry: Entry) -> tuple[int, int, bytes]:
        return index, entry.term, entry.body

    def _switch(self, index: int, node: SimNode, now_ms: int) -> None:
        event = max(w.event for w in self.windows if w.covers(index))
        lost = [uid for i, uid in self.acked.items() if i >= index and uid not in self.lost_uids]
        self.lost_uids.update(lost)
        self.losses.append(LossEvent(event, index, len(lost), now_ms))
        for i in range(index, len(self.ref_term)):
            self.ref_uids.discard(uid_of(self.ref_body[i]))
            self.superseded.add((i, self.ref_term[i], self.ref_body[i]))
        del self.ref_term[index:], self.ref_body[index:], self.ref_commit_term[index:]
        for i in [i for i in self.acked if i >= index]:
            del self.acked[i]
        for other in self.nodes:
            other.verified = min(other.verified, index - 1)
            other.agree = min(other.agree, index - 1)
            other.down_agree = min(other.down_agree, index - 1)
            if other.divergent_at >= 0:
                other.divergent_at = -1  # compared again with the new history

    # -- client acknowledgements

    def on_ack(self, node: SimNode, op: Op) -> None:
        """`op` completed ok at `node` (its leader): its bodies must be there, committed."""
        core, store = node.core, node.store
        assert core is not None and store is not None
        first = op.index - len(op.uids) + 1
        if op.index > core.member_state.committed_index:
            raise Violation(
                f"{node.node_id}: acknowledged {op.index} above its committed {core.member_state.committed_index}"
            )
        for k, uid in enumerate(op.uids):
            i = first + k
            entry = store.get(i)
            if uid_of(entry.body) != uid:
                raise Violation(f"{node.node_id}: acknowledged uid {uid} at {i} but holds uid {uid_of(entry.body)}")
            self.acked[i] = uid
        self._scan_committed(node, op.complete_ms)

    # -- the end of a run

    def final_check(self, nodes: list[SimNode]) -> None:
        """FAULTS.md §2.2 over the final state: divergence, duplicates, phantoms, lost
        acknowledgements, real-time order."""
        for node in nodes:
            if node.divergent_at >= 0 or node.store is None or node.core is None:
                continue
            store = node.store
            uids: set[int] = set()
            for i in range(max(store.begin_index, 0), store.end_index + 1):
                uid = uid_of(store.get(i).body)
                if uid >= 0 and uid in uids:
                    raise Violation(f"{node.node_id}: uid {uid} twice in its log")
                uids.add(uid)
            committed = node.core.member_state.committed_index
            if committed != len(self.ref_term) - 1:
                raise Violation(f"{node.node_id}: committed {committed}, cluster {len(self.ref_term) - 1}")
        position = {uid_of(b): i for i, b in enumerate(self.ref_body)}
        unplaced: dict[int, list[int]] = {}  # acknowledged, never conflicted, not there: by index
        for op in self.ops.values():
            if op.status != "ok":
                continue
            first = op.index - len(op.uids) + 1
            for k, uid in enumerate(op.uids):
                if uid not in self.lost_uids and position.get(uid) != first + k:
                    if not self._excused(first + k):
                        self._fail(
                            f"acknowledged uid {uid} (index {first + k}) lost: at {position.get(uid)}", first + k
                        )
                    unplaced.setdefault(first + k, []).append(uid)
        if unplaced:
            index = min(unplaced)
            event = max(w.event for w in self.windows if w.covers(index))
            missing = [u for us in unplaced.values() for u in us]
            self.lost_uids.update(missing)
            self.losses.append(LossEvent(event, index, len(missing), -1))
        # real-time order: an op invoked after another was acknowledged lands after it
        ops = {id(o): o for o in self.ops.values()}.values()
        spans = {id(o): [position[u] for u in o.uids if u in position] for o in ops}
        placed = sorted((o for o in ops if spans[id(o)]), key=lambda o: o.invoke_ms)
        oks = sorted((o for o in placed if o.status == "ok"), key=lambda o: o.complete_ms)
        j, high = 0, -1
        for op in placed:
            while j < len(oks) and oks[j].complete_ms < op.invoke_ms:
                high = max(high, max(spans[id(oks[j])]))
                j += 1
            if min(spans[id(op)]) <= high:
                raise Violation(f"real-time order: uid {op.uids[0]} invoked after an ack of a later index")


def _hold_covers(hold: VoteHold, term: int, index: int) -> bool:
    """Whether a member's vote hold keeps it from electing a leader without the entry
    (`term`, `index`): it holds, or it votes only for logs reaching a floor at or above it."""
    return hold.active or (hold.floor is not None and hold.floor >= (term, index))


def _will_rejoin(node: SimNode) -> bool:
    """A member that is down after losing its disk (or with its rejoin marker): it comes
    back holding its vote until it caught up (told `existing`), or until it asked whether
    its group exists (told `new`: then it finds the group and rejoins)."""
    return (node.dir / REJOIN_FILE).exists() or not (node.dir / IDENTITY_FILE).exists()
