"""What power loss costs in async mode, measured over many seeds (docs/SIMULATION.md).

    .venv/bin/python -m tests.sim.measure --nodes 3 --seeds 100 --steps 4000 [--no-flush-stalls]

Runs the "group" power-loss scenario (a majority or all members at once, plus every
other fault) and prints, per number of members that lost power together, how many
events there were and how many acknowledged entries each of them cost.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import tempfile
from pathlib import Path

from tests.sim.checker import KnownIssue, Violation
from tests.sim.conftest import sim_root
from tests.sim.disk import traced_segment_lists
from tests.sim.harness import Scenario, Simulation


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--power-loss", default="group", choices=("single", "group", "any"))
    parser.add_argument("--no-flush-stalls", action="store_true")
    args = parser.parse_args(argv)
    scenario = Scenario(
        args.nodes, "async", power_loss=args.power_loss, allow_loss=True, flush_stalls=not args.no_flush_stalls
    )
    events: collections.Counter[int] = collections.Counter()
    losses: dict[int, list[int]] = collections.defaultdict(list)
    known: list[str] = []
    failed: list[str] = []
    acked = sim_ms = unflushed = runs = 0
    root = sim_root(Path(tempfile.gettempdir()))
    with traced_segment_lists():
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            base = Path(tempfile.mkdtemp(prefix=f"dledger-measure-{seed}-", dir=root))
            sim = Simulation(scenario, seed, base, trace=False)
            try:
                stats = sim.run(args.steps)
            except KnownIssue as exc:
                known.append(f"seed {seed}: {str(exc)[:160]}")
                continue
            except Violation as exc:
                failed.append(f"seed {seed}: {exc}")
                continue
            finally:
                sim.close()
                shutil.rmtree(base, ignore_errors=True)
            runs += 1
            acked += stats.entries_acked
            sim_ms += stats.sim_ms
            unflushed += stats.entries_unflushed_lost
            for size in stats.power_loss_sizes.values():
                events[size] += 1
            per_event: collections.Counter[int] = collections.Counter()
            for loss in sim.checker.losses:
                per_event[loss.event] += loss.acked_lost
            for event, lost in per_event.items():
                if lost:
                    losses[stats.power_loss_sizes.get(event, 0)].append(lost)
    rate = acked / max(sim_ms / 1000, 1e-9)
    stalls = "off" if args.no_flush_stalls else "on"
    simulated = f"{sim_ms / 1000:.0f} s simulated"
    print(f"{args.nodes} nodes, {runs} seeds x {args.steps} steps ({simulated}), flush stalls {stalls}")
    print(f"acknowledged {acked} entries, {rate:.0f}/s = {rate / 100:.1f} per 10 ms flush interval")
    print(f"entries lost from power-lost members' unflushed tails: {unflushed}")
    print("members at once | events | events losing acked entries | acked entries lost | per losing event")
    for size in sorted(events):
        costs = sorted(losses.get(size, []))
        print(f"{size:>15} | {events[size]:>6} | {len(costs):>27} | {sum(costs):>18} | {costs}")
    for line in known:
        print("known issue,", line)
    for line in failed:
        print("INVARIANT BROKEN,", line)


if __name__ == "__main__":
    main()
