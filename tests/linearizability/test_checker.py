"""The register linearizability checker: classic good and bad histories, unknown
outcomes, counterexamples, a property test against a sequential register with random
overlaps, and a history of 2,000 ops over 10 keys."""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.linearizability.checker import CAS, FAIL, INFO, READ, UNSET, WRITE, Op, check, linearizable

pytestmark = pytest.mark.unit


def w(value: Any, a: float, b: float | None, outcome: str = "ok", key: str = "x") -> Op:
    return Op(WRITE, key, a, b, outcome, value=value)


def r(value: Any, a: float, b: float, key: str = "x") -> Op:
    return Op(READ, key, a, b, value=value)


def cas(expected: Any, new: Any, a: float, b: float | None, swapped: bool | None, outcome: str = "ok", **kw: Any) -> Op:
    return Op(CAS, kw.pop("key", "x"), a, b, outcome, value=new, expected=expected, succeeded=swapped, **kw)


def ok(*ops: Op) -> bool:
    return check(ops).ok


def test_sequential_and_overlapping_histories_that_are_linearizable() -> None:
    assert ok()
    assert ok(r(None, 0, 1))  # the register starts absent
    assert ok(w(1, 0, 1), r(1, 2, 3), w(2, 4, 5), r(2, 6, 7))
    assert ok(w(1, 0, 10), r(None, 1, 2), r(1, 3, 4))  # the write lands while the reads run
    assert ok(w(1, 0, 10), w(2, 0, 10), r(2, 11, 12), r(2, 13, 14))  # either order of concurrent writes
    assert ok(w(1, 0, 10), w(2, 0, 10), r(1, 11, 12))
    assert ok(w(1, 0, 5), r(1, 5, 6))  # ops that touch are concurrent
    assert ok(w(1, 0, 5), r(None, 5, 6))


def test_stale_reads_and_lost_writes_are_caught() -> None:
    stale = check([w(1, 0, 1), w(2, 2, 3), r(1, 4, 5)])
    assert not stale.ok and stale.culprit == r(1, 4, 5)
    assert not ok(w(1, 0, 1), r(None, 2, 3))  # a lost write
    assert not ok(r(7, 0, 1))  # a value nobody wrote
    assert not ok(w(1, 0, 10), r(1, 1, 2), r(None, 3, 4))  # once seen, a write cannot be undone
    assert not ok(w(1, 0, 10), w(2, 0, 10), r(1, 11, 12), r(2, 13, 14))  # the order flipped between reads
    assert not ok(w(1, 5, 6), r(1, 0, 4))  # read before the write was invoked


def test_compare_and_set_anomalies() -> None:
    assert ok(cas(None, 1, 0, 1, True), cas(1, 2, 2, 3, True), r(2, 4, 5))
    assert ok(cas(None, 1, 0, 10, True), cas(None, 2, 0, 10, False), r(1, 11, 12))
    assert not ok(cas(None, 1, 0, 10, True), cas(None, 2, 0, 10, True))  # both won the same race
    assert not ok(w(1, 0, 1), cas(5, 2, 2, 3, True))  # swapped from a value that was not there
    assert not ok(w(1, 0, 1), cas(1, 2, 2, 3, False))  # failed although the value matched
    assert ok(w(1, 0, 1), cas(3, 2, 2, 3, False, observed=1))
    assert not ok(w(1, 0, 1), cas(3, 2, 2, 3, False, observed=7))  # reported a current value never there
    assert not ok(cas(None, 1, 0, 1, True), cas(None, 1, 2, 3, True))  # the second cannot find it absent


def test_unknown_outcomes_may_take_effect_after_their_invoke_or_never() -> None:
    assert ok(w(1, 0, None, INFO), r(1, 5, 6))  # it happened
    assert ok(w(1, 0, None, INFO), r(None, 5, 6))  # or never
    assert ok(w(1, 0, 1, INFO), r(None, 2, 3), r(1, 4, 5))  # or after the client gave up
    assert not ok(w(1, 0, None, INFO), r(1, 2, 3), r(None, 4, 5))  # but not undone once seen
    assert not ok(w(1, 5, None, INFO), r(1, 0, 4))  # and not before it was invoked
    assert not ok(w(1, 0, None, INFO), r(2, 5, 6))  # and never with another value
    assert ok(w(1, 0, 1), cas(1, 2, 2, None, None, INFO), r(2, 5, 6))
    assert ok(w(1, 0, 1), cas(1, 2, 2, None, None, INFO), r(1, 5, 6))
    assert not ok(w(1, 0, 1), cas(3, 2, 2, None, None, INFO), r(2, 5, 6))  # it could not have swapped
    assert ok(w(1, 0, 1), Op(READ, "x", 2, None, INFO, value=99))  # an unknown read says nothing


def test_failed_ops_never_happened() -> None:
    assert not ok(w(1, 0, 1, FAIL), r(1, 2, 3))
    assert ok(w(1, 0, 1, FAIL), r(None, 2, 3))


def test_keys_are_checked_apart_and_the_bad_one_is_named() -> None:
    result = check([w(1, 0, 1, key="a"), r(1, 2, 3, key="b"), w(2, 0, 1, key="b"), r(1, 2, 3, key="a")])
    assert not result.ok and result.key == "b" and result.culprit == r(1, 2, 3, key="b")
    assert result.keys == 2
    assert ok(w(1, 0, 1, key="a"), w(2, 0, 1, key="b"), r(1, 2, 3, key="a"), r(2, 2, 3, key="b"))


def test_the_counterexample_is_the_smallest_bad_prefix() -> None:
    good = [w(k, 2 * k, 2 * k + 1) for k in range(10)]
    stale = r(3, 20, 21)
    later = [w(100 + k, 30 + k, 30.5 + k) for k in range(5)]
    result = check([*later, stale, *good])
    assert not result.ok and result.culprit == stale
    assert result.prefix == [*good, stale]
    text = result.describe()
    assert "not linearizable: key 'x'" in text and "read -> 3" in text


def test_ops_running_at_the_cut_count_as_unknown() -> None:
    long_write = w(5, 0, 100)
    result = check([long_write, w(1, 1, 2), r(2, 3, 4), r(5, 101, 102)])
    assert not result.ok and result.culprit == r(2, 3, 4)
    assert result.prefix[0] == replace(long_write, outcome=INFO)


def test_bad_ops_are_refused() -> None:
    with pytest.raises(ValueError, match="bad op kind"):
        Op("append", "x", 0, 1)
    with pytest.raises(ValueError, match="complete >= invoke"):
        Op(READ, "x", 2, 1)
    with pytest.raises(ValueError, match="needs succeeded"):
        Op(CAS, "x", 0, 1, value=1)


def sequential_history(rng: random.Random, n: int, keys: int, width: float) -> tuple[list[Op], list[int]]:
    """Ops of a sequential register per key, op i taking effect at time i, its interval
    stretched randomly around that point (overlapping its neighbours); some writes end
    unknown (having happened or not) and some fail. Returns the ops and the positions of
    the ok reads."""
    state: dict[str, Any] = {}
    ops: list[Op] = []
    reads: list[int] = []
    for i in range(n):
        key = f"k{rng.randrange(keys)}"
        a, b = i - rng.uniform(0, width), i + rng.uniform(0, width)
        current = state.get(key)
        roll = rng.random()
        if roll < 0.4:
            ops.append(r(current, a, b, key=key))
            reads.append(len(ops) - 1)
        elif roll < 0.75:
            outcome = rng.choice(["ok"] * 8 + [INFO, FAIL])
            happened = outcome == "ok" or (outcome == INFO and rng.random() < 0.5)
            if happened:
                state[key] = i
            ops.append(w(i, a, None if outcome == INFO else b, outcome, key=key))
        else:
            expected = rng.choice([current, i - 1, None])
            swapped = expected == current
            if swapped:
                state[key] = i
            ops.append(cas(expected, i, a, b, swapped, key=key, observed=UNSET_OR(current, swapped, rng)))
    return ops, reads


def UNSET_OR(current: Any, swapped: bool, rng: random.Random) -> Any:
    """A failed cas reports the current value half the time."""
    return current if not swapped and rng.random() < 0.5 else UNSET


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40), st.integers(1, 3), st.floats(0, 4))
def test_sequential_registers_with_overlaps_pass_and_a_corrupted_read_fails(
    seed: int, n: int, keys: int, width: float
) -> None:
    rng = random.Random(seed)
    ops, reads = sequential_history(rng, n, keys, width)
    shuffled = ops[:]
    rng.shuffle(shuffled)
    assert check(shuffled).ok
    if reads:
        k = rng.choice(reads)
        corrupted = replace(ops[k], value="never written")
        result = check([*ops[:k], corrupted, *ops[k + 1 :]])
        assert not result.ok and result.culprit == corrupted


def test_two_thousand_ops_over_ten_keys() -> None:
    ops, reads = sequential_history(random.Random(18), 2000, 10, 30.0)  # ~6 ops of a key at once
    start = time.perf_counter()
    result = check(ops)
    elapsed = time.perf_counter() - start
    print(f"2000 ops / 10 keys: {result.describe()} in {elapsed:.2f} s")
    assert result.ok and result.keys == 10
    assert result.states < 10 * len(ops)  # memoisation keeps the search near-linear
    bad = replace(ops[reads[-1]], value="stale")
    assert not check([*ops[: reads[-1]], bad, *ops[reads[-1] + 1 :]]).ok


def test_the_search_backtracks_over_concurrent_writes() -> None:
    """Many concurrent writes and reads that force one particular order: the search must
    try orders, and memoisation keeps it from trying them all."""
    writes = [w(k, 0, 100) for k in range(12)]
    reads = [r(k, 101 + 2 * k, 102 + 2 * k) for k in (11,)]
    good, states = linearizable([*writes, *reads])
    assert good and states < 2**12 * 13
    assert not linearizable([*writes, r(3, 101, 102), r(4, 103, 104)])[0]


def brute_force(ops: list[Op], initial: Any = None) -> bool:
    """Linearizable by trying every order (and every subset of unknown ops left out)."""
    from itertools import permutations

    from tests.linearizability.checker import _relevant, _step

    ops = _relevant(ops)
    unknown = [k for k, op in enumerate(ops) if op.outcome == INFO]
    for mask in range(1 << len(unknown)):
        dropped = {unknown[b] for b in range(len(unknown)) if mask >> b & 1}
        chosen = [op for k, op in enumerate(ops) if k not in dropped]
        for order in permutations(chosen):
            if any(
                b.outcome == "ok" and b.complete is not None and b.complete < a.invoke
                for x, a in enumerate(order)
                for b in order[x + 1 :]
            ):
                continue  # a later op finished before an earlier one started
            state, good = initial, True
            for op in order:
                good, state = _step(state, op)
                if not good:
                    break
            if good:
                return True
    return False


small_op = st.builds(
    lambda kind, a, d, outcome, value, expected, swapped, report: Op(
        kind,
        "x",
        a,
        None if outcome == INFO else a + d,
        outcome,
        value=value,
        expected=expected if kind == CAS else None,
        succeeded=swapped if kind == CAS and outcome == "ok" else None,
        observed=value if kind == CAS and outcome == "ok" and not swapped and report else UNSET,
    ),
    st.sampled_from([READ, WRITE, CAS]),
    st.integers(0, 6),
    st.integers(0, 4),
    st.sampled_from(["ok", "ok", "ok", INFO]),
    st.sampled_from([None, 1, 2]),
    st.sampled_from([None, 1, 2]),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(small_op, max_size=6))
def test_the_search_agrees_with_trying_every_order(ops: list[Op]) -> None:
    assert check(ops).ok == brute_force(ops)


def test_key_value_commands_and_answers_become_register_ops() -> None:
    from dledger.kv import commands as kv
    from tests.linearizability.checker import op_from_kv

    history = [
        op_from_kv(kv.Put(b"k", b"1"), kv.Ok(), 0, 1),
        op_from_kv(kv.Cas(b"k", b"1", b"2"), kv.Ok(), 2, 3),
        op_from_kv(kv.Cas(b"k", b"1", b"3"), kv.CasFailed(b"2"), 4, 5),
        op_from_kv(kv.Get(b"k"), kv.Value(b"2"), 6, 7),
        op_from_kv(kv.Delete(b"k"), kv.Ok(), 8, 9),
        op_from_kv(kv.Get(b"k"), kv.NotFound(), 10, 11),
        op_from_kv(kv.Put(b"k", b"9"), None, 12, None, INFO),
    ]
    assert check(history).ok
    assert history[2].observed == b"2" and history[5].value is None
    stale = op_from_kv(kv.Cas(b"k", b"1", b"3"), kv.CasFailed(b"1"), 4, 5)  # reports a value already replaced
    assert not check([*history[:2], stale]).ok
    with pytest.raises(ValueError, match="not a register operation"):
        op_from_kv(kv.Len(), kv.Count(0), 0, 1)
