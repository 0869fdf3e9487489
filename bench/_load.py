"""One closed-loop load generator for every service of bench/test_service.py.

`LoadPool(P)` starts P worker processes (this module run as `worker`). `pool.run(spec,
threads, duration_s)` has each of the first `processes` workers open one client for
`spec` (one `DLedgerClient`, or one gRPC channel), start `threads` threads that each
make WARM_UP_CALLS calls, then, all processes released together, call the operation in
a loop for `duration_s`, timing every call. The same code drives every service:

- `dledger`: `DLedgerClient.append(body)` (one entry per call);
- `etcd-put`: etcd `KV/Put` of the body under a key no other call uses;
- `etcd-txn`: etcd `KV/Txn` of `txn_puts` such puts (`txn_puts` entries per call);
- `echo`: the raw unary echo of bench/test_grpc_ceiling.py.

Bodies are `size` bytes (bench._common.make_bodies). The result: calls, entries, errors,
entries/s (the sum of every process's entries over its own elapsed time) and latency
percentiles over all calls. `open_operation` is also usable in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench._common import make_bodies, reap

KINDS = ("dledger", "etcd-put", "etcd-txn", "echo")
WARM_UP_CALLS = 3
CALL_TIMEOUT_S = 30.0
MAX_ERRORS_PER_THREAD = 20
"""A thread stops after this many failed calls (a dead target must not spin)."""
BODY_COUNT = 1024


@dataclass(frozen=True)
class OpSpec:
    """What one call does.

    Attributes:
        kind: one of KINDS.
        target: the dledger peers string (`n0-127.0.0.1:port;...`) or a host:port.
        size: body / value bytes.
        txn_puts: puts per etcd Txn (`etcd-txn`).
        group: the dledger group.
        multiplex: the DLedgerClient shares requests between its threads (False: one
            RPC per call).
    """

    kind: str
    target: str
    size: int = 128
    txn_puts: int = 1
    group: str = "bench"
    multiplex: bool = True

    @property
    def entries_per_call(self) -> int:
        """Entries one successful call writes (puts for a Txn)."""
        return self.txn_puts if self.kind == "etcd-txn" else 1


@dataclass
class Operation:
    """An opened operation: `call(thread, seq)` makes one call; `close()` releases it."""

    call: Callable[[int, int], object]
    close: Callable[[], None]


def open_operation(spec: OpSpec, tag: str) -> Operation:
    """Open the client of `spec` (keys of etcd puts start with `tag`). ValueError for an
    unknown kind."""
    bodies = make_bodies(spec.size, BODY_COUNT)
    if spec.kind == "dledger":
        from dledger.client import DLedgerClient

        client = DLedgerClient(spec.target, spec.group, timeout_s=CALL_TIMEOUT_S, multiplex=spec.multiplex)
        return Operation(lambda _t, seq: client.append(bodies[seq % BODY_COUNT]), client.close)
    if spec.kind not in KINDS:
        raise ValueError(f"unknown operation kind {spec.kind!r} (one of {', '.join(KINDS)})")
    from dledger.transport.grpc_client import open_channel

    channel = open_channel(spec.target)
    if spec.kind == "echo":
        from bench.test_grpc_ceiling import ECHO_UNARY

        echo = channel.unary_unary(ECHO_UNARY)
        return Operation(lambda _t, seq: echo(bodies[seq % BODY_COUNT], timeout=CALL_TIMEOUT_S), channel.close)
    from bench._etcd import etcd_api

    messages, services = etcd_api()
    kv = services.KVStub(channel)
    put_request, request_op = messages.PutRequest, messages.RequestOp
    prefix = tag.encode()
    if spec.kind == "etcd-put":

        def put(thread: int, seq: int) -> object:
            key = b"%s/%d/%d" % (prefix, thread, seq)
            return kv.Put(put_request(key=key, value=bodies[seq % BODY_COUNT]), timeout=CALL_TIMEOUT_S)

        return Operation(put, channel.close)

    def txn(thread: int, seq: int) -> object:
        puts = [
            request_op(
                request_put=put_request(key=b"%s/%d/%d/%d" % (prefix, thread, seq, k), value=bodies[k % BODY_COUNT])
            )
            for k in range(spec.txn_puts)
        ]
        answer = kv.Txn(messages.TxnRequest(success=puts), timeout=CALL_TIMEOUT_S)
        if not answer.succeeded or len(answer.responses) != spec.txn_puts:
            raise RuntimeError(f"etcd Txn answered {len(answer.responses)} of {spec.txn_puts} puts")
        return answer

    return Operation(txn, channel.close)


# ----------------------------------------------------------------- one process's run


@dataclass
class ThreadTally:
    """One thread's calls, errors and latencies (microseconds)."""

    calls: int = 0
    errors: int = 0
    first_error: str | None = None
    latencies_us: list[int] = field(default_factory=list)


def run_threads(operation: Operation, threads: int, duration_s: float, go: Callable[[], bool]) -> dict[str, object]:
    """Start `threads` threads, each warming up with WARM_UP_CALLS calls; call `go()` (it
    returns when the run may start: True to run, False to stop, every thread then making
    one call), then let every thread call in a loop for `duration_s`. The process's tally:
    calls, errors, first_error, elapsed_s, latencies_us."""
    tallies = [ThreadTally() for _ in range(threads)]
    warm = threading.Barrier(threads + 1)
    start = threading.Event()
    deadline = [0.0]

    def worker(k: int) -> None:
        tally, call, clock = tallies[k], operation.call, time.perf_counter
        try:
            for seq in range(-WARM_UP_CALLS, 0):
                call(k, seq)
        except Exception as exc:
            tally.errors, tally.first_error = 1, f"warm-up: {exc!r}"
        warm.wait()
        start.wait()
        seq = 0
        while tally.errors < MAX_ERRORS_PER_THREAD:
            began = clock()
            try:
                call(k, seq)
            except Exception as exc:
                tally.errors += 1
                tally.first_error = tally.first_error or repr(exc)
            else:
                tally.latencies_us.append(int((clock() - began) * 1e6))
                tally.calls += 1
            seq += 1
            if clock() >= deadline[0]:
                return

    pool = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for thread in pool:
        thread.start()
    warm.wait()
    run = go()
    began = time.perf_counter()
    deadline[0] = began + duration_s if run else began
    start.set()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - began
    errors = [t.first_error for t in tallies if t.first_error]
    return {
        "calls": sum(t.calls for t in tallies),
        "errors": sum(t.errors for t in tallies),
        "first_error": errors[0] if errors else None,
        "elapsed_s": elapsed,
        "latencies_us": [v for t in tallies for v in t.latencies_us],
    }


def serve_worker(stdin: Iterable[str] | None = None) -> None:
    """Child: for every JSON command line `{"spec", "threads", "duration_s", "tag"}`, open
    the operation, warm up, print `ready`, wait for `go` (anything else: stop at once),
    run and print the tally as one JSON line (`{"error": ...}` when the operation cannot
    be opened). Ends at EOF."""
    lines = iter(stdin if stdin is not None else sys.stdin)
    for line in lines:
        command = json.loads(line)
        try:
            operation = open_operation(OpSpec(**command["spec"]), command["tag"])
        except Exception as exc:
            print(json.dumps({"error": f"cannot open {command['spec']['kind']}: {exc!r}"}), flush=True)
            continue

        def go() -> bool:
            print("ready", flush=True)
            return next(lines, "").strip() == "go"

        try:
            tally = run_threads(operation, command["threads"], command["duration_s"], go)
        finally:
            operation.close()
        print(json.dumps(tally), flush=True)


# ------------------------------------------------------------------- the parent side


@dataclass
class LoadResult:
    """A run over all processes.

    Attributes:
        spec, processes, threads, duration_s: what ran.
        calls, entries, errors: totals (entries = calls x entries per call).
        entries_per_s: the sum of every process's entries / its elapsed seconds.
        first_error: one error message, if any.
        latency_ms: p50 / p90 / p99 / max / mean over every call (dledger.cli.loadgen).
    """

    spec: OpSpec
    processes: int
    threads: int
    duration_s: float
    calls: int
    entries: int
    errors: int
    entries_per_s: float
    first_error: str | None
    latency_ms: dict[str, float]

    @property
    def calls_per_s(self) -> float:
        """Successful calls per second."""
        return self.entries_per_s / self.spec.entries_per_call


class LoadError(RuntimeError):
    """A worker could not open its operation, or died."""


class LoadPool:
    """P worker processes, reused across runs (started in parallel, stopped by `close()`)."""

    def __init__(self, processes: int) -> None:
        root = Path(__file__).resolve().parents[1]
        self.runs = 0
        argv = [sys.executable, "-m", "bench._load", "worker"]
        self.workers = [
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root)
            for _ in range(processes)
        ]

    def run(self, spec: OpSpec, threads: int, duration_s: float, processes: int | None = None) -> LoadResult:
        """Run `spec` on the first `processes` workers (all by default), `threads` threads
        each, released together once every one is ready. Raises LoadError when a worker
        cannot open the operation (the others then stop at once) or dies."""
        from dledger.cli.loadgen import percentiles

        workers = self.workers[: processes or len(self.workers)]
        self.runs += 1
        for k, worker in enumerate(workers):
            command = {"spec": asdict(spec), "threads": threads, "duration_s": duration_s, "tag": f"r{self.runs}p{k}"}
            self._send(worker, json.dumps(command))
        answers = [self._receive(w) for w in workers]
        failed = [a for a in answers if a != "ready"]
        for worker, answer in zip(workers, answers, strict=True):
            if answer == "ready":
                self._send(worker, "stop" if failed else "go")
        tallies = [json.loads(self._receive(w)) for w, a in zip(workers, answers, strict=True) if a == "ready"]
        if failed:
            raise LoadError(json.loads(failed[0]).get("error", failed[0]))
        calls = sum(t["calls"] for t in tallies)
        errors = [t["first_error"] for t in tallies if t["first_error"]]
        per_call = spec.entries_per_call
        return LoadResult(
            spec=spec, processes=len(workers), threads=threads, duration_s=duration_s, calls=calls,
            entries=calls * per_call, errors=sum(t["errors"] for t in tallies),
            entries_per_s=sum(t["calls"] * per_call / t["elapsed_s"] for t in tallies if t["elapsed_s"] > 0),
            first_error=errors[0] if errors else None,
            latency_ms=percentiles([v for t in tallies for v in t["latencies_us"]]),
        )  # fmt: skip

    @staticmethod
    def _send(worker: subprocess.Popen[str], line: str) -> None:
        assert worker.stdin is not None
        try:
            worker.stdin.write(line + "\n")
            worker.stdin.flush()
        except BrokenPipeError as exc:
            raise LoadError(f"load worker {worker.pid} exited with {worker.poll()}") from exc

    @staticmethod
    def _receive(worker: subprocess.Popen[str]) -> str:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        if not line:
            raise LoadError(f"load worker {worker.pid} exited with {worker.wait(10)}")
        return line.strip()

    def close(self) -> None:
        """End every worker (EOF on its stdin; killed after 10 s). Idempotent."""
        for worker in self.workers:
            if worker.stdin is not None and not worker.stdin.closed:
                with suppress(BrokenPipeError):  # a worker that died with a line unread
                    worker.stdin.close()
        reap(self.workers)
        for worker in self.workers:
            if worker.stdout is not None:
                worker.stdout.close()

    def __enter__(self) -> LoadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if sys.argv[1:] == ["worker"]:
        serve_worker()
