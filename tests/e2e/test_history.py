"""The FAULTS.md §2.2 history checker on real server processes under leader kills.

Writers append unique bodies through DLedgerClient (single and batch appends) and one
Producer (AppendStream) while the leader is SIGKILLed and restarted three times; a
poller records every member's status and reads committed entries. After the cluster
quiesces, every member's committed log is read and checked: acked lost = 0, divergence
= 0, duplicates = 0, phantoms = 0, real-time order, monotonic commit per process
lifetime, at most one leader per term. The history is written as JSON lines and the
figures as JSON next to it (tmp_path).
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dledger.client import DLedgerClient, IndeterminateError, SendFuture
from dledger.clock import perf_us
from dledger.codes import DLedgerError
from tests.client.history import EntryRead, History, Op, StatusRead, check
from tests.e2e.harness import E2ECluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

KILLS = 3
RUN_BEFORE_KILL_S = 4.0
DOWN_S = 2.0
CLIENT_TIMEOUT_S = 3.0


def now_s() -> float:
    return perf_us() / 1e6


def outcome(op: Op, error: BaseException | None) -> None:
    """Classify an attempt: ok / fail (provably not appended) / info (unknown)."""
    op.complete = now_s()
    if error is None:
        op.status = "ok"
    elif isinstance(error, DLedgerError) and not isinstance(error, IndeterminateError):
        op.status, op.error = "fail", str(error)
    else:
        op.status, op.error = "info", str(error)


def writer(peers: str, name: str, history: History, stop: threading.Event) -> None:
    """Single appends and batches of 3, each body a fresh uid."""
    rng = random.Random(name)
    with DLedgerClient(peers, "e2e", CLIENT_TIMEOUT_S) as client:
        k = 0
        while not stop.is_set():
            size = 1 if rng.random() < 0.6 else 3
            ops = [Op(f"{name}-{k + j}".encode(), invoke=now_s()) for j in range(size)]
            k += size
            for op in ops:
                history.add_op(op)
            try:
                result = client.append_batch([op.uid for op in ops])
            except Exception as exc:
                for op in ops:
                    outcome(op, exc)
                continue
            for j, op in enumerate(ops):
                op.index = result.first_index + j
                outcome(op, None)


def producer_writer(peers: str, history: History, stop: threading.Event) -> None:
    """A Producer streaming uids (AppendStream): each send is one op."""
    with DLedgerClient(peers, "e2e", CLIENT_TIMEOUT_S) as client:
        producer = client.producer(linger_ms=2, max_in_flight=4)

        def done(op: Op) -> Callable[[SendFuture], None]:
            def finish(future: SendFuture) -> None:
                error = future.exception()
                if error is None:
                    op.index = future.result()
                outcome(op, error)

            return finish

        k = 0
        while not stop.is_set():
            op = Op(f"p-{k}".encode(), invoke=now_s())
            k += 1
            history.add_op(op)
            try:
                future = producer.send(op.uid, timeout_s=CLIENT_TIMEOUT_S)
            except DLedgerError as exc:
                outcome(op, DLedgerError(exc.code, exc.message))  # refused before sending
                continue
            future.add_done_callback(done(op))
            if k % 10 == 0:
                stop.wait(0.005)  # offer at most ~2,000 appends/s: leave CPU to the servers
        producer.close(timeout_s=30)


def poller(cluster: E2ECluster, lives: dict[str, int], history: History, stop: threading.Event) -> None:
    """Status of every member and committed-entry reads, about 10 times a second."""
    rng = random.Random(7)
    with DLedgerClient(cluster.peers, "e2e", 1.0) as client:
        while not stop.wait(0.1):
            life = dict(lives)  # read before asking: a restart in between bumps it
            for member in client.status():
                if not member.reachable or member.error:
                    continue
                history.add_status(
                    StatusRead(
                        member.node_id, life[member.node_id], now_s(), member.term, member.role, member.committed_index
                    )
                )
                if member.committed_index >= 0:
                    index = rng.randint(0, member.committed_index)
                    try:
                        entry = client.get(index, node_id=member.node_id)[0]
                    except DLedgerError:
                        continue
                    history.add_read(EntryRead(member.node_id, index, entry.body or None))


def final_logs(cluster: E2ECluster) -> dict[str, list[bytes | None]]:
    """Every member's committed log (uid per index, None for NOOPs) once all agree."""
    with DLedgerClient(cluster.peers, "e2e", 10.0) as client:

        def converged() -> bool:
            status = client.status()
            leaders = [m for m in status if m.role == "LEADER"]
            return bool(leaders) and all(m.committed_index == leaders[0].end_index for m in status)

        eventually(converged, 60, "every member to commit the leader's whole log", poll_s=0.1)
        logs: dict[str, list[bytes | None]] = {}
        for node_id in client.peers:
            log: list[bytes | None] = []
            for batch in client.read_committed(0, node_id=node_id):
                assert int(batch.index[0]) == len(log)
                log.extend(batch.body(k) or None for k in range(batch.count))
            logs[node_id] = log
        return logs


def test_leader_kills_lose_no_acked_append(make_cluster: Callable[..., E2ECluster], tmp_path: Path) -> None:
    cluster = make_cluster(3)
    cluster.leader()
    history = History()
    lives = dict.fromkeys(cluster.members, 0)
    stop_load, stop_poll = threading.Event(), threading.Event()
    threads = [threading.Thread(target=writer, args=(cluster.peers, f"w{i}", history, stop_load)) for i in range(3)]
    threads.append(threading.Thread(target=producer_writer, args=(cluster.peers, history, stop_load)))
    polling = threading.Thread(target=poller, args=(cluster, lives, history, stop_poll))
    began = now_s()
    for thread in [*threads, polling]:
        thread.start()
    kills: list[float] = []
    try:
        for _ in range(KILLS):
            stop_load.wait(RUN_BEFORE_KILL_S)  # let load run: this paces the faults
            leader, term = cluster.leader()
            lives[leader] += 1
            cluster.kill(leader)
            kills.append(now_s())
            history.event(kills[-1], f"kill -9 {leader} (term {term})")
            stop_load.wait(DOWN_S)
            cluster.restart(leader)
            history.event(now_s(), f"restarted {leader}")
        last_kill = kills[-1]
        eventually(
            lambda: any(op.status == "ok" and op.complete > last_kill for op in list(history.ops)),
            30,
            "an acknowledged append after the last kill",
        )
    finally:
        stop_load.set()
        for thread in threads:
            thread.join(60)
    final = final_logs(cluster)
    stop_poll.set()
    polling.join(30)
    history.dump(tmp_path / "history.jsonl")
    errors = check(history, final)

    counts = history.counts()
    rto = []
    for t in kills:  # RTO: from the kill to the first ack of an append invoked after it
        after = [op.complete for op in history.ops if op.status == "ok" and op.invoke > t]
        rto.append(round(min(after) - t, 3) if after else None)
    figures = {
        "nodes": 3,
        "kills": len(kills),
        "seconds": round(now_s() - began, 1),
        "ops": counts,
        "acked_per_s": round(counts.get("ok", 0) / (kills[-1] + DOWN_S - began), 1),
        "rto_s": rto,
        "errors": [repr(e) for e in errors[:20]],
        "log_length": {n: len(log) for n, log in final.items()},
    }
    (tmp_path / "figures.json").write_text(json.dumps(figures, indent=2))
    print(f"\nhistory figures: {json.dumps(figures)}")
    assert not errors, f"history check failed ({tmp_path / 'history.jsonl'}): {errors[:10]}"
    assert counts.get("ok", 0) > 100
    assert all(r is not None for r in rto)
    assert not [op for op in history.ops if op.status == "pending"]
