"""The client's retry decision table and its small helpers (pure logic)."""

from __future__ import annotations

import random

import pytest

from dledger.client import DEFAULT_PEERS, DLedgerClient
from dledger.client.policy import (
    Backoff,
    Decision,
    IndeterminateError,
    code_decision,
    never_sent,
    read_decision,
    rpc_code,
    rpc_decision,
)
from dledger.clock import ManualClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import ConfigError, parse_peers

pytestmark = pytest.mark.unit

REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:20911: "
    "Failed to connect to remote host: Connection refused"
)


@pytest.mark.parametrize(
    ("code", "decision"),
    [
        (ResponseCode.SUCCESS, Decision.SUCCESS),
        (ResponseCode.NOT_LEADER, Decision.REDIRECT),
        (ResponseCode.LEADER_PENDING_FULL, Decision.RETRY),
        (ResponseCode.LEADER_TRANSFERRING, Decision.RETRY),
        (ResponseCode.LEADER_NOT_READY, Decision.RETRY),
        (ResponseCode.TERM_NOT_READY, Decision.RETRY),
        (ResponseCode.REQUEST_WITH_EMPTY_BODYS, Decision.FAIL),
        (ResponseCode.UNKNOWN_GROUP, Decision.FAIL),
        (ResponseCode.UNKNOWN_MEMBER, Decision.FAIL),
        (ResponseCode.UNEXPECTED_ARGUMENT, Decision.FAIL),
        (ResponseCode.DISK_FULL, Decision.FAIL),
        # may have been appended: never retried
        (ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, Decision.INDETERMINATE),
        (ResponseCode.TERM_CHANGED, Decision.INDETERMINATE),
        (ResponseCode.TIMEOUT, Decision.INDETERMINATE),
        (ResponseCode.INTERNAL_ERROR, Decision.INDETERMINATE),
        (ResponseCode.DISK_ERROR, Decision.INDETERMINATE),
        (ResponseCode.NETWORK_ERROR, Decision.INDETERMINATE),
        (ResponseCode.UNKNOWN, Decision.INDETERMINATE),
        (12345, Decision.INDETERMINATE),  # a code this client does not know
    ],
)
def test_code_decision_table(code: int, decision: Decision) -> None:
    assert code_decision(code) is decision


@pytest.mark.parametrize(
    ("status", "details", "decision"),
    [
        ("UNAVAILABLE", REFUSED, Decision.REDIRECT),
        ("UNAVAILABLE", "DNS resolution failed for nohost:1", Decision.REDIRECT),
        ("UNAVAILABLE", "n0 is shutting down", Decision.REDIRECT),
        ("UNAVAILABLE", "n0 is shutting down; the outcome of this append is unknown", Decision.INDETERMINATE),
        ("UNAVAILABLE", "Stream removed (Socket closed)", Decision.INDETERMINATE),
        ("UNAVAILABLE", "Cancelling all calls", Decision.INDETERMINATE),
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", Decision.INDETERMINATE),
        ("CANCELLED", "", Decision.INDETERMINATE),
        ("UNKNOWN", "Exception calling application", Decision.INDETERMINATE),
        ("INTERNAL", "", Decision.INDETERMINATE),
        ("RESOURCE_EXHAUSTED", "too many open streams", Decision.RETRY),
        ("RESOURCE_EXHAUSTED", "Received message larger than max", Decision.FAIL),
        ("INVALID_ARGUMENT", "not a dledger.v1.AppendRequest", Decision.FAIL),
        ("UNIMPLEMENTED", "", Decision.FAIL),
    ],
)
def test_rpc_decision_table(status: str, details: str, decision: Decision) -> None:
    assert rpc_decision(status, details) is decision


def test_only_connect_failures_count_as_never_sent() -> None:
    assert never_sent("UNAVAILABLE", REFUSED)
    assert not never_sent("UNAVAILABLE", "Socket closed")
    assert not never_sent("DEADLINE_EXCEEDED", REFUSED)


def test_reads_retry_every_transport_failure_but_a_refused_request() -> None:
    for status in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN", "INTERNAL"):
        assert read_decision(status) is Decision.REDIRECT
    assert read_decision("INVALID_ARGUMENT") is Decision.FAIL
    assert read_decision("RESOURCE_EXHAUSTED", "Received message larger than max") is Decision.FAIL
    assert read_decision("RESOURCE_EXHAUSTED", "too many open streams: every ReadCommitted slot") is Decision.REDIRECT


def test_rpc_code_names_the_dledger_code() -> None:
    assert rpc_code("DEADLINE_EXCEEDED") is ResponseCode.TIMEOUT
    assert rpc_code("UNAVAILABLE") is ResponseCode.NETWORK_ERROR
    assert rpc_code("INVALID_ARGUMENT") is ResponseCode.UNEXPECTED_ARGUMENT
    assert rpc_code("UNIMPLEMENTED") is ResponseCode.UNSUPPORTED


def test_indeterminate_error_is_a_dledger_error_saying_the_outcome_is_unknown() -> None:
    error = IndeterminateError(ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, "append to n0")
    assert isinstance(error, DLedgerError)
    assert error.code is ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    assert "outcome unknown" in str(error)
    assert str(error).startswith("WAIT_QUORUM_ACK_TIMEOUT (502)")
    said = IndeterminateError(ResponseCode.TERM_CHANGED, "x; the outcome is unknown: the entries may still commit")
    assert said.message == "x; the outcome is unknown: the entries may still commit"  # not said twice


def test_backoff_grows_is_capped_and_stops_at_the_deadline() -> None:
    clock = ManualClock(1000)
    backoff = Backoff(clock, first_ms=10, max_ms=40, rng=random.Random(1))
    waits = []
    for _ in range(6):
        before = clock.now_ms()
        assert backoff.sleep(deadline_ms=10_000)
        waits.append(clock.now_ms() - before)
    assert all(1 <= w <= 41 for w in waits)
    assert max(waits[3:]) <= 41 and backoff.next_ms == 40
    # the last wait is cut at the deadline, then it gives up
    clock.set(9_990)
    assert backoff.sleep(deadline_ms=10_000)
    assert clock.now_ms() <= 10_000
    clock.set(10_000)
    assert not backoff.sleep(deadline_ms=10_000)


def test_default_peers_are_the_local_cluster_and_parse() -> None:
    assert parse_peers(DEFAULT_PEERS) == {
        "n0": "127.0.0.1:20911",
        "n1": "127.0.0.1:20912",
        "n2": "127.0.0.1:20913",
    }
    client = DLedgerClient()
    try:
        assert client.peers["n2"] == "127.0.0.1:20913" and client.group == "default"
        with pytest.raises(DLedgerError) as info:
            client.target("n9")
        assert info.value.code is ResponseCode.UNKNOWN_MEMBER
    finally:
        client.close()


def test_bad_peers_and_timeouts_are_refused() -> None:
    with pytest.raises(ConfigError):
        DLedgerClient("n0")
    with pytest.raises(ValueError, match="timeout_s"):
        DLedgerClient(timeout_s=0)
