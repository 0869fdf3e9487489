"""DLedgerConfig and StoreConfig: DLedger's settings with its defaults, in Python form
(units in names).

A member's storage settings are its `DLedgerConfig.store`, a `StoreConfig`. Fields that
can be set from a YAML file or the command line say so in their metadata, which is all
`dledger server`, `dledger cluster` and `dledger server -c` read (dledger.cli.server_cmds):

- `"yaml"`: DLedger's YAML / Java property name(s) of the setting (one or a tuple), when
  it differs from the field's own name in camelCase. The field's own name and any of
  these in snake_case load as well.
- `"cli"`: the command-line option (e.g. `"--segment-size"`), for the settings that
  have one; `"help"` its help text (the default is added to it).
- `"size"`: the value is a byte count; files and options accept `64MiB`, `1g`...
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from dledger.config_bounds import MEMBER_BOUNDS, member_mistyped, name_problem, out_of_bounds, store_problem
from dledger.entry import INDEX_UNIT_SIZE, MAX_ENTRY_SIZE

MIB = 1024 * 1024
DEFAULT_GROUP = "default"
"""The group of a member, a client or a Spark job that names none (DLedger's default)."""

MAX_BODIES_PER_APPEND = 65_536
"""A member's default limit on the bodies of one append request (`ServiceLimits`);
clients that batch (the Spark sink, `dledger append -b`) stay within it."""
MAX_APPEND_BYTES = 16 * MIB
"""A member's default limit on the body bytes of one append request."""
MEMBER_RELEASE_BEHIND_BYTES = 256 * MIB
"""A member's `release_behind_bytes` (the embedded store's default is 0: keep every page)."""

MEMBER_WARM_AHEAD_BYTES = 8 * MIB
"""The largest warm-ahead window of a member's store. 8 MiB keeps pre-faulted pages
~80 ms ahead of a 100 MB/s writer. Larger windows cost CPU for nothing: every warm pass
(each 5 ms) pre-faults a quarter of the window of the index file again, ~10 % of a core
per member at 64 MiB, ~3 % at 8 MiB (measured on a member idle after writes)."""


class ConfigError(ValueError):
    """A configuration value is invalid."""


_PEER_ID = re.compile(r"^[A-Za-z0-9_.]+$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_IPV6 = re.compile(r"^\[[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\]$")


def parse_address(address: str) -> tuple[str, int]:
    """Split a member address `host:port` (or `[ipv6]:port`) into host and port.

    Raises:
        ConfigError: no port, a port outside 1-65535, an empty host, or a host with
            characters no host name or address has (commas, spaces, a second ':').
    """
    host, sep, port_text = address.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"bad address {address!r}: expected <host>:<port>")
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5):
        raise ConfigError(f"bad port in {address!r}: expected a number 1-65535")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ConfigError(f"bad port {port} in {address!r}: expected 1-65535")
    if not (_HOST_NAME.match(host) or _IPV6.match(host)):
        raise ConfigError(f"bad host {host!r} in {address!r}: expected a host name, an IPv4 address or [IPv6]")
    return host, port


def parse_peers(peers: str) -> dict[str, str]:
    """Parse DLedger's peers string `"n0-host:port;n1-host:port"` into {id: address}.

    The id is the text before the first '-' (ids cannot contain '-', hosts may): letters,
    digits, '_' and '.'. The address is `host:port` with a port 1-65535 (`[ipv6]:port`
    for IPv6). Surrounding blanks and empty items (`a;;b;`) are ignored. Order is kept.

    Raises:
        ConfigError: empty string, an item without '-', a bad id, host or port (see
            `parse_address`), a duplicate id or a duplicate address.
    """
    result: dict[str, str] = {}
    seen: dict[str, str] = {}
    items = [item.strip() for item in peers.split(";") if item.strip()]
    if not items:
        raise ConfigError(f"no peers in {peers!r}: expected <id>-<host>:<port>;...")
    for item in items:
        node_id, sep, address = item.partition("-")
        node_id, address = node_id.strip(), address.strip()
        if not sep or not node_id or not address:
            raise ConfigError(f"bad peer {item!r}: expected <id>-<host>:<port>")
        if not _PEER_ID.match(node_id):
            raise ConfigError(f"bad peer id {node_id!r} in {item!r}: use letters, digits, '_' and '.'")
        try:
            host, port = parse_address(address)
        except ConfigError as exc:
            raise ConfigError(f"peer {node_id}: {exc}") from None
        if node_id in result:
            raise ConfigError(f"duplicate peer id {node_id!r} in {peers!r}")
        key = f"{host.lower()}:{port}"
        if key in seen:
            raise ConfigError(f"peers {seen[key]} and {node_id} have the same address {address!r}")
        seen[key] = node_id
        result[node_id] = address
    return result


_STATE_MACHINE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
STATE_MACHINE_NAMES = ("kv",)
"""The built-in state machines `--state-machine` knows by a short name."""


def check_state_machine_name(name: str) -> None:
    """Check the form of a state machine's name: a built-in one (`kv`) or
    `package.module:factory`. (Whether it can be imported is checked when it is loaded:
    dledger.statemachine.loader.)

    Raises:
        ConfigError: neither form.
    """
    if name not in STATE_MACHINE_NAMES and not _STATE_MACHINE.match(name):
        raise ConfigError(f"unknown state machine {name!r}: expected kv or package.module:factory")


def parse_preferred_leader_ids(value: str | None) -> list[str]:
    """`"n0;n1"` -> ["n0", "n1"]; None or blank -> []."""
    if not value:
        return []
    return [item.strip() for item in value.split(";") if item.strip()]


@dataclass(frozen=True)
class StoreConfig:
    """Options of a file store (DLedger's names in Python form; DLedger's defaults).

    Attributes:
        data_file_size: bytes per data segment (mappedFileSizeForEntryData, 1 GiB).
        index_file_size: bytes per index segment (mappedFileSizeForEntryIndex, 160 MiB).
        flush_mode: "async" acks before fsync and flushes every flush_file_interval_ms
            (DLedger's behaviour); "sync" returns from an append only once it is durable
            (concurrent appends share one msync: group commit).
        flush_file_interval_ms: async flush period (flushFileInterval, 10 ms).
        checkpoint_interval_ms: how often `checkpoint` is rewritten (checkPointInterval; 0:
            at every flush pass).
        write_crc: compute the body CRC-32 (Java writes 0; reads verify non-zero CRCs).
        verify_crc: check non-zero CRCs on reads, follower appends and recovery.
        java_compat: write what Java DLedger <= 0.3.x can open (no CRCs, no NOOPs).
        warm_ahead_bytes: pre-fault this many bytes ahead of the writer and prepare the
            next segment in the background (0 disables warming).
        data_writes: how appends put entries into the data files. "mmap" copies them
            into the mapping (DLedger's way); "pwrite" copies them into a staging buffer
            written to the file with pwrite (RocketMQ's transientStorePool), so the
            pages are never mapped dirty and an msync of them costs less; "auto" (the
            default) is "pwrite" in sync mode and "mmap" in async mode. Reads use the
            mapping either way (the page cache is shared).
        release_behind_bytes: keep at most this many flushed bytes of each file (data
            and index) behind its end in the page cache, and hand older pages back to
            the kernel from the flush thread (0, the default: keep them all, the kernel
            decides). The writer's next pages then reuse memory that is already backed
            instead of first-touch memory, which on VMs whose free memory goes back to
            the host costs 7-12 us per page; reads further back come from disk.
        read_only: open without writing anything (inspection, offline readers).
        max_entry_size: the largest entry accepted (header + body), DLedger's 4 MiB.
        file_reserved_hours, delete_when, disk_space_ratio_to_check_expired,
        disk_space_ratio_to_force_clean, enable_disk_force_clean, clean_interval_ms:
            retention, as DLedger's CleanSpaceService, except that the force clean
            (segments of any age deleted above `disk_space_ratio_to_force_clean`) is
            off unless `enable_disk_force_clean`: a full disk refuses appends
            (DISK_FULL) and deletes nothing acknowledged.
    """

    data_file_size: int = field(
        default=1024 * MIB,
        metadata={
            "yaml": "mappedFileSizeForEntryData",
            "cli": "--segment-size",
            "help": "Data segment size, e.g. 64MiB.",
            "size": True,
        },
    )
    index_file_size: int = field(default=32 * 5 * MIB, metadata={"yaml": "mappedFileSizeForEntryIndex", "size": True})
    flush_mode: Literal["async", "sync"] = field(
        default="async",
        metadata={
            "yaml": "flushMode",
            "cli": "--flush-mode",
            "help": "async: ack from page cache, flush every 10 ms (DLedger); sync: ack after fsync.",
        },
    )
    flush_file_interval_ms: int = field(default=10, metadata={"yaml": "flushFileInterval"})
    checkpoint_interval_ms: int = field(default=3000, metadata={"yaml": ("checkPointInterval", "checkPointIntervalMs")})
    write_crc: bool = True
    verify_crc: bool = True
    java_compat: bool = field(default=False, metadata={"yaml": "javaCompat"})
    warm_ahead_bytes: int = 64 * MIB
    data_writes: Literal["auto", "mmap", "pwrite"] = "auto"
    release_behind_bytes: int = field(
        default=0,
        metadata={
            "yaml": "releaseBehindBytes",
            "cli": "--release-behind",
            "help": "Keep this much flushed data per file in the page cache, hand older pages back to the kernel "
            "(0 keeps all).",
            "size": True,
        },
    )
    read_only: bool = False
    max_entry_size: int = MAX_ENTRY_SIZE
    file_reserved_hours: int = field(default=72, metadata={"yaml": "fileReservedHours"})
    delete_when: str = field(default="04", metadata={"yaml": "deleteWhen"})
    disk_space_ratio_to_check_expired: float = field(default=0.70, metadata={"yaml": "diskSpaceRatioToCheckExpired"})
    disk_space_ratio_to_force_clean: float = field(default=0.85, metadata={"yaml": "diskSpaceRatioToForceClean"})
    # off, unlike DLedger: above the force-clean ratio it deletes committed segments of any
    # age, and a full disk must lose nothing (appends are refused with DISK_FULL instead)
    enable_disk_force_clean: bool = field(default=False, metadata={"yaml": "enableDiskForceClean"})
    clean_interval_ms: int = 1000

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check the values (on construction: a StoreConfig is frozen).

        Raises:
            ConfigError: the first invalid value found.
        """
        problem = store_problem(self)
        if problem is not None:
            raise ConfigError(problem)
        if self.index_file_size % INDEX_UNIT_SIZE:
            raise ConfigError("index_file_size must be a multiple of 32")
        if self.flush_mode not in ("async", "sync"):
            raise ConfigError("flush_mode must be 'async' or 'sync'")
        if self.data_writes not in ("auto", "mmap", "pwrite"):
            raise ConfigError("data_writes must be 'auto', 'mmap' or 'pwrite'")

    @property
    def write_through(self) -> bool:
        """True when appends write the data files with pwrite (see `data_writes`)."""
        if self.data_writes == "auto":
            return self.flush_mode == "sync"
        return self.data_writes == "pwrite"


def member_store_config(**settings: Any) -> StoreConfig:
    """A member's store options: `StoreConfig(**settings)` with a member's defaults where
    they differ from the embedded store's, for the settings not given:
    `release_behind_bytes` is `MEMBER_RELEASE_BEHIND_BYTES` (256 MiB) and
    `warm_ahead_bytes` is `min(MEMBER_WARM_AHEAD_BYTES, data_file_size // 4)`.

    (`dataclasses.replace` of the result keeps its warm-ahead window as it is; build a
    new one to change `data_file_size`.)

    Raises:
        ConfigError: an invalid value.
    """
    settings.setdefault("release_behind_bytes", MEMBER_RELEASE_BEHIND_BYTES)
    data_file_size = settings.get("data_file_size", StoreConfig.data_file_size)
    settings.setdefault("warm_ahead_bytes", min(MEMBER_WARM_AHEAD_BYTES, data_file_size // 4))
    return StoreConfig(**settings)


SNAPSHOT_RESET_STRATEGIES = ("RESET_ALL_SYNC", "RESET_BUT_KEEP_SOME_SYNC")
"""DLedger 0.4.0's `snapshotEntryResetStrategy` values supported (the *_ASYNC and
*_LATER ones are not)."""


@dataclass
class DLedgerConfig:
    """Settings of one DLedger node (DLedger's `DLedgerConfig`, same defaults).

    Timings are in milliseconds and sizes in bytes, as the names say, so that tests and
    local clusters can run with short intervals. The storage settings are `store`, a
    `StoreConfig` with a member's defaults (`member_store_config`); a member in
    `store.flush_mode="sync"` acknowledges an entry once a majority has it on disk.

    The snapshot settings (`enable_snapshot`, `snapshot_threshold`: entries applied since
    the last snapshot, `max_snapshot_reserved_num`: snapshots kept,
    `snapshot_entry_reset_strategy` with `reset_snapshot_entries_but_keep_last_entries_num`:
    what the log keeps after one) carry DLedger's YAML names and defaults; they take
    effect with a `SnapshottingStateMachine` (docs/OPERATIONS.md, "Snapshots").
    """

    group: str = DEFAULT_GROUP
    self_id: str = "n0"
    peers: str = "n0-localhost:20911"
    store_base_dir: str = "/tmp/dledgerstore"
    store_type: str = "FILE"  # FILE or MEMORY
    data_store_path: str | None = None
    read_only_data_store_dirs: str | None = None
    preferred_leader_ids: str | None = field(
        default=None, metadata={"yaml": ("preferredLeaderIds", "preferredLeaderId")}
    )
    enable_leader_elector: bool = True
    # dledger-py (etcd's --initial-cluster-state): "new" founds the group; "existing" joins
    # a running one, so that a member without a store (a lost disk) neither votes nor
    # stands until a leader brought it up to date (see dledger.store.membership)
    initial_cluster_state: str = field(default="new", metadata={"yaml": "initialClusterState"})

    # election
    heart_beat_time_interval_ms: int = field(
        default=2000, metadata={"yaml": ("heartBeatTimeIntervalMs", "heartbeatMs"), "cli": "--heartbeat-ms"}
    )
    max_heart_beat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    min_take_leadership_vote_interval_ms: int = 30
    max_take_leadership_vote_interval_ms: int = 100
    max_leadership_transfer_wait_index: int = 1000
    leadership_transfer_wait_timeout_ms: int = field(default=1000, metadata={"yaml": "leadershipTransferWaitTimeout"})
    check_preferred_leader_interval_ms: int = 1000
    # dledger-py: after an unclean shutdown with async flush, hold the vote until caught up
    # with a leader, at most this long (0: never hold); see dledger.raft.vote_hold
    max_vote_hold_ms: int = 60_000
    # dledger-py (Raft thesis 9.6, etcd): before raising its term a candidate asks whether a
    # quorum would vote for it; nobody changes term or vote for such a pre-vote
    pre_vote: bool = field(default=True, metadata={"yaml": "preVote"})
    # dledger-py (etcd's CheckQuorum): a member that heard from a live leader within the
    # election timeout (heart_beat_time_interval_ms * max_heart_beat_leak) refuses votes,
    # and a leader that has not heard from a quorum for that long steps down
    check_quorum: bool = field(default=True, metadata={"yaml": "checkQuorum"})
    # dledger-py: LEASE reads hold for election timeout - this after the start of a
    # heartbeat round a quorum acknowledged: the bound on how far members' clocks may
    # drift apart meanwhile (see dledger.raft.read_index; docs/OPERATIONS.md)
    lease_drift_ms: int = field(default=500, metadata={"yaml": "leaseDriftMs"})
    # dledger-py (Kafka's producer.id.expiration.ms): an idempotent producer idle this
    # long in log time is forgotten (see dledger.raft.producers)
    producer_id_expiration_ms: int = field(default=86_400_000, metadata={"yaml": "producerIdExpirationMs"})
    # dledger-py: the most idempotent producers the leader keeps at once; a request that
    # would start one more is refused with TOO_MANY_PRODUCERS (every member holds the
    # table in memory, 300-560 bytes a producer, and saves it whole)
    max_producers: int = field(default=200_000, metadata={"yaml": "maxProducers"})

    # replication
    max_pending_requests_num: int = 10000
    max_pending_bytes: int = 1024 * MIB
    max_wait_ack_time_ms: int = 2500
    max_push_timeout_ms: int = field(default=1000, metadata={"yaml": "maxPushTimeOutMs"})
    # bytes per second, catch-up traffic only
    peer_push_quota: int = field(
        default=20 * MIB, metadata={"yaml": ("peerPushQuota", "peerPushQuotas"), "cli": "--peer-push-quotas"}
    )
    peer_push_throttle_point: int = 300 * MIB
    peer_push_throttle_lag_entries: int = 1000
    max_push_batch_bytes: int = 4 * MIB + 64 * 1024
    max_push_in_flight_per_peer: int = 1000  # APPEND pushes awaiting an answer, per peer (pipelining)
    max_push_in_flight_bytes: int = 64 * MIB  # ... and their encoded bytes, per peer
    commit_push_interval_ms: int = 1000
    # dledger-py: followers beyond the ones a quorum needs get a small backlog at most
    # this late while those ahead of them keep up (0: push to every follower at once);
    # see dledger.raft.dispatcher
    standby_push_ms: int = 30
    # dledger-py: while client appends are on their way to the leader, a small backlog
    # waits for them at most this long before it is pushed (0: push at once); see
    # dledger.raft.dispatcher
    push_gather_ms: int = 5
    follower_push_timeout_ms: int = 1000
    rpc_timeout_ms: int = 3000
    enable_fast_advance_commit_index: bool = True  # a new leader holding uncommitted entries appends a NOOP

    # dledger-py: mutual TLS between members and with clients (all three or none); see
    # docs/OPERATIONS.md "Security model"
    tls_cert: str | None = field(default=None, metadata={"yaml": "tlsCert"})
    tls_key: str | None = field(default=None, metadata={"yaml": "tlsKey"})
    tls_ca: str | None = field(default=None, metadata={"yaml": "tlsCa"})
    # dledger-py: a client-only port (server-side TLS) for clients with bearer tokens
    # from `tokens_file` (dledger.security.tokens); both or neither, TLS required
    client_address: str | None = field(default=None, metadata={"yaml": "clientAddress"})
    tokens_file: str | None = field(default=None, metadata={"yaml": "tokensFile"})
    # dledger-py: open streams a member serves (dledger.transport.service_core.ServiceLimits):
    # AppendStream and ReadCommitted slots each, and of them what one named caller may hold
    max_append_streams: int = field(default=16, metadata={"yaml": "maxAppendStreams"})
    max_read_streams: int = field(default=16, metadata={"yaml": "maxReadStreams"})
    max_streams_per_caller: int = field(default=12, metadata={"yaml": "maxStreamsPerCaller"})

    # snapshots (DLedger 0.3.2+ / 0.4.0 names and defaults; dledger.node_snapshots). The
    # reset strategies are the *_SYNC ones: after a snapshot the log prefix up to it
    # (RESET_ALL_SYNC) or up to it minus the last N entries (RESET_BUT_KEEP_SOME_SYNC) goes
    enable_snapshot: bool = field(default=False, metadata={"yaml": "enableSnapshot"})
    snapshot_threshold: int = field(default=1000, metadata={"yaml": "snapshotThreshold"})  # entries applied
    max_snapshot_reserved_num: int = field(default=3, metadata={"yaml": "maxSnapshotReservedNum"})
    snapshot_entry_reset_strategy: str = field(
        default="RESET_ALL_SYNC", metadata={"yaml": "snapshotEntryResetStrategy"}
    )
    reset_snapshot_entries_but_keep_last_entries_num: int = field(
        default=10, metadata={"yaml": "resetSnapshotEntriesButKeepLastEntriesNum"}
    )
    # dledger-py (etcd's SnapshotCatchUpEntries): a leader's compaction keeps up to this
    # many entries before the snapshot for a live follower behind it (dledger.raft.log_floors)
    snapshot_catch_up_entries: int = field(default=5000, metadata={"yaml": "snapshotCatchUpEntries"})

    # dledger-py: the state machine the member applies committed entries to: `kv` (the
    # key-value store of dledger.kv) or `package.module:factory`; None: a plain log
    state_machine: str | None = field(default=None, metadata={"yaml": "stateMachine"})

    # storage (the member's defaults: see member_store_config)
    store: StoreConfig = field(default_factory=member_store_config)

    _peer_map: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validated(self) -> DLedgerConfig:
        """This config, checked again (it may have been changed since it was made)."""
        self.validate()
        return self

    def validate(self) -> None:
        """Check the values; called on construction and by the node as it starts.

        Raises:
            ConfigError: the first invalid value found.
        """
        problem = member_mistyped(self)
        if problem is not None:
            raise ConfigError(problem)
        if not isinstance(self.store, StoreConfig):
            raise ConfigError(f"store must be a StoreConfig, not {type(self.store).__name__}")
        self._peer_map = parse_peers(self.peers)
        if (problem := name_problem(self.group, "group")) is not None:
            raise ConfigError(problem)
        for unsupported in ("data_store_path", "read_only_data_store_dirs"):  # were taken and ignored
            if getattr(self, unsupported):
                raise ConfigError(f"{unsupported} (DLedger's multi-path storage) is not supported: use store_base_dir")
        if not self.store_base_dir.strip():  # it meant the current directory
            raise ConfigError("the store base dir must not be empty (give '.' for the current directory)")
        if self.self_id not in self._peer_map:
            raise ConfigError(f"self id {self.self_id!r} is not in peers {self.peers!r}")
        if self.initial_cluster_state not in ("new", "existing"):
            raise ConfigError(f"initial cluster state {self.initial_cluster_state!r} is not 'new' or 'existing'")
        problem = out_of_bounds(self, MEMBER_BOUNDS)
        if problem is not None:
            raise ConfigError(problem)
        if self.snapshot_entry_reset_strategy not in SNAPSHOT_RESET_STRATEGIES:
            raise ConfigError(
                f"snapshot_entry_reset_strategy must be one of {', '.join(SNAPSHOT_RESET_STRATEGIES)}, "
                f"not {self.snapshot_entry_reset_strategy!r}"
            )
        if not self.min_vote_interval_ms < self.max_vote_interval_ms:
            raise ConfigError("need min_vote_interval_ms < max_vote_interval_ms")
        if not self.min_take_leadership_vote_interval_ms < self.max_take_leadership_vote_interval_ms:
            raise ConfigError("need min_take_leadership_vote_interval_ms < max_take_leadership_vote_interval_ms")
        if self.store_type not in ("FILE", "MEMORY"):
            raise ConfigError(f"store_type must be FILE or MEMORY, not {self.store_type!r}")
        for pid in parse_preferred_leader_ids(self.preferred_leader_ids):
            if pid not in self._peer_map:
                raise ConfigError(f"preferred leader {pid!r} is not in peers")
        if self.state_machine is not None:
            check_state_machine_name(self.state_machine)
        tls = {"tls_cert": self.tls_cert, "tls_key": self.tls_key, "tls_ca": self.tls_ca}
        if any(tls.values()) and not all(tls.values()):
            missing = ", ".join(name for name, value in tls.items() if not value)
            raise ConfigError(f"TLS needs a certificate, a key and a CA: {missing} missing")
        if bool(self.client_address) != bool(self.tokens_file):
            raise ConfigError("a client port needs both client_address and tokens_file")
        if self.client_address:
            if not self.tls_enabled:
                raise ConfigError("a client port (bearer tokens) needs TLS: set tls_cert, tls_key and tls_ca")
            if parse_address(self.client_address)[1] == parse_address(self._peer_map[self.self_id])[1]:
                raise ConfigError(f"client_address {self.client_address} has this member's own port: give another")

    @property
    def tls_enabled(self) -> bool:
        """True when the member speaks mutual TLS (tls_cert, tls_key and tls_ca set)."""
        return bool(self.tls_cert and self.tls_key and self.tls_ca)

    @property
    def peer_map(self) -> dict[str, str]:
        """{id: address} parsed from `peers`, in order."""
        return dict(self._peer_map)

    @property
    def self_address(self) -> str:
        """This node's own address (its listening host:port)."""
        return self._peer_map[self.self_id]

    @property
    def preferred_leader_id_list(self) -> list[str]:
        """The preferred leader ids."""
        return parse_preferred_leader_ids(self.preferred_leader_ids)

    @property
    def dledger_id(self) -> str:
        """`group#selfId`, DLedger's id of this member."""
        return f"{self.group}#{self.self_id}"

    @property
    def default_path(self) -> str:
        """`<store_base_dir>/dledger-<self_id>`."""
        return os.path.join(self.store_base_dir, f"dledger-{self.self_id}")
