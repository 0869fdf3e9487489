"""Option values at the edges, without Spark: every number has its real maximum (a
member's, the client's, Spark's or a long), numbers are plain decimal digits, an empty
value is refused, an end before its start is refused, and a misspelt option of a batch
read or a second path is reported as such (all at load() / save())."""

from __future__ import annotations

import pytest

from dledger.spark.option_values import MAX_FETCH_BYTES, MAX_FETCH_ENTRIES, MAX_TIMEOUT_MS
from dledger.spark.options import check_options_at_load, parse_read_options, parse_write_options
from dledger.spark.target import OptionError

pytestmark = pytest.mark.unit

PEERS = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
BIG = str(2**63)


def test_the_maxima_are_the_members_and_the_clients() -> None:
    from dledger.client.members import MAX_TIMEOUT_S
    from dledger.transport.service_core import ServiceLimits

    limits = ServiceLimits()
    assert (limits.max_batch_bytes, limits.max_batch_count) == (MAX_FETCH_BYTES, MAX_FETCH_ENTRIES)
    assert MAX_TIMEOUT_MS == MAX_TIMEOUT_S * 1000


@pytest.mark.parametrize(
    ("name", "top", "message"),
    [
        ("fetchMaxBytes", MAX_FETCH_BYTES, "a member's limit per batch"),
        ("fetchMaxEntries", MAX_FETCH_ENTRIES, "a member's limit per batch"),
        ("rpcTimeoutMs", MAX_TIMEOUT_MS, "the client's longest timeout, 1e6 s"),
        ("connectTimeoutMs", MAX_TIMEOUT_MS, "the client's longest timeout, 1e6 s"),
        ("minPartitions", 2**31 - 1, "Spark's limit"),
        ("maxPartitionBytes", 2**63 - 1, ""),
        ("startingTimestamp", 2**63 - 1, ""),
    ],
)
def test_read_numbers_have_a_maximum(name: str, top: int, message: str) -> None:
    options = {"peers": PEERS, name: str(top)}
    check_options_at_load(options)
    with pytest.raises(OptionError, match=rf"^option {name} must be <= {top}.*{message}.*got {top + 1}$"):
        check_options_at_load({**options, name: str(top + 1)})


def test_indexes_are_longs() -> None:
    assert parse_read_options({"path": "/x", "startingIndex": str(2**63 - 1)}, False).starting == 2**63 - 1
    for name in ("startingIndex", "endingIndex"):
        with pytest.raises(OptionError, match=rf"option {name} must be >= 0 and <= {2**63 - 1}, got {BIG}"):
            check_options_at_load({"path": "/x", name: BIG})
    with pytest.raises(OptionError, match=r"option maxEntriesPerTrigger must be <= 9223372036854775807"):
        parse_read_options({"path": "/x", "maxEntriesPerTrigger": BIG}, True)


def test_write_numbers_have_a_maximum() -> None:
    for name, top in (("abortWaitMs", 600_000), ("rpcTimeoutMs", MAX_TIMEOUT_MS), ("batchBytes", 16 << 20)):
        assert getattr(parse_write_options({"peers": PEERS, name: str(top)}, False), _attr(name)) == top
        for value in (top + 1, 2**40, 2**63):
            with pytest.raises(OptionError, match=rf"^option {name} must be <= {top} \(.*\), got {value}$"):
                parse_write_options({"peers": PEERS, name: str(value)}, False)


def _attr(name: str) -> str:
    return {"abortWaitMs": "abort_wait_ms", "rpcTimeoutMs": "rpc_timeout_ms", "batchBytes": "batch_bytes"}[name]


@pytest.mark.parametrize("raw", ["1_000", "+5", "٣", "1e3", "0x10", " ", ""])
def test_numbers_are_plain_decimal_digits_and_never_empty(raw: str) -> None:
    for name in ("startingIndex", "endingIndex", "minPartitions", "fetchMaxBytes", "startingTimestamp"):
        with pytest.raises(OptionError, match=rf"option {name} (must be .*decimal digits|is empty)"):
            check_options_at_load({"path": "/x", name: raw})
    with pytest.raises(OptionError, match=r"option batchEntries (must be an integer|is empty)"):
        parse_write_options({"peers": PEERS, "batchEntries": raw}, False)


@pytest.mark.parametrize(
    "name", ["maxEntriesPerTrigger", "minOffsetsPerTrigger", "readFrom", "failOnDataLoss", "includeNoops"]
)
def test_an_empty_value_is_refused(name: str) -> None:
    with pytest.raises(OptionError, match=f"^option {name} is empty: give it a value or leave it out$"):
        check_options_at_load({"path": "/x", name: ""})


@pytest.mark.parametrize("name", ["group", "token", "tlsCa", "tlsCert", "tlsKey"])
@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_target_option_is_refused_not_defaulted(name: str, blank: str) -> None:
    """An empty group read from, and appended into, group `default` (say
    `option("group", os.environ.get("GROUP", ""))`)."""
    peers = "n0-127.0.0.1:20911"
    for parse in (lambda o: parse_read_options(o, False), lambda o: parse_write_options(o, False)):
        with pytest.raises(OptionError, match=f"^option {name} is empty: give it a value or leave it out"):
            parse({"peers": peers, name: blank})


def test_an_end_before_its_start_is_refused() -> None:
    check_options_at_load({"path": "/x", "startingIndex": "5", "endingIndex": "5"})  # empty, but in order
    with pytest.raises(OptionError, match=r"option endingIndex \(4\) is before startingIndex \(5\)"):
        check_options_at_load({"path": "/x", "startingIndex": "5", "endingIndex": "4"})
    with pytest.raises(OptionError, match=r"option endingTimestamp \(9\) is before startingTimestamp \(10\)"):
        check_options_at_load({"path": "/x", "startingTimestamp": "10", "endingTimestamp": "9"})


def test_a_batch_reads_misspelt_option_and_a_second_path() -> None:
    with pytest.raises(OptionError, match=r"unknown option\(s\) for a dledger read: startingindx; valid") as info:
        check_options_at_load({"path": "/x", "startingIndx": "5"})
    assert "streams also: maxEntriesPerTrigger" in str(info.value)
    with pytest.raises(OptionError, match=r"a dledger read takes one path .*got several: \[\"/a\", \"/b\"\]"):
        check_options_at_load({"paths": '["/a", "/b"]'})
