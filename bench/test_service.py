"""Service benchmarks: a 3-member dledger cluster of separate `dledger server` processes on
loopback, driven through `DLedgerClient` from this process, next to PySyncObj (3 processes, a
replicated list) and the raw unary gRPC echo, all measured in the same run.

Figures (issue 4 targets in brackets), printed with ratios by the last test:

- committed entries/s, 128 B and 1 KiB bodies, async flush: batch appends (4 threads, 1000
  distinct bodies per Append) and streaming appends (one Producer over AppendStream)
  [>= 300,000/s at 128 B, >= 80,000/s at 1 KiB; >= 15x and >= 5x PySyncObj];
- p50 commit latency with 50,000 1 KiB entries/s offered (paced Producer) [<= 15 ms];
- single-entry appends from 64 client threads, vs the raw unary echo from 64 threads on
  the same machine (the echo server of bench/test_grpc_ceiling.py) [>= 80 %];
- idle single-append latency p50 [<= 3 ms];
- the batch rates and the idle latency again with flush_mode=sync (ack after fsync);
- the batch rates and the idle latency again with mutual TLS between every member and
  the client (issue 16) [>= 250,000/s at 128 B, >= 110,000/s at 1 KiB, each >= 0.8x
  the plaintext batch rate of this run; idle p50 <= 3 ms].

Each cluster first writes WARM_UP_BYTES per member, more than a member's page-cache window
(`--release-behind`, 256 MiB): the figures are the steady state, in which the pages faulted
in ahead of the writers reuse released memory. Rounds take 2-3 s each.

PySyncObj has no client protocol: its driver runs inside the leader's process (one
`@replicated` call per entry, or per 1000 entries, with callbacks), which spares it the
client hop dledger pays. Its log is in memory (its default); dledger writes segments.

Run: `make bench PYTEST_ARGS="-k service"`, or
`.venv/bin/python -m pytest bench/test_service.py --benchmark-only -p no:randomly`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bench._common import RESULTS, Rate, make_bodies, record, run_in_threads
from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.loadgen import BenchConfig, BenchResult, run_bench
from dledger.cli.server_cmds import server_command_line
from dledger.client import DLedgerClient
from dledger.security.certs import CertPlan, write_dev_certs
from dledger.security.tls import TlsConfig
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import free_ports

ROUNDS = 3
THREADS = 4
BATCH = 1000
SIZES = {"128B": (128, 900_000), "1KiB": (1024, 240_000)}  # body size, entries per round
WARM_UP_BYTES = 320 << 20
"""Bytes (in 1 KiB bodies) every member writes before the first figure."""
PSO_COUNTS = {
    ("single", "128B"): 20_000,
    ("single", "1KiB"): 4_000,
    ("batch", "128B"): 300_000,
    ("batch", "1KiB"): 80_000,
}
"""PySyncObj entries per round (one command per entry is slow: fewer entries)."""
PSO_BATCH_BYTES = 32 * 1024
"""Body bytes per PySyncObj command in batch mode (256 x 128 B, 32 x 1 KiB): commands
over its 64 KiB append-entries batch break PySyncObj 0.3.17's transport ("pickle data
was truncated") and the cluster stops committing."""
LATENCY_RATE = 50_000
UNARY_THREADS = 64
FIGURES: dict[str, Any] = {}
"""Figures for the summary printed by the last test."""


# ----------------------------------------------------------------------- clusters


def start_cluster(workdir: Path, flush_mode: str, tls_dir: Path | None = None) -> LocalCluster:
    """Three `dledger server` processes (256 MiB segments, 1 s heartbeats; mutual TLS with
    the certificates in `tls_dir`) with a leader."""
    cluster = LocalCluster(
        nodes=3,
        group="bench",
        host="127.0.0.1",
        base_port=0,
        ports=free_ports(3),
        store_base_dir=workdir / "data",
        extra_args=["--flush-mode", flush_mode, "--segment-size", "256MiB", "--heartbeat-ms", "1000",
                    "--log-level", "WARNING"],
        command_line=server_command_line,
        log_dir=workdir / "logs",
        tls_dir=tls_dir,
    )  # fmt: skip
    cluster.start_all()
    assert cluster.wait_leader(60) is not None, "no leader elected"
    return cluster


def cluster_client(flush_mode: str, tls: bool = False) -> Iterator[DLedgerClient]:
    with tempfile.TemporaryDirectory(prefix=f"dledger-bench-{flush_mode}-") as workdir:
        tls_dir = Path(workdir) / "tls" if tls else None
        if tls_dir is not None:
            write_dev_certs(tls_dir, CertPlan("bench", ("n0", "n1", "n2"), {"admin": "admin", "writer": "write"}))
        cluster = start_cluster(Path(workdir), flush_mode, tls_dir)
        client_tls = TlsConfig.in_directory(tls_dir, "client-writer") if tls_dir is not None else None
        try:
            with DLedgerClient(cluster.peers, "bench", timeout_s=30.0, tls=client_tls) as client:
                client.append_many(make_bodies(128, 1000))  # warm up: channels, segments, followers
                stream_round(client, make_bodies(1024, 20 * BATCH), WARM_UP_BYTES // 1024)()  # and memory
                yield client
        finally:
            cluster.shutdown(30)


@pytest.fixture(scope="module")
def async_client() -> Iterator[DLedgerClient]:
    """A client of a 3-member cluster with DLedger's async flush."""
    yield from cluster_client("async")


@pytest.fixture(scope="module")
def sync_client() -> Iterator[DLedgerClient]:
    """A client of a 3-member cluster that acks only after fsync."""
    yield from cluster_client("sync")


# ------------------------------------------------------------------------ workloads


def batch_round(client: DLedgerClient, bodies: list[bytes], total: int) -> Callable[[], None]:
    """THREADS threads appending BATCH-body requests until `total` entries committed."""
    requests = [bodies[i : i + BATCH] for i in range(0, len(bodies), BATCH)]
    per_thread = total // BATCH // THREADS

    def worker(k: int) -> None:
        for j in range(per_thread):
            client.append_many(requests[(k * per_thread + j) % len(requests)])

    return partial(run_in_threads, worker, THREADS)


def stream_round(client: DLedgerClient, bodies: list[bytes], total: int) -> Callable[[], None]:
    """One Producer sending `total` bodies (linger 2 ms, 4096 bodies / 1 MiB per batch,
    4 batches in flight) and flushing."""

    def run() -> None:
        with client.producer(linger_ms=2, max_batch_count=4096, max_in_flight=4) as producer:
            send = producer.send
            n = len(bodies)
            for k in range(total):
                send(bodies[k % n])
            assert producer.flush(120)
            assert producer.stats.acked == total, producer.stats

    return run


def bench_entries(benchmark: Any, group: str, impl: str, run: Callable[[], object], entries: int) -> None:
    benchmark.group = group
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
    rate = record(benchmark, group, impl, entries)
    if rate is not None:
        FIGURES[f"{group}/{impl}"] = rate.median


# ------------------------------------------------------------------- dledger rates


@pytest.mark.parametrize("label", list(SIZES))
def test_async_batch(benchmark: Any, async_client: DLedgerClient, label: str) -> None:
    size, total = SIZES[label]
    run = batch_round(async_client, make_bodies(size, 20 * BATCH), total)
    bench_entries(
        benchmark, f"service-{label}", "dledger-async-batch", run, total // BATCH // THREADS * BATCH * THREADS
    )


@pytest.mark.parametrize("label", list(SIZES))
def test_async_stream(benchmark: Any, async_client: DLedgerClient, label: str) -> None:
    size, total = SIZES[label]
    run = stream_round(async_client, make_bodies(size, 20 * BATCH), total)
    bench_entries(benchmark, f"service-{label}", "dledger-async-stream", run, total)


def test_async_latency_at_50k_1kib(benchmark: Any, async_client: DLedgerClient) -> None:
    """p50 commit latency (send -> commit answer, per body) with 50,000 1 KiB entries/s
    offered through a paced Producer. A 5 ms linger makes ~250-entry requests: with 1 ms
    the leader gets 1,000 requests/s, about its unary ceiling, and queues (p50 ~17 ms)."""
    config = BenchConfig(
        mode="stream", concurrency=1, body_size=1024, batch_size=4096, duration_s=4.0, rate=LATENCY_RATE,
        linger_ms=5, max_in_flight=4,
    )  # fmt: skip
    results: list[BenchResult] = []
    benchmark.group = "service-latency-50k-1KiB"
    benchmark.pedantic(lambda: results.append(run_bench(async_client, config)), rounds=1, iterations=1)
    result = results[-1]
    benchmark.extra_info.update(p50_ms=result.latency_ms["p50"], p99_ms=result.latency_ms["p99"])
    benchmark.extra_info["achieved_entries_per_s"] = round(result.entries_per_s)
    FIGURES["latency-50k"] = result


def test_async_single_64_threads(benchmark: Any, async_client: DLedgerClient) -> None:
    """Single-entry Appends from 64 threads sharing the client (one channel)."""
    config = BenchConfig(mode="single", concurrency=UNARY_THREADS, body_size=128, batch_size=1, duration_s=4.0)
    results: list[BenchResult] = []
    benchmark.group = "service-unary-64threads"
    benchmark.pedantic(lambda: results.append(run_bench(async_client, config)), rounds=1, iterations=1)
    result = results[-1]
    RESULTS.setdefault(benchmark.group, {})["dledger-async-single"] = Rate(result.entries_per_s, result.entries_per_s)
    benchmark.extra_info.update(entries_per_s=round(result.entries_per_s), p50_ms=result.latency_ms["p50"])
    FIGURES["single-64"] = result


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    """The echo server of bench/test_grpc_ceiling.py (same server options as a member)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.test_grpc_ceiling", "serve"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1],
    )  # fmt: skip
    assert process.stdout is not None and process.stdin is not None
    yield int(process.stdout.readline())
    process.stdin.close()
    process.wait(10)


def test_echo_unary_64_threads(benchmark: Any, echo_port: int) -> None:
    """The raw unary gRPC ceiling: 64 threads on one channel, 100 B echo calls."""
    from bench.test_grpc_ceiling import ECHO_UNARY

    channel = open_channel(f"127.0.0.1:{echo_port}")
    call = channel.unary_unary(ECHO_UNARY)
    per_thread = 40

    def worker(_: int) -> None:
        for _ in range(per_thread):
            call(b"x" * 100, timeout=30)

    run = partial(run_in_threads, worker, UNARY_THREADS)
    bench_entries(benchmark, "service-unary-64threads", "grpc-echo", run, UNARY_THREADS * per_thread)
    channel.close()


def test_async_idle_single_latency(benchmark: Any, async_client: DLedgerClient) -> None:
    """One append at a time on an idle cluster (the median round is the p50)."""
    benchmark.group = "service-idle-append"
    body = b"x" * 128
    benchmark.pedantic(async_client.append, args=(body,), rounds=300, iterations=1, warmup_rounds=10)
    FIGURES["idle-async-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


# ------------------------------------------------------------------------ sync flush


@pytest.mark.parametrize("label", list(SIZES))
def test_sync_batch(benchmark: Any, sync_client: DLedgerClient, label: str) -> None:
    size, total = SIZES[label]
    run = batch_round(sync_client, make_bodies(size, 20 * BATCH), total)
    bench_entries(benchmark, f"service-{label}", "dledger-sync-batch", run, total // BATCH // THREADS * BATCH * THREADS)


def test_sync_idle_single_latency(benchmark: Any, sync_client: DLedgerClient) -> None:
    benchmark.group = "service-idle-append"
    benchmark.pedantic(sync_client.append, args=(b"x" * 128,), rounds=200, iterations=1, warmup_rounds=10)
    FIGURES["idle-sync-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


# ------------------------------------------------------------------- mutual TLS


@pytest.fixture(scope="module")
def tls_client() -> Iterator[DLedgerClient]:
    """A client (role write) of a 3-member async cluster speaking mutual TLS throughout."""
    yield from cluster_client("async", tls=True)


@pytest.mark.parametrize("label", list(SIZES))
def test_tls_batch(benchmark: Any, tls_client: DLedgerClient, label: str) -> None:
    size, total = SIZES[label]
    run = batch_round(tls_client, make_bodies(size, 20 * BATCH), total)
    bench_entries(benchmark, f"service-{label}", "dledger-tls-batch", run, total // BATCH // THREADS * BATCH * THREADS)


def test_tls_idle_single_latency(benchmark: Any, tls_client: DLedgerClient) -> None:
    benchmark.group = "service-idle-append"
    benchmark.pedantic(tls_client.append, args=(b"x" * 128,), rounds=300, iterations=1, warmup_rounds=10)
    FIGURES["idle-tls-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


# ------------------------------------------------------------------------- PySyncObj


class PySyncObjCluster:
    """Three PySyncObj processes (this file run as `pso`); `run` drives the leader."""

    def __init__(self) -> None:
        ports = free_ports(3)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        root = Path(__file__).resolve().parents[1]
        self.processes = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.test_service", "pso", me, *(a for a in addresses if a != me)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=root,
            )
            for me in addresses
        ]
        for p in self.processes:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"

    def run(self, mode: str, count: int, size: int) -> float:
        """Append `count` bodies through the leader; the seconds until all committed."""
        for p in self.processes:
            assert p.stdin is not None
            p.stdin.write(f"{mode} {count} {size}\n")
            p.stdin.flush()
        answers = [p.stdout.readline().split() for p in self.processes if p.stdout is not None]
        done = [a for a in answers if a and a[0] == "done"]
        assert len(done) == 1 and done[0][2] == "0", answers
        return float(done[0][1])

    def close(self) -> None:
        for p in self.processes:
            if p.stdin is not None:
                p.stdin.close()
        for p in self.processes:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def pysyncobj() -> Iterator[PySyncObjCluster]:
    cluster = PySyncObjCluster()
    yield cluster
    cluster.close()


@pytest.mark.parametrize("label", list(SIZES))
@pytest.mark.parametrize("mode", ["single", "batch"])
def test_pysyncobj(benchmark: Any, pysyncobj: PySyncObjCluster, label: str, mode: str) -> None:
    size = SIZES[label][0]
    count = PSO_COUNTS[mode, label]
    bench_entries(benchmark, f"service-{label}", f"pysyncobj-{mode}", lambda: pysyncobj.run(mode, count, size), count)


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
    bodies = make_bodies(size, 20 * BATCH)  # distinct objects: pickle cannot share them
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


# --------------------------------------------------------------------------- summary


@pytest.fixture(scope="module", autouse=True)
def summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the module: print every figure next to its target (issue 4) with the
    PySyncObj and echo ratios."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not FIGURES:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in summary_lines():
            reporter.write_line(line)


def summary_lines() -> list[str]:
    """The summary of FIGURES, one line per figure."""
    lines = ["service figures (issue 4 targets in brackets):"]

    def rate(key: str) -> float | None:
        value = FIGURES.get(key)
        return float(value) if value is not None else None

    for label, target, pso_target in (("128B", 300_000, 15), ("1KiB", 80_000, 5)):
        single, batch = rate(f"service-{label}/pysyncobj-single"), rate(f"service-{label}/pysyncobj-batch")
        for impl in ("dledger-async-batch", "dledger-async-stream", "dledger-sync-batch"):
            value = rate(f"service-{label}/{impl}")
            if value is None:
                continue
            ratios = ", ".join(
                f"{value / base:.1f}x pysyncobj-{name}" for name, base in (("single", single), ("batch", batch)) if base
            )
            lines.append(f"  {label} {impl}: {value:,.0f} entries/s [>= {target:,}; >= {pso_target}x]  ({ratios})")
    for label, target in (("128B", 250_000), ("1KiB", 110_000)):
        value, plain = rate(f"service-{label}/dledger-tls-batch"), rate(f"service-{label}/dledger-async-batch")
        if value is not None:
            ratio = f" = {value / plain:.2f}x plaintext" if plain else ""
            lines.append(f"  {label} dledger-tls-batch: {value:,.0f} entries/s{ratio} [>= {target:,}; >= 0.8x]")
    latency = FIGURES.get("latency-50k")
    if isinstance(latency, BenchResult):
        lines.append(
            f"  p50 commit latency at {LATENCY_RATE:,} x 1 KiB/s offered: {latency.latency_ms.get('p50', 0):.1f} ms "
            f"[<= 15 ms] (p99 {latency.latency_ms.get('p99', 0):.1f} ms, achieved {latency.entries_per_s:,.0f}/s)"
        )
    single64, echo = FIGURES.get("single-64"), rate("service-unary-64threads/grpc-echo")
    if isinstance(single64, BenchResult) and echo:
        lines.append(
            f"  64-thread single appends: {single64.entries_per_s:,.0f}/s = {single64.entries_per_s / echo:.0%} of "
            f"the raw unary echo ({echo:,.0f} calls/s) [>= 80%]; p50 {single64.latency_ms.get('p50', 0):.1f} ms"
        )
    for mode, name in (("async", "async flush"), ("sync", "sync flush"), ("tls", "mutual TLS, async flush")):
        p50 = FIGURES.get(f"idle-{mode}-p50-ms")
        if p50 is not None:
            lines.append(f"  idle single append p50 ({name}): {p50:.2f} ms" + (" [<= 3 ms]" * (mode != "sync")))
    return lines


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if sys.argv[1] == "pso":
        serve_pysyncobj(sys.argv[2], sys.argv[3:])
