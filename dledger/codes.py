"""DLedger response codes (same numbers as Java DLedger) and the error that carries them."""

from __future__ import annotations

from enum import IntEnum


class ResponseCode(IntEnum):
    """`DLedgerResponseCode`: every code with DLedger's number."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    NEWER_INSTALL_SNAPSHOT_REQUEST_EXIST = 422
    # ours, for idempotent producers (Kafka's names where they mean the same thing)
    OUT_OF_ORDER_SEQUENCE = 423
    PRODUCER_FENCED = 424
    UNKNOWN_PRODUCER = 425
    TOO_MANY_PRODUCERS = 426
    # ours: the leader's log differs from entries this follower committed
    LOG_DIVERGED = 427
    # ours: the leader's data segments are of another size than this follower's
    SEGMENT_SIZE_MISMATCH = 428
    # ours, client side: a member refused this client's identity, token or role (gRPC
    # UNAUTHENTICATED / PERMISSION_DENIED)
    ACCESS_DENIED = 429
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506
    LOAD_SNAPSHOT_ERROR = 507
    INSTALL_SNAPSHOT_ERROR = 508

    @classmethod
    def of(cls, value: int) -> ResponseCode:
        """The code for `value`; unknown numbers map to UNKNOWN, as in DLedger."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class DLedgerError(Exception):
    """An operation failed with a DLedger response code.

    Attributes:
        code: the ResponseCode.
        message: a one-line explanation.
    """

    def __init__(self, code: ResponseCode | int, message: str = "") -> None:
        self.code = ResponseCode.of(int(code))
        self.message = message or self.code.name
        super().__init__(f"{self.code.name} ({int(self.code)}): {self.message}")


class CorruptStoreError(DLedgerError):
    """A store directory holds damaged data that recovery must not silently drop.

    Attributes:
        path: the file holding the damage.
        offset: the byte offset inside that file.
    """

    def __init__(self, path: str, offset: int, message: str) -> None:
        self.path = path
        self.offset = offset
        super().__init__(ResponseCode.DISK_ERROR, f"{path} at offset {offset}: {message}")


class ReadMode(IntEnum):
    """How a `Query` reads the state machine (the numbers of `QueryRequest.ReadMode`;
    docs/OPERATIONS.md, "Linearizable reads"). Exported as `dledger.ReadMode` and
    `dledger.client.ReadMode`.

    Attributes:
        READ_INDEX: linearizable: the leader confirms its leadership with a heartbeat
            round shared by the reads waiting, then answers once it applied its commit
            index as of the read (a follower asks the leader for that index).
        UNSAFE: any member answers from its state now (may be stale).
        LEASE: linearizable while members' clocks drift apart by less than
            `lease_drift_ms` over an election timeout: the leader answers without a
            round while its lease holds, else as READ_INDEX.
        RAFT_LOG: the request is appended as a log entry and answered with the state
            machine's `on_apply` answer for it (a write: its outcome may be unknown).
    """

    READ_INDEX = 0
    UNSAFE = 1
    LEASE = 2
    RAFT_LOG = 3
