"""`KVClient`: put / get / delete / compare-and-set on a group running the kv machine.

Writes go through the log as RAFT_LOG queries: the command is appended, and the answer
is the one the machine gave when it applied that entry, so a compare-and-set says
whether it swapped. Reads are queries in the mode asked for (READ_INDEX by default:
linearizable; LEASE: linearizable while clocks drift less than `leaseDriftMs`; UNSAFE:
any member's current state, possibly stale; RAFT_LOG: through the log).

A write whose outcome is unknown (the leader went away before answering) raises
`IndeterminateError`, as `DLedgerClient.append` does: it may or may not have happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from dledger.codes import ReadMode
from dledger.kv.commands import (
    Answer,
    Cas,
    CasFailed,
    Command,
    Delete,
    Error,
    Get,
    NotFound,
    Ok,
    Put,
    Value,
    decode_answer,
    encode_command,
)


class KVError(Exception):
    """The kv machine refused a command (its ERROR answer), or answered something that
    does not fit the command (a member that runs another state machine)."""


class QueryClient(Protocol):
    """What `KVClient` needs of a client (`dledger.client.DLedgerClient` has it)."""

    def query(self, request: bytes, mode: ReadMode = ReadMode.READ_INDEX, *, timeout: float | None = None) -> bytes:
        """The group's state machine's answer to `request`."""
        ...


@dataclass(frozen=True)
class CasResult:
    """The outcome of a compare-and-set.

    Attributes:
        swapped: the value was `expected` and is now the new value.
        current: when not swapped, the value the key held (None: absent).
    """

    swapped: bool
    current: bytes | None = None


class KVClient:
    """The key-value store of a group started with `--state-machine kv`.

    Args:
        client: a `DLedgerClient` of that group (its peers, TLS and timeouts apply).
        read_mode: the default mode of `get`.
    """

    def __init__(self, client: QueryClient, read_mode: ReadMode = ReadMode.READ_INDEX) -> None:
        self.client = client
        self.read_mode = ReadMode(read_mode)

    def _send(self, command: Command, mode: ReadMode, timeout: float | None) -> Answer:
        raw = self.client.query(encode_command(command), mode, timeout=timeout)
        try:
            answer = decode_answer(raw)
        except ValueError as exc:
            raise KVError(f"not a kv answer ({exc}): does the group run --state-machine kv?") from None
        if isinstance(answer, Error):
            raise KVError(answer.message)
        return answer

    def put(self, key: bytes, value: bytes, *, timeout: float | None = None) -> None:
        """Set `key` to `value` (through the log).

        Raises:
            IndeterminateError: the outcome is unknown.
            DLedgerError: refused (nothing written), KVError: the machine refused it.
        """
        _expect(self._send(Put(key, value), ReadMode.RAFT_LOG, timeout), Ok)

    def delete(self, key: bytes, *, timeout: float | None = None) -> bool:
        """Remove `key` (through the log); whether it had a value (an absent key is not
        an error)."""
        answer = self._send(Delete(key), ReadMode.RAFT_LOG, timeout)
        if isinstance(answer, NotFound):
            return False
        _expect(answer, Ok)
        return True

    def cas(self, key: bytes, expected: bytes | None, new: bytes, *, timeout: float | None = None) -> CasResult:
        """Set `key` to `new` if it holds `expected` (None: if it is absent), atomically."""
        answer = self._send(Cas(key, expected, new), ReadMode.RAFT_LOG, timeout)
        if isinstance(answer, Ok):
            return CasResult(True)
        return CasResult(False, _expect(answer, CasFailed).current)

    def get(self, key: bytes, mode: ReadMode | None = None, *, timeout: float | None = None) -> bytes | None:
        """The value of `key` (None: absent), read in `mode` (default: the client's)."""
        answer = self._send(Get(key), ReadMode(mode if mode is not None else self.read_mode), timeout)
        if isinstance(answer, NotFound):
            return None
        return _expect(answer, Value).value


_A = TypeVar("_A")


def _expect(answer: Answer, kind: type[_A]) -> _A:
    if not isinstance(answer, kind):
        raise KVError(f"unexpected answer {answer!r}, wanted {kind.__name__}")
    return answer


__all__ = ["CasResult", "KVClient", "KVError", "QueryClient"]
