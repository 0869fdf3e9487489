"""An install that raced the follower's own snapshot save stopped its state machine for
good (helper I #1): the install waited for the save in flight, then took the apply lock;
in between the apply thread could finish a batch and start a new save, and a machine
that refuses to load while it saves (the KV machine) failed the load ("applying
stopped"). The install now waits for the save with apply held off, so none can start."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import BinaryIO

from tests.node.conftest import NodeCluster, wait_until
from tests.node.snapmachine import SumMachine
from tests.node.test_snapshots import SNAP, leave_a_follower_behind


class RefusesLoadWhileSaving(SumMachine):
    """As the KV machine: a load while a save is in flight is refused."""

    def __init__(self) -> None:
        super().__init__()
        self.saving = False

    def on_snapshot_capture(self) -> None:
        super().on_snapshot_capture()
        self.saving = True

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        try:
            super().on_snapshot_save(writer)
        finally:
            self.saving = False

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        if self.saving:
            raise RuntimeError("cannot load a snapshot while one is being saved")
        super().on_snapshot_load(reader)


def test_an_install_never_meets_a_save_the_apply_thread_starts_meanwhile(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(3, machine_factory=RefusesLoadWhileSaving, **SNAP)
    _leader, lagging = leave_a_follower_behind(cluster)
    follower = cluster.start(lagging)
    manager, caller = follower.snapshots.manager, follower.caller  # type: ignore[union-attr]
    assert manager is not None and caller is not None
    gate = threading.Event()
    cluster.machines[lagging].save_gate = gate  # the save it may start stays in flight
    started = []
    real_wait_idle = manager.wait_idle

    def then_the_apply_thread_saves(timeout_s: float | None = None) -> bool:
        """What the apply thread may do once the install saw no save in flight."""
        idle = real_wait_idle(timeout_s)
        if caller.apply_lock.acquire(blocking=False):  # apply is not held off
            try:
                started.append(manager.save_now(caller.applied_index, caller.applied_term))
            finally:
                caller.apply_lock.release()
            gate.set()  # (too late for the load: it fails at once)
        return idle

    manager.wait_idle = then_the_apply_thread_saves  # type: ignore[method-assign]
    wait_until(lambda: follower.status().snapshot_index >= 0 and follower.applied_index >= 59, 60, what="install")
    gate.set()
    assert started == [] and follower.status().machine_health == ""
    assert cluster.machines[lagging].state() == (sum(range(60)), 60)
