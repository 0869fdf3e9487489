"""Fixtures of the Spark tests: one local[2] SparkSession for the whole run, the golden
stores, and small stores written with the embedded API.

Environment for the JVM and the Python workers is set at import time, before any
session starts (SPARK.md §1). Missing pyspark, pyarrow or Java fails the Spark tests
under CI (env CI set) and skips them elsewhere; the pure-logic tests in this folder never
need Spark.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.store.mmap_store import StoreConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ["SPARK_CONF_DIR"] = str(HERE)  # holds log4j2.properties: errors only
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)

SCENARIOS = ["empty", "basic", "multi-term-rolled", "head-deleted", "truncated"]
DEFAULT_GOLDEN = REPO.parent / "shared" / "golden"


def _missing_or_skip(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def spark_missing() -> str | None:
    """Why Spark cannot run here, or None."""
    for module in ("pyspark", "pyarrow"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[spark]')"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "Java is not installed (pyspark needs a JDK 17+ on PATH)"
    return None


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's SparkSession (local[2]) with the dledger source registered."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("the Spark tests must not run under xdist (a JVM per worker on 2 cores): use -p no:xdist")
    reason = spark_missing()
    if reason:
        _missing_or_skip(reason)
    from dledger.spark import local_session

    session = local_session(
        "dledger-tests",
        conf={
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse")),
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        },
    )
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(autouse=True)
def _stop_streams(request: pytest.FixtureRequest) -> Iterator[None]:
    """Stop any streaming query a test left running."""
    yield
    if "spark" in request.fixturenames:
        session = request.getfixturevalue("spark")
        for query in session.streams.active:
            query.stop()


# -- golden stores


def golden_root() -> Path:
    """The golden directory ($DLEDGER_GOLDEN_DIR or ../shared/golden); missing fails under
    CI and skips elsewhere."""
    env = os.environ.get("DLEDGER_GOLDEN_DIR")
    root = Path(env) if env else DEFAULT_GOLDEN
    if not (root / "basic" / "manifest.json").is_file():
        _missing_or_skip(f"golden stores not found at {root} (set DLEDGER_GOLDEN_DIR)")
    return root


def manifest(name: str) -> dict[str, Any]:
    """A golden scenario's manifest."""
    data: dict[str, Any] = json.loads((golden_root() / name / "manifest.json").read_text("utf-8"))
    return data


def committed_entries(name: str) -> list[dict[str, Any]]:
    """The manifest's live entries up to the committed index (what a read must return)."""
    m = manifest(name)
    committed = int(m["javaRecoveryOnReopen"]["committedIndex"])
    return [e for e in m["entries"] if int(e["index"]) <= committed]


# -- stores written by the embedded API


def small_store(path: Path, count: int, body_size: int = 100, data_file_size: int = 64 << 10) -> Path:
    """A local log of `count` entries (body k = k as text, padded) with small segments."""
    config = StoreConfig(data_file_size=data_file_size, index_file_size=32 * 1024, warm_ahead_bytes=0)
    with dledger.open_log(path, config) as log:
        log.append_many([str(k).encode().ljust(body_size, b".") for k in range(count)])
    return path
