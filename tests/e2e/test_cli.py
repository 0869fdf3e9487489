"""The `dledger server` and `dledger cluster` commands as a user runs them."""

from __future__ import annotations

import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dledger.cli.server_cmds import EXIT_ADDRESS_IN_USE
from dledger.client import DLedgerClient
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel
from tests.e2e.harness import RPC_S, eventually, free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

DLEDGER = [sys.executable, "-c", "import sys; from dledger.cli.main import main; sys.exit(main())"]


class Running:
    """A `dledger` command in its own process group, its output collected line by line."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(
            [*DLEDGER, *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            self.lines.put(raw.decode(errors="replace"))

    def wait_for_line(self, prefix: str, timeout_s: float = 60) -> str:
        """The first new output line starting with `prefix`."""

        def check() -> str | None:
            while True:
                try:
                    line = self.lines.get_nowait()
                except queue.Empty:
                    return None
                self.output.append(line)
                if line.startswith(prefix):
                    return line

        try:
            return eventually(check, timeout_s, f"a line starting with {prefix!r}")
        except AssertionError:
            raise AssertionError("".join(self.output[-60:])) from None

    def kill_group(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def consecutive_free_ports(count: int) -> int:
    """A base port such that base..base+count-1 are free right now."""
    for base in sorted(free_ports(8)):
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                sockets.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise AssertionError("no run of free ports")


@pytest.fixture
def commands() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for cmd in started:
        cmd.kill_group()


def test_cluster_command_elects_serves_stops_and_resumes(tmp_path: Path, commands: list[Running]) -> None:
    base = consecutive_free_ports(3)
    args = ["cluster", "--base-port", str(base), "--heartbeat-ms", "500", "--segment-size", "4MiB"]
    first = Running(args, tmp_path)
    commands.append(first)
    leader_line = first.wait_for_line("leader: ")
    leader = leader_line.split()[1]
    port = base + int(leader[1:])
    first.wait_for_line("Ctrl-C stops")
    channel = open_channel(f"127.0.0.1:{port}")
    answer = pb_grpc.LedgerStub(channel).Append(pb.AppendRequest(bodies=[b"persisted"]), timeout=RPC_S)
    channel.close()
    assert answer.code == 200
    os.killpg(first.process.pid, signal.SIGINT)  # Ctrl-C in the terminal
    assert first.process.wait(60) == 0
    first.wait_for_line("[cluster] stopped: n0=0, n1=0, n2=0")
    assert (tmp_path / ".dledger-data" / "dledger-n0" / "checkpoint").exists()

    # the same command again resumes the same data; settings for every member come
    # from a YAML file: n2 is the preferred leader and takes over
    settings = tmp_path / "members.yaml"
    settings.write_text("preferredLeaderIds: n2\ncheckPreferredLeaderIntervalMs: 200\n")
    second = Running([*args, "--config-file", str(settings)], tmp_path)
    commands.append(second)
    leader = second.wait_for_line("leader: ").split()[1]
    channel = open_channel(f"127.0.0.1:{base + int(leader[1:])}")
    try:
        stub = pb_grpc.LedgerStub(channel)
        got = eventually(
            lambda: (g := stub.Get(pb.GetRequest(index=answer.first_index), timeout=RPC_S)).code == 200 and g,
            30,
            "the entry of the first run",
        )
        assert got.entries[0].body == b"persisted"
        peers = ";".join(f"n{k}-127.0.0.1:{base + k}" for k in range(3))
        with DLedgerClient(peers, "default", timeout_s=RPC_S) as client:
            eventually(lambda: client.metadata().leader_id == "n2", 30, "n2 leading")
            client.leadership_transfer("n0")  # away from the preferred leader ...
            eventually(lambda: client.metadata().leader_id == "n2", 30, "n2 leading again")  # ... it comes back
    finally:
        channel.close()
    second.process.send_signal(signal.SIGTERM)
    assert second.process.wait(60) == 0


def _processes_naming(text: str) -> list[int]:
    """The pids whose command line holds `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_a_cluster_whose_reader_goes_away_stops_its_members(tmp_path: Path) -> None:
    """`dledger cluster | head`: the log pump's BrokenPipeError killed the supervisor,
    and its members ran on without it (reparented to pid 1, holding their ports and
    store locks), 4 times out of 4 (helper D)."""
    base = consecutive_free_ports(3)
    data = tmp_path / "reader-gone"
    args = ["cluster", "--base-port", str(base), "-s", str(data), "--segment-size", "4MiB"]
    process = subprocess.Popen(
        [*DLEDGER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.readline().startswith(b"[cluster] starting 3 members")
        eventually(lambda: len(_processes_naming(str(data))) >= 4, 60, "the members started")
        process.stdout.close()  # `head` has read its lines
        assert process.wait(120) == 1
        assert b"Traceback" not in process.stderr.read()
        eventually(lambda: _processes_naming(str(data)) == [], 60, "every member stopped")
    finally:
        if process.poll() is None:
            process.kill()


def test_server_with_a_dledger_yaml_config_file(tmp_path: Path, commands: list[Running]) -> None:
    port, metrics_port = free_ports(2)
    config = tmp_path / "dledger.yaml"
    config.write_text(
        "configs:\n"
        "  - group: yamlgroup\n"
        "    selfId: n0\n"
        f"    peers: n0-127.0.0.1:{port}\n"
        f"    storeBaseDir: {tmp_path / 'store'}\n"
        "    peerPushQuota: 1048576\n"
        "    enableSnapshot: false\n"  # a DLedger key we have (not used by the node yet)
        "    enableBatchPush: true\n"  # a DLedger key we do not have: a warning
    )
    args = ["server", "-c", str(config), "--segment-size", "4MiB", "--heartbeat-ms", "500"]
    server = Running([*args, "--metrics-port", str(metrics_port)], tmp_path)
    commands.append(server)
    assert "'enableBatchPush'" in server.wait_for_line("warning: ")
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        stub = pb_grpc.LedgerStub(channel)
        meta = eventually(
            lambda: (m := _metadata(stub)) is not None and m.role == "LEADER" and m, 30, "the single member to lead"
        )
        assert (meta.group, meta.self_id) == ("yamlgroup", "n0")
        assert stub.Append(pb.AppendRequest(bodies=[b"one"]), timeout=RPC_S).code == 200
    finally:
        channel.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=RPC_S) as page:
        assert b'dledger_append_entry_latency_count{group="yamlgroup"' in page.read()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(30) == 0
    assert (tmp_path / "store" / "dledger-n0" / "data").is_dir()


def _metadata(stub: object) -> object | None:
    try:
        return stub.Metadata(pb.MetadataRequest(), timeout=1)  # type: ignore[attr-defined]
    except Exception:
        return None


def test_server_refuses_a_port_in_use(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        done = subprocess.run(
            [*DLEDGER, "server", "-i", "n0", "-p", f"n0-127.0.0.1:{port}", "-s", str(tmp_path)],
            capture_output=True,
            timeout=60,
        )
    finally:
        holder.close()
    assert done.returncode == EXIT_ADDRESS_IN_USE == 1, done.stderr.decode()
    assert done.stderr.decode().endswith(f"error: port {port} is already in use (cannot listen on 127.0.0.1:{port})\n")


def test_server_rejects_bad_options(tmp_path: Path) -> None:
    done = subprocess.run(
        [*DLEDGER, "server", "-i", "n5", "-p", "n0-127.0.0.1:1", "-s", str(tmp_path)], capture_output=True, timeout=60
    )
    assert done.returncode == 2 and b"not in peers" in done.stderr
    sizes = subprocess.run([*DLEDGER, "server", "--segment-size", "lots"], capture_output=True, timeout=60)
    assert sizes.returncode == 2 and b"not a size" in sizes.stderr


def test_a_server_takes_every_file_descriptor_the_system_allows(make_cluster: Any) -> None:
    """Each connection holds a descriptor; helper M exhausted a member's with idle ones.
    A server raises its soft limit to the hard one (started here with a lower soft one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, hard, 1024) - 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        cluster = make_cluster(1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    member = next(iter(cluster.members.values()))
    assert member.process is not None
    limits = Path(f"/proc/{member.process.pid}/limits").read_text().splitlines()
    [line] = [row for row in limits if row.startswith("Max open files")]
    assert line.split()[3:5] == [str(hard), str(hard)] != [str(lowered), str(hard)]
