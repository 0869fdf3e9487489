"""How a member opens its log and learns its place in the group: the store its
configuration names, its identity and whether it must rejoin (dledger.store.membership)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, StoreConfig
from dledger.config_bounds import STORE_BOUNDS
from dledger.entry import INDEX_UNIT_SIZE
from dledger.node_status import NodeStatus
from dledger.raft.core import RaftCore
from dledger.raft.elector import LeaderElector
from dledger.raft.log import LogStore, TermStore
from dledger.store.layout import CURRTERM_FILE, holds_store, keep_store_sizes
from dledger.store.membership import (
    REJOIN_FILE,
    NodeIdentity,
    RejoinMarker,
    clear_rejoin,
    derive_group_id,
    load_identity,
    load_rejoin,
    mark_before_repair,
    mark_repaired,
    new_incarnation,
    write_identity,
    write_rejoin,
)
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore

log = logging.getLogger(__name__)

REPAIRED = "repaired: a damaged tail was cut"


def open_node_store(config: DLedgerConfig, *, repair: bool = False) -> LogStore:
    """Open (and recover) the store a node's configuration names: `MEMORY`, or the file
    store in `<store_base_dir>/dledger-<self_id>` with the options `config.store`. The
    node itself implements `flush_mode="sync"` (it syncs outside its lock), so the file
    store is opened async, but as sync mode would have it otherwise: its data written
    through the file (`StoreConfig.write_through`: cheaper msyncs) and its flush pass
    leaving the data to the node's `wait_durable` calls (`appends_wait`: every entry a
    sync member acknowledges, or counts as the leader, is flushed on its way; the index
    goes with the checkpoint).

    `repair=True` lets recovery cut a damaged log back to its last valid entry, also
    below the committed index; when it cut anything the member records that it lost
    data (the `rejoin` marker) and will not vote until it caught up again.
    """
    if config.store_type == "MEMORY":
        return MemoryLogStore()
    cfg = _store_sizes(config)
    as_sync = replace(cfg, flush_mode="async", data_writes="pwrite" if cfg.write_through else "mmap")
    log_lost = _log_lost(Path(config.default_path))
    precaution = mark_before_repair(config.default_path, REPAIRED) if repair else None
    store = MmapLogStore(config.default_path, as_sync, repair=repair)
    store.set_retention_floor(0)  # nothing expires before the node knows what its members and machine need
    if precaution is not None and not store.recovery.stop_file:
        clear_rejoin(store.node_dir)  # nothing was cut: the marker was only a precaution
    store.appends_wait = cfg.flush_mode == "sync"
    if log_lost:
        write_rejoin(store.node_dir, RejoinMarker(-1, "its log is gone (no data, index or checkpoint): it catches up"))
        log.warning(
            "%s: the store has this member's identity but no log (its data, index and checkpoint are gone): "
            "it holds its vote until a leader brought it back (if every member lost its log, remove their "
            "identity files to found the group anew)",
            config.self_id,
        )
    if _term_lost(store, config):
        write_rejoin(store.node_dir, RejoinMarker(-1, "its term and vote are gone (no currterm): it catches up"))
        log.warning(
            "%s: the store holds entries up to term %d but no currterm (nor currterm.bak): the member's term and "
            "vote are gone, and it could vote twice in one term; it holds its vote until a leader brought it back",
            config.self_id,
            store.end_term,
        )
    marker = mark_repaired(store, REPAIRED) if repair else None
    if marker is not None:
        log.warning(
            "%s: cut the damaged log after entry %d (committed before: %d); the member holds its vote "
            "until a leader brought it back",
            config.self_id,
            store.end_index,
            marker.catch_up_index,
        )
    return store


def _store_sizes(config: DLedgerConfig) -> StoreConfig:
    """`config.store` with the segment sizes the member's store was made with: those its
    identity recorded, else read off its files (`keep_store_sizes`: a lone data segment
    shorter than configured may be a cut file, so the configured size stands). Helper K:
    one restart with a bigger `--segment-size` extended a lone data segment for good, and
    the member then refused every leader's pushes (SEGMENT_SIZE_MISMATCH)."""
    identity = load_identity(config.default_path)
    data, index = (identity.data_file_size, identity.index_file_size) if identity is not None else (0, 0)
    (low, high), (index_low, index_high) = STORE_BOUNDS["data_file_size"], STORE_BOUNDS["index_file_size"]
    if not (low <= data <= high and index_low <= index <= index_high and index % INDEX_UNIT_SIZE == 0):
        return keep_store_sizes(config.default_path, config.store, trust_lone_data=False)
    if (data, index) != (config.store.data_file_size, config.store.index_file_size):
        log.info(
            "%s keeps the segment sizes it was made with: %d data, %d index bytes", config.default_path, data, index
        )
    return replace(config.store, data_file_size=data, index_file_size=index)


def _with_sizes(identity: NodeIdentity, store: LogStore) -> NodeIdentity:
    """`identity` recording the segment sizes of `store` (a file store's)."""
    if not isinstance(store, MmapLogStore):
        return identity
    return replace(identity, data_file_size=store.config.data_file_size, index_file_size=store.config.index_file_size)


def _term_lost(store: MmapLogStore, config: DLedgerConfig) -> bool:
    """Whether a member of a group of several lost its `currterm` (and `.bak`) but not its
    log: it holds an entry of a term above 0, and a member persists each term it takes
    before it uses it, so it had one. Its vote of that term is gone with it."""
    node_dir = store.node_dir
    missing = not any((node_dir / name).exists() for name in (CURRTERM_FILE, CURRTERM_FILE + ".bak"))
    return len(config.peer_map) > 1 and missing and store.end_term >= 1 and load_rejoin(node_dir) is None


def _log_lost(node_dir: Path) -> bool:
    """Whether the store in `node_dir` lost its log but kept the member's identity: an
    identity is written once a member started, and a store writes its checkpoint when
    it is made, so no data, index or checkpoint beside an identity means they were lost
    (a wiped data directory, a restore without them): the member may have acknowledged
    entries it no longer holds, and must catch up before its vote counts again."""
    return load_identity(node_dir) is not None and load_rejoin(node_dir) is None and not holds_store(node_dir)


@dataclass(slots=True)
class Membership:
    """What a member knows of its place in the group when it starts.

    Attributes:
        identity: its group id and incarnation.
        rejoin: set when it lost data and must catch up before it votes again.
    """

    identity: NodeIdentity
    rejoin: RejoinMarker | None

    def bind(self, elector: LeaderElector, node_dir: Path | None) -> None:
        """Persist what the elector learns: the end of a rejoin (the marker goes) and the
        group id a joining member adopts."""
        if node_dir is None:
            return

        def rejoined() -> None:
            clear_rejoin(node_dir)
            self.rejoin = None

        def adopt(group_id: str) -> None:
            self.identity = replace(self.identity, group_id=group_id)
            write_identity(node_dir, self.identity)

        def saw_leader() -> None:  # durable before it answers that leader (see vote_hold)
            self.identity = replace(self.identity, leader_seen=True)
            write_identity(node_dir, self.identity)

        def exists() -> None:  # a founding member learned that its group exists: it rejoins
            self.rejoin = RejoinMarker(-1, "started with an empty store as a founding member of an existing group")
            write_rejoin(node_dir, self.rejoin)

        elector.on_rejoined = rejoined
        elector.on_group_id = adopt
        elector.on_group_exists = exists
        elector.member_state.on_leader_seen = saw_leader


def prepare_membership(config: DLedgerConfig, store: LogStore) -> Membership:
    """Read (or create) the member's identity and rejoin marker, by
    `config.initial_cluster_state`:

    - a store with an identity is that member, whatever the state says;
    - no identity and `new`: the member founds the group, with the group id every
      founding member derives alike; with an empty store in a group of several it may
      also be a member that lost its whole directory, so it asks its peers first (the
      `rejoin` marker, written first, marked `founding`: see dledger.raft.vote_hold);
      a store written before identities existed founds at once;
    - no identity and `existing` with an empty store: the disk was lost (or the member
      is new to a running group): a new incarnation that adopts its first leader's group
      id and holds its vote until it caught up (the `rejoin` marker, written first).

    Raises:
        DLedgerError: ILLEGAL_MEMBER_STATE for a store of another member or group (its
            log is another group's: no leader of this one could bring it up to date).
    """
    node_dir = store.node_dir
    derived = derive_group_id(config.group, config.peer_map)
    if node_dir is None:  # a memory store: nothing survives a restart
        return Membership(NodeIdentity(derived, config.self_id, new_incarnation(), config.group), None)
    identity = load_identity(node_dir)
    rejoin = load_rejoin(node_dir)
    if identity is not None:
        _check_owner(identity, config, node_dir, derived)
        if not identity.data_file_size:  # written before the sizes were recorded: they are now
            identity = _with_sizes(identity, store)
            write_identity(node_dir, identity)
        if rejoin is not None:
            _log_hold(config.self_id, rejoin, node_dir)
        return Membership(identity, rejoin)
    empty = store.end_index < 0 and store.begin_index < 0
    if empty and config.initial_cluster_state == "existing":
        rejoin = RejoinMarker(-1, "started with an empty store in an existing group")
        write_rejoin(node_dir, rejoin)
        identity = NodeIdentity("", config.self_id, new_incarnation(), config.group)
        log.warning(
            "%s: no store, and group %s exists: joins as a new incarnation, without a vote until a leader "
            "brought it up to date (if the whole group is new, start it with --initial-cluster-state new)",
            config.self_id,
            config.group,
        )
    else:
        identity = NodeIdentity(derived, config.self_id, new_incarnation(), config.group)
        if empty and len(config.peer_map) > 1:
            rejoin = RejoinMarker(-1, "a founding member: asks its peers whether the group exists", founding=True)
            write_rejoin(node_dir, rejoin)
            _log_hold(config.self_id, rejoin, node_dir)
    identity = _with_sizes(identity, store)
    write_identity(node_dir, identity)
    return Membership(identity, rejoin)


def member_core(
    config: DLedgerConfig,
    store: LogStore,
    term_store: TermStore,
    rng: random.Random,
    unclean_restart: Callable[[], bool],
) -> tuple[RaftCore, Membership]:
    """A member's Raft core on its store: its membership read first (a store of another
    member or group is refused before anything is written), then `unclean_restart()`
    asked (a shell arms its abort marker there: an unclean end of an async run makes a member
    hold its vote), and what the elector learns persisted (`Membership.bind`).

    Raises:
        DLedgerError: see `prepare_membership`; or the term store cannot be read.
    """
    membership = prepare_membership(config, store)
    unclean = unclean_restart()
    rejoin = membership.rejoin
    core = RaftCore(
        config,
        store,
        term_store,
        rng,
        unclean_restart=unclean,
        rejoin_index=rejoin.catch_up_index if rejoin is not None else None,
        founding=rejoin is not None and rejoin.founding,
        group_id=membership.identity.group_id,
        incarnation=membership.identity.incarnation,
    )
    core.member_state.leader_seen = membership.identity.leader_seen
    membership.bind(core.elector, store.node_dir)
    hold = core.elector.vote_hold
    if hold.active and hold.kind == "unclean":
        log.warning(
            "%s: its last run did not end cleanly and flushed asynchronously (or its abort marker does not say how: "
            "an older version's), so it may have lost entries it acknowledged: it holds its vote until it caught up "
            "with a leader, or every member told it its log end, for at most %d ms",
            config.self_id,
            hold.max_ms,
        )
    return core, membership


def _log_hold(self_id: str, marker: RejoinMarker, node_dir: Path) -> None:
    """Say why a member starts holding its vote (its `rejoin` marker)."""
    if marker.founding:
        log.info(
            "%s: an empty store told to found its group: asks the other members whether the group exists "
            "before it votes (it may have lost its directory)",
            self_id,
        )
        return
    log.warning(
        "%s: rejoining (%s): holds its vote until a leader brought it up to date; if it never held data (its "
        "first start) and no leader can come back, stop it, delete %s and start it again",
        self_id,
        marker.reason,
        node_dir / REJOIN_FILE,
    )


def _check_owner(identity: NodeIdentity, config: DLedgerConfig, node_dir: Path, derived: str) -> None:
    """Refuse a store of another member or group, or of this group founded with other
    members (`derived`: the group id the peers given make)."""
    if identity.member_id != config.self_id:
        raise DLedgerError(
            ResponseCode.ILLEGAL_MEMBER_STATE,
            f"{node_dir} is the store of member {identity.member_id!r}, not {config.self_id!r}",
        )
    if identity.group and identity.group != config.group:
        raise DLedgerError(
            ResponseCode.ILLEGAL_MEMBER_STATE,
            f"{node_dir} is a store of group {identity.group!r}, not {config.group!r}: move it away and start "
            "the member with an empty directory and --initial-cluster-state existing",
        )
    if identity.group_id and identity.group_id != derived:  # "": a joining member that has not heard a leader
        # helper K: a peers list cut down to the member itself made it a group of one that
        # acknowledged writes the group never got (they were lost when the list came back)
        raise DLedgerError(
            ResponseCode.ILLEGAL_MEMBER_STATE,
            f"{node_dir} is a store of group {config.group!r} founded with other members than the peers given "
            f"({', '.join(sorted(config.peer_map))}; group id {identity.group_id}, not {derived}): with another "
            "member list this member could elect a leader without a majority of its group and acknowledge writes "
            "the group never gets. Start it with the peers list the group was founded with (the members' ids; "
            "their addresses may change)",
        )


def collect_status(core: RaftCore, store: LogStore, peers: dict[str, str], applied: int, snapshot: int) -> NodeStatus:
    """The NodeStatus of a member from its core and store (the caller holds the node
    lock, so that the fields agree with each other)."""
    member = core.member_state
    leading = member.is_leader
    marks = core.quorum.water_marks.get(member.current_term, {}) if leading else {}
    return NodeStatus(
        group=member.group,
        self_id=member.self_id,
        role=member.role.name,
        term=member.current_term,
        leader_id=member.leader_id,
        peers=peers,
        begin_index=store.begin_index,
        end_index=store.end_index,
        end_term=store.end_term,
        committed_index=member.committed_index,
        applied_index=applied,
        peer_match={peer: marks.get(peer, -1) for peer in member.peer_ids} if leading else {},
        vote_hold=core.elector.vote_hold.state,
        snapshot_index=snapshot,
        store_health=store.health,
        machine_health=member.machine_failure,
    )
