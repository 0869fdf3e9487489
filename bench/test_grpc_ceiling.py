"""The gRPC ceiling on this machine: raw echo calls (unary and streaming) between separate
processes, with the same server options as a dledger member, next to the same calls on a
single-member dledger server (Ledger.Append / Ledger.AppendStream, which commit at once
with one member). The echo rows are the baseline every service number is compared to.

Processes: an echo server, a single-member dledger server, the benchmark (client), and for
the `2procs` rows two more client processes started per benchmark and released together.

Run: `make bench PYTEST_ARGS="-k grpc"`, or
`.venv/bin/python -m pytest bench/test_grpc_ceiling.py --benchmark-only -p no:randomly`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from bench._common import record, run_in_threads
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from dledger.transport.grpc_server import SERVER_OPTIONS

ROUNDS = 5
UNARY_CALLS = 1_000
APPEND_CALLS = 200  # a unary append waits for its commit: fewer calls keep the round short
STREAM_MESSAGES = 20_000
THREADS = 4
ECHO_UNARY = "/bench.Echo/Unary"
ECHO_STREAM = "/bench.Echo/Stream"
SIZES = {"100B": 100, "4KiB": 4096}


# ------------------------------------------------------------------ child processes


def serve_echo() -> None:
    """Child: an echo server on a free port (printed), until stdin closes."""
    server = grpc.server(futures.ThreadPoolExecutor(64), options=list(SERVER_OPTIONS))
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(lambda request, _context: request),
        "Stream": grpc.stream_stream_rpc_method_handler(lambda requests, _context: (r for r in requests)),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()
    server.stop(0)


def unary_client(port: int, calls: int, size: int) -> None:
    """Child: connect and warm up, wait for a line on stdin, make `calls` echo calls,
    print the seconds they took."""
    channel = open_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary(ECHO_UNARY)
    body = b"x" * size
    for _ in range(20):
        call(body, timeout=10)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    for _ in range(calls):
        call(body, timeout=10)
    print(time.perf_counter() - start, flush=True)


# ----------------------------------------------------------------------- fixtures


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.test_grpc_ceiling", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )


@pytest.fixture(scope="module")
def echo_port() -> Iterator[int]:
    process = _child("serve")
    assert process.stdout is not None and process.stdin is not None
    port = int(process.stdout.readline())
    yield port
    process.stdin.close()
    process.wait(10)


@pytest.fixture(scope="module")
def dledger_port() -> Iterator[int]:
    """A single-member dledger server (its appends commit without replication)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as store:
        process = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli.server_cmds", "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", store,
             "--segment-size", "256MiB", "--heartbeat-ms", "500", "--log-level", "WARNING"],
        )  # fmt: skip
        channel = open_channel(f"127.0.0.1:{port}")
        stub = pb_grpc.LedgerStub(channel)
        deadline = time.monotonic() + 30
        while True:
            try:
                if stub.Metadata(pb.MetadataRequest(), timeout=1).role == "LEADER":
                    break
            except grpc.RpcError:
                pass
            assert time.monotonic() < deadline, "the dledger server did not start"
            time.sleep(0.1)
        channel.close()
        yield port
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def echo_channel(echo_port: int) -> Iterator[Any]:
    channel = open_channel(f"127.0.0.1:{echo_port}")
    yield channel
    channel.close()


# --------------------------------------------------------------------- benchmarks


@pytest.mark.parametrize("label", list(SIZES))
def test_echo_unary(benchmark: Any, echo_channel: Any, label: str) -> None:
    """One client thread, one call at a time."""
    benchmark.group = f"grpc-unary-{label}"
    call = echo_channel.unary_unary(ECHO_UNARY)
    body = b"x" * SIZES[label]

    def run() -> None:
        for _ in range(UNARY_CALLS):
            call(body, timeout=10)

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, benchmark.group, "grpc-echo", UNARY_CALLS)


def test_echo_unary_threads(benchmark: Any, echo_channel: Any) -> None:
    """THREADS client threads sharing one channel."""
    benchmark.group = f"grpc-unary-100B-{THREADS}threads"
    call = echo_channel.unary_unary(ECHO_UNARY)
    body = b"x" * 100

    def worker(_: int) -> None:
        for _ in range(UNARY_CALLS // THREADS):
            call(body, timeout=10)

    benchmark.pedantic(run_in_threads, args=(worker, THREADS), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, benchmark.group, "grpc-echo", UNARY_CALLS // THREADS * THREADS)


def test_echo_unary_two_client_processes(benchmark: Any, echo_port: int) -> None:
    """Two client processes at once (a client process is GIL-bound; the server is not the
    only limit): calls/s of both together."""
    benchmark.group = "grpc-unary-100B-2procs"
    per_client = UNARY_CALLS

    def setup() -> tuple[tuple[list[subprocess.Popen[str]]], dict[str, Any]]:
        clients = [_child("client", str(echo_port), str(per_client), "100") for _ in range(2)]
        for c in clients:
            assert c.stdout is not None and c.stdout.readline().strip() == "ready"
        return (clients,), {}

    def run(clients: list[subprocess.Popen[str]]) -> None:
        for c in clients:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        for c in clients:
            assert c.stdout is not None
            float(c.stdout.readline())
            c.wait(30)

    benchmark.pedantic(run, setup=setup, rounds=ROUNDS, iterations=1)
    record(benchmark, benchmark.group, "grpc-echo", 2 * per_client)


def test_echo_stream(benchmark: Any, echo_channel: Any) -> None:
    """One bidirectional stream: STREAM_MESSAGES messages of 100 B, pipelined."""
    benchmark.group = "grpc-stream-100B"
    call = echo_channel.stream_stream(ECHO_STREAM)
    body = b"x" * 100

    def run() -> None:
        received = sum(1 for _ in call(iter([body] * STREAM_MESSAGES), timeout=60))
        assert received == STREAM_MESSAGES

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, benchmark.group, "grpc-echo", STREAM_MESSAGES)


def test_dledger_append_unary(benchmark: Any, dledger_port: int) -> None:
    """Ledger.Append of one 100 B body per call on a single-member server."""
    benchmark.group = "grpc-unary-100B"
    channel = open_channel(f"127.0.0.1:{dledger_port}")
    append = pb_grpc.LedgerStub(channel).Append
    request = pb.AppendRequest(bodies=[b"x" * 100])

    def run() -> None:
        for _ in range(APPEND_CALLS):
            assert append(request, timeout=10).code == 200

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    channel.close()
    record(benchmark, benchmark.group, "dledger-append", APPEND_CALLS)


def test_dledger_append_stream(benchmark: Any, dledger_port: int) -> None:
    """Ledger.AppendStream of one 100 B body per message on a single-member server."""
    benchmark.group = "grpc-stream-100B"
    channel = open_channel(f"127.0.0.1:{dledger_port}")
    stream = pb_grpc.LedgerStub(channel).AppendStream
    request = pb.AppendRequest(bodies=[b"x" * 100])

    def run() -> None:
        answers = stream(iter([request] * STREAM_MESSAGES), timeout=120)
        assert sum(1 for a in answers if a.code == 200) == STREAM_MESSAGES

    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    channel.close()
    record(benchmark, benchmark.group, "dledger-append-stream", STREAM_MESSAGES)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if sys.argv[1] == "serve":
        serve_echo()
    elif sys.argv[1] == "client":
        unary_client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
