"""Service benchmarks: a 3-member dledger cluster of separate `dledger server` processes on
loopback, driven through `DLedgerClient`, next to PySyncObj (3 processes, a replicated
list), a 3-member etcd (Debian's etcd-server 3.4, driven through its gRPC KV API) and the
raw unary gRPC echo, all measured in the same run.

Figures (issue 4, 16 and 19 targets in brackets), printed with ratios by the last test:

- committed entries/s, 128 B and 1 KiB bodies, async flush: batch appends (4 threads, 1000
  distinct bodies per Append) and streaming appends (one Producer over AppendStream)
  [>= 300,000/s at 128 B, >= 80,000/s at 1 KiB; >= 15x and >= 5x PySyncObj], next to
  etcd's Txn of 128 puts from 4 threads (entries/s = puts/s) [dledger >= 20x etcd];
- p50 commit latency with 50,000 1 KiB entries/s offered (paced Producer) [<= 15 ms];
- single 128 B writes, each caller waiting for its answer, through one load generator
  (bench/_load.py: the same client processes and threads for every service): dledger
  `client.append`, etcd Put (a new key each) and the echo of bench/test_grpc_ceiling.py,
  from 64 threads of one process [dledger >= 80 %, and >= 2x after issue 19, of the echo]
  and from 16 processes x 4 threads [dledger >= 0.6x the echo, >= 1.0x etcd];
- idle single-append latency p50 [<= 3 ms], next to etcd's idle put p50 (one put at a
  time; etcd fsyncs before it answers) [async <= 0.5x etcd's, sync <= etcd's];
- the batch rates and the idle latency again with flush_mode=sync (ack after fsync);
- the batch rates and the idle latency again with mutual TLS between every member and
  the client (issue 16) [>= 250,000/s at 128 B, >= 110,000/s at 1 KiB, each >= 0.8x
  the plaintext batch rate of this run; idle p50 <= 3 ms]. The TLS rounds alternate with
  plaintext rounds on the plaintext cluster (TLS_ROUNDS each, both clusters running), so
  that both meet the same machine: the ratio is of those medians. Rounds in a row
  drift (the page cache, other processes): a TLS figure taken after the plaintext one
  varied from 0.73x to 1.09x of it on an idle machine.

Each cluster first writes WARM_UP_BYTES per member, more than a member's page-cache window
(`--release-behind`, 256 MiB): the figures are the steady state, in which the pages faulted
in ahead of the writers reuse released memory. Rounds take 2-3 s each; a load-generator run
LOAD_SECONDS.

PySyncObj has no client protocol: its driver runs inside the leader's process (one
`@replicated` call per entry, or per 1000 entries, with callbacks), which spares it the
client hop dledger pays. Its log is in memory (its default); dledger writes segments.
etcd is started from the `etcd` binary on free loopback ports (bench/_etcd.py); without it
the etcd figures are skipped (`apt-get install etcd-server`; `make bench` installs it when
run as root).

Run: `make bench PYTEST_ARGS="-k service"`, or
`.venv/bin/python -m pytest bench/test_service.py --benchmark-only -p no:randomly`.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bench._cluster import start_cluster
from bench._common import RESULTS, Rate, make_bodies, record, run_in_threads
from bench._etcd import INSTALL_HINT, EtcdCluster, etcd_binary, member_version
from bench._load import LoadPool, LoadResult, OpSpec, open_operation
from bench._pysyncobj import PySyncObjCluster
from bench._service_summary import (
    DLEDGER_SINGLE,
    DLEDGER_SINGLE_RPC,
    ECHO,
    ETCD_PUT,
    ETCD_TXN,
    UNARY_16X4,
    UNARY_64,
    summary_lines,
)
from dledger.cli.loadgen import BenchConfig, BenchResult, run_bench
from dledger.client import DLedgerClient
from dledger.security.certs import CertPlan, write_dev_certs
from dledger.security.tls import TlsConfig

ROUNDS = 3
TLS_ROUNDS = 5
"""TLS rounds (and as many plaintext rounds between them)."""
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
LATENCY_RATE = 50_000
UNARY_THREADS = 64
LOAD_PROCESSES = 16
LOAD_SECONDS = 4.0
TXN_PUTS = 128
SERVICES = ["dledger", "etcd", "echo"]
SERVICES_64 = ["dledger", "dledger-rpc", "etcd", "echo"]
"""The 64-thread row also shows the client without multiplexing (one RPC per call)."""
FIGURES: dict[str, Any] = {}
"""Figures for the summary printed by the last test."""


# ----------------------------------------------------------------------- clusters


def cluster_client(flush_mode: str, tls: bool = False) -> Iterator[DLedgerClient]:
    with tempfile.TemporaryDirectory(prefix=f"dledger-bench-{flush_mode}-") as workdir:
        tls_dir = Path(workdir) / "tls" if tls else None
        if tls_dir is not None:
            write_dev_certs(tls_dir, CertPlan("bench", ("n0", "n1", "n2"), {"admin": "admin", "writer": "write"}))
        cluster = start_cluster(Path(workdir), flush_mode, tls_dir=tls_dir)
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


def stream_round(
    client: DLedgerClient, bodies: list[bytes], total: int, idempotent: bool = False
) -> Callable[[], None]:
    """One Producer sending `total` bodies (linger 2 ms, 4096 bodies / 1 MiB per batch,
    4 batches in flight) and flushing; `idempotent`: numbered records (issue 20)."""

    def run() -> None:
        with client.producer(linger_ms=2, max_batch_count=4096, max_in_flight=4, idempotent=idempotent) as producer:
            send = producer.send
            n = len(bodies)
            for k in range(total):
                send(bodies[k % n])
            assert producer.flush(120)
            assert producer.stats.acked == total, producer.stats

    return run


def bench_entries(
    benchmark: Any,
    group: str,
    impl: str,
    run: Callable[[], object],
    entries: int,
    *,
    rounds: int = ROUNDS,
    between: Callable[[], object] | None = None,
) -> None:
    """Time `rounds` rounds of `run` (`between` runs untimed before each) and record the
    median rate."""
    benchmark.group = group
    benchmark.pedantic(run, rounds=rounds, iterations=1, setup=between)
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


@pytest.mark.parametrize("label", list(SIZES))
def test_async_stream_idempotent(benchmark: Any, async_client: DLedgerClient, label: str) -> None:
    """The same stream from an idempotent producer: each body a numbered record, the
    leader checking every batch against its producer table (target: >= 0.9x plain)."""
    size, total = SIZES[label]
    run = stream_round(async_client, make_bodies(size, 20 * BATCH), total, idempotent=True)
    bench_entries(benchmark, f"service-{label}", "dledger-async-stream-idempotent", run, total)


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


@pytest.fixture(scope="module")
def etcd() -> Iterator[str]:
    """The client address of the leader of a 3-member etcd on loopback (skips the etcd
    comparisons when etcd is not installed)."""
    binary = etcd_binary()
    if binary is None:
        FIGURES["etcd-skipped"] = f"etcd is not installed ({INSTALL_HINT})"
        pytest.skip(f"etcd is not installed: `{INSTALL_HINT}` to compare with etcd (make bench installs it as root)")
    cluster = EtcdCluster(binary)
    leader = cluster.start()
    FIGURES["etcd-version"] = member_version(leader.address)
    try:
        yield leader.address
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def load_pool() -> Iterator[LoadPool]:
    """LOAD_PROCESSES load-generator processes (bench/_load.py), shared by every service."""
    with LoadPool(LOAD_PROCESSES) as pool:
        yield pool


def single_spec(request: pytest.FixtureRequest, service: str) -> tuple[str, OpSpec]:
    """(implementation name, operation) of one 128 B single write to `service`."""
    if service in ("dledger", "dledger-rpc"):
        client: DLedgerClient = request.getfixturevalue("async_client")
        peers = ";".join(f"{member}-{address}" for member, address in client.peers.items())
        if service == "dledger-rpc":
            return DLEDGER_SINGLE_RPC, OpSpec("dledger", peers, group=client.group, multiplex=False)
        return DLEDGER_SINGLE, OpSpec("dledger", peers, group=client.group)
    if service == "etcd":
        return ETCD_PUT, OpSpec("etcd-put", request.getfixturevalue("etcd"))
    return ECHO, OpSpec("echo", f"127.0.0.1:{request.getfixturevalue('echo_port')}")


def bench_load(
    benchmark: Any, group: str, impl: str, pool: LoadPool, spec: OpSpec, processes: int, threads: int
) -> None:
    """One LOAD_SECONDS run of `spec` on `processes` x `threads`; entries/s and latency in
    the results table, `extra_info` and FIGURES. Fails on any failed call."""
    results: list[LoadResult] = []
    benchmark.group = group
    run = partial(pool.run, spec, threads, LOAD_SECONDS, processes)
    benchmark.pedantic(lambda: results.append(run()), rounds=1, iterations=1)
    result = results[-1]
    assert result.errors == 0, f"{result.errors} failed calls, e.g. {result.first_error}"
    RESULTS.setdefault(group, {})[impl] = Rate(result.entries_per_s, result.entries_per_s)
    benchmark.extra_info.update(
        entries_per_s=round(result.entries_per_s), p50_ms=result.latency_ms["p50"], p99_ms=result.latency_ms["p99"],
        processes=processes, threads=threads,
    )  # fmt: skip
    FIGURES[f"{group}/{impl}"] = result


@pytest.mark.parametrize("service", SERVICES_64)
def test_single_64_threads(benchmark: Any, request: pytest.FixtureRequest, load_pool: LoadPool, service: str) -> None:
    """One 128 B write per call from 64 threads of one client process: dledger appends
    (one DLedgerClient), etcd puts, echo calls (one channel)."""
    impl, spec = single_spec(request, service)
    bench_load(benchmark, UNARY_64, impl, load_pool, spec, 1, UNARY_THREADS)


@pytest.mark.parametrize("service", SERVICES)
def test_single_16_processes(benchmark: Any, request: pytest.FixtureRequest, load_pool: LoadPool, service: str) -> None:
    """One 128 B write per call from LOAD_PROCESSES client processes x 4 threads (one
    client per process, nothing shared between them)."""
    impl, spec = single_spec(request, service)
    bench_load(benchmark, UNARY_16X4, impl, load_pool, spec, LOAD_PROCESSES, 4)


def settle() -> None:
    """Write back what earlier rounds left dirty in the page cache (untimed), so that an
    idle-latency figure is taken on an idle machine, not beside the kernel's writeback
    of a gigabyte of batch rounds."""
    os.sync()


def test_async_idle_single_latency(benchmark: Any, async_client: DLedgerClient) -> None:
    """One append at a time on an idle cluster (the median round is the p50)."""
    benchmark.group = "service-idle-append"
    settle()
    body = b"x" * 128
    benchmark.pedantic(async_client.append, args=(body,), rounds=300, iterations=1, warmup_rounds=10)
    FIGURES["idle-async-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


def test_etcd_idle_put_latency(benchmark: Any, etcd: str) -> None:
    """One etcd put (128 B, a new key each) at a time, from this process (the median round
    is the p50; etcd fsyncs its WAL before answering)."""
    benchmark.group = "service-idle-append"
    settle()
    operation = open_operation(OpSpec("etcd-put", etcd), "idle")
    keys = itertools.count()
    benchmark.pedantic(lambda: operation.call(0, next(keys)), rounds=300, iterations=1, warmup_rounds=10)
    operation.close()
    FIGURES["idle-etcd-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


@pytest.mark.parametrize("label", list(SIZES))
def test_etcd_txn(benchmark: Any, etcd: str, load_pool: LoadPool, label: str) -> None:
    """etcd Txn of TXN_PUTS puts (entries/s = puts/s) from THREADS threads of one process,
    the shape of the dledger batch rows (THREADS threads appending BATCH bodies a call)."""
    spec = OpSpec("etcd-txn", etcd, SIZES[label][0], TXN_PUTS)
    bench_load(benchmark, f"service-{label}", ETCD_TXN, load_pool, spec, 1, THREADS)


# ------------------------------------------------------------------------ sync flush


@pytest.mark.parametrize("label", list(SIZES))
def test_sync_batch(benchmark: Any, sync_client: DLedgerClient, label: str) -> None:
    size, total = SIZES[label]
    run = batch_round(sync_client, make_bodies(size, 20 * BATCH), total)
    bench_entries(benchmark, f"service-{label}", "dledger-sync-batch", run, total // BATCH // THREADS * BATCH * THREADS)


def test_sync_idle_single_latency(benchmark: Any, sync_client: DLedgerClient) -> None:
    benchmark.group = "service-idle-append"
    settle()
    benchmark.pedantic(sync_client.append, args=(b"x" * 128,), rounds=200, iterations=1, warmup_rounds=10)
    FIGURES["idle-sync-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


# ------------------------------------------------------------------- mutual TLS


@pytest.fixture(scope="module")
def tls_client() -> Iterator[DLedgerClient]:
    """A client (role write) of a 3-member async cluster speaking mutual TLS throughout."""
    yield from cluster_client("async", tls=True)


@pytest.mark.parametrize("label", list(SIZES))
def test_tls_batch(benchmark: Any, tls_client: DLedgerClient, async_client: DLedgerClient, label: str) -> None:
    """TLS batch rounds, each after a plaintext round of the same work on the plaintext
    cluster (timed here: `dledger-async-batch-beside-tls`)."""
    size, total = SIZES[label]
    bodies = make_bodies(size, 20 * BATCH)
    entries = total // BATCH // THREADS * BATCH * THREADS
    plain_run = batch_round(async_client, bodies, total)
    plain_seconds: list[float] = []

    def plain_round() -> None:
        started = time.perf_counter()
        plain_run()
        plain_seconds.append(time.perf_counter() - started)

    run = batch_round(tls_client, bodies, total)
    bench_entries(
        benchmark, f"service-{label}", "dledger-tls-batch", run, entries, rounds=TLS_ROUNDS, between=plain_round
    )
    benchmark.extra_info["plaintext_entries_per_s"] = round(entries / statistics.median(plain_seconds))
    FIGURES[f"service-{label}/dledger-async-batch-beside-tls"] = entries / statistics.median(plain_seconds)


def test_tls_idle_single_latency(benchmark: Any, tls_client: DLedgerClient) -> None:
    benchmark.group = "service-idle-append"
    settle()
    benchmark.pedantic(tls_client.append, args=(b"x" * 128,), rounds=300, iterations=1, warmup_rounds=10)
    FIGURES["idle-tls-p50-ms"] = benchmark.stats.stats.median * 1000 if benchmark.stats is not None else None


# ------------------------------------------------------------------------- PySyncObj


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


# --------------------------------------------------------------------------- summary


@pytest.fixture(scope="module", autouse=True)
def summary(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the module: print every figure next to its target (issues 4, 16 and 19) with
    the PySyncObj, echo and etcd ratios (bench/_service_summary.py)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not FIGURES:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in summary_lines(FIGURES, LATENCY_RATE):
            reporter.write_line(line)
