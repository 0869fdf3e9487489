"""A process that has used gRPC can still start programs the way PySpark starts its JVM
(`subprocess.Popen` with a `preexec_fn`, which forks): importing dledger turns gRPC's
fork handlers off. With them on (grpcio 1.85), such children died of SIGABRT or SIGSEGV
before their exec in about 6 % of forks, and a Spark session failed to start with
"Java gateway process exited before sending its port number"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import dledger

pytestmark = pytest.mark.unit

FORKS = 200
"""Enough that the old failure rate (~6 % a fork) fails the test all but never."""


@pytest.fixture
def busy_grpc() -> Iterator[None]:
    """An in-process server and a channel that has made calls: gRPC's threads and
    pollers are running, as in a member or a Spark driver that planned a read."""
    server = grpc.server(ThreadPoolExecutor(2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary("/test.Nothing/Here")
    for _ in range(5):
        with pytest.raises(grpc.RpcError):
            call(b"", timeout=5)
    try:
        yield
    finally:
        channel.close()
        server.stop(0)


def test_importing_dledger_turns_grpc_fork_handlers_off() -> None:
    assert dledger.__name__ == "dledger"
    assert os.environ.get("GRPC_ENABLE_FORK_SUPPORT") == "false"


def test_children_forked_with_a_preexec_fn_start_after_grpc_was_used(busy_grpc: None) -> None:
    codes = []
    for _ in range(FORKS):
        child = subprocess.Popen(["true"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        codes.append(child.wait(timeout=30))
    assert [code for code in codes if code != 0] == []


@pytest.mark.parametrize(
    ("imports", "noticed"),
    [
        ("import grpc, dledger.spark", True),  # too late: gRPC read the setting already
        ("import dledger.spark, grpc", False),
    ],
)
def test_grpc_imported_first_is_noticed_and_warned_about(imports: str, noticed: bool) -> None:
    check = (
        f"{imports}, warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    dledger.spark.warn_if_grpc_came_first()\n"
        "print(dledger.GRPC_FORK_HANDLERS_ON, any('fork handlers' in str(w.message) for w in seen))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.split() == [str(noticed), str(noticed)], done.stderr
