"""Option values of the `dledger` data source, without Spark: integers, booleans and
durations as Spark passes them (strings), and the limits they are checked against."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from dledger.config_bounds import INT64_MAX
from dledger.spark.target import TARGET_OPTIONS, OptionError

SPARK_OPTIONS = ("checkpointLocation",)
"""Options Spark itself passes to a source or sink (accepted, not used)."""
MAX_FETCH_BYTES = 32 << 20
"""`fetchMaxBytes`: a member's limit per ReadCommitted batch (`ServiceLimits.max_batch_bytes`
in dledger.transport.service_core; tests check the two agree)."""
MAX_FETCH_ENTRIES = 1 << 20
"""`fetchMaxEntries`: a member's limit per ReadCommitted batch (`ServiceLimits.max_batch_count`)."""
MAX_TIMEOUT_MS = 1_000_000_000
"""`rpcTimeoutMs`, `connectTimeoutMs`: the client's longest timeout, 1e6 s
(`dledger.client.members.MAX_TIMEOUT_S`, not imported here: it imports grpc)."""
MAX_ABORT_WAIT_MS = 600_000
"""`abortWaitMs`: 10 minutes (Spark kills a cancelled task's Python worker 2 s after
noticing, `spark.python.task.killTimeout`)."""
MAX_PARTITIONS = (1 << 31) - 1
"""`minPartitions`: Spark counts partitions in an int."""


def check_known(opts: Mapping[str, str], allowed: Sequence[str], what: str, streams: Sequence[str] = ()) -> None:
    """Refuse option names not in `allowed` or `streams` (valid for streams only: listed
    apart), a second path, and an empty value of any option but the target's."""
    if "paths" in opts:
        raise OptionError(
            f"a dledger {what} takes one path (a node directory dledger-<selfId>, or a storeBaseDir holding one): "
            f"load(path) or option('path', ...), got several: {opts['paths']}"
        )
    names = {name.lower(): name for name in (*allowed, *streams, *SPARK_OPTIONS)}
    unknown = sorted(k for k in opts if k not in names)
    if unknown:
        also = f"; streams also: {', '.join(streams)}" if streams else ""
        raise OptionError(
            f"unknown option(s) for a dledger {what}: {', '.join(unknown)}; valid options: {', '.join(allowed)}{also}"
        )
    for key, raw in opts.items():
        if key in names and names[key] not in (*TARGET_OPTIONS, *SPARK_OPTIONS) and not str(raw).strip():
            raise OptionError(f"option {names[key]} is empty: give it a value or leave it out")


_INTEGER = re.compile(r"-?[0-9]+")


def parse_int(
    opts: Mapping[str, str], name: str, default: int, minimum: int = 1, maximum: int = INT64_MAX, why: str = ""
) -> int:
    """Integer option `name` (minimum..maximum: plain decimal digits, `why` says where the
    maximum comes from), or `default` when absent."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw.strip()):
        raise OptionError(f"option {name} must be an integer (decimal digits), got {raw!r}")
    value = int(raw.strip())
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise OptionError(f"option {name} must be <= {maximum}{f' ({why})' if why else ''}, got {value}")
    return value


_DURATION_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
}
_DURATION = re.compile(r"^(\d+)\s*([a-z]*)$")


def parse_duration_ms(opts: Mapping[str, str], name: str, default: int) -> int:
    """A duration option (`15m`, `30s`, `500ms`, `2 minutes`, `1h`; a bare number is
    milliseconds) in ms, at least 1, or `default` when absent."""
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    match = _DURATION.match(raw.strip().lower())
    unit = match.group(2) or "ms" if match else ""
    if unit not in _DURATION_UNITS_MS and unit.endswith("s"):
        unit = unit[:-1]  # seconds, minutes, hours, days, mins, secs
    if match is None or unit not in _DURATION_UNITS_MS or int(match.group(1)) < 1:
        raise OptionError(f"option {name} must be a positive duration such as 15m, 30s or 500ms, got {raw!r}")
    return int(match.group(1)) * _DURATION_UNITS_MS[unit]


def parse_bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    """Boolean option `name` ("true"/"false", any case), or `default` when absent."""
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


def index_option(name: str, raw: str, what: str) -> int:
    """An index option's number: decimal digits, 0..INT64_MAX."""
    if not _INTEGER.fullmatch(raw.strip()):
        raise OptionError(f"option {name} must be {what} (decimal digits), got {raw!r}")
    index = int(raw.strip())
    if not 0 <= index <= INT64_MAX:
        raise OptionError(f"option {name} must be >= 0 and <= {INT64_MAX}, got {index}")
    return index
