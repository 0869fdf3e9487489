"""PySpark data source for DLedger logs: format `"dledger"`.

    import dledger.spark
    dledger.spark.register(spark)
    df = spark.read.format("dledger").load("/data/dledger-n0")          # offline store directory
    df = spark.read.format("dledger").option("peers", "n0-host:20911;n1-host:20912").load()  # live

Rows are `index long, term long, pos long, body binary`; use `row["index"]` (a Row is a
tuple, so `row.index` is tuple.index). The NOOP entries a new leader appends are left out
unless `includeNoops=true`, which adds a `magic int` column (1 normal, 2 NOOP). See
docs/SPARK.md for every option.

pyspark is imported only when `register` runs or the source classes are used, so
`import dledger.spark` works without it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dledger
from dledger.spark.options import SCHEMA_DDL
from dledger.spark.target import OptionError

if TYPE_CHECKING:
    from dledger.spark.source import DLedgerDataSource

FORMAT = "dledger"

__all__ = [
    "FORMAT",
    "SCHEMA_DDL",
    "DLedgerDataSource",
    "OptionError",
    "local_session",
    "register",
    "warn_if_grpc_came_first",
]

LOOPBACK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
"""The settings of `local_session`: no UI, no progress bars, 2 shuffle partitions, the
driver on loopback."""


def _default_parallelism(spark: Any) -> int | None:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        value = spark.conf.get("spark.default.parallelism", None)
        return int(value) if value else None


def register(spark: Any, *, default_parallelism: int | None = None) -> type[DLedgerDataSource]:
    """Register the `dledger` format on a SparkSession (registration is per session).

    Args:
        spark: the SparkSession.
        default_parallelism: the minimum number of tasks of a large read when the
            `minPartitions` option is not given; default: Spark's default parallelism.

    Returns:
        The registered data source class.
    """
    from dledger.spark.source import DLedgerDataSource

    parallelism = default_parallelism or _default_parallelism(spark)
    # A subclass carrying the session's parallelism: planning runs in a Python worker
    # that cannot ask Spark. Not importable by name, so Spark pickles it by value.
    cls = type(
        "DLedgerDataSource",
        (DLedgerDataSource,),
        {"default_min_partitions": parallelism, "__qualname__": "DLedgerDataSource.registered"},
    )
    spark.dataSource.register(cls)
    return cls


def warn_if_grpc_came_first() -> None:
    """Warn (RuntimeWarning) when gRPC was imported before dledger with its fork
    handlers on (`dledger.GRPC_FORK_HANDLERS_ON`): starting Spark's JVM can fail then."""
    if dledger.GRPC_FORK_HANDLERS_ON:
        warnings.warn(
            "grpc was imported before dledger, with its fork handlers on: starting Spark's JVM can fail "
            "('Java gateway process exited'); import dledger first, or set GRPC_ENABLE_FORK_SUPPORT=false",
            RuntimeWarning,
            stacklevel=3,
        )


def local_session(app_name: str = "dledger", *, master: str = "local[2]", conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession on this machine, bound to loopback, with the `dledger` format
    registered (`getOrCreate`: an active session is reused, and `conf` applied to it).

    Sets the environment defaults a local session needs when they are unset:
    SPARK_LOCAL_IP=127.0.0.1 and PYSPARK_PYTHON=this interpreter (so that the Python
    workers import this dledger).

    Args:
        app_name: the application name.
        master: the Spark master (default `local[2]`).
        conf: more Spark settings, over `LOOPBACK_CONF`.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warn_if_grpc_came_first()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**LOOPBACK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    return session


def __getattr__(name: str) -> Any:
    if name == "DLedgerDataSource":
        from dledger.spark.source import DLedgerDataSource

        return DLedgerDataSource
    raise AttributeError(f"module 'dledger.spark' has no attribute {name!r}")
