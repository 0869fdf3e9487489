"""LocalCluster: N `dledger server` child processes on loopback, supervised from one
process (what `dledger cluster` runs, and what the e2e tests drive: start, SIGKILL,
restart, wipe, ask for metadata)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any

from dledger.client.interrupts import DeferredCtrlC
from dledger.config import StoreConfig
from dledger.security.tls import TlsConfig
from dledger.server import SERVING_LOG
from dledger.store import IDENTITY_FILE, holds_store, lock_holder
from dledger.transport.convert import pb, pb_grpc
from dledger.transport.grpc_client import open_channel

CommandLine = Callable[[list[str]], list[str]]

STOP_TIMEOUT_S = 15.0
"""How long a member gets to shut down after SIGTERM before it is killed."""
SERVING_MARK = f" {SERVING_LOG} "
"""What a member's log line says once its port is bound (`dledger.server`)."""


def store_args(settings: Mapping[str, Any]) -> list[str]:
    """The `dledger server` options that set these store settings (StoreConfig field
    name -> value; None: leave it to the member), e.g. `{"data_file_size": 8 << 20}` ->
    `["--segment-size", "8388608"]`.

    Raises:
        ValueError: a setting that has no command-line option (metadata "cli").
    """
    options = {f.name: f.metadata["cli"] for f in fields(StoreConfig) if "cli" in f.metadata}
    args: list[str] = []
    for name in sorted(settings, key=list(options).index):  # field order
        if settings[name] is not None:
            args += [options[name], str(settings[name])]
    return args


@dataclass
class Member:
    """One member of the local cluster."""

    id: str
    port: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    serving: bool = False
    """Its output said it serves (its port is bound: answers there are its own); seen
    only when the output is echoed (no log_dir)."""

    @property
    def alive(self) -> bool:
        """True while its process runs."""
        return self.process is not None and self.process.poll() is None


class LocalCluster:
    """A group of `dledger server` processes with ids n0..n<N-1> on consecutive ports.

    Args:
        nodes: how many members.
        group: the Raft group.
        host: the address they listen on.
        base_port: n<k> listens on base_port + k (or on `ports[k]`).
        store_base_dir: every member's log goes to DIR/dledger-n<k>.
        extra_args: more `dledger server` options for every member.
        metrics_base_port: n<k> serves metrics on this + k.
        command_line: turns server options into the command to run.
        log_dir: write each member's output to LOG_DIR/n<k>.log instead of echoing it
            with an [n<k>] prefix.
        ports: explicit ports (overrides base_port).
        tls_dir: a `dledger certs init` directory: members speak mutual TLS with
            `<id>.crt`, and the supervisor asks them with `client-admin.crt`.
    """

    def __init__(
        self,
        *,
        nodes: int,
        group: str,
        host: str,
        base_port: int,
        store_base_dir: str | Path,
        extra_args: Sequence[str],
        command_line: CommandLine,
        metrics_base_port: int | None = None,
        log_dir: Path | None = None,
        ports: Sequence[int] | None = None,
        tls_dir: Path | None = None,
    ) -> None:
        ports = list(ports) if ports is not None else [base_port + k for k in range(nodes)]
        self.group = group
        self.host = host
        self.store_base_dir = Path(store_base_dir)
        self.extra_args = list(extra_args)
        self.metrics_base_port = metrics_base_port
        self.command_line = command_line
        self.log_dir = log_dir
        self.members = {f"n{k}": Member(f"n{k}", ports[k]) for k in range(nodes)}
        # a fresh base directory founds a new group; any member's store or identity
        # there means the group exists (a member without one rejoins: a lost disk)
        self.initial_cluster_state = "existing" if self._group_exists() else "new"
        self.peers = ";".join(f"{m.id}-{host}:{m.port}" for m in self.members.values())
        self._channels: dict[str, Any] = {}
        self.tls_dir = tls_dir
        self.client_tls = TlsConfig.in_directory(tls_dir, "client-admin") if tls_dir is not None else None
        self._credentials: Any = None
        self._stop = threading.Event()
        self._signalled = False  # set by the signal handlers (no lock there: see _on_signal)
        self.output_closed = False  # our stdout's reader went away (`| head`)
        self._pumps: list[threading.Thread] = []

    # -- processes

    def _group_exists(self) -> bool:
        for member_id in self.members:
            node = self.store_base_dir / f"dledger-{member_id}"
            if holds_store(node) or (node / IDENTITY_FILE).exists():
                return True
        return False

    def server_args(self, member_id: str) -> list[str]:
        """The `dledger server` options of a member."""
        args = ["-g", self.group, "-i", member_id, "-p", self.peers, "-s", str(self.store_base_dir)]
        args += ["--initial-cluster-state", self.initial_cluster_state]
        if self.metrics_base_port is not None:
            args += ["--metrics-port", str(self.metrics_base_port + int(member_id[1:]))]
        if self.tls_dir is not None:
            tls = TlsConfig.in_directory(self.tls_dir, member_id)
            args += ["--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca]
        return args + self.extra_args

    def start(self, member_id: str) -> Member:
        """Start a member's process (in its own session: a terminal's Ctrl-C reaches
        only the supervisor, which then stops every member once)."""
        member = self.members[member_id]
        if member.alive:
            raise RuntimeError(f"{member_id} is already running")
        command = self.command_line(self.server_args(member_id))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        member.serving = False
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            member.log_path = self.log_dir / f"{member_id}.log"
            with open(member.log_path, "ab") as log_file:
                member.process = subprocess.Popen(
                    command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
        else:
            member.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            assert member.process.stdout is not None
            pump = threading.Thread(
                target=_pump,
                args=(member.process.stdout, member, self._on_output_closed),
                name=f"log-{member_id}",
                daemon=True,
            )
            pump.start()
            self._pumps.append(pump)
        return member

    def running_elsewhere(self) -> dict[str, int]:
        """Members whose store directory is locked by a running writer (another
        `dledger cluster` or `server`), with the holder's pid (0 when unknown)."""
        held = {}
        for member_id in self.members:
            pid = lock_holder(self.store_base_dir / f"dledger-{member_id}")
            if pid is not None:
                held[member_id] = pid
        return held

    def start_all(self) -> None:
        """Start every member that is not running."""
        for member_id, member in self.members.items():
            if not member.alive:
                self.start(member_id)

    def signal(self, member_id: str, signum: int) -> None:
        """Send `signum` to a member's process (SIGKILL, SIGSTOP, SIGCONT...)."""
        member = self.members[member_id]
        if member.alive:
            assert member.process is not None
            member.process.send_signal(signum)

    def kill(self, member_id: str) -> None:
        """SIGKILL a member and reap it."""
        member = self.members[member_id]
        if member.process is not None:
            if member.alive:
                member.process.kill()
            member.process.wait()
        self._drop_channel(member_id)

    def stop(self, member_id: str, timeout_s: float = STOP_TIMEOUT_S, *, send: bool = True) -> int | None:
        """SIGTERM a member (a clean shutdown; `send=False`: it was sent already) and wait;
        SIGKILL it after `timeout_s`. Returns its exit status (None if never started)."""
        member = self.members[member_id]
        if member.process is None:
            return None
        if member.alive:
            if send:
                member.process.send_signal(signal.SIGCONT)  # a paused member could not exit
                member.process.terminate()
            try:
                member.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                member.process.kill()
                member.process.wait()
        self._drop_channel(member_id)
        return member.process.returncode

    def wipe(self, member_id: str) -> None:
        """Delete a (stopped) member's store directory."""
        if self.members[member_id].alive:
            raise RuntimeError(f"{member_id} is running")
        shutil.rmtree(self.store_base_dir / f"dledger-{member_id}", ignore_errors=True)

    def shutdown(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int | None]:
        """Stop every member (SIGTERM to all at once, then wait); returns exit statuses."""
        for member in self.members.values():
            if member.alive:
                assert member.process is not None
                member.process.send_signal(signal.SIGCONT)
                member.process.terminate()
        statuses = {member_id: self.stop(member_id, timeout_s, send=False) for member_id in self.members}
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        return statuses

    # -- talking to members

    def address(self, member_id: str) -> str:
        return f"{self.host}:{self.members[member_id].port}"

    def channel(self, member_id: str) -> Any:
        """A (cached) gRPC channel to a member."""
        channel = self._channels.get(member_id)
        if channel is None:
            if self.client_tls is not None and self._credentials is None:
                self._credentials = self.client_tls.channel_credentials()
            channel = self._channels[member_id] = open_channel(self.address(member_id), credentials=self._credentials)
        return channel

    def _drop_channel(self, member_id: str) -> None:
        channel = self._channels.pop(member_id, None)
        if channel is not None:
            channel.close()

    def metadata(self, member_id: str, timeout_s: float = 1.0) -> Any | None:
        """A member's Metadata answer, or None when it does not answer."""
        if not self.members[member_id].alive:
            return None
        try:
            with DeferredCtrlC():  # a blocking call cut by Ctrl-C would hang the channel's close
                return pb_grpc.LedgerStub(self.channel(member_id)).Metadata(pb.MetadataRequest(), timeout=timeout_s)
        except Exception:  # grpc.RpcError: not up (yet), or gone
            return None

    def find_leader(self) -> tuple[str, int] | None:
        """(id, term) of the member that says it leads, in the highest term; None if
        no live member leads."""
        best: tuple[str, int] | None = None
        for member_id, member in self.members.items():
            if not member.alive:
                continue
            answer = self.metadata(member_id, 0.5)
            if answer is not None and answer.role == "LEADER" and (best is None or answer.term > best[1]):
                best = (member_id, answer.term)
        return best

    def wait_leader(self, timeout_s: float, exclude: Sequence[str] = ()) -> tuple[str, int] | None:
        """Poll until a live member (not in `exclude`) leads; None after `timeout_s` or
        `request_stop`."""
        deadline = time.monotonic() + timeout_s
        while not self.stopping:
            found = self.find_leader()
            if found is not None and found[0] not in exclude:
                return found
            if time.monotonic() >= deadline:
                return None
            self._stop.wait(0.1)
        return None

    # -- the `dledger cluster` loop

    def request_stop(self) -> None:
        """Make `run` / `wait_leader` return (from any thread; not from a signal handler:
        see `_on_signal`)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether `run` / `wait_leader` were asked to return."""
        return self._stop.is_set() or self._signalled

    def _on_signal(self, *_: object) -> None:
        # Only a flag: the loops look at it at least every 0.5 s. Event.set() from a
        # handler hung `cluster` for good when a second signal came while the first
        # handler held the Event's lock (helper D, `timeout ... | head`).
        self._signalled = True

    def _on_output_closed(self) -> None:
        """Our stdout's reader went away (`dledger cluster | head`): stop the members
        rather than leave them running without their supervisor, quietly."""
        if not self.output_closed:
            self.output_closed = True
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            self.request_stop()

    def _say(self, text: str) -> None:
        self._print(f"[cluster] {text}")

    def _print(self, text: str) -> None:
        try:
            print(text, flush=True)
        except OSError:  # a closed pipe (`| head`): the members are stopped all the same
            self._on_output_closed()

    def ports_in_use(self) -> list[str]:
        """The members' ports (service, metrics) something else listens on already, as
        `port N (n<k>)`."""
        wanted = [(m.port, m.id) for m in self.members.values()]
        if self.metrics_base_port is not None:
            wanted += [(self.metrics_base_port + k, f"n{k} metrics") for k in range(len(self.members))]
        host = self.host.strip("[]")
        taken = []
        for port, owner in wanted:
            probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            try:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    taken.append(f"port {port} ({owner})")
            finally:
                probe.close()
        return taken

    def _refusal(self) -> str | None:
        """Why the members cannot start here (None: they can)."""
        busy = self.running_elsewhere()
        if busy:
            held = ", ".join(f"{member_id} (pid {pid or '?'})" for member_id, pid in busy.items())
            return f"members of {self.store_base_dir} are running already: {held}"
        taken = self.ports_in_use()
        if taken:
            return f"{', '.join(taken)} already in use (another cluster or server?): nothing started"
        return None

    def own_leader(self) -> tuple[str, int] | None:
        """`find_leader`, but only a member that is ours: once it said it serves (its
        port is bound by it), when its output is echoed. Another process on its port
        (another cluster) is never taken for it."""
        found = self.find_leader()
        if found is None or (self.log_dir is None and not self.members[found[0]].serving):
            return None
        return found

    def _reap(self, exited: dict[str, int | None]) -> None:
        """Note the members that exited (into `exited`), each said once."""
        for member_id, member in self.members.items():
            if member.process is not None and not member.alive and member.process.returncode is not None:
                exited[member_id] = code = member.process.returncode
                self._say(f"{member_id} exited with status {code} (its log above says why)")
                member.process = None

    def run(self) -> int:
        """Start every member, report the leader, supervise until SIGINT / SIGTERM, then
        stop every member cleanly. Returns the exit status for the command: 1 with one
        `error:` line on stderr when members could not start or exited."""
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        refusal = self._refusal()
        if refusal is not None:
            print(f"error: cannot start: {refusal}", file=sys.stderr, flush=True)
            return 1
        count = len(self.members)
        self._say(f"starting {count} member{'s' if count != 1 else ''} of group {self.group}: {self.peers}")
        self._say(f"data in {self.store_base_dir.resolve()}")
        exited: dict[str, int | None] = {}
        leader: tuple[str, int] | None = None
        try:  # whatever ends the loop, the members are stopped: none is left without us
            self.start_all()
            leader = self._supervise(exited)
        finally:
            self._say("stopping every member (flush + checkpoint)...")
            statuses = {**self.shutdown(), **exited}
            self._say("stopped: " + ", ".join(f"{k}={statuses[k]}" for k in self.members))
        if self.output_closed:
            return 1  # quietly, as every command whose reader went away
        if not exited:
            return 0
        said = ", ".join(f"{k} (status {v})" for k, v in exited.items())
        when = "at start" if leader is None else "while running"
        who = "members" if len(exited) > 1 else "member"
        print(f"error: {who} exited {when}: {said}; their output above says why", file=sys.stderr, flush=True)
        return 1

    def _supervise(self, exited: dict[str, int | None]) -> tuple[str, int] | None:
        """Report the leader as it changes until asked to stop or no member runs (those
        that exited go into `exited`); the last leader reported."""
        leader: tuple[str, int] | None = None
        while not self.stopping:
            self._reap(exited)
            if not any(m.alive for m in self.members.values()):
                self._say("no member is running")
                break
            current = self.own_leader()
            if current is not None and current != leader:
                self._print(f"leader: {current[0]} (term {current[1]})")
                if leader is None:
                    self._print_usage()
                leader = current
            self._stop.wait(0.5)
        return leader

    def _print_usage(self) -> None:
        peers = self.peers
        if self.client_tls is not None:
            tls = self.client_tls
            self._print(
                "mutual TLS: client certificates client-admin / client-writer / client-reader in "
                f"{self.tls_dir}; for example:\n"
                f"  export DLEDGER_TLS_CERT={tls.cert} DLEDGER_TLS_KEY={tls.key} DLEDGER_TLS_CA={tls.ca}"
            )
        self._print(
            "from another terminal:\n"
            f'  .venv/bin/dledger append -g {self.group} -p "{peers}" -d hello\n'
            f'  .venv/bin/dledger get -g {self.group} -p "{peers}" -i 0\n'
            f'  .venv/bin/dledger status -g {self.group} -p "{peers}"\n'
            "Ctrl-C stops the cluster; run the same command again to resume from the same data."
        )


def _pump(stream: IO[bytes], member: Member, on_closed: Callable[[], None]) -> None:
    """Copy a member's output to ours, line by line, with an [id] prefix; mark the member
    serving when it says so. When our stdout fails (its reader went away) it tells
    `on_closed` and goes on reading, so that the member never blocks on a full pipe."""
    for line in iter(stream.readline, b""):
        text = line.decode(errors="replace")
        if SERVING_MARK in text:
            member.serving = True
        try:
            sys.stdout.write(f"[{member.id}] {text}")
            sys.stdout.flush()
        except (OSError, ValueError):  # a closed pipe, or stdout closed meanwhile
            on_closed()
    stream.close()
