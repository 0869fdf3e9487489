"""Linearizability of the key-value store on real server processes while members are
killed (SIGKILL) and restarted: concurrent clients run single-key register operations
(get, put, compare-and-set) and the history is checked with the register checker of
tests/linearizability.

Each read mode has its own keys, so each mode's history is checked on its own. Writes go
through the log (RAFT_LOG); reads use the mode of their key. READ_INDEX, LEASE (one
machine: no clock skew) and RAFT_LOG must be linearizable. UNSAFE reads may be stale:
their verdict is reported, not asserted.

`DLEDGER_LIN_SECONDS` (default 10) sets how long the workload runs.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from dledger.client import DLedgerClient, ReadMode
from dledger.kv.client import KVClient
from tests.e2e.harness import E2ECluster
from tests.linearizability.checker import CAS, INFO, OK, READ, UNSET, WRITE, Op, check

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

SECONDS = float(os.environ.get("DLEDGER_LIN_SECONDS", "10"))
WORKERS = 8
KEYS_PER_MODE = 2
OP_TIMEOUT_S = 3.0
DOWN_S = 2.5
MUST_PASS = (ReadMode.READ_INDEX, ReadMode.LEASE, ReadMode.RAFT_LOG)


@dataclass
class Recorder:
    ops: list[Op] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, op: Op) -> None:
        with self.lock:
            self.ops.append(op)


def _key(mode: ReadMode, i: int) -> bytes:
    return f"{mode.name}-{i}".encode()


def _one_op(store: KVClient, worker: int, n: int, rng: random.Random, seen: dict[bytes, bytes | None]) -> Op:
    """One random register operation; `seen` holds the last value this worker read or
    wrote per key (what its compare-and-sets expect, so that some of them swap)."""
    mode = rng.choice(list(ReadMode))
    key = _key(mode, rng.randrange(KEYS_PER_MODE))
    value = f"{worker}-{n}".encode()
    kind = rng.choice([READ, READ, WRITE, CAS])
    expected = seen.get(key)
    start = time.monotonic()
    try:
        if kind == READ:
            seen[key] = store.get(key, mode, timeout=OP_TIMEOUT_S)
            return Op(READ, key, start, time.monotonic(), OK, value=seen[key], client=worker)
        if kind == WRITE:
            store.put(key, value, timeout=OP_TIMEOUT_S)
            seen[key] = value
            return Op(WRITE, key, start, time.monotonic(), OK, value=value, client=worker)
        result = store.cas(key, expected, value, timeout=OP_TIMEOUT_S)
        seen[key] = value if result.swapped else result.current
        observed = UNSET if result.swapped else result.current
        return Op(CAS, key, start, time.monotonic(), OK, value, expected, result.swapped, observed, worker)
    except Exception:  # unknown outcome (a kill, a timeout): a write may have happened, a read says nothing
        return Op(kind, key, start, None, INFO, value=None if kind == READ else value, expected=expected, client=worker)


def _worker(peers: str, worker: int, stop: threading.Event, recorder: Recorder) -> None:
    rng = random.Random(worker)
    seen: dict[bytes, bytes | None] = {}
    with DLedgerClient(peers, "e2e", timeout_s=OP_TIMEOUT_S) as client:
        store = KVClient(client)
        n = 0
        while not stop.is_set():
            recorder.add(_one_op(store, worker, n, rng, seen))
            n += 1


def _nemesis(cluster: E2ECluster, stop: threading.Event, faults: list[str]) -> None:
    """Every ~1.5 s one fault, long enough for the others to elect (3 missed 500 ms
    heartbeats): SIGKILL and restart of the leader or a follower, or a SIGSTOP of the
    leader, which then wakes up believing it still leads (the stale-leader case)."""
    rng = random.Random(7)
    while not stop.wait(1.5):
        leader, _term = cluster.leader()
        roll = rng.random()
        victim = leader if roll < 0.8 else rng.choice([m for m in cluster.members if m != leader])
        if roll < 0.4:
            cluster.signal(victim, signal.SIGSTOP)
            faults.append(f"pause {victim}")
            stop.wait(DOWN_S)
            cluster.signal(victim, signal.SIGCONT)
        else:
            cluster.kill(victim)
            faults.append(f"kill {victim}")
            stop.wait(DOWN_S)
            cluster.restart(victim)


def test_kv_stays_linearizable_while_members_are_killed(
    make_cluster: Callable[..., E2ECluster], record_property: Callable[[str, object], None]
) -> None:
    cluster = make_cluster(3, ["--state-machine", "kv"])
    cluster.leader()
    stop, recorder, faults = threading.Event(), Recorder(), []
    threads = [threading.Thread(target=_worker, args=(cluster.peers, w, stop, recorder)) for w in range(WORKERS)]
    nemesis = threading.Thread(target=_nemesis, args=(cluster, stop, faults))
    for thread in [*threads, nemesis]:
        thread.start()
    try:
        stop.wait(SECONDS)
    finally:
        stop.set()
        for thread in [*threads, nemesis]:
            thread.join(timeout=120)
    assert faults, "the nemesis never struck"
    by_mode = {mode: [op for op in recorder.ops if op.key.startswith(mode.name.encode() + b"-")] for mode in ReadMode}
    for mode in MUST_PASS:
        ops = by_mode[mode]
        done = [op for op in ops if op.outcome == OK]
        assert sum(op.kind == READ for op in done) >= 5 and sum(op.kind != READ for op in done) >= 5, (
            f"{mode.name}: too few completed operations to check ({len(done)} of {len(ops)})"
        )
        result = check(ops)
        assert result.ok, f"{mode.name} reads are not linearizable:\n{result.describe()}"
    unsafe = check(by_mode[ReadMode.UNSAFE])
    verdict = "linearizable in this run" if unsafe.ok else f"NOT linearizable (allowed):\n{unsafe.describe()}"
    record_property("unsafe_reads", verdict)
    print(f"UNSAFE reads ({len(by_mode[ReadMode.UNSAFE])} ops, faults {faults}): {verdict}")
