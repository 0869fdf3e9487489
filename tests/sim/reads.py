"""Linearizable reads in the simulation (`Scenario.reads`): now and then a member that
believes it leads is asked for a ReadIndex read (`RaftDriver.read_index`); a read index
it confirms must cover every append acknowledged before the read was asked (unless a
power loss the scenario allows took that entry). A deposed leader, or one cut off from
the quorum, must never confirm a stale one.

Reads draw from their own random source, so the other choices of a seed stay as they
were; their heartbeats do change the network's schedule.
"""

from __future__ import annotations

import random
from concurrent.futures import Future
from typing import TYPE_CHECKING

from dledger.codes import DLedgerError
from tests.sim.checker import Violation

if TYPE_CHECKING:
    from tests.sim.harness import SimNode, Simulation


class ReadLoad:
    """The reads of one run and what they found."""

    def __init__(self, sim: Simulation, seed: int) -> None:
        self.sim = sim
        self.rng = random.Random(seed * 7919 + 18)
        self.issued = 0
        self.confirmed = 0
        self.failed = 0
        self.violations: list[str] = []

    def maybe_read(self) -> None:
        """Ask a random self-declared leader for a read (10 % of the steps)."""
        if self.rng.random() >= 0.1:
            return
        sim = self.sim
        leaders = [n for n in sim.nodes.values() if n.up and n.core is not None and n.core.member_state.is_leader]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        assert node.driver is not None
        floor = max(sim.checker.acked, default=-1)  # the last acknowledged entry
        try:
            future = node.driver.read_index(sim.now)
        except DLedgerError:
            return
        self.issued += 1
        future.add_done_callback(lambda f: self._done(node, floor, f))

    def _done(self, node: SimNode, floor: int, future: Future[int]) -> None:
        if future.exception() is not None:
            self.failed += 1
            return
        self.confirmed += 1
        index = future.result()
        checker = self.sim.checker
        if index < floor and floor in checker.acked and not checker._excused(floor):
            self.violations.append(
                f"{node.node_id} confirmed read index {index} at {self.sim.now} ms, below index {floor} "
                "acknowledged before the read"
            )

    def check(self) -> None:
        """Raise the first stale read found (called with the other invariants)."""
        if self.violations:
            raise Violation(self.violations[0])
