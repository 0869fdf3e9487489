"""Power loss in the snapshot simulation (tests/sim/snapshots.py): `PowerSim`.

The members' stores are `SyncMmapLogStore`s (an entry is acknowledged once durable, so a
power loss loses nothing committed and the committed-log invariants stay exact), their
segment files are modelled by `tests.sim.disk.NodeDisk` (msyncs observed) and their
snapshot files by `tests.sim.snapshot_disk.SnapshotDisk` (every create, fsync, mkdir,
rename and delete observed). A power loss takes the member down like a crash, then
reverts both to what had been made durable, with a torn part of the rest.

Besides the crashes of `SnapshotSim`, power fails:

- at random steps, on one member (a majority stays up);
- during a save: at a random file operation of `begin_save` / the state machine's
  write / `commit` (tmp/ written but not fsynced, meta written, before or after the
  rename, before the directory fsync, during retention);
- around compaction: at the prefix reset's first msync (its `reset` file is written,
  segments may be deleted, the head blank not yet durable), or right after it;
- during an install: at a random file operation of the receiving side (install_tmp/
  created, data written but not fsynced, publishing) or at the first msync of the log
  reset that follows it.

After each the member restarts (recovery, the newest snapshot that verifies, the log)
and every invariant of the simulation must still hold, including the state machine's.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dledger.raft.messages import InstallSnapshotStream, RequestOrResponse
from dledger.store.mmap_store import MmapLogStore, SyncMmapLogStore
from tests.sim.disk import NodeDisk, SimCrash, register_disk, traced_segment_lists, unregister_disk
from tests.sim.snapshot_disk import SnapshotDisk, TracingFileOps, snapshot_disk, traced_snapshot_files
from tests.sim.snapshots import Faults, SimMember, SnapshotSim

MAX_SAVE_OPS = 12  # a save makes 10-12 file operations (with retention); beyond: no crash
MAX_INSTALL_OPS = 16
SECTOR = 512
"""Torn segment writes are cut at sector boundaries here (disks write a sector
atomically): a reset's head-blank header, rewritten in place at a segment's start, is
then either old or new. Cut at any byte (tests/sim/harness.py's model, made for
appended tails), a header with the blank's magic and a torn length makes recovery take
the segment's first entry for a damaged one and cut the log there."""


@dataclass
class PowerFaults(Faults):
    """`Faults` plus the power losses."""

    power: float = 0.002  # per step
    power_in_save: float = 0.2  # of the saves
    power_in_install: float = 0.3  # of the installs


class PowerMember(SimMember):
    """A member whose disk can lose power."""

    sim: PowerSim

    def __init__(self, sim: SnapshotSim, node_id: str, salt: int, peers: str) -> None:
        super().__init__(sim, node_id, salt, peers)
        # its store is a SyncMmapLogStore: the core must know (no async vote hold)
        self.config.store = dataclasses.replace(self.config.store, flush_mode="sync")
        self.disk = NodeDisk(self.dir, atom=SECTOR)
        register_disk(self.disk)
        self.snap_disk: SnapshotDisk = snapshot_disk(self.dir)

    def open(self) -> None:
        self.disk.crashed = self.disk.crash_armed = False
        super().open()
        store, disk = self.store, self.disk
        assert store is not None
        write_checkpoint = store.write_checkpoint

        def checkpoint_unless_dead() -> None:  # no code runs in a dead process
            if disk.crashed:
                raise SimCrash("the process is dead")
            write_checkpoint()

        store.write_checkpoint = checkpoint_unless_dead  # type: ignore[method-assign]

    def wipe(self, state: str = "existing") -> None:
        super().wipe(state)
        unregister_disk(self.disk)
        self.disk = NodeDisk(self.dir, atom=SECTOR)
        register_disk(self.disk)
        self.snap_disk.wiped()

    def power_fail(self, why: str) -> None:
        """The power fails now: the member goes down and its disk keeps only what was
        durable (plus a torn part of the rest)."""
        if self.up:
            self.crash(f"(power loss) {why}")
        rng = self.sim.rng
        torn = [report.mode for report in self.disk.power_loss(rng)]
        self.disk.crashed = self.disk.crash_armed = False
        shape = self.snap_disk.power_loss(rng)
        self.sim.stats["power_losses"] += 1
        self.sim.log(f"{self.node_id} lost power {why}: log {torn}, snapshot/ {shape}")

    def _disarm(self) -> None:
        self.snap_disk.disarm()
        self.disk.crash_armed = False

    # -- saves and compaction

    def _save(self, index: int, term: int) -> None:
        sim = self.sim
        if not sim.faults_on or sim.rng.random() >= sim.faults.power_in_save:
            super()._save(index, term)
            return
        snapshots = self.snapshots
        assert snapshots is not None
        if sim.rng.random() < 0.6:  # at one of the save's file operations, else around compaction
            self.snap_disk.arm(sim.rng.randrange(MAX_SAVE_OPS))
        try:
            self.machine.on_snapshot_capture()
            writer = snapshots.store.begin_save()
            self.machine.on_snapshot_save(writer)
            snapshot = writer.commit(index, term)
        except SimCrash as exc:
            sim.stats["power_in_save"] += 1
            self.power_fail(f"during a snapshot save of {index} ({exc})")
            return
        self.snap_disk.disarm()
        sim.stats["snapshots"] += 1
        self.disk.crash_armed = sim.rng.random() < 0.5  # at the reset's first msync
        try:
            snapshots.compact(snapshot.index, snapshot.term)
        except SimCrash as exc:
            sim.stats["power_in_compaction"] += 1
            self.power_fail(f"during compaction after snapshot {index} ({exc})")
            return
        self._disarm()
        sim.stats["power_after_compaction"] += 1
        self.power_fail(f"right after compaction to snapshot {index}")

    # -- installs

    def _receive(self, stream: InstallSnapshotStream) -> Future[RequestOrResponse]:
        sim = self.sim
        if not sim.faults_on or sim.rng.random() >= sim.faults.power_in_install:
            return super()._receive(stream)
        if sim.rng.random() < 0.7:
            self.snap_disk.arm(sim.rng.randrange(MAX_INSTALL_OPS))
        else:
            self.disk.crash_armed = True  # at the first msync of the log's reset
        try:
            answer = super()._receive(stream)
        except SimCrash as exc:
            sim.stats["power_in_install"] += 1
            self.power_fail(f"during an install ({exc})")
            died: Future[RequestOrResponse] = Future()
            died.set_exception(ConnectionError("the receiver lost power"))
            return died
        finally:
            self._disarm()
        return answer


class PowerSim(SnapshotSim):
    """`SnapshotSim` with power losses (see the module's docstring)."""

    store_class: type[MmapLogStore] = SyncMmapLogStore
    member_class = PowerMember
    faults: PowerFaults

    def __init__(
        self,
        seed: int,
        base: Path,
        faults: PowerFaults | None = None,
        file_ops: type[TracingFileOps] = TracingFileOps,
        **kwargs: Any,
    ) -> None:
        self.faults_on = True
        self._contexts = ExitStack()
        self._contexts.enter_context(traced_segment_lists())
        self._contexts.enter_context(traced_snapshot_files(file_ops))
        try:
            super().__init__(seed, base, faults=faults or PowerFaults(), **kwargs)
        except BaseException:
            self._contexts.close()
            raise
        for name in ("power_losses", "power_in_save", "power_in_compaction", "power_after_compaction"):
            self.stats[name] = 0
        self.stats["power_in_install"] = 0

    def step(self, load: bool = True, faults: bool = True) -> None:
        self.faults_on = faults  # no power loss in a save or an install while settling
        super().step(load, faults)
        if faults and self.rng.random() < self.faults.power:
            up = [m for m in self.members.values() if m.up]
            if len(up) > len(self.members) // 2:
                victim = self.rng.choice(up)
                assert isinstance(victim, PowerMember)
                victim.power_fail("at random")

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._contexts.close()


def disk_summary(sim: PowerSim) -> dict[str, int]:
    """What the run's power losses did to the snapshot files: file outcomes
    (`torn:<mode>`), crash points (`at:<operation> <path>`) and `rolled_back` namespace
    changes, summed over the members."""
    summary: dict[str, int] = {}
    for member in sim.members.values():
        assert isinstance(member, PowerMember)
        disk = member.snap_disk
        counts = [(f"torn:{k}", v) for k, v in disk.torn_modes.items()]
        counts += [(f"at:{k}", v) for k, v in disk.crash_points.items()] + [("rolled_back", disk.rolled_back)]
        for key, count in counts:
            summary[key] = summary.get(key, 0) + count
    return summary
