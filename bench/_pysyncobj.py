"""PySyncObj for the service benchmark: three member processes (this module run as
`pso`) holding a replicated list; the benchmark drives the leader from inside its own
process (PySyncObj has no client protocol).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._common import make_bodies, reap
from tests.e2e.harness import free_ports

BODIES = 20_000
"""Distinct bodies the driver cycles through."""
PSO_BATCH_BYTES = 32 * 1024
"""Body bytes per PySyncObj command in batch mode (256 x 128 B, 32 x 1 KiB): commands
over its 64 KiB append-entries batch break PySyncObj 0.3.17's transport ("pickle data
was truncated") and the cluster stops committing."""


class PySyncObjCluster:
    """Three PySyncObj processes (this file run as `pso`); `run` drives the leader."""

    def __init__(self) -> None:
        ports = free_ports(3)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        root = Path(__file__).resolve().parents[1]
        # PySyncObj logs its own warnings ("truncating already-applied log entries...") on
        # stderr: keep them out of the benchmark's output, and show them if a member fails
        self.logs = [tempfile.TemporaryFile(mode="w+") for _ in addresses]  # noqa: SIM115 - closed by close()
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "bench._pysyncobj", "pso", me, *(a for a in addresses if a != me)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=root,
            )
            for me, log in zip(addresses, self.logs, strict=True)
        ]
        for p in self.processes:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", self.log_tail()

    def log_tail(self, lines: int = 20) -> str:
        """The last `lines` lines each member wrote on stderr."""
        tails = []
        for log in self.logs:
            log.seek(0)
            tails.append("".join(log.readlines()[-lines:]))
        return "\n---\n".join(tails)

    def run(self, mode: str, count: int, size: int) -> float:
        """Append `count` bodies through the leader; the seconds until all committed."""
        for p in self.processes:
            assert p.stdin is not None
            p.stdin.write(f"{mode} {count} {size}\n")
            p.stdin.flush()
        answers = [p.stdout.readline().split() for p in self.processes if p.stdout is not None]
        done = [a for a in answers if a and a[0] == "done"]
        assert len(done) == 1 and done[0][2] == "0", (answers, self.log_tail())
        return float(done[0][1])

    def close(self) -> None:
        for p in self.processes:
            if p.stdin is not None:
                p.stdin.close()
        reap(self.processes)
        for log in self.logs:
            log.close()


def serve_pysyncobj(me: str, partners: list[str]) -> None:
    """Child: a PySyncObj member with a replicated list; on `MODE COUNT SIZE` the leader
    appends COUNT distinct bodies (one command each, or PSO_BATCH_BYTES per command) with callbacks
    and prints `done SECONDS ERRORS`; the others print `notleader`."""
    from pysyncobj import SyncObj, SyncObjConf, replicated

    class ReplicatedLog(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            conf = SyncObjConf(appendEntriesUseBatch=True, dynamicMembershipChange=False, commandsQueueSize=500_000,
                               raftMinTimeout=1.0, raftMaxTimeout=2.0)  # fmt: skip
            super().__init__(me, partners, conf)
            # the state counts what was applied; keeping every body would make PySyncObj's
            # log compaction pickle an ever-growing list (its rate then falls by 10x)
            self.count = 0
            self.size = 0

        @replicated  # type: ignore[misc]
        def append_one(self, body: bytes) -> int:
            self.count += 1
            self.size += len(body)
            return self.count - 1

        @replicated  # type: ignore[misc]
        def append_many(self, bodies: list[bytes]) -> int:
            first = self.count
            self.count += len(bodies)
            self.size += sum(map(len, bodies))
            return first

    log = ReplicatedLog()
    while not (log._isReady() and log._getLeader() is not None):
        time.sleep(0.05)
    print("ready", flush=True)
    for line in sys.stdin:
        mode, count, size = line.split()[0], int(line.split()[1]), int(line.split()[2])
        if not log._isLeader():
            print("notleader", flush=True)
            continue
        seconds, errors = drive_pysyncobj(log, mode, count, size)
        print("done", seconds, errors, flush=True)
    log.destroy()


def drive_pysyncobj(log: Any, mode: str, count: int, size: int) -> tuple[float, int]:
    """Append `count` distinct bodies through `log` (at most 5000 commands waiting);
    (seconds until every callback came, errors)."""
    bodies = make_bodies(size, BODIES)  # distinct objects: pickle cannot share them
    window = threading.Semaphore(5000)
    per_command = max(1, PSO_BATCH_BYTES // max(1, size))
    state = {"left": count if mode == "single" else count // per_command, "errors": 0}
    finished = threading.Event()
    lock = threading.Lock()

    def done(_result: object, error: int) -> None:
        window.release()
        with lock:
            state["errors"] += error != 0
            state["left"] -= 1
            if state["left"] == 0:
                finished.set()

    began = time.perf_counter()
    if mode == "single":
        for k in range(count):
            window.acquire()
            log.append_one(bodies[k % len(bodies)], callback=done)
    else:
        for k in range(count // per_command):
            window.acquire()
            start = (k * per_command) % len(bodies)
            log.append_many(bodies[start : start + per_command], callback=done)
    finished.wait(600)
    return time.perf_counter() - began, state["errors"]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if sys.argv[1] == "pso":
        serve_pysyncobj(sys.argv[2], sys.argv[3:])
