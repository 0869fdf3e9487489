"""The streaming client commands as real processes against a real cluster: `append -`
appends each line as it arrives (the pipe stays open), `get --follow` prints entries as
they are committed, Ctrl-C reports what was done (exit 130); and the server's own
failures exit 1 naming the cause."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest

from dledger.client import DLedgerClient
from tests.e2e.harness import E2ECluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

# As in a terminal: a runner that started us in the background (SIGINT ignored, which
# children inherit) must not make Ctrl-C a no-op for the command, so the command puts
# Python's KeyboardInterrupt handler back first. (Not in a `preexec_fn`: that makes
# Popen fork this gRPC-using process, and gRPC's fork handlers restart its poller in the
# child, which aborts when Popen closes the descriptors before exec.)
DLEDGER = [
    sys.executable,
    "-c",
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from dledger.cli.main import main; sys.exit(main())",
]


class Command:
    """A `dledger` command with a stdin pipe, its stdout read line by line."""

    def __init__(self, cluster: E2ECluster, *args: str) -> None:
        self.process = subprocess.Popen(
            [*DLEDGER, *args, "-p", cluster.peers, "-g", "e2e"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(target=self._pump, args=(self.process.stdout,), daemon=True).start()

    def _pump(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            self.lines.put(raw.decode(errors="replace"))

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(f"the command ended early: {self.ended()}") from None

    def ended(self) -> str:
        """How the command ended: its exit status and stderr (for a failure message)."""
        code = self.process.wait(timeout=60)
        assert self.process.stderr is not None
        return f"exit {code}, stderr {self.process.stderr.read().decode(errors='replace')!r}"

    def next_line(self, timeout_s: float = 60) -> str:
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout_s} s") from None

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C; the exit status and stderr."""
        self.process.send_signal(signal.SIGINT)
        assert self.process.stderr is not None
        err = self.process.stderr.read().decode()
        return self.process.wait(timeout=60), err

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def committed_bodies(client: DLedgerClient, start: int) -> list[bytes]:
    return [e.body for e in client.iterate(start)]


def test_append_stdin_appends_each_line_as_it_arrives(shared_cluster: E2ECluster) -> None:
    with DLedgerClient(shared_cluster.peers, "e2e") as client:
        start = client.append(b"marker") + 1
        command = Command(shared_cluster, "append", "-", "--batch-size", "100")
        try:
            command.write(b"first\n")  # the pipe stays open: the line must go now, not at EOF
            eventually(lambda: committed_bodies(client, start) == [b"first"], 60, "the first line committed")
            command.write(b"second\nthird\n")
            eventually(lambda: committed_bodies(client, start) == [b"first", b"second", b"third"], 60, "two more lines")
            assert command.process.poll() is None  # still reading stdin
            assert command.process.stdin is not None
            command.process.stdin.close()
            assert command.process.wait(timeout=60) == 0
            assert command.next_line() == f"appended 3 entries at indexes {start}..{start + 2}\n"
        finally:
            command.kill()


def test_ctrl_c_during_append_reports_how_many_were_appended(shared_cluster: E2ECluster) -> None:
    with DLedgerClient(shared_cluster.peers, "e2e") as client:
        start = client.append(b"marker") + 1
        command = Command(shared_cluster, "append", "-")
        try:
            command.write(b"a\nb\n")
            eventually(lambda: len(committed_bodies(client, start)) == 2, 60, "two lines committed")
            code, err = command.interrupt()
        finally:
            command.kill()
    assert code == 130
    # the lines are committed; the command reports them appended once their answer has
    # reached it, and as of unknown outcome if Ctrl-C came before that answer
    assert err in (
        f"interrupted: 2 entries were appended at indexes {start}..{start + 1}\n",
        "interrupted: nothing was appended; the outcome of the last request (2 entries) is unknown\n",
    )


def test_get_follow_prints_entries_as_they_are_committed(shared_cluster: E2ECluster) -> None:
    with DLedgerClient(shared_cluster.peers, "e2e") as client:
        start = client.append(b"before") + 1
        command = Command(shared_cluster, "get", str(start), "--follow")
        try:
            first = client.append(b"followed")
            line = command.next_line()
            assert line.startswith(f"{first}\tterm ") and line.endswith("\tfollowed\n")
            second = client.append(b"\x00\x01")
            line = command.next_line()
            assert line.startswith(f"{second}\tterm ") and line.endswith("\tbase64:AAE=\n")
            assert command.process.poll() is None  # still following
            code, err = command.interrupt()
        finally:
            command.kill()
    assert (code, err) == (130, "interrupted: 2 entries shown\n")


def test_server_names_a_busy_metrics_port_and_a_busy_service_port(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    busy = holder.getsockname()[1]
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    try:
        args = ["server", "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", str(tmp_path)]
        metrics = subprocess.run([*DLEDGER, *args, "--metrics-port", str(busy)], capture_output=True, timeout=120)
        service = subprocess.run(
            [*DLEDGER, *args[:4], f"n0-127.0.0.1:{busy}", *args[5:]], capture_output=True, timeout=120
        )
    finally:
        holder.close()
    err = metrics.stderr.decode()
    assert metrics.returncode == 1 and f"error: metrics port {busy} is already in use" in err, err
    assert "Traceback" not in err and "cannot open the store" not in err
    err = service.stderr.decode()
    assert service.returncode == 1 and f"error: port {busy} is already in use" in err, err


def test_server_refuses_a_binary_config_file_and_a_file_as_store(tmp_path: Path) -> None:
    blob = tmp_path / "blob.yaml"
    blob.write_bytes(bytes(range(256)) * 8)
    done = subprocess.run([*DLEDGER, "server", "-c", str(blob)], capture_output=True, timeout=120)
    assert done.returncode == 2 and b"not a UTF-8 text file" in done.stderr and b"Traceback" not in done.stderr
    store = tmp_path / "store"
    store.write_text("not a directory")
    done = subprocess.run(
        [*DLEDGER, "server", "-i", "n0", "-p", "n0-127.0.0.1:1", "-s", str(store)], capture_output=True, timeout=120
    )
    err = done.stderr.decode()
    assert done.returncode == 1 and "error: cannot open the store" in err and "Traceback" not in err, err
    assert store.read_text() == "not a directory"
