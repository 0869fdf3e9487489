"""The in-memory store takes a leader's encoded run only when every header and body
CRC checks out, whatever the sign the header keeps the CRC with."""

from __future__ import annotations

import zlib

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import HEADER_SIZE
from dledger.store.memory import MemoryLogStore

pytestmark = pytest.mark.unit


def leader_run(bodies: list[bytes]) -> tuple[bytes, int]:
    leader = MemoryLogStore()
    leader.term = 1
    leader.append_many(bodies)
    return leader.read_run(0, 1 << 20)


def test_a_run_with_crcs_of_both_signs_is_taken() -> None:
    bodies = [b"a", b"body-%d" % 7, b"x" * 300]
    assert {zlib.crc32(b) >= 1 << 31 for b in bodies} == {True, False}  # negative and positive in the header
    run, count = leader_run(bodies)
    follower = MemoryLogStore()
    follower.term = 1
    assert follower.append_encoded(run) == count == 3
    assert [follower.get(i).body for i in range(3)] == bodies


def test_a_flipped_body_byte_is_refused_and_nothing_is_taken() -> None:
    run, _ = leader_run([b"a", b"body-7", b"x" * 300])
    damaged = bytearray(run)
    second = len(run) - (HEADER_SIZE + 300) - 1  # the last byte of the second body
    damaged[second] ^= 0xFF
    follower = MemoryLogStore()
    follower.term = 1
    with pytest.raises(DLedgerError, match="body CRC mismatch at index 1") as info:
        follower.append_encoded(bytes(damaged))
    assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT
    assert follower.end_index == -1  # the good first entry was not taken either
