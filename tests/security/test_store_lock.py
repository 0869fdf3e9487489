"""One writer per store (issue 16, finding 4): the `lock` file under flock.

Every combination the issue names: `open_log` twice in one process and from two
processes, a writable `MmapLogStore` next to `open_log`, a `dledger server` process and
a `dledger cluster` member against a second writer, read-only opens (no lock, no write)
next to a writer, and a writer killed with SIGKILL whose lock the kernel releases.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import dledger
from dledger.cli.main import main as cli
from dledger.codes import DLedgerError
from dledger.store import MmapLogStore, StoreConfig, StoreView, lock_holder
from tests.e2e.harness import eventually, free_ports

pytestmark = [pytest.mark.security, pytest.mark.timeout(180)]

CONFIG = StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024)
DLEDGER = [sys.executable, "-c", "import sys; from dledger.cli.main import main; sys.exit(main())"]
HOLDER = """
import sys, dledger
from dledger.store import StoreConfig
log = dledger.open_log(sys.argv[1], StoreConfig(data_file_size=65536, index_file_size=32768, warm_ahead_bytes=0))
log.append_many([b"child-%d" % i for i in range(10)])
log.flush()
print("ready", flush=True)
sys.stdin.read()
log.close()
"""


def snapshot(node: Path) -> dict[str, bytes]:
    return {str(p.relative_to(node)): p.read_bytes() for p in sorted(node.rglob("*")) if p.is_file()}


def spawn(args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            # `dledger cluster` stops its members (each in its own session) on SIGTERM
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def hold_in_child(node: Path, processes: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    node.parent.mkdir(parents=True, exist_ok=True)
    child = spawn([sys.executable, "-c", HOLDER, str(node)], node.parent)
    processes.append(child)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def test_open_log_twice_in_one_process(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, CONFIG) as log:
        log.append(b"kept")
        with pytest.raises(DLedgerError, match=rf"locked by process {os.getpid()} \(this process"):
            dledger.open_log(tmp_path, CONFIG)
        with pytest.raises(DLedgerError, match="locked by process"):
            MmapLogStore.open(tmp_path, CONFIG)
        assert log.append(b"still writable") == 1
    with dledger.open_log(tmp_path, CONFIG) as log:
        assert [e.body for e in log.iterate()] == [b"kept", b"still writable"]


def test_open_log_in_another_process_then_killed(tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    node = tmp_path / "dledger-n0"
    child = hold_in_child(node, processes)
    assert lock_holder(node) == child.pid
    with pytest.raises(DLedgerError, match=f"locked by process {child.pid};"):
        dledger.open_log(node, CONFIG)
    os.kill(child.pid, signal.SIGKILL)  # no close(): the kernel drops the lock
    child.wait()
    assert lock_holder(node) is None
    with dledger.open_log(node, CONFIG) as log:
        assert [e.body for e in log.iterate()] == [b"child-%d" % i for i in range(10)]


def test_read_only_opens_take_no_lock_and_write_nothing(tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    node = tmp_path / "dledger-n0"
    child = hold_in_child(node, processes)
    before = snapshot(node)
    with MmapLogStore.open(
        node, StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024, read_only=True)
    ) as ro:
        assert ro.end_index == 9
    with dledger.open_log(node, StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024, read_only=True)) as ro:
        assert ro.get(3).body == b"child-3"
    view = StoreView.open(node)
    view.close()
    result = CliRunner().invoke(cli, ["check", str(node)])
    assert result.exit_code == 0, result.output
    assert f"open for writing by process {child.pid}" in result.output
    assert snapshot(node) == before
    assert lock_holder(node) == child.pid


def test_read_only_open_of_an_unlocked_store_creates_no_lock_file(tmp_path: Path) -> None:
    with dledger.open_log(tmp_path, CONFIG) as log:
        log.append(b"x")
    (tmp_path / "lock").unlink()
    with MmapLogStore.open(tmp_path, StoreConfig(data_file_size=64 * 1024, index_file_size=32 * 1024, read_only=True)):
        pass
    assert CliRunner().invoke(cli, ["check", str(tmp_path)]).exit_code == 0
    assert not (tmp_path / "lock").exists()


def test_server_process_holds_its_store(tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    port, other = free_ports(2)
    node = tmp_path / "dledger-n0"
    server = spawn([*DLEDGER, "server", "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", str(tmp_path)], tmp_path)
    processes.append(server)
    eventually(lambda: lock_holder(node) == server.pid, 60, "the server to lock its store")
    with pytest.raises(DLedgerError, match=f"locked by process {server.pid};"):
        MmapLogStore.open(node, StoreConfig())
    second = subprocess.run(
        [*DLEDGER, "server", "-i", "n0", "-p", f"n0-127.0.0.1:{other}", "-s", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode != 0
    assert f"locked by process {server.pid}" in second.stderr + second.stdout
    assert "Traceback" not in second.stderr
    os.killpg(server.pid, signal.SIGKILL)
    server.wait()
    with MmapLogStore.open(node, StoreConfig()) as store:  # the kernel released the lock
        assert store.end_index >= -1


def test_cluster_refuses_a_base_dir_whose_members_run(tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    base = tmp_path / "data"
    child = hold_in_child(base / "dledger-n1", processes)
    port = free_ports(1)[0]
    result = subprocess.run(
        [*DLEDGER, "cluster", "-n", "3", "--base-port", str(port), "-s", str(base)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"n1 (pid {child.pid})" in result.stderr
    assert not (base / "dledger-n0").exists()  # nothing was started


def test_cluster_member_holds_its_store(tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    base = tmp_path / "data"
    port = free_ports(1)[0]
    cluster = spawn([*DLEDGER, "cluster", "-n", "1", "--base-port", str(port), "-s", str(base)], tmp_path)
    processes.append(cluster)
    node = base / "dledger-n0"
    member = eventually(lambda: lock_holder(node), 60, "the member to lock its store")
    assert member != cluster.pid  # the member process, not the supervisor
    with pytest.raises(DLedgerError, match=f"locked by process {member};"):
        MmapLogStore.open(node, StoreConfig())
    again = subprocess.run(
        [*DLEDGER, "cluster", "-n", "1", "--base-port", str(port + 1), "-s", str(base)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1 and f"n0 (pid {member})" in again.stderr
    cluster.send_signal(signal.SIGTERM)  # stops the member cleanly, which drops the lock
    assert cluster.wait(timeout=60) == 0
    eventually(lambda: lock_holder(node) is None, 60, "the member to release its store")
