"""A linearizability checker for registers (one per key), Wing & Gong's search with
Lowe's memoisation, as Porcupine does it, and P-compositionality: each key's history is
checked on its own.

A history is a list of `Op`s: reads, writes and compare-and-sets, each with its invoke
and complete times and an outcome in the vocabulary of the log-history checkers
(tests/client/history.py, tests/chaos/checker.py, which check an append-only log, not a
register): `ok` (it took effect once, with the result recorded), `fail` (it provably
did not take effect: left out) and `info` (unknown: a timed-out write may have taken
effect at any moment after its invoke, even after the client gave up, or never; an
`info` read says nothing and is left out). An `info` op's effect may be placed anywhere
after its invoke; "never" is the same as "after everything else".

The search (per key): the call and return events sorted by time (calls before returns
at equal times: ops that touch are concurrent) form a doubly-linked list. Walking it, a
call whose op the register allows now is linearized (lifted out of the list with its
return) unless the pair (set of linearized ops, register state) was seen before; meeting
a return means the op it ends cannot be placed before it, so the last choice is undone.
The history is linearizable when the list empties.

Unknown ops (what keeps histories with many timeouts tractable: an `info` op is
concurrent with everything after its invoke): the search may also drop an `info` op
(it never happened) when it meets its return event, which is placed at the last
completion of any op that reads, expects or reports (as a failed cas's current value)
the value it writes. Past that point its effect could only be observed by a failed cas
that did not report the current value, so placing it later is the same as dropping it
(the unknown ops placed in its window did not swap there and can be dropped too); a key
with such a cas keeps its unknown ops open to the end.

When a key's history is not linearizable, `check` finds its smallest prefix that is not
(binary search over the completion times: the ops still running at the cut become
`info`; linearizability is prefix-closed, so the search is valid) and reports it with
the op whose completion breaks it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

READ, WRITE, CAS = "read", "write", "cas"
OK, FAIL, INFO = "ok", "fail", "info"


class _Unset:
    def __repr__(self) -> str:
        return "unset"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Op:
    """One operation on one key's register.

    Attributes:
        kind: `read`, `write` or `cas`.
        key: which register.
        invoke: when the client sent it.
        complete: when it answered (None: never; an `info` op's time is ignored).
        outcome: `ok`, `fail` or `info` (see the module docstring).
        value: read: the value read (None: absent); write: the value written (None:
            delete); cas: the new value.
        expected: cas: the value compared with (None: absent).
        succeeded: cas with outcome ok: whether it swapped.
        observed: cas that did not swap: the current value it reported, when it did
            (checked too); `UNSET` when not reported.
        client: who ran it (for reports).
    """

    kind: str
    key: Hashable
    invoke: float
    complete: float | None = None
    outcome: str = OK
    value: Any = None
    expected: Any = None
    succeeded: bool | None = None
    observed: Any = UNSET
    client: Hashable = None

    def __post_init__(self) -> None:
        if self.kind not in (READ, WRITE, CAS) or self.outcome not in (OK, FAIL, INFO):
            raise ValueError(f"bad op kind or outcome: {self.kind!r}, {self.outcome!r}")
        if self.outcome == OK and (self.complete is None or self.complete < self.invoke):
            raise ValueError(f"an ok op needs complete >= invoke: {self}")
        if self.kind == CAS and self.outcome == OK and self.succeeded is None:
            raise ValueError(f"an ok cas needs succeeded: {self}")

    def describe(self) -> str:
        """One line: who, what, when."""
        if self.kind == READ:
            what = f"read -> {self.value!r}"
        elif self.kind == WRITE:
            what = f"write {self.value!r}"
        else:
            result = {True: " -> swapped", False: " -> not swapped", None: ""}[self.succeeded]
            seen = "" if self.observed is UNSET else f" (saw {self.observed!r})"
            what = f"cas {self.expected!r} -> {self.value!r}{result}{seen}"
        end = "?" if self.outcome != OK or self.complete is None else f"{self.complete:.6f}"
        client = "" if self.client is None else f"client {self.client}: "
        return f"{client}{what} [{self.invoke:.6f}, {end}] {self.outcome}"


@dataclass
class Result:
    """The verdict of `check`.

    Attributes:
        ok: True when every key's history is linearizable.
        key: the first key (in sorted order of its repr) whose history is not.
        culprit: the op whose completion makes that key's history non-linearizable.
        prefix: the smallest non-linearizable prefix of that key's history (ops running
            at the cut are marked `info`).
        keys: how many keys were checked; states: search states explored (all keys).
    """

    ok: bool
    key: Hashable = None
    culprit: Op | None = None
    prefix: list[Op] = field(default_factory=list)
    keys: int = 0
    states: int = 0

    def describe(self, limit: int = 20) -> str:
        """A readable verdict: the key, the op that broke it and the last ops of the prefix."""
        if self.ok:
            return f"linearizable ({self.keys} keys, {self.states} search states)"
        assert self.culprit is not None
        shown = self.prefix[-limit:]
        lines = [f"not linearizable: key {self.key!r}, first broken by {self.culprit.describe()}"]
        tail = f", last {limit}:" if len(shown) < len(self.prefix) else ":"
        lines.append(f"smallest bad prefix: {len(self.prefix)} ops{tail}")
        lines += [f"  {op.describe()}" for op in shown]
        return "\n".join(lines)


def _step(state: Any, op: Op) -> tuple[bool, Any]:
    """Whether the register in `state` allows `op` now, and its state after."""
    if op.kind == READ:
        return state == op.value, state
    if op.kind == WRITE:
        return True, op.value
    if op.outcome == INFO:  # it swaps if it can: both results were possible
        return True, op.value if state == op.expected else state
    if op.succeeded:
        return state == op.expected, op.value
    return state != op.expected and (op.observed is UNSET or state == op.observed), state


def _relevant(ops: Iterable[Op]) -> list[Op]:
    """Ops that constrain the history: no failed ops, no unknown reads."""
    return [op for op in ops if op.outcome != FAIL and not (op.outcome == INFO and op.kind == READ)]


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _returns(ops: Sequence[Op]) -> list[float]:
    """The time of each op's return event: its completion for an ok op; for an unknown
    one, the last completion of an op that reads, expects or reports its value (see
    the module docstring), or never when the key has a failed cas that reported no
    current value."""
    blind = any(op.kind == CAS and op.outcome == OK and not op.succeeded and op.observed is UNSET for op in ops)
    last_use: dict[Any, float] = {}

    def use(value: Any, at: float) -> None:
        key = _hashable(value)
        last_use[key] = max(last_use.get(key, -math.inf), at)

    for op in ops:
        at = math.inf if op.outcome == INFO else float(op.complete)  # type: ignore[arg-type]
        if op.kind == READ:
            use(op.value, at)
        elif op.kind == CAS:
            use(op.expected, at)
            if op.observed is not UNSET:
                use(op.observed, at)
    out = []
    for op in ops:
        if op.outcome == OK:
            out.append(float(op.complete))  # type: ignore[arg-type]
        elif blind:
            out.append(math.inf)
        else:
            out.append(max(op.invoke, last_use.get(_hashable(op.value), op.invoke)))
    return out


def linearizable(ops: Sequence[Op], initial: Any = None) -> tuple[bool, int]:
    """(whether one register's history is linearizable from `initial`, states explored)."""
    ops = _relevant(ops)
    n = len(ops)
    returns = _returns(ops)
    events = sorted([(op.invoke, 0, i) for i, op in enumerate(ops)] + [(returns[i], 1, i) for i in range(n)])
    # node 0 is the head; event k is node k + 1
    size = len(events) + 1
    nxt = [k + 1 for k in range(size)]
    nxt[-1] = -1
    prv = [k - 1 for k in range(size)]
    is_call = [False] + [kind == 0 for _t, kind, _i in events]
    op_of = [-1] + [i for _t, _kind, i in events]
    call_node, ret_node = [0] * n, [0] * n
    for node in range(1, size):
        (call_node if is_call[node] else ret_node)[op_of[node]] = node

    def remove(x: int) -> None:
        nxt[prv[x]] = nxt[x]
        if nxt[x] != -1:
            prv[nxt[x]] = prv[x]

    def restore(x: int) -> None:
        nxt[prv[x]] = x
        if nxt[x] != -1:
            prv[nxt[x]] = x

    seen: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = []
    state, linearized, node = initial, 0, nxt[0]
    while nxt[0] != -1:
        i = op_of[node]
        if is_call[node]:
            allowed, after = _step(state, ops[i])
        else:  # its op was not placed before its return: an unknown one may never happen
            allowed, after = ops[i].outcome == INFO, state
        if allowed and (linearized | 1 << i, _hashable(after)) not in seen:
            seen.add((linearized | 1 << i, _hashable(after)))
            stack.append((i, state))
            state, linearized = after, linearized | 1 << i
            remove(call_node[i])
            remove(ret_node[i])
            node = nxt[0]
            continue
        if is_call[node]:
            node = nxt[node]
            continue
        if not stack:
            return False, len(seen)
        i, state = stack.pop()
        linearized &= ~(1 << i)
        restore(ret_node[i])
        restore(call_node[i])
        node = nxt[call_node[i]]
    return True, len(seen)


def _prefix(ops: Sequence[Op], cut: float) -> list[Op]:
    """The history as it stood at time `cut`: ops invoked by then; those not complete by
    then become `info`."""
    out = []
    for op in ops:
        if op.invoke > cut:
            continue
        if op.outcome == OK and op.complete is not None and op.complete > cut:
            op = replace(op, outcome=INFO, succeeded=None if op.kind == CAS else op.succeeded)
        out.append(op)
    return out


def smallest_bad_prefix(ops: Sequence[Op], initial: Any = None) -> tuple[Op, list[Op]]:
    """(the op whose completion breaks it, the smallest non-linearizable prefix) of a
    history that is not linearizable."""
    done = sorted((op for op in _relevant(ops) if op.outcome == OK), key=lambda op: op.complete or 0.0)
    if not done:
        raise ValueError("a history without completed ops is always linearizable")
    lo, hi = 0, len(done) - 1  # the answer is the cut at done[k].complete for the least failing k
    while lo < hi:
        mid = (lo + hi) // 2
        if linearizable(_prefix(ops, done[mid].complete or 0.0), initial)[0]:
            lo = mid + 1
        else:
            hi = mid
    return done[lo], _prefix(ops, done[lo].complete or 0.0)


def op_from_kv(
    command: Any, answer: Any, invoke: float, complete: float | None, outcome: str = OK, client: Hashable = None
) -> Op:
    """The register op of a `dledger.kv.commands` GET / PUT / DELETE / CAS and its answer
    (None when the outcome is not ok): PUT and DELETE are writes (DELETE writes None),
    a failed CAS reports the current value."""
    from dledger.kv import commands as kv

    if isinstance(command, kv.Get):
        value = answer.value if isinstance(answer, kv.Value) else None
        return Op(READ, command.key, invoke, complete, outcome, value=value, client=client)
    if isinstance(command, kv.Put | kv.Delete):
        value = command.value if isinstance(command, kv.Put) else None
        return Op(WRITE, command.key, invoke, complete, outcome, value=value, client=client)
    if not isinstance(command, kv.Cas):
        raise ValueError(f"not a register operation: {command!r}")
    swapped = None if outcome != OK else isinstance(answer, kv.Ok)
    observed = answer.current if isinstance(answer, kv.CasFailed) else UNSET
    return Op(CAS, command.key, invoke, complete, outcome, command.new, command.expected, swapped, observed, client)


def check(ops: Iterable[Op], initial: Any = None) -> Result:
    """Check a history of single-key register operations over any number of keys (each
    register starting at `initial`, None: absent)."""
    by_key: dict[Hashable, list[Op]] = defaultdict(list)
    for op in ops:
        by_key[op.key].append(op)
    result = Result(True, keys=len(by_key))
    for key in sorted(by_key, key=repr):
        history = sorted(by_key[key], key=lambda op: op.invoke)
        good, states = linearizable(history, initial)
        result.states += states
        if not good:
            culprit, prefix = smallest_bad_prefix(history, initial)
            return Result(False, key, culprit, prefix, result.keys, result.states)
    return result


__all__ = ["CAS", "FAIL", "INFO", "OK", "READ", "UNSET", "WRITE", "Op", "Result", "check", "linearizable", "op_from_kv"]
