"""What an idle group costs: the CPU and the thread wake-ups of each member of a
3-member cluster that nobody writes to.

    PYTHONPATH=. .venv/bin/python -m bench.idle_probe [--seconds 20] [--settle 5]
        [--flush-mode async|sync]

Starts three `dledger server` processes (bench/_cluster.py: 1 s heartbeats), appends one
entry so that every member has a store mapped, waits `--settle` seconds, then samples
`/proc/<pid>/task/*` of each member over `--seconds`: the CPU it used (percent of one
core) and how often its threads went to sleep and woke again (voluntary context
switches a second), with the five busiest threads by wake-ups.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from bench._cluster import start_cluster

CLOCK_TICKS = 100  # os.sysconf("SC_CLK_TCK") on Linux


def _thread_stats(pid: int) -> dict[int, tuple[float, int]]:
    """(CPU seconds, voluntary context switches) of each live thread of `pid`."""
    out: dict[int, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime
        switches = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("voluntary_ctxt"))
        out[int(task.name)] = (cpu, switches)
    return out


def sample(pids: dict[str, int], seconds: float) -> dict[str, tuple[float, float, list[float]]]:
    """Per member: (percent of a core, wake-ups a second, the five highest wake-up
    rates of its threads) over `seconds`."""
    before = {name: _thread_stats(pid) for name, pid in pids.items()}
    time.sleep(seconds)  # the measured interval itself: nothing to wait for
    result = {}
    for name, pid in pids.items():
        after = _thread_stats(pid)
        cpu = wakes = 0.0
        per_thread = []
        for tid, (cpu_after, switches_after) in after.items():
            cpu_before, switches_before = before[name].get(tid, (0.0, 0))
            cpu += cpu_after - cpu_before
            rate = (switches_after - switches_before) / seconds
            wakes += rate
            per_thread.append(rate)
        result[name] = (100 * cpu / seconds, wakes, sorted(per_thread, reverse=True)[:5])
    return result


def main(argv: list[str] | None = None) -> None:
    """Start the cluster, let it idle, print each member's figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--flush-mode", choices=("async", "sync"), default="async")
    args = parser.parse_args(argv)
    from dledger.client import DLedgerClient

    root = Path(tempfile.mkdtemp(prefix="idle-probe-"))
    cluster = start_cluster(root, args.flush_mode, segment_size="64MiB")
    try:
        with DLedgerClient(cluster.peers, "bench", timeout_s=30) as client:
            client.append(b"x")
        time.sleep(args.settle)  # let start-up work (warm-ahead of the new segment) end
        found = cluster.find_leader()
        leader = found[0] if found else "?"
        pids = {m: member.process.pid for m, member in cluster.members.items() if member.process}
        stats = sample(pids, args.seconds)
        print(f"idle {args.seconds:.0f} s, flush {args.flush_mode}, leader {leader}")
        for name, (percent, wakes, top) in sorted(stats.items()):
            role = "leader" if name == leader else "follower"
            busiest = ", ".join(f"{rate:.0f}" for rate in top)
            print(f"{name} ({role:8s}) {percent:5.2f} % of a core, {wakes:6.0f} wake-ups/s (busiest: {busiest})")
    finally:
        cluster.shutdown(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
