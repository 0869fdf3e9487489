"""The client workload of a chaos run: writer threads appending unique bodies through
`dledger.client` (each attempt recorded with invoke, complete and outcome), a sampler of
every member's status, and the final read of every member's committed log."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from dledger.client import DLedgerClient, IndeterminateError
from dledger.codes import DLedgerError
from tests.chaos.history import History, Op, Status, now_s
from tests.chaos.procs import ChaosCluster

CLIENT_TIMEOUT_S = 3.0
SAMPLE_EVERY_S = 0.2
CONVERGE_S = 90.0


def classify(op: Op, error: BaseException | None) -> None:
    """Fill in an attempt's outcome: ok, fail (provably not appended) or info (unknown)."""
    op.complete = now_s()
    if error is None:
        op.outcome = "ok"
    elif isinstance(error, DLedgerError) and not isinstance(error, IndeterminateError):
        op.outcome, op.error = "fail", str(error)
    else:
        op.outcome, op.error = "info", f"{type(error).__name__}: {error}"


class Workload:
    """`clients` writer threads and one status sampler, from `start()` until `stop()`.

    Args:
        cluster: the members (their peers string, lives and metadata).
        history: where every attempt and sample goes.
        clients: writer threads, each appending one body at a time.
        pause_s: a writer's pause between appends (leaves CPU to the members).
    """

    def __init__(self, cluster: ChaosCluster, history: History, clients: int = 3, pause_s: float = 0.002) -> None:
        self.cluster = cluster
        self.history = history
        self.pause_s = pause_s
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(f"c{k}",), daemon=True) for k in range(clients)]
        self._threads.append(threading.Thread(target=self._sample, daemon=True))

    def start(self) -> Workload:
        """Start the writers and the sampler."""
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop and join every thread (their last attempts finish or time out)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(CLIENT_TIMEOUT_S * 10)

    def _write(self, name: str) -> None:
        with DLedgerClient(self.cluster.peers, self.cluster.group, CLIENT_TIMEOUT_S) as client:
            k = 0
            while not self._stop.is_set():
                op = Op(f"{name}-{k}", invoke=now_s())
                k += 1
                self.history.add_op(op)
                try:
                    result = client.append_batch([op.body.encode()])
                    op.index, op.leader, op.term = result.first_index, result.leader_id, result.term
                except Exception as exc:
                    classify(op, exc)
                    self._stop.wait(0.05)  # no busy loop while the group has no leader
                else:
                    classify(op, None)
                self._stop.wait(self.pause_s)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY_S):
            for member_id in self.cluster.members:
                life = self.cluster.lives[member_id]
                answer = self.cluster.metadata(member_id, 0.5)
                if answer is None or self.cluster.lives[member_id] != life:
                    continue  # down, or restarted while asked: the sample's life is unsure
                self.history.add_status(
                    Status(now_s(), member_id, life, answer.term, answer.role, int(answer.committed_index))
                )

    def wait_recovered(self, timeout_s: float) -> bool:
        """Poll until an append invoked after the last measured event is acknowledged
        (so a long stall is measured, not cut short); False on timeout."""
        with self.history.lock:
            marks = [e.t for e in self.history.events if e.measure]
        if not marks:
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.history.lock:
                if any(op.outcome == "ok" and op.invoke >= marks[-1] for op in self.history.ops):
                    return True
            time.sleep(0.1)
        return False

    def wait_acked(self, count: int, timeout_s: float, stop_early: Callable[[], bool] = lambda: False) -> bool:
        """Poll until `count` more appends than now are acknowledged; False on timeout."""
        target = self.history.acked() + count
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not stop_early():
            if self.history.acked() >= target:
                return True
            time.sleep(0.05)
        return False


def read_finals(cluster: ChaosCluster, history: History, converge_s: float = CONVERGE_S) -> bool:
    """Wait (up to `converge_s`) until a leader leads and every running member has
    committed its whole log, then read every member's committed log into
    `history.finals` (members that cannot be read go to `history.down`). Returns whether
    the members converged."""
    converged = False
    with DLedgerClient(cluster.peers, cluster.group, 10.0) as client:
        deadline = time.monotonic() + converge_s
        while time.monotonic() < deadline:
            running = sum(1 for member in cluster.members.values() if member.alive)  # a dead one never catches up
            status = [m for m in client.status() if m.reachable and not m.error]
            leaders = [m for m in status if m.role == "LEADER"]
            if leaders and len(status) == running and all(m.committed_index == leaders[0].end_index for m in status):
                converged = True
                break
            time.sleep(0.2)
        history.event("converged" if converged else f"not converged after {converge_s:.0f} s")
        for member_id in cluster.members:
            if not cluster.members[member_id].alive:
                history.down.append(member_id)
                continue
            try:
                log: list[str | None] = []
                for batch in client.read_committed(0, node_id=member_id):
                    if int(batch.index[0]) != len(log):
                        raise DLedgerError(0, f"{member_id} sent index {int(batch.index[0])} after {len(log)}")
                    log.extend((batch.body(k) or b"").decode(errors="replace") or None for k in range(batch.count))
            except DLedgerError:
                history.down.append(member_id)
                continue
            history.finals[member_id] = log
    return converged
