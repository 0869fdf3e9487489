"""Exactly-once Spark writes against plain ones, interleaved (issue 20: >= 0.9x), with
the CPU of the whole process tree (the JVM, its Python workers and the members).

    PYTHONPATH=. .venv/bin/python -m bench.exactly_once_probe [--rows 2000000] [--pairs 6]

One `local[2]` session and one 3-member async cluster of `dledger server` processes;
each write appends `--rows` generated 100-byte bodies (`spark.range` + `lpad`, 2 tasks)
with `exactlyOnce=false` (plain entries, at-least-once) or `true` (numbered records of
an idempotent producer per task, the default). After a warm-up write of each, `--pairs`
pairs run with the order alternating (plain first, then exactly-once first, ...), so
that drift of the shared machine meets both alike; the figures are medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench._cluster import start_cluster
from bench.record_read_probe import SPARK_CONF_DIR, interleave, report

GROUP = "bench"
VALUE = 100


def main(argv: list[str] | None = None) -> None:
    """Run the interleaved comparison (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))
    from dledger.spark import local_session

    root = Path(tempfile.mkdtemp(prefix="exactly-once-probe-"))
    cluster = start_cluster(root, "async", group=GROUP)
    try:
        spark = local_session("exactly-once-probe")
        bodies = spark.range(args.rows).selectExpr(f"encode(lpad(cast(id AS string), {VALUE}, '.'), 'UTF-8') AS body")
        writers = {
            name: bodies.write.format("dledger")
            .option("peers", cluster.peers)
            .option("group", GROUP)
            .option("exactlyOnce", flag)
            .mode("append")
            for name, flag in (("live:plain", "false"), ("live:exactly-once", "true"))
        }
        runs = {name: writer.save for name, writer in writers.items()}
        results = interleave(runs, args.pairs, lambda name: set(), alternate=True)
        print(f"{args.rows:,} rows a write, {args.pairs} interleaved pairs, load {os.getloadavg()[0]:.1f}")
        report(results, args.rows)
        spark.stop()
    finally:
        cluster.shutdown(30)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
