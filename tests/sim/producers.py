"""Idempotent producers in the simulation (`Scenario.producers`): a few producers send
numbered record requests to whoever leads (`dledger.node_producers.NodeProducers`, one
per member lifetime, its table folded from the member's log and saved in its directory)
and resend a request until it is answered, whatever happened to the last attempt
(a crash, a power loss, a leader change in the middle of replicating it), for at most
half the expiration (a delivery timeout: resending after the producer may have expired
could append twice, as with Kafka). A producer idle for longer than the expiration is
forgotten; a forgotten or timed-out producer starts a new epoch.

`final_check` (after convergence) asserts what the producer table promises:
- every producer's records are in the committed log exactly once, in sequence order,
  and every acknowledged one is there;
- every member folds its committed log into the same table, and a member that reads
  its saved table back and folds on gets that table too.
"""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAGIC_RECORD
from dledger.node_producers import NodeProducers, StampedAppend, read_stamp
from dledger.raft.producer_log import ProducerLog, StampFold
from dledger.raft.producers import ProducerTable
from dledger.record import encode_record, record_of
from tests.sim.disk import SimCrash

if TYPE_CHECKING:
    from tests.sim.harness import SimNode, Simulation

PRODUCERS = 3


@dataclass
class _Request:
    epoch: int
    first_seq: int
    count: int
    created_ms: int
    attempts: int = 0
    in_flight: bool = False


class ProducerLoad:
    """The producers of one run and what they were told."""

    def __init__(self, sim: Simulation, seed: int, expiration_ms: int) -> None:
        self.sim = sim
        self.rng = random.Random(seed * 7919 + 23)
        self.expiration_ms = expiration_ms
        self.epoch = dict.fromkeys(range(1, PRODUCERS + 1), 0)
        self.next_seq = dict.fromkeys(range(1, PRODUCERS + 1), 0)
        self.request: dict[int, _Request | None] = dict.fromkeys(range(1, PRODUCERS + 1))
        self.acked: dict[tuple[int, int], set[int]] = {}  # (pid, epoch) -> acknowledged sequence numbers
        self.stats: Counter[str] = Counter()
        self.paused_until = dict.fromkeys(range(1, PRODUCERS + 1), 0)
        self._members: dict[str, tuple[int, NodeProducers]] = {}

    def member(self, node: SimNode) -> NodeProducers:
        """The member's producer state in its current lifetime."""
        known = self._members.get(node.node_id)
        if known is None or known[0] != node.incarnation:
            assert node.store is not None and node.core is not None
            core = node.core
            config = node.config
            config.producer_id_expiration_ms = self.expiration_ms
            producers = NodeProducers(
                node.store, node.dir, config, lambda: core.member_state.committed_index, wall_ms=lambda: self.sim.now
            )
            known = self._members[node.node_id] = (node.incarnation, producers)
        return known[1]

    def step(self) -> None:
        """Fold on every member; now and then send (or resend) a producer's request."""
        for node in self.sim.nodes.values():
            if node.up and not node.disk.crashed:
                self.member(node).fold_pass()
        if self.rng.random() >= 0.15:
            return
        pid = self.rng.randrange(1, PRODUCERS + 1)
        request = self.request[pid]
        if (request is not None and request.in_flight) or self.sim.now < self.paused_until[pid]:
            return
        if request is None:
            if self.rng.random() < 0.06:  # this producer pauses for a while: it may expire
                self.stats["pauses"] += 1
                self.paused_until[pid] = self.sim.now + self.rng.choice((500, 2000, 4000, 6000, 8000))
                return
            request = _Request(self.epoch[pid], self.next_seq[pid], self.rng.randint(1, 12), self.sim.now)
            self.request[pid] = request
        elif self.sim.now - request.created_ms > self.expiration_ms // 2:
            # as a real client's delivery timeout, well below the expiration: resending a
            # request after its producer may have expired could append it twice
            self.stats["abandoned"] += 1
            self._new_epoch(pid)
            return
        leaders = [n for n in self.sim.nodes.values() if n.core is not None and n.core.member_state.is_leader]
        if leaders:
            self._send(self.rng.choice(leaders), pid, request)

    def _send(self, node: SimNode, pid: int, request: _Request) -> None:
        assert node.driver is not None
        bodies = [
            encode_record(b"P%d.%d.%d" % (pid, request.epoch, seq), timestamp=0)
            for seq in range(request.first_seq, request.first_seq + request.count)
        ]
        request.attempts += 1
        self.stats["attempts"] += 1
        try:
            answer = self.member(node).append(node.driver, bodies, pid, request.epoch, request.first_seq, self.sim.now)
        except SimCrash:
            node.disk.crashed = True
            return
        except DLedgerError as exc:
            self._refused(pid, request, exc)
            return
        request.in_flight = True
        answer.future.add_done_callback(lambda f: self._answered(pid, request, answer, f))

    def _refused(self, pid: int, request: _Request, exc: DLedgerError) -> None:
        if exc.code == ResponseCode.UNKNOWN_PRODUCER:
            # forgotten (expired): start a new epoch at 0, as a Kafka producer does
            self.stats["expired"] += 1
            self._new_epoch(pid)
        elif exc.code in (ResponseCode.OUT_OF_ORDER_SEQUENCE, ResponseCode.PRODUCER_FENCED):
            raise AssertionError(f"producer {pid} request {request}: {exc}")

    def _new_epoch(self, pid: int) -> None:
        self.epoch[pid] += 1
        self.next_seq[pid] = 0
        self.request[pid] = None

    def _answered(self, pid: int, request: _Request, answer: StampedAppend, future: Future[int]) -> None:
        request.in_flight = False
        if future.exception() is not None:
            return  # unknown outcome: sent again later
        if answer.duplicate:
            self.stats["duplicates"] += 1
        if len(answer.runs) > 1:
            self.stats["partial_retries"] += 1
        self.acked.setdefault((pid, request.epoch), set()).update(
            range(request.first_seq, request.first_seq + request.count)
        )
        if self.request[pid] is request and request.epoch == self.epoch[pid]:
            self.next_seq[pid] = request.first_seq + request.count
            self.request[pid] = None
        self.stats["acked"] += 1

    def final_check(self) -> None:
        """The invariants (see the module docstring), on a converged cluster."""
        nodes = [n for n in self.sim.nodes.values() if n.up and n.store is not None and n.core is not None]
        committed = min(n.core.member_state.committed_index for n in nodes)  # type: ignore[union-attr]
        reference = nodes[0]
        assert reference.store is not None
        seen: dict[tuple[int, int], list[int]] = {}
        for entry in reference.store.get_range(0, committed + 1):
            if entry.magic != MAGIC_RECORD:
                continue
            value = record_of(entry).value
            if value.startswith(b"P"):
                pid, epoch, seq = (int(x) for x in value[1:].split(b"."))
                seen.setdefault((pid, epoch), []).append(seq)
        for key, seqs in seen.items():
            assert seqs == list(range(len(seqs))), f"producer {key}: sequence numbers {seqs} in the log"
        for key, acked in self.acked.items():
            missing = acked - set(seen.get(key, []))
            assert not missing, f"producer {key}: acknowledged {sorted(missing)} are not in the log"
        tables = {}
        for node in nodes:
            assert node.store is not None
            fold = StampFold(ProducerTable(self.expiration_ms), max(node.store.begin_index, 0), read_stamp)
            log = ProducerLog(node.store, fold)
            while log.fold_committed(committed):
                pass
            tables[node.node_id] = fold.table.encode()
            member = self.member(node)
            member.close()  # saves; a member that reads it back and folds on gets the same
            reread = NodeProducers(node.store, node.dir, node.config, lambda: committed)
            reread.close()
            assert reread.log.folded_index == committed
            assert reread.log.committed.table == fold.table, f"{node.node_id}: the saved table differs"
        assert len(set(tables.values())) == 1, "members fold their committed logs into different tables"
