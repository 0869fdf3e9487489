"""A wiped follower rejoining: by InstallSnapshot (snapshots on, the log compacted) or by
replaying the whole log (snapshots off), same entries, same run.

Three in-process members over gRPC on loopback, each with a small state machine (a
count and a sum of the entries, snapshotted as JSON). `--entries` entries of 128 B are
appended in batches (a snapshot every `--threshold` applied); then a follower is
stopped, its directory deleted, and it is started again
(`initial_cluster_state=existing`); the time until it has applied the leader's last
entry is measured. Modes alternate, `--rounds` times each.

    PYTHONPATH=. .venv/bin/python bench/rejoin_snapshot.py --entries 200000 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from bench._snapshots import free_port, wait_for
from dledger.config import DLedgerConfig, member_store_config
from dledger.entry import Entry
from dledger.node import DLedgerNode
from dledger.server import DLedgerServer

BODY = b"x" * 128
BATCH = 1000


class CountingMachine:
    """A count and a byte sum; its snapshot is two numbers."""

    def __init__(self) -> None:
        self.count = self.total = 0
        self._captured = (0, 0)

    def on_apply(self, entries: Sequence[Entry]) -> None:
        self.count += len(entries)
        self.total += sum(len(e.body) for e in entries)

    def on_snapshot_capture(self) -> None:
        self._captured = (self.count, self.total)

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        writer.write(json.dumps(self._captured).encode())

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        self.count, self.total = json.loads(reader.read())


def one_round(base: Path, entries: int, snapshots: bool, threshold: int) -> float:
    addresses = {f"n{k}": f"127.0.0.1:{free_port()}" for k in range(3)}
    peers = ";".join(f"{i}-{a}" for i, a in addresses.items())

    def config(node_id: str, **changes: Any) -> DLedgerConfig:
        return DLedgerConfig(
            group="g",
            self_id=node_id,
            peers=peers,
            store_base_dir=str(base),
            store=member_store_config(),
            preferred_leader_ids="n0",
            enable_snapshot=snapshots,
            snapshot_threshold=threshold,
            heart_beat_time_interval_ms=300,  # the rejoining member hears the leader soon,
            max_heart_beat_leak=10,  # and a busy leader is not deposed while the log fills
            **changes,
        )

    def start(node_id: str, **changes: Any) -> DLedgerServer:
        def factory(cfg: DLedgerConfig, transport: Any) -> DLedgerNode:
            return DLedgerNode(cfg, transport, state_machine=CountingMachine())

        return DLedgerServer(config(node_id, **changes), node_factory=factory).start()

    servers = {node_id: start(node_id) for node_id in addresses}
    try:
        leader = servers["n0"].node
        assert leader is not None
        wait_for(lambda: leader.is_leader, "n0 to lead", 60)
        for _ in range(0, entries, BATCH):
            leader.append([BODY] * BATCH).result(60)
        end = leader.store.end_index
        wait_for(
            lambda: all(s.node is not None and s.node.applied_index >= end for s in servers.values()), "apply", 600
        )
        if snapshots:
            wait_for(lambda: leader.store.begin_index != 0, "compaction", 60)
        servers.pop("n2").shutdown(grace_s=0.5)
        shutil.rmtree(config("n2").default_path)
        start_s = time.perf_counter()
        servers["n2"] = start("n2", initial_cluster_state="existing")
        follower = servers["n2"].node
        assert follower is not None
        wait_for(lambda: follower.applied_index >= end, "the wiped follower to catch up", 1800)
        return time.perf_counter() - start_s
    finally:
        for server in servers.values():
            server.shutdown(grace_s=0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threshold", type=int, default=100_000, help="snapshotThreshold")
    args = parser.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for snapshots in (True, False):
            with tempfile.TemporaryDirectory() as base:
                times[snapshots].append(one_round(Path(base), args.entries, snapshots, args.threshold))
    install, replay = statistics.median(times[True]), statistics.median(times[False])
    head = f"{args.entries} entries of {len(BODY)} B, snapshotThreshold {args.threshold}"
    print(f"{head}, {args.rounds} rounds alternating, medians:")
    print(f"  rejoin by InstallSnapshot (log compacted): {install:8.2f} s")
    print(f"  rejoin by replaying the log:               {replay:8.2f} s")
    print(f"  replay / install: {replay / install:.1f}x")


if __name__ == "__main__":
    main()
