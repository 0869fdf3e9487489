"""Two histories of one group, with real `dledger server` processes on loopback (helper
F1): what a member of the earlier history does when it comes back, and what it costs.

Three members write `--old` entries (with `--second-term`, half of them after the first
leader was restarted, so that the earlier history holds two terms). All three stop; n0
and n1 lose their directories and are started with `--initial-cluster-state new` while
n2 is down, so they found the group again, and write `--new` entries. Then n2 comes back.
Printed: the CPU seconds each member used in the `--window` seconds after that, n2's
role and last entries, whether the group still takes writes, and each member's ERROR
lines. `--dledger` picks the server command (a checkout of another revision, to compare).

    PYTHONPATH=. .venv/bin/python bench/refound_probe.py --second-term
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench._snapshots import free_port
from dledger.client.client import DLedgerClient

IDS = ("n0", "n1", "n2")


class Group:
    """The three server processes; logs in `<work>/<id>.log`."""

    def __init__(self, dledger: str, work: Path) -> None:
        self.dledger, self.work = dledger, work
        self.peers = ";".join(f"{i}-127.0.0.1:{free_port()}" for i in IDS)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, member: str) -> None:
        with open(self.work / f"{member}.log", "ab") as log:
            command = [self.dledger, "server", "-g", "g", "-i", member, "-p", self.peers]
            command += ["-s", str(self.work / "store"), "--segment-size", "4MiB"]
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the server's own package
            self.procs[member] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)

    def stop(self, member: str) -> None:
        self.procs[member].send_signal(signal.SIGTERM)
        self.procs[member].wait(60)

    def cpu_s(self, member: str) -> float:
        fields = Path(f"/proc/{self.procs[member].pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def client(self, members: tuple[str, ...] = IDS) -> DLedgerClient:
        peers = ";".join(p for p in self.peers.split(";") if p.split("-")[0] in members)
        return DLedgerClient(peers, "g", timeout_s=60)

    def write(self, prefix: str, count: int, members: tuple[str, ...] = IDS) -> int:
        with self.client(members) as client:
            return [client.append(f"{prefix}-{k}".encode()) for k in range(count)][-1]

    def leader(self) -> str:
        with self.client() as client:
            return next(m.node_id for m in client.status() if m.role == "LEADER")


def run(args: argparse.Namespace, work: Path) -> None:
    group = Group(args.dledger, work)
    for member in IDS:
        group.start(member)
    try:
        if args.second_term:
            group.write("old", args.old // 2)
            leader = group.leader()
            group.stop(leader)
            group.start(leader)
            group.write("old2", args.old - args.old // 2)
        else:
            group.write("old", args.old)
        for member in IDS:
            group.stop(member)
        for member in ("n0", "n1"):
            shutil.rmtree(work / "store" / f"dledger-{member}")
            group.start(member)  # `new` is the default
        group.write("new", args.new, ("n0", "n1"))
        group.start("n2")
        time.sleep(args.settle)
        before = {m: group.cpu_s(m) for m in IDS}
        time.sleep(args.window)
        used = {m: round(group.cpu_s(m) - before[m], 2) for m in IDS}
        print(f"CPU seconds in {args.window:g} s: {used}")
        print("the group still writes: last index", group.write("later", 5, ("n0", "n1")))
        with group.client() as client:
            n2 = client.metadata("n2")
            print(f"n2: {n2.role}, term {n2.term}, committed {n2.committed_index}")
            tail = client.get(max(0, n2.committed_index - 4), 5, node_id="n2")
            print("n2's last entries:", [entry.body for entry in tail])
    finally:
        for member in group.procs:
            if group.procs[member].poll() is None:
                group.stop(member)
    for member in IDS:
        errors = [line for line in (work / f"{member}.log").read_text().splitlines() if " ERROR " in line]
        print(f"{member}: {len(errors)} ERROR lines", *(f"\n  {line[:200]}" for line in errors[:2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dledger", default=str(Path(".venv/bin/dledger").resolve()), help="the server command")
    parser.add_argument("--old", type=int, default=200, help="entries of the earlier history")
    parser.add_argument("--new", type=int, default=300, help="entries of the new founding")
    parser.add_argument("--second-term", action="store_true", help="the earlier history holds two terms")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after n2 is back before measuring")
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="refound-") as work:
        run(args, Path(work))


if __name__ == "__main__":
    main()
