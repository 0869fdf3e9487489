"""The load generator behind `dledger bench` (and bench/test_service.py).

Three modes, each with `concurrency` client threads sharing one DLedgerClient:

- `single`: every thread appends one body per request (unary Append);
- `batch`: every thread appends `batch_size` bodies per request (unary Append);
- `stream`: the threads send bodies through one shared `Producer` (AppendStream with
  client-side batching: `linger_ms`, `batch_size` bodies or `max_batch_bytes` per batch,
  `max_in_flight` batches in flight).

Latency is measured from the call to the commit answer: per request in `single` and
`batch`, per body in `stream` (every `STREAM_SAMPLE`-th body, to keep the cost off the
hot path). Optionally `rate` caps the offered entries/s (open-loop pacing per thread;
a pacing wait ends at the end of the run, however low the rate). In `batch` mode a
request carries fewer than `batch_size` bodies when they would exceed a member's
16 MiB a request.
Every thread offers at least one request (a group of `STREAM_SAMPLE` bodies in
`stream`), however short the run and however late the thread gets to run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from dledger.client import DLedgerClient, IndeterminateError, Producer, SendFuture
from dledger.clock import Clock, MonotonicClock, perf_us
from dledger.codes import DLedgerError
from dledger.config import MAX_APPEND_BYTES

MODES = ("single", "batch", "stream")
STREAM_SAMPLE = 64
"""In stream mode, the latency of every 64th body is recorded."""
MAX_PACE_MS = 1 << 53
"""How far ahead pacing computes a due time (a tiny --rate makes it huge)."""


@dataclass(frozen=True)
class BenchConfig:
    """What to run.

    Attributes:
        mode: single, batch or stream.
        concurrency: client threads.
        body_size: bytes per body.
        batch_size: bodies per request (batch) or per producer batch (stream).
        duration_s: how long to offer load.
        rate: entries/s to offer in total (0: as fast as possible).
        linger_ms, max_in_flight, max_batch_bytes: producer settings (stream).
    """

    mode: str = "batch"
    concurrency: int = 4
    body_size: int = 128
    batch_size: int = 1000
    duration_s: float = 10.0
    rate: float = 0.0
    linger_ms: int = 2
    max_in_flight: int = 16
    max_batch_bytes: int = 1024 * 1024


@dataclass
class BenchResult:
    """What happened: counts, rates and latency percentiles (milliseconds).

    Attributes:
        requests: requests committed (single, batch), or bodies handed to the producer
            (stream).
        entries: committed entries: `requests * batch_size` (single, batch), or the
            producer's acknowledged bodies (stream: entries + failed + indeterminate
            == requests, as the producer answers every body it took before it closes).
        failed, indeterminate: requests (single, batch) or bodies (stream) refused /
            with an unknown outcome.
    """

    config: BenchConfig
    elapsed_s: float = 0.0
    requests: int = 0
    entries: int = 0
    failed: int = 0
    indeterminate: int = 0
    first_error: str | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)

    @property
    def entries_per_s(self) -> float:
        """Committed entries per second."""
        return self.entries / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mib_per_s(self) -> float:
        """Committed body bytes per second, in MiB."""
        return self.entries_per_s * self.config.body_size / (1024 * 1024)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary."""
        out = asdict(self)
        out["entries_per_s"] = round(self.entries_per_s, 1)
        out["mib_per_s"] = round(self.mib_per_s, 3)
        return out


class _Worker:
    """One thread's counters (read without a lock by the progress monitor)."""

    def __init__(self) -> None:
        self.requests = 0
        self.entries = 0
        self.failed = 0
        self.indeterminate = 0
        self.error: str | None = None
        self.latencies_us: list[float] = []

    def fail(self, exc: DLedgerError) -> None:
        if isinstance(exc, IndeterminateError):
            self.indeterminate += 1
        else:
            self.failed += 1
        self.error = self.error or str(exc)


def percentiles(latencies_us: list[float]) -> dict[str, float]:
    """p50/p90/p99/p999/max/mean in milliseconds ({} when there is nothing)."""
    if not latencies_us:
        return {}
    values = np.asarray(latencies_us, dtype=np.float64) / 1000.0
    p50, p90, p99, p999 = np.percentile(values, [50, 90, 99, 99.9])
    return {
        "p50": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "p999": round(float(p999), 3),
        "max": round(float(values.max()), 3),
        "mean": round(float(values.mean()), 3),
        "samples": float(len(values)),
    }


def _pace(clock: Clock, start_ms: int, done: int, per_thread_rate: float, stop: threading.Event) -> bool:
    """Open-loop pacing: wait until `done` entries are due at `per_thread_rate`/s, or
    until `stop` is set (the end of the run), whichever comes first. False when the
    run ended meanwhile (nothing more is to be offered)."""
    if per_thread_rate <= 0:
        return True
    due_ms = start_ms + min(int(done * 1000 / per_thread_rate), MAX_PACE_MS)
    wait_ms = due_ms - clock.now_ms()
    if wait_ms <= 0:
        return True
    return not stop.wait(min(wait_ms / 1000, threading.TIMEOUT_MAX))


def capped_batch_size(body_size: int, batch_size: int) -> int:
    """`batch_size`, or fewer bodies so that one request stays within a member's
    MAX_APPEND_BYTES (at least one body)."""
    return max(1, min(batch_size, MAX_APPEND_BYTES // max(1, body_size)))


def _unary_worker(
    client: DLedgerClient,
    config: BenchConfig,
    bodies: list[bytes],
    stop: threading.Event,
    worker: _Worker,
    clock: Clock | None = None,
) -> None:
    clock = clock or MonotonicClock()
    start_ms = clock.now_ms()
    per_thread_rate = config.rate / config.concurrency if config.rate else 0.0
    while True:
        if not _pace(clock, start_ms, worker.entries + worker.failed + worker.indeterminate, per_thread_rate, stop):
            return
        began = perf_us()
        try:
            if len(bodies) == 1:
                client.append(bodies[0])
            else:
                client.append_many(bodies)
        except DLedgerError as exc:
            worker.fail(exc)
        else:
            worker.latencies_us.append(perf_us() - began)
            worker.requests += 1
            worker.entries += len(bodies)
        if stop.is_set():
            return


def _stream_worker(
    producer: Producer,
    config: BenchConfig,
    body: bytes,
    stop: threading.Event,
    worker: _Worker,
    clock: Clock | None = None,
) -> None:
    """Send bodies as fast as the producer takes them (or paced); the latency of every
    STREAM_SAMPLE-th body is recorded; outcomes are counted by the producer, the bodies
    it took (`worker.requests`) here."""
    clock = clock or MonotonicClock()
    start_ms = clock.now_ms()
    per_thread_rate = config.rate / config.concurrency if config.rate else 0.0
    latencies = worker.latencies_us
    send = producer.send
    sent = 0

    def sampled(began: float, future: SendFuture) -> None:
        if future.exception() is None:
            latencies.append(perf_us() - began)

    while True:
        if per_thread_rate and not _pace(clock, start_ms, sent, per_thread_rate, stop):
            break
        try:
            for _ in range(STREAM_SAMPLE - 1):
                send(body, 1.0)
                sent += 1
            began = perf_us()
            send(body, 1.0).add_done_callback(partial(sampled, began))
            sent += 1
        except DLedgerError:
            pass  # the buffer stayed full for a second: offer again
        if stop.is_set():
            break
    worker.requests = sent


def run_bench(
    client: DLedgerClient, config: BenchConfig, progress: Callable[[int, float], None] | None = None
) -> BenchResult:
    """Offer load for `config.duration_s` and measure what commits.

    Args:
        client: the client to use (its leader is discovered first).
        config: what to run.
        progress: called about 5 times a second with (committed entries, elapsed s).
    """
    if config.mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if config.concurrency < 1 or config.batch_size < 1 or config.body_size < 0 or config.duration_s <= 0:
        raise ValueError("concurrency and batch_size must be >= 1, body_size >= 0, duration_s > 0")
    if config.mode == "batch":
        config = replace(config, batch_size=capped_batch_size(config.body_size, config.batch_size))
    client.discover()
    body = bytes(range(256)) * (config.body_size // 256) + bytes(config.body_size % 256)
    stop = threading.Event()
    workers = [_Worker() for _ in range(config.concurrency)]
    producer: Producer | None = None
    if config.mode == "stream":
        batch_bytes = config.batch_size * max(1, config.body_size)
        producer = client.producer(
            linger_ms=config.linger_ms,
            max_batch_count=config.batch_size,
            max_batch_bytes=config.max_batch_bytes,
            max_in_flight=config.max_in_flight,
            # about two windows of batches: more would only queue (and inflate latency)
            max_buffered_bytes=max(1 << 20, 2 * config.max_in_flight * min(config.max_batch_bytes, batch_bytes)),
        )
        threads = [
            threading.Thread(target=_stream_worker, args=(producer, config, body, stop, w), daemon=True)
            for w in workers
        ]
    else:
        bodies = [body] * (1 if config.mode == "single" else config.batch_size)
        threads = [
            threading.Thread(target=_unary_worker, args=(client, config, bodies, stop, w), daemon=True) for w in workers
        ]
    began = perf_us()
    for thread in threads:
        thread.start()
    deadline = began + config.duration_s * 1e6
    while (now := perf_us()) < deadline:
        stop.wait(min(0.2, (deadline - now) / 1e6))
        if progress is not None:
            done = producer.stats.acked if producer is not None else sum(w.entries for w in workers)
            progress(done, (perf_us() - began) / 1e6)
    stop.set()
    for thread in threads:
        thread.join()
    if producer is not None:
        producer.close(timeout_s=max(5.0, client.timeout_s))
        stats = producer.stats
        workers[0].entries, workers[0].failed, workers[0].indeterminate = stats.acked, stats.failed, stats.unknown
    elapsed = (perf_us() - began) / 1e6
    result = BenchResult(config, elapsed_s=elapsed)
    for w in workers:
        result.requests += w.requests
        result.entries += w.entries
        result.failed += w.failed
        result.indeterminate += w.indeterminate
        result.first_error = result.first_error or w.error
    result.latency_ms = percentiles([x for w in workers for x in w.latencies_us])
    if progress is not None:
        progress(result.entries, elapsed)
    return result
