"""Run chaos schedules and print a table: `python -m tests.chaos.run`.

    python -m tests.chaos.run                          # every schedule, async and sync
    python -m tests.chaos.run --schedules sigstop --flush async --repeat 3

Each run gets a directory under `--out` (default: a fresh temporary one) with the
members' logs, `history.jsonl`, `verdict.json` and `verdict.txt` (its one-line verdict,
also printed). Partition schedules re-execute this module inside a private sandbox
(`netns.sandbox_command`); where that is impossible they are reported as skipped.
Exits 1 when a verdict fails, 0 otherwise.

Environment: DLEDGER_CHAOS_RUN_S (load before each fault, default 4),
DLEDGER_CHAOS_DOWN_S (2), DLEDGER_CHAOS_STOP_S (5), DLEDGER_CHAOS_ROUNDS (faults per
run, 1), DLEDGER_CHAOS_MAX_UNAVAILABLE_S (30: a longer stall after a fault fails the
verdict), DLEDGER_CHAOS_DROP (nft or route, for partitions), DLEDGER_CHAOS_SCHEDULES and
DLEDGER_CHAOS_FLUSH (comma-separated defaults of `--schedules` and `--flush`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.checker import MAX_UNAVAILABLE_S, Verdict, check
from tests.chaos.history import History
from tests.chaos.netns import SANDBOX_ENV, Network, sandbox_command, sandbox_env, sandbox_unavailable
from tests.chaos.procs import ChaosCluster
from tests.chaos.schedules import NEEDS_NETWORK, SCHEDULES, Context, ScheduleError, Settings
from tests.chaos.stores import read_store
from tests.chaos.workload import Workload, read_finals

SANDBOX_TIMEOUT_S = 900
RECOVER_S = 120.0
"""How long the workload goes on after the last fault waiting for an ack (a stall is
measured up to this)."""


def settings_from_env() -> Settings:
    """The run's durations, from DLEDGER_CHAOS_* (defaults: `Settings`)."""
    base = Settings()
    return Settings(
        run_s=float(os.environ.get("DLEDGER_CHAOS_RUN_S", base.run_s)),
        down_s=float(os.environ.get("DLEDGER_CHAOS_DOWN_S", base.down_s)),
        stop_s=float(os.environ.get("DLEDGER_CHAOS_STOP_S", base.stop_s)),
        rounds=int(os.environ.get("DLEDGER_CHAOS_ROUNDS", base.rounds)),
    )


def run_one(schedule: str, flush: str, workdir: Path, settings: Settings | None = None) -> Verdict:
    """Run one schedule in one flush mode; its verdict (also written to `workdir`)."""
    settings = settings or settings_from_env()
    if schedule in NEEDS_NETWORK and os.environ.get(SANDBOX_ENV) != "1":
        return _run_sandboxed(schedule, flush, workdir)
    history = History()
    network = None
    if schedule in NEEDS_NETWORK:
        network = Network([f"n{k}" for k in range(3)])
        network.setup()
    cluster = ChaosCluster(workdir, history, flush=flush, network=network)
    workload: Workload | None = None
    note = broken = ""
    try:
        cluster.launch()
        history.event(f"launched, peers {cluster.peers}")
        if cluster.wait_leader(60) is None:
            raise ScheduleError("no first leader within 60 s")
        workload = Workload(cluster, history).start()
        try:
            SCHEDULES[schedule](Context(cluster, workload, history, settings, network))
        except ScheduleError as exc:  # the schedule could not do what it is for: a failure
            broken = str(exc)
            history.event(f"schedule stopped: {exc}")
        if not workload.wait_recovered(RECOVER_S):
            note = note or f"no append acknowledged within {RECOVER_S:.0f} s of the last fault"
        time.sleep(settings.settle_s)  # load after the last fault
        workload.stop()
        if network is not None:
            network.heal()
        if not read_finals(cluster, history):
            note = note or "members did not converge"
        cluster.shutdown()  # clean stops: every store's checkpoint covers what it committed
        for member_id in cluster.members:
            try:
                history.stores[member_id] = read_store(cluster.node_dir(member_id))
            except Exception as exc:  # a store that never came back (torn tail) may be unreadable
                history.unreadable[member_id] = f"{type(exc).__name__}: {exc}"
    finally:
        if workload is not None:
            workload.stop()
        cluster.close()
        history.dump(workdir / "history.jsonl")
    verdict = check(
        history, schedule, flush, float(os.environ.get("DLEDGER_CHAOS_MAX_UNAVAILABLE_S", MAX_UNAVAILABLE_S))
    )
    verdict.note, verdict.error = note, broken
    (workdir / "verdict.json").write_text(json.dumps(dataclasses.asdict(verdict)))
    (workdir / "verdict.txt").write_text(verdict.line() + "\n")
    return verdict


def _run_sandboxed(schedule: str, flush: str, workdir: Path) -> Verdict:
    """Run a partition schedule in its own namespaces (a child `python -m tests.chaos.run`)."""
    why = sandbox_unavailable()
    if why is not None:
        return Verdict(schedule, flush, note=f"SKIPPED: {why}")
    workdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.chaos.run", "--schedules", schedule, "--flush", flush]
    command += ["--out", str(workdir), "--single"]
    with open(workdir / "sandbox.log", "wb") as log:
        subprocess.run(
            sandbox_command(command), env=sandbox_env(), stdout=log, stderr=subprocess.STDOUT, timeout=SANDBOX_TIMEOUT_S
        )
    verdict_file = workdir / "verdict.json"
    if not verdict_file.exists():
        tail = (workdir / "sandbox.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the sandboxed run of {schedule} wrote no verdict:\n{tail}")
    return Verdict(**json.loads(verdict_file.read_text()))


def table(verdicts: list[Verdict]) -> str:
    """Runs and unavailability per schedule and flush mode, and totals."""
    head = f"{'schedule':18} {'flush':5} {'runs':>4} {'pass':>4} {'acked':>7} {'indet':>5} {'lost':>5} {'dup':>4} "
    head += f"{'div':>4} {'down':>4} {'p50 s':>6} {'max s':>6}  note"
    rows = [head, "-" * len(head)]
    groups: dict[tuple[str, str], list[Verdict]] = {}
    for verdict in verdicts:
        groups.setdefault((verdict.schedule, verdict.flush), []).append(verdict)
    for (schedule, flush), group in groups.items():
        merged = Verdict(schedule, flush, unavailability=[u for v in group for u in v.unavailability])
        p50, worst = merged.unavailability_p50_max()
        skipped = all(_skipped(v) for v in group)
        rows.append(
            f"{schedule:18} {flush:5} {len(group):>4} {sum(v.ok and not skipped for v in group):>4} "
            f"{sum(v.acked for v in group):>7} {sum(v.indeterminate for v in group):>5} "
            f"{sum(v.lost for v in group):>5} {sum(v.duplicated for v in group):>4} "
            f"{sum(v.diverged for v in group):>4} {sum(len(v.down) for v in group):>4} "
            f"{_seconds(p50):>6} {_seconds(worst):>6}  {_notes(group)}".rstrip()
        )
    rows.append("-" * len(head))
    passed = sum(v.ok and not _skipped(v) for v in verdicts)
    rows.append(
        f"{'total':18} {'':5} {len(verdicts):>4} {passed:>4} {sum(v.acked for v in verdicts):>7} "
        f"{sum(v.indeterminate for v in verdicts):>5} {sum(v.lost for v in verdicts):>5} "
        f"{sum(v.duplicated for v in verdicts):>4} {sum(v.diverged for v in verdicts):>4} "
        f"{sum(len(v.down) for v in verdicts):>4}"
    )
    return "\n".join(rows)


def _notes(group: list[Verdict]) -> str:
    return "; ".join(sorted({text for v in group for text in (v.error, v.note) if text}))


def _skipped(verdict: Verdict) -> bool:
    return verdict.note.startswith("SKIPPED")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    """Run the chosen schedules (and flush modes) and print the verdicts and the table."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", default=os.environ.get("DLEDGER_CHAOS_SCHEDULES", ",".join(SCHEDULES)))
    parser.add_argument("--flush", default=os.environ.get("DLEDGER_CHAOS_FLUSH", "async,sync"))
    parser.add_argument("--repeat", type=int, default=1, help="runs of each schedule and flush mode")
    parser.add_argument("--out", type=Path, help="where run directories go (default: a new temporary one)")
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)  # one run into --out itself
    args = parser.parse_args(argv)
    schedules = [s for s in args.schedules.split(",") if s]
    unknown = [s for s in schedules if s not in SCHEDULES]
    if unknown:
        parser.error(f"unknown schedules {unknown}; known: {', '.join(SCHEDULES)}")
    out = args.out or Path(tempfile.mkdtemp(prefix="dledger-chaos-"))
    if args.single:
        verdict = run_one(schedules[0], args.flush, out)
        print(verdict.line(), flush=True)
        return 0 if verdict.ok else 1
    verdicts = []
    for schedule in schedules:
        for flush in [f for f in args.flush.split(",") if f]:
            for k in range(args.repeat):
                try:
                    verdict = run_one(schedule, flush, out / f"{schedule}-{flush}-{k}")
                except Exception as exc:  # a broken run fails its verdict; the campaign goes on
                    verdict = Verdict(schedule, flush, error=f"{type(exc).__name__}: {exc}"[:500])
                verdicts.append(verdict)
                print(verdict.note if _skipped(verdict) else verdict.line(), flush=True)
    print(f"\nchaos runs in {out}\n{table(verdicts)}", flush=True)
    return 0 if all(v.ok or _skipped(v) for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
