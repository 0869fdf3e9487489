"""Stamped records (record layout version 2, leader-written) through Spark: an offline
read of a log holding them gives the same rows as the same log without the stamps (the
stamp is not a column; `body` is the record's value)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dledger
from dledger.entry import MAGIC_RECORD
from dledger.record import encode_record, record_stamp, stamp_record_body

pytestmark = pytest.mark.spark

SCHEMA = (
    "key binary, value binary, timestamp timestamp, headers array<struct<key: string, value: binary>>, "
    "index long, body binary"
)


def _store(path: Path, stamped: bool) -> None:
    bodies = [
        encode_record(b"v1", b"k1", 1_700_000_000_123, [("h", b"1"), ("h", b"2")]),
        encode_record(b"v2", None, 0),
        encode_record(b"", b"", 5, [("only", b"")]),
    ]
    if stamped:
        bodies[0] = stamp_record_body(bodies[0], 9, 0, 0, 3, 1_700_000_000_200)
    with dledger.open_log(path) as log:
        log.append(b"plain")
        log.append_many(bodies, MAGIC_RECORD)
        assert (record_stamp(log.get(1).body) is not None) == stamped


def test_offline_reads_of_stamped_records_match_the_unstamped_log(spark: Any, tmp_path: Path) -> None:
    rows = {}
    for name in ("stamped", "plain"):
        _store(tmp_path / name, name == "stamped")
        df = spark.read.format("dledger").schema(SCHEMA).load(str(tmp_path / name))
        rows[name] = sorted((r.asDict(recursive=True) for r in df.collect()), key=lambda r: r["index"])
    assert rows["stamped"] == rows["plain"]
    assert [r["value"] for r in rows["stamped"]] == [b"plain", b"v1", b"v2", b""]
    assert rows["stamped"][1]["body"] == b"v1" and rows["stamped"][1]["key"] == b"k1"
