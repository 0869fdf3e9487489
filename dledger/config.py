"""DLedgerConfig: DLedger's settings with its defaults, in Python form (units in names)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

MIB = 1024 * 1024


class ConfigError(ValueError):
    """A configuration value is invalid."""


def parse_peers(peers: str) -> dict[str, str]:
    """Parse DLedger's peers string `"n0-host:port;n1-host:port"` into {id: address}.

    The id is the text before the first '-' (ids cannot contain '-', hosts may), the
    address the rest. Order is kept.

    Raises:
        ConfigError: empty string, an item without '-', an empty id or address, or a
            duplicate id.
    """
    result: dict[str, str] = {}
    items = [item.strip() for item in peers.split(";") if item.strip()]
    if not items:
        raise ConfigError(f"no peers in {peers!r}")
    for item in items:
        node_id, sep, address = item.partition("-")
        node_id, address = node_id.strip(), address.strip()
        if not sep or not node_id or not address:
            raise ConfigError(f"bad peer {item!r}: expected <id>-<host>:<port>")
        if node_id in result:
            raise ConfigError(f"duplicate peer id {node_id!r} in {peers!r}")
        result[node_id] = address
    return result


def parse_preferred_leader_ids(value: str | None) -> list[str]:
    """`"n0;n1"` -> ["n0", "n1"]; None or blank -> []."""
    if not value:
        return []
    return [item.strip() for item in value.split(";") if item.strip()]


@dataclass
class DLedgerConfig:
    """Settings of one DLedger node (DLedger's `DLedgerConfig`, same defaults).

    Timings are in milliseconds and sizes in bytes, as the names say, so that tests and
    local clusters can run with short intervals.
    """

    group: str = "default"
    self_id: str = "n0"
    peers: str = "n0-localhost:20911"
    store_base_dir: str = "/tmp/dledgerstore"
    store_type: str = "FILE"  # FILE or MEMORY
    data_store_path: str | None = None
    read_only_data_store_dirs: str | None = None
    preferred_leader_ids: str | None = None
    enable_leader_elector: bool = True

    # election
    heart_beat_time_interval_ms: int = 2000
    max_heart_beat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    min_take_leadership_vote_interval_ms: int = 30
    max_take_leadership_vote_interval_ms: int = 100
    max_leadership_transfer_wait_index: int = 1000
    leadership_transfer_wait_timeout_ms: int = 1000
    check_preferred_leader_interval_ms: int = 1000
    # dledger-py: after an unclean shutdown with async flush, hold the vote until caught up
    # with a leader, at most this long (0: never hold); see dledger.raft.vote_hold
    max_vote_hold_ms: int = 60_000

    # replication
    max_pending_requests_num: int = 10000
    max_pending_bytes: int = 1024 * MIB
    max_wait_ack_time_ms: int = 2500
    max_push_timeout_ms: int = 1000
    peer_push_quota: int = 20 * MIB  # bytes per second, catch-up traffic only
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

    # storage
    flush_mode: str = "async"  # async (DLedger) or sync (ack after fsync)
    java_compat: bool = False
    flush_file_interval_ms: int = 10
    check_point_interval_ms: int = 3000
    mapped_file_size_for_entry_data: int = 1024 * MIB
    mapped_file_size_for_entry_index: int = 32 * 5 * MIB
    file_reserved_hours: int = 72
    delete_when: str = "04"
    disk_space_ratio_to_check_expired: float = 0.70
    disk_space_ratio_to_force_clean: float = 0.85
    enable_disk_force_clean: bool = True
    # dledger-py: flushed pages more than this far behind the end of each file go back to
    # the kernel, so that new pages reuse memory (0: keep them all cached); see
    # StoreConfig.release_behind_bytes
    release_behind_bytes: int = 256 * MIB

    _peer_map: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check the values; called on construction (call again after changing fields).

        Raises:
            ConfigError: the first invalid value found.
        """
        self._peer_map = parse_peers(self.peers)
        if not self.group:
            raise ConfigError("group must not be empty")
        if self.self_id not in self._peer_map:
            raise ConfigError(f"self id {self.self_id!r} is not in peers {self.peers!r}")
        for name in ("heart_beat_time_interval_ms", "max_heart_beat_leak", "max_push_timeout_ms", "rpc_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        for name in (
            "max_pending_requests_num",
            "max_pending_bytes",
            "max_push_batch_bytes",
            "max_push_in_flight_bytes",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.max_push_in_flight_per_peer <= 0:
            raise ConfigError("max_push_in_flight_per_peer must be positive")
        for name in ("standby_push_ms", "push_gather_ms", "release_behind_bytes"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must not be negative")
        if not 0 <= self.min_vote_interval_ms < self.max_vote_interval_ms:
            raise ConfigError("need 0 <= min_vote_interval_ms < max_vote_interval_ms")
        if not 0 <= self.min_take_leadership_vote_interval_ms < self.max_take_leadership_vote_interval_ms:
            raise ConfigError("need 0 <= min_take_leadership_vote_interval_ms < max_take_leadership_vote_interval_ms")
        if self.store_type not in ("FILE", "MEMORY"):
            raise ConfigError(f"store_type must be FILE or MEMORY, not {self.store_type!r}")
        if self.flush_mode not in ("async", "sync"):
            raise ConfigError(f"flush_mode must be async or sync, not {self.flush_mode!r}")
        for pid in parse_preferred_leader_ids(self.preferred_leader_ids):
            if pid not in self._peer_map:
                raise ConfigError(f"preferred leader {pid!r} is not in peers")

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

    @property
    def data_path(self) -> str:
        """The data segment directory."""
        return self.data_store_path or os.path.join(self.default_path, "data")

    @property
    def index_path(self) -> str:
        """The index segment directory."""
        return os.path.join(self.default_path, "index")
