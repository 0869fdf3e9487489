"""Spark read throughput (local[2]): 2,000,000 entries of 100 bytes written with
`dledger.open_log`, read by the `dledger` data source into Spark's `noop` sink, against
two baselines measured in the same run on the same rows:

* `parquet`: Spark reading the same rows from a Parquet file (written once from the log)
  into `noop`;
* `spark-generate`: a Spark job that only generates rows of the same shape in the JVM
  (`spark.range` + expressions) into `noop`.

A second group runs `sum(length(body))` over each source, which makes Spark touch every
body (the `noop` sink over Parquet can leave column vectors undecoded).

Targets (issue 5): offline read >= 1,500,000 rows/s and >= 0.75x the Parquet read.
Run: `make bench PYTEST_ARGS="-k spark"` or
`.venv/bin/python -m pytest bench/test_spark.py --benchmark-only -p no:randomly`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench._common import record

ROWS = 2_000_000
BODY = 100
ROUNDS = 5
SPARK_CONF_DIR = Path(__file__).resolve().parents[1] / "tests" / "spark"  # log4j2.properties: errors only

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_CONF_DIR", str(SPARK_CONF_DIR))

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local[2] session for the module (default JIT and GC: no test-suite flags)."""
    from pyspark.sql import SparkSession

    import dledger.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("dledger-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    dledger.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[tuple[Path, Path]]:
    """(log directory, parquet directory) holding the same 2M rows (written untimed)."""
    import dledger

    root = tmp_path_factory.mktemp("spark-bench")
    log_dir, parquet_dir = root / "log", root / "parquet"
    blob = os.urandom(BODY * 10_000)
    chunk = [blob[k * BODY : (k + 1) * BODY] for k in range(10_000)]
    with dledger.open_log(log_dir) as log:
        for _ in range(ROWS // len(chunk)):
            log.append_many(chunk)
    spark.read.format("dledger").load(str(log_dir)).write.parquet(str(parquet_dir))
    try:
        yield log_dir, parquet_dir
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sources(spark: Any, data: tuple[Path, Path]) -> dict[str, Any]:
    log_dir, parquet_dir = data
    generated = spark.range(ROWS).selectExpr(
        "id AS index",
        "1L AS term",
        "id * 148 AS pos",
        f"encode(lpad(cast(id AS string), {BODY}, '.'), 'UTF-8') AS body",
    )
    return {
        "dledger-offline": spark.read.format("dledger").load(str(log_dir)),
        "parquet": spark.read.parquet(str(parquet_dir)),
        "spark-generate": generated,
    }


IMPLS = ["dledger-offline", "parquet", "spark-generate"]


@pytest.mark.parametrize("impl", IMPLS)
def test_spark_read_noop(benchmark: Any, spark: Any, data: tuple[Path, Path], impl: str) -> None:
    """All rows into the `noop` sink."""
    df = _sources(spark, data)[impl]
    assert df.count() == ROWS

    def run() -> None:
        df.write.format("noop").mode("overwrite").save()

    group = "spark-read-2M-100B-noop"
    benchmark.group = group
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, group, impl, ROWS)


@pytest.mark.parametrize("impl", IMPLS)
def test_spark_read_sum_length(benchmark: Any, spark: Any, data: tuple[Path, Path], impl: str) -> None:
    """`sum(length(body))` over all rows: every body is materialised. A new DataFrame per
    round (re-running one would skip its already computed shuffle stage)."""

    def run() -> int:
        return int(_sources(spark, data)[impl].selectExpr("sum(length(body)) AS n").first()["n"])

    assert run() == ROWS * BODY
    group = "spark-read-2M-100B-sum-length"
    benchmark.group = group
    benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    record(benchmark, group, impl, ROWS)
