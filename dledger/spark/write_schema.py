"""The write schema of the `dledger` data source, checked without Spark or pyarrow: a
value column (or its alias `body`) and optionally Kafka's `key`, `timestamp` and
`headers` (`dledger.spark.records` encodes the rows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dledger.spark.target import OptionError

HEADERS_TYPE = "array<struct<key:string,value:binary>>"
"""Spark's simpleString of the headers column."""


@dataclass(frozen=True)
class WriteColumns:
    """Which columns a write's rows carry (positions in the Arrow batches).

    Attributes:
        value: the payload column (`value` or its alias `body`).
        key, timestamp, headers: -1 when absent. Without any of them the rows are
            written as plain entries (as before records existed).
        timestamp_type: "timestamp" (Spark TimestampType) or "bigint" (ms since the epoch).
    """

    value: int
    key: int = -1
    timestamp: int = -1
    headers: int = -1
    timestamp_type: str = "timestamp"

    @property
    def records(self) -> bool:
        """True when the rows are written as records (magic 16)."""
        return self.key >= 0 or self.timestamp >= 0 or self.headers >= 0


_WRITE_TYPES = {
    "key": ("binary", "string"),
    "value": ("binary", "string"),
    "body": ("binary", "string"),
    "timestamp": ("timestamp", "bigint"),
    "headers": (HEADERS_TYPE,),
}


def write_columns_of(fields: Sequence[tuple[str, str]]) -> WriteColumns:
    """Validate a write schema given as (name, Spark simpleString type) pairs: `value`
    (or its alias `body`; binary or string, required), and optionally `key` (binary or
    string), `timestamp` (timestamp, or long ms) and `headers`
    (array<struct<key:string,value:binary>>), in any order.

    Raises:
        OptionError: a missing value, another column, a repeated column or a wrong type.
    """
    at: dict[str, int] = {}
    types: dict[str, str] = {}
    for k, (name, type_name) in enumerate(fields):
        key = name.lower()
        if key not in _WRITE_TYPES:
            raise OptionError(
                f"cannot write column {name!r}: the dledger sink takes value (or body), key, timestamp, headers "
                "(use df.select(...) to keep only those)"
            )
        if key in at or (key in ("value", "body") and ("value" in at or "body" in at)):
            raise OptionError(f"column {name!r} is given twice (body is an alias of value)")
        if type_name.lower().replace(" ", "") not in _WRITE_TYPES[key]:
            wanted = " or ".join(_WRITE_TYPES[key])
            raise OptionError(f"column {name!r} must be {wanted.replace('bigint', 'long')}, got {type_name}")
        at[key], types[key] = k, type_name.lower()
    value = at.get("value", at.get("body", -1))
    if value < 0:
        raise OptionError(
            "writing to dledger needs a value column (or body), binary or string; "
            f"got {[n for n, _ in fields] or 'none'}"
        )
    return WriteColumns(
        value, at.get("key", -1), at.get("timestamp", -1), at.get("headers", -1), types.get("timestamp", "timestamp")
    )
