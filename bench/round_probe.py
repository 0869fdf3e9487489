"""Where a round of single 128 B appends spends its time, round by round.

    .venv/bin/python -m bench.round_probe [--rounds 24] [--switch-interval 0.1]

Runs the warm single-append workload of `bench/test_storage_append.py` (200,000 bodies
per round into a warm store) and prints, for every round: wall time and thread CPU time
per append, voluntary / involuntary context switches and minor faults of the appending
thread, and the steal time the kernel saw on each CPU meanwhile. When wall time equals
thread CPU time, with no switch, fault or steal, a slow round was slow inside the
thread's own instructions: the host took cycles from the core without the guest seeing it.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench._backends import Dledger
from bench._common import SIZES

STEAL_FIELD = 8  # /proc/stat: cpuN user nice system idle iowait irq softirq steal ...


def steal_ticks() -> list[int]:
    """Steal time (clock ticks) of every CPU so far."""
    with open("/proc/stat") as f:
        return [int(line.split()[STEAL_FIELD]) for line in f if line.startswith("cpu") and line[3].isdigit()]


def main(argv: list[str] | None = None) -> None:
    """Print one line per round (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=sys.getswitchinterval(),
        help="sys.setswitchinterval for the run (seconds)",
    )
    args = parser.parse_args(argv)
    sys.setswitchinterval(args.switch_interval)

    workload = SIZES[0]
    backend = Dledger(warm=True)  # the store, warm-up and round of bench/test_storage_append.py
    with tempfile.TemporaryDirectory() as tmp:
        backend.open(Path(tmp))
        append_round = backend.single_writer(workload)
        print("round  wall ns  cpu ns  vcsw  ivcsw  minflt  steal ticks per CPU")
        try:
            for r in range(args.rounds):
                backend.prepare()
                steal0, use0 = steal_ticks(), resource.getrusage(resource.RUSAGE_THREAD)
                cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
                append_round()
                wall, cpu = time.perf_counter_ns() - wall0, time.thread_time_ns() - cpu0
                use1, steal1 = resource.getrusage(resource.RUSAGE_THREAD), steal_ticks()
                n = workload.count
                print(
                    f"{r:5d} {wall / n:8.1f} {cpu / n:7.1f} {use1.ru_nvcsw - use0.ru_nvcsw:5d}"
                    f" {use1.ru_nivcsw - use0.ru_nivcsw:6d} {use1.ru_minflt - use0.ru_minflt:7d}  "
                    + " ".join(str(b - a) for a, b in zip(steal0, steal1, strict=True))
                )
        finally:
            backend.close()


if __name__ == "__main__":
    main()
