"""The members of one DLedger group as a client reaches them: their addresses, one gRPC
channel (with its Ledger stubs) per member, and the leader last seen.

`Members` is what the writers (`DLedgerClient`, `Producer`) and the readers
(`dledger.client.reads`) share: it finds the leader (Metadata to every member), follows
the leader hints of NOT_LEADER answers, and forgets a leader that failed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc  # type: ignore[import-untyped]

from dledger.client.interrupts import DeferredCtrlC
from dledger.client.policy import (
    Backoff,
    Decision,
    code_decision,
    read_decision,
    rpc_code,
    status_details,
    status_name,
)
from dledger.client.types import LedgerStubs, Target
from dledger.clock import Clock, MonotonicClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import parse_peers
from dledger.security.tls import TlsConfig, TlsError
from dledger.transport.convert import pb
from dledger.transport.grpc_client import open_channel

log = logging.getLogger(__name__)

DISCOVER_FOR_READS_S = 1.0
"""A read looks for the leader at most this long before it asks the members in order."""

MAX_TIMEOUT_S = 1e6
"""The longest timeout of a client operation (11.6 days; gRPC's deadlines overflow past
~7e9 s, and `float("inf")` is no number of milliseconds)."""


def checked_timeout(value: float, name: str) -> float:
    """`value` as seconds, when it is a number in (0, MAX_TIMEOUT_S].

    Raises:
        ValueError: anything else (NaN, infinity, zero, negative, not a number).
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_S:
        raise ValueError(f"{name} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, not {value!r}")
    return float(value)


def optional_timeout(value: float | None, name: str = "timeout_s") -> float | None:
    """None (no limit) or `checked_timeout(value, name)`."""
    return None if value is None else checked_timeout(value, name)


def _probe_done(answers: queue.Queue[tuple[Target, Any, BaseException | None]], target: Target, call: Any) -> None:
    """A Metadata probe finished: queue (target, call, error); cancelled probes are dropped."""
    if not call.cancelled():
        answers.put((target, call, call.exception()))


class Members:
    """The members of one group, their channels and the leader hint (thread-safe).

    With TLS, the certificate, key and CA files are looked at again (at most once a
    second, as a call starts) and, once changed, later calls go over new channels made
    with them, so that a long-running client follows a rotation as members do. Calls
    in flight, a producer's stream included, finish on the old channels, which close
    when nothing uses them any more. Files that cannot be read, or a key that is not
    the certificate's (a rotation half done), keep the files read before.

    Args:
        peers: the group in DLedger's format, `"n0-host:port;n1-host:port"`.
        group: the Raft group name.
        timeout_s: the time budget of one operation, retries and redirects included.
        clock: time source for deadlines and backoff (tests).
        tls: speak TLS to the members, presenting this client certificate (None:
            plaintext).
        token: send this bearer token with every call (the members' client ports;
            needs `tls`, usually `TlsConfig.ca_only`).

    Raises:
        TypeError: `peers` or `group` is not a str.
        dledger.config.ConfigError: `peers` cannot be parsed.
        ValueError: `timeout_s` is not positive, or a token without TLS.
        dledger.security.TlsError: a TLS file cannot be read, or the key is not the
            certificate's.
    """

    def __init__(
        self,
        peers: str,
        group: str,
        timeout_s: float,
        clock: Clock | None = None,
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        if not isinstance(peers, str):
            raise TypeError(f"peers must be a str such as 'n0-host:port;n1-host:port', not {type(peers).__name__}")
        if not isinstance(group, str):
            raise TypeError(f"group must be a str (the Raft group name), not {type(group).__name__}")
        self.timeout_s = checked_timeout(timeout_s, "timeout_s")
        if token is not None and tls is None:
            raise ValueError("a bearer token is only sent over TLS: give tls=TlsConfig.ca_only(<CA file>)")
        self.tls = tls
        self._token = token
        self.clock: Clock = clock or MonotonicClock()
        # the watch before the read: a change in between is seen at the first look
        self._tls_watch = tls.watch(lambda: self.clock.now_ms() / 1000) if tls is not None else None
        self._credentials = tls.matching_credentials(token) if tls is not None else None
        self.peers = parse_peers(peers)
        self.group = group
        self.leader: Target | None = None
        """The leader last seen (None until discovered, or after it failed or moved)."""
        self._lock = threading.Lock()
        self._stubs: dict[str, LedgerStubs] = {}
        self._closed = False

    def close(self) -> None:
        """Close every channel. Idempotent; later calls fail with NETWORK_ERROR."""
        with self._lock:
            self._closed = True
            stubs, self._stubs = list(self._stubs.values()), {}
        for stub in stubs:
            stub.channel.close()

    def stubs(self, address: str) -> LedgerStubs:
        """The (cached) Ledger stubs of `address`.

        Raises:
            DLedgerError: NETWORK_ERROR once closed.
        """
        if self._tls_watch is not None and self._tls_watch.changed():
            self._renew_credentials()
        with self._lock:
            if self._closed:
                raise DLedgerError(ResponseCode.NETWORK_ERROR, "the client is closed")
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = LedgerStubs(open_channel(address, credentials=self._credentials))
            return stub

    def _renew_credentials(self) -> None:
        """The TLS files changed: make later channels with them (see the class doc)."""
        assert self.tls is not None
        try:
            credentials = self.tls.matching_credentials(self._token)
        except TlsError as exc:
            log.error("%s; the client's connections keep the TLS files read before", exc)
            return
        log.info("TLS files changed: the client's new connections use them")
        with self._lock:
            self._credentials = credentials
            self._stubs = {}  # not closed: their calls in flight finish

    def target(self, node_id: str) -> Target:
        """The member `node_id`.

        Raises:
            DLedgerError: UNKNOWN_MEMBER when it is not in `peers`.
        """
        address = self.peers.get(node_id)
        if address is None:
            raise DLedgerError(ResponseCode.UNKNOWN_MEMBER, f"{node_id!r} is not one of {', '.join(self.peers)}")
        return Target(node_id, address)

    def all(self) -> list[Target]:
        """Every member, in `peers` order."""
        return [Target(node_id, address) for node_id, address in self.peers.items()]

    def deadline_ms(self, timeout_s: float | None = None) -> int:
        """The clock's time `timeout_s` (default: the operation budget) from now.

        Raises:
            ValueError: `timeout_s` is not a number of seconds in (0, MAX_TIMEOUT_S].
        """
        budget = self.timeout_s if timeout_s is None else checked_timeout(timeout_s, "timeout")
        return self.clock.now_ms() + int(budget * 1000)

    # -- the leader hint

    def leader_hint(self, message: Any, current: Target) -> Target | None:
        """The leader named in an answer, unless it is `current` or unknown."""
        if not message.HasField("leader_id") or not message.leader_id:
            return None
        leader_id = message.leader_id
        address = self.peers.get(leader_id) or message.leader_address
        if not address or (leader_id == current.node_id and address == current.address):
            return None
        return Target(leader_id, address)

    def redirect(self, answer: Any, current: Target) -> Target | None:
        """`current` answered NOT_LEADER: remember the leader it names (None when it
        names none, or itself) and return it."""
        hint = self.leader_hint(answer, current)
        self.leader = hint
        return hint

    def forget(self, target: Target) -> None:
        """`target` could not be reached: it is no longer taken for the leader."""
        if self.leader == target:
            self.leader = None

    def call_leader(
        self,
        method: str,
        request: Any,
        deadline: int,
        *,
        min_attempt_ms: int,
        out_of_time: Callable[[], DLedgerError],
        on_rpc_error: Callable[[Target, grpc.RpcError], DLedgerError],
        on_refusal: Callable[[Target, Any, Decision], DLedgerError],
    ) -> Any:
        """Send `request` (Ledger `method`) to the leader and return its SUCCESS answer:
        find the leader, follow NOT_LEADER redirects, and back off and try again until
        `deadline` (`clock` ms).

        Args:
            min_attempt_ms: below this much time left, give up (the last error, else
                `out_of_time()`).
            on_rpc_error: the error to remember when the call failed in transport (the
                member is then forgotten as leader); it raises to stop trying.
            on_refusal: the error to remember for an answer that is not SUCCESS; it
                raises to stop trying (a refusal for good, an unknown outcome).
        """
        backoff: Backoff | None = None  # made on the first retry (it seeds a Random)
        last: DLedgerError | None = None
        target = self.leader
        hops = 0
        while True:
            if target is None:
                try:
                    target = self.discover(deadline)
                except DLedgerError as exc:
                    raise (last or exc) from None
            left_ms = deadline - self.clock.now_ms()
            if left_ms < min_attempt_ms:
                raise last or out_of_time()
            try:
                with DeferredCtrlC():  # a blocking call cut by Ctrl-C would hang close()
                    answer = getattr(self.stubs(target.address), method)(request, timeout=left_ms / 1000)
            except grpc.RpcError as exc:
                last = on_rpc_error(target, exc)
                self.forget(target)  # down, paused or cut off: rediscover
                target = None
            else:
                decision = code_decision(answer.code)
                if decision is Decision.SUCCESS:
                    self.leader = target
                    return answer
                last = on_refusal(target, answer, decision)
                if decision is Decision.REDIRECT:
                    hint = self.redirect(answer, target)
                    hops += 1
                    if hint is not None and hops <= len(self.peers):
                        target = hint
                        continue
                    hops = 0
                    target = hint
            backoff = backoff or Backoff(self.clock)
            if not backoff.sleep(deadline):
                raise last

    # -- leader discovery

    def discover(self, deadline_ms: int | None = None) -> Target:
        """Ask every member (Metadata, in parallel) who leads; remember and return it.

        A member that reports itself LEADER wins; otherwise the leader named in the
        answer with the highest term. Retries with backoff until the deadline, unless
        every member refuses the client as such (a wrong group, a token or certificate
        they do not take, not a DLedger member): waiting cannot change that.

        Raises:
            DLedgerError: NETWORK_ERROR when no member ever answered, NOT_LEADER when
                some did but none knew a leader (an election is running), the members'
                own code (UNKNOWN_GROUP...; UNEXPECTED_ARGUMENT for a gRPC status such
                as UNAUTHENTICATED) when they refused, at once if all of them did.
        """
        deadline = deadline_ms if deadline_ms is not None else self.deadline_ms()
        backoff = Backoff(self.clock, first_ms=20, max_ms=300)
        answered_ever: dict[str, None] = {}  # the last round runs on what is left (50 ms at least)
        while True:
            found, answered, errors, refused = self._probe(max(0.05, (deadline - self.clock.now_ms()) / 1000))
            if found is not None:
                self.leader = found
                return found
            answered_ever.update(dict.fromkeys(answered))
            if refused and len(refused) == len(self.peers):
                raise _refused(refused)
            if not backoff.sleep(deadline):
                if answered_ever:
                    raise DLedgerError(ResponseCode.NOT_LEADER, f"no leader known to {', '.join(answered_ever)}")
                if refused:
                    raise _refused(refused, "; others did not answer: " + "; ".join(sorted(errors)))
                raise DLedgerError(ResponseCode.NETWORK_ERROR, "no member answered: " + "; ".join(errors))

    def _probe(self, timeout_s: float) -> tuple[Target | None, list[str], list[str], list[tuple[str, int, str]]]:
        """One Metadata round over all members: (leader or None, who answered, errors,
        refusals as (member, code, text))."""
        answers: queue.Queue[tuple[Target, Any, BaseException | None]] = queue.Queue()
        request = pb.MetadataRequest(group=self.group)
        calls = []
        for target in self.all():
            with DeferredCtrlC():  # starting a call is not to be cut (see dledger.client.interrupts)
                call = self.stubs(target.address).Metadata.future(request, timeout=timeout_s)
                call.add_done_callback(partial(_probe_done, answers, target))
            calls.append(call)
        best: tuple[int, Target] | None = None
        answered: list[str] = []
        errors: list[str] = []
        refused: list[tuple[str, int, str]] = []
        try:
            for _ in calls:
                target, call, error = answers.get()
                if error is not None:
                    status, details = status_name(error), status_details(error)
                    if read_decision(status, details) is Decision.FAIL:
                        refused.append((target.node_id, rpc_code(status), f"{status} {details}".strip()))
                    else:
                        errors.append(f"{target.node_id} ({target.address}): {status}")
                    continue
                message = call.result()
                if message.code != ResponseCode.SUCCESS:
                    name = ResponseCode.of(message.code).name
                    if code_decision(message.code) is Decision.FAIL:
                        text = f"{name}: {message.message}" if message.message else name
                        refused.append((target.node_id, message.code, text))
                    else:
                        errors.append(f"{target.node_id}: {name}")
                    continue
                answered.append(target.node_id)
                if message.role == "LEADER":
                    return Target(message.self_id or target.node_id, target.address), answered, errors, refused
                hint = self.leader_hint(message, Target("", ""))
                if hint is not None and (best is None or message.term > best[0]):
                    best = (message.term, hint)
        finally:
            for call in calls:
                call.cancel()
        return (best[1] if best else None), answered, errors, refused

    def read_targets(self, node_id: str | None) -> list[Target]:
        """Whom a read asks, in order: `node_id` only, or the leader then the others."""
        if node_id is not None:
            return [self.target(node_id)]
        leader = self.leader
        if leader is None:
            try:
                leader = self.discover(self.deadline_ms(min(self.timeout_s, DISCOVER_FOR_READS_S)))
            except DLedgerError:
                leader = None
        rest = [t for t in self.all() if leader is None or t.address != leader.address]
        return ([leader] if leader is not None else []) + rest


def _refused(refused: list[tuple[str, int, str]], more: str = "") -> DLedgerError:
    """The error of members that refused the client as such: the first refusal's code,
    with each text once and the members that gave it."""
    by_text: dict[str, list[str]] = {}
    for node_id, _, text in refused:
        by_text.setdefault(text, []).append(node_id)
    said = "; ".join(f"{', '.join(sorted(nodes))}: {text}" for text, nodes in by_text.items())
    return DLedgerError(refused[0][1], f"refused by {said}{more}")
