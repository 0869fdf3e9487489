"""Codecs against the golden bytes, layout constants, and which implementation is loaded."""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

import pytest

from dledger import _store_py, entry
from dledger._native import impl

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_compiled_module_is_loaded_unless_disabled() -> None:
    if os.environ.get("DLEDGER_NO_EXTENSIONS") == "1":
        assert impl is _store_py
    else:
        assert impl.COMPILED is True
        assert impl.__name__ == "dledger._store"
        assert impl.__file__.endswith(".so")


def test_layout_header_agrees_with_python_constants() -> None:
    text = (ROOT / "native" / "dl_layout.h").read_text()
    defines = dict(re.findall(r"#define (DL_\w+)\s+\(?(-?\d+)\)?", text))
    assert int(defines["DL_HEADER_SIZE"]) == entry.HEADER_SIZE
    assert int(defines["DL_INDEX_UNIT"]) == entry.INDEX_UNIT_SIZE
    assert int(defines["DL_MAGIC_BLANK"]) == entry.MAGIC_BLANK
    assert int(defines["DL_MAGIC_NOOP"]) == entry.MAGIC_NOOP
    assert int(defines["DL_MIN_BLANK_LEN"]) == entry.MIN_BLANK_LEN
    for name in ("MAGIC", "SIZE", "INDEX", "TERM", "POS", "CHANNEL", "CHAIN_CRC", "BODY_CRC", "BODY_SIZE"):
        assert int(defines[f"DL_OFF_{name}"]) == getattr(entry, f"OFF_{name}")
    for name in ("MAGIC", "POS", "SIZE", "INDEX", "TERM"):
        assert int(defines[f"DL_IDX_OFF_{name}"]) == getattr(entry, f"IDX_OFF_{name}")


def test_entry_bytes_match_the_golden_hexdump() -> None:
    # golden/README.md §2: basic/…/data/00000000000000000000 starts with index 0 (empty
    # body, term 1) and index 1 (1-byte body 0x65 at pos 48)
    golden = bytes.fromhex(
        "00000001 00000030 0000000000000000 0000000000000001 0000000000000000 00000000 00000000 00000000 00000000"
        "00000001 00000031 0000000000000001 0000000000000001 0000000000000030 00000000 00000000 00000000 00000001"
        "65"
    )
    assert impl.encode_entry(1, 0, 1, 0, b"", False) + impl.encode_entry(1, 1, 1, 48, b"\x65", False) == golden
    assert impl.decode_header(golden, 48) == (1, 49, 1, 1, 48, 0, 0, 0, 1)


def test_index_unit_puts_pos_before_size() -> None:
    unit = impl.encode_index_unit(1, 34057, 52, 128, 1)
    assert unit.hex() == "0000000100000000000085090000003400000000000000800000000000000001"
    assert impl.decode_index_unit(unit) == (1, 34057, 52, 128, 1)


@pytest.mark.parametrize("data", [b"", b"a", b"hello world" * 100, bytes(range(256)) * 4096])
def test_crc32_matches_zlib_and_java(data: bytes) -> None:
    assert impl.crc32(data) == zlib.crc32(data) & 0xFFFFFFFF == _store_py.crc32(data)


def test_crc_field_is_stored_as_signed_int() -> None:
    encoded = impl.encode_entry(1, 0, 1, 0, b"xyz", True)
    assert impl.decode_header(encoded)[7] == int.from_bytes(
        (zlib.crc32(b"xyz") & 0xFFFFFFFF).to_bytes(4, "big"), "big", signed=True
    )


def test_decode_rejects_short_buffers() -> None:
    with pytest.raises(ValueError):
        impl.decode_header(b"\x00" * 47)
    with pytest.raises(ValueError):
        impl.decode_index_unit(b"\x00" * 31)


@pytest.mark.parametrize("mod", [impl, _store_py])
def test_quota_throttles_within_one_second(mod: object) -> None:
    quota = mod.Quota(100)  # type: ignore[attr-defined]
    quota.sample(60, 5_000)
    assert not quota.validate_now(5_500)
    quota.sample(60, 5_900)
    assert quota.validate_now(5_999)
    assert quota.left_now_ms(5_999) == 1
    assert not quota.validate_now(6_000)  # a new second starts a new budget
    quota.sample(10, 10_000)  # five seconds later the slot is reused, not accumulated
    assert not quota.validate_now(10_001)
