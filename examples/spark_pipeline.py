"""End-to-end Spark pipeline over a DLedger cluster.

1. `generate`: write a JSON Lines dataset of synthetic orders (public format, one JSON
   object per line: order_id, ts, country, product, quantity, amount).
2. `load`: read it with Spark and append every line to the replicated log
   (`df.write.format("dledger").mode("append")`).
3. `aggregate`: a streaming job that reads the log (`readStream.format("dledger")`),
   parses the bodies and keeps revenue and order counts per country, printing the table
   after every micro-batch. With `--follow` it keeps running (processing-time trigger)
   and picks up whatever is appended later; without it, it processes what is committed
   now (availableNow) and exits.

Run against the local 3-member cluster (`make run`, or `.venv/bin/dledger cluster`):

    .venv/bin/python examples/spark_pipeline.py all --rows 20000
    .venv/bin/python examples/spark_pipeline.py aggregate --follow      # then, elsewhere:
    .venv/bin/python examples/spark_pipeline.py load --rows 5000

Only the `dledger` data source and Spark SQL are used; nothing here knows about Raft.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN", "CN", "NG"]
PRODUCTS = ["book", "lamp", "chair", "phone", "kettle", "bike"]
ORDER_SCHEMA = "order_id long, ts string, country string, product string, quantity int, amount double"


def generate(path: Path, rows: int, seed: int) -> Path:
    """Write `rows` synthetic orders as JSON Lines to `path` (deterministic for a seed)."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for k in range(rows):
            quantity = rng.randint(1, 5)
            order = {
                "order_id": seed * 10_000_000 + k,
                "ts": f"2025-01-{1 + k % 28:02d}T{k % 24:02d}:{k % 60:02d}:00Z",
                "country": rng.choice(COUNTRIES),
                "product": rng.choice(PRODUCTS),
                "quantity": quantity,
                "amount": round(quantity * rng.uniform(2.0, 80.0), 2),
            }
            out.write(json.dumps(order, separators=(",", ":")) + "\n")
    return path


def session() -> Any:
    """A local Spark session with the dledger source registered."""
    os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).resolve().parent))  # quiet log4j2.properties
    import dledger.spark

    spark = dledger.spark.local_session("dledger-example", master=os.environ.get("SPARK_MASTER", "local[2]"))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load(spark: Any, path: Path, peers: str, group: str) -> int:
    """Append every line of the JSON Lines file to the log; returns the number of rows."""
    orders = spark.read.schema(ORDER_SCHEMA).json(str(path))
    bodies = orders.selectExpr("to_json(struct(*)) AS body")  # a string column is stored as UTF-8
    bodies.write.format("dledger").option("peers", peers).option("group", group).mode("append").save()
    count = int(orders.count())
    print(f"appended {count} orders from {path} to group {group!r}")
    return count


def aggregate(spark: Any, peers: str, group: str, checkpoint: Path, follow: bool) -> None:
    """Stream the log, keeping revenue and order counts per country; prints each update."""
    log = (
        spark.readStream.format("dledger")
        .option("peers", peers)
        .option("group", group)
        .option("startingIndex", "earliest")
        .option("maxEntriesPerTrigger", "50000")
        .load()
    )
    orders = (
        log.selectExpr(f"from_json(cast(value AS string), '{ORDER_SCHEMA}') AS o", "index")  # NOOPs are left out
        .where("o IS NOT NULL AND o.order_id IS NOT NULL")
        .select("o.*", "index")
    )
    from pyspark.sql import functions as F

    per_country = (
        orders.groupBy("country")
        .agg(
            F.count("order_id").alias("orders"),
            F.sum("quantity").alias("items"),
            F.round(F.sum("amount"), 2).alias("revenue"),
            F.max("index").alias("last_index"),
        )
        .orderBy("country")
    )
    writer = (
        per_country.writeStream.outputMode("complete")
        .format("console")
        .option("truncate", "false")
        .option("numRows", "50")
        .option("checkpointLocation", str(checkpoint))
    )
    if follow:
        query = writer.trigger(processingTime="2 seconds").start()
        print("following the log; Ctrl-C to stop")
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    else:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = query.recentProgress
        rows = sum(p["numInputRows"] for p in progress)
        print(f"aggregated {rows} log entries in {len(progress)} micro-batches")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["all", "generate", "load", "aggregate"])
    parser.add_argument("--peers", default=DEFAULT_PEERS, help="the cluster, DLedger's peers format")
    parser.add_argument("--group", default="default")
    parser.add_argument("--rows", type=int, default=20_000, help="orders to generate")
    parser.add_argument("--seed", type=int, default=None, help="dataset seed (default: random)")
    parser.add_argument("--data", type=Path, default=None, help="the JSON Lines file")
    parser.add_argument("--checkpoint", type=Path, default=None, help="streaming checkpoint directory")
    parser.add_argument("--follow", action="store_true", help="keep streaming (processing-time trigger)")
    args = parser.parse_args(argv)

    work = Path(tempfile.gettempdir()) / "dledger-example"
    seed = args.seed if args.seed is not None else random.randrange(1, 1000)
    data = args.data or work / f"orders-{seed}.jsonl"
    checkpoint = args.checkpoint or work / f"checkpoint-{os.getpid()}"
    if args.step in ("all", "generate"):
        generate(data, args.rows, seed)
        print(f"wrote {args.rows} orders to {data}")
    if args.step == "generate":
        return 0
    spark = session()
    try:
        if args.step in ("all", "load"):
            if not data.exists():
                generate(data, args.rows, seed)
            load(spark, data, args.peers, args.group)
        if args.step in ("all", "aggregate"):
            aggregate(spark, args.peers, args.group, checkpoint, args.follow)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
