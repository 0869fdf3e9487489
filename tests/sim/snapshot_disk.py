"""The simulated disk under each member's snapshot files (`<node dir>/snapshot/`): what a
power loss leaves of them.

The snapshot store changes its files only through `dledger.statemachine.snapshot_files`'
`FileOps` (create, fsync, mkdir, rename, delete a tree, fsync a directory);
`TracingFileOps`, swapped in with `traced_snapshot_files()`, performs each call and
shows it to the `SnapshotDisk` of the member whose directory it touches. The disk keeps:

- the **namespace** after every metadata operation (mkdir, create, rename, delete), as
  a map from relative path to a file id (a directory: None). An fsync of a directory
  commits every operation before it (as a journalling file system's commit does: ext4
  and XFS commit the whole running transaction), so a power loss keeps the namespace of
  the last commit plus a random prefix of the operations after it (operations reach the
  journal in order; each one, a rename included, is atomic);
- the **durable bytes** of each file, copied when it is fsynced. At a power loss a
  file's content is its durable bytes plus a torn part of what was written since: none,
  all, a random prefix, or the new length with zeros where the unsynced data should be
  (a size update that reached the disk before the data).

Modelling limits: an fsync of a file does not commit namespace operations (pessimistic:
ext4 would); the `snapshot/` directory itself always exists; files the store writes
outside `snapshot/` are the log store's (tests/sim/disk.py).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from dledger.statemachine.snapshot_files import SNAPSHOT_DIR, FileOps, set_file_ops
from tests.sim.disk import SimCrash

Tree = dict[str, int | None]  # relative path -> file id (None: a directory)


@dataclass
class SnapshotDisk:
    """The model of one member's `snapshot/` directory.

    Attributes:
        root: the `snapshot/` directory.
        crash_at: when >= 0, the operation that would make `ops_done` exceed it raises
            SimCrash instead (the process dies there; a power loss usually follows).
        crashed: a SimCrash was raised: every later operation raises it too.
        ops_done: operations performed so far.
    """

    root: Path
    crash_at: int = -1
    crashed: bool = False
    ops_done: int = 0
    trees: list[Tree] = field(default_factory=lambda: [{}])  # namespaces since the last commit
    durable: dict[int, bytes] = field(default_factory=dict)  # file id -> fsynced bytes
    gone: dict[int, bytes] = field(default_factory=dict)  # deleted file id -> bytes it held
    next_id: int = 0
    power_losses: int = 0
    torn_modes: dict[str, int] = field(default_factory=dict)  # file outcomes of the power losses
    crash_points: dict[str, int] = field(default_factory=dict)
    rolled_back: int = 0  # namespace changes a power loss undid

    @property
    def live(self) -> Tree:
        return self.trees[-1]

    def rel(self, path: Path) -> str:
        return str(Path(path).relative_to(self.root))

    def arm(self, after_ops: int) -> None:
        """Crash (SimCrash) at the operation `after_ops` operations from now."""
        self.crash_at, self.crashed = self.ops_done + after_ops, False

    def disarm(self) -> None:
        self.crash_at = -1

    def before(self, op: str, path: Path) -> None:
        """Called before each operation: raise SimCrash at the armed one (and count
        where, as `crash_points`: the operation and its path, digits left out)."""
        if self.crashed or (0 <= self.crash_at <= self.ops_done):
            if not self.crashed:
                where = f"{op} " + "".join(c for c in self.rel(path) if not c.isdigit())
                self.crash_points[where] = self.crash_points.get(where, 0) + 1
            self.crashed, self.crash_at = True, -1
            raise SimCrash(f"{self.root.parent.name}: died before {op} {self.rel(path)}")
        self.ops_done += 1

    # -- observation

    def _change(self, tree: Tree) -> None:
        self.trees.append(tree)

    def created(self, path: Path) -> None:
        tree = dict(self.live)
        tree[self.rel(path)] = self.next_id
        self.next_id += 1
        self._change(tree)

    def made_dir(self, path: Path) -> None:
        tree = dict(self.live)
        tree[self.rel(path)] = None
        self._change(tree)

    def renamed(self, source: Path, target: Path) -> None:
        src, dst = self.rel(source), self.rel(target)
        tree = {p: f for p, f in self.live.items() if not _under(p, dst)}
        moved = {p: f for p, f in tree.items() if _under(p, src)}
        for p in moved:
            del tree[p]
        for p, f in moved.items():
            tree[dst + p[len(src) :]] = f
        self._change(tree)

    def removing(self, path: Path) -> None:
        """Before a tree is deleted: keep what its files hold (a power loss may bring
        them back)."""
        rel = self.rel(path)
        for p, f in self.live.items():
            if f is not None and _under(p, rel):
                with suppress(OSError):
                    self.gone[f] = (self.root / p).read_bytes()

    def removed(self, path: Path) -> None:
        rel = self.rel(path)
        self._change({p: f for p, f in self.live.items() if not _under(p, rel)})

    def synced_file(self, path: Path) -> None:
        file_id = self.live.get(self.rel(path))
        if file_id is not None:
            self.durable[file_id] = Path(path).read_bytes()

    def synced_dir(self) -> None:
        self.trees = [self.live]

    def wiped(self) -> None:
        """The member lost its whole directory."""
        self.trees, self.durable, self.gone = [{}], {}, {}
        self.crashed, self.crash_at = False, -1

    # -- power loss

    def _current(self, path: str, file_id: int) -> bytes:
        if self.live.get(path) == file_id:
            return (self.root / path).read_bytes()
        for p, f in self.live.items():
            if f == file_id:
                return (self.root / p).read_bytes()
        return self.gone.get(file_id, b"")

    def power_loss(self, rng: random.Random) -> str:
        """Rewrite `snapshot/` as the disk holds it after a power loss now (the member is
        down); returns a one-line description."""
        self.power_losses += 1
        changes = len(self.trees) - 1
        keep = rng.randint(0, changes)  # the commit + a random prefix of the rest
        tree = self.trees[keep]
        self.rolled_back += changes - keep
        contents: dict[str, bytes] = {}
        for path, file_id in tree.items():
            if file_id is None:
                continue
            current = self._current(path, file_id)
            mode, contents[path] = _torn(rng, self.durable.get(file_id, b""), current)
            self.torn_modes[mode] = self.torn_modes.get(mode, 0) + 1
        shutil.rmtree(self.root)
        self.root.mkdir()
        for path in sorted(p for p, f in tree.items() if f is None):
            (self.root / path).mkdir(parents=True, exist_ok=True)
        for path, data in contents.items():
            (self.root / path).parent.mkdir(parents=True, exist_ok=True)
            (self.root / path).write_bytes(data)
        self.trees = [tree]
        self.durable = {f: contents[p] for p, f in tree.items() if f is not None}
        self.gone = {}
        self.crashed, self.crash_at = False, -1
        return f"kept {keep} of {changes} unsynced namespace changes: {sorted(tree)}"


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def _torn(rng: random.Random, durable: bytes, current: bytes) -> tuple[str, bytes]:
    """What a file holds after a power loss: its durable bytes plus a torn part of the
    unsynced ones."""
    if durable == current:
        return "clean", current
    same = 0
    while same < min(len(durable), len(current)) and durable[same] == current[same]:
        same += 1
    roll = rng.random()
    if roll < 0.25:
        return "lost", durable
    if roll < 0.45:
        return "kept", current
    if roll < 0.85:
        cut = rng.randint(same, len(current))
        return "prefix", current[:cut] + durable[cut:]
    return "zeros", durable[:same] + bytes(max(len(current), len(durable)) - same)


# -- the FileOps the snapshot store uses under the simulation

_DISKS: dict[Path, SnapshotDisk] = {}


def snapshot_disk(node_dir: Path) -> SnapshotDisk:
    """The model of `node_dir`'s snapshot files (made at the first call)."""
    root = (node_dir / SNAPSHOT_DIR).resolve()
    disk = _DISKS.get(root)
    if disk is None:
        disk = _DISKS[root] = SnapshotDisk(root)
    return disk


class TracingFileOps(FileOps):
    """`FileOps` that shows every call under a modelled `snapshot/` directory to its disk
    (before: a crash point; after: the model's change)."""

    def _disk(self, path: Path) -> SnapshotDisk | None:
        resolved = Path(path).resolve()
        for parent in (resolved, *resolved.parents):
            disk = _DISKS.get(parent)
            if disk is not None:
                return disk
        return None

    def open_new(self, path: Path) -> int:
        disk = self._disk(path)
        if disk is not None:
            disk.before("create", path)
        fd = super().open_new(path)
        if disk is not None:
            disk.created(path)
        return fd

    def fsync(self, fd: int, path: Path) -> None:
        disk = self._disk(path)
        if disk is not None:
            disk.before("fsync", path)
        super().fsync(fd, path)
        if disk is not None:
            disk.synced_file(path)

    def fsync_path(self, path: Path, directory: bool = False) -> None:
        disk = self._disk(path)
        if disk is not None:
            disk.before("fsync-dir" if directory else "fsync", path)
        super().fsync_path(path, directory)
        if disk is not None:
            if directory:
                disk.synced_dir()
            else:
                disk.synced_file(path)

    def mkdir(self, path: Path) -> None:
        disk = self._disk(path)
        if disk is not None:
            disk.before("mkdir", path)
        super().mkdir(path)
        if disk is not None:
            disk.made_dir(path)

    def replace(self, source: Path, target: Path) -> None:
        disk = self._disk(target)
        if disk is not None:
            disk.before("rename-to", target)
        super().replace(source, target)
        if disk is not None:
            disk.renamed(source, target)

    def remove_tree(self, path: Path) -> bool:
        disk = self._disk(path)
        if disk is None:
            return super().remove_tree(path)
        disk.before("remove", path)
        if not os.path.lexists(path):
            return False
        disk.removing(path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        disk.removed(path)
        self.fsync_path(path.parent, directory=True)
        return True


@contextmanager
def traced_snapshot_files(ops: type[TracingFileOps] = TracingFileOps) -> Iterator[None]:
    """Make the snapshot store use `ops` (a `TracingFileOps`) while the context is open."""
    previous = set_file_ops(ops())
    try:
        yield
    finally:
        set_file_ops(previous)
        _DISKS.clear()
