"""Members as real `dledger server` processes: start (with `--initial-cluster-state` and
`--repair` when the server has them), SIGKILL, SIGSTOP / SIGCONT, wipe, torn tail, and
a guaranteed cleanup (`close`, also on errors and Ctrl-C).

Without a `Network` the members listen on free 127.0.0.1 ports; with one, each runs in
its own network namespace (`ip netns exec`) on its bridge address.
"""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from dledger.cli.cluster_runner import LocalCluster
from dledger.cli.server_cmds import server_command_line
from dledger.store import DATA_DIR, INDEX_DIR, decode_index_unit, is_segment_name, load_checkpoint
from tests.chaos.history import History
from tests.chaos.netns import Network
from tests.e2e.harness import free_ports

NETNS_PORT = 20911
STARTUP_S = 60.0
"""How long a started member gets to answer Metadata (a loaded 2-core machine)."""
TORN_BELOW_COMMITTED = 16 << 10
"""A torn tail reaches this many bytes below the entry the checkpoint calls committed."""
TORN_MIN = 64 << 10
"""...and is at least this long (the issue's reproduction damaged the last 64 KiB)."""


@functools.cache
def server_flags() -> frozenset[str]:
    """The options of this issue that `dledger server --help` lists (detected once)."""
    result = subprocess.run(server_command_line(["--help"]), capture_output=True, text=True, timeout=120)
    return frozenset(flag for flag in ("--initial-cluster-state", "--repair") if flag in result.stdout)


class ChaosCluster(LocalCluster):
    """Three (or `nodes`) members for one chaos run; every start, fault and restart is
    recorded in `history`.

    Args:
        workdir: stores under workdir/data, logs under workdir/logs.
        history: where events go.
        flush: `async` or `sync`.
        heartbeat_ms: the members' heartbeat interval.
        network: run each member in its namespace (partition schedules).
    """

    def __init__(
        self,
        workdir: Path,
        history: History,
        *,
        flush: str,
        heartbeat_ms: int = 500,
        nodes: int = 3,
        network: Network | None = None,
    ) -> None:
        self.network = network
        self.history = history
        extra = ["--heartbeat-ms", str(heartbeat_ms), "--segment-size", "8MiB", "--flush-mode", flush]
        extra += ["--log-level", "INFO"]
        if network is not None:
            extra.append("--insecure")  # plaintext on bridge addresses that exist only in the sandbox
        ports = [NETNS_PORT] * nodes if network is not None else free_ports(nodes)
        super().__init__(
            nodes=nodes,
            group="chaos",
            host="127.0.0.1",
            base_port=0,
            ports=ports,
            store_base_dir=workdir / "data",
            extra_args=extra,
            command_line=self._command,
            log_dir=workdir / "logs",
        )
        if network is not None:
            self.peers = ";".join(f"{m}-{network.address(m)}:{NETNS_PORT}" for m in self.members)
        self.lives = dict.fromkeys(self.members, 0)
        self.repair_next: set[str] = set()
        self.found_next: set[str] = set()  # told `new` on their next start (an operator's slip)

    def _command(self, args: list[str]) -> list[str]:
        member = args[args.index("-i") + 1]
        prefix = self.network.exec_prefix(member) if self.network is not None else []
        return [*prefix, *server_command_line(args)]

    def address(self, member_id: str) -> str:
        """Where a member listens."""
        if self.network is not None:
            return f"{self.network.address(member_id)}:{NETNS_PORT}"
        return super().address(member_id)

    def server_args(self, member_id: str) -> list[str]:
        """The member's options, plus `--initial-cluster-state new` on its first start,
        `existing` on later ones (`new` again when `found_next` says so), and `--repair`
        after its store was damaged."""
        args = _without_option(super().server_args(member_id), "--initial-cluster-state")  # the harness decides
        flags = server_flags()
        if "--initial-cluster-state" in flags:
            existing = self.lives[member_id] and member_id not in self.found_next
            args += ["--initial-cluster-state", "existing" if existing else "new"]
        if "--repair" in flags and member_id in self.repair_next:
            args.append("--repair")
        return args

    def node_dir(self, member_id: str) -> Path:
        """A member's store directory."""
        return self.store_base_dir / f"dledger-{member_id}"

    # -- lifecycle

    def launch(self) -> None:
        """Start every member for the first time (new ports on a port race)."""
        for _attempt in range(5):
            for member_id in self.members:
                self.start(member_id)
            if all(self.wait_answers(m) for m in self.members):
                return
            for member_id in self.members:
                self.kill(member_id)
            if self.network is not None:
                break
            for member, port in zip(self.members.values(), free_ports(len(self.members)), strict=True):
                member.port = port
            self.peers = ";".join(f"{m.id}-{self.host}:{m.port}" for m in self.members.values())
            for member_id in self.members:
                self.lives[member_id] = 0
        raise RuntimeError(f"the cluster did not start; logs in {self.log_dir}")

    def start(self, member_id: str) -> Any:
        """Start a member's process (a new life)."""
        member = super().start(member_id)
        self.lives[member_id] += 1
        self.repair_next.discard(member_id)
        self.found_next.discard(member_id)
        return member

    def wait_answers(self, member_id: str, timeout_s: float = STARTUP_S) -> bool:
        """True once a member answers Metadata; False if it exits or stays silent."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.members[member_id].alive:
                return False
            if self.metadata(member_id, 1.0) is not None:
                return True
            time.sleep(0.1)
        return False

    def restart(self, member_id: str, *, measure: bool = False) -> bool:
        """Start a stopped member again; True once it answers (False: it exited or stays
        silent, recorded in the history). `measure`: unavailability counts from the start."""
        repairing = member_id in self.repair_next and "--repair" in server_flags()
        self.start(member_id)
        self.history.event(f"start {member_id}{' --repair' if repairing else ''}", measure=measure)
        up = self.wait_answers(member_id)
        self.history.event(f"{member_id} {'answers' if up else 'did not come back'}")
        return up

    def sigkill(self, member_id: str, *, measure: bool = False) -> None:
        """SIGKILL a member (resumed first if paused, so it dies at once) and reap it."""
        self.signal(member_id, signal.SIGKILL)
        self.kill(member_id)
        self.history.event(f"kill -9 {member_id}", measure=measure)

    def pause(self, member_id: str, *, measure: bool = False) -> None:
        """SIGSTOP a member."""
        self.signal(member_id, signal.SIGSTOP)
        self.history.event(f"kill -STOP {member_id}", measure=measure)

    def resume(self, member_id: str, *, measure: bool = False) -> None:
        """SIGCONT a member."""
        self.signal(member_id, signal.SIGCONT)
        self.history.event(f"kill -CONT {member_id}", measure=measure)

    def wipe(self, member_id: str) -> None:
        """Delete a stopped member's whole node directory (a lost disk)."""
        super().wipe(member_id)
        self.history.event(f"wipe {member_id}")

    def tear_tail(self, member_id: str, seed: int = 0) -> str:
        """Damage the end of a stopped member's last data segment, from a little below the
        entry its checkpoint calls committed (more than the last flush can have missed),
        with random bytes; the next start passes `--repair` when the server has it."""
        if self.members[member_id].alive:
            raise RuntimeError(f"{member_id} is running")
        start, end, path = torn_range(self.node_dir(member_id))
        with open(path, "r+b") as segment:
            segment.seek(start)
            segment.write(random.Random(seed).randbytes(end - start))
            segment.flush()
            os.fsync(segment.fileno())
        self.repair_next.add(member_id)
        what = f"tear {member_id}'s tail: {end - start} bytes at {start} of {path.name}"
        self.history.event(what)
        return what

    def close(self) -> None:
        """Kill every member (resumed first) and reap it: nothing outlives the run."""
        for member_id, member in self.members.items():
            if member.alive:
                self.signal(member_id, signal.SIGCONT)
            self.kill(member_id)
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()


def _without_option(args: list[str], option: str) -> list[str]:
    """`args` without `option` and its value (a LocalCluster that passes one itself)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            kept.append(arg)
    return kept


def _segments(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if is_segment_name(p.name))


def torn_range(node_dir: Path) -> tuple[int, int, Path]:
    """(start, end, file) of the bytes a torn tail damages: the written part of the last
    data segment that holds any from `TORN_BELOW_COMMITTED` below the checkpoint's committed entry (at
    least the last `TORN_MIN` bytes), never before the segment's start."""
    last, end = None, 0
    for segment in reversed(_segments(node_dir / DATA_DIR)):  # skip spare, still empty segments
        last, end = segment, len(segment.read_bytes().rstrip(b"\0"))
        if end:
            break
    if last is None:
        raise RuntimeError(f"{node_dir} has no data segment")
    base = int(last.name)
    start = max(0, end - TORN_MIN)
    committed = load_checkpoint(node_dir).committed
    pos = _entry_pos(node_dir, committed) if committed >= 0 else None
    if pos is not None and pos - base - TORN_BELOW_COMMITTED < start:
        start = max(0, pos - base - TORN_BELOW_COMMITTED)
    if end <= start:
        raise RuntimeError(f"{last} holds nothing to tear")
    return start, end, last


def _entry_pos(node_dir: Path, index: int) -> int | None:
    """Where entry `index` starts in the data, from the index files (None: not found)."""
    offset = index * 32
    for segment in reversed(_segments(node_dir / INDEX_DIR)):
        base = int(segment.name)
        if base <= offset < base + segment.stat().st_size:
            with open(segment, "rb") as source:
                source.seek(offset - base)
                return decode_index_unit(source.read(32)).pos
    return None


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text` (leak checks: a run's
    directory appears in every member's command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if text in command and state != "Z":
            found.append(int(entry.name))
    return found
