"""Record reads against plain body reads through Spark, interleaved (issue 20: >= 0.8x),
offline and live, with the CPU split between the JVM and the rest (Python workers and,
live, the members).

    PYTHONPATH=. .venv/bin/python -m bench.record_read_probe [--rows 2000000] [--rounds 5]
        [--live] [--columns]

Writes a plain log (100-byte bodies) and a record log (an 8-byte key, a timestamp, the
same 100-byte values) with `dledger.open_log` (untimed), and with `--live` fills a
3-member `dledger server` cluster with the same two sets of entries. Then, `--rounds`
times after a warm-up round, A, B, A, B... (the machine is shared), it writes each read
into Spark's `noop` sink (`local[2]`) and prints per case the median rows/s, the median
CPU ns per row of the whole process tree (`java`: the JVM alone) and the ratios
against the plain read of the same place (of the medians, and the median of each round's
own ratio, which a drift of the machine's speed over the run moves less):

- plain: `index, term, pos, body` of the plain entries;
- record: `index, term, key, value, timestamp` of the records;
- with `--columns` also the record log read as `index, term, pos, value` (the record
  columns without key and timestamp), `... key, value` and `... value, timestamp`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._cluster import start_cluster
from bench.test_spark import PLAIN_SCHEMA, RECORD_SCHEMA, tree_cpu

SPARK_CONF_DIR = Path(__file__).resolve().parents[1] / "tests" / "spark"
VALUE = 100
CHUNK = 10_000
GROUP = "bench"
COLUMN_SCHEMAS = {
    "record-value": "index long, term long, pos long, value binary",
    "record-key": "index long, term long, key binary, value binary",
    "record-ts": "index long, term long, value binary, timestamp timestamp",
}


def _chunks(rows: int, records: bool) -> list[tuple[list[bytes], int]]:
    """(bodies, magic) per append: the same values, as plain bodies or as records."""
    from dledger.entry import MAGIC_NORMAL, MAGIC_RECORD
    from dledger.record import encode_record

    blob = os.urandom(VALUE * CHUNK)
    values = [blob[k * VALUE : (k + 1) * VALUE] for k in range(CHUNK)]
    out = []
    for k in range(rows // CHUNK):
        if records:
            stamp = 1_700_000_000_000 + k * CHUNK
            bodies = [encode_record(v, b"%08d" % (i % 4096), stamp + i) for i, v in enumerate(values)]
            out.append((bodies, MAGIC_RECORD))
        else:
            out.append((values, MAGIC_NORMAL))
    return out


def write_logs(root: Path, rows: int) -> tuple[Path, Path]:
    """The plain and the record log (untimed)."""
    import dledger

    paths = root / "plain", root / "records"
    for path, records in zip(paths, (False, True), strict=True):
        with dledger.open_log(path) as log:
            for bodies, magic in _chunks(rows, records):
                log.append_many(bodies, magic)
    return paths


def fill_cluster(peers: str, rows: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Append the plain entries, then the records; their [first, end) index ranges."""
    from dledger.client import DLedgerClient

    ranges = []
    with DLedgerClient(peers, GROUP, timeout_s=60) as client:
        for records in (False, True):
            first = last = -1
            for bodies, magic in _chunks(rows, records):
                index = int(client.append_batch(bodies, magic).first_index)
                first = index if first < 0 else first
                last = index + len(bodies) - 1
            ranges.append((first, last + 1))
    return ranges[0], ranges[1]


def measure(run: Callable[[], object], exclude: set[int]) -> tuple[float, float, float]:
    """(seconds, CPU s of the process tree, CPU s of its java processes) of one run,
    leaving out the processes in `exclude` and their descendants (the members, for an
    offline read: their idle work is not the read's)."""

    def comm(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""

    before = tree_cpu(os.getpid())
    started = time.perf_counter()
    run()
    wall = time.perf_counter() - started
    after = tree_cpu(os.getpid())
    excluded = {pid for root in exclude for pid in tree_cpu(root)}
    spent = {pid: cpu - before.get(pid, 0.0) for pid, cpu in after.items() if pid not in excluded}
    return wall, sum(spent.values()), sum(v for pid, v in spent.items() if comm(pid) == "java")


def interleave(
    cases: dict[str, Callable[[], object]], rounds: int, exclude: Callable[[str], set[int]], alternate: bool = False
) -> dict[str, list[tuple[float, float, float]]]:
    """`measure` every case once a round, `rounds` times after a warm-up round (the
    order reversed every other round with `alternate`); `exclude(name)` names the
    processes a case's CPU leaves out."""
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    names = list(cases)
    for round_no in range(rounds + 1):
        for name in reversed(names) if alternate and round_no % 2 else names:
            result = measure(cases[name], exclude(name))
            if round_no:  # round 0 warms up
                results[name].append(result)
    return results


def report(results: dict[str, list[tuple[float, float, float]]], rows: int) -> None:
    """Print medians and the ratios against the plain case of the same place."""
    medians = {}
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)  # live: the members' CPU included
        java = statistics.median(r[2] for r in runs)
        medians[name] = (wall, cpu)
        walls = ", ".join(f"{rows / r[0] / 1e6:.2f}" for r in runs)
        print(
            f"{name:22s} {rows / wall / 1e6:5.2f} M rows/s ({walls})  {cpu * 1e9 / rows:5.0f} CPU ns/row "
            f"(java {java * 1e9 / rows:.0f})"
        )
    for name, (wall, cpu) in medians.items():
        base = name.split(":")[0] + ":plain"
        plain = medians[base]
        paired = statistics.median(p[0] / r[0] for p, r in zip(results[base], results[name], strict=True))
        print(
            f"{name:22s} vs plain: {plain[0] / wall:.2f}x wall, {plain[1] / cpu:.2f}x CPU "
            f"(median of the rounds' own ratios: {paired:.2f}x wall)"
        )


def main(argv: list[str] | None = None) -> None:
    """Run the interleaved comparison (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--live", action="store_true", help="also read from a 3-member cluster")
    parser.add_argument("--columns", action="store_true", help="also the record columns one by one (offline)")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))
    from dledger.spark import local_session

    root = Path(tempfile.mkdtemp(prefix="record-read-probe-"))
    cluster = None
    try:
        plain_dir, record_dir = write_logs(root, args.rows)
        spark = local_session("record-read-probe")
        reader = spark.read.format("dledger")
        cases: dict[str, Any] = {
            "offline:plain": reader.schema(PLAIN_SCHEMA).load(str(plain_dir)),
            "offline:record": reader.schema(RECORD_SCHEMA).load(str(record_dir)),
        }
        if args.columns:
            for name, schema in COLUMN_SCHEMAS.items():
                cases[f"offline:{name}"] = reader.schema(schema).load(str(record_dir))
        if args.live:
            cluster = start_cluster(root / "cluster", "async", group=GROUP)
            plain_range, record_range = fill_cluster(cluster.peers, args.rows)
            live = reader.option("peers", cluster.peers).option("group", GROUP)
            for name, schema, (first, end) in (
                ("live:plain", PLAIN_SCHEMA, plain_range),
                ("live:record", RECORD_SCHEMA, record_range),
            ):
                cases[name] = (
                    live.schema(schema).option("startingIndex", str(first)).option("endingIndex", str(end)).load()
                )
        members = {m.process.pid for m in cluster.members.values() if m.process} if cluster else set()
        runs = {name: (lambda df=df: df.write.format("noop").mode("overwrite").save()) for name, df in cases.items()}
        results = interleave(runs, args.rounds, lambda name: members if name.startswith("offline") else set())
        print(f"{args.rows:,} rows, {args.rounds} interleaved rounds, load {os.getloadavg()[0]:.1f}")
        report(results, args.rows)
        spark.stop()
    finally:
        if cluster is not None:
            cluster.shutdown(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
