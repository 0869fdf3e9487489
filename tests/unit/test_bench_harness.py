"""The service benchmark's harness without etcd: etcd's messages (field numbers on the
wire), the etcd cluster's command lines and its start failure, the multi-process load
driver against a real echo server on loopback, its etcd Put / Txn operations against a
fake etcd KV service, and the summary's etcd lines."""

from __future__ import annotations

import io
import json
import stat
from collections.abc import Iterator
from concurrent import futures
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import grpc
import pytest

from bench._etcd import EtcdCluster, EtcdMember, command_lines, etcd_api, etcd_binary
from bench._load import MAX_ERRORS_PER_THREAD, LoadError, LoadPool, LoadResult, OpSpec, open_operation, serve_worker
from bench._service_summary import etcd_lines
from bench.test_grpc_ceiling import ECHO_UNARY
from tests.e2e.harness import free_ports

pytestmark = pytest.mark.unit


# ----------------------------------------------------------------------------- etcd


def test_etcd_messages_carry_etcd_field_numbers() -> None:
    messages, _ = etcd_api()
    put = messages.PutRequest(key=b"k", value=b"v", lease=5)
    assert put.SerializeToString() == b"\x0a\x01k\x12\x01v\x18\x05"  # key 1, value 2, lease 3
    txn = messages.TxnRequest(success=[messages.RequestOp(request_put=messages.PutRequest(key=b"k"))])
    assert txn.SerializeToString() == b"\x12\x05\x12\x03\x0a\x01k"  # success 2, request_put 2
    # header 1 {member_id 2}, version 2, dbSize 3 (not declared: skipped), leader 4
    status = messages.StatusResponse.FromString(b"\x0a\x02\x10\x07\x12\x063.4.23\x18\x80\x08\x20\x07")
    assert (status.header.member_id, status.version, status.leader) == (7, "3.4.23", 7)
    answer = messages.TxnResponse.FromString(b"\x10\x01\x1a\x02\x12\x00\x1a\x02\x12\x00")
    assert answer.succeeded and len(answer.responses) == 2 and answer.responses[0].HasField("response_put")


def test_etcd_stubs_call_etcd_method_paths() -> None:
    _, services = etcd_api()
    paths: list[str] = []

    class Channel:
        def unary_unary(self, path: str, *args: Any, **kwargs: Any) -> None:
            paths.append(path)

    services.KVStub(Channel())
    services.MaintenanceStub(Channel())
    assert paths == ["/etcdserverpb.KV/Put", "/etcdserverpb.KV/Txn", "/etcdserverpb.Maintenance/Status"]


def test_command_lines_form_one_loopback_cluster(tmp_path: Path) -> None:
    members = [EtcdMember(f"e{k}", 2000 + k, 3000 + k) for k in range(3)]
    argvs = command_lines("/usr/bin/etcd", members, tmp_path, "tok")
    options = [dict(zip(argv[1::2], argv[2::2], strict=True)) for argv in argvs]
    assert {o["--initial-cluster"] for o in options} == {
        "e0=http://127.0.0.1:3000,e1=http://127.0.0.1:3001,e2=http://127.0.0.1:3002"
    }
    assert [o["--listen-client-urls"] for o in options] == [f"http://127.0.0.1:{2000 + k}" for k in range(3)]
    assert [o["--listen-peer-urls"] for o in options] == [f"http://127.0.0.1:{3000 + k}" for k in range(3)]
    assert [o["--data-dir"] for o in options] == [str(tmp_path / f"e{k}") for k in range(3)]
    assert all(o["--initial-cluster-state"] == "new" and o["--initial-cluster-token"] == "tok" for o in options)


def test_etcd_binary_absent_is_none_and_the_summary_says_why_etcd_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert etcd_binary() is None
    assert etcd_lines({}) == ["etcd comparison (issue 19): skipped: etcd did not run"]
    reason = {"etcd-skipped": "etcd is not installed (apt-get install etcd-server)"}
    assert etcd_lines(reason) == [
        "etcd comparison (issue 19): skipped: etcd is not installed (apt-get install etcd-server)"
    ]


def test_a_member_that_exits_fails_the_start_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    fake = tmp_path / "etcd"
    fake.write_text("#!/bin/sh\necho 'bad flag' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    cluster = EtcdCluster(str(fake))
    with pytest.raises(RuntimeError, match=r"etcd member e\d exited with 3: .*bad flag"):
        cluster.start(timeout_s=30)
    assert cluster.processes == [] and not cluster.workdir.exists()


# ------------------------------------------------------------------- the load driver


@pytest.fixture(scope="module")
def echo_address() -> Iterator[str]:
    """An echo server (bench/test_grpc_ceiling.py's unary method) in this process."""
    server = grpc.server(futures.ThreadPoolExecutor(8))
    handler = grpc.unary_unary_rpc_method_handler(lambda request, _context: request)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Unary": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    assert ECHO_UNARY == "/bench.Echo/Unary"
    yield f"127.0.0.1:{port}"
    server.stop(0)


@pytest.fixture(scope="module")
def pool() -> Iterator[LoadPool]:
    with LoadPool(2) as load_pool:
        yield load_pool


def test_every_process_and_thread_runs_and_every_call_is_timed(pool: LoadPool, echo_address: str) -> None:
    result = pool.run(OpSpec("echo", echo_address), threads=2, duration_s=0.3)
    assert (result.processes, result.threads, result.errors, result.first_error) == (2, 2, 0, None)
    assert result.calls >= 4 and result.entries == result.calls
    assert result.latency_ms["samples"] == result.calls and 0 < result.latency_ms["p50"] <= result.latency_ms["max"]
    assert result.entries_per_s > 0 and result.calls_per_s == result.entries_per_s


def test_a_txn_counts_its_puts_as_entries() -> None:
    assert OpSpec("etcd-txn", "x", txn_puts=128).entries_per_call == 128
    assert OpSpec("etcd-put", "x", txn_puts=128).entries_per_call == 1


def test_an_unknown_operation_fails_clearly_and_the_pool_still_works(pool: LoadPool, echo_address: str) -> None:
    with pytest.raises(LoadError, match=r"cannot open bogus: ValueError\(\"unknown operation kind 'bogus'"):
        pool.run(OpSpec("bogus", echo_address), threads=2, duration_s=0.2)
    assert pool.run(OpSpec("echo", echo_address), threads=1, duration_s=0.2, processes=1).calls > 0


def test_a_dead_target_counts_errors_and_every_thread_gives_up(pool: LoadPool) -> None:
    (port,) = free_ports(1)
    result = pool.run(OpSpec("echo", f"127.0.0.1:{port}"), threads=2, duration_s=60)
    assert result.calls == 0 and result.errors == 2 * 2 * MAX_ERRORS_PER_THREAD
    assert result.first_error is not None and "UNAVAILABLE" in result.first_error


def test_a_worker_that_dies_fails_the_run(echo_address: str) -> None:
    with LoadPool(1) as doomed:
        doomed.workers[0].kill()
        doomed.workers[0].wait()
        with pytest.raises(LoadError, match="exited"):
            doomed.run(OpSpec("echo", echo_address), threads=1, duration_s=0.1)


def test_a_worker_told_to_stop_makes_one_call_per_thread(echo_address: str) -> None:
    command = {"spec": {"kind": "echo", "target": echo_address}, "threads": 3, "duration_s": 60, "tag": "t"}
    out = io.StringIO()
    with redirect_stdout(out):
        serve_worker([json.dumps(command), "stop"])
    ready, tally = out.getvalue().splitlines()
    assert ready == "ready"
    assert json.loads(tally)["calls"] == 3 and json.loads(tally)["errors"] == 0


class FakeKV:
    """etcd's KV/Put and KV/Txn on a gRPC server in this process: records every put;
    a Txn answers `short_by` fewer responses than it had puts."""

    def __init__(self) -> None:
        self.puts: list[tuple[bytes, bytes]] = []
        self.short_by = 0
        messages, _ = etcd_api()
        self.messages = messages
        handlers = {
            "Put": grpc.unary_unary_rpc_method_handler(
                self.put, messages.PutRequest.FromString, messages.PutResponse.SerializeToString
            ),
            "Txn": grpc.unary_unary_rpc_method_handler(
                self.txn, messages.TxnRequest.FromString, messages.TxnResponse.SerializeToString
            ),
        }
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("etcdserverpb.KV", handlers),))
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def put(self, request: Any, _context: Any) -> Any:
        self.puts.append((request.key, request.value))
        return self.messages.PutResponse()

    def txn(self, request: Any, _context: Any) -> Any:
        for op in request.success:
            self.put(op.request_put, _context)
        responses = [self.messages.ResponseOp(response_put=self.messages.PutResponse()) for _ in request.success]
        return self.messages.TxnResponse(succeeded=True, responses=responses[self.short_by :])


@pytest.fixture
def fake_kv() -> Iterator[FakeKV]:
    kv = FakeKV()
    yield kv
    kv.server.stop(0)


def test_etcd_puts_write_the_body_under_a_new_key_each(fake_kv: FakeKV) -> None:
    operation = open_operation(OpSpec("etcd-put", fake_kv.address, size=128), "r1p0")
    for thread, seq in ((0, 0), (0, 1), (1, 0)):
        operation.call(thread, seq)
    operation.close()
    assert [key for key, _ in fake_kv.puts] == [b"r1p0/0/0", b"r1p0/0/1", b"r1p0/1/0"]
    assert all(len(value) == 128 for _, value in fake_kv.puts)


def test_an_etcd_txn_puts_its_entries_under_distinct_keys_and_a_short_answer_fails(fake_kv: FakeKV) -> None:
    operation = open_operation(OpSpec("etcd-txn", fake_kv.address, size=1024, txn_puts=128), "t")
    operation.call(2, 7)
    assert len({key for key, _ in fake_kv.puts}) == 128 and fake_kv.puts[5][0] == b"t/2/7/5"
    assert all(len(value) == 1024 for _, value in fake_kv.puts)
    fake_kv.short_by = 1
    with pytest.raises(RuntimeError, match="etcd Txn answered 127 of 128 puts"):
        operation.call(2, 8)
    operation.close()


# --------------------------------------------------------------------------- summary


def load(kind: str, rate: float) -> LoadResult:
    return LoadResult(OpSpec(kind, "x"), 1, 1, 1.0, int(rate), int(rate), 0, rate, None, {"p50": 1.0, "p99": 2.5})


def test_the_summary_puts_our_ratios_to_etcd_and_the_echo_beside_the_targets() -> None:
    figures: dict[str, Any] = {
        "etcd-version": "3.4.23",
        "service-unary-16x4/dledger-async-single": load("dledger", 1500),
        "service-unary-16x4/etcd-put": load("etcd-put", 3000),
        "service-unary-16x4/grpc-echo": load("echo", 2000),
        "idle-etcd-p50-ms": 1.0,
        "idle-async-p50-ms": 2.5,
        "service-1KiB/etcd-txn128": load("etcd-txn", 10_000),
        "service-1KiB/dledger-async-batch": 150_000.0,
    }
    lines = etcd_lines(figures)
    assert lines[0].startswith("etcd comparison (issue 19 targets in brackets; etcd 3.4.23")
    assert lines[1] == (
        "  16 processes x 4 threads, single 128 B: dledger 1,500/s (p50 1.0 / p99 2.5 ms), "
        "etcd put 3,000/s (p50 1.0 / p99 2.5 ms), echo 2,000/s (p50 1.0 / p99 2.5 ms); "
        "dledger = 0.75x echo [>= 0.6x], 0.50x etcd [>= 1.0x]"
    )
    assert lines[2] == "  idle p50, one writer: etcd put 1.00 ms; dledger async 2.50 ms = 2.50x etcd [<= 0.5x]"
    assert lines[3].endswith("dledger-async-batch 150,000/s = 15.0x etcd [>= 20x]")
    assert len(lines) == 4
