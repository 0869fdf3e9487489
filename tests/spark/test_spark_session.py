"""`dledger.spark.local_session`: the loopback local session the tests, the benchmarks
and the example use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.spark import LOOPBACK_CONF, local_session

pytestmark = pytest.mark.spark


def test_local_session_reuses_the_active_session_on_loopback_with_the_format_registered(
    spark: Any, tmp_path: Path
) -> None:
    session = local_session("again", conf={"spark.sql.shuffle.partitions": "3"})
    try:
        assert session is spark  # getOrCreate: the active session, with `conf` applied
        assert session.conf.get("spark.sql.shuffle.partitions") == "3"
        for key in ("spark.driver.host", "spark.driver.bindAddress"):
            assert session.conf.get(key) == LOOPBACK_CONF[key] == "127.0.0.1"
        with dledger.open_log(tmp_path / "log") as log:
            log.append_many([b"a", b"b"])
        rows = session.read.format("dledger").load(str(tmp_path / "log")).collect()
        assert [bytes(row["value"]) for row in rows] == [b"a", b"b"]
    finally:
        session.conf.set("spark.sql.shuffle.partitions", "2")
