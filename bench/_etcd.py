"""A 3-member etcd cluster on loopback for the service benchmark, and etcd's KV messages.

etcd is Debian's `etcd-server` package (3.4; `make bench` installs it when it can). The
members listen on free 127.0.0.1 ports (client and peer), keep their data in a temporary
directory removed on `stop()`, and log errors only (to `<workdir>/<name>.log`).

The messages and stubs come from `bench/etcd_kv.proto` (etcd's package, names and field
numbers), loaded at run time: `etcd_api()`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from bench._common import reap
from tests.e2e.harness import free_ports

ETCD_BINARY = "etcd"
INSTALL_HINT = "apt-get install etcd-server"
STATUS_TIMEOUT_S = 2.0


@cache
def etcd_api() -> tuple[ModuleType, ModuleType]:
    """(messages, services) of bench/etcd_kv.proto: `messages.PutRequest`, ...,
    `services.KVStub`, `services.MaintenanceStub`."""
    messages, services = grpc.protos_and_services("bench/etcd_kv.proto")
    return messages, services


def etcd_binary() -> str | None:
    """The path of the etcd server binary, or None when it is not installed."""
    return shutil.which(ETCD_BINARY)


@dataclass(frozen=True)
class EtcdMember:
    """One member: its name and its client and peer ports on 127.0.0.1."""

    name: str
    client_port: int
    peer_port: int

    @property
    def client_url(self) -> str:
        """http://127.0.0.1:<client port>."""
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        """http://127.0.0.1:<peer port>."""
        return f"http://127.0.0.1:{self.peer_port}"

    @property
    def address(self) -> str:
        """The gRPC target of its client port."""
        return f"127.0.0.1:{self.client_port}"


def command_lines(binary: str, members: list[EtcdMember], data_root: Path, token: str) -> list[list[str]]:
    """The command line of every member of a new cluster of `members`."""
    initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
    return [
        [binary, "--name", m.name, "--data-dir", str(data_root / m.name),
         "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
         "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
         "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", token,
         "--logger", "zap", "--log-outputs", "stderr", "--log-level", "error"]
        for m in members
    ]  # fmt: skip


class EtcdCluster:
    """A running 3-member etcd (`start()` returns once it has a leader all members agree on).

    Attributes:
        members: the members, in start order.
        leader: the member that leads (its client port is where the benchmark sends writes,
            as a dledger client sends to its leader).
    """

    def __init__(self, binary: str, size: int = 3) -> None:
        self.binary = binary
        self.workdir = Path(tempfile.mkdtemp(prefix="dledger-bench-etcd-"))
        ports = free_ports(2 * size)
        self.members = [EtcdMember(f"e{k}", ports[2 * k], ports[2 * k + 1]) for k in range(size)]
        self.leader: EtcdMember | None = None
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []

    def start(self, timeout_s: float = 60.0) -> EtcdMember:
        """Start every member and wait until all report the same leader; the leader.
        Raises RuntimeError (after stopping the members) when a member exits or no leader
        is agreed on within `timeout_s`."""
        token = f"dledger-bench-{uuid.uuid4().hex[:8]}"
        argvs = command_lines(self.binary, self.members, self.workdir, token)
        for member, argv in zip(self.members, argvs, strict=True):
            log = open(self.workdir / f"{member.name}.log", "wb")  # noqa: SIM115 (closed in stop)
            self._logs.append(log)
            self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        try:
            self.leader = self._wait_leader(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.leader

    def _wait_leader(self, timeout_s: float) -> EtcdMember:
        deadline = time.monotonic() + timeout_s
        while True:
            for member, process in zip(self.members, self.processes, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(f"etcd member {member.name} exited with {process.returncode}: {self.log_tail()}")
            statuses = [member_status(m.address) for m in self.members]
            leaders = {status[1] if status is not None else 0 for status in statuses}
            if len(leaders) == 1 and (leader := leaders.pop()) != 0:
                for member, status in zip(self.members, statuses, strict=True):
                    if status is not None and status[0] == leader:
                        return member
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd elected no leader in {timeout_s:.0f} s: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, chars: int = 600) -> str:
        """The last `chars` characters of every member's log."""
        tails = []
        for m in self.members:
            path = self.workdir / f"{m.name}.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            tails.append(f"[{m.name}] {text[-chars:].strip()}")
        return " ".join(tails)

    def stop(self) -> None:
        """Stop every member (SIGTERM, then SIGKILL after 10 s) and remove the data. Idempotent."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        reap(self.processes)
        for log in self._logs:
            log.close()
        self.processes, self._logs = [], []
        shutil.rmtree(self.workdir, ignore_errors=True)


def status(address: str) -> Any | None:
    """The member's Maintenance/Status answer, or None when it does not answer."""
    messages, services = etcd_api()
    with grpc.insecure_channel(address) as channel:
        try:
            return services.MaintenanceStub(channel).Status(messages.StatusRequest(), timeout=STATUS_TIMEOUT_S)
        except grpc.RpcError:
            return None


def member_status(address: str) -> tuple[int, int] | None:
    """(its member id, the leader it knows: 0 for none), or None when it does not answer."""
    answer = status(address)
    return None if answer is None else (int(answer.header.member_id), int(answer.leader))


def member_version(address: str) -> str:
    """The etcd version the member reports ("?" when it does not answer)."""
    answer = status(address)
    return str(answer.version) if answer is not None else "?"
