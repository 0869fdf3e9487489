"""The member request path, measured from outside: a 3-member cluster of `dledger server`
processes on loopback, driven by one client process (issue 19).

    PYTHONPATH=. .venv/bin/python -m bench.member_path_probe [--flush-mode sync]
        [--tree DIR ...] [--repeat 3] [--idle 300] [--threads 64] [--seconds 3] [--warm-mib 320]

For every `--tree` (a checkout of dledger-py whose `dledger server` the members run;
default: this one) and `--repeat` times, interleaved (A, B, A, B...: the machine is
shared), it starts a fresh cluster and prints:

- idle: p50 / p90 of one 128 B `append()` at a time (`--idle` appends);
- single-64: entries/s of single 128 B appends from `--threads` threads, and their p50;
- batch-4x1000: entries/s of 4 threads appending 1000-body 128 B requests;
- CPU per append (user + system, from /proc, 10 ms ticks) of the leader process in the
  idle and the single-append phases, and of the followers together in the latter.

The client is the one of this checkout in every case; only the servers differ. With
`--pause` it prints the leader's pid and waits for Enter before the loads (to attach
py-spy: `py-spy record --native -p PID`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench._cluster import start_cluster
from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.loadgen import BenchConfig, run_bench
from dledger.client import DLedgerClient


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def member_cpu(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds of every member process so far."""
    return {m.id: cpu_s(m.process.pid) for m in cluster.members.values() if m.process is not None}


def idle(client: DLedgerClient, rounds: int) -> tuple[float, float]:
    """p50 and p90 (ms) of one append at a time."""
    body = b"x" * 128
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        client.append(body)
        took.append((time.perf_counter() - t0) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.9)]


def warm(client: DLedgerClient, mib: int) -> None:
    """Write `mib` MiB of 1 KiB bodies first (the service bench writes 320 MiB: past a
    member's page-cache window)."""
    bodies = [bytes([k % 251]) * 1024 for k in range(1000)]
    for _ in range(mib * 1024 // 1000):
        client.append_many(bodies)


def batch(client: DLedgerClient, seconds: float) -> float:
    """Entries/s of 4 threads appending 1000-body requests of 128 B."""
    bodies = [bytes([k % 251]) * 128 for k in range(1000)]
    stop = time.monotonic() + seconds
    counts = [0] * 4

    def worker(k: int) -> None:
        while time.monotonic() < stop:
            client.append_many(bodies)
            counts[k] += len(bodies)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def run_once(tree: str, args: argparse.Namespace) -> str:
    """One cluster of `tree`'s servers, measured; one line of figures."""
    os.environ["PYTHONPATH"] = tree
    os.chdir(tree)  # `python -m` puts the working directory first on the servers' path
    with tempfile.TemporaryDirectory(prefix="dledger-probe-") as workdir:
        cluster = start_cluster(Path(workdir), args.flush_mode, group="probe", segment_size="64MiB")
        try:
            with DLedgerClient(cluster.peers, "probe", timeout_s=30.0) as client:
                client.append_many([b"w" * 128] * 1000)
                warm(client, args.warm_mib)
                idle(client, 20)
                if args.pause:
                    found = cluster.wait_leader(10)
                    leader = found[0] if found else None
                    member = cluster.members[leader] if leader else None
                    pid = member.process.pid if member and member.process else None
                    input(f"leader {leader} pid {pid}; Enter to run the loads ")
                found = cluster.wait_leader(10)
                leader = found[0] if found else ""
                cpu0 = member_cpu(cluster)
                p50, p90 = idle(client, args.idle)
                cpu1 = member_cpu(cluster)
                config = BenchConfig(
                    mode="single", concurrency=args.threads, body_size=128, batch_size=1, duration_s=args.seconds
                )
                single = run_bench(client, config)
                cpu2 = member_cpu(cluster)
                rate = batch(client, args.seconds)
                appends = single.entries_per_s * args.seconds
                idle_cpu = (cpu1[leader] - cpu0[leader]) / args.idle * 1e6
                single_cpu = (cpu2[leader] - cpu1[leader]) / max(appends, 1) * 1e6
                others = [m for m in cpu2 if m != leader]
                followers_cpu = sum(cpu2[m] - cpu1[m] for m in others) / max(appends, 1) * 1e6
        finally:
            cluster.shutdown(30)
    return (
        f"idle p50 {p50:.2f} ms p90 {p90:.2f} ms | single-{args.threads} {single.entries_per_s:,.0f}/s "
        f"p50 {single.latency_ms['p50']:.1f} ms | batch-4x1000 {rate:,.0f}/s | leader CPU per append: idle "
        f"{idle_cpu:.0f} us, single-{args.threads} {single_cpu:.0f} us (followers together {followers_cpu:.0f} us)"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the rounds (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flush-mode", default="async", choices=["async", "sync"])
    parser.add_argument("--tree", action="append", help="a dledger-py checkout whose servers to run")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--idle", type=int, default=300)
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warm-mib", type=int, default=0, help="MiB of 1 KiB bodies to write first")
    parser.add_argument("--pause", action="store_true")
    args = parser.parse_args(argv)
    trees = args.tree or [str(Path(__file__).resolve().parents[1])]
    for r in range(args.repeat):
        for tree in trees:
            print(f"[{r}] {args.flush_mode} {tree}: {run_once(tree, args)}", flush=True)


if __name__ == "__main__":
    main()
