"""The column encoder of the write side (`encode_records`): the compiled one and its
twin give the same bodies as `encode_record` row by row, and refuse columns that lie
(offsets out of order or past the data, short buffers, a negative time, a long key) with
the same clear error, never an over-read."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import _store_py
from dledger._native import impl
from dledger.entry import MAX_TIMESTAMP_MS

pytestmark = pytest.mark.property

if not getattr(impl, "COMPILED", False):  # pragma: no cover - twin-only runs compare the twin to itself
    pytest.skip("compiled extension disabled", allow_module_level=True)

MODULES = (impl, _store_py)
NOW = 1_700_000_000_000

rows = st.lists(
    st.tuples(st.binary(max_size=150), st.none() | st.binary(max_size=30), st.integers(0, MAX_TIMESTAMP_MS)),
    max_size=40,
)


def _column(values: list[bytes | None], lead: bytes = b"") -> tuple[bytes, bytes]:
    """Arrow-layout int32 offsets and data of `values` (None: an empty slot), the data
    preceded by `lead` (offsets then do not start at 0, as in a sliced Arrow array)."""
    offsets = [len(lead)]
    data = bytearray(lead)
    for value in values:
        data += value or b""
        offsets.append(len(data))
    return np.array(offsets, dtype=np.int32).tobytes(), bytes(data)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except ValueError as exc:
        return ("ValueError", str(exc))


@settings(max_examples=300, deadline=None)
@given(rows, st.booleans(), st.booleans(), st.binary(max_size=8))
def test_encode_records_equals_encode_record_per_row(
    table: list[tuple[bytes, bytes | None, int]], with_keys: bool, with_times: bool, lead: bytes
) -> None:
    n = len(table)
    value_offsets, values = _column([v for v, _, _ in table], lead)
    keys = [k if with_keys else None for _, k, _ in table]
    key_offsets, key_data = _column(keys) if with_keys else (b"", b"")
    valid = bytes(k is not None for k in keys) if with_keys else b""
    times = np.array([t for _, _, t in table], dtype=np.int64).tobytes() if with_times else b""
    expected = [impl.encode_record(v, k, t if with_times else NOW) for (v, _, t), k in zip(table, keys, strict=True)]
    for mod in MODULES:
        assert mod.encode_records(n, value_offsets, values, key_offsets, key_data, valid, times, NOW) == expected


def test_every_key_is_present_without_a_validity_column() -> None:
    offsets, data = _column([b"v1", b"v2"])
    key_offsets, keys = _column([b"", b"k"])
    for mod in MODULES:
        bodies = mod.encode_records(2, offsets, data, key_offsets, keys, b"", b"", NOW)
        assert [mod.decode_record(b)[1] for b in bodies] == [b"", b"k"]  # an empty key, not None


def _lies() -> list[tuple[str, tuple[Any, ...], str]]:
    offsets, data = _column([b"ab", b"cd"])
    backwards = np.array([0, 3, 2], dtype=np.int32).tobytes()
    past = np.array([0, 2, 9], dtype=np.int32).tobytes()
    negative = np.array([-1, 2, 4], dtype=np.int32).tobytes()
    key_offsets, keys = _column([b"k" * 65537, b""])
    return [
        ("backwards", (2, backwards, data, b"", b"", b"", b"", NOW), "offset 2 is below offset 1|out of order"),
        ("past the data", (2, past, data, b"", b"", b"", b"", NOW), "outside the 4 bytes"),
        ("negative offset", (2, negative, data, b"", b"", b"", b"", NOW), "outside the 4 bytes"),
        ("short offsets", (3, offsets, data, b"", b"", b"", b"", NOW), "shorter than 3 rows"),
        ("short keys", (2, offsets, data, offsets[:8], data, b"", b"", NOW), "key offsets shorter than 2 rows"),
        ("short validity", (2, offsets, data, offsets, data, b"\x01", b"", NOW), "key validity shorter"),
        ("short times", (2, offsets, data, b"", b"", b"", bytes(8), NOW), "timestamps shorter than 2 rows"),
        ("negative time", (2, offsets, data, b"", b"", b"", np.array([0, -5], np.int64).tobytes(), NOW), ">= 0"),
        ("negative now", (2, offsets, data, b"", b"", b"", b"", -1), ">= 0, got -1"),
        ("long key", (2, offsets, data, key_offsets, keys, b"", b"", NOW), "over the limit of 65536"),
        ("negative count", (-1, offsets, data, b"", b"", b"", b"", NOW), "shorter than -1 rows"),
    ]


@pytest.mark.parametrize(("case", "args", "message"), _lies(), ids=[case for case, _, _ in _lies()])
def test_columns_that_lie_are_refused(case: str, args: tuple[Any, ...], message: str) -> None:
    errors = []
    for mod in MODULES:
        with pytest.raises(ValueError, match=message) as caught:
            mod.encode_records(*args)
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), min_size=1, max_size=6), st.binary(max_size=10))
def test_offsets_never_read_outside_the_data(offsets: list[int], data: bytes) -> None:
    raw = np.array(offsets, dtype=np.int32).tobytes()
    count = len(offsets) - 1
    outcomes = [_outcome(mod.encode_records, count, raw, data, b"", b"", b"", b"", NOW) for mod in MODULES]
    if isinstance(outcomes[0], list):
        values = [data[a:b] for a, b in itertools.pairwise(offsets)]
        assert outcomes[1] == outcomes[0] == [impl.encode_record(v, None, NOW) for v in values]
    else:
        assert outcomes[0] == outcomes[1] and outcomes[0][0] == "ValueError"
