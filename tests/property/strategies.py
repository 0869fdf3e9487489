"""Hypothesis strategies shared by the core property tests: bodies and append operations
over small segments (DATA_SEG bytes of data, INDEX_SEG of index per segment)."""

from __future__ import annotations

from hypothesis import strategies as st

DATA_SEG, INDEX_SEG = 1024, 256
bodies = st.binary(min_size=0, max_size=300)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), bodies),
        st.tuples(st.just("many"), st.lists(bodies, max_size=6)),
        st.tuples(st.just("noop"), st.none()),
        st.tuples(st.just("term"), st.integers(0, 3)),
        st.tuples(st.just("huge"), st.integers(DATA_SEG - 56, DATA_SEG)),
    ),
    max_size=40,
)
"""(operation, argument) lists: append a body, append_many, a NOOP, raise the term, or
append an entry of about a whole segment (a blank pads the segment before it)."""
